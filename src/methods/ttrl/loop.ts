// TTRL with auxiliary trajectory rewards (UID §4.2, B.2, C.3). Each step: a batch of unlabeled
// test-time prompts, n rollouts each with the per-token top-K statistics of the sampling pass (no
// rescoring), majority pseudo-labels, the arm's rewards (Eq. 5), GRPO advantages (Eq. 16), then one
// epoch of clipped policy updates (dual clip, reference KL in the loss) in mini-batches of prompts.
import { mkdir, readFile, rename, rm } from 'node:fs/promises'
import { existsSync } from 'node:fs'
import { join } from 'node:path'
import { writeFileAtomic } from '../../engine/hf/atomic.js'
import { loadModel, type Completion, type Model } from '../../engine/model.js'
import { grpoAdvantages } from '../../rl/advantages.js'
import type { StepMetrics, Trainer, TrainerOptions, TrainSequence } from '../../train/trainer.js'
import { Rng } from '../../util/prng.js'
import { evaluateBenchmarks, macroAccuracy, writeEvalRecords, type EvalRecord } from '../select/evaluation.js'
import { trajectoryOf, unscoredTokenIds, type Trajectory } from '../select/trajectory.js'
import { arithSolveWorld, heldOutSlice, type Item, type SolveWorld } from '../select/world.js'
import type { TtrlConfig } from './config.js'
import { groupRewards } from './rewards.js'

export interface Spread {
  mean: number
  min: number
  max: number
  n: number
}

export function spread(xs: ArrayLike<number>): Spread {
  const v = Array.from(xs).filter((x) => Number.isFinite(x))
  if (!v.length) return { mean: NaN, min: NaN, max: NaN, n: 0 }
  return { mean: v.reduce((a, b) => a + b, 0) / v.length, min: Math.min(...v), max: Math.max(...v), n: v.length }
}

export interface TtrlStepRecord {
  step: number
  arm: string
  prompts: number
  responses: number
  /** Share of responses agreeing with their group's pseudo-label. */
  agreeRate: number
  /** Groups whose n responses all agree (UID B.2.1 "unanimous groups"). */
  unanimousGroups: number
  /** Groups with no answer at all (all rewards equal: no signal). */
  abstainedGroups: number
  /** Diagnostics only (UID C.1: reference answers retained for diagnostics): pseudo-label accuracy and rollout accuracy. */
  labelAccuracy: number
  rolloutAccuracy: number
  completeRate: number
  uidEligibleRate: number
  reward: Spread
  aux: Spread
  /** |A| > 0 responses: the groups that carry a policy-gradient signal. */
  nonzeroAdvantages: number
  responseTokens: Spread
  train: StepMetrics[]
  loss: number
  kl: number | null
  heldOutAccuracy?: number
  generatedTokens: number
  seconds: number
}

export interface TtrlRunState {
  format: 'autodidact.ttrl.run'
  version: 1
  step: number
  rng: [number, number, number, number]
  baseModel: string
  config: TtrlConfig
}

/** Deterministic per-step sampling seed, so a resumed run samples what the original did. */
function seedFor(runSeed: number, step: number): number {
  return (runSeed * 1_000_003 + step * 8 + 5) % Number.MAX_SAFE_INTEGER
}

/** The prompts of step s: epoch-wise seeded shuffles of the prompt set, consumed in order. */
export function stepPrompts(items: readonly Item[], perStep: number, step: number, seed: number): Item[] {
  const out: Item[] = []
  const N = items.length
  for (let j = 0; j < perStep; j++) {
    const g = step * perStep + j
    const epoch = Math.floor(g / N)
    const order = new Rng(`ttrl-epoch-${seed}-${epoch}`).shuffle(Array.from({ length: N }, (_, i) => i))
    out.push(items[order[g % N]])
  }
  return out
}

