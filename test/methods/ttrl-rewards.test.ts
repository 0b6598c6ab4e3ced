// TTRL group rewards (UID Eq. 4–5, B.1–B.2.1) on synthetic trajectories: the permutation control
// keeps each group's reward multiset exactly, the random control is seeded, original TTRL is 0/1,
// and the majority vote is untouched by the scores.
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { MAJORITY_ARMS, REWARD_ARMS, TOY_PRESET } from '../../src/methods/ttrl/config.js'
import { groupRewards } from '../../src/methods/ttrl/rewards.js'
import type { Trajectory } from '../../src/methods/solving/trajectory.js'
import { grpoAdvantages } from '../../src/rl/advantages.js'
import { Rng } from '../../src/util/prng.js'

const B = 8
function traj(answer: string | null, bins: number[] | null, sc = 1, complete = true): Trajectory {
  return { text: '', tokenIds: [], answer, complete, tokens: bins ? 20 : 4, bins: bins ? Float64Array.from(bins) : null, selfCertainty: sc }
}

const arbGroup = fc.array(
  fc.record({
    answer: fc.constantFrom('1', '2', '3', null),
    bins: fc.option(fc.array(fc.double({ min: 0.01, max: 3, noNaN: true }), { minLength: B, maxLength: B }), { freq: 4 }),
    sc: fc.double({ min: 0, max: 5, noNaN: true }),
  }),
  { minLength: 2, maxLength: 8 },
)

const reward = (arm: (typeof REWARD_ARMS)[number]) => ({ ...TOY_PRESET.reward, arm })
const sorted = (x: ArrayLike<number>) => Array.from(x).sort((a, b) => a - b)

