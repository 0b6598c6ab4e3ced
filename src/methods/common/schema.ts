// Run configurations as schemas (zod): a method's config is its preset deep-merged with an override
// (a --config file, flags), then parsed. Unknown keys, wrong types and out-of-range values are
// ConfigErrors naming the file and the dotted path of the bad field (`run.json: solver.n: expected a
// number, got "4"`). The shared sub-schemas — optimizer, policy loss, sampling, evaluation — live
// here once; enum choices are read from the registries (advantage estimators, confidence signals,
// replay priorities, loss aggregations), so what is registered is what a config accepts. Every
// schema also prints as JSON Schema (`evolve --config-schema`), the reference of `--config`.
import { readFile } from 'node:fs/promises'
import { z } from 'zod'
import { ConfigError } from '../../engine/errors.js'
import type { Registry } from '../../util/registry.js'
import { FROZEN_WEIGHTS } from '../../engine/options.js'

export { z }

type Plain = Record<string, unknown>

function isPlain(v: unknown): v is Plain {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

function describeValue(v: unknown): string {
  return v === null ? 'null' : v === undefined ? 'nothing' : Array.isArray(v) ? 'an array' : typeof v === 'string' ? JSON.stringify(v) : typeof v === 'object' ? 'an object' : typeof v === 'number' ? String(v) : typeof v
}

// ---------------------------------------------------------------------------------------------
// Field schemas, each with the message a user sees

export const intAtLeast = (min: number, why = '') => {
  const m = `must be an integer ≥ ${min}${why}`
  return z.number().int({ error: m }).min(min, { error: m })
}
export const positive = () => z.number().gt(0, { error: 'must be positive' })
export const nonNegative = () => z.number().min(0, { error: 'must be ≥ 0' })
/** [0, 1]. */
export const unitInterval = () => z.number().min(0, { error: 'must be in [0, 1]' }).max(1, { error: 'must be in [0, 1]' })
/** [0, 1). */
export const ratio = () => z.number().min(0, { error: 'must be in [0, 1)' }).lt(1, { error: 'must be in [0, 1)' })
/** (0, 1]. */
export const topP = () => z.number().gt(0, { error: 'must be in (0, 1]' }).max(1, { error: 'must be in (0, 1]' })
export const temperature = () => nonNegative()
export const maxTokens = () => intAtLeast(1)
/** A list of difficulty levels ≥ 1, at least one (the world's levels; a world without levels ignores them). */
export const levels = () => z.array(intAtLeast(1)).min(1, { error: 'must list difficulty levels ≥ 1' })
/** A fixed list of choices, printed in messages as `a | b | c`. */
export const oneOf = <T extends string>(choices: readonly T[]) => z.enum(choices as readonly [T, ...T[]], { error: `must be one of ${choices.join(' | ')}` })
/** The names registered in `registry` (read when the schema is built). */
export const registered = (registry: Registry<unknown>) => {
  const names = registry.names()
  return z.enum(names as [string, ...string[]], { error: `must be one of ${names.join(' | ')} (the registered ${registry.kind}s)` })
}

// ---------------------------------------------------------------------------------------------
// Shared sub-schemas (shapes, to be spread into a method's block under its own key)

/** The optimizer of every method: peak learning rate, gradient clip, micro-batch. */
export const optimizerShape = {
  lr: positive(),
  clipGradNorm: nonNegative().describe('global gradient-norm clip; 0 = off'),
  microBatchSize: intAtLeast(1).describe('sequences per forward/backward; gradients accumulate over a step'),
}
/** A cosine schedule to minLrRatio·lr, warmup given in steps. */
export const warmupStepsShape = { warmupSteps: intAtLeast(0), minLrRatio: unitInterval() }
/** A cosine schedule to minLrRatio·lr, warmup given as a fraction of the updates. */
export const warmupRatioShape = { warmupRatio: ratio(), minLrRatio: unitInterval() }
/** LoRA adapters: rank 0 = full fine-tuning (with a frozen reference copy for KL). */
export const loraShape = {
  loraRank: intAtLeast(0).describe('LoRA rank; 0 = full fine-tuning with a frozen reference copy for KL'),
  loraAlpha: nonNegative().describe('LoRA alpha (0 = 2 × rank where a method says so)'),
}
/** The PPO clipped surrogate: symmetric clip, KL to the reference, entropy bonus. */
export const policyLossShape = { clip: ratio(), klCoef: nonNegative(), entropyCoef: nonNegative() }
/** Sampling of one role. */
export const samplingShape = { temperature: temperature(), maxTokens: maxTokens() }
/** A benchmark of the world by name: all of it up to the block's `size`, or its first `size` problems. */
export const benchmarkRef = () =>
  z.union([z.string().min(1, { error: 'must be a benchmark name' }), z.strictObject({ name: z.string().min(1, { error: 'must be a benchmark name' }), size: intAtLeast(1).optional() })], {
    error: 'must be a benchmark name or { name, size }',
  })
/** Which of the world's benchmarks an evaluation reads, and how much of each. */
export const benchmarksShape = {
  size: intAtLeast(1).describe('problems evaluated per benchmark (its first N)'),
  benchmarks: z
    .array(benchmarkRef())
    .refine((bs) => new Set(bs.map((b) => (typeof b === 'string' ? b : b.name))).size === bs.length, { error: 'names must be distinct' })
    .describe("the world's benchmarks by name; [] = every benchmark of the world"),
}
/** Greedy held-out accuracy every N steps on the world's benchmarks. */
export const greedyEvalSchema = () => z.strictObject({ every: intAtLeast(1), ...benchmarksShape })
/** How the run's frozen models keep their weights in memory (FROZEN_WEIGHTS, src/methods/common/training.ts). */
export const frozenWeights = () =>
  oneOf(FROZEN_WEIGHTS)
    .optional()
    .describe(
      "in-memory weights of the run's frozen models — the KL reference copy, R-Zero's second ensemble model, a frozen J-Zero Judge folder, the offline methods' pool scorer: " +
        "f32 (default), bf16 (half the bytes, widened in registers) or int8 (Q8_0-style blocks of 32 with an f16 scale); CPU only (refused on --device cuda)",
    )
/** The run fields every method carries (the driver's conventions). */
export const runShape = { seed: z.number().int({ error: 'must be an integer' }), steps: intAtLeast(1), checkpointEvery: intAtLeast(1), frozenWeights: frozenWeights() }

// ---------------------------------------------------------------------------------------------
// Resolving a config

/** Deep merge: plain objects key by key (unknown keys kept, for the schema to refuse), anything else replaced. */
function merge(base: unknown, override: unknown): unknown {
  if (override === undefined) return structuredClone(base)
  if (!isPlain(base) || !isPlain(override)) return structuredClone(override)
  const out: Plain = {}
  for (const key of new Set([...Object.keys(base), ...Object.keys(override)])) out[key] = merge(base[key], override[key])
  return out
}

function pathOf(path: readonly PropertyKey[]): string {
  return path.map((k, i) => (typeof k === 'number' ? `[${k}]` : i ? `.${String(k)}` : String(k))).join('')
}

function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let v = root
  for (const k of path) v = v !== null && typeof v === 'object' ? (v as Record<PropertyKey, unknown>)[k] : undefined
  return v
}

