import { describe, expect, it } from 'vitest'
import {
  countMasked,
  maskExcludingTokens,
  marginConfidence,
  marginsFromTopK,
  maxLogitConfidence,
  negativeEntropyConfidence,
  normalizedEntropyConfidence,
  selfCertaintyFullVocab,
  selfCertaintyTopK,
  sequenceConfidence,
  tokenNormalizedEntropyConfidence,
  tokenSelfCertaintyFromLogits,
  topKTokenStats,
} from '../../src/signals/index.js'

const LN2 = Math.log(2)
const LN3 = Math.log(3)
const LN4 = Math.log(4)

describe('COSE Eq. 2–3 normalized-entropy confidence', () => {
  it('maps a uniform distribution to 0 and a one-hot distribution to 1 (COSE §3.2)', () => {
    expect(tokenNormalizedEntropyConfidence(Math.log(151936), 151936)).toBeCloseTo(0, 12)
    expect(tokenNormalizedEntropyConfidence(0, 151936)).toBe(1)
  })

  it('averages c_t = 1 − H/log|V| over the masked tokens', () => {
    // |V| = 4: H = 0 → 1, H = ln 4 → 0, H = ln 2 → 1/2
    const H = Float32Array.from([0, LN4, LN2])
    expect(normalizedEntropyConfidence(H, 4)).toBeCloseTo(0.5, 6)
    expect(normalizedEntropyConfidence(H, 4, Uint8Array.from([1, 0, 1]))).toBeCloseTo(0.75, 6)
    expect(normalizedEntropyConfidence(H, 4, [false, true, false])).toBeCloseTo(0, 6)
  })

  it('clamps entropies that rounding pushes outside [0, log|V|]', () => {
    expect(normalizedEntropyConfidence([LN4 * 1.0001, -1e-7], 4)).toBeCloseTo(0.5, 12)
  })

  it('returns NaN when the mask keeps no token, and rejects a mask of the wrong length', () => {
    expect(normalizedEntropyConfidence([0.3, 0.2], 10, [0, 0] as unknown as boolean[])).toBeNaN()
    expect(normalizedEntropyConfidence([], 10)).toBeNaN()
    expect(() => normalizedEntropyConfidence([0.3, 0.2], 10, Uint8Array.from([1]))).toThrow(RangeError)
  })
})

