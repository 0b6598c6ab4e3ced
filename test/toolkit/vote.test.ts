import { describe, expect, it } from 'vitest'
import {
  agreementMask,
  answersEquivalent,
  bordaRankWeight,
  bordaVote,
  clusterAnswers,
  disagreementReward,
  disUncertainty,
  majorityShare,
  majorityVote,
  normalizedEntropy,
  rzeroUncertainty,
  selectTopScored,
  variantPlurality,
} from '../../src/tasks/index.js'

const equivalent = (a: string, b: string) => answersEquivalent(a, b)

describe('majority vote (UID A.1, B.2)', () => {
  it('breaks ties by first occurrence and keeps the earliest supporter as representative', () => {
    const v = majorityVote(['A', 'B', 'B', 'A', null])
    expect(v.answer).toBe('A')
    expect(v.index).toBe(0)
    expect(v.count).toBe(2)
    expect(v.total).toBe(5)
    expect(v.members).toEqual([0, 3])
    expect(Array.from(agreementMask(v))).toEqual([1, 0, 0, 1, 0])
    expect(majorityShare(v)).toBe(0.4)
  })

  it('counts repeated samples separately and picks the most frequent', () => {
    const v = majorityVote(['7', '3', '3', '7', '3'])
    expect(v).toMatchObject({ answer: '3', index: 1, count: 3, members: [1, 2, 4] })
  })

  it('abstains when no response has an answer (empty group, all missing)', () => {
    for (const answers of [[], [null, null]]) {
      const v = majorityVote(answers)
      expect(v.answer).toBeNull()
      expect(v.index).toBe(-1)
      expect(v.count).toBe(0)
      expect(majorityShare(v)).toBe(0)
    }
  })

  it('single response and all-distinct (all tied) groups', () => {
    expect(majorityVote(['x']).answer).toBe('x')
    expect(majorityVote(['c', 'a', 'b']).answer).toBe('c')
  })

  it('votes over equivalence clusters (union-find), representative as written', () => {
    const v = majorityVote(['0.5', '2', '1/2', '2.0', '\\frac{1}{2}'], { equivalent })
    expect(v).toMatchObject({ answer: '0.5', index: 0, count: 3, members: [0, 2, 4] })
    const tie = majorityVote(['2', '1/2', '2.0', '0.5'], { equivalent })
    expect(tie).toMatchObject({ answer: '2', members: [0, 2] })
  })
})

describe('union-find clustering of equivalent answers (DIS §4.2)', () => {
  it('labels clusters by first occurrence, −1 for no answer, and closes chains transitively', () => {
    expect(Array.from(clusterAnswers(['b', null, 'a', 'b']))).toEqual([0, -1, 1, 0])
    // 50 ≡ 50% ≡ 0.5, so all three join although 50 ≢ 0.5
    expect(answersEquivalent('50', '0.5')).toBe(false)
    expect(Array.from(clusterAnswers(['50', '0.5', '50%', '7'], equivalent))).toEqual([0, 0, 0, 1])
  })

  it('calls the equivalence once per pair of distinct strings', () => {
    let calls = 0
    clusterAnswers(['a', 'a', 'b', 'b', 'c', 'a'], (x, y) => {
      calls++
      return x === y
    })
    expect(calls).toBe(3)
  })
})

