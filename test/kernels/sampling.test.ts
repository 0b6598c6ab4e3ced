// One sampling step (native/kernels/sampling.h, native/cpu/sampling_cpu.cpp): determinism of the
// counter-based draw, greedy semantics, and chi-square goodness of fit of empirical token
// frequencies against the exact float64 target distribution (test/reference/sampling64.ts) for
// temperature, top-k, top-p, min-p and the penalties. Draws vary the position counter: draw i of a
// run is (seed, stream, position = i). Seeds are fixed, so every p-value is reproducible; a fit
// passes at p > 1e-3, and a negative control shows the test has the power to reject a near miss.
import { beforeAll, describe, expect, it } from 'vitest'
import { chiSquareTest, samplingDistribution64, type SamplingParams64 } from '../reference/sampling64.js'
import { gaussian, mulberry32 } from '../reference/random-weights.js'
import { kernels, normalLogits, type Kernels, type SamplingParamsJs } from './kernels.js'

const P_MIN = 1e-3

let k: Kernels
beforeAll(async () => {
  k = await kernels()
})

function counts(tokens: Int32Array, vocab: number): Float64Array {
  const c = new Float64Array(vocab)
  for (const t of tokens) c[t]++
  return c
}

interface FitCase {
  logits: Float32Array
  params: SamplingParamsJs & SamplingParams64
  draws: number
  history?: number[]
  generated?: number[]
}

// Samples `draws` tokens natively and tests them against the f64 distribution of `expected`
// (default: the same parameters).
function fit(c: FitCase, expected: SamplingParams64 = c.params) {
  const history = c.history ? Int32Array.from(c.history) : undefined
  const generated = c.generated ? Int32Array.from(c.generated) : undefined
  const tokens = k.sampleTokens(c.logits, { seed: 7, ...c.params }, 0, c.draws, history, generated)
  const probs = samplingDistribution64(c.logits, expected, c.history, c.generated)
  return chiSquareTest(counts(tokens, c.logits.length), probs)
}

function expectFit(c: FitCase): void {
  const r = fit(c)
  expect(r.impossible, `draws on tokens of probability 0 (${JSON.stringify(c.params)})`).toBe(0)
  expect(r.pValue, `χ² = ${r.stat.toFixed(1)} on ${r.dof} dof (${JSON.stringify(c.params)})`).toBeGreaterThan(P_MIN)
}

// V logits with every value repeated `copies` times at scattered ids: ties at every boundary.
function tiedLogits(vocab: number, copies: number, seed: number): Float32Array {
  const g = gaussian(mulberry32(seed))
  const distinct = Array.from({ length: Math.ceil(vocab / copies) }, () => Math.fround(1.5 * g()))
  const out = new Float32Array(vocab)
  for (let i = 0; i < vocab; i++) out[(i * 7919) % vocab] = distinct[Math.floor(i / copies)]
  return out
}

