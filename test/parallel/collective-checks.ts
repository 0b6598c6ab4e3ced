// What a 2-rank run of fixtures/collective-ranks.mjs must show, whichever collective ran it (the MPI
// one in collective.test.ts, the NCCL one over a stand-in library in nccl-fake.test.ts).
import { expect } from 'vitest'

// An f32 sum of 2 values is their exact sum rounded once: within 2^-24 of Σ|x| relative; stated bound 2^-23.
export const REDUCE_BOUND = 2 ** -23

/** Mode 'ops': all-reduce, broadcast and all-gather equal their float64 / byte references on random buffers of odd sizes. */
export function expectOps(results: Record<string, unknown>[], backend: string): void {
  expect(results).toHaveLength(2)
  for (const [r, res] of results.entries()) {
    expect(res).toMatchObject({ rank: r, worldSize: 2, backend })
    const reduce = res.reduce as { n: number; length: number; worstSum: number; worstAvg: number; written: boolean; inputUntouched: boolean }[]
    expect(reduce.map((x) => x.n)).toEqual([1, 7, 1000, 65_537])
    for (const x of reduce) {
      expect(x.length).toBe(x.n)
      expect(x.written).toBe(true)
      expect(x.inputUntouched).toBe(true)
      expect(x.worstSum).toBeLessThanOrEqual(REDUCE_BOUND)
      expect(x.worstAvg).toBeLessThanOrEqual(REDUCE_BOUND)
    }
    expect(res.broadcast).toEqual({ length: 4099, equal: true })
    expect(res.gather).toEqual([
      { length: 101, equal: true },
      { length: 103, equal: true },
    ])
    expect(res.json).toEqual([
      { rank: 0, typed: true, values: [String(Math.fround(0.1)), 'NaN', '-Infinity'] },
      { rank: 1, typed: true, values: [String(Math.fround(1.1)), 'NaN', '-Infinity'] },
    ])
    expect(res.nan).toEqual(['NaN', '4'])
  }
}

/** Mode 'timeout': rank 0's barrier fails with ERR_AD_COLLECTIVE_TIMEOUT within its timeout, then every operation is refused. */
export function expectTimeout(results: Record<string, unknown>[], timeoutMs: number): void {
  const r0 = results.find((r) => r.rank === 0) as { error: Record<string, unknown>; seconds: number; after: { code: string; message: string } }
  expect(r0.error).toMatchObject({ code: 'ERR_AD_COLLECTIVE_TIMEOUT', rank: 0, operation: 'barrier', timeoutMs })
  expect(r0.error.message).toMatch(new RegExp(`barrier on rank 0 of 2 did not complete within ${timeoutMs} ms`))
  expect(r0.seconds).toBeGreaterThanOrEqual(timeoutMs / 1000)
  expect(r0.seconds).toBeLessThan(timeoutMs / 1000 + 2)
  expect(r0.after.code).toBe('ERR_AD_COLLECTIVE')
  expect(r0.after.message).toMatch(/broken by an earlier failure \(barrier timed out\)/)
}
