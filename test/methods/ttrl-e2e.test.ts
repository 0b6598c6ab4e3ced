// TTRL on the bundled model: every reward arm runs a step end to end (sampling-pass statistics,
// majority labels, gated rewards, GRPO, clipped LoRA update), the update moves the policy, a run
// resumed from its mid-run checkpoint reproduces the uninterrupted run exactly, and the per-item
// eval files feed `autodidact compare`.
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL } from '../../src/cli/evolve.js'
import { checkpointDir, drive, type DriveOptions } from '../../src/methods/common/driver.js'
import { readEvalRecord } from '../../src/methods/common/evaluation.js'
import { arithWorld } from '../../src/worlds/arith/index.js'
import { REWARD_ARMS, resolveTtrlConfig, type TtrlConfig } from '../../src/methods/ttrl/config.js'
import { TtrlRun } from '../../src/methods/ttrl/loop.js'
import { spec } from '../../src/methods/ttrl/spec.js'

const world = arithWorld({ benchmarks: ['L3', 'L2'] })
const root = mkdtempSync(join(tmpdir(), 'ad-ttrl-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const small = (over: object = {}): TtrlConfig =>
  resolveTtrlConfig({
    steps: 2,
    prompts: { offset: 0, size: 6 },
    promptsPerStep: 3,
    rollout: { n: 4, temperature: 1, topP: 1, maxTokens: 48 },
    eval: { every: 1, size: 6, benchmarks: [{ name: 'L3', size: 6 }, { name: 'L2', size: 4 }], adaptation: false, protocol: { samples: 2, temperature: 0.6, topP: 0.95, maxTokens: 48, seed: 7 } },
    checkpointEvery: 1,
    ...over,
  })

const driveOptions = (outDir: string, c: TtrlConfig, stop = false): DriveOptions => ({
  outDir,
  method: 'ttrl',
  totalSteps: c.steps,
  evalEvery: c.eval.every,
  checkpointEvery: c.checkpointEvery,
  series: spec.series,
  describe: spec.describe,
  stopRequested: stop ? () => true : undefined,
})

const metrics = (dir: string) => readFileSync(join(dir, 'metrics.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l))
const untimed = (row: unknown) => JSON.parse(JSON.stringify(row, (k, v) => (k === 'seconds' || k === 'tokensPerSecond' || k === 'mfu' ? undefined : v)))

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('TTRL on the bundled model', () => {
  it.each(REWARD_ARMS)('arm %s: one step samples with stats, rewards by Eq. 5 and updates the LoRA policy', async (arm) => {
    const run = await TtrlRun.start(DEFAULT_MODEL, small({ steps: 1, reward: { arm } }), world, { threads: 2 })
    const probe = { prompt: run.world.solve.solverPrompt('(12+7)*3'), completion: '<think>12+7=19; 19*3=57</think><answer>57</answer>' }
    const [before] = await run.model.score([probe])
    const r = await run.runStep()
    const [after] = await run.model.score([probe])
    run.dispose()
    expect(r.responses).toBe(12)
    expect(r.train.length).toBe(1) // 3 prompts in mini-batches of 4 prompts
    expect(r.train[0].skipped).toBe(false)
    expect(r.kl).not.toBeNull()
    if (arm === 'ttrl') expect(r.reward.min >= 0 && r.reward.max <= 1).toBe(true)
    else {
      expect(r.reward.min).toBeGreaterThanOrEqual(-1)
      expect(r.reward.max).toBeLessThanOrEqual(1 + 0.1 * 0.5)
      expect(r.aux.max).toBeLessThanOrEqual(0.5)
    }
    expect(r.uidEligibleRate).toBeGreaterThan(0)
    expect(Array.from(after.logprobs)).not.toEqual(Array.from(before.logprobs))
  })

  it('resumes exactly from a mid-run checkpoint and writes per-item eval files', async () => {
    const c = small({ reward: { arm: 'uid-conj', lambda: 0.1, delta: 0.5, minAgreeing: 2 } })
    const straight = join(root, 'straight')
    const run = await TtrlRun.start(DEFAULT_MODEL, c, world, { threads: 2 })
    await drive(run, driveOptions(straight, c))
    run.dispose()
    expect(metrics(straight).map((r) => r.step)).toEqual([0, 1, 2])
    expect(readdirSync(join(straight, 'evals')).sort()).toEqual(['step-000000.json', 'step-000001.json', 'step-000002.json'])
    const { record } = await readEvalRecord(straight)
    expect(record.step).toBe(2)
    expect(record.benchmarks.map((b) => [b.name, b.items.length, b.items[0].correct.length])).toEqual([['L3', 6, 2], ['L2', 4, 2]])
    expect(existsSync(join(checkpointDir(straight, 2), 'eval.json'))).toBe(true)

    const split = join(root, 'split')
    const first = await TtrlRun.start(DEFAULT_MODEL, c, world, { threads: 2 })
    await drive(first, driveOptions(split, c, true))
    first.dispose()
    const resumed = await TtrlRun.resume(checkpointDir(split, 1), world, { threads: 2 })
    expect(resumed.step).toBe(1)
    await drive(resumed, driveOptions(split, c))
    resumed.dispose()
    expect(metrics(split).map(untimed)).toEqual(metrics(straight).map(untimed))
    expect(readFileSync(join(split, 'evals', 'step-000002.json'), 'utf8')).toBe(readFileSync(join(straight, 'evals', 'step-000002.json'), 'utf8'))
  })
})
