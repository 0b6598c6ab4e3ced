import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
// module imports (not the tasks index) keep mathjs out of this file's load time
import { bleuDistanceMatrix, sentenceBleu, whitespaceTokens } from '../../src/tasks/bleu.js'
import { averageLinkageClusters, clusterSharePenalty, repetitionPenalty } from '../../src/tasks/cluster.js'

// NLTK's own doctest sentences (nltk/translate/bleu_score.py)
const hypothesis1 = 'It is a guide to action which ensures that the military always obeys the commands of the party'
const hypothesis2 = 'It is to insure the troops forever hearing the activity guidebook that party direct'
const reference1 = 'It is a guide to action that ensures that the military will forever heed Party commands'
const reference2 = 'It is the guiding principle which guarantees the military forces always being under the command of the Party'
const reference3 = 'It is the practical guide for the army always to heed the directions of the party'

describe('sentence BLEU, NLTK semantics (method1 smoothing)', () => {
  it('matches NLTK doctest values', () => {
    // doctest "0.5045..." means the printed value starts with these digits
    const doctest = (x: number, prefix: string) => expect(x.toFixed(12).startsWith(prefix), `${x} vs ${prefix}...`).toBe(true)
    doctest(sentenceBleu([reference1, reference2, reference3], hypothesis1), '0.5045')
    // modern NLTK: hypothesis2 has no 3-gram or 4-gram overlap, so unsmoothed BLEU is 0 ...
    expect(sentenceBleu([reference1, reference2, reference3], hypothesis2, { smoothing: 'none' })).toBe(0)
    // ... and method1 replaces p3 = 0/12, p4 = 0/11 by 0.1/12, 0.1/11 (p1 = 8/14, p2 = 1/13 as in
    // NLTK's modified_precision doctest; c = 14, closest reference length 16)
    expect(sentenceBleu([reference1, reference2, reference3], hypothesis2)).toBeCloseTo(
      Math.exp(1 - 16 / 14) * Math.pow((8 / 14) * (1 / 13) * (0.1 / 12) * (0.1 / 11), 0.25),
      14,
    )
    doctest(sentenceBleu([reference1], hypothesis1), '0.4118')
    doctest(sentenceBleu([reference1], hypothesis1, { smoothing: 'none' }), '0.4118')
    const w5 = [0.1666, 0.1666, 0.1666, 0.1666, 0.1666]
    expect(sentenceBleu([reference1, reference2, reference3], hypothesis1, { weights: w5 })).toBeCloseTo(0.45838627164939455, 12)
  })

  it('hand-computed: p = (5/6, 3/5, 1/4, 0.1/3), BP = 1', () => {
    const b = sentenceBleu(['the cat is on the mat'], 'the cat sat on the mat')
    expect(b).toBeCloseTo(Math.pow((5 / 6) * (3 / 5) * (1 / 4) * (0.1 / 3), 0.25), 14)
    // without smoothing a zero 4-gram precision gives 0
    expect(sentenceBleu(['the cat is on the mat'], 'the cat sat on the mat', { smoothing: 'none' })).toBe(0)
  })

  it('brevity penalty exp(1 − r/c) for a short hypothesis; closest reference length, ties to the shorter', () => {
    // hyp 4 tokens, all n-grams match; r = 6 → BP = e^(1 − 6/4)
    expect(sentenceBleu(['a b c d e f'], 'a b c d')).toBeCloseTo(Math.exp(1 - 6 / 4), 14)
    // references of length 3 and 5 are equally close to 4: the shorter one is used, so BP = 1
    expect(sentenceBleu(['a b c', 'a b c d e'], 'a b c d')).toBeCloseTo(Math.pow(1 * 1 * 1 * 1, 0.25), 14)
  })

  it('edge cases: identical, too short for 4-grams, empty, disjoint', () => {
    expect(sentenceBleu(['w x y z'], 'w x y z')).toBe(1)
    expect(sentenceBleu(['x y'], 'x y')).toBeCloseTo(Math.sqrt(0.1), 14) // p3 = p4 = 0.1/1
    expect(sentenceBleu(['x y'], '')).toBe(0)
    expect(sentenceBleu([''], 'x y')).toBe(0)
    expect(sentenceBleu(['a b c d'], 'e f g h')).toBe(0)
    expect(() => sentenceBleu([], 'a')).toThrow(RangeError)
    expect(whitespaceTokens('  a \n b\tc  ')).toEqual(['a', 'b', 'c'])
  })

  it('stays in [0, 1] and gives 1 for a repeated sentence of ≥ 4 tokens (property)', () => {
    const word = fc.constantFrom('a', 'b', 'c', 'd', 'e')
    fc.assert(
      fc.property(fc.array(word, { maxLength: 12 }), fc.array(word, { maxLength: 12 }), (x, y) => {
        const b = sentenceBleu([x], y)
        return b >= 0 && b <= 1 + 1e-12 && (x.length < 4 || Math.abs(sentenceBleu([x], x) - 1) < 1e-12)
      }),
    )
  })
})

