// A run's frozenWeights on the bundled model (f32 on disk), through a one-step GRPO run with a KL
// term and full fine-tuning (so a frozen reference copy is opened):
//  - the reference is opened with the run's frozenWeights (the engine reports its storage and its
//    bytes: bf16 2 per Linear / LM head / embedding weight, int8 1 per weight + 2 per row block of 32), the trained policy f32;
//  - the policy samples the same sequences in every run (it is f32 in all three), so the step's KL
//    terms differ only through the reference. The KL term is k3 (verl low_var_kl) averaged with
//    coefficients 1/N (token-mean over the step's N tokens), and k3(x) = eˣ − 1 − x with
//    x = ref − logp; with δ_t the |Δ log π_ref| the reference's weight storage makes on token t
//    (measured here against the f32 reference) and the f32 run's own |x| ≤ η (its KL is 0),
//    (1/N) Σ_t k3(−(δ_t−η)) ≤ KL ≤ (1/N) Σ_t k3(δ_t+η), and KL_f32 = 0: the KL term moves by the
//    weights' error, no more and no less (measured on 188 tokens: bf16 KL 1.867e-6, upper bound
//    1.880e-6; int8 6.213e-5, bound 6.221e-5);
//  - max_t δ_t itself is bounded: bf16 ≤ 0.05, int8 ≤ 0.3 (measured 0.016 and 0.135);
//  - J-Zero with a frozen Judge: the Judge folder is opened with the run's frozenWeights, its
//    checkpoint role folder is a byte copy of that folder (a model kept below f32 cannot write
//    its weights back), and a resumed run's Judge is kept the same way and scores the same bits;
//  - a bad value is a ConfigError naming the field, from a config file and from --frozen-weights;
//    on --device cuda anything but f32 is refused before anything loads.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_MODEL, evolveCommand } from '../../src/cli/evolve.js'
import { ConfigError, InvalidArgumentError, loadModel, type Model } from '../../src/index.js'
import { EnginePolicy, openPolicy, type OpenPolicy, type Policy, type PolicyRef } from '../../src/methods/common/policy.js'
import { resolveGrpoConfig } from '../../src/methods/grpo/config.js'
import { GrpoRun } from '../../src/methods/grpo/loop.js'
import { resolveJzeroConfig } from '../../src/methods/jzero/config.js'
import { JzeroRun } from '../../src/methods/jzero/loop.js'
import { DEFAULT_TOY_JUDGE_DIR } from '../../src/toymodel/judge.js'
import { spec as grpoSpec } from '../../src/methods/grpo/spec.js'
import type { FrozenWeights } from '../../src/engine/options.js'
import type { TrainSequence } from '../../src/train/trainer.js'
import { arithWorld as toyWorld } from '../../src/worlds/arith/index.js'

const arithWorld = toyWorld()
const KEPT = /(_proj\.weight|lm_head\.weight|embed_tokens\.weight)$/

interface Opened {
  ref: PolicyRef
  policy: Policy
}

/** The engine's openPolicy, recording what was opened and every batch a trainer steps on. */
function recordingOpen(opened: Opened[], batches: TrainSequence[][]): OpenPolicy {
  return async (ref) => {
    const policy = await openPolicy(ref)
    opened.push({ ref, policy })
    const trainer = policy.trainer.bind(policy)
    policy.trainer = async (o) => {
      const t = await trainer(o)
      const step = t.step.bind(t)
      t.step = (batch) => {
        batches.push(batch.sequences.map((s) => ({ ...s })))
        return step(batch)
      }
      return t
    }
    return policy
  }
}

const engineModel = (p: Policy): Model => (p as EnginePolicy).model

/** The largest and least k3 of a token whose |ref − logp| is a: k3(x) = eˣ − 1 − x is larger for x > 0. */
const k3Max = (a: number) => Math.expm1(a) - a
const k3Min = (a: number) => Math.expm1(-a) + a

async function oneStep(frozenWeights: FrozenWeights) {
  const config = resolveGrpoConfig({
    steps: 1,
    frozenWeights,
    questions: { level: 2, perStep: 2 },
    rollout: { n: 4, temperature: 1, topP: 1, maxTokens: 24 },
    ppo: { klCoef: 0.1, loraRank: 0, microBatchSize: 8 },
  })
  const opened: Opened[] = []
  const batches: TrainSequence[][] = []
  const run = await GrpoRun.start(DEFAULT_MODEL, config, arithWorld, { threads: 2, openPolicy: recordingOpen(opened, batches) })
  try {
    const record = await run.runStep()
    const reference = opened.find((o) => o.ref.threads === 1)
    const trained = opened.find((o) => o !== reference)
    if (!reference || !trained) throw new Error('the run opened no reference beside its policy')
    const refInfo = engineModel(reference.policy).handle.describe()
    const policyInfo = engineModel(trained.policy).handle.describe()
    return { kl: record.train.objective.kl, refWeights: refInfo.weights, refBytes: refInfo.parameterBytes, policyWeights: policyInfo.weights, batch: batches[0] }
  } finally {
    run.dispose()
  }
}

