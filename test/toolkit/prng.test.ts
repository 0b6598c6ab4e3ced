import { describe, expect, it } from 'vitest'
import { median, quantileSorted, Registry, Rng, sampleVariance, std } from '../../src/util/index.js'

describe('xoshiro128** generator', () => {
  it('matches the reference implementation from state (1, 2, 3, 4)', () => {
    const r = Rng.fromState([1, 2, 3, 4])
    expect(Array.from({ length: 6 }, () => r.nextU32())).toEqual([11520, 0, 5927040, 70819200, 2031721883, 1637235492])
  })

  it('is reproducible from a seed and from a saved state', () => {
    const a = new Rng('seed')
    const b = new Rng('seed')
    const xs = Array.from({ length: 5 }, () => a.nextFloat())
    expect(Array.from({ length: 5 }, () => b.nextFloat())).toEqual(xs)
    const saved = a.state()
    const next = a.nextU32()
    expect(Rng.fromState(saved).nextU32()).toBe(next)
    expect(new Rng(1).nextU32()).not.toBe(new Rng(2).nextU32())
    expect(() => Rng.fromState([0, 0, 0, 0])).toThrow(RangeError)
    expect(() => new Rng(NaN)).toThrow(RangeError)
  })

  it('nextInt is uniform (chi-square, 10 buckets) and nextFloat lies in [0, 1)', () => {
    const r = new Rng(2024)
    const counts = new Array(10).fill(0)
    const N = 50000
    for (let i = 0; i < N; i++) counts[r.nextInt(10)]++
    const chi = counts.reduce((s, c) => s + (c - N / 10) ** 2 / (N / 10), 0)
    expect(chi).toBeLessThan(27.88) // df = 9, p = 0.001
    for (let i = 0; i < 1000; i++) {
      const x = r.nextFloat()
      expect(x >= 0 && x < 1).toBe(true)
    }
    expect(() => r.nextInt(0)).toThrow(RangeError)
    expect(r.shuffle([1, 2, 3, 4, 5]).sort()).toEqual([1, 2, 3, 4, 5])
  })
})

describe('numeric helpers', () => {
  it('median, quantile type 7, variances', () => {
    expect(median([3, 1, 2])).toBe(2)
    expect(median([4, 1, 3, 2])).toBe(2.5)
    expect(median([])).toBeNaN()
    expect(quantileSorted([0, 10, 20, 30], 0.5)).toBe(15)
    expect(quantileSorted([0, 10, 20, 30], 0.025)).toBeCloseTo(0.75, 12)
    expect(sampleVariance([1, 2, 3])).toBe(1)
    expect(std([1, 3])).toBe(1)
    expect(std([1, 3], 1)).toBeCloseTo(Math.SQRT2, 15)
  })

  it('registry lists names and rejects duplicates', () => {
    const r = new Registry<number>('thing')
    r.register('a', 1)
    expect(r.get('a')).toBe(1)
    expect(() => r.get('b')).toThrow(/unknown thing "b"; known: a/)
    expect(() => r.register('a', 2)).toThrow()
    r.register('a', 3, true)
    expect(r.get('a')).toBe(3)
  })
})