export function ttrlTrainerOptions(c: TtrlConfig, reference: Model | null): TrainerOptions {
  const updates = c.steps * Math.ceil(c.promptsPerStep / c.ppo.miniBatchPrompts)
  const warmup = Math.min(Math.round(c.ppo.warmupRatio * updates), updates - 1)
  return {
    objective: { name: 'policy', clip: c.ppo.clip, dualClip: c.ppo.dualClip, klCoef: c.ppo.klCoef, klEstimator: 'k3', entropyCoef: c.ppo.entropyCoef },
    lora: c.ppo.loraRank > 0 ? { rank: c.ppo.loraRank, alpha: c.ppo.loraAlpha } : null,
    optimizer: { lr: c.ppo.lr },
    schedule: updates > 1 ? { kind: 'cosine', warmupSteps: warmup, totalSteps: updates, minLrRatio: c.ppo.minLrRatio } : { kind: 'constant' },
    clipGradNorm: c.ppo.clipGradNorm,
    microBatchSize: c.ppo.microBatchSize,
    reference: reference ?? (c.ppo.loraRank > 0 ? 'lora-off' : undefined),
  }
}

export class TtrlRun {
  private readonly unscored: Set<number>
  private readonly items: Item[]
  private pendingEvals: EvalRecord[] = []

  private constructor(
    readonly config: TtrlConfig,
    readonly world: SolveWorld,
    readonly model: Model,
    private readonly trainer: Trainer,
    private readonly reference: Model | null,
    private rng: Rng,
    private stepIndex: number,
    readonly baseModel: string,
  ) {
    this.unscored = unscoredTokenIds(model)
    this.items = heldOutSlice(config.prompts)
  }

  static async start(baseModel: string, config: TtrlConfig, threads?: number): Promise<TtrlRun> {
    const model = await loadModel(baseModel, { threads })
    const reference = config.ppo.loraRank === 0 && config.ppo.klCoef > 0 ? await loadModel(baseModel, { threads: 1 }) : null
    const trainer = await model.trainer(ttrlTrainerOptions(config, reference))
    return new TtrlRun(config, arithSolveWorld(config.format), model, trainer, reference, new Rng(`ttrl-${config.seed}`), 0, baseModel)
  }

  static async resume(dir: string, threads?: number): Promise<TtrlRun> {
    const state = JSON.parse(await readFile(join(dir, 'run_state.json'), 'utf8')) as TtrlRunState
    if (state.format !== 'autodidact.ttrl.run') throw new TypeError(`${dir} is not a TTRL checkpoint`)
    const c = state.config
    const lora = c.ppo.loraRank > 0
    const model = await loadModel(lora ? state.baseModel : join(dir, 'model'), { threads })
    if (lora) await model.loadAdapter(join(dir, 'model'))
    const reference = !lora && c.ppo.klCoef > 0 ? await loadModel(state.baseModel, { threads: 1 }) : null
    const trainer = await model.trainer(ttrlTrainerOptions(c, reference))
    await trainer.loadState(dir)
    return new TtrlRun(c, arithSolveWorld(c.format), model, trainer, reference, Rng.fromState(state.rng), state.step, state.baseModel)
  }

  get step(): number {
    return this.stepIndex
  }

  dispose(): void {
    this.model.dispose()
    this.reference?.dispose()
  }

  /** One rollout batch and its policy updates; returns the metrics line. */
  async runStep(): Promise<TtrlStepRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const batch = stepPrompts(this.items, c.promptsPerStep, this.stepIndex, c.seed)
    const prompts = batch.map((it) => this.world.prompt(it.question))
    const groups: Completion[][] = await this.model.generate(prompts, {
      n: c.rollout.n,
      temperature: c.rollout.temperature,
      topP: c.rollout.topP,
      maxTokens: c.rollout.maxTokens,
      seed: seedFor(c.seed, this.stepIndex),
      stats: { topK: c.scoring.topK }, // UID B.1: top-25 raw logits from the sampling pass
    })
    const trajectories: Trajectory[][] = groups.map((g) => g.map((comp) => trajectoryOf(comp, this.world, this.unscored, c.scoring)))
    const rewarded = trajectories.map((g) => groupRewards(g, c.reward, this.rng))
    // UID Eq. 16: GRPO within each prompt group (sample std + 1e-6)
    const advantages = rewarded.map((r) => grpoAdvantages(r.rewards, Array.from(r.rewards, () => 0)))

