// The checks of the options and arguments the engine's entry points take (load, generate, score,
// the trainer), and the engine's limits, in one place: a bad value is an InvalidArgumentError
// naming it, before any native work.
import { cpus } from 'node:os'
import { InvalidArgumentError } from './errors.js'
import type { ModelConfig } from './types.js'

/** The most CPU threads a model's kernels may use (native/cpu/threadpool.h's kMaxThreads). */
export const MAX_THREADS = 256
/** The largest LoRA rank and score-head label count the engine takes (native/model/engine.h). */
export const MAX_LORA_RANK = 16384
export const MAX_SCORE_LABELS = 65536

export type Device = 'auto' | 'cpu' | 'cuda'


/**
 * The device a load without `device` uses: AUTODIDACT_DEVICE (cpu | cuda | auto) when set — how
 * `autodidact evolve --device cuda` reaches every model a method loads — else 'auto'.
 */
export function defaultDevice(): Device {
  const env = process.env.AUTODIDACT_DEVICE
  if (env === undefined || env === '') return 'auto'
  if (env !== 'auto' && env !== 'cpu' && env !== 'cuda')
    throw new InvalidArgumentError('AUTODIDACT_DEVICE', `AUTODIDACT_DEVICE must be 'auto', 'cpu' or 'cuda', got ${env}`)
  return env
}

/**
 * How a CPU model keeps its Linear weights, LM head and embedding in memory: 'f32' (default), 'bf16'
 * or 'f16' (widened to f32 in registers inside the GEMM: half the bytes a decode step reads), 'int8'
 * (Q8_0-style: blocks of 32 weights, one f16 scale each, |w − q·d| ≤ d/2), or 'checkpoint' (the
 * safetensors file's own dtype). Norms, biases and a score head stay f32. A model kept below f32 is
 * frozen, for inference (generate, score, logit statistics, a reference, judge or ensemble member):
 * training, LoRA and tensor export answer an InvalidArgumentError asking for 'f32'.
 */
export type WeightStorage = 'f32' | 'bf16' | 'f16' | 'int8' | 'checkpoint'
export const WEIGHT_STORAGES: readonly WeightStorage[] = ['f32', 'bf16', 'f16', 'int8', 'checkpoint']

/**
 * The weight storages a run's frozen models may take (a run config's `frozenWeights`): f32, bf16
 * (any checkpoint's values fit bf16's range; f16 could overflow) and int8.
 */
export type FrozenWeights = Extract<WeightStorage, 'f32' | 'bf16' | 'int8'>
export const FROZEN_WEIGHTS: readonly FrozenWeights[] = ['f32', 'bf16', 'int8']

export interface LoadOptions {
  /** 'cpu' (and 'auto', for now) run on the CPU engine; 'cuda' on the CUDA plugin, or a DeviceUnavailableError says why not. Default: defaultDevice(). */
  device?: Device
  /** CUDA device ordinal (default 0). */
  deviceIndex?: number
  /** CPU threads for the model's kernels; default: all cores. */
  threads?: number
  /** The CPU backend's in-memory weight type (see WeightStorage); default 'f32'. */
  weights?: WeightStorage
}

/** A load's device, threads and device index, checked. */
export function resolveLoad(options: LoadOptions): { device: Device; threads: number; deviceIndex: number; weights: WeightStorage } {
  const device = options.device ?? defaultDevice()
  if (device !== 'auto' && device !== 'cpu' && device !== 'cuda')
    throw new InvalidArgumentError('device', `device must be 'auto', 'cpu' or 'cuda', got ${String(device)}`)
  const threads = positiveInt('threads', options.threads, Math.min(cpus().length, MAX_THREADS), MAX_THREADS)
  const deviceIndex = device === 'cuda' ? nonNegativeInt('deviceIndex', options.deviceIndex, 0) : 0
  const weights = options.weights ?? 'f32'
  if (!WEIGHT_STORAGES.includes(weights))
    throw new InvalidArgumentError('weights', `weights must be one of ${WEIGHT_STORAGES.join(', ')}, got ${String(weights)}`)
  if (weights !== 'f32' && device === 'cuda')
    throw new InvalidArgumentError('weights', `weights '${weights}' are kept in memory by the CPU backend only; the CUDA backend keeps f32`)
  return { device, threads, deviceIndex, weights }
}

export interface SamplingOptions {
  /** 0 = greedy. Default 1. */
  temperature?: number
  /** 0 = off. */
  topK?: number
  /** 1 = off. */
  topP?: number
  /** 0 = off. */
  minP?: number
  repetitionPenalty?: number
  presencePenalty?: number
  frequencyPenalty?: number
  /** Seed of the counter-based RNG: a sample depends on (seed, sequence id, position) only. Default 0. */
  seed?: number
}

/**
 * One prompt's own seed, sequence ids and abort signal inside a larger generate() call. Since a
 * sample depends only on (seed, sequence id, position), a prompt given its own seed and
 * `sequenceOffset: j·n` samples exactly what it would as prompt j of a call of its own — how a
 * server merges seeded requests into one batch.
 */
export interface PromptControl {
  /** Default: the call's `seed`. */
  seed?: number
  /** First sequence id of this prompt's samples; default: the call's sequenceOffset + prompt index · n. */
  sequenceOffset?: number
  /** Ends this prompt's samples (finishReason 'abort'); the other prompts decode on. */
  signal?: AbortSignal
}