describe('Self-Certainty (UID A.1, Eq. 9)', () => {
  it('full vocabulary: KL(U‖p) is 0 for a uniform row and ½ln(4/3) for p = (¾, ¼)', () => {
    expect(tokenSelfCertaintyFromLogits([0.7, 0.7, 0.7, 0.7])).toBeCloseTo(0, 12)
    expect(tokenSelfCertaintyFromLogits([LN3, 0])).toBeCloseTo(0.5 * Math.log(4 / 3), 12)
    // direct KL for a 3-way row
    const z = [1, 2, 4]
    const Z = z.reduce((s, x) => s + Math.exp(x), 0)
    const kl = z.reduce((s, x) => s + (1 / 3) * Math.log(1 / 3 / (Math.exp(x) / Z)), 0)
    expect(tokenSelfCertaintyFromLogits(z)).toBeCloseTo(kl, 12)
  })

  it('full vocabulary from per-token logsumexp and mean logit, masked', () => {
    const lse = [LN4, 5]
    const mean = [LN3 / 2, 0]
    expect(selfCertaintyFullVocab(lse, mean, 2, [true, false])).toBeCloseTo(0.5 * Math.log(4 / 3), 12)
    expect(selfCertaintyFullVocab(lse, mean, 2)).toBeCloseTo((0.5 * Math.log(4 / 3) + 5 - LN2) / 2, 12)
  })

  it('top-K renormalized entropy and self-certainty per token', () => {
    const { entropy, selfCertainty, support } = topKTokenStats(Float32Array.from([LN3, 0, 0, 0]), 2)
    expect(entropy[0]).toBeCloseTo(-(0.75 * Math.log(0.75) + 0.25 * Math.log(0.25)), 6)
    expect(selfCertainty[0]).toBeCloseTo(0.5 * Math.log(4 / 3), 6)
    expect(entropy[1]).toBeCloseTo(LN2, 12)
    expect(selfCertainty[1]).toBeCloseTo(0, 12)
    expect(Array.from(support)).toEqual([2, 2])
  })

  it('keeps the k largest logits of each row when k < K, and drops −∞ padding', () => {
    const { entropy, selfCertainty } = topKTokenStats([0, 5, 1, 3], 4, { k: 2 })
    const p = 1 / (1 + Math.exp(-2))
    expect(entropy[0]).toBeCloseTo(-(p * Math.log(p) + (1 - p) * Math.log(1 - p)), 12)
    expect(selfCertainty[0]).toBeCloseTo(-0.5 * (Math.log(p) + Math.log(1 - p)) - LN2, 12)
    const padded = topKTokenStats([LN3, 0, -Infinity], 3)
    expect(padded.support[0]).toBe(2)
    expect(padded.selfCertainty[0]).toBeCloseTo(0.5 * Math.log(4 / 3), 12)
    const one = topKTokenStats([4, 1], 2, { k: 1 })
    expect(one.entropy[0]).toBe(0)
    expect(one.selfCertainty[0]).toBe(0)
  })

  it('sequence top-K self-certainty averages the masked positions; shape errors throw', () => {
    const rows = [LN3, 0, 0, 0, 2, 2]
    expect(selfCertaintyTopK(rows, 2, [1, 0, 1] as unknown as boolean[])).toBeCloseTo(0.25 * Math.log(4 / 3), 12)
    expect(() => topKTokenStats([1, 2, 3], 2)).toThrow(RangeError)
    expect(() => topKTokenStats([1, 2], 2, { k: 3 })).toThrow(RangeError)
  })
})

describe('COSE Table 7 alternative signals', () => {
  it('margin, max logit and negative entropy are masked means', () => {
    expect(marginConfidence([2, 4], [true, false])).toBe(2)
    expect(maxLogitConfidence(Float32Array.from([10, 20, 30]))).toBe(20)
    expect(negativeEntropyConfidence([1, 2, 3], Uint8Array.from([0, 1, 1]))).toBe(-2.5)
    expect(negativeEntropyConfidence([1], [false])).toBeNaN()
  })

  it('derives margins from top-K rows in logit or probability space', () => {
    expect(Array.from(marginsFromTopK([1, 3, 2, 0, 0, -1], 3))).toEqual([1, 0])
    const lse = [Math.log(Math.exp(1) + Math.exp(3) + Math.exp(2))]
    const m = marginsFromTopK([1, 3, 2], 3, { space: 'prob', logsumexp: lse })
    expect(m[0]).toBeCloseTo((Math.exp(3) - Math.exp(2)) / Math.exp(lse[0]), 12)
  })

  it('selects a signal by name and reports missing statistics', () => {
    const stats = { entropy: [0, LN4], vocabSize: 4, margin: [1, 3], maxLogit: [5, 7] }
    expect(sequenceConfidence('normalized-entropy', stats)).toBeCloseTo(0.5, 12)
    expect(sequenceConfidence('neg-entropy', stats)).toBeCloseTo(-LN4 / 2, 12)
    expect(sequenceConfidence('margin', stats, [false, true])).toBe(3)
    expect(sequenceConfidence('max-logit', stats)).toBe(6)
    expect(() => sequenceConfidence('self-certainty', stats)).toThrow(/logsumexp/)
    expect(() => sequenceConfidence('no-such-signal', stats)).toThrow(/known: normalized-entropy/)
  })
})

describe('token masks', () => {
  it('excludes special tokens and respects a base mask', () => {
    const m = maskExcludingTokens([5, 151643, 7, 151645, 9], [151643, 151645], [1, 1, 1, 1, 0] as unknown as boolean[])
    expect(Array.from(m)).toEqual([1, 0, 1, 0, 0])
    expect(countMasked(m, 5)).toBe(2)
    expect(countMasked(undefined, 7)).toBe(7)
  })
})
