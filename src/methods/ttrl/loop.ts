// TTRL with auxiliary trajectory rewards (UID §4.2, B.2, C.3). Each step: a batch of unlabeled
// test-time prompts, n rollouts each with the per-token top-K statistics of the sampling pass (no
// rescoring), majority pseudo-labels, the arm's rewards (Eq. 5), GRPO advantages (Eq. 16), then one
// epoch of clipped policy updates (dual clip, reference KL in the loss) in mini-batches of prompts.
import { resolve } from 'node:path'
import type { Completion } from '../../engine/model.js'
import { grpoAdvantages } from '../../rl/advantages.js'
import { spread, type Spread } from '../../stats/summary.js'
import type { StepMetrics, TrainSequence } from '../../train/trainer.js'
import { Rng } from '../../util/prng.js'
import type { BaseStepRecord } from '../common/run.js'
import { type BaseRunState, checkedPath, checkedRngState, checkpointRun, resumeRun, RUN_STATE_VERSION } from '../common/checkpoint.js'
import type { OpenPolicy, Policy, PolicySet, PolicyTrainer } from '../common/policy.js'
import { openTrainedPolicy, ppoPlan, sampledSequence, samplingSeed, type TrainingPlan } from '../common/training.js'
import { ConfigError } from '../../engine/errors.js'
import type { Benchmark, LabeledProblem, Problem, TaskWorld } from '../../worlds/types.js'
import { EvalLog, evaluateBenchmarks, selectBenchmarks, type EvalRecord } from '../common/evaluation.js'
import { worldRecord } from '../common/world.js'
import { trajectoryOf, unscoredTokenIds, type Trajectory } from '../solving/trajectory.js'
import { resolveTtrlConfig, TOY_PRESET, type TtrlConfig } from './config.js'
import { groupRewards } from './rewards.js'

export interface TtrlStepRecord extends BaseStepRecord {
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
  /** Diagnostics only (UID C.1: reference answers retained for diagnostics): pseudo-label accuracy and rollout accuracy (NaN for unlabeled prompts). */
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
}

export interface TtrlRunState extends BaseRunState {
  format: 'autodidact.ttrl.run'
  rng: [number, number, number, number]
  baseModel: string
  config: TtrlConfig
}

export interface RunOptions {
  threads?: number
  openPolicy?: OpenPolicy
}

const FORMAT = 'autodidact.ttrl.run'
const ROLE = 'model'
/** The seed's call code of the rollout (one sampling call a step). */
const ROLLOUT_CALL = 5

/** The prompts of step s: epoch-wise seeded shuffles of the prompt set, consumed in order. */
export function stepPrompts<P>(items: readonly P[], perStep: number, step: number, seed: number): P[] {
  const out: P[] = []
  const N = items.length
  for (let j = 0; j < perStep; j++) {
    const g = step * perStep + j
    const epoch = Math.floor(g / N)
    const order = new Rng(`ttrl-epoch-${seed}-${epoch}`).shuffle(Array.from({ length: N }, (_, i) => i))
    out.push(items[order[g % N]])
  }
  return out
}

/** UID C.3: one epoch of clipped policy updates (dual clip, k3 reference KL) over each rollout batch. */
export function ttrlTrainingPlan(c: TtrlConfig): TrainingPlan {
  const updates = c.steps * Math.ceil(c.promptsPerStep / c.ppo.miniBatchPrompts)
  return ppoPlan(c.ppo, updates, { dualClip: c.ppo.dualClip, klEstimator: 'k3' })
}

export class TtrlRun {
  private readonly unscored: Set<number>
  private readonly items: Problem[]
  private readonly benchmarks: Benchmark[]
  private readonly evals = new EvalLog()

  private constructor(
    readonly config: TtrlConfig,
    readonly world: TaskWorld,
    readonly model: Policy,
    private readonly trainer: PolicyTrainer,
    private readonly policies: PolicySet,
    private rng: Rng,
    private stepIndex: number,
    readonly baseModel: string,
  ) {
    this.unscored = unscoredTokenIds(model)
    this.items = testTimePrompts(world, config)
    this.benchmarks = [...adaptationBenchmark(this.items, config), ...selectBenchmarks(world, config.eval.benchmarks, config.eval.size)]
  }

  static async start(baseModel: string, config: TtrlConfig, world: TaskWorld, o: RunOptions = {}): Promise<TtrlRun> {
    testTimePrompts(world, config) // a config that asks for more prompts than the world has fails before any model loads
    const base = resolve(baseModel)
    const { policies, policy, trainer } = await openTrainedPolicy({ ...o, base, plan: ttrlTrainingPlan(config), frozenWeights: config.frozenWeights })
    return new TtrlRun(config, world, policy, trainer, policies, new Rng(`ttrl-${config.seed}`), 0, base)
  }