describe('sampling: determinism', () => {
  const z = normalLogits(1, 1000, 3, 2)

  it('the same (seed, stream, position) gives the same token; other streams and seeds differ', () => {
    const p = { temperature: 1, topP: 0.95, seed: 123, stream: 4 }
    const a = k.sampleTokens(z, p, 0, 200)
    expect(Array.from(k.sampleTokens(z, p, 0, 200))).toEqual(Array.from(a))
    for (let i = 0; i < 200; i += 37) expect(k.sampleToken(z, p, i)).toBe(a[i])
    expect(Array.from(k.sampleTokens(z, p, 100, 100))).toEqual(Array.from(a.subarray(100)))
    expect(Array.from(k.sampleTokens(z, { ...p, stream: 5 }, 0, 200))).not.toEqual(Array.from(a))
    expect(Array.from(k.sampleTokens(z, { ...p, seed: 124 }, 0, 200))).not.toEqual(Array.from(a))
    expect(k.sampleToken(z, { ...p, seed: 2n ** 64n - 1n, stream: 2n ** 63n }, 2n ** 40n)).toBeGreaterThanOrEqual(0)
  })

  it('greedy (T = 0) is the argmax after penalties, lowest id on ties, whatever top-k/top-p/seed say', () => {
    const v = Float32Array.of(1, 3, -2, 3, 2.9, 0.5)
    for (const seed of [0, 1, 2]) expect(k.sampleToken(v, { temperature: 0, topK: 1, topP: 0.1, seed }, seed)).toBe(1)
    // repetition 1.2 on ids 1 and 3: 3 → 2.5, so 4 (2.9) wins
    expect(k.sampleToken(v, { temperature: 0, repetitionPenalty: 1.2 }, 0, Int32Array.of(1, 3))).toBe(4)
    // presence 0.5 + frequency 0.3 × 2 on id 1: 3 − 1.1 = 1.9 → id 3 wins
    expect(k.sampleToken(v, { temperature: 0, presencePenalty: 0.5, frequencyPenalty: 0.3 }, 0, undefined, Int32Array.of(1, 1))).toBe(3)
  })

  it('top-p = 0 keeps only the most probable token; min-p = 1 keeps only the maximum (and its ties)', () => {
    const v = Float32Array.of(0.2, 1, 1, -1, 0.7)
    const onlyMax = k.sampleTokens(v, { topP: 0, seed: 1 }, 0, 300)
    expect(new Set(onlyMax)).toEqual(new Set([1]))
    const ties = k.sampleTokens(v, { minP: 1, seed: 1 }, 0, 300)
    expect(new Set(ties)).toEqual(new Set([1, 2]))
  })

  it('rejects bad parameters and ids with a typed error', () => {
    const v = new Float32Array(10)
    expect(() => k.sampleToken(v, { temperature: -1 }, 0)).toThrow(RangeError)
    expect(() => k.sampleToken(v, { topP: 1.5 }, 0)).toThrow(RangeError)
    expect(() => k.sampleToken(v, { minP: -0.1 }, 0)).toThrow(RangeError)
    expect(() => k.sampleToken(v, { repetitionPenalty: 0 }, 0)).toThrow(RangeError)
    expect(() => k.sampleToken(v, { topK: 1.5 }, 0)).toThrow(RangeError)
    expect(() => k.sampleToken(v, {}, 0, Int32Array.of(10))).toThrow(RangeError)
    expect(() => k.sampleToken(new Float32Array(0), {}, 0)).toThrow(RangeError)
    expect(() => k.sampleToken(v, {}, -1)).toThrow(RangeError)
  })
})