describe('Borda with √-rank weights (UID A.1)', () => {
  it('weights rank r of m by √(m − r + 1)', () => {
    expect(bordaRankWeight(1, 9)).toBe(3)
    expect(bordaRankWeight(9, 9)).toBe(1)
  })

  it('sums weights per answer; unanswered responses keep their rank but add nothing', () => {
    // ranks: #3 (0.95) r1 √5, #0 r2 2, #1 r3 √3, #4 r4 √2, #2 r5 1 → A = 3, B = √3 + √2 ≈ 3.146
    const r = bordaVote(['A', 'B', 'A', null, 'B'], [0.9, 0.8, 0.1, 0.95, 0.5])
    expect(r.answer).toBe('B')
    expect(r.index).toBe(1)
    expect(r.weight).toBeCloseTo(Math.sqrt(3) + Math.sqrt(2), 15)
    expect(Array.from(r.ranks)).toEqual([2, 3, 5, 1, 4])
    expect(majorityVote(['A', 'B', 'A', null, 'B']).answer).toBe('A')
  })

  it('resolves an exact tie by first occurrence in ranked order, not generation order', () => {
    // m = 9: B at rank 1 (√9 = 3) vs A at ranks 6 and 9 (2 + 1 = 3)
    const answers = ['A', 'A', null, null, null, null, null, null, 'B']
    const scores = [50, 20, 90, 80, 70, 60, 40, 30, 100]
    const r = bordaVote(answers, scores)
    expect(r.answer).toBe('B')
    expect(r.index).toBe(8)
    expect(r.weight).toBe(3)
  })

  it('breaks score ties by generation order and excludes ineligible responses from m', () => {
    const r = bordaVote(['A', 'B', 'C'], [0.5, 0.5, null])
    expect(Array.from(r.ranks)).toEqual([1, 2, 0])
    expect(Array.from(r.weights)).toEqual([Math.SQRT2, 1, 0])
    expect(r.answer).toBe('A')
  })

  it('abstains when no eligible response has an answer', () => {
    expect(bordaVote([null, 'A'], [1, null]).answer).toBeNull()
    expect(bordaVote([], []).index).toBe(-1)
    expect(() => bordaVote(['A'], [])).toThrow(RangeError)
  })

  it('the direct selector takes the highest score, ties by generation order', () => {
    expect(selectTopScored([0.2, null, 0.5, 0.5])).toBe(2)
    expect(selectTopScored([null, NaN])).toBe(-1)
  })
})

describe('multi-solver disagreement (DIS §4.2, §4.4)', () => {
  it('normalized entropy over N items', () => {
    expect(normalizedEntropy([2, 1])).toBeCloseTo(-(2 / 3) * Math.log(2 / 3) / Math.log(3) - (1 / 3) * Math.log(1 / 3) / Math.log(3), 15)
    expect(normalizedEntropy([1, 1, 1])).toBeCloseTo(1, 15)
    expect(normalizedEntropy([3])).toBe(0)
    expect(normalizedEntropy([1])).toBe(0)
    expect(normalizedEntropy([])).toBe(0)
  })

  it('reproduces the worked example: 2-vs-1 split → r_dis = 0.58, p̂ = 0.67 → r_unc = 0.33', () => {
    const Sa = Array(10).fill('A')
    const Sb = Array(10).fill('A')
    const Sc = Array(10).fill('B')
    const pluralities = [Sa, Sb, Sc].map((s) => variantPlurality(s, equivalent))
    expect(pluralities).toEqual(['A', 'A', 'B'])
    const rDis = disagreementReward(pluralities, equivalent)
    expect(rDis).toBeCloseTo(0.58, 2)
    expect(rDis).toBeCloseTo(0.5793801642856950, 12)
    const pHat = majorityShare(majorityVote([...Sa, ...Sb, ...Sc], { equivalent }))
    expect(pHat).toBeCloseTo(2 / 3, 15)
    expect(disUncertainty(pHat)).toBeCloseTo(1 / 3, 15)
    expect(disUncertainty(pHat)).toBeCloseTo(0.33, 2)
    expect(rzeroUncertainty(pHat)).toBeCloseTo(2 / 3, 15)
  })

  it('per-variant plurality uses equivalence clusters and first-occurrence ties', () => {
    expect(variantPlurality(['1/2', '3', '0.5', '3', '\\frac{1}{2}'], equivalent)).toBe('1/2')
    expect(variantPlurality(['3', '4'], equivalent)).toBe('3')
    expect(variantPlurality([null, null], equivalent)).toBeNull()
  })

  it('degrades to the variants that answered', () => {
    expect(disagreementReward(['A', null, 'B'])).toBeCloseTo(1, 15)
    expect(disagreementReward(['A', null, null])).toBe(0)
    expect(disagreementReward(['12', '12.0', '24/2'], equivalent)).toBe(0)
    expect(disagreementReward(['1', '2', '3'])).toBeCloseTo(1, 15)
  })

  it('uncertainty in both forms', () => {
    expect(rzeroUncertainty(0.5)).toBe(1)
    expect(rzeroUncertainty(0)).toBe(0)
    expect(rzeroUncertainty(1)).toBe(0)
    expect(rzeroUncertainty(0.75)).toBe(0.5)
    expect(disUncertainty(0.5)).toBe(0.5)
    expect(disUncertainty(0.9)).toBeCloseTo(0.1, 15)
    expect(disUncertainty(0)).toBe(0)
  })
})
