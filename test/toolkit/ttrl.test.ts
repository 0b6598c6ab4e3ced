import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import {
  combineGatedReward,
  gatedAuxTerms,
  grpoAdvantages,
  permuteAuxTerms,
  randomAuxScores,
  ttrlAuxReward,
  ttrlBinaryReward,
} from '../../src/rl/index.js'
import { Rng } from '../../src/util/index.js'

describe('TTRL gated auxiliary reward, UID Eq. 4–5', () => {
  it('centers on the majority mean, clips at δ, scales by λ (ineligible q = 0 still counts in q̄)', () => {
    // M = {0, 1, 2}, q̄ = (0.9 + 0.3 + 0)/3 = 0.4 → b = [0.5, −0.1, −0.4, 0]
    const { rewards, aux } = ttrlAuxReward([1, 1, 1, 0], [0.9, 0.3, 0, 0.8])
    expect(aux[0]).toBeCloseTo(0.5, 15)
    expect(aux[1]).toBeCloseTo(-0.1, 15)
    expect(aux[2]).toBeCloseTo(-0.4, 15)
    expect(aux[3]).toBe(0)
    expect(rewards[0]).toBeCloseTo(1.05, 15)
    expect(rewards[1]).toBeCloseTo(0.99, 15)
    expect(rewards[2]).toBeCloseTo(0.96, 15)
    expect(rewards[3]).toBe(-1)
  })

  it('clips the centered score to [−δ, δ]', () => {
    expect(Array.from(gatedAuxTerms([true, true], [1, 0]))).toEqual([0.5, -0.5])
    expect(Array.from(gatedAuxTerms([true, true], [1, 0], { delta: 0.2 }))).toEqual([0.2, -0.2])
  })

  it('applies no adjustment when fewer than two responses agree (the |M| ≥ 2 gate)', () => {
    expect(Array.from(ttrlAuxReward([1, 0, 0], [0.9, 0.1, 0.5]).rewards)).toEqual([1, -1, -1])
    expect(Array.from(ttrlAuxReward([0, 0], [0.9, 0.1]).rewards)).toEqual([-1, -1])
    expect(ttrlAuxReward([], []).rewards.length).toBe(0)
    // centering alone zeroes a single agreeing response; a larger gate is a config switch
    const dflt = ttrlAuxReward([1, 1, 0], [0.9, 0.1, 0.5]).rewards
    expect(dflt[0]).toBeCloseTo(1.04, 15)
    expect(dflt[1]).toBeCloseTo(0.96, 15)
    expect(Array.from(ttrlAuxReward([1, 1, 0], [0.9, 0.1, 0.5], { minAgreeing: 3 }).rewards)).toEqual([1, 1, -1])
  })

  it('original TTRL keeps binary 0/1 rewards', () => {
    expect(Array.from(ttrlBinaryReward([1, 0, true, false]))).toEqual([1, 0, 1, 0])
  })

  it('rejects non-finite scores of agreeing responses and shape mismatches', () => {
    expect(() => gatedAuxTerms([1, 1], [0.5, NaN])).toThrow(RangeError)
    expect(() => gatedAuxTerms([1, 1], [0.5])).toThrow(RangeError)
  })

  it('never reverses the order between majority and non-majority answers (UID B.2.1, property)', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.boolean(), fc.double({ noNaN: true, noDefaultInfinity: true })), { minLength: 1, maxLength: 16 }),
        fc.double({ min: 0, max: 1.9, noNaN: true }),
        fc.double({ min: 0, max: 1, noNaN: true }),
        (rows, lambda, delta) => {
          const agree = rows.map((r) => r[0])
          const q = rows.map((r) => r[1])
          const R = ttrlAuxReward(agree, q, { lambda, delta }).rewards
          const A = grpoAdvantages(R, R.map(() => 0))
          const inM = [...R].filter((_, i) => agree[i])
          const out = [...R].filter((_, i) => !agree[i])
          const inA = [...A].filter((_, i) => agree[i])
          const outA = [...A].filter((_, i) => !agree[i])
          if (inM.length === 0 || out.length === 0) return true
          return Math.min(...inM) > Math.max(...out) && Math.min(...inA) > Math.max(...outA)
        },
      ),
    )
  })

  it('defaults λ = 0.1, δ = 0.5 bound a majority reward below by 0.95 (UID B.2.1)', () => {
    fc.assert(
      fc.property(fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 2, maxLength: 12 }), (q) => {
        const R = ttrlAuxReward(q.map(() => 1), q).rewards
        return R.every((r) => r >= 0.95 - 1e-12 && r <= 1.05 + 1e-12)
      }),
    )
  })
})

describe('controls (UID B.2.1)', () => {
  it('random control: seeded U[0, 1) scores', () => {
    const a = randomAuxScores(5, new Rng(42))
    const b = randomAuxScores(5, new Rng(42))
    expect(Array.from(a)).toEqual(Array.from(b))
    expect(a.every((x) => x >= 0 && x < 1)).toBe(true)
    expect(Array.from(randomAuxScores(5, new Rng(43)))).not.toEqual(Array.from(a))
  })

  it('permutation control shuffles realized terms among the majority only and keeps the reward multiset', () => {
    const agree = [1, 0, 1, 1, 0, 1]
    const { aux, rewards } = ttrlAuxReward(agree, [0.9, 0.2, 0.1, 0.6, 0.7, 0.4])
    const perm = permuteAuxTerms(aux, agree, new Rng(7))
    expect([perm[1], perm[4]]).toEqual([0, 0])
    const sorted = (x: ArrayLike<number>) => Array.from(x).sort((p, q) => p - q)
    expect(sorted(perm)).toEqual(sorted(aux))
    const Rp = combineGatedReward(agree, perm)
    expect(sorted(Rp)).toEqual(sorted(rewards))
    // so the normalized advantages are a permutation of each other too
    const Ap = sorted(grpoAdvantages(Rp, [0, 0, 0, 0, 0, 0]))
    sorted(grpoAdvantages(rewards, [0, 0, 0, 0, 0, 0])).forEach((x, i) => expect(Ap[i]).toBeCloseTo(x, 12))
    // deterministic for a seed, and it does move terms for some seed
    expect(Array.from(permuteAuxTerms(aux, agree, new Rng(7)))).toEqual(Array.from(perm))
    const moved = [1, 2, 3, 4, 5, 6, 7, 8].some((s) => Array.from(permuteAuxTerms(aux, agree, new Rng(s))).some((x, i) => x !== aux[i]))
    expect(moved).toBe(true)
  })
})
