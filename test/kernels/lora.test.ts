// kernels/lora.h's merge W' = W + (α/r)·B·A (LoRA Eq. 3), the CUDA backend's arithmetic, through
// the addon's kernel binding: against a float64 reference on fresh random inputs of odd shapes
// (every element written: the binding's output starts NaN-poisoned).
// Bound: |native − ref| ≤ 1e-6·(1 + Σ_k |s·B·A| terms) (f32 sums of ≤ 33 products).
import { describe, expect, it } from 'vitest'
import { kernels } from './kernels.js'

const k = await kernels()

function rng(seed: number) {
  let s = seed >>> 0
  return () => {
    s = (Math.imul(s ^ (s >>> 15), 0x2c1b3c6d) + 0x6d2b79f5) >>> 0
    return (s / 2 ** 32) * 2 - 1
  }
}

function merge64(W: Float32Array, A: Float32Array, B: Float32Array, out: number, inF: number, rank: number, scale: number) {
  const r = new Float64Array(out * inF)
  const mag = new Float64Array(out * inF)
  for (let o = 0; o < out; ++o)
    for (let i = 0; i < inF; ++i) {
      let acc = 0
      let m = 0
      for (let j = 0; j < rank; ++j) {
        acc += B[o * rank + j] * A[j * inF + i]
        m += Math.abs(scale * B[o * rank + j] * A[j * inF + i])
      }
      r[o * inF + i] = W[o * inF + i] + scale * acc
      mag[o * inF + i] = Math.abs(W[o * inF + i]) + m
    }
  return { r, mag }
}

describe('kernels/lora.h lora_merged_element', () => {
  for (const [out, inF, rank, seed] of [[1, 1, 1, 1], [7, 13, 3, 2], [33, 5, 16, 3], [4, 64, 33, 4]] as const)
    it(`W + s·B·A, out ${out} × in ${inF}, rank ${rank}`, () => {
      const r = rng(seed)
      const W = Float32Array.from({ length: out * inF }, r)
      const A = Float32Array.from({ length: rank * inF }, r)
      const B = Float32Array.from({ length: out * rank }, r)
      const scale = 2 / rank
      const got = k.loraMerge(W, A, B, out, inF, rank, scale)
      const { r: want, mag } = merge64(W, A, B, out, inF, rank, scale)
      expect(got.length).toBe(out * inF)
      for (let e = 0; e < want.length; ++e) {
        expect(Number.isFinite(got[e]), `[${e}] = ${got[e]}`).toBe(true)
        expect(Math.abs(got[e] - want[e]), `[${e}]: ${got[e]} vs ${want[e]}`).toBeLessThanOrEqual(1e-6 * (1 + mag[e]))
      }
    })

  it('B = 0 leaves W exactly as it was (an adapter that has not trained is a no-op)', () => {
    const r = rng(9)
    const W = Float32Array.from({ length: 6 * 10 }, r)
    const A = Float32Array.from({ length: 4 * 10 }, r)
    expect(Array.from(k.loraMerge(W, A, new Float32Array(6 * 4), 6, 10, 4, 2))).toEqual(Array.from(W))
  })

  it('refuses sizes that do not match', () => {
    expect(() => k.loraMerge(new Float32Array(5), new Float32Array(2), new Float32Array(2), 2, 2, 1, 1)).toThrow()
    expect(() => k.loraMerge(new Float32Array(4), new Float32Array(2), new Float32Array(2), 2, 2, 0, 1)).toThrow()
  })
})
