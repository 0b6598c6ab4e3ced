import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import {
  cosePriority,
  MinTree,
  oneMinusPPriority,
  PrioritizedReplay,
  SumTree,
} from '../../src/replay/index.js'

const dirs: string[] = []
afterAll(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true })
})

/** Pearson chi-square statistic of observed counts against expected probabilities. */
function chiSquare(counts: number[], probs: number[], n: number): number {
  return counts.reduce((s, c, i) => s + (c - n * probs[i]) ** 2 / (n * probs[i]), 0)
}

describe('COSE Eq. 6 priority', () => {
  it('v·c_V·max(4p(1 − p), 0.1) and the 1 − p ablation', () => {
    expect(cosePriority(0.8, 0.5, 0.5)).toBeCloseTo(0.4, 15)
    expect(cosePriority(0.8, 0.5, 0.9)).toBeCloseTo(0.144, 15)
    expect(cosePriority(0.8, 0.5, 1)).toBeCloseTo(0.04, 15) // floor 0.1
    expect(cosePriority(0.8, 0.5, 0)).toBeCloseTo(0.04, 15)
    expect(oneMinusPPriority(0.8, 0.5, 0.2)).toBeCloseTo(0.32, 15)
    expect(oneMinusPPriority(0.8, 0.5, 1)).toBeCloseTo(0.04, 15)
  })
})

describe('sum tree', () => {
  it('inverts the prefix sum and skips zero-priority slots', () => {
    const t = new SumTree(4)
    ;[1, 0, 2, 3].forEach((p, i) => t.set(i, p))
    expect(t.total).toBe(6)
    expect([0, 0.999, 1, 2.999, 3, 5.999].map((u) => t.find(u))).toEqual([0, 0, 2, 2, 3, 3])
    expect(t.find(6)).toBe(3) // u at the total (rounding) still lands on a positive slot
    t.set(3, 0)
    expect(t.find(5)).toBe(2)
    expect(() => new SumTree(0)).toThrow(RangeError)
    expect(() => t.set(0, -1)).toThrow(RangeError)
    expect(() => t.set(9, 1)).toThrow(RangeError)
    const empty = new SumTree(3)
    expect(() => empty.find(0)).toThrow(RangeError)
  })

  it('keeps exact totals through many updates (parents recomputed, no drift)', () => {
    const t = new SumTree(1000)
    for (let k = 0; k < 20000; k++) t.set(k % 1000, ((k * 7919) % 1000) / 1000)
    for (let s = 0; s < 1000; s++) t.set(s, 0)
    expect(t.total).toBe(0)
  })

  it('min tree: smallest key, ties by secondary key then slot', () => {
    const m = new MinTree(5)
    expect(m.argmin()).toBe(-1)
    m.set(3, 2, 9)
    m.set(1, 2, 4)
    m.set(4, 5, 0)
    expect(m.argmin()).toBe(1)
    m.clear(1)
    expect(m.argmin()).toBe(3)
  })
})

