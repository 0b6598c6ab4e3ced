// Several LoRA adapters on one base, chosen per sequence (issue 19). A model's adapters are
// named (PEFT's adapter names; the single-adapter calls attach the one named 'default') and kept
// in attach order: an adapter's index in that order is what the engine's requests carry for each
// sequence (−1: the base alone). This file is the one place names become indices.
import { InvalidArgumentError } from './errors.js'
import { MAX_LORA_RANK } from './options.js'
import { nativeAddon, type NativeModel } from '../native.js'

/** The adapter the single-adapter calls (trainer `lora`, loadAdapter without a name) attach and use. */
export const DEFAULT_ADAPTER = 'default'

/** PEFT target module names LoRA attaches to (the seven linears of a layer). */
export const LORA_TARGETS = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'] as const

/** Most adapters on one model (native/model/engine.h kMaxAdapters). */
export const MAX_ADAPTERS = 64

/** An attached adapter: its rank, alpha and PEFT target modules. */
export interface LoraInfo {
  rank: number
  alpha: number
  targets: string[]
}

export interface AdapterOptions {
  rank: number
  alpha: number
  /** PEFT target module names; default all seven linears. */
  targets?: string[]
  seed?: number
}

/**
 * Which adapter a row applies: a name for every prompt/item, or one name (or null) per
 * prompt/item; null is the base alone. Absent: 'default' when attached, else the base.
 */
export type AdapterChoice = string | null | readonly (string | null)[]

/** What choosing an adapter needs of a model (a Model is one): its adapters' names in attach order (= their engine indices). */
export interface AdapterNames {
  readonly adapters: ReadonlyMap<string, unknown>
}

/** What attaching an adapter needs of a model (a Model is one). */
export interface AdapterModel extends AdapterNames {
  readonly handle: NativeModel
  readonly adapters: Map<string, LoraInfo>
}

/** Whether `name` is usable as an adapter name: a folder and a parameter-name part. */
export function isAdapterName(name: unknown): name is string {
  return typeof name === 'string' && /^[A-Za-z0-9_-]{1,64}$/.test(name)
}

/** `name`, checked as an adapter name (an InvalidArgumentError naming it otherwise). */
export function checkAdapterName(name: unknown, what = 'adapter'): string {
  if (!isAdapterName(name))
    throw new InvalidArgumentError(what, `adapter name ${JSON.stringify(name)} must be 1 to 64 letters, digits, '_' or '-'`)
  return name
}

/** Checks rank, alpha and targets the way the engine will, with typed errors naming the option. */
export function resolveAdapterOptions(o: AdapterOptions, what = 'lora'): LoraInfo & { seed: number } {
  if (!o || typeof o !== 'object') throw new InvalidArgumentError(what, `${what} must be { rank, alpha, targets?, seed? }`)
  if (!Number.isInteger(o.rank) || o.rank < 1 || o.rank > MAX_LORA_RANK)
    throw new InvalidArgumentError(`${what}.rank`, `${what}.rank must be an integer in [1, ${MAX_LORA_RANK}], got ${o.rank}`)
  if (!(o.alpha > 0) || !Number.isFinite(o.alpha)) throw new InvalidArgumentError(`${what}.alpha`, `${what}.alpha must be positive`)
  const targets = o.targets ?? [...LORA_TARGETS]
  if (!Array.isArray(targets) || !targets.length) throw new InvalidArgumentError(`${what}.targets`, `${what}.targets must list at least one module`)
  for (const x of targets) if (!(LORA_TARGETS as readonly string[]).includes(x)) throw new InvalidArgumentError(`${what}.targets`, `unknown LoRA target '${x}'`)
  const seed = o.seed ?? 0
  if (!Number.isSafeInteger(seed) || seed < 0) throw new InvalidArgumentError(`${what}.seed`, `${what}.seed must be a non-negative integer`)
  return { rank: o.rank, alpha: o.alpha, targets: [...targets], seed }
}

/** `name`, checked as the name of one more adapter on `m`: a valid name, not yet attached, room for it (typed errors otherwise). */
export function attachAdapterName(m: AdapterNames, name: string): string {
  checkAdapterName(name)
  if (m.adapters.has(name)) throw new InvalidArgumentError('adapter', `this model already has an adapter named '${name}'`)
  if (m.adapters.size >= MAX_ADAPTERS) throw new InvalidArgumentError('adapter', `a model holds at most ${MAX_ADAPTERS} adapters`)
  return name
}

/** Attaches adapter `name` (A from `seed`, B = 0: a no-op until trained) and records it on the model. */
export async function attachAdapter(m: AdapterModel, name: string, options: AdapterOptions, what = 'lora'): Promise<LoraInfo> {
  attachAdapterName(m, name)
  const { seed, ...info } = resolveAdapterOptions(options, what)
  const index = (await nativeAddon()).train.attachLora(m.handle, { ...info, seed, name })
  if (index !== m.adapters.size) throw new Error(`adapter '${name}' got engine index ${index}, expected ${m.adapters.size}`)  // a bug, never silent
  m.adapters.set(name, info)
  return info
}

/** The engine index of adapter `name` (null: −1, the base alone); an unknown name is an InvalidArgumentError naming it. */
export function adapterIndex(m: AdapterNames, name: string | null, what = 'adapter'): number {
  if (name === null) return -1
  if (typeof name !== 'string') throw new InvalidArgumentError(what, `${what} must be an adapter name or null, got ${JSON.stringify(name)}`)
  const index = [...m.adapters.keys()].indexOf(name)
  if (index < 0) {
    const known = [...m.adapters.keys()].map((n) => `'${n}'`).join(', ') || 'none'
    throw new InvalidArgumentError(what, `unknown adapter '${name}' (attached: ${known})`)
  }
  return index
}

/** The adapter rows use when a call names none: 'default' when attached, else the base alone. */
export function defaultAdapter(m: AdapterNames): string | null {
  return m.adapters.has(DEFAULT_ADAPTER) ? DEFAULT_ADAPTER : null
}

/**
 * One engine adapter index per prompt/item (`count` of them) for a call's `adapter` option;
 * undefined when the model has no adapters and the call names none (the engine's default).
 */
export function adapterIndices(m: AdapterNames, choice: AdapterChoice | undefined, count: number, what = 'adapter'): Int32Array | undefined {
  if (choice === undefined && !m.adapters.size) return undefined
  if (Array.isArray(choice)) {
    if (choice.length !== count) throw new InvalidArgumentError(what, `${what} has ${choice.length} entries, expected one per prompt (${count})`)
    return Int32Array.from(choice, (c, i) => adapterIndex(m, c, `${what}[${i}]`))
  }
  const one = adapterIndex(m, choice === undefined ? defaultAdapter(m) : (choice as string | null), what)
  return new Int32Array(count).fill(one)
}