describe('sampling: chi-square fit to the exact distribution (V = 64, 100k draws each)', () => {
  const V = 64
  const DRAWS = 100_000
  const z = normalLogits(1, V, 11, 1.5)
  const tied = tiedLogits(V, 4, 12)
  const cases: [string, FitCase][] = [
    ['temperature 1', { logits: z, params: { temperature: 1 }, draws: DRAWS }],
    ['temperature 0.5', { logits: z, params: { temperature: 0.5 }, draws: DRAWS }],
    ['temperature 1.8', { logits: z, params: { temperature: 1.8 }, draws: DRAWS }],
    ['top-k 10', { logits: z, params: { topK: 10, temperature: 0.9 }, draws: DRAWS }],
    ['top-k 10 through a tie group', { logits: tied, params: { topK: 10 }, draws: DRAWS }],
    ['top-p 0.7', { logits: z, params: { topP: 0.7 }, draws: DRAWS }],
    ['top-p 0.5 on tied logits', { logits: tied, params: { topP: 0.5, temperature: 1.3 }, draws: DRAWS }],
    ['min-p 0.15', { logits: z, params: { minP: 0.15 }, draws: DRAWS }],
    ['top-k 20 + top-p 0.9 + min-p 0.05, T 0.8', { logits: z, params: { topK: 20, topP: 0.9, minP: 0.05, temperature: 0.8 }, draws: DRAWS }],
    [
      'repetition penalty 1.3',
      { logits: z, params: { repetitionPenalty: 1.3 }, history: [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 5, 8], draws: DRAWS },
    ],
    [
      'presence 0.7 + frequency 0.4',
      { logits: z, params: { presencePenalty: 0.7, frequencyPenalty: 0.4 }, generated: [3, 3, 3, 9, 9, 40, 63], draws: DRAWS },
    ],
    [
      'all penalties + top-p 0.8',
      {
        logits: z,
        params: { repetitionPenalty: 1.2, presencePenalty: 0.3, frequencyPenalty: 0.2, topP: 0.8, temperature: 0.9 },
        history: [7, 1, 2, 3, 3, 40],
        generated: [3, 3, 40],
        draws: DRAWS,
      },
    ],
  ]
  for (const [name, c] of cases) it(name, () => expectFit(c))

  it('has the power to reject a near miss (negative control)', () => {
    expect(fit({ logits: z, params: { temperature: 1 }, draws: DRAWS }, { temperature: 1.1 }).pValue).toBeLessThan(1e-6)
    expect(fit({ logits: z, params: { topK: 10 }, draws: DRAWS }, { topK: 11 }).pValue).toBeLessThan(1e-6)
    expect(fit({ logits: z, params: { topP: 0.7 }, draws: DRAWS }, { topP: 0.75 }).pValue).toBeLessThan(1e-6)
    expect(fit({ logits: z, params: { minP: 0.15 }, draws: DRAWS }, { minP: 0.17 }).pValue).toBeLessThan(1e-6)
  })
})

describe('sampling: chi-square fit on the large-vocabulary paths', () => {
  it('real vocabulary (151,936): top-k 50 + top-p 0.95 (heap selection)', () => {
    expectFit({ logits: normalLogits(1, 151936, 21, 2), params: { topK: 50, topP: 0.95 }, draws: 10_000 })
  })

  it('top-k 600 of 4000 (selection by nth_element), with min-p', () => {
    expectFit({ logits: normalLogits(1, 4000, 22, 1), params: { topK: 600, minP: 0.2 }, draws: 30_000 })
  })

  it('top-p 0.6 over a flat row of 6000: a nucleus of thousands (scattered pick)', () => {
    expectFit({ logits: normalLogits(1, 6000, 23, 0.3), params: { topP: 0.6 }, draws: 20_000 })
  })

  it('top-p with one token holding ~80%: the nucleus reaches into the e^-10 tail', () => {
    const z = normalLogits(1, 3000, 24, 0.3)
    z[1234] = 10
    expectFit({ logits: z, params: { topP: 0.9 }, draws: 30_000 })
  })

  it('top-p 0.8 on 151,936 N(0, 4²) logits: threshold bisection, a nucleus of ~150 (sorted pick)', () => {
    expectFit({ logits: normalLogits(1, 151936, 26, 4), params: { topP: 0.8 }, draws: 5_000 })
  })

  // 40 tokens near logit 8 and a 150k-token tail near 0 holding about half the mass.
  const tail = normalLogits(1, 151936, 27, 0.3)
  for (let i = 0; i < 40; i++) tail[(i * 3779) % 151936] = 7 + i / 20

  it('top-p 0.7 through a 150k-token tail: bisection, compaction, dense pick', () => {
    expectFit({ logits: tail, params: { topP: 0.7 }, draws: 6_000 })
  })

  it('min-p on a dense nucleus: top-p 0.99, min-p halving the tail', () => {
    expectFit({ logits: tail, params: { topP: 0.99, minP: Math.exp(-8.95) }, draws: 6_000 })
  })

  it('no filter at all on 151,936 tokens (dense inverse CDF)', () => {
    expectFit({ logits: normalLogits(1, 151936, 25, 3), params: { temperature: 0.7 }, draws: 5_000 })
  })
})