  /** Continues from a checkpoint folder written by `checkpoint()`; the folder is checked before anything is loaded. */
  static async resume(dir: string, world: TaskWorld, o: RunOptions = {}): Promise<TtrlRun> {
    const ckpt = await resumeRun<TtrlRunState>(dir, {
      format: FORMAT,
      world,
      parse: (s, file) => ({ ...s, format: FORMAT, rng: checkedRngState(s.rng, file), baseModel: checkedPath(s.baseModel, file, 'baseModel'), config: resolveTtrlConfig(s.config, TOY_PRESET, file) }),
      roles: () => [{ name: ROLE, trained: true }],
    })
    const { state } = ckpt
    const { policies, policy, trainer } = await openTrainedPolicy({ ...o, base: state.baseModel, checkpoint: ckpt.paths(ROLE), plan: ttrlTrainingPlan(state.config), frozenWeights: state.config.frozenWeights })
    return new TtrlRun(state.config, world, policy, trainer, policies, Rng.fromState(state.rng), state.step, state.baseModel)
  }

  get step(): number {
    return this.stepIndex
  }

  dispose(): void {
    this.policies.dispose()
  }

  /** One rollout batch and its policy updates; returns the metrics line. */
  async runStep(): Promise<TtrlStepRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const batch = stepPrompts(this.items, c.promptsPerStep, this.stepIndex, c.seed)
    const prompts = batch.map((it) => this.world.solve.solverPrompt(it.question))
    const groups: Completion[][] = await this.model.generate(prompts, {
      n: c.rollout.n,
      temperature: c.rollout.temperature,
      topP: c.rollout.topP,
      maxTokens: c.rollout.maxTokens,
      seed: samplingSeed(c.seed, this.stepIndex, ROLLOUT_CALL),
      stats: { topK: c.scoring.topK }, // UID B.1: top-25 raw logits from the sampling pass
    })
    const trajectories: Trajectory[][] = groups.map((g) => g.map((comp) => trajectoryOf(comp, this.world.answers, this.unscored, c.scoring)))
    const reference = (qi: number) => (c.reward.arm === 'reference-label' ? { answer: batch[qi].answer!, equivalent: this.world.answers.equivalent } : undefined)
    const rewarded = trajectories.map((g, qi) => groupRewards(g, c.reward, this.rng, reference(qi)))
    // UID Eq. 16: GRPO within each prompt group (sample std + 1e-6)
    const advantages = rewarded.map((r) => grpoAdvantages(r.rewards, Array.from(r.rewards, () => 0)))

    const encoded = prompts.map((p) => this.model.encodePrompt(p))
    const sequences: TrainSequence[][] = groups.map((g, qi) =>
      g
        .map((comp, k) => sampledSequence(encoded[qi], comp, advantages[qi][k]))
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
    const labeled = batch.every((p): p is LabeledProblem => p.answer !== null)
    const truth: number[] = labeled ? trajectories.flatMap((g, qi) => g.map((t) => (t.complete && this.world.verifier.verify(batch[qi] as LabeledProblem, t.text) ? 1 : 0))) : []
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
      labelAccuracy: labeled ? rewarded.filter((r, qi) => r.label !== null && this.world.answers.equivalent(r.label, batch[qi].answer!)).length / batch.length : NaN,
      rolloutAccuracy: labeled ? truth.reduce((a, b) => a + b, 0) / truth.length : NaN,
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
    return this.evals.add(await this.evaluateRecord())
  }

  async evaluateRecord(): Promise<EvalRecord> {
    const solver = { prompt: (q: string) => this.world.solve.solverPrompt(q), verifier: this.world.verifier }
    return evaluateBenchmarks(this.model, this.benchmarks, solver, this.config.eval.protocol, this.stepIndex)
  }

  /** Adapter (or model), optimizer, RNG and the evaluations since the last checkpoint (checkpointRun). */
  async checkpoint(dir: string): Promise<void> {
    const state: TtrlRunState = { format: FORMAT, version: RUN_STATE_VERSION, step: this.stepIndex, world: worldRecord(this.world), rng: this.rng.state(), baseModel: this.baseModel, config: this.config }
    await checkpointRun(dir, { state, roles: [{ name: ROLE, policy: this.model, trainer: this.trainer }], extra: (tmp) => this.evals.intoCheckpoint(tmp, this.stepIndex) })
    await this.evals.flush(dir)
  }
}

/** The run's test-time prompts: items [offset, offset + size) of the world's unlabeled stream; a ConfigError when it is shorter. */
export function testTimePrompts(world: TaskWorld, c: TtrlConfig): Problem[] {
  const all = world.data.unlabeledPrompts()
  const { offset, size } = c.prompts
  if (offset + size > all.length) throw new ConfigError('(config)', 'prompts', `(config): prompts: offset + size = ${offset + size}, but world '${world.name}' has ${all.length} unlabeled prompts`)
  const prompts = all.slice(offset, offset + size)
  const unlabeled = prompts.findIndex((p) => p.answer === null)
  if (c.reward.arm === 'reference-label' && unlabeled >= 0) throw new ConfigError('(config)', 'reward.arm', `(config): reward.arm: 'reference-label' rewards against each prompt's reference answer, but prompt ${offset + unlabeled} of world '${world.name}' has none`)
  return prompts
}

/** UID §5.1's adaptation benchmark: the test-time prompts themselves, when every one carries a reference answer. */
function adaptationBenchmark(items: readonly Problem[], c: TtrlConfig): Benchmark[] {
  if (!c.eval.adaptation || !items.every((p): p is LabeledProblem => p.answer !== null)) return []
  return [{ name: 'adapt', problems: items as LabeledProblem[] }]
}
