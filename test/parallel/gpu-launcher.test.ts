// `evolve --gpus N`'s launcher (src/parallel/launcher.ts) on the CPU, with a stand-in rank command
// (fixtures/fake-rank.mjs) in place of `node <cli> evolve … --rank-child`: each rank's global rank,
// world size, GPU (CUDA_VISIBLE_DEVICES), rendezvous address and arguments; rank 0's stdout and
// every rank's stderr in whole lines; a rank that fails or dies stops the others (SIGTERM, then
// SIGKILL for one that ignores it) and the error names it; rank 0's Ctrl-C exit is not a failure;
// a Ctrl-C reaches every rank once.
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { afterAll, describe, expect, it } from 'vitest'
import { gpuDevices, gpuRankProcesses, launchGpuRanks, ParallelLaunchError, RankFailedError, type GpuLaunchOptions } from '../../src/parallel/launcher.js'

const FAKE = join(import.meta.dirname, 'fixtures', 'fake-rank.mjs')
const root = mkdtempSync(join(tmpdir(), 'ad-gpu-launcher-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

class Sink extends Writable {
  text = ''
  writes: string[] = []
  override _write(chunk: Buffer, _enc: string, done: () => void) {
    this.text += chunk.toString()
    this.writes.push(chunk.toString())
    done()
  }
}

interface RankFile {
  args: string[]
  env: Record<string, string | null>
  pid: number
}

async function launch(name: string, o: Partial<GpuLaunchOptions> & { fake?: string }) {
  const out = mkdtempSync(join(root, `${name}-`))
  const stdout = new Sink()
  const stderr = new Sink()
  const { fake, ...rest } = o
  const started = Date.now()
  const result = await launchGpuRanks({
    gpus: 3,
    args: ['--method', 'cose', '--steps', '2'],
    command: [process.execPath, FAKE, out],
    env: { ...process.env, CUDA_VISIBLE_DEVICES: undefined, FAKE_RANKS: fake ?? '' },
    stdout,
    stderr,
    graceMs: 1000,
    ...rest,
  }).then(
    (code) => ({ code, error: null }),
    (error: unknown) => ({ code: null, error }),
  )
  const rank = (r: number) => JSON.parse(readFileSync(join(out, `rank-${r}.json`), 'utf8')) as RankFile
  return { ...result, out, stdout, stderr, seconds: (Date.now() - started) / 1000, rank, terminated: (r: number) => existsSync(join(out, `rank-${r}.terminated`)) }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe('gpuRankProcesses', () => {
  it('node 1 of 2 with 4 GPUs: global ranks 4…7, one GPU each from CUDA_VISIBLE_DEVICES, the same rendezvous and arguments', () => {
    const plan = gpuRankProcesses({ gpus: 4, nodes: 2, nodeRank: 1, rendezvous: '10.0.0.1:29500', args: ['--method', 'ttrl'], timeoutMs: 5000, checkWeightsEvery: 2, command: ['node', 'cli.js'], env: { PATH: '/bin', CUDA_VISIBLE_DEVICES: '3,5,6,7' } })
    expect(plan.map((p) => [p.rank, p.device])).toEqual([
      [4, '3'],
      [5, '5'],
      [6, '6'],
      [7, '7'],
    ])
    for (const p of plan) {
      expect(p.command).toBe('node')
      expect(p.args).toEqual(['cli.js', 'evolve', '--method', 'ttrl', '--rank-child'])
      expect(p.env).toEqual({
        PATH: '/bin',
        CUDA_VISIBLE_DEVICES: p.device,
        AUTODIDACT_COLLECTIVE: 'nccl',
        AUTODIDACT_RANK: String(p.rank),
        AUTODIDACT_WORLD_SIZE: '8',
        AUTODIDACT_RENDEZVOUS: '10.0.0.1:29500',
        AUTODIDACT_COLLECTIVE_TIMEOUT_MS: '5000',
        AUTODIDACT_CHECK_WEIGHTS_EVERY: '2',
      })
    }
  })

  it('takes GPUs 0…N−1 without CUDA_VISIBLE_DEVICES, and refuses more GPUs than it lists', () => {
    expect(gpuDevices(3, {})).toEqual(['0', '1', '2'])
    expect(gpuDevices(2, { CUDA_VISIBLE_DEVICES: ' 4, 2 ,9' })).toEqual(['4', '2'])
    expect(() => gpuDevices(3, { CUDA_VISIBLE_DEVICES: '4,2' })).toThrow(ParallelLaunchError)
    expect(() => gpuDevices(3, { CUDA_VISIBLE_DEVICES: '4,2' })).toThrow(/CUDA_VISIBLE_DEVICES=4,2 names only 2 GPUs/)
  })
})

describe('launchGpuRanks (stand-in ranks)', () => {
  it('3 ranks: each its rank, world size, GPU, the one rendezvous, the arguments; rank 0\'s stdout, every stderr line whole', async () => {
    const r = await launch('ok', { timeoutMs: 7000 })
    expect(r.error).toBeNull()
    expect(r.code).toBe(0)
    const ranks = [0, 1, 2].map(r.rank)
    const rendezvous = ranks[0].env.AUTODIDACT_RENDEZVOUS!
    expect(rendezvous).toMatch(/^127\.0\.0\.1:\d+$/)
    for (const [i, f] of ranks.entries()) {
      expect(f.args).toEqual(['evolve', '--method', 'cose', '--steps', '2', '--rank-child'])
      expect(f.env).toMatchObject({ AUTODIDACT_COLLECTIVE: 'nccl', AUTODIDACT_RANK: String(i), AUTODIDACT_WORLD_SIZE: '3', AUTODIDACT_RENDEZVOUS: rendezvous, CUDA_VISIBLE_DEVICES: String(i), AUTODIDACT_COLLECTIVE_TIMEOUT_MS: '7000', AUTODIDACT_CHECK_WEIGHTS_EVERY: null })
    }
    expect(new Set(ranks.map((f) => f.pid)).size).toBe(3)
    expect(r.stdout.text).toBe('stdout of rank 0\n') // the others' stdout is not the command's
    const lines = r.stderr.text.trim().split('\n').sort()
    expect(lines).toEqual([0, 1, 2].map((i) => `stderr of rank ${i}: ${'x'.repeat(2000)}`))
    for (const w of r.stderr.writes) expect(w.endsWith('\n')).toBe(true)
  }, 30_000)

  it('a rank that fails: the others are stopped, and the error names it with its exit code', async () => {
    const r = await launch('fails', { fake: '0=hang,1=exit:3,2=hang' })
    expect(r.error).toBeInstanceOf(RankFailedError)
    const e = r.error as RankFailedError
    expect(e.code).toBe('RANK_FAILED')
    expect([e.rank, e.exitCode, e.signal]).toEqual([1, 3, null])
    expect(e.message).toBe(`rank 1 of 3 (pid ${r.rank(1).pid}, GPU 1) failed (exit code 3; its error is above); the other ranks were stopped`)
    expect([r.terminated(0), r.terminated(2)]).toEqual([true, true])
    for (const i of [0, 1, 2]) expect(alive(r.rank(i).pid)).toBe(false)
    expect(r.seconds).toBeLessThan(10)
  }, 30_000)

  it('a rank that dies from a signal is named with it', async () => {
    const r = await launch('killed', { fake: '0=hang,1=hang,2=kill' })
    const e = r.error as RankFailedError
    expect(e).toBeInstanceOf(RankFailedError)
    expect([e.rank, e.signal]).toEqual([2, 'SIGKILL'])
    expect(e.message).toBe(`rank 2 of 3 (pid ${r.rank(2).pid}, GPU 2) died from signal SIGKILL; the other ranks were stopped`)
    expect([r.terminated(0), r.terminated(1)]).toEqual([true, true])
  }, 30_000)

  it('a rank that ignores SIGTERM is killed after the grace period', async () => {
    const r = await launch('stubborn', { fake: '0=exit:1,1=stubborn,2=hang', graceMs: 800 })
    const e = r.error as RankFailedError
    expect([e.rank, e.exitCode]).toEqual([0, 1])
    expect(r.terminated(2)).toBe(true)
    expect(r.terminated(1)).toBe(false)
    expect(alive(r.rank(1).pid)).toBe(false)
    expect(r.seconds).toBeGreaterThanOrEqual(0.8)
    expect(r.seconds).toBeLessThan(10)
  }, 30_000)

  it('rank 0 stopped by Ctrl-C after its checkpoint (exit 130) is the command\'s exit code, not a failure', async () => {
    const r = await launch('interrupted', { fake: '0=exit:130' })
    expect(r.error).toBeNull()
    expect(r.code).toBe(130)
  }, 30_000)

  it('a rank command that does not exist is a ParallelLaunchError', async () => {
    const r = await launch('missing', { command: ['/nonexistent/node'] })
    expect(r.error).toBeInstanceOf(ParallelLaunchError)
    expect((r.error as Error).message).toMatch(/--gpus starts its ranks with \/nonexistent\/node, which was not found/)
  }, 30_000)

  it('Ctrl-C to the launcher\'s process group reaches every rank once (they run in groups of their own), and rank 0\'s 130 is the exit code', async () => {
    const out = mkdtempSync(join(root, 'sigint-'))
    const child = spawn(process.execPath, [join(import.meta.dirname, 'fixtures', 'gpu-launch.mjs'), out], { detached: true, stdio: ['ignore', 'pipe', 'inherit'] })
    let printed = ''
    child.stdout.on('data', (d: Buffer) => (printed += d.toString()))
    const closed = new Promise<number | null>((resolve) => child.on('close', resolve))
    const deadline = Date.now() + 20_000
    while (!(existsSync(join(out, 'rank-0.json')) && existsSync(join(out, 'rank-1.json'))) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
    process.kill(-child.pid!, 'SIGINT') // as a terminal's Ctrl-C: the whole foreground group
    expect(await closed).toBe(0)
    expect(printed.trim().split('\n')).toEqual(['stdout of rank 0', JSON.stringify({ code: 130 })])
    for (const r of [0, 1]) expect(readFileSync(join(out, `rank-${r}.sigint`), 'utf8')).toBe('SIGINT\n')
  }, 30_000)
})