const ARTICLE: Record<string, string> = { array: 'an array', object: 'an object', int: 'an integer' }

/** The ConfigError of the first zod issue (unknown keys first, as a reader fixes them first). */
function configErrorOf(issues: readonly z.core.$ZodIssue[], input: unknown, file: string): ConfigError {
  const issue = [...issues].sort((a, b) => Number(b.code === 'unrecognized_keys') - Number(a.code === 'unrecognized_keys'))[0]
  if (issue.code === 'unrecognized_keys') {
    const field = pathOf([...issue.path, issue.keys[0]])
    return new ConfigError(file, field, `${file}: unknown key '${field}'`)
  }
  const field = issue.path.length ? pathOf(issue.path) : null
  const where = field ?? '(top level)'
  if (issue.code === 'invalid_type' && issue.expected !== 'int') {
    const got = valueAt(input, issue.path)
    const want = ARTICLE[issue.expected] ?? `a ${issue.expected}`
    return new ConfigError(file, field, `${file}: ${where}: expected ${want}, got ${describeValue(got)}`)
  }
  return new ConfigError(file, field, `${file}: ${where}: ${issue.message}`)
}

/**
 * `override` deep-merged onto `base`, parsed by `schema`. Throws a ConfigError naming `file` and
 * the offending path; the result is a fresh object (the preset is never shared).
 */
export function resolveWith<S extends z.ZodType>(schema: S, base: z.infer<S>, override: unknown, file: string): z.infer<S> {
  if (override !== undefined && !isPlain(override)) throw new ConfigError(file, null, `${file}: (top level): expected an object, got ${describeValue(override)}`)
  const merged = merge(base, override)
  const r = schema.safeParse(merged)
  if (!r.success) throw configErrorOf(r.error.issues, merged, file)
  return r.data
}

/** A ConfigError unless `check` holds (for rules that span several fields or depend on the preset). */
export function requireThat(check: boolean, file: string, path: string, message: string): void {
  if (!check) throw new ConfigError(file, path, `${file}: ${path}: ${message}`)
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

/**
 * The JSON Schema of a config file for `schema`: every key optional (a file overrides the preset),
 * each with the preset's value as its `default`.
 */
export function configJsonSchema(schema: z.ZodType, preset: unknown): Record<string, unknown> {
  const json = z.toJSONSchema(schema, { unrepresentable: 'any' }) as Record<string, unknown>
  const annotate = (node: Record<string, unknown>, value: unknown): void => {
    if (value !== undefined && node.type !== 'object') node.default = value
    delete node.required
    const props = node.properties as Record<string, Record<string, unknown>> | undefined
    if (props) for (const [k, child] of Object.entries(props)) annotate(child, isPlain(value) ? value[k] : undefined)
  }
  annotate(json, preset)
  return json
}
