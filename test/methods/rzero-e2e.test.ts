// R-Zero + disagreement end to end on the bundled model. (1) In process: the Solver at two
// temperatures and the Llama-architecture variant (bare conversion, healSteps 0, to stay fast);
// Challenger and Solver steps alternate, each changes only its own model, the DIS Table 2 metrics
// are recorded, and a run resumed from its mid-run checkpoint reproduces the straight run. (2) Over
// HTTP: two in-process variants plus `autodidact serve` in a child process on loopback; the served
// variant answers, then the server is killed mid-request and the step completes on the degraded
// reward, the failure counted in the metrics. (3) `--remote URL` wires a served variant by config.
import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { RemoteSampler } from '../../src/ensemble/remote.js'
import { checkpointDir, drive, type DriveOptions } from '../../src/methods/common/driver.js'
import { resolveRzeroConfig, type RzeroConfig } from '../../src/methods/rzero/config.js'
import { RzeroRun, type ChallengerRecord, type SolverRecord } from '../../src/methods/rzero/loop.js'
import { rzeroFlagsToOverride } from '../../src/methods/rzero/spec.js'
import { arithWorld } from '../../src/worlds/arith/index.js'

const arithRzeroWorld = arithWorld()

const root = mkdtempSync(join(tmpdir(), 'ad-rzero-'))
const cacheRoot = join(root, 'cache')
const children: ChildProcess[] = []
afterAll(() => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL')
  rmSync(root, { recursive: true, force: true })
})

const small = (over: Record<string, unknown> = {}): RzeroConfig =>
  resolveRzeroConfig({
    steps: 4,
    phases: { challengerSteps: 1, solverSteps: 1 },
    challenger: { batch: 6, levels: [3], temperature: 1, maxTokens: 40 },
    solver: { candidates: 6, band: [0, 1], questions: 3, n: 3, temperature: 1, maxTokens: 64 },
    eval: { every: 2, size: 8, benchmarks: [] },
    checkpointEvery: 2,
    ...over,
    ensemble: { k: 3, maxTokens: 64, second: { model: '', temperature: 0.7, healSteps: 0 }, ...(over.ensemble as object) },
  })

const driveOptions = (outDir: string, c: RzeroConfig, stop = false): DriveOptions => ({
  outDir,
  method: 'rzero',
  totalSteps: c.steps,
  evalEvery: c.eval.every,
  checkpointEvery: c.checkpointEvery,
  series: [{ title: 'r_dis', path: 'rDis.mean' }],
  describe: () => '',
  stopRequested: stop ? () => true : undefined,
})

