// The collective itself on 2 MPI ranks (native/collective/mpi_collective.cpp through
// src/parallel/collective.ts, from dist/): all-reduce (sum and mean) against a float64 reference
// on seeded random buffers of odd sizes, every element written and the input left as it was;
// broadcast and all-gather of odd byte lengths, equal byte for byte; JSON gathers keep typed
// arrays and non-finite values; NaN is never reduced away; a rank that stays away makes the other's
// operation fail with ERR_AD_COLLECTIVE_TIMEOUT within its timeout, and the collective refuses
// every later operation. The 1-rank collective leaves buffers as they are.
import { spawn } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { openCollective, shareOf } from '../../src/parallel/collective.js'
import { expectOps, expectTimeout } from './collective-checks.js'
import { mpiUnavailable, MPI_ENV } from './mpi.js'

const FIXTURE = join(import.meta.dirname, 'fixtures', 'collective-ranks.mjs')
const root = mkdtempSync(join(tmpdir(), 'ad-collective-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const unavailable = await mpiUnavailable()
if (unavailable) console.warn(`test/parallel/collective.test.ts: 2-rank tests skipped: ${unavailable}`)

async function ranks(mode: string, timeoutMs: number): Promise<{ results: Record<string, unknown>[]; status: number | null }> {
  const out = mkdtempSync(join(root, `${mode}-`))
  // detached: mpirun in a process group of its own, as the --ranks launcher starts it (its teardown
  // signals process groups, and must never reach the test runner's)
  const mpirun = spawn('mpirun', ['-np', '2', '--oversubscribe', process.execPath, FIXTURE, mode, out, String(timeoutMs)], { env: MPI_ENV, stdio: 'ignore', detached: true })
  const overdue = setTimeout(() => process.kill(-mpirun.pid!, 'SIGKILL'), 60_000)
  const status = await new Promise<number | null>((resolve) => mpirun.on('close', resolve))
  clearTimeout(overdue)
  const results = [0, 1].flatMap((r) => {
    try {
      return [JSON.parse(readFileSync(join(out, `rank-${r}.json`), 'utf8')) as Record<string, unknown>]
    } catch {
      return []
    }
  })
  return { results, status }
}

describe.skipIf(unavailable !== null)('the MPI collective on 2 ranks', () => {
  it('all-reduce, broadcast and all-gather equal their float64 / byte references on random buffers of odd sizes', async () => {
    const { results, status } = await ranks('ops', 20_000)
    expect(status).toBe(0)
    expectOps(results, 'mpi')
  }, 90_000)

  it('a rank that stays away: the other fails with ERR_AD_COLLECTIVE_TIMEOUT within its timeout, then refuses every operation', async () => {
    expectTimeout((await ranks('timeout', 1000)).results, 1000)
  }, 90_000)
})

describe('the 1-rank collective', () => {
  it('is the identity: every operation leaves the data as it is', async () => {
    const c = await openCollective({ backend: 'single', timeoutMs: 1000 })
    expect([c.rank, c.worldSize, c.backend]).toEqual([0, 1, 'single'])
    const data = Float32Array.from([1.5, -2, NaN])
    expect(Array.from(await c.allReduce(data, 'sum'))).toEqual([1.5, -2, NaN])
    expect(Array.from(await c.allReduce(data, 'avg'))).toEqual([1.5, -2, NaN])
    expect(await c.allGatherJson({ a: Int32Array.from([3]) })).toEqual([{ a: Int32Array.from([3]) }])
    expect(await c.broadcastJson('x')).toBe('x')
    await c.barrier()
    await c.close()
    await expect(c.barrier()).rejects.toThrow(/closed/)
  })

  it('refuses a non-positive timeout, an unknown backend, and MPI outside mpirun, with typed errors', async () => {
    await expect(openCollective({ backend: 'single', timeoutMs: 0 })).rejects.toThrow(RangeError)
    await expect(openCollective({ backend: 'tcp' as 'mpi', timeoutMs: 10 })).rejects.toMatchObject({ code: 'ERR_AD_INVALID_ARGUMENT' })
    if (!process.env.OMPI_COMM_WORLD_SIZE) await expect(openCollective({ backend: 'mpi', timeoutMs: 10 })).rejects.toMatchObject({ code: 'ERR_AD_COLLECTIVE_UNAVAILABLE' })
    await expect(openCollective({ backend: 'nccl', timeoutMs: 10 })).rejects.toMatchObject({ code: 'ERR_AD_COLLECTIVE_UNAVAILABLE', backend: 'nccl' })
  })
})

describe('shareOf', () => {
  it('splits N items into contiguous shares that cover them once, in rank order', () => {
    for (const [count, size] of [[0, 2], [1, 2], [7, 2], [8, 3], [32, 4]]) {
      const shares = Array.from({ length: size }, (_, r) => shareOf(count, r, size))
      expect(shares[0].start).toBe(0)
      expect(shares.at(-1)!.end).toBe(count)
      for (let r = 1; r < size; r++) expect(shares[r].start).toBe(shares[r - 1].end)
      for (const s of shares) expect(s.end - s.start).toBeGreaterThanOrEqual(Math.floor(count / size))
    }
  })
})
