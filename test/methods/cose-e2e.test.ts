// COSE end to end on the bundled model: two small iterations, the buffer fills, weights lie in
// [0.1, 1], a Solver update changes the policy, and a run resumed from its mid-run checkpoint
// reproduces the uninterrupted run's metrics exactly. Switches change only what they name.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { checkpointDir, drive, type DriveOptions } from '../../src/methods/common/driver.js'
import { resolveCoseConfig, type CoseConfig } from '../../src/methods/cose/config.js'
import { CoseRun } from '../../src/methods/cose/loop.js'
import { arithWorld as toyWorld } from '../../src/worlds/arith/index.js'

const arithWorld = toyWorld()

const root = mkdtempSync(join(tmpdir(), 'ad-cose-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const small = (over: object = {}): CoseConfig =>
  resolveCoseConfig({
    steps: 2,
    proposer: { count: 6, levels: [2, 3], temperature: 1, maxTokens: 40 },
    solver: { questions: 3, n: 3, temperature: 1, maxTokens: 64 },
    eval: { every: 1, size: 8, benchmarks: [] },
    checkpointEvery: 1,
    ...over,
  })

const driveOptions = (outDir: string, c: CoseConfig, stopAfter?: number): DriveOptions => ({
  outDir,
  method: 'cose',
  totalSteps: c.steps,
  evalEvery: c.eval.every,
  checkpointEvery: c.checkpointEvery,
  series: [{ title: 'acc', path: 'heldOutAccuracy' }],
  describe: () => '',
  stopRequested: stopAfter === undefined ? undefined : () => true,
})

function metrics(dir: string): Record<string, unknown>[] {
  return readFileSync(join(dir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
}

/** A metrics line without its timings (wall-clock fields differ between runs). */
function untimed(row: Record<string, unknown>): unknown {
  return JSON.parse(JSON.stringify(row, (k, v) => (k === 'seconds' || k === 'tokensPerSecond' || k === 'mfu' ? undefined : v)))
}

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('COSE on the bundled model', () => {
  it('runs, fills the buffer, keeps weights in [0.1, 1], updates the Solver, and resumes exactly', async () => {
    const c = small()
    const straightDir = join(root, 'straight')
    const run = await CoseRun.start(DEFAULT_MODEL, c, arithWorld, { threads: 2 })
    const probe = { prompt: arithWorld.cose.solverPrompt('(12+7)*3'), completion: '<think>12+7=19; 19*3=57</think><answer>57</answer>' }
    const [before] = await run.model.score([{ prompt: probe.prompt, completion: probe.completion }])
    const result = await drive(run, driveOptions(straightDir, c))
    const [after] = await run.model.score([{ prompt: probe.prompt, completion: probe.completion }])
    run.dispose()
    expect(result.stepsRun).toBe(2)
    const rows = metrics(straightDir)
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2])
    const steps = rows.slice(1) as any[]
    expect(Math.max(...steps.map((r) => r.bufferSize))).toBeGreaterThan(0)
    for (const r of steps) {
      for (const w of [r.weightSolver, r.weightProposer]) if (w.n) expect(w.min >= 0.1 && w.max <= 1).toBe(true)
      expect(r.train.skipped).toBe(false)
    }
    expect(steps.some((r) => r.questionsSolved > 0)).toBe(true)
    expect(Array.from(after.logprobs)).not.toEqual(Array.from(before.logprobs))
    expect(existsSync(join(straightDir, 'report.html'))).toBe(true)

    // stop after step 1 (checkpoint), resume from it, finish: the same metrics, bit for bit
    const splitDir = join(root, 'split')
    const first = await CoseRun.start(DEFAULT_MODEL, c, arithWorld, { threads: 2 })
    const r1 = await drive(first, driveOptions(splitDir, c, 1))
    first.dispose()
    expect(r1.stoppedEarly).toBe(true)
    const resumed = await CoseRun.resume(checkpointDir(splitDir, 1), arithWorld, { threads: 2 })
    expect(resumed.step).toBe(1)
    await drive(resumed, driveOptions(splitDir, c))
    resumed.dispose()
    expect(metrics(splitDir).map(untimed)).toEqual(metrics(straightDir).map(untimed))
  })

  it('switches change exactly what they name', async () => {
    const records = async (over: object) => {
      const run = await CoseRun.start(DEFAULT_MODEL, small({ steps: 1, ...over }), arithWorld, { threads: 2 })
      const r = await run.runStep()
      run.dispose()
      return untimed(r as unknown as Record<string, unknown>) as any
    }
    const base = await records({})
    const unweighted = await records({ switches: { weighting: false, priority: 'cose' } })
    for (const w of [unweighted.weightSolver, unweighted.weightProposer]) if (w.n) expect([w.min, w.max]).toEqual([1, 1])
    // everything before the update is identical; only weights and the update differ
    const strip = (r: any) => ({ ...r, weightSolver: undefined, weightProposer: undefined, train: undefined })
    expect(strip(unweighted)).toEqual(strip(base))
    const uniform = await records({ switches: { weighting: true, priority: 'uniform' } })
    // one step: the sampled questions are this step's accepted proposals first, so rewards match;
    // the priority mode shows in the buffer's priorities
    if (uniform.questionsSolved > 0) expect(uniform.prioritySpread.max).toBe(uniform.prioritySpread.min)
    expect(uniform.rewardProposer).toEqual(base.rewardProposer)
  })

  it("the 'verifier' Judge control scores the same answers by the world's verifier, with full confidence", async () => {
    const step = async (judge: string) => {
      const run = await CoseRun.start(DEFAULT_MODEL, small({ steps: 1, switches: { judge } }), arithWorld, { threads: 2 })
      const r = await run.runStep()
      run.dispose()
      return untimed(r as unknown as Record<string, unknown>) as any
    }
    const policy = await step('policy')
    const verifier = await step('verifier')
    expect(verifier.questionsSolved).toBeGreaterThan(0)
    // the Proposer, the Validator and the Solver's answers are the same; only the verdicts (and so p(q) and r_P, Eq. 8) differ
    for (const k of ['proposals', 'acceptRate', 'questionsSolved', 'solverFormatRate', 'weightProposer'] as const) expect(verifier[k]).toEqual(policy[k])
    expect(verifier.diagnostics.trueSolveRate).toEqual(policy.diagnostics.trueSolveRate)
    // every verdict is the verifier's: p(q, a) agrees with it, p(q) is the true solve rate, c_J = 1, no Judge ran
    expect(verifier.diagnostics.judgeVerifierAgreement).toBe(1)
    expect(verifier.diagnostics.solveRateError).toBe(0)
    expect([verifier.confidenceJudge.min, verifier.confidenceJudge.max]).toEqual([1, 1])
    expect(verifier.judgeFormatRate).toBeNull() // NaN in the record: no Judge output to parse
    expect(policy.judgeFormatRate).toBeGreaterThan(0)
    expect(verifier.generatedTokens).toBeLessThan(policy.generatedTokens)
  })

  it("a frozen Judge model with the policy's own weights gives the policy Judge's step exactly (same verdicts, same c_J)", async () => {
    const step = async (over: Record<string, unknown>) => {
      const run = await CoseRun.start(DEFAULT_MODEL, small({ steps: 1, ...over }), arithWorld, { threads: 2 })
      const r = await run.runStep()
      run.dispose()
      return untimed(r as unknown as Record<string, unknown>) as any
    }
    const policy = await step({ switches: { judge: 'policy' } })
    const model = await step({ switches: { judge: 'model' }, judge: { model: DEFAULT_MODEL } })
    expect(model.questionsSolved).toBeGreaterThan(0)
    expect(model).toEqual(policy)
    // a Judge folder that is not there is a typed error before any step, naming it
    await expect(CoseRun.start(DEFAULT_MODEL, small({ switches: { judge: 'model' }, judge: { model: join(root, 'no-such-judge') } }), arithWorld, { threads: 2 })).rejects.toThrow(/no-such-judge: model folder not found/)
  })

  it("refuses an unknown Judge source", () => {
    expect(() => small({ switches: { judge: 'oracle' } })).toThrow(/switches\.judge/)
  })
})
