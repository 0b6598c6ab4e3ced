// J-Zero end to end on the bundled policy and toy Judge: one iteration runs all three stages
// (Challenger GRPO, dispersion selection + Solver GRPO, Judge Bradley–Terry), the Judge's steps
// improve its ordering of its own training pairs, both policies move, a frozen Judge does not,
// and a run resumed from its mid-run checkpoint reproduces the uninterrupted run exactly.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'
import { checkpointDir, drive, type DriveOptions } from '../../src/methods/common/driver.js'
import { resolveJzeroConfig, type JzeroConfig } from '../../src/methods/jzero/config.js'
import { JzeroRun } from '../../src/methods/jzero/loop.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { DEFAULT_TOY_JUDGE_DIR } from '../../src/toymodel/judge.js'

const world = arithWorld()
const root = mkdtempSync(join(tmpdir(), 'ad-jzero-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

// every stage, small: 2 Challenger steps of 6 tasks, a pool of 10 → 4 kept, 2 Solver steps, 4 Judge steps on 12 tasks
const small = (over: object = {}): JzeroConfig =>
  resolveJzeroConfig({
    steps: 1,
    challenger: { steps: 2, batch: 6, rollouts: 1, solverSamples: 3 },
    selection: { pool: 10, keep: 4, samples: 3 },
    solver: { steps: 2, batch: 4, miniBatch: 2, rollouts: 3 },
    judge: { steps: 4, batch: 8, tasks: 12, lr: 1e-4 },
    eval: { every: 1, size: 8, benchmarks: [], judgePairs: 4 },
    checkpointEvery: 1,
    ...over,
  })

const driveOptions = (outDir: string, c: JzeroConfig, stop = false): DriveOptions => ({
  outDir,
  method: 'jzero',
  totalSteps: c.steps,
  evalEvery: c.eval.every,
  checkpointEvery: c.checkpointEvery,
  series: [{ title: 'acc', path: 'heldOutAccuracy' }],
  describe: () => '',
  stopRequested: stop ? () => true : undefined,
})

function metrics(dir: string): Record<string, unknown>[] {
  return readFileSync(join(dir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
}

/** A metrics line without its timings (wall-clock fields differ between runs). */
function untimed(row: Record<string, unknown>): unknown {
  return JSON.parse(JSON.stringify(row, (k, v) => (k === 'seconds' || k === 'tokensPerSecond' || k === 'mfu' ? undefined : v)))
}

const probe = { prompt: world.jzero.solverPrompt('(12+7)*3'), completion: '<think>12+7=19; 19*3=57</think><answer>57</answer>' }
const judgeProbe = world.jzero.judgeInput('(12+7)*3', probe.completion)

const haveModels = existsSync(join(DEFAULT_MODEL, 'model.safetensors')) && existsSync(join(DEFAULT_TOY_JUDGE_DIR, 'model.safetensors'))

describe.skipIf(!haveModels)('J-Zero on the bundled models', () => {
  it('one iteration runs all three stages; the Judge orders its training pairs better after its steps', async () => {
    const run = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, small(), world, { threads: 2 })
    const [cBefore] = await run.challenger.score([probe])
    const [sBefore] = await run.solver.score([probe])
    const [jBefore] = await run.judge.rewardScores([judgeProbe])
    const r = await run.runStep()
    const [cAfter] = await run.challenger.score([probe])
    const [sAfter] = await run.solver.score([probe])
    const [jAfter] = await run.judge.rewardScores([judgeProbe])
    run.dispose()
    // Stage 1: the Challenger's GRPO group of 6 tasks; rewards obey Eq. 6's range
    expect(r.challenger.tasks).toBe(6)
    expect(r.challenger.train.updates).toBe(2)
    expect(r.challenger.reward.min).toBeGreaterThanOrEqual(-2)
    expect(r.challenger.reward.max).toBeLessThanOrEqual(1)
    expect(Array.from(cAfter.logprobs)).not.toEqual(Array.from(cBefore.logprobs))
    // selection keeps the largest dispersions (Eq. 8), then Solver steps with mini-batches: 2 steps × 2 updates
    expect(r.selection.kept).toBe(Math.min(4, r.selection.candidates))
    expect(r.selection.dispersionKept.min).toBeGreaterThanOrEqual(r.selection.dispersionAll.min)
    expect(r.solver.train.updates).toBe(4)
    expect(r.solver.reward.min).toBeGreaterThan(0)
    expect(r.solver.reward.max).toBeLessThan(1)
    expect(Array.from(sAfter.logprobs)).not.toEqual(Array.from(sBefore.logprobs))
    // Stage 3: pairs of both kinds, in equal numbers, 4 Bradley–Terry steps that raise the margin on them
    expect(r.judge.rolePairs).toBeGreaterThan(0)
    expect(r.judge.ampPairs).toBeGreaterThan(0)
    expect(r.judge.trainPairs).toBe(2 * Math.min(r.judge.rolePairs, r.judge.ampPairs))
    expect(r.judge.train?.updates).toBe(4)
    expect(r.judge.trainPairMargin.after).toBeGreaterThan(r.judge.trainPairMargin.before)
    expect(r.judge.trainPairAccuracy.after).toBeGreaterThan(r.judge.trainPairAccuracy.before)
    expect(jAfter).not.toBe(jBefore)
    for (const k of ['role', 'amp'] as const) {
      const w = r.judge.winRate[k]
      expect(w.wins + w.losses + w.ties).toBe(k === 'role' ? r.judge.rolePairs : r.judge.ampPairs)
    }
    expect(r.judgeAccuracy).toBeGreaterThanOrEqual(0)
    expect(r.judgeAccuracy).toBeLessThanOrEqual(1)
    expect(r.generatedTokens).toBeGreaterThan(0)
  })

  it('a frozen Judge ("− Judge") keeps its weights; switched-off pairs are built for measurement only', async () => {
    const run = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, small({ switches: { trainJudge: false } }), world, { threads: 2 })
    const [jBefore] = await run.judge.rewardScores([judgeProbe])
    const r = await run.runStep()
    const [jAfter] = await run.judge.rewardScores([judgeProbe])
    run.dispose()
    expect(jAfter).toBe(jBefore)
    expect(r.judge.train).toBeNull()
    expect(r.judge.heldOut.after).toBe(r.judge.heldOut.before)
    expect(r.judge.trainPairMargin.after).toBe(r.judge.trainPairMargin.before)
  })

  it('resumes from a mid-run checkpoint exactly (all three models and optimizers)', async () => {
    const c = small({ steps: 2, challenger: { steps: 1, batch: 4, rollouts: 1, solverSamples: 2 }, solver: { steps: 1, batch: 3, miniBatch: 3, rollouts: 2 }, selection: { pool: 6, keep: 3, samples: 2 }, judge: { steps: 2, batch: 4, tasks: 6, lr: 1e-4 } })
    const straightDir = join(root, 'straight')
    const run = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, c, world, { threads: 2 })
    await drive(run, driveOptions(straightDir, c))
    run.dispose()
    const splitDir = join(root, 'split')
    const first = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, c, world, { threads: 2 })
    expect((await drive(first, driveOptions(splitDir, c, true))).stoppedEarly).toBe(true)
    first.dispose()
    const ckpt = checkpointDir(splitDir, 1)
    for (const f of ['challenger', 'solver', 'judge', 'challenger-state', 'solver-state', 'judge-state', 'run_state.json']) expect(existsSync(join(ckpt, f))).toBe(true)
    const resumed = await JzeroRun.resume(ckpt, world, { threads: 2 })
    expect(resumed.step).toBe(1)
    await drive(resumed, driveOptions(splitDir, c))
    resumed.dispose()
    expect(metrics(splitDir).map(untimed)).toEqual(metrics(straightDir).map(untimed))
    expect(existsSync(join(straightDir, 'report.html'))).toBe(true)
  })

  it('a Judge folder without a scalar score head is refused with a clear error', async () => {
    await expect(JzeroRun.start(DEFAULT_MODEL, DEFAULT_MODEL, small(), world, { threads: 2 })).rejects.toThrow(InvalidArgumentError)
    await expect(JzeroRun.start(DEFAULT_MODEL, DEFAULT_MODEL, small(), world, { threads: 2 })).rejects.toThrow(/ForSequenceClassification/)
  })
})
