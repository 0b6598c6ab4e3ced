// The split-row GPU sampler's math (native/kernels/sampling_split.h), through its serial host run
// (kernels.sampleTokensSplit): the row cut into C chunks, fixed-point masses, radix-selected top-p
// boundary, ties toward lower ids, min-p, and the chunked inverse CDF. Checked draw by draw against
// the float64 inverse CDF of the exact distribution (test/reference/sampling64.ts) at the same
// Philox uniform, for every way of cutting the row, and against the CPU sampler.
import { beforeAll, describe, expect, it } from 'vitest'
import { samplingDistribution64, type SamplingParams64 } from '../reference/sampling64.js'
import { gaussian, mulberry32 } from '../reference/random-weights.js'
import { kernels, normalLogits, type Kernels, type SamplingParamsJs } from './kernels.js'

let k: Kernels
beforeAll(async () => {
  k = await kernels()
})

const SEED = 11
const STREAM = 3

/** The float64 inverse CDF: draw(u) is the first id (ascending) whose cumulative probability exceeds u, with u's distance to the nearest boundary. */
function inverseCdf64(probs: Float64Array): (u: number) => { token: number; margin: number } {
  const cum = new Float64Array(probs.length + 1)
  for (let i = 0; i < probs.length; i++) cum[i + 1] = cum[i] + probs[i]
  return (u) => {
    let lo = 0, hi = probs.length - 1 // the first i with cum[i + 1] > u
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (cum[mid + 1] > u) hi = mid
      else lo = mid + 1
    }
    return { token: lo, margin: Math.min(u - cum[lo], cum[lo + 1] - u) }
  }
}

interface Case {
  name: string
  logits: Float32Array
  params: SamplingParamsJs & SamplingParams64
  draws: number
}

// V logits, each value repeated `copies` times at scattered ids: ties at every boundary.
function tiedLogits(vocab: number, copies: number, seed: number): Float32Array {
  const g = gaussian(mulberry32(seed))
  const distinct = Array.from({ length: Math.ceil(vocab / copies) }, () => Math.fround(1.5 * g()))
  const out = new Float32Array(vocab)
  for (let i = 0; i < vocab; i++) out[(i * 7919) % vocab] = distinct[Math.floor(i / copies)]
  return out
}

const peaked = normalLogits(1, 3000, 24, 0.3)
peaked[1234] = 10
const tail = normalLogits(1, 151936, 27, 0.3)
for (let i = 0; i < 40; i++) tail[(i * 3779) % 151936] = 7 + i / 20

const cases: Case[] = [
  { name: 'top-p 0.95 alone at T = 1 on the real vocabulary (151,936, N(0, 4²))', logits: normalLogits(1, 151936, 26, 4), params: { topP: 0.95 }, draws: 800 },
  { name: 'T = 1 alone (no top-p): the plain inverse CDF over 151,936', logits: normalLogits(1, 151936, 31, 2), params: {}, draws: 800 },
  { name: 'top-p 0.7 at T = 0.7 through a 150k-token tail', logits: tail, params: { topP: 0.7, temperature: 0.7 }, draws: 800 },
  { name: 'top-p 0.99 with min-p on a dense nucleus', logits: tail, params: { topP: 0.99, minP: Math.exp(-8.95) }, draws: 800 },
  { name: 'top-p 0.9 with one token holding ~80%', logits: peaked, params: { topP: 0.9 }, draws: 3000 },
  { name: 'top-p 0.5 over tied values (ties at the boundary)', logits: tiedLogits(5000, 7, 41), params: { topP: 0.5 }, draws: 3000 },
  { name: 'top-p 0 keeps only the most probable token', logits: normalLogits(1, 4000, 42, 1), params: { topP: 0 }, draws: 200 },
]

describe('split-row sampling math (host run of native/kernels/sampling_split.h)', () => {
  for (const c of cases)
    it(`${c.name}: every draw the float64 inverse CDF's, for any cut of the row`, () => {
      const params = { seed: SEED, stream: STREAM, ...c.params }
      const draw64 = inverseCdf64(samplingDistribution64(c.logits, c.params))
      const byChunks = [1, 2, 3, 16, 61].map((chunks) => k.sampleTokensSplit(c.logits, params, 0, c.draws, chunks))
      // the cut does not change a single draw
      for (const tokens of byChunks.slice(1)) expect(Array.from(tokens)).toEqual(Array.from(byChunks[0]))
      let checked = 0
      for (let i = 0; i < c.draws; i++) {
        const ref = draw64(k.uniform01(SEED, STREAM, i))
        if (ref.margin < 1e-9) continue // u on a boundary: f32 masses may fall either side
        checked++
        if (byChunks[0][i] !== ref.token) expect({ draw: i, token: byChunks[0][i] }).toEqual({ draw: i, token: ref.token })
      }
      expect(checked).toBeGreaterThan(0.99 * c.draws)
      // The CPU sampler (double sums) draws the same tokens.
      const cpu = k.sampleTokens(c.logits, params, 0, c.draws)
      expect(Array.from(byChunks[0])).toEqual(Array.from(cpu))
    })

  it('NaN never wins; a row of −∞ but one finite value draws that value; rows it does not take are refused', () => {
    const z = normalLogits(1, 5000, 43, 1)
    for (let i = 0; i < z.length; i += 3) z[i] = NaN
    const tokens = k.sampleTokensSplit(z, { seed: 1, topP: 0.9 }, 0, 500, 7)
    expect(tokens.every((t) => t % 3 !== 0 && t < z.length)).toBe(true)
    const one = new Float32Array(4096).fill(-Infinity)
    one[4000] = 0.5
    expect(Array.from(k.sampleTokensSplit(one, { seed: 1 }, 0, 20, 5))).toEqual(Array(20).fill(4000))
    expect(() => k.sampleTokensSplit(z, { topK: 40 }, 0, 1, 4)).toThrow(/split sampler/)
    expect(() => k.sampleTokensSplit(z, { temperature: 0 }, 0, 1, 4)).toThrow(/split sampler/)
    expect(() => k.sampleTokensSplit(z, { repetitionPenalty: 1.2 }, 0, 1, 4)).toThrow(/split sampler/)
    expect(() => k.sampleTokensSplit(z, {}, 0, 1, 0)).toThrow()
  })
})