describe('average-linkage clustering at τ (JZ Eq. 5)', () => {
  // d(0,1)=.1, d(2,3)=.2; cross distances .9 .8 .7 .6 → average .75
  const D = [
    0, 0.1, 0.9, 0.8,
    0.1, 0, 0.7, 0.6,
    0.9, 0.7, 0, 0.2,
    0.8, 0.6, 0.2, 0,
  ]
  it('merges while the average inter-cluster distance is below τ', () => {
    expect(Array.from(averageLinkageClusters(D, 4, 0.5))).toEqual([0, 0, 1, 1])
    // single linkage would merge at 0.6 < 0.65; average linkage (0.75) does not
    expect(Array.from(averageLinkageClusters(D, 4, 0.65))).toEqual([0, 0, 1, 1])
    expect(Array.from(averageLinkageClusters(D, 4, 0.76))).toEqual([0, 0, 0, 0])
    expect(Array.from(averageLinkageClusters(D, 4, 0.05))).toEqual([0, 1, 2, 3])
  })

  it('does not merge at exactly τ; handles n = 0 and n = 1', () => {
    expect(Array.from(averageLinkageClusters([0, 0.5, 0.5, 0], 2, 0.5))).toEqual([0, 1])
    expect(Array.from(averageLinkageClusters([], 0))).toEqual([])
    expect(Array.from(averageLinkageClusters([0], 1))).toEqual([0])
    expect(() => averageLinkageClusters([0, 1], 2)).toThrow(RangeError)
  })

  it('leaves every pair of final clusters at average distance ≥ τ (property)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 2, max: 9 }), fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { minLength: 36, maxLength: 36 }), (n, vals) => {
        const D = new Float64Array(n * n)
        let k = 0
        for (let i = 0; i < n; i++) for (let j = i + 1; j < n; j++) D[i * n + j] = D[j * n + i] = vals[k++]
        const labels = averageLinkageClusters(D, n, 0.5)
        const C = Math.max(...labels) + 1
        for (let a = 0; a < C; a++) {
          for (let b = a + 1; b < C; b++) {
            let s = 0
            let m = 0
            for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) if (labels[i] === a && labels[j] === b) (s += D[i * n + j]), m++
            if (s / m < 0.5 - 1e-12) return false
          }
        }
        return true
      }),
    )
  })
})

describe('repetition penalty λ·|C_k|/N (JZ Eq. 5)', () => {
  it('clusters identical tasks and leaves unparsed ones out of N', () => {
    const tasks = ['what is 2 plus 2 ?', 'what is 2 plus 2 ?', 'name a prime number greater than ten', null]
    const r = repetitionPenalty(tasks)
    expect(Array.from(r.labels)).toEqual([0, 0, 1, -1])
    expect(r.penalty[0]).toBeCloseTo(2 / 3, 15)
    expect(r.penalty[1]).toBeCloseTo(2 / 3, 15)
    expect(r.penalty[2]).toBeCloseTo(1 / 3, 15)
    expect(r.penalty[3]).toBe(0)
    expect(repetitionPenalty(tasks, { lambda: 0.5 }).penalty[2]).toBeCloseTo(1 / 6, 15)
  })

  it('near-duplicates (BLEU > 0.5) share a cluster; a single task pays λ', () => {
    const a = 'find the sum of all positive integers n such that n squared plus 3 is prime'
    const b = 'find the sum of all positive integers n such that n squared plus 5 is prime'
    const d = bleuDistanceMatrix([a, b])
    expect(d[1]).toBeLessThan(0.5)
    expect(d[1]).toBe(d[2])
    expect(Array.from(repetitionPenalty([a, b, 'compute 7 factorial']).labels)).toEqual([0, 0, 1])
    expect(Array.from(repetitionPenalty(['only one']).penalty)).toEqual([1])
    expect(Array.from(repetitionPenalty([]).penalty)).toEqual([])
    expect(Array.from(clusterSharePenalty([0, 0, 1], 0.5))).toEqual([1 / 3, 1 / 3, 1 / 6])
  })

  it('scores hypothesis x_p against reference x_q for p < q, like R-Zero', () => {
    const texts = ['a b c d e', 'a b c d e f g h']
    const d = bleuDistanceMatrix(texts)
    expect(d[1]).toBeCloseTo(1 - sentenceBleu([texts[1]], texts[0]), 15)
    expect(d[1]).not.toBeCloseTo(1 - sentenceBleu([texts[0]], texts[1]), 6)
  })
})
