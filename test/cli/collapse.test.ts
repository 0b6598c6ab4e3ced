// The collapse guard (issue 27) in the driver: GRPO on the scripted fake policy, scripted so that
// the training reward rises with every update while greedy held-out accuracy falls (self-play's
// known failure), and a control whose held-out accuracy holds. warn says so and goes on; stop
// ends the run; rollback ends it and makes the best evaluated checkpoint the final model (kept
// from --keep's pruning, named by latest.json). checkCollapse's definition is tested on its own.
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { evolveCommand } from '../../src/cli/evolve.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'
import { checkCollapse } from '../../src/methods/common/collapse.js'
import { checkpointDir, drive, type DriveEvent, type DriveOptions } from '../../src/methods/common/driver.js'
import { scriptedPolicies, type ScriptContext } from '../../src/methods/common/scripted-policy.js'
import { resolveGrpoConfig } from '../../src/methods/grpo/config.js'
import { GrpoRun } from '../../src/methods/grpo/loop.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { scriptedAnswer } from '../methods/arith-script.js'

const root = mkdtempSync(join(tmpdir(), 'ad-collapse-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))
const world = arithWorld()
const config = resolveGrpoConfig({ steps: 5, questions: { level: 3, perStep: 6 }, rollout: { n: 4, temperature: 1, topP: 1, maxTokens: 64 }, eval: { every: 1, size: 40, benchmarks: [] }, checkpointEvery: 1 })

/** Sampled (training) answers right more often with every update; greedy (held-out) answers less often, unless `heldOutHolds`. */
const script = (heldOutHolds: boolean) => (c: ScriptContext) => {
  const question = c.prompt.slice('Solve: '.length).split('\n')[0].trim()
  const rate = c.temperature === 0 ? (heldOutHolds ? 0.6 : Math.max(0, 0.9 - 0.3 * c.updates)) : Math.min(0.95, 0.15 + 0.25 * c.updates)
  return scriptedAnswer(question, c.uniform < rate, c.uniform)
}

async function runGuarded(name: string, o: Partial<DriveOptions>, heldOutHolds = false) {
  const run = await GrpoRun.start(join(root, 'no-such-base'), config, world, { openPolicy: scriptedPolicies({ script: script(heldOutHolds) }) })
  const events: DriveEvent[] = []
  const outDir = join(root, name)
  try {
    const result = await drive(run, { outDir, method: 'grpo', totalSteps: 5, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => '', onEvent: (e) => events.push(e), ...o })
    const rows = readFileSync(join(outDir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { step: number; heldOutAccuracy?: number; reward?: { mean: number } })
    return { result, events, outDir, rows, report: readFileSync(join(outDir, 'report.html'), 'utf8') }
  } finally {
    run.dispose()
  }
}

describe('the collapse guard on a scripted run whose reward rises while held-out accuracy falls', () => {
  it('the script does what it says: reward up, held-out down', async () => {
    const { rows } = await runGuarded('script', { onCollapse: 'warn' })
    const acc = rows.filter((r) => r.heldOutAccuracy !== undefined).map((r) => r.heldOutAccuracy!)
    const reward = rows.filter((r) => r.reward).map((r) => r.reward!.mean)
    expect(acc[0]).toBeGreaterThan(acc.at(-1)! + 0.3)
    expect(reward.at(-1)!).toBeGreaterThan(reward[0] + 0.3)
  })

  it('warn: the progress line and the report say so, the run goes on to its last step', async () => {
    const { result, events, report } = await runGuarded('warn', { onCollapse: 'warn' })
    const collapses = events.filter((e) => e.event === 'collapse')
    expect(collapses.length).toBeGreaterThan(0)
    // the first window of 3 evaluations with 3 rewards in it: steps 1–3
    expect(collapses[0]).toMatchObject({ step: 3, action: 'warn', check: { collapsed: true, from: 1, to: 3 } })
    const stepLine = events.find((e) => e.event === 'step' && e.step === 3) as { line: string }
    expect(stepLine.line).toMatch(/⚠ collapse$/)
    expect(result).toMatchObject({ stepsRun: 5, stoppedEarly: false, stopReason: null, rolledBackTo: null })
    expect(result.collapse!.drop).toBeGreaterThan(1.96 * result.collapse!.standardError)
    expect(result.collapse!.rewardSlope).toBeGreaterThan(1.96 * result.collapse!.rewardSlopeError)
    expect(report).toContain('data-alert')
    expect(report).toMatch(/The collapse guard fired \d+ times?: collapse: training reward rising/)
  })

  it('stop: the run ends at the step the guard fires, checkpointed', async () => {
    const { result, outDir } = await runGuarded('stop', { onCollapse: 'stop' })
    expect(result).toMatchObject({ stepsRun: 3, stoppedEarly: true, stopReason: 'collapse', rolledBackTo: null })
    expect(JSON.parse(readFileSync(join(outDir, 'latest.json'), 'utf8'))).toMatchObject({ step: 3 })
  })

  it('rollback: the best evaluated checkpoint (kept despite --keep 1) becomes the final model and what --resume continues from', async () => {
    const { result, outDir, rows, report } = await runGuarded('rollback', { onCollapse: 'rollback', keep: 1 })
    const evaluated = rows.filter((r) => r.step > 0 && r.step <= 3)
    const best = evaluated.reduce((b, r) => (r.heldOutAccuracy! > b.heldOutAccuracy! ? r : b))
    expect(best.step).toBe(1)
    expect(result).toMatchObject({ stopReason: 'collapse', rolledBackTo: 1, accuracyAfter: best.heldOutAccuracy, checkpoint: checkpointDir(outDir, 1) })
    expect(result.trainedModel?.dir).toBe(join(checkpointDir(outDir, 1), 'model'))
    expect(existsSync(checkpointDir(outDir, 1))).toBe(true)
    expect(JSON.parse(readFileSync(join(outDir, 'latest.json'), 'utf8'))).toMatchObject({ step: 1 })
    expect(report).toContain('Rolled back: the final model is the checkpoint of step 1')
    expect(report).toContain(`<span data-value="after">${best.heldOutAccuracy!.toFixed(3)}</span>`)
  })

  it('no alarm when held-out accuracy holds while the reward rises', async () => {
    const { result, events, report } = await runGuarded('control', { onCollapse: 'stop' }, true)
    expect(events.filter((e) => e.event === 'collapse')).toEqual([])
    expect(result).toMatchObject({ stepsRun: 5, stopReason: null, collapse: null })
    expect(report).not.toContain('data-alert')
  })
})

describe("--collapse-rule falls on a run whose reward falls with its held-out accuracy", () => {
  it('the default rule lets it run to the end; falls rolls it back to its best checkpoint, and the report names the rule', async () => {
    // a run going wrong everywhere: greedy held-out and sampled training answers both worse with every update
    const sinking = (c: ScriptContext) => {
      const question = c.prompt.slice('Solve: '.length).split('\n')[0].trim()
      const rate = c.temperature === 0 ? Math.max(0, 0.9 - 0.3 * c.updates) : Math.max(0, 0.9 - 0.25 * c.updates)
      return scriptedAnswer(question, c.uniform < rate, c.uniform)
    }
    const guarded = async (name: string, o: Partial<DriveOptions>) => {
      const run = await GrpoRun.start(join(root, 'no-such-base'), config, world, { openPolicy: scriptedPolicies({ script: sinking }) })
      try {
        const outDir = join(root, name)
        return { result: await drive(run, { outDir, method: 'grpo', totalSteps: 5, evalEvery: 1, checkpointEvery: 1, series: [], describe: () => '', onCollapse: 'rollback', ...o }), report: readFileSync(join(outDir, 'report.html'), 'utf8') }
      } finally {
        run.dispose()
      }
    }
    const plain = await guarded('sinking-default', {})
    expect(plain.result).toMatchObject({ stepsRun: 5, stopReason: null, collapse: null })
    const falls = await guarded('sinking-falls', { collapseRule: 'falls' })
    expect(falls.result).toMatchObject({ stopReason: 'collapse', rolledBackTo: 1 })
    // the first window it can judge, the base's evaluation and steps 1-2 (2 rewards in it: the slope is unknown, and not needed)
    expect(falls.result.collapse).toMatchObject({ collapsed: true, from: 0, to: 2 })
    expect(falls.result.collapse!.message).toMatch(/^collapse: held-out accuracy fell 0\.900 → .*; reward unknown$/)
    expect(falls.report).toContain('collapse guard (--collapse-rule falls)')
  })
})

describe('evolve --on-collapse / --collapse-window', () => {
  it('accepts warn, stop or rollback and a window ≥ 2, with typed errors otherwise', async () => {
    await expect(evolveCommand(['--method', 'grpo', '--on-collapse', 'panic'])).rejects.toThrow(InvalidArgumentError)
    await expect(evolveCommand(['--method', 'grpo', '--on-collapse', 'panic'])).rejects.toThrow(/--on-collapse must be warn, stop or rollback; got 'panic'/)
    await expect(evolveCommand(['--method', 'grpo', '--collapse-window', '1'])).rejects.toThrow(/--collapse-window must be an integer ≥ 2/)
    await expect(evolveCommand(['--method', 'grpo', '--collapse-rule', 'sinks'])).rejects.toThrow(/--collapse-rule must be falls-while-reward-rises or falls; got 'sinks'/)
  })
})

describe('checkCollapse', () => {
  const rising = [1, 2, 3, 4].map((step) => ({ step, reward: 0.1 * step }))
  const falling = [1, 2, 3, 4].map((step) => ({ step, reward: 1 - 0.1 * step }))
  const evals = (accs: number[], n: number | null = 100) => accs.map((accuracy, i) => ({ step: i * 2, accuracy, n }))

  it('fires when held-out fell by more than 1.96 standard errors of the difference while the reward rose beyond its own', () => {
    // SE = √((0.6·0.4 + 0.4·0.6)/100) ≈ 0.069; a drop of 0.2 is beyond 1.96 of them
    const c = checkCollapse(evals([0.6, 0.5, 0.4]), rising)!
    expect(c.collapsed).toBe(true)
    expect(c.standardError).toBeCloseTo(Math.sqrt(0.48 / 100), 12)
    expect(c.drop).toBeCloseTo(0.2, 12)
    expect(c.rewardSlope).toBeCloseTo(0.1, 12)
  })

  it('does not fire on a drop within sampling noise, a falling reward, or a reward trend lost in its noise', () => {
    expect(checkCollapse(evals([0.6, 0.5, 0.5]), rising)!.collapsed).toBe(false) // 0.1 < 1.96 × 0.069
    expect(checkCollapse(evals([0.6, 0.5, 0.4]), falling)!.collapsed).toBe(false)
    const noisy = [0.2, 0.9, 0.1, 0.95].map((reward, i) => ({ step: i + 1, reward }))
    const c = checkCollapse(evals([0.6, 0.5, 0.4]), noisy)!
    expect(c.rewardSlope).toBeGreaterThan(0)
    expect(c.collapsed).toBe(false)
  })

  it('one question lost of 50 is noise, not collapse (the paired SE is then about 1/n)', () => {
    const before = Array.from({ length: 50 }, (_, i) => (i < 30 ? 1 : 0))
    const after = before.map((v, i) => (i === 0 ? 0 : v))
    const c = checkCollapse([{ step: 0, accuracy: 0.6, n: 50, perQuestion: before }, { step: 4, accuracy: 0.6, n: 50 }, { step: 8, accuracy: 0.58, n: 50, perQuestion: after }], [1, 2, 3, 4, 5, 6, 7, 8].map((step) => ({ step, reward: 0.1 * step })))!
    expect(c.drop).toBeCloseTo(0.02, 12)
    expect(c.collapsed).toBe(false)
  })

  it('uses the paired standard error when per-question results are known', () => {
    const a = Array.from({ length: 10 }, (_, i) => (i < 8 ? 1 : 0))
    const b = Array.from({ length: 10 }, (_, i) => (i < 2 ? 1 : 0))
    const d = a.map((v, i) => v - b[i])
    const mean = d.reduce((s, x) => s + x, 0) / 10
    const se = Math.sqrt(d.reduce((s, x) => s + (x - mean) ** 2, 0) / 9 / 10)
    const c = checkCollapse([{ step: 0, accuracy: 0.8, n: 10, perQuestion: a }, { step: 2, accuracy: 0.5, n: 10 }, { step: 4, accuracy: 0.2, n: 10, perQuestion: b }], rising)!
    expect(c.standardError).toBeCloseTo(se, 12)
    expect(c.collapsed).toBe(true)
  })

  it("--collapse-rule falls: held-out falling beyond noise is collapse whatever the reward does, with or without rewards; a drop within noise is not", () => {
    const c = checkCollapse(evals([0.6, 0.5, 0.4]), falling, 3, 'falls')!
    expect(c.collapsed).toBe(true)
    expect(c.rewardSlope).toBeCloseTo(-0.1, 12)
    expect(c.message).toMatch(/^collapse: held-out accuracy fell 0\.600 → 0\.400 .*; reward slope -0\.10/)
    const unknown = checkCollapse(evals([0.6, 0.5, 0.4]), [], 3, 'falls')!
    expect(unknown.collapsed).toBe(true)
    expect(unknown.rewardSlope).toBeNaN()
    expect(unknown.message).toMatch(/reward unknown$/)
    expect(checkCollapse(evals([0.6, 0.5, 0.5]), falling, 3, 'falls')!.collapsed).toBe(false)
    // the default rule on the same falling reward does not fire
    expect(checkCollapse(evals([0.6, 0.5, 0.4]), falling)!.collapsed).toBe(false)
    expect(() => checkCollapse(evals([0.6, 0.5, 0.4]), falling, 3, 'sinks' as never)).toThrow(/collapse rule must be falls-while-reward-rises or falls/)
  })

  it('claims nothing with too few evaluations, n unknown, or fewer than 3 rewards in the window', () => {
    expect(checkCollapse(evals([0.6, 0.4]), rising)).toBeNull()
    expect(checkCollapse(evals([0.6, 0.5, 0.4], null), rising)).toBeNull()
    expect(checkCollapse(evals([0.6, 0.5, 0.4]), rising.slice(0, 2))).toBeNull()
    expect(() => checkCollapse(evals([0.6, 0.5]), rising, 1)).toThrow(RangeError)
  })
})