/** Per-token log π of the batch's completions under `model`. */
async function logprobs(model: Model, batch: TrainSequence[]): Promise<Float32Array[]> {
  return (await model.score(batch.map((s) => ({ prompt: s.prompt, completion: s.completion })))).map((s) => s.logprobs)
}

/** |a − b| per token, every token of every sequence (NaN refused). */
function absDiffs(a: Float32Array[], b: Float32Array[]): number[] {
  return a.flatMap((row, i) =>
    Array.from(row, (x, t) => {
      const d = Math.abs(x - b[i][t])
      if (!(d >= 0)) throw new Error(`logprob ${i}:${t} is NaN`)
      return d
    }),
  )
}

describe.skipIf(!existsSync(join(DEFAULT_MODEL, 'model.safetensors')))('frozenWeights: the KL reference of a full fine-tuning run', () => {
  let f32: Awaited<ReturnType<typeof oneStep>>
  let base: Model
  let baseBytes: number
  let expected: { bf16: number; int8: number }
  beforeAll(async () => {
    f32 = await oneStep('f32')
    base = await loadModel(DEFAULT_MODEL, { threads: 1 })
    baseBytes = base.handle.describe().parameterBytes
    const header = await import('../../src/engine/hf/safetensors.js').then((m) => m.readSafetensorsHeader(join(DEFAULT_MODEL, 'model.safetensors')))
    const bytes = (perWeight: (cols: number) => number) =>
      header.tensors.reduce((a, t) => {
        const n = t.shape.reduce((x, y) => x * y, 1)
        const cols = t.shape[t.shape.length - 1]
        return a + (KEPT.test(t.name) ? (n / cols) * perWeight(cols) : 4 * n)
      }, 0)
    expected = { bf16: bytes((c) => 2 * c), int8: bytes((c) => c + 2 * Math.ceil(c / 32)) } // int8: a code per weight, an f16 scale per started block of 32
  }, 120_000)
  afterAll(() => base?.dispose())

  it('f32 (the default): the reference is f32, the step\'s KL is that of the policy to itself', () => {
    expect(f32.refWeights).toBe('f32')
    expect(f32.refBytes).toBe(baseBytes)
    expect(f32.kl).not.toBeNull()
    expect(Math.abs(f32.kl!)).toBeLessThan(1e-6)
  })

  for (const weights of ['bf16', 'int8'] as const) {
    it(`${weights}: the reference keeps ${weights} weights, the policy f32, and the step's KL moves by what the weights' logprob error predicts`, async () => {
      const r = await oneStep(weights)
      expect(r.refWeights).toBe(weights)
      expect(r.policyWeights).toBe('f32')
      expect(r.refBytes).toBe(expected[weights])
      expect(r.refBytes / baseBytes).toBeLessThan(weights === 'bf16' ? 0.56 : 0.32)
      // the f32 policy sampled the same batch: only the reference differs
      expect(r.batch.map((s) => s.completion)).toEqual(f32.batch.map((s) => s.completion))
      const reduced = await loadModel(DEFAULT_MODEL, { threads: 1, weights })
      try {
        const reference = await logprobs(base, r.batch)
        const deltas = absDiffs(await logprobs(reduced, r.batch), reference)
        const delta = Math.max(...deltas)
        expect(delta).toBeGreaterThan(0) // the bundled model is f32 on disk: bf16 and int8 round it
        expect(delta).toBeLessThan(weights === 'bf16' ? 0.05 : 0.3)
        const eta = 1e-5 // the f32 run's |ref − logp| (its KL above is < 1e-6)
        // token-mean of k3 over the step's tokens: each token's k3 is at most k3Max(|δ_t| + η)
        const upper = deltas.reduce((a, d) => a + k3Max(d + eta), 0) / deltas.length
        const lower = deltas.reduce((a, d) => a + k3Min(Math.max(d - eta, 0)), 0) / deltas.length
        expect(r.kl).not.toBeNull()
        expect(Number.isFinite(r.kl!)).toBe(true)
        expect(Math.abs(r.kl! - f32.kl!)).toBeLessThanOrEqual(upper)
        expect(r.kl!).toBeGreaterThanOrEqual(lower) // and no less: the KL term is the weights' error
      } finally {
        reduced.dispose()
      }
    }, 120_000)
  }
})