export function positiveInt(name: string, v: number | undefined, fallback: number, max = Number.MAX_SAFE_INTEGER): number {
  if (v === undefined) return fallback
  if (!Number.isInteger(v) || v < 1 || v > max) throw new InvalidArgumentError(name, `${name} must be an integer in [1, ${max}], got ${v}`)
  return v
}

export function nonNegativeInt(name: string, v: number | undefined, fallback: number): number {
  if (v === undefined) return fallback
  if (!Number.isInteger(v) || v < 0 || v > 1024) throw new InvalidArgumentError(name, `${name} must be an integer in [0, 1024], got ${v}`)
  return v
}

export function finiteIn(name: string, v: number | undefined, fallback: number, lo: number, hi: number): number {
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi)
    throw new InvalidArgumentError(name, `${name} must be a number in [${lo}, ${hi}], got ${v}`)
  return v
}

export interface ResolvedSampling {
  temperature: number
  topK: number
  topP: number
  minP: number
  repetitionPenalty: number
  presencePenalty: number
  frequencyPenalty: number
  seed: number
}

/** Each prompt's seed, first sequence id and signal, from `perPrompt` or the call's defaults. */
export function resolvePromptControls(
  perPrompt: readonly PromptControl[] | undefined,
  prompts: number,
  seed: number,
  offset: number,
  n: number,
): { seed: number; sequenceOffset: number; signal: AbortSignal | undefined }[] {
  if (perPrompt !== undefined && (!Array.isArray(perPrompt) || perPrompt.length !== prompts))
    throw new InvalidArgumentError('perPrompt', `perPrompt must have one entry per prompt (${prompts}), got ${Array.isArray(perPrompt) ? perPrompt.length : typeof perPrompt}`)
  return Array.from({ length: prompts }, (_, p) => {
    const c = perPrompt?.[p] ?? {}
    const own = c.seed ?? seed
    if (!Number.isSafeInteger(own) || own < 0) throw new InvalidArgumentError('perPrompt', `perPrompt[${p}].seed must be a non-negative safe integer, got ${own}`)
    if (c.signal !== undefined && !(c.signal instanceof AbortSignal))
      throw new InvalidArgumentError('perPrompt', `perPrompt[${p}].signal must be an AbortSignal`)
    const first = c.sequenceOffset ?? offset + p * n
    if (!Number.isSafeInteger(first) || first < 0)
      throw new InvalidArgumentError('perPrompt', `perPrompt[${p}].sequenceOffset must be a non-negative safe integer, got ${first}`)
    return { seed: own, sequenceOffset: first, signal: c.signal }
  })
}

export function resolveSampling(o: SamplingOptions): ResolvedSampling {
  const seed = o.seed ?? 0
  if (!Number.isSafeInteger(seed) || seed < 0) throw new InvalidArgumentError('seed', `seed must be a non-negative safe integer, got ${seed}`)
  const topK = o.topK ?? 0
  if (!Number.isInteger(topK) || topK < 0) throw new InvalidArgumentError('topK', `topK must be a non-negative integer, got ${topK}`)
  return {
    temperature: finiteIn('temperature', o.temperature, 1, 0, 100),
    topK,
    topP: finiteIn('topP', o.topP, 1, Number.MIN_VALUE, 1),
    minP: finiteIn('minP', o.minP, 0, 0, 1),
    repetitionPenalty: finiteIn('repetitionPenalty', o.repetitionPenalty, 1, Number.MIN_VALUE, 100),
    presencePenalty: finiteIn('presencePenalty', o.presencePenalty, 0, -100, 100),
    frequencyPenalty: finiteIn('frequencyPenalty', o.frequencyPenalty, 0, -100, 100),
    seed,
  }
}

export function statsTopK(stats: { topK?: number } | undefined): number {
  const k = stats?.topK ?? 0
  if (!Number.isInteger(k) || k < 0 || k > 64) throw new InvalidArgumentError('stats.topK', `stats.topK must be an integer in [0, 64], got ${k}`)
  return k
}

/** Token ids, each an integer in [0, vocabSize): the ids a prompt, a completion or a training sequence may hold. */
export function checkTokenIds(ids: readonly number[], vocabSize: number, what: string): number[] {
  if (!Array.isArray(ids)) throw new InvalidArgumentError(what, `${what} must be an array of token ids`)
  for (const id of ids)
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize)
      throw new InvalidArgumentError(what, `${what} holds token id ${id}, outside the vocabulary [0, ${vocabSize})`)
  return [...ids]
}

/** A sequence the model reads at once fits its context (config.json's max_position_embeddings). */
export function checkContext(length: number, config: ModelConfig, what: string): void {
  if (length > config.maxPositionEmbeddings)
    throw new InvalidArgumentError(what, `${what} is ${length} tokens long, beyond the model's context of ${config.maxPositionEmbeddings} positions`)
}

/** One value per completion token (or, where `scalarOk`, one number for them all). */
export function checkPerToken(v: unknown, tokens: number, what: string, scalarOk = false): void {
  if (v === undefined) return
  if (typeof v === 'number') {
    if (!scalarOk) throw new InvalidArgumentError(what, `${what} must have one value per completion token (${tokens})`)
    return
  }
  const n = (v as ArrayLike<number> | null)?.length
  if (typeof n !== 'number' || n !== tokens)
    throw new InvalidArgumentError(what, `${what} must have one value per completion token (${tokens}), got ${n === undefined ? typeof v : n}`)
}
