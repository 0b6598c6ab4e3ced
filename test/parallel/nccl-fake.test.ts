// The NCCL collective (native/collective/nccl_collective.cpp, through src/parallel/collective.ts and
// the TCP rendezvous, from dist/) on this machine, which has no GPU and no NCCL: a stand-in library
// (fixtures/fake-nccl.c, compiled here) answers for libnccl.so.2 and libcuda.so.1 on host memory,
// exchanging the ranks' data through files. It is not NCCL — what runs for real is our side: the
// loader, ncclGetUniqueId on rank 0 handed out by the rendezvous (the stand-in's init refuses ranks
// whose ids differ), the staging copies, the operations' offsets and counts, the polling, the
// timeout with ncclCommAbort, ncclCommDestroy on close. The same checks as the MPI collective's
// (collective-checks.ts) on 2 ranks, the 1-rank world, and an init that never completes.
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { freeLocalPort } from '../../src/parallel/launcher.js'
import { expectOps, expectTimeout } from './collective-checks.js'

const FIXTURE = join(import.meta.dirname, 'fixtures', 'collective-ranks.mjs')
const root = mkdtempSync(join(tmpdir(), 'ad-nccl-fake-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

/** The stand-in, built once: lib/fake.so, and lib/libcuda.so.1 a link to it (one copy loaded under both names). */
function buildFake(): string | null {
  const lib = join(root, 'lib')
  mkdirSync(lib)
  const so = join(lib, 'fake.so')
  const cc = spawnSync('cc', ['-shared', '-fPIC', '-O1', '-o', so, join(import.meta.dirname, 'fixtures', 'fake-nccl.c')], { encoding: 'utf8' })
  if (cc.error || cc.status !== 0) return null
  symlinkSync(so, join(lib, 'libcuda.so.1'))
  return lib
}
const lib = buildFake()
if (!lib) console.warn('test/parallel/nccl-fake.test.ts: skipped: no C compiler (cc) to build the stand-in library')

/** `size` rank processes of collective-ranks.mjs with the launcher's NCCL environment; each one's rank-R.json, and the stand-in's marks. */
async function ranks(mode: string, size: number, timeoutMs: number, extraEnv: (rank: number) => NodeJS.ProcessEnv = () => ({})) {
  const out = mkdtempSync(join(root, `${mode}-`))
  const exchange = join(out, 'exchange')
  mkdirSync(exchange)
  const rendezvous = `127.0.0.1:${await freeLocalPort()}`
  const codes = await Promise.all(
    Array.from({ length: size }, (_, rank) => {
      const env = {
        ...process.env,
        AUTODIDACT_NCCL: join(lib!, 'fake.so'),
        LD_LIBRARY_PATH: lib!,
        FAKE_NCCL_DIR: exchange,
        AUTODIDACT_COLLECTIVE: 'nccl',
        AUTODIDACT_RANK: String(rank),
        AUTODIDACT_WORLD_SIZE: String(size),
        AUTODIDACT_RENDEZVOUS: rendezvous,
        ...extraEnv(rank),
      }
      return new Promise<number | null>((done) => {
        const child = spawn(process.execPath, [FIXTURE, mode, out, String(timeoutMs)], { env, stdio: ['ignore', 'ignore', 'inherit'] })
        const kill = setTimeout(() => child.kill('SIGKILL'), 60_000)
        child.on('close', (code) => (clearTimeout(kill), done(code)))
      })
    }),
  )
  const results = Array.from({ length: size }, (_, r) => {
    try {
      return [JSON.parse(readFileSync(join(out, `rank-${r}.json`), 'utf8')) as Record<string, unknown>]
    } catch {
      return []
    }
  }).flat()
  const marked = (what: string, rank: number) => existsSync(join(exchange, `${what}-rank-${rank}`))
  return { codes, results, marked }
}

describe.skipIf(lib === null)('the NCCL collective over a stand-in library', () => {
  it('2 ranks: all-reduce, broadcast and all-gather equal their float64 / byte references; close destroys each communicator', async () => {
    const { codes, results, marked } = await ranks('ops', 2, 20_000)
    expect(codes).toEqual([0, 0])
    expectOps(results, 'nccl')
    for (const r of [0, 1]) {
      expect(marked('destroy', r)).toBe(true)
      expect(marked('abort', r)).toBe(false)
    }
  }, 90_000)

  it('a rank that stays away: the other fails with ERR_AD_COLLECTIVE_TIMEOUT within its timeout, aborts its communicator, then refuses every operation', async () => {
    const { results, marked } = await ranks('timeout', 2, 1000)
    expectTimeout(results, 1000)
    expect(marked('abort', 0)).toBe(true)
    expect(marked('destroy', 0)).toBe(false)
  }, 90_000)

  it('an init that never completes: each rank\'s open fails with ERR_AD_COLLECTIVE_TIMEOUT (operation init) within the timeout', async () => {
    const { results } = await ranks('ops', 2, 1500, (rank) => (rank === 1 ? { FAKE_NCCL_INIT_HANG: '1' } : {}))
    expect(results).toHaveLength(2)
    for (const [r, res] of results.entries())
      expect(res).toMatchObject({ rank: r, openError: { code: 'ERR_AD_COLLECTIVE_TIMEOUT', operation: 'init', timeoutMs: 1500, message: expect.stringMatching(new RegExp(`NCCL init on rank ${r} of 2 did not complete within 1500 ms`)) } })
  }, 90_000)

  it('without the CUDA driver: a typed ERR_AD_COLLECTIVE_UNAVAILABLE (kind no-driver)', async () => {
    const { results } = await ranks('ops', 1, 5000, () => ({ LD_LIBRARY_PATH: '/nonexistent' }))
    expect(results[0]).toMatchObject({ rank: 0, openError: { code: 'ERR_AD_COLLECTIVE_UNAVAILABLE', message: expect.stringMatching(/the NCCL collective needs the CUDA driver: libcuda\.so\.1 did not load/) } })
  }, 90_000)
})
