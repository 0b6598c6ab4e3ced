// Shared helpers for the kernel tests: the addon's `kernels` object (through the checked loader)
// and seeded logits rows.
import { nativeAddon } from '../../src/native.js'
import { gaussian, mulberry32 } from '../reference/random-weights.js'

export interface LogitStatsResult {
  maxLogit: Float32Array
  logsumexp: Float32Array
  entropy: Float32Array
  margin: Float32Array
  chosenLogprob: Float32Array | null
  topkIds: Int32Array
  topkLogits: Float32Array
  k1: Float32Array | null
  k2: Float32Array | null
  k3: Float32Array | null
  klExact: Float32Array | null
}

export interface LogitStatsOptions {
  targets?: Int32Array
  topK?: number
  ref?: Float32Array
  threads?: number
  scalar?: boolean
}

export interface SamplingParamsJs {
  temperature?: number
  topK?: number
  topP?: number
  minP?: number
  repetitionPenalty?: number
  presencePenalty?: number
  frequencyPenalty?: number
  seed?: number | bigint
  stream?: number | bigint
}

export interface Kernels {
  logitStats(logits: Float32Array, rows: number, vocab: number, opts?: LogitStatsOptions): LogitStatsResult
  naiveLogitStats(logits: Float32Array, rows: number, vocab: number, opts?: LogitStatsOptions): LogitStatsResult
  sampleToken(logits: Float32Array, params: SamplingParamsJs, position: number | bigint, history?: Int32Array, generated?: Int32Array): number
  sampleTokens(
    logits: Float32Array,
    params: SamplingParamsJs,
    firstPosition: number | bigint,
    count: number,
    history?: Int32Array,
    generated?: Int32Array,
  ): Int32Array
  philox(counter: ArrayLike<number>, key: ArrayLike<number>): Uint32Array
  uniform01(seed: number | bigint, stream: number | bigint, position: number | bigint): number
  copyBytes(src: ArrayBufferView, dst: ArrayBufferView, threads?: number): void
  expf(x: Float32Array): Float32Array
  maxTopK: number
}

export async function kernels(): Promise<Kernels> {
  return (await nativeAddon()).kernels as unknown as Kernels
}

/** rows × vocab logits, N(0, sigma²), from a fixed seed. */
export function normalLogits(rows: number, vocab: number, seed: number, sigma = 1): Float32Array {
  const g = gaussian(mulberry32(seed))
  const out = new Float32Array(rows * vocab)
  for (let i = 0; i < out.length; i++) out[i] = sigma * g()
  return out
}

/** Row r of a rows × vocab matrix. */
export function row(m: Float32Array, r: number, vocab: number): Float32Array {
  return m.subarray(r * vocab, (r + 1) * vocab)
}
