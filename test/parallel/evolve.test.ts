// `autodidact evolve --ranks 2` against the 1-rank run with the same global batch, on the bundled
// model (models/arith-qwen3-tiny), as a user runs it (dist/, in child processes):
// - COSE and TTRL, 2 steps: every metric of every step within TOLERANCE (counts, flags and texts
//   exact), and every tensor of the final checkpoint (weights and AdamW moments) within it;
// - resume with a different N: the 2-rank checkpoint continued on 1 rank and the 1-rank checkpoint
//   continued on 2 ranks write the same step 3;
// - a killed rank: the command fails within the collective timeout with an error naming the rank,
//   every checkpoint on disk is whole, and the run resumes.
// The step's micro-batches are split 2 per rank, so the gradient sum of the ranks is exercised.
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { CLI, mpiUnavailable, MPI_ENV } from './mpi.js'
import { alive, processes, rankPid, type ProcessRow } from './processes.js'
import { COSE_CONFIG, differences, metrics, step, tensorDifferences, TTRL_CONFIG } from './run-compare.js'

const root = mkdtempSync(join(tmpdir(), 'ad-parallel-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const unavailable = await mpiUnavailable()
if (unavailable) console.warn(`test/parallel/evolve.test.ts: skipped: ${unavailable}`)

function config(name: string, value: object): string {
  const file = join(root, `${name}.json`)
  writeFileSync(file, JSON.stringify(value))
  return file
}

const COSE = config('cose', COSE_CONFIG)
const TTRL = config('ttrl', TTRL_CONFIG)

interface Exit {
  code: number | null
  stderr: string
  seconds: number
}

function evolve(args: string[], onStderr?: (text: string, child: ChildProcess) => void): Promise<Exit> {
  const started = Date.now()
  return new Promise((done, fail) => {
    // detached: should a signal ever reach the command's process group, it stops there, not at the test runner
    const child = spawn(process.execPath, [CLI, 'evolve', '--threads', '1', ...args], { env: MPI_ENV, stdio: ['ignore', 'ignore', 'pipe'], detached: true })
    let stderr = ''
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString()
      onStderr?.(stderr, child)
    })
    child.on('error', fail)
    child.on('close', (code) => done({ code, stderr, seconds: (Date.now() - started) / 1000 }))
  })
}