describe.skipIf(!existsSync(join(DEFAULT_TOY_JUDGE_DIR, 'model.safetensors')))('frozenWeights: a frozen J-Zero Judge', () => {
  const root = mkdtempSync(join(tmpdir(), 'ad-frozen-judge-'))
  afterAll(() => rmSync(root, { recursive: true, force: true }))

  it('is opened with the run\'s frozenWeights, checkpointed as a copy of its folder, and resumed the same way', async () => {
    const config = resolveJzeroConfig({
      steps: 1,
      frozenWeights: 'int8',
      switches: { trainJudge: false },
      eval: { every: 1, size: 4, benchmarks: [], judgePairs: 4 },
    })
    const input = arithWorld.jzero.judgeInput('(12+7)*3', '<think>12+7=19; 19*3=57</think><answer>57</answer>')
    const run = await JzeroRun.start(DEFAULT_MODEL, DEFAULT_TOY_JUDGE_DIR, config, arithWorld, { threads: 2 })
    const dir = join(root, 'step-0')
    let scores: Float32Array
    try {
      expect(engineModel(run.judge).handle.describe().weights).toBe('int8')
      expect(engineModel(run.solver).handle.describe().weights).toBe('f32')
      scores = await run.judge.rewardScores([input])
      expect(Number.isFinite(scores[0])).toBe(true)
      await run.checkpoint(dir)
    } finally {
      run.dispose()
    }
    for (const file of readdirSync(DEFAULT_TOY_JUDGE_DIR, { withFileTypes: true }).filter((e) => e.isFile()))
      expect(readFileSync(join(dir, 'judge', file.name)).equals(readFileSync(join(DEFAULT_TOY_JUDGE_DIR, file.name))), file.name).toBe(true)
    const resumed = await JzeroRun.resume(dir, arithWorld, { threads: 2 })
    try {
      expect(engineModel(resumed.judge).handle.describe().weights).toBe('int8')
      expect(Array.from(await resumed.judge.rewardScores([input]))).toEqual(Array.from(scores))
    } finally {
      resumed.dispose()
    }
  }, 300_000)
})

describe('frozenWeights: checked values', () => {
  const root = mkdtempSync(join(tmpdir(), 'ad-frozen-'))
  afterAll(() => rmSync(root, { recursive: true, force: true }))

  it('a value other than f32, bf16 or int8 is a ConfigError naming the field (config file and --frozen-weights)', () => {
    for (const bad of ['f16', 'q4', 8]) {
      let e: unknown
      try {
        resolveGrpoConfig({ frozenWeights: bad }, undefined, 'run.json')
      } catch (err) {
        e = err
      }
      expect(e).toBeInstanceOf(ConfigError)
      expect((e as ConfigError).field).toBe('frozenWeights')
      expect((e as Error).message).toMatch(/^run\.json: frozenWeights: .*f32 \| bf16 \| int8/)
    }
    expect(() => grpoSpec.configure({ frozenWeights: 'int4' })).toThrow(ConfigError)
    expect(() => grpoSpec.configure({ frozenWeights: 'int4' })).toThrow(/--frozen-weights: frozenWeights/)
    expect(grpoSpec.configure({ frozenWeights: 'int8' }).config.frozenWeights).toBe('int8')
    expect(grpoSpec.configure({}).config.frozenWeights).toBeUndefined() // the presets keep f32
  })

  it('on --device cuda anything but f32 is refused before the run loads anything; --resume refuses the flag', async () => {
    const out = join(root, 'cuda-run')
    const saved = process.env.AUTODIDACT_DEVICE
    try {
      const e = await evolveCommand(['--method', 'grpo', '--device', 'cuda', '--frozen-weights', 'bf16', '--steps', '1', '--out', out]).then(
        () => null,
        (err: unknown) => err,
      )
      expect(e).toBeInstanceOf(ConfigError)
      expect((e as ConfigError).field).toBe('frozenWeights')
      expect((e as Error).message).toMatch(/CPU backend only/)
      expect(existsSync(out)).toBe(false)
      const resumed = await evolveCommand(['--resume', out, '--frozen-weights', 'int8']).then(
        () => null,
        (err: unknown) => err,
      )
      expect(resumed).toBeInstanceOf(InvalidArgumentError)
      expect((resumed as Error).message).toMatch(/resumed run keeps the frozenWeights/)
    } finally {
      if (saved === undefined) delete process.env.AUTODIDACT_DEVICE
      else process.env.AUTODIDACT_DEVICE = saved
    }
  })
})