function metrics(dir: string): Record<string, any>[] {
  return readFileSync(join(dir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
}

/** A metrics line without wall-clock fields. */
function untimed(row: Record<string, unknown>): unknown {
  return JSON.parse(JSON.stringify(row, (k, v) => (['seconds', 'tokensPerSecond', 'mfu', 'latencyMs', 'meanLatencyMs', 'maxLatencyMs'].includes(k) ? undefined : v)))
}

const probe = { prompt: arithRzeroWorld.rzero.solverPrompt('(12+7)*3'), completion: '<think>12+7=19; 19*3=57</think><answer>57</answer>' }
const qprobe = { prompt: arithRzeroWorld.rzero.challengerPrompt(3), completion: '<question>(12+7)*3</question>' }
const logprobs = async (run: RzeroRun) => [
  Array.from((await run.challenger.score([qprobe]))[0].logprobs),
  Array.from((await run.solver.score([probe]))[0].logprobs),
]

const distMain = resolve('dist/cli/main.js')

/** Starts `autodidact serve` on an ephemeral loopback port and waits for its ready line. */
async function startServe(model: string): Promise<{ url: string; child: ChildProcess }> {
  if (!existsSync(distMain)) throw new Error(`${distMain} is missing: build with \`npx tsc -p .\` first`)
  const child = spawn(process.execPath, [distMain, 'serve', '--model', model, '--port', '0', '--threads', '1'], { stdio: ['ignore', 'pipe', 'pipe'] })
  children.push(child)
  let err = ''
  child.stderr!.on('data', (d) => (err += d))
  const url = await new Promise<string>((res, rej) => {
    let out = ''
    const timer = setTimeout(() => rej(new Error(`autodidact serve did not start in 30 s: ${out}${err}`)), 30_000)
    child.stdout!.on('data', (d) => {
      out += d
      const m = out.match(/listening on (http:\/\/\S+)/)
      if (m) {
        clearTimeout(timer)
        res(m[1])
      }
    })
    child.on('exit', (code) => {
      clearTimeout(timer)
      rej(new Error(`autodidact serve exited (${code}) before listening: ${out}${err}`))
    })
  })
  return { url, child }
}

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('R-Zero + disagreement on the bundled model', () => {
  it('alternates Challenger and Solver steps over an in-process ensemble, records DIS Table 2, and resumes exactly', async () => {
    const c = small()
    const straight = join(root, 'straight')
    const run = await RzeroRun.start(DEFAULT_MODEL, c, arithRzeroWorld, { threads: 2, cacheRoot })
    expect(run.variants.map((v) => v.sampler.name)).toEqual(['solver@0.7', 'solver@1', expect.stringMatching(/^llama:llama-[0-9a-f]{16}@0\.7$/)])
    expect(run.second!.config.architecture).toBe('llama')
    const before = await logprobs(run)
    const r1 = (await run.runStep()) as ChallengerRecord
    const afterC = await logprobs(run)
    const r2 = (await run.runStep()) as SolverRecord
    const afterS = await logprobs(run)
    // the Challenger step moved only the Challenger; the Solver step only the Solver
    expect(afterC[0]).not.toEqual(before[0])
    expect(afterC[1]).toEqual(before[1])
    expect(afterS[0]).toEqual(afterC[0])
    expect(afterS[1]).not.toEqual(afterC[1])
    run.dispose()

    expect(r1.phase).toBe('challenger')
    expect(r1.questions).toBe(6)
    expect(r1.rDis.n + (1 - r1.parseRate) * 6).toBeCloseTo(6, 9)
    for (const s of [r1.rDis, r1.rUnc, r1.rRep]) if (s.n) expect(s.std).toBeGreaterThanOrEqual(0)
    if (r1.rDis.n) {
      expect(r1.rDis.min).toBeGreaterThanOrEqual(0)
      expect(r1.rDis.max).toBeLessThanOrEqual(1 + 1e-12)
      expect(r1.rUnc.max).toBeLessThanOrEqual(0.5)
    }
    expect(r1.ensemble.variants).toBe(3)
    expect(r1.ensemble.perVariant.map((v) => v.ok)).toEqual([1, 1, 1])
    expect(r1.train!.skipped).toBe(false)
    expect(r2.phase).toBe('solver')
    expect(r2.kept).toBeGreaterThan(0)
    expect(r2.reward.n).toBe(r2.kept * 3)
    expect(r2.train!.skipped).toBe(false)

    // the same run through drive(), straight and split at the step-2 checkpoint
    const a = await RzeroRun.start(DEFAULT_MODEL, c, arithRzeroWorld, { threads: 2, cacheRoot })
    await drive(a, driveOptions(straight, c))
    a.dispose()
    const rows = metrics(straight)
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2, 3, 4])
    expect(rows.slice(1).map((r) => r.phase)).toEqual(['challenger', 'solver', 'challenger', 'solver'])
    expect(untimed(rows[1])).toEqual(untimed({ ...r1 }))
    expect(existsSync(join(straight, 'report.html'))).toBe(true)
    const split = join(root, 'split')
    const b = await RzeroRun.start(DEFAULT_MODEL, c, arithRzeroWorld, { threads: 2, cacheRoot })
    await drive(b, { ...driveOptions(split, c), stopRequested: () => b.step >= 2 })
    b.dispose()
    const resumed = await RzeroRun.resume(checkpointDir(split, 2), arithRzeroWorld, { threads: 2, cacheRoot })
    expect(resumed.step).toBe(2)
    await drive(resumed, driveOptions(split, c))
    resumed.dispose()
    expect(metrics(split).map(untimed)).toEqual(rows.map(untimed))
  })

  it('queries `autodidact serve` in a child process; killed mid-request, the step completes on the degraded reward', async () => {
    const { url, child } = await startServe(DEFAULT_MODEL)
    let armed = false
    let killedInFlight = false
    // forwards to the real server; once armed, kills it while the first request is in flight
    const killingFetch: typeof fetch = (input, init) => {
      const pending = fetch(input, init)
      if (armed && String(input).endsWith('/v1/completions') && !killedInFlight) {
        killedInFlight = true
        child.kill('SIGKILL')
      }
      return pending
    }
    const remote = new RemoteSampler({ baseUrl: url, name: 'served', fetch: killingFetch, requestTimeoutMs: 20_000 })
    const c = small({ steps: 2, phases: { challengerSteps: 2, solverSteps: 0 }, ensemble: { mode: 'ensemble', second: { model: 'none', temperature: 0.7, healSteps: 0 } } })
    const run = await RzeroRun.start(DEFAULT_MODEL, c, arithRzeroWorld, { threads: 2, cacheRoot, extraVariants: [{ sampler: remote, temperature: 0.7, k: 3, timeoutMs: 20_000 }] })
    expect(run.variants.map((v) => v.sampler.name)).toEqual(['solver@0.7', 'solver@1', 'served'])
    const first = (await run.runStep()) as ChallengerRecord
    expect(first.ensemble.perVariant.map((v) => [v.name, v.ok, v.errors, v.timeouts])).toEqual([['solver@0.7', 1, 0, 0], ['solver@1', 1, 0, 0], ['served', 1, 0, 0]])
    expect(first.ensemble.responding).toBe(3)
    expect(first.ensemble.perVariant[2].meanLatencyMs).toBeGreaterThan(0)

    armed = true
    const second = (await run.runStep()) as ChallengerRecord
    run.dispose()
    expect(killedInFlight).toBe(true)
    expect(second.ensemble.variants).toBe(3)
    expect(second.ensemble.responding).toBe(2)
    expect(second.ensemble.errors).toBe(1)
    expect(second.ensemble.perVariant[2].lastError).toMatch(/served: .*\/v1\/completions/)
    expect(second.skipped).toBeNull()
    expect(second.train!.skipped).toBe(false)
    // the degraded reward: r_dis over the two responding variants can only be 0 or 1 (1-vs-1 split)
    expect(second.rDis.n).toBeGreaterThan(0)
    for (const x of [second.rDis.min, second.rDis.max]) expect([0, 1].some((v) => Math.abs(x - v) < 1e-12)).toBe(true)
  })

  it('wires a served variant from `--remote URL` (config path), model id from /v1/models', async () => {
    const { url, child } = await startServe(DEFAULT_MODEL)
    const c = resolveRzeroConfig(rzeroFlagsToOverride({ remote: url }), small({ steps: 1, phases: { challengerSteps: 1, solverSteps: 0 }, ensemble: { second: { model: 'none', temperature: 0.7, healSteps: 0 } } }))
    expect(c.reward.beta).toBe(1)
    const run = await RzeroRun.start(DEFAULT_MODEL, c, arithRzeroWorld, { threads: 2, cacheRoot })
    expect(run.variants.map((v) => v.sampler.name)).toEqual(['solver@0.7', 'solver@1', `remote:${url}`])
    const r = (await run.runStep()) as ChallengerRecord
    run.dispose()
    child.kill('SIGKILL')
    expect(r.ensemble.perVariant.map((v) => v.ok)).toEqual([1, 1, 1])
    expect(r.rDis.n).toBeGreaterThan(0)
  })
})