describe.skipIf(unavailable !== null)('evolve --ranks 2 equals the 1-rank run', () => {
  for (const [method, file] of [
    ['cose', COSE],
    ['ttrl', TTRL],
  ] as const) {
    it(`${method}: 2 steps on 2 ranks — the same metrics and checkpoint as on 1 rank`, async () => {
      const one = join(root, `${method}-1`)
      const two = join(root, `${method}-2`)
      const base = ['--method', method, '--config', file, '--steps', '2']
      const [a, b] = [await evolve([...base, '--out', one]), await evolve([...base, '--out', two, '--ranks', '2', '--collective-timeout', '60', '--check-weights-every', '1'])]
      expect(a.code, a.stderr).toBe(0)
      expect(b.code, b.stderr).toBe(0)
      const [ma, mb] = [metrics(one), metrics(two)]
      expect(mb.map((r) => r.step)).toEqual([0, 1, 2])
      expect(ma.flatMap((row, i) => differences(row, mb[i], `step ${row.step}`))).toEqual([])
      // the step trained (a policy update happened on both ranks' shares)
      for (const row of mb.slice(1)) expect(method === 'cose' ? (row.train as { tokens: number }).tokens : (row.train as { tokens: number }[])[0].tokens).toBeGreaterThan(0)
      const tensors = await tensorDifferences(join(one, 'checkpoints', step(2)), join(two, 'checkpoints', step(2)))
      expect(tensors.compared).toBeGreaterThan(1000)
      expect(tensors.failures).toEqual([])
      // rank 0 alone wrote the run folder
      expect(readdirSync(two).sort()).toEqual(readdirSync(one).sort())
    }, 240_000)
  }

  it('cose: the 2-rank checkpoint resumed on 1 rank and the 1-rank checkpoint resumed on 2 ranks write the same step 3', async () => {
    const one = join(root, 'cose-1')
    const two = join(root, 'cose-2')
    if (!existsSync(join(two, 'checkpoints', step(2)))) throw new Error('needs the 2-step runs of the test above')
    const c = await evolve(['--resume', two, '--steps', '3'])
    const d = await evolve(['--resume', one, '--steps', '3', '--ranks', '2', '--collective-timeout', '60'])
    expect(c.code, c.stderr).toBe(0)
    expect(d.code, d.stderr).toBe(0)
    const [mc, md] = [metrics(two), metrics(one)]
    expect(mc.map((r) => r.step)).toEqual([0, 1, 2, 3])
    expect(differences(mc[3], md[3], 'step 3')).toEqual([])
    const tensors = await tensorDifferences(join(two, 'checkpoints', step(3)), join(one, 'checkpoints', step(3)))
    expect(tensors.failures).toEqual([])
  }, 240_000)

  it('a killed rank: the command fails within the timeout naming the rank, the checkpoints on disk are whole, the run resumes', async () => {
    const out = join(root, 'killed')
    const timeout = 20
    let killedAt = 0
    let victim = 0
    const run = await evolve(['--method', 'cose', '--config', COSE, '--steps', '4', '--out', out, '--ranks', '2', '--collective-timeout', String(timeout)], (text) => {
      if (killedAt || !/step 1\/4/.test(text)) return
      victim = rankPid(1, out)
      if (!victim) return
      killedAt = Date.now()
      process.kill(victim, 'SIGKILL')
    })
    expect(killedAt, run.stderr).toBeGreaterThan(0)
    expect(run.code).toBe(2) // RankFailedError, a typed AutodidactError (RANK_FAILED)
    // (mpirun reports a rank killed from outside with pid 0: the launcher then names the node only)
    expect(run.stderr).toMatch(new RegExp(`autodidact: rank 1 of 2 \\((pid ${victim} )?on \\S+\\) died from signal 9 \\(Killed\\); the other ranks were stopped`))
    expect((Date.now() - killedAt) / 1000).toBeLessThan(timeout)
    // whatever was being written when the ranks stopped, every checkpoint folder on disk is complete
    const dirs = readdirSync(join(out, 'checkpoints')).filter((d) => /^step-\d+$/.test(d))
    expect(dirs.length).toBeGreaterThan(0)
    for (const d of dirs) expect(existsSync(join(out, 'checkpoints', d, 'run_state.json')), d).toBe(true)
    const resumed = await evolve(['--resume', out])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(metrics(out).at(-1)!.step).toBe(4)
  }, 240_000)

  it('a stuck rank: the other stops with ERR_AD_COLLECTIVE_TIMEOUT within the timeout, and the command names the rank that failed', async () => {
    const out = join(root, 'stuck')
    const timeout = 10 // long enough that a loaded machine's slow step is not taken for a stuck rank
    let stoppedAt = 0
    const run = await evolve(['--method', 'cose', '--config', COSE, '--steps', '4', '--out', out, '--ranks', '2', '--collective-timeout', String(timeout)], (text) => {
      if (stoppedAt || !/step 1\/4/.test(text)) return
      const pid = rankPid(1, out)
      if (!pid) return
      stoppedAt = Date.now()
      process.kill(pid, 'SIGSTOP') // alive but never answering (mpirun's SIGKILL ends it)
    })
    expect(stoppedAt, run.stderr).toBeGreaterThan(0)
    expect(run.code).toBe(2)
    expect(run.stderr).toMatch(/autodidact: rank 0: \[ERR_AD_COLLECTIVE_TIMEOUT\] (all-gather|broadcast|all-reduce|barrier) on rank 0 of 2 did not complete within 10000 ms/)
    expect(run.stderr).toMatch(/autodidact: rank 0 of 2 failed \(exit code 1; its error is above\); the other ranks were stopped/)
    const seconds = (Date.now() - stoppedAt) / 1000
    expect(seconds).toBeGreaterThanOrEqual(timeout)
    expect(seconds).toBeLessThan(timeout + 15)
    for (const d of readdirSync(join(out, 'checkpoints')).filter((d) => /^step-\d+$/.test(d))) expect(existsSync(join(out, 'checkpoints', d, 'run_state.json')), d).toBe(true)
  }, 240_000)

  it('Ctrl-C to the command\'s process group (as a terminal sends it): every rank stops, the command says so and exits 130, the run resumes', async () => {
    const out = join(root, 'interrupted')
    let interruptedAt = 0
    const run = await evolve(['--method', 'cose', '--config', COSE, '--steps', '400', '--out', out, '--ranks', '2'], (text, child) => {
      if (interruptedAt || !/step 2\/400/.test(text)) return
      interruptedAt = Date.now()
      process.kill(-child.pid!, 'SIGINT') // the helper starts the command as its group's leader
    })
    expect(interruptedAt, run.stderr).toBeGreaterThan(0)
    expect(run.code, run.stderr).toBe(130)
    expect(run.stderr).toMatch(/autodidact: Ctrl-C: every rank was stopped; the last whole checkpoint is in the run folder/)
    expect(run.stderr).not.toMatch(/failed/)
    expect([rankPid(0, out), rankPid(1, out)]).toEqual([0, 0])
    const next = (metrics(out).at(-1)!.step as number) + 1
    const resumed = await evolve(['--resume', out, '--steps', String(next)])
    expect(resumed.code, resumed.stderr).toBe(0)
    expect(metrics(out).at(-1)!.step).toBe(next)
  }, 120_000)

  it('mpirun runs in a process group of its own (its group kills never reach the launcher\'s job); the launcher killed outright takes mpirun and every rank with it', async () => {
    const out = join(root, 'launcher-killed')
    let seen: { mpirun: ProcessRow; launcherGroup: number | undefined; ranks: number[] } | null = null
    const run = await evolve(['--method', 'cose', '--config', COSE, '--steps', '40', '--out', out, '--ranks', '2'], (text, child) => {
      if (seen || !/step 1\/40/.test(text)) return
      const table = processes()
      const ranks = [rankPid(0, out), rankPid(1, out)]
      const mpirun = table.find((p) => p.ppid === child.pid && p.argv.join(' ').includes('mpirun'))
      if (ranks.includes(0) || !mpirun) return
      seen = { mpirun, launcherGroup: table.find((p) => p.pid === child.pid)?.pgid, ranks }
      child.kill('SIGKILL')
    })
    expect(seen, run.stderr).not.toBeNull()
    const { mpirun, launcherGroup, ranks } = seen!
    expect(run.code).toBeNull() // the launcher died from the SIGKILL
    expect(mpirun.pgid).toBe(mpirun.pid)
    expect(launcherGroup).not.toBe(mpirun.pgid)
    const deadline = Date.now() + 30_000
    while ([mpirun.pid, ...ranks].some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200))
    expect([mpirun.pid, ...ranks].filter(alive)).toEqual([])
  }, 120_000)
})