describe('prioritized replay buffer', () => {
  it('defaults: capacity 8192, COSE priority, FIFO eviction, p starts at 0.5', () => {
    const b = new PrioritizedReplay<string>()
    expect(b.capacity).toBe(8192)
    expect(b.config.mode).toBe('cose')
    b.add('q1', 'What is 2+2?', { v: 0.8, cV: 0.5 })
    expect(b.get('q1')?.p).toBe(0.5)
    expect(b.priority('q1')).toBeCloseTo(0.4, 15)
  })

  it('updates the priority when p(q) changes (COSE Eq. 1 from Judge scores)', () => {
    const b = new PrioritizedReplay<string>({ capacity: 4 })
    b.add('a', 'A', { v: 1, cV: 1 })
    b.add('b', 'B', { v: 1, cV: 1 })
    expect(b.probability('a')).toBeCloseTo(0.5, 15)
    expect(b.recordJudgeScores('a', [1, 1, 1, 1])).toBe(1) // solved: learnability floor
    expect(b.priority('a')).toBeCloseTo(0.1, 15)
    expect(b.probability('a')).toBeCloseTo(0.1 / 1.1, 15)
    b.setSolveRate('a', 0.75)
    expect(b.priority('a')).toBeCloseTo(0.75, 15)
    expect(b.get('a')?.updates).toBe(2)
    expect(() => b.setSolveRate('zzz', 0.5)).toThrow(/no entry/)
    expect(() => b.setSolveRate('a', 1.5)).toThrow(RangeError)
    expect(() => b.add('c', 'C', { v: NaN, cV: 1 })).toThrow(RangeError)
    expect(() => b.recordJudgeScores('a', [])).toThrow(RangeError)
  })

  it('switches: uniform sampling and the 1 − p variant', () => {
    const u = new PrioritizedReplay({ capacity: 4, mode: 'uniform' })
    u.add('a', 1, { v: 0.1, cV: 0.1, p: 1 })
    u.add('b', 2, { v: 1, cV: 1, p: 0.5 })
    expect(u.probability('a')).toBe(0.5)
    const o = new PrioritizedReplay({ capacity: 4, mode: 'one-minus-p' })
    o.add('a', 1, { v: 1, cV: 1, p: 0.2 })
    expect(o.priority('a')).toBeCloseTo(0.8, 15)
    expect(() => new PrioritizedReplay({ mode: 'nope' })).toThrow(/unknown replay priority mode/)
  })

  it('FIFO eviction removes the oldest insertion; updating an entry does not renew it', () => {
    const b = new PrioritizedReplay<string>({ capacity: 3 })
    b.add('a', 'A', { v: 1, cV: 1 })
    b.add('b', 'B', { v: 1, cV: 1 })
    b.add('c', 'C', { v: 1, cV: 1 })
    b.add('a', 'A2', { v: 0.9, cV: 1 }) // upsert keeps age
    expect(b.size).toBe(3)
    expect(b.add('d', 'D', { v: 1, cV: 1 })?.id).toBe('a')
    expect(b.add('e', 'E', { v: 1, cV: 1 })?.id).toBe('b')
    expect([...b.entries()].map((e) => e.id).sort()).toEqual(['c', 'd', 'e'])
  })

  it('lowest-priority eviction removes the least useful question, oldest among ties', () => {
    const b = new PrioritizedReplay<string>({ capacity: 3, eviction: 'lowest-priority' })
    b.add('a', 'A', { v: 1, cV: 1, p: 0.5 }) // 1
    b.add('b', 'B', { v: 1, cV: 1, p: 1 }) // 0.1
    b.add('c', 'C', { v: 1, cV: 1, p: 0 }) // 0.1
    expect(b.add('d', 'D', { v: 1, cV: 1 })?.id).toBe('b')
    expect(b.add('e', 'E', { v: 1, cV: 1 })?.id).toBe('c')
    b.setSolveRate('a', 1)
    expect(b.add('f', 'F', { v: 1, cV: 1 })?.id).toBe('a')
  })

  it('removes entries and reuses their slots', () => {
    const b = new PrioritizedReplay<number>({ capacity: 2 })
    b.add('a', 1, { v: 1, cV: 1 })
    b.add('b', 2, { v: 1, cV: 1 })
    expect(b.remove('a')?.item).toBe(1)
    expect(b.remove('a')).toBeUndefined()
    expect(b.add('c', 3, { v: 1, cV: 1 })).toBeUndefined()
    expect(b.size).toBe(2)
    expect(b.totalPriority).toBeCloseTo(2, 15)
  })

  it('samples distinct entries without replacement; zero-priority entries only when nothing else is left', () => {
    const b = new PrioritizedReplay<number>({ capacity: 8 }, 3)
    b.add('z1', 0, { v: 0, cV: 1 })
    b.add('p1', 1, { v: 1, cV: 1 })
    b.add('z2', 0, { v: 0, cV: 1 })
    b.add('p2', 2, { v: 1, cV: 0.5 })
    for (let k = 0; k < 50; k++) {
      const two = b.sample(2).map((e) => e.id).sort()
      expect(two).toEqual(['p1', 'p2'])
    }
    const all = b.sample(10).map((e) => e.id)
    expect(all.length).toBe(4)
    expect(new Set(all).size).toBe(4)
    expect(all.slice(0, 2).sort()).toEqual(['p1', 'p2'])
    expect(b.totalPriority).toBeCloseTo(1.5, 15) // priorities restored after sampling
    for (let k = 0; k < 50; k++) for (const e of b.sample(3, { replacement: true })) expect(e.item).toBeGreaterThan(0)
    expect(new PrioritizedReplay().sample(3)).toEqual([])
    const zeros = new PrioritizedReplay<number>({ capacity: 3 })
    zeros.add('a', 0, { v: 0, cV: 0 })
    zeros.add('b', 0, { v: 0, cV: 0 })
    expect(zeros.sample(2).map((e) => e.id).sort()).toEqual(['a', 'b'])
    expect(zeros.sample(4, { replacement: true }).length).toBe(4)
    expect(() => b.sample(-1)).toThrow(RangeError)
  })

  it('returns copies: mutating a sampled entry does not change the buffer', () => {
    const b = new PrioritizedReplay<number>({ capacity: 2 })
    b.add('a', 1, { v: 1, cV: 1 })
    const e = b.sample(1)[0]
    e.p = 0
    expect(b.get('a')?.p).toBe(0.5)
  })

  it('is deterministic for a seed', () => {
    const make = (seed: number) => {
      const b = new PrioritizedReplay<number>({ capacity: 64 }, seed)
      for (let i = 0; i < 40; i++) b.add(`q${i}`, i, { v: (i % 7) / 7 + 0.1, cV: 0.9, p: (i % 5) / 4 })
      return b.sample(10).map((e) => e.id)
    }
    expect(make(11)).toEqual(make(11))
    expect(make(11)).not.toEqual(make(12))
  })

  it('draws in proportion to priority (chi-square, with and without replacement)', () => {
    const n = 30
    const b = new PrioritizedReplay<number>({ capacity: 32 }, 'chi-square')
    for (let i = 0; i < n; i++) b.add(`q${i}`, i, { v: 0.2 + (0.8 * i) / n, cV: 1 - i / (2 * n), p: ((i * 7) % 11) / 10 })
    const probs = Array.from({ length: n }, (_, i) => b.probability(`q${i}`))
    expect(probs.reduce((s, x) => s + x, 0)).toBeCloseTo(1, 12)
    expect(Math.max(...probs) / Math.min(...probs)).toBeGreaterThan(10)
    const draws = 60000
    const counts = new Array(n).fill(0)
    for (const e of b.sample(draws, { replacement: true })) counts[e.item]++
    // df = 29: P(χ² > 58.30) = 0.001
    expect(chiSquare(counts, probs, draws)).toBeLessThan(58.3)
    const single = new Array(n).fill(0)
    for (let k = 0; k < 20000; k++) single[b.sample(1)[0].item]++
    expect(chiSquare(single, probs, 20000)).toBeLessThan(58.3)
    // a sampler that ignored priorities would fail the same test
    const uniform = new Array(n).fill(draws / n)
    expect(chiSquare(uniform, probs, draws)).toBeGreaterThan(1000)
  })

  it('saves atomically and resumes the exact sampling sequence', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ad-replay-'))
    dirs.push(dir)
    const b = new PrioritizedReplay<{ text: string }>({ capacity: 16, eviction: 'lowest-priority' }, 99)
    for (let i = 0; i < 20; i++) b.add(`q${i}`, { text: `question ${i}` }, { v: ((i * 3) % 10) / 10, cV: 0.7, p: (i % 4) / 3 })
    b.remove('q17')
    b.sample(5)
    const path = join(dir, 'replay.json')
    await b.save(path)
    expect(await readdir(dir)).toEqual(['replay.json'])
    const c = await PrioritizedReplay.load<{ text: string }>(path)
    expect(c.toJSON()).toEqual(b.toJSON())
    expect(c.sample(6).map((e) => e.id)).toEqual(b.sample(6).map((e) => e.id))
    expect(c.add('new', { text: 'n' }, { v: 1, cV: 1 })?.id).toEqual(b.add('new', { text: 'n' }, { v: 1, cV: 1 })?.id)
    expect(c.sample(8, { replacement: true }).map((e) => e.id)).toEqual(b.sample(8, { replacement: true }).map((e) => e.id))
    // overwriting keeps a single file
    await c.save(path)
    expect(await readdir(dir)).toEqual(['replay.json'])
  })

  it('rejects corrupt, truncated or inconsistent snapshots with a TypeError', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ad-replay-bad-'))
    dirs.push(dir)
    const b = new PrioritizedReplay<number>({ capacity: 4 })
    b.add('a', 1, { v: 1, cV: 1 })
    b.add('b', 2, { v: 0.5, cV: 1 })
    const good = join(dir, 'good.json')
    await b.save(good)
    const text = await readFile(good, 'utf8')
    await writeFile(join(dir, 'trunc.json'), text.slice(0, text.length >> 1))
    await expect(PrioritizedReplay.load(join(dir, 'trunc.json'))).rejects.toThrow(TypeError)
    const snap = JSON.parse(text)
    const bad = (mutate: (s: any) => void) => {
      const s = structuredClone(snap)
      mutate(s)
      return () => PrioritizedReplay.fromJSON(s)
    }
    expect(bad((s) => (s.format = 'x'))).toThrow(TypeError)
    expect(bad((s) => (s.entries[1].slot = s.entries[0].slot))).toThrow(/slot/)
    expect(bad((s) => (s.entries[1].id = 'a'))).toThrow(/duplicate/)
    expect(bad((s) => (s.entries[0].v = 2))).toThrow(/v of/)
    expect(bad((s) => s.free.pop())).toThrow(/free list/)
    expect(bad((s) => (s.rng = [0, 0, 0, 0]))).toThrow(TypeError)
    expect(bad((s) => (s.entries[0].seq = 99))).toThrow(/seq/)
  })
})
