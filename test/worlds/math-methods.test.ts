// Every method command on `--world math` with a user-shaped model: a tiny random Qwen3 carrying the
// real Qwen3 tokenizer and chat template. Each runs 2 steps through `autodidact evolve`,
// checkpoints, and a run stopped after step 1 and resumed with --resume reproduces the straight
// run's metrics and evaluation files exactly. A random model's outputs are garbage: they are
// format failures (penalties), never a crash. The offline methods need verified responses in
// their pool, which a random model never writes: they run on the same tiny model after a few SFT
// steps on a problem set whose answers are all 7 (and on the random one they stop with a typed
// error). KL terms are off in these configs: a full fine-tuning KL would load a frozen copy of the
// model, and each load parses the 11 MB tokenizer again.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { evolveCommand } from '../../src/cli/evolve.js'
import { AutodidactError } from '../../src/engine/errors.js'
import { methodNamed } from '../../src/methods/index.js'
import { loadWorld } from '../../src/worlds/load.js'
import { BUNDLED_MATH_BENCHMARKS, BUNDLED_MATH_TRAIN } from '../../src/worlds/math/world.js'
import { qwen3TokenizerDir, teachAnswers, writeTinyQwen3 } from '../helpers/qwen3-tiny.js'

const root = mkdtempSync(join(tmpdir(), 'ad-math-methods-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

const tiny = join(root, 'qwen3-tiny')
const data = join(root, 'train.jsonl')
const bench = join(root, 'held-out.jsonl')
const world = (d = data) => ['--world', 'math', '--data', d, '--benchmarks', bench, '--no-thinking']

beforeAll(async () => {
  if (!qwen3TokenizerDir()) return
  await writeTinyQwen3(tiny)
  // ten training problems (TTRL's prompts, the training problems) and three held-out ones, from the bundled sets
  writeFileSync(data, readFileSync(BUNDLED_MATH_TRAIN, 'utf8').split('\n').slice(0, 10).join('\n') + '\n')
  writeFileSync(bench, readFileSync(BUNDLED_MATH_BENCHMARKS[2], 'utf8').split('\n').slice(0, 3).join('\n') + '\n')
}, 120_000)

/** Runs evolve with console and stderr captured; its exit code. */
async function evolve(args: string[]): Promise<number> {
  const log = vi.spyOn(console, 'log').mockImplementation(() => {})
  const err = vi.spyOn(process.stderr, 'write').mockImplementation(() => true)
  try {
    return await evolveCommand(args)
  } finally {
    log.mockRestore()
    err.mockRestore()
  }
}

const WALL_CLOCK = ['seconds', 'tokensPerSecond', 'mfu', 'latencyMs', 'meanLatencyMs', 'maxLatencyMs']
const rowsOf = (dir: string) => readFileSync(join(dir, 'metrics.jsonl'), 'utf8').trim().split('\n').map((l) => JSON.parse(l, (k, v) => (WALL_CLOCK.includes(k) ? undefined : v)))
const evalFiles = (dir: string) => readdirSync(join(dir, 'evals')).sort().map((f) => readFileSync(join(dir, 'evals', f), 'utf8'))

const tokens = 12
const evalBlock = { every: 1, size: 2, benchmarks: [] }
const sampled = { samples: 1, temperature: 0.6, topP: 0.95, maxTokens: tokens, seed: 7 }
const noKl = { klCoef: 0 }
const CONFIGS: Record<string, object> = {
  cose: {
    ppo: noKl,
    proposer: { count: 3, levels: [3], temperature: 1, maxTokens: tokens },
    validator: { temperature: 1, maxTokens: tokens, acceptThreshold: 0.5 },
    solver: { questions: 2, n: 2, temperature: 1, maxTokens: tokens },
    judge: { temperature: 1, maxTokens: tokens },
    eval: evalBlock,
  },
  ttrl: {
    prompts: { offset: 0, size: 4 },
    promptsPerStep: 2,
    rollout: { n: 2, temperature: 1, topP: 1, maxTokens: tokens },
    scoring: { topK: 25, bins: 2, minTokens: 2 },
    eval: { ...evalBlock, adaptation: true, protocol: sampled },
  },
  rzero: {
    grpo: noKl,
    phases: { challengerSteps: 1, solverSteps: 1 },
    challenger: { batch: 3, levels: [3], temperature: 1, maxTokens: tokens },
    ensemble: { k: 2, maxTokens: tokens },
    solver: { candidates: 3, band: [0, 1], questions: 2, n: 2, temperature: 1, maxTokens: tokens },
    eval: evalBlock,
  },
  jzero: {
    challenger: { steps: 1, batch: 2, rollouts: 1, solverSamples: 2, maxTokens: tokens, ...noKl },
    selection: { pool: 3, keep: 2, samples: 2 },
    solver: { steps: 1, batch: 2, miniBatch: 2, rollouts: 2, maxTokens: tokens, ...noKl },
    judge: { steps: 1, batch: 2, tasks: 2 },
    eval: { ...evalBlock, judgePairs: 2 },
  },
  grpo: { questions: { level: 3, perStep: 2 }, rollout: { n: 2, temperature: 1, topP: 1, maxTokens: tokens }, eval: evalBlock },
}
const offline = (steps: number) => ({
  steps,
  pool: { prompts: 4, calibrationPrompts: 4, k: 6, temperature: 1, topP: 1, maxTokens: 24, scoring: { topK: 25, bins: 2, minTokens: 2 } },
  warmStart: { lr: 1e-3, batchSize: 8, epochs: 1 },
  train: { batchSize: 4, loraRank: 2, loraAlpha: 4, microBatchSize: 8 },
  eval: { ...evalBlock, protocol: { ...sampled, maxTokens: 24 } },
})
CONFIGS.dpo = { ...offline(2), pairs: { minGap: 0, commonMethods: ['sc', 'uid-conj'] } }
CONFIGS.wsft = offline(2)

/**
 * Straight for 2 steps through evolve; and the same configured run stopped after step 1 (as
 * Ctrl-C stops it: checkpointed) and continued by `evolve --resume`, which reads the method and
 * the world from the run folder. Returns both run folders.
 */
async function straightAndResumed(method: string, model: string, d = data): Promise<{ straight: string; split: string }> {
  const config = join(root, `${method}.json`)
  const override = { ...CONFIGS[method], checkpointEvery: 1 }
  writeFileSync(config, JSON.stringify(override))
  const straight = join(root, `${method}-straight`)
  const split = join(root, `${method}-split`)
  expect(await evolve(['--method', method, '--model', model, '--config', config, '--threads', '1', '--steps', '2', '--out', straight, ...world(d)])).toBe(0)
  const session = await methodNamed(method)!
    .configure({ override, file: config, steps: 2 })
    .start({ model, world: await loadWorld({ world: 'math', data: d, benchmarks: [bench], thinking: false }), outDir: split, threads: 1 })
  try {
    expect((await session.drive({ outDir: split, totalSteps: 2, stopRequested: () => true })).stoppedEarly).toBe(true)
  } finally {
    session.dispose()
  }
  expect(await evolve(['--resume', split, '--threads', '1'])).toBe(0)
  return { straight, split }
}

describe.skipIf(!qwen3TokenizerDir())('the method commands on --world math with a tiny random Qwen3 (real tokenizer)', () => {
  it.each(['cose', 'ttrl', 'rzero', 'jzero', 'grpo'])('%s: 2 steps, checkpoints, resumes exactly; malformed outputs are format failures', async (method) => {
    const { straight, split } = await straightAndResumed(method, tiny)
    const rows = rowsOf(straight)
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2])
    expect(rowsOf(split)).toEqual(rows)
    expect(evalFiles(split)).toEqual(evalFiles(straight))
    expect(existsSync(join(straight, 'checkpoints', 'step-000002', 'run_state.json'))).toBe(true)
    const state = JSON.parse(readFileSync(join(straight, 'checkpoints', 'step-000002', 'run_state.json'), 'utf8'))
    expect(state.world).toEqual({ name: 'math', spec: { world: 'math', data, benchmarks: [bench], thinking: false } })
    // every evaluation is on the world's benchmarks, every answer of a random model wrong
    const ev = JSON.parse(evalFiles(straight).at(-1)!)
    expect(ev.benchmarks.map((b: { name: string }) => b.name)).toEqual(method === 'ttrl' ? ['adapt', 'held-out'] : ['held-out'])
    for (const r of rows) expect(r.heldOutAccuracy ?? 0).toBe(0)
    const step = rows[1]
    if (method === 'cose') expect([step.proposerFormatRate, step.acceptRate]).toEqual([0, 0])
    if (method === 'rzero') expect([step.phase, step.parseRate, step.reward.mean]).toEqual(['challenger', 0, -1]) // DIS §4.3: a parse failure earns −1
    if (method === 'jzero') {
      expect(step.challenger.formatRate).toBe(0)
      expect(step.challenger.reward.max).toBe(-1) // JZ Eq. 6: a format failure earns −1 − r_rep
      expect(Number.isFinite(step.judgeAccuracy)).toBe(true) // the fresh score head measured on the benchmarks' preference pairs
    }
    if (method === 'grpo' || method === 'ttrl') expect(step.reward.n).toBeGreaterThan(0)
  }, 240_000)

  it('dpo on the random model: a typed error — it never finishes an answer, so its pool has nothing to calibrate or learn from', async () => {
    const config = join(root, 'dpo-random.json')
    writeFileSync(config, JSON.stringify({ ...CONFIGS.dpo, checkpointEvery: 1 }))
    const out = join(root, 'dpo-random')
    const err = await evolve(['--method', 'dpo', '--model', tiny, '--config', config, '--threads', '1', '--steps', '2', '--out', out, ...world()]).catch((e) => e)
    expect(err).toBeInstanceOf(AutodidactError)
    expect((err as Error).message).toMatch(/the calibration split gave no eligible response/)
    expect(existsSync(join(out, 'pool', 'pool.json'))).toBe(false) // no half-made pool is left behind
  }, 240_000)

})

