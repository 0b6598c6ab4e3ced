import { describe, expect, it } from 'vitest'
import {
  macroAverage,
  pairedPromptBootstrap,
  promptDifference,
  promptWeightedAverage,
} from '../../src/stats/index.js'

describe('UID Eq. 19–21 estimands', () => {
  it('prompt difference in percentage points, macro and prompt-weighted averages', () => {
    expect(promptDifference([1, 1, 0, 0, 1], [0, 1, 0, 0, 0])).toBeCloseTo(40, 12)
    expect(promptDifference([1], [0, 0, 1, 1], 1)).toBe(0.5)
    expect(() => promptDifference([], [1])).toThrow(RangeError)
    expect(macroAverage([10, 40])).toBe(25)
    expect(promptWeightedAverage([10, 40], [30, 10])).toBe(17.5)
  })
})

describe('paired prompt-cluster percentile bootstrap (UID D.4)', () => {
  const benchmarks = [
    // 3 prompts: differences 20, 0, 40 → Δ = 20
    { name: 'small', a: [[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 0, 0]], b: [[1, 0, 0, 0, 0], [1, 0, 0, 0, 0], [1, 0, 0, 0, 0]] },
    // 1 prompt: difference −20 → Δ = −20
    { name: 'tiny', a: [[0, 0, 0, 0, 1]], b: [[0, 0, 0, 1, 1]] },
  ]

  it('point estimates are the macro (Eq. 20) and prompt-weighted (Eq. 21) means', () => {
    const r = pairedPromptBootstrap(benchmarks, { replicates: 500, seed: 1 })
    expect(r.perBenchmark.map((b) => [b.name, b.prompts, +b.estimate.toFixed(10)])).toEqual([['small', 3, 20], ['tiny', 1, -20]])
    expect(r.macro.estimate).toBeCloseTo(0, 10)
    expect(r.promptWeighted.estimate).toBeCloseTo((3 * 20 + 1 * -20) / 4, 10)
    // a one-prompt benchmark has no resampling variance
    expect(r.perBenchmark[1].lo).toBeCloseTo(-20, 10)
    expect(r.perBenchmark[1].hi).toBeCloseTo(-20, 10)
    expect(r.macro.lo).toBeLessThanOrEqual(r.macro.estimate)
    expect(r.macro.hi).toBeGreaterThanOrEqual(r.macro.estimate)
  })

  it('resamples prompts with replacement within each benchmark', () => {
    // d = [0, 100]: replicate means are 0, 50, 100 with probabilities ¼, ½, ¼
    const r = pairedPromptBootstrap([{ name: 'b', a: [[0], [1]], b: [[0], [0]] }], { replicates: 20000, seed: 5, keepDistribution: true })
    const dist = r.macroDistribution!
    const at = (v: number) => dist.filter((x) => x === v).length / dist.length
    expect(at(50)).toBeGreaterThan(0.48)
    expect(at(50)).toBeLessThan(0.52)
    expect(at(0)).toBeGreaterThan(0.23)
    expect(at(0)).toBeLessThan(0.27)
    expect(r.macro.lo).toBe(0)
    expect(r.macro.hi).toBe(100)
  })

  it('gives a degenerate interval when every prompt has the same difference', () => {
    const bm = { name: 'c', a: [[1, 1], [1, 0], [0, 1]], b: [[1, 0], [0, 0], [0, 0]] } // 50 everywhere
    const r = pairedPromptBootstrap([bm], { replicates: 300 })
    expect(r.macro).toEqual({ estimate: 50, lo: 50, hi: 50 })
  })

  it('matches the normal-approximation width on a large benchmark', () => {
    // 400 prompts with differences cycling through −20, 0, 20, 40 (mean 10, population sd √500)
    const a: number[][] = []
    const b: number[][] = []
    for (let q = 0; q < 400; q++) {
      const k = q % 4
      a.push([k >= 1 ? 1 : 0, k >= 2 ? 1 : 0, k >= 3 ? 1 : 0, 0, 0])
      b.push([1, 0, 0, 0, 0])
    }
    const r = pairedPromptBootstrap([{ name: 'big', a, b }], { replicates: 4000, seed: 3 })
    expect(r.macro.estimate).toBeCloseTo(10, 10)
    const halfWidth = (r.macro.hi - r.macro.lo) / 2
    const se = Math.sqrt(500 / 400)
    expect(halfWidth / (1.96 * se)).toBeGreaterThan(0.9)
    expect(halfWidth / (1.96 * se)).toBeLessThan(1.1)
  })

  it('is reproducible for a seed and uses the same draws for both aggregates', () => {
    const x = pairedPromptBootstrap(benchmarks, { replicates: 400, seed: 'uid-d4' })
    const y = pairedPromptBootstrap(benchmarks, { replicates: 400, seed: 'uid-d4' })
    expect(y).toEqual(x)
    const z = pairedPromptBootstrap(benchmarks, { replicates: 400, seed: 'other' })
    expect(z.macro.lo === x.macro.lo && z.macro.hi === x.macro.hi && z.promptWeighted.lo === x.promptWeighted.lo).toBe(false)
  })

  it('rejects unpaired or empty input', () => {
    expect(() => pairedPromptBootstrap([{ name: 'x', a: [[1]], b: [] }])).toThrow(RangeError)
    expect(() => pairedPromptBootstrap([{ name: 'x', a: [], b: [] }])).toThrow(RangeError)
    expect(() => pairedPromptBootstrap([])).toThrow(RangeError)
    expect(() => pairedPromptBootstrap(benchmarks, { replicates: 0 })).toThrow(RangeError)
  })
})