describe('TTRL group rewards', () => {
  it('permuted-UID keeps each group reward multiset, mean, std and advantage multiset exactly (B.2.1)', () => {
    fc.assert(
      fc.property(arbGroup, fc.integer({ min: 0, max: 1e6 }), (rows, seed) => {
        const g = rows.map((r) => traj(r.answer, r.bins, r.sc))
        const uid = groupRewards(g, reward('uid-conj'), new Rng(seed))
        const perm = groupRewards(g, reward('permuted-uid'), new Rng(seed))
        expect(Array.from(perm.agree)).toEqual(Array.from(uid.agree))
        expect(sorted(perm.rewards)).toEqual(sorted(uid.rewards)) // exact, not approximate
        const ids = Array.from(g, () => 0)
        // advantages: the same multiset up to the summation order of the group mean (≤ 1e-12 absolute)
        const ap = sorted(grpoAdvantages(perm.rewards, ids))
        const au = sorted(grpoAdvantages(uid.rewards, ids))
        ap.forEach((a, i) => expect(Math.abs(a - au[i])).toBeLessThanOrEqual(1e-12))
        // outside the majority set the auxiliary term stays 0
        perm.agree.forEach((a, i) => a || expect(perm.aux[i]).toBe(0))
      }),
      { numRuns: 300 },
    )
  })

  it('permutation actually moves the terms between trajectories (some seed reorders a non-constant group)', () => {
    const g = [traj('7', [1, 1, 1, 1, 1, 1, 1, 1]), traj('7', [0.2, 2, 0.2, 2, 0.2, 2, 0.2, 2]), traj('7', [0.5, 0.6, 0.8, 1, 1.2, 1.4, 1.6, 1.8]), traj('3', [1, 2, 1, 2, 1, 2, 1, 2])]
    const uid = groupRewards(g, reward('uid-conj'), new Rng(0))
    const moved = [1, 2, 3, 4, 5, 6, 7, 8].some((s) => Array.from(groupRewards(g, reward('permuted-uid'), new Rng(s)).rewards).join() !== Array.from(uid.rewards).join())
    expect(moved).toBe(true)
  })

  it('majority pseudo-label with first-occurrence ties; scores never change the vote (Eq. 4, B.2)', () => {
    const g = [traj('5', null), traj('9', null), traj('9', null), traj('5', null), traj(null, null)]
    for (const arm of MAJORITY_ARMS) {
      const r = groupRewards(g, reward(arm), new Rng(1))
      expect(r.label).toBe('5') // 2–2 tie: '5' occurs first
      expect(Array.from(r.agree)).toEqual([1, 0, 0, 1, 0])
    }
  })

  it('the reference-label control rewards agreement with the reference answer, 0/1, whatever the majority says', () => {
    const g = [traj('5', null), traj('9', null), traj('5', null), traj(null, null), traj('09', null)]
    const equivalent = (a: string, b: string) => Number(a) === Number(b)
    const r = groupRewards(g, reward('reference-label'), new Rng(1), { answer: '9', equivalent })
    expect(r.label).toBe('9') // the majority says '5'
    expect(Array.from(r.agree)).toEqual([0, 1, 0, 0, 1]) // '09' is equivalent under the world's rule; no answer never agrees
    expect(Array.from(r.rewards)).toEqual([0, 1, 0, 0, 1])
    expect(Array.from(r.aux)).toEqual([0, 0, 0, 0, 0])
    expect(() => groupRewards(g, reward('reference-label'), new Rng(1))).toThrow(/reference answer/)
    expect(REWARD_ARMS).toEqual([...MAJORITY_ARMS, 'reference-label'])
  })

  it('original TTRL is binary 0/1; auxiliary arms are ±1 + λb with |λb| ≤ λδ (Eq. 5)', () => {
    const g = [traj('1', [1, 1, 1, 1, 1, 1, 1, 30], 2), traj('1', [8, 1, 8, 1, 8, 1, 8, 1], 3), traj('1', [1, 1, 1, 2, 2, 2, 3, 3], 1), traj('2', [3, 3, 3, 3, 3, 3, 3, 4], 4)]
    expect(Array.from(groupRewards(g, reward('ttrl'), new Rng(0)).rewards)).toEqual([1, 1, 1, 0])
    for (const arm of ['sc', 'uid-conj', 'uid-mix', 'random', 'permuted-uid'] as const) {
      const r = groupRewards(g, reward(arm), new Rng(0))
      expect(r.rewards[3]).toBe(-1)
      for (let i = 0; i < 3; i++) expect(Math.abs(r.rewards[i] - 1)).toBeLessThanOrEqual(0.1 * 0.5 + 1e-15)
      expect(r.aux.slice(0, 3).some((b) => b !== 0), arm).toBe(true)
    }
  })

  it('SC ranks by mean Self-Certainty within the group; UID ineligible responses score 0 but enter q̄ (B.1)', () => {
    const g = [traj('1', null, 3), traj('1', null, 1), traj('1', null, 2)]
    const sc = groupRewards(g, reward('sc'), new Rng(0))
    expect(Array.from(sc.q)).toEqual([5 / 6, 1 / 6, 0.5])
    // q̄ = 0.5: b = [1/3, −1/3, 0], R = 1 + 0.1·b
    expect(sc.rewards[0]).toBeCloseTo(1 + 0.1 / 3, 15)
    expect(sc.rewards[1]).toBeCloseTo(1 - 0.1 / 3, 15)
    const uid = groupRewards([traj('1', [1, 2, 1, 2, 1, 2, 1, 2]), traj('1', [1, 1, 1, 1, 2, 2, 2, 2]), traj('1', null)], reward('uid-conj'), new Rng(0))
    expect(Array.from(uid.eligible)).toEqual([1, 1, 0])
    expect(uid.q[2]).toBe(0)
    const qbar = (uid.q[0] + uid.q[1] + 0) / 3
    expect(uid.aux[2]).toBeCloseTo(Math.max(-0.5, -qbar), 15)
  })

  it('the random control is seeded: same seed, same rewards; another seed differs', () => {
    const g = [traj('1', null), traj('1', null), traj('1', null)]
    const a = groupRewards(g, reward('random'), new Rng(3)).rewards
    expect(Array.from(groupRewards(g, reward('random'), new Rng(3)).rewards)).toEqual(Array.from(a))
    expect(Array.from(groupRewards(g, reward('random'), new Rng(4)).rewards)).not.toEqual(Array.from(a))
  })
})