describe.skipIf(!qwen3TokenizerDir())('the offline commands on --world math with the tiny Qwen3 taught to answer 7', () => {
  const taught = join(root, 'qwen3-tiny-taught')
  const sevens = join(root, 'sevens.jsonl')
  beforeAll(async () => {
    // every answer is 7: a dozen SFT steps teach the tiny model to say so, in three phrasings (distinct verified responses for DPO's pairs)
    const problems = ['3 + 4', '10 - 3', '14 / 2', '1 + 6', '9 - 2', '21 / 3'].map((e, i) => ({ id: `s${i}`, question: `What is ${e}?`, answer: '7' }))
    writeFileSync(sevens, problems.map((p) => JSON.stringify({ problem: p.question, answer: p.answer })).join('\n') + '\n')
    const w = await loadWorld({ world: 'math', data: sevens, benchmarks: [bench], thinking: false })
    await teachAnswers(tiny, taught, problems, (q) => w.solve.poolPrompt(q), 12)
  }, 240_000)

  it.each(['dpo', 'wsft'])('%s: 2 steps, checkpoints, resumes exactly; the pool stays in the run folder', async (method) => {
    const { straight, split } = await straightAndResumed(method, taught, sevens)
    const rows = rowsOf(straight)
    expect(rows.map((r) => r.step)).toEqual([0, 1, 2])
    expect(rowsOf(split)).toEqual(rows)
    expect(evalFiles(split)).toEqual(evalFiles(straight))
    expect(rows[1].train.skipped).toBe(false)
    expect(existsSync(join(straight, 'pool', 'pool.json'))).toBe(true)
  }, 240_000)
})

it('AutodidactError is what a bad world gives evolve', async () => {
  await expect(evolve(['--method', 'cose', '--world', join(root, 'no-such-world.js'), '--steps', '1', '--out', join(root, 'x')])).rejects.toBeInstanceOf(AutodidactError)
})
