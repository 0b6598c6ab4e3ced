// Plain verifier-rewarded GRPO (DeepSeekMath §4.1 with the outcome reward of a verifier): each step,
// n samples of fresh training questions, reward 1 for a verified answer and 0 otherwise, GRPO
// advantages within each question's group, one clipped policy update. The kit's example method:
// its whole loop is this page.
import { resolve } from 'node:path'
import { computeAdvantages } from '../../rl/advantages.js'
import { spread, type Spread } from '../../stats/summary.js'
import type { StepMetrics } from '../../train/trainer.js'
import type { BaseStepRecord } from '../common/run.js'
import { type BaseRunState, checkedPath, checkpointRun, resumeRun, RUN_STATE_VERSION } from '../common/checkpoint.js'
import type { OpenPolicy, Policy, PolicySet, PolicyTrainer } from '../common/policy.js'
import { openTrainedPolicy, ppoPlan, sampledSequence, samplingSeed } from '../common/training.js'
import type { Benchmark, TaskWorld } from '../../worlds/types.js'
import { EvalLog, evaluateBenchmarks, greedyProtocol, selectBenchmarks } from '../common/evaluation.js'
import { checkLevels, worldRecord } from '../common/world.js'
import { resolveGrpoConfig, TOY_PRESET, type GrpoConfig } from './config.js'

export interface GrpoStepRecord extends BaseStepRecord {
  step: number
  questions: number
  /** r = 1 for a verified answer (the only reward). */
  reward: Spread
  /** Groups with a nonzero advantage (neither all right nor all wrong): the ones that teach. */
  informativeGroups: number
  train: StepMetrics
}

interface GrpoRunState extends BaseRunState {
  format: 'autodidact.grpo.run'
  baseModel: string
  config: GrpoConfig
}

const FORMAT = 'autodidact.grpo.run'
const ROLE = 'model'

export class GrpoRun {
  private readonly benchmarks: Benchmark[]
  private readonly evals = new EvalLog()

  private constructor(
    readonly config: GrpoConfig,
    readonly world: TaskWorld,
    readonly model: Policy,
    private readonly trainer: PolicyTrainer,
    private readonly policies: PolicySet,
    private stepIndex: number,
    readonly baseModel: string,
  ) {
    this.benchmarks = selectBenchmarks(world, config.eval.benchmarks, config.eval.size)
  }

  static async start(baseModel: string, config: GrpoConfig, world: TaskWorld, o: { threads?: number; openPolicy?: OpenPolicy } = {}): Promise<GrpoRun> {
    checkLevels(world, [config.questions.level], 'questions.level')
    return GrpoRun.open(config, world, resolve(baseModel), null, 0, o)
  }

  static async resume(dir: string, world: TaskWorld, o: { threads?: number; openPolicy?: OpenPolicy } = {}): Promise<GrpoRun> {
    const ckpt = await resumeRun<GrpoRunState>(dir, {
      format: FORMAT,
      world,
      parse: (s, file) => ({ ...s, format: FORMAT, baseModel: checkedPath(s.baseModel, file, 'baseModel'), config: resolveGrpoConfig(s.config, TOY_PRESET, file) }),
      roles: () => [{ name: ROLE, trained: true }],
    })
    return GrpoRun.open(ckpt.state.config, world, ckpt.state.baseModel, ckpt.paths(ROLE), ckpt.state.step, o)
  }

  private static async open(c: GrpoConfig, world: TaskWorld, base: string, checkpoint: { model: string; trainer: string } | null, step: number, o: { threads?: number; openPolicy?: OpenPolicy }): Promise<GrpoRun> {
    const { policies, policy, trainer } = await openTrainedPolicy({ ...o, base, checkpoint: checkpoint ?? undefined, plan: ppoPlan(c.ppo, c.steps), frozenWeights: c.frozenWeights })
    return new GrpoRun(c, world, policy, trainer, policies, step, base)
  }

  get step(): number {
    return this.stepIndex
  }

  async runStep(): Promise<GrpoStepRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const items = this.world.data.trainingProblems({ seed: `grpo-${c.seed}-step-${this.stepIndex}`, count: c.questions.perStep, level: c.questions.level })
    const prompts = items.map((it) => this.world.solve.solverPrompt(it.question))
    const groups = await this.model.generate(prompts, { ...c.rollout, seed: samplingSeed(c.seed, this.stepIndex, 0) })
    const rewards = groups.flatMap((g, qi) => g.map((s) => (s.finishReason === 'stop' && this.world.verifier.verify(items[qi], s.text) ? 1 : 0)))
    const advantages = computeAdvantages(c.ppo.advantage, rewards, groups.flatMap((g, qi) => g.map(() => qi)))
    const flat = groups.flatMap((g, qi) => g.map((s) => ({ prompt: this.model.encodePrompt(prompts[qi]), s })))
    const sequences = flat.map(({ prompt, s }, i) => sampledSequence(prompt, s, advantages[i])).filter((q) => q.completion.length > 0)
    const train = await this.trainer.step({ sequences })
    this.stepIndex++
    return {
      step: this.stepIndex,
      questions: items.length,
      reward: spread(rewards),
      informativeGroups: groups.filter((g, qi) => g.some((_, k) => advantages[qi * c.rollout.n + k] !== 0)).length,
      train,
      generatedTokens: flat.reduce((a, { s }) => a + s.tokens.length, 0),
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    }
  }

  /** Greedy held-out accuracy on the world's benchmarks (macro), kept for the step's eval file. */
  async evaluate(): Promise<number> {
    const solver = { prompt: (q: string) => this.world.solve.solverPrompt(q), verifier: this.world.verifier }
    return this.evals.add(await evaluateBenchmarks(this.model, this.benchmarks, solver, greedyProtocol(this.config.rollout.maxTokens), this.stepIndex))
  }

  async checkpoint(dir: string): Promise<void> {
    const state: GrpoRunState = { format: FORMAT, version: RUN_STATE_VERSION, step: this.stepIndex, world: worldRecord(this.world), baseModel: this.baseModel, config: this.config }
    await checkpointRun(dir, { state, roles: [{ name: ROLE, policy: this.model, trainer: this.trainer }], extra: (tmp) => this.evals.intoCheckpoint(tmp, this.stepIndex) })
    await this.evals.flush(dir)
  }

  dispose(): void {
    this.policies.dispose()
  }
}
