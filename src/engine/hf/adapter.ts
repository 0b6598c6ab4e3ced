// adapter_config.json of a PEFT LoRA adapter folder → a checked AdapterConfig, every field a user
// (or a hostile file) can get wrong a typed ConfigError naming the file and field. Only what
// autodidact's LoRA implements is accepted (plain LoRA on named Linear modules, no bias, no DoRA,
// no per-module ranks); anything else is refused rather than silently ignored. The sizes are checked
// here against sane bounds; the native side checks the rank against the model's dimensions.

import { join } from 'node:path'

import { ConfigError, UnsupportedArchitectureError } from '../errors.js'
import { MAX_LORA_RANK } from '../options.js'
import { MAX_JSON_FILE_BYTES, readRegularFile } from './files.js'

export interface AdapterConfig {
  /** LoRA rank r. */
  rank: number
  /** lora_alpha (the update is scaled by alpha / r). */
  alpha: number
  /** Module names the adapters attach to (q_proj, …). */
  targets: string[]
  /** base_model_name_or_path, or null. */
  baseModel: string | null
}

const MAX_TARGETS = 64

type Json = Record<string, unknown>

function fail(file: string, field: string | null, message: string): never {
  throw new ConfigError(file, field, `${file}: ${message}`)
}

function unsupported(file: string, feature: string, message: string): never {
  throw new UnsupportedArchitectureError(feature, `${file}: ${message}`, file)
}

/** Fields PEFT defines that change what the adapter computes: refused unless at their plain-LoRA default. */
const PLAIN_LORA: Record<string, (v: unknown) => boolean> = {
  use_dora: (v) => v === false,
  use_rslora: (v) => v === false,
  bias: (v) => v === 'none',
  fan_in_fan_out: (v) => v === false,
  rank_pattern: (v) => typeof v === 'object' && v !== null && Object.keys(v).length === 0,
  alpha_pattern: (v) => typeof v === 'object' && v !== null && Object.keys(v).length === 0,
  modules_to_save: (v) => Array.isArray(v) && v.length === 0,
  layers_to_transform: () => false,
}

/** Checks a parsed adapter_config.json (`file` is named in errors). */
export function parseAdapterConfig(json: unknown, file: string): AdapterConfig {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) fail(file, null, 'expected a JSON object')
  const cfg = json as Json
  const type = cfg.peft_type
  if (type !== undefined && type !== null && type !== 'LORA') unsupported(file, `peft_type=${String(type)}`, `peft_type ${JSON.stringify(type)} is not supported (LoRA adapters only)`)
  for (const [k, isDefault] of Object.entries(PLAIN_LORA)) {
    const v = cfg[k]
    if (v !== undefined && v !== null && !isDefault(v)) unsupported(file, k, `"${k}": ${JSON.stringify(v)?.slice(0, 80)} is not supported (plain LoRA only)`)
  }
  const r = cfg.r
  if (typeof r !== 'number' || !Number.isSafeInteger(r) || r < 1 || r > MAX_LORA_RANK) fail(file, 'r', `"r" must be an integer in [1, ${MAX_LORA_RANK}], got ${JSON.stringify(r)}`)
  const alpha = cfg.lora_alpha ?? 8 // PEFT's LoraConfig default
  if (typeof alpha !== 'number' || !Number.isFinite(alpha) || alpha <= 0) fail(file, 'lora_alpha', `"lora_alpha" must be a positive number, got ${JSON.stringify(alpha)}`)
  const raw = cfg.target_modules
  const targets = typeof raw === 'string' ? [raw] : raw
  if (!Array.isArray(targets) || targets.length === 0 || targets.length > MAX_TARGETS || !targets.every((t) => typeof t === 'string' && t.length > 0 && t.length <= 256))
    fail(file, 'target_modules', `"target_modules" must be a module name or a list of 1 to ${MAX_TARGETS} of them, got ${JSON.stringify(raw)?.slice(0, 120)}`)
  const base = cfg.base_model_name_or_path
  if (base !== undefined && base !== null && typeof base !== 'string') fail(file, 'base_model_name_or_path', `"base_model_name_or_path" must be a string`)
  return { rank: r, alpha, targets: [...new Set(targets as string[])], baseModel: typeof base === 'string' && base.length > 0 ? base : null }
}

/** Reads and checks `dir/adapter_config.json` (a regular file of bounded size). */
export async function readAdapterConfig(dir: string): Promise<AdapterConfig> {
  const file = join(dir, 'adapter_config.json')
  const bytes = await readRegularFile(file, MAX_JSON_FILE_BYTES, (problem, message, cause) =>
    new ConfigError(file, null, problem === 'not-found' ? `${file}: not found; a LoRA adapter folder needs adapter_config.json` : message, { cause }),
  )
  let json: unknown
  try {
    json = JSON.parse(bytes.toString('utf8'))
  } catch (e) {
    throw new ConfigError(file, null, `${file}: not valid JSON (${(e as Error).message})`, { cause: e })
  }
  return parseAdapterConfig(json, file)
}
