import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  advantageEstimators,
  batchWhiten,
  computeAdvantages,
  drGrpoAdvantages,
  grpoAdvantages,
  reinforcePlusPlusAdvantages,
  reinforcePlusPlusBaselineAdvantages,
  rlooAdvantages,
} from '../../src/rl/index.js'

describe('GRPO, UID Eq. 16', () => {
  it('normalizes by the sample std plus 1e-6', () => {
    const sd = Math.sqrt(1 / 3) // sample std of [1, 0, 0, 1]
    const a = grpoAdvantages([1, 0, 0, 1], [0, 0, 0, 0])
    expect(a[0]).toBeCloseTo(0.5 / (sd + 1e-6), 14)
    expect(a[1]).toBeCloseTo(-0.5 / (sd + 1e-6), 14)
    expect(grpoAdvantages([1, 0], ['p', 'p'], { epsilon: 0 })[0]).toBeCloseTo(0.5 / Math.SQRT1_2, 14)
  })

  it('normalizes each group separately, with interleaved string ids', () => {
    const a = grpoAdvantages([1, 5, 0, 7, 2], ['x', 'y', 'x', 'y', 'x'])
    // group x = [1, 0, 2]: mean 1, sample std 1; group y = [5, 7]: mean 6, sample std √2
    const e = 1e-6
    const want = [0, -1 / (Math.SQRT2 + e), -1 / (1 + e), 1 / (Math.SQRT2 + e), 1 / (1 + e)]
    want.forEach((w, i) => expect(a[i]).toBeCloseTo(w, 14))
  })

  it('gives 0 to singleton, zero-std and empty groups', () => {
    expect(Array.from(grpoAdvantages([0.7], [3]))).toEqual([0])
    expect(Array.from(grpoAdvantages([0.3, 0.3, 0.3], [1, 1, 1]))).toEqual([0, 0, 0])
    expect(grpoAdvantages([], []).length).toBe(0)
    expect(Array.from(grpoAdvantages([1, 0, 4], ['a', 'a', 'b']))).toEqual([0.5 / (Math.SQRT1_2 + 1e-6), -0.5 / (Math.SQRT1_2 + 1e-6), 0])
  })

  it('rejects non-finite rewards and mismatched group ids', () => {
    expect(() => grpoAdvantages([1, NaN], [0, 0])).toThrow(/rewards\[1\]/)
    expect(() => grpoAdvantages([1, Infinity], [0, 0])).toThrow(RangeError)
    expect(() => grpoAdvantages([1, 2], [0])).toThrow(RangeError)
  })

  it('unanimous TTRL group: A_i = (b_i − b̄)/(s_b + ε/λ) (UID B.2.1, Eq. 17)', () => {
    const lambda = 0.1
    const b = [0.3, -0.2, 0.05, -0.15]
    const R = b.map((x) => 1 + lambda * x)
    const bbar = b.reduce((s, x) => s + x, 0) / b.length
    const sb = Math.sqrt(b.reduce((s, x) => s + (x - bbar) ** 2, 0) / (b.length - 1))
    const A = grpoAdvantages(R, [0, 0, 0, 0])
    b.forEach((x, i) => expect(A[i]).toBeCloseTo((x - bbar) / (sb + 1e-6 / lambda), 10))
  })

  it('has zero mean and unit sample std per group when the std dominates ε (property)', () => {
    fc.assert(
      fc.property(fc.array(fc.integer({ min: -100, max: 100 }), { minLength: 2, maxLength: 16 }), (ints) => {
        const r = ints.map((x) => x / 10)
        const a = grpoAdvantages(r, r.map(() => 0))
        const m = a.reduce((s, x) => s + x, 0) / a.length
        const allEqual = r.every((x) => x === r[0])
        if (allEqual) return a.every((x) => x === 0)
        const sd = Math.sqrt(a.reduce((s, x) => s + (x - m) ** 2, 0) / (a.length - 1))
        return Math.abs(m) < 1e-9 && Math.abs(sd - 1) < 1e-4
      }),
    )
  })
})

describe('Dr. GRPO, RLOO, REINFORCE++', () => {
  it('Dr. GRPO subtracts the group mean only', () => {
    expect(Array.from(drGrpoAdvantages([1, 0, 0, 1], [0, 0, 0, 0]))).toEqual([0.5, -0.5, -0.5, 0.5])
    expect(Array.from(drGrpoAdvantages([3], [0]))).toEqual([0])
  })

  it('RLOO subtracts the leave-one-out mean', () => {
    const a = rlooAdvantages([1, 0, 0, 1], [0, 0, 0, 0])
    expect(a[0]).toBeCloseTo(2 / 3, 15)
    expect(a[1]).toBeCloseTo(-2 / 3, 15)
    expect(Array.from(rlooAdvantages([5], [0]))).toEqual([0])
    // n/(n−1)·(r − mean)
    const r = [0.2, 0.9, 0.4]
    const rl = rlooAdvantages(r, [1, 1, 1])
    const mean = 0.5
    r.forEach((x, i) => expect(rl[i]).toBeCloseTo((3 / 2) * (x - mean), 15))
  })

  it('REINFORCE++ whitens over the batch with the unbiased variance', () => {
    const a = reinforcePlusPlusAdvantages([1, 2, 3], [0, 1, 2])
    const inv = 1 / Math.sqrt(1 + 1e-8)
    expect(Array.from(a)).toEqual([-inv, 0, inv])
    // token-weighted: counts [1, 1, 2] → mean 2.25, var = 2.75/3
    const t = reinforcePlusPlusAdvantages([1, 2, 3], [0, 1, 2], { tokenCounts: [1, 1, 2] })
    const sd = Math.sqrt(2.75 / 3 + 1e-8)
    expect(t[0]).toBeCloseTo(-1.25 / sd, 14)
    expect(t[2]).toBeCloseTo(0.75 / sd, 14)
    expect(Array.from(batchWhiten([4]))).toEqual([0])
    expect(() => batchWhiten([1, 2], { tokenCounts: [1] })).toThrow(RangeError)
  })

  it('REINFORCE++-baseline subtracts the group mean before whitening', () => {
    const a = reinforcePlusPlusBaselineAdvantages([1, 3, 10, 14], [0, 0, 1, 1])
    // centered: [-1, 1, -2, 2]; mean 0, unbiased var = 10/3
    const sd = Math.sqrt(10 / 3 + 1e-8)
    expect(a[0]).toBeCloseTo(-1 / sd, 14)
    expect(a[3]).toBeCloseTo(2 / sd, 14)
  })

  it('is selected by name from the registry', () => {
    expect(advantageEstimators.names()).toEqual(['grpo', 'dr-grpo', 'rloo', 'reinforce++', 'reinforce++-baseline'])
    expect(Array.from(computeAdvantages('grpo', [1, 0], [0, 0]))).toEqual(Array.from(grpoAdvantages([1, 0], [0, 0])))
    expect(Array.from(computeAdvantages('rloo', [1, 0], [0, 0]))).toEqual([1, -1])
    expect(() => computeAdvantages('ppo-gae', [1], [0])).toThrow(/known: grpo/)
    expect(() => advantageEstimators.register('grpo', grpoAdvantages)).toThrow(/already registered/)
  })
})
