// Typed, validated run configurations: a schema of defaults, and a merge that rejects unknown
// keys and wrong types with the offending path (`cose.solver.n: expected a number, got "4"`).
import { readFile } from 'node:fs/promises'
import { ConfigError } from '../../engine/errors.js'

type Plain = Record<string, unknown>

function isPlain(v: unknown): v is Plain {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

function describe(v: unknown): string {
  return v === null ? 'null' : Array.isArray(v) ? 'an array' : typeof v === 'string' ? JSON.stringify(v) : typeof v
}

/**
 * Deep-merges `override` into `defaults`, which is also the schema: every key must exist there
 * and every leaf must keep its type (numbers stay numbers, strings strings, arrays arrays).
 * Keys whose default is null accept a value of any type.
 */
export function mergeConfig<T>(defaults: T, override: unknown, file: string, path = ''): T {
  if (override === undefined) return structuredClone(defaults)
  if (!isPlain(defaults)) {
    const want = Array.isArray(defaults) ? 'array' : defaults === null ? null : typeof defaults
    const got = Array.isArray(override) ? 'array' : typeof override
    if (want !== null && want !== got) throw new ConfigError(file, path, `${file}: ${path}: expected ${want === 'array' ? 'an array' : `a ${want}`}, got ${describe(override)}`)
    if (typeof override === 'number' && !Number.isFinite(override)) throw new ConfigError(file, path, `${file}: ${path}: must be finite`)
    return structuredClone(override) as T
  }
  if (!isPlain(override)) throw new ConfigError(file, path || null, `${file}: ${path || '(top level)'}: expected an object, got ${describe(override)}`)
  const out: Plain = {}
  for (const key of Object.keys(override))
    if (!(key in defaults)) throw new ConfigError(file, path ? `${path}.${key}` : key, `${file}: unknown key '${path ? `${path}.${key}` : key}'`)
  for (const [key, value] of Object.entries(defaults as Plain)) out[key] = mergeConfig(value, override[key], file, path ? `${path}.${key}` : key)
  return out as T
}

export async function readConfigFile(file: string): Promise<unknown> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (e) {
    throw new ConfigError(file, null, `${file}: cannot read the config (${(e as Error).message})`)
  }
  try {
    return JSON.parse(text)
  } catch (e) {
    throw new ConfigError(file, null, `${file}: not valid JSON (${(e as Error).message})`)
  }
}

/** Throws ConfigError unless `check` holds. */
export function requireThat(check: boolean, file: string, path: string, message: string): void {
  if (!check) throw new ConfigError(file, path, `${file}: ${path}: ${message}`)
}
