// The NCCL collective (native/collective/nccl_collective.cpp, through src/parallel/collective.ts and
// the TCP rendezvous, from dist/) on this machine, which has no GPU and no NCCL: a stand-in library
// (fixtures/fake-nccl.c, compiled here) answers for libnccl.so.2 and libcuda.so.1 on host memory,
// exchanging the ranks' data through files. It is not NCCL — what runs for real is our side: the
// loader, ncclGetUniqueId on rank 0 handed out by the rendezvous (the stand-in's init refuses ranks
// whose ids differ), the staging copies, the operations' offsets and counts, the polling, the
// timeout with ncclCommAbort, ncclCommDestroy on close. The same checks as the MPI collective's
// (collective-checks.ts) on 2 ranks, an init that never completes, no driver; and a COSE run of 2
// ranks started by `evolve --gpus`'s launcher on the CPU engine (--device cpu, which the command
// itself refuses with --gpus) over this collective equals the 1-rank run, as on MPI.
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { Writable } from 'node:stream'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { freeLocalPort, launchGpuRanks } from '../../src/parallel/launcher.js'
import { expectOps, expectTimeout } from './collective-checks.js'
import { CLI } from './mpi.js'
import { alive, rankChildPids } from './processes.js'
import { COSE_CONFIG, differences, metrics, step, tensorDifferences } from './run-compare.js'

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

  it('COSE, 2 steps on 2 ranks of the --gpus launcher over this collective (CPU engine): the metrics and checkpoint of the 1-rank run', async () => {
    const dir = mkdtempSync(join(root, 'cose-'))
    const exchange = join(dir, 'exchange')
    mkdirSync(exchange)
    const cfg = join(dir, 'cose.json')
    writeFileSync(cfg, JSON.stringify(COSE_CONFIG))
    const [one, two] = [join(dir, 'one'), join(dir, 'two')]
    const base = ['--threads', '1', '--method', 'cose', '--config', cfg, '--steps', '2', '--device', 'cpu']
    const single = spawnSync(process.execPath, [CLI, 'evolve', ...base, '--out', one], { encoding: 'utf8', timeout: 200_000 })
    expect(single.status, single.stderr).toBe(0)
    let stderr = ''
    const sink = new Writable({ write: (chunk, _enc, done) => ((stderr += String(chunk)), done()) })
    const code = await launchGpuRanks({
      gpus: 2,
      command: [process.execPath, CLI], // dist/'s, as a user's install runs it
      args: [...base, '--out', two],
      timeoutMs: 60_000,
      checkWeightsEvery: 1,
      env: { ...process.env, AUTODIDACT_NCCL: join(lib!, 'fake.so'), LD_LIBRARY_PATH: lib!, FAKE_NCCL_DIR: exchange, CUDA_VISIBLE_DEVICES: undefined },
      stdout: new Writable({ write: (_c, _e, done) => done() }),
      stderr: sink,
    }).catch((e: Error) => {
      throw new Error(`${e.message}\n${stderr}`)
    })
    expect(code).toBe(0)
    const [ma, mb] = [metrics(one), metrics(two)]
    expect(mb.map((r) => r.step)).toEqual([0, 1, 2])
    expect(ma.flatMap((row, i) => differences(row, mb[i], `step ${row.step}`))).toEqual([])
    for (const row of mb.slice(1)) expect((row.train as { tokens: number }).tokens).toBeGreaterThan(0) // a policy update on both ranks' shares
    const tensors = await tensorDifferences(join(one, 'checkpoints', step(2)), join(two, 'checkpoints', step(2)))
    expect(tensors.compared).toBeGreaterThan(1000)
    expect(tensors.failures).toEqual([])
    // every collective of the run went through the stand-in NCCL, and each rank closed its communicator
    expect(readdirSync(exchange).filter((f) => /^op-\d+-rank-1$/.test(f)).length).toBeGreaterThan(10)
    expect(['destroy-rank-0', 'destroy-rank-1'].every((f) => existsSync(join(exchange, f)))).toBe(true)
  }, 300_000)

  it('the launcher killed outright (SIGKILL): its 2 evolve ranks notice the closed channel and stop, not run on orphaned', async () => {
    const dir = mkdtempSync(join(root, 'orphans-'))
    const exchange = join(dir, 'exchange')
    mkdirSync(exchange)
    const run = join(dir, 'run')
    const env = { ...process.env, AUTODIDACT_NCCL: join(lib!, 'fake.so'), LD_LIBRARY_PATH: lib!, FAKE_NCCL_DIR: exchange, CUDA_VISIBLE_DEVICES: undefined }
    const launcher = spawn(process.execPath, [join(import.meta.dirname, 'fixtures', 'gpu-launch.mjs'), dir, 'evolve', '--threads', '1', '--method', 'cose', '--steps', '200', '--device', 'cpu', '--out', run], { env, stdio: 'ignore' })
    const ranksOf = () => rankChildPids(run)
    const deadline = Date.now() + 60_000
    while (!existsSync(join(run, 'metrics.jsonl')) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100)) // both ranks past their start
    const pids = ranksOf()
    expect(pids).toHaveLength(2)
    launcher.kill('SIGKILL')
    const stopBy = Date.now() + 15_000
    while (pids.some(alive) && Date.now() < stopBy) await new Promise((r) => setTimeout(r, 100))
    expect(pids.filter(alive)).toEqual([])
  }, 120_000)
})

