// Shared helpers for the kernel tests: the addon's `kernels` object (through the checked loader)
// and seeded logits rows.
import { nativeAddon, type NativeKernels } from '../../src/native.js'
import { gaussian, mulberry32 } from '../reference/random-weights.js'

export type { LogitStatsOptions, LogitStatsResult, NativeKernels as Kernels, SamplingParamsJs } from '../../src/native.js'

export async function kernels(): Promise<NativeKernels> {
  return (await nativeAddon()).kernels
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