    const encoded = prompts.map((p) => this.model.encodePrompt(p))
    const sequences: TrainSequence[][] = groups.map((g, qi) =>
      g
        .map((comp, k) => ({ prompt: encoded[qi], completion: Array.from(comp.tokens), oldLogprobs: comp.logprobs, advantages: advantages[qi][k] }))
        .filter((s) => s.completion.length > 0),
    )
    // UID C.3: one epoch over the rollout batch in mini-batches of `miniBatchPrompts` prompts
    const train: StepMetrics[] = []
    for (let start = 0; start < sequences.length; start += c.ppo.miniBatchPrompts) {
      const mb = sequences.slice(start, start + c.ppo.miniBatchPrompts).flat()
      if (mb.length) train.push(await this.trainer.step({ sequences: mb }))
    }
    this.stepIndex++

    const flat = trajectories.flat()
    const agreeAll = rewarded.flatMap((r) => Array.from(r.agree))
    const truth: number[] = trajectories.flatMap((g, qi) => g.map((t) => (t.complete && this.world.verify(batch[qi], t.text) ? 1 : 0)))
    const applied = train.filter((m) => !m.skipped)
    const kls = applied.map((m) => m.objective.kl).filter((x): x is number => typeof x === 'number')
    return {
      step: this.stepIndex,
      arm: c.reward.arm,
      prompts: batch.length,
      responses: flat.length,
      agreeRate: agreeAll.reduce((a, b) => a + b, 0) / agreeAll.length,
      unanimousGroups: rewarded.filter((r) => r.agree.every((g) => g === 1)).length,
      abstainedGroups: rewarded.filter((r) => r.label === null).length,
      labelAccuracy: rewarded.filter((r, qi) => r.label !== null && r.label === batch[qi].answer).length / batch.length,
      rolloutAccuracy: truth.reduce((a, b) => a + b, 0) / truth.length,
      completeRate: flat.filter((t) => t.complete).length / flat.length,
      uidEligibleRate: flat.filter((t) => t.bins !== null).length / flat.length,
      reward: spread(rewarded.flatMap((r) => Array.from(r.rewards))),
      aux: spread(rewarded.flatMap((r) => Array.from(r.aux).filter((_, i) => r.agree[i]))),
      nonzeroAdvantages: advantages.flatMap((a) => Array.from(a)).filter((a) => a !== 0).length,
      responseTokens: spread(groups.flat().map((g) => g.tokens.length)),
      train,
      loss: applied.length ? applied.reduce((a, m) => a + m.loss, 0) / applied.length : NaN,
      kl: kls.length ? kls.reduce((a, b) => a + b, 0) / kls.length : null,
      generatedTokens: groups.flat().reduce((a, g) => a + g.tokens.length, 0),
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    }
  }

  /** Macro-average held-out accuracy (per-item records are kept for the step's eval file). */
  async evaluate(): Promise<number> {
    const r = await this.evaluateRecord()
    this.pendingEvals = [...this.pendingEvals.filter((e) => e.step !== r.step), r]
    return macroAccuracy(r)
  }

  async evaluateRecord(): Promise<EvalRecord> {
    return evaluateBenchmarks(this.model, this.world, this.config.eval.benchmarks, this.config.eval.protocol, this.stepIndex)
  }

  /** Adapter (or model), optimizer, RNG and the evaluations since the last checkpoint. */
  async checkpoint(dir: string): Promise<void> {
    const tmp = `${dir}.tmp-${process.pid}`
    await rm(tmp, { recursive: true, force: true })
    await mkdir(tmp, { recursive: true })
    await this.model.save(join(tmp, 'model'))
    await this.trainer.saveState(tmp)
    const state: TtrlRunState = { format: 'autodidact.ttrl.run', version: 1, step: this.stepIndex, rng: this.rng.state(), baseModel: this.baseModel, config: this.config }
    await writeFileAtomic(join(tmp, 'run_state.json'), JSON.stringify(state, null, 2) + '\n')
    if (existsSync(dir)) await rm(dir, { recursive: true, force: true })
    await rename(tmp, dir)
    await writeEvalRecords(dir, this.stepIndex, this.pendingEvals)
    this.pendingEvals = []
  }
}
