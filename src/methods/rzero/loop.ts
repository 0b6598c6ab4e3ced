// R-Zero (Huang et al. 2025) with the multi-solver disagreement reward of DIS: a Challenger and a
// Solver, two models started from one base, trained alternately with GRPO while the other is
// frozen (DIS §3).
//   Challenger step: one GRPO group of questions; every parsed question goes to the solver ensemble
//     (DIS §4.2, §4.5), which gives the pooled p̂ and r_dis; with the BLEU repetition penalty over
//     the batch, r = α·r_unc + β·r_dis − r_rep, and −1 for a parse failure (DIS §3, §4.3).
//   Solver step: questions from the frozen Challenger, answered by the same ensemble; those whose
//     pooled p̂ lies in the informative band keep their majority answer as pseudo-label; the Solver's
//     own rollouts get reward 1 when they agree with it (R-Zero's Solver reward), GRPO per question.
// β = 0 is plain R-Zero: ensemble.mode 'auto' then samples the Solver alone (m samples).
// With `roleAdapters`, the two models are two LoRA adapters on one shared base ('challenger',
// 'solver'): each role samples through its own, and each phase's GRPO step moves only its role's
// adapter, on the role's own schedule and step clock (one trainer, adapterSchedules).
import { existsSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { CheckpointError } from '../../engine/errors.js'
import type { Completion } from '../../engine/model.js'
import { queryEnsemble, variantStats, type EnsembleResult, type QuestionVerdict, type VariantStats } from '../../ensemble/ensemble.js'
import { InProcessSampler } from '../../ensemble/inprocess.js'
import { RemoteSampler } from '../../ensemble/remote.js'
import type { EnsembleVariant } from '../../ensemble/types.js'
import { computeAdvantages } from '../../rl/advantages.js'
import { disChallengerReward, uncertaintyReward } from '../../rl/challenger.js'
import { repetitionPenalty } from '../../tasks/cluster.js'
import { pearson, spread, type Spread } from '../../stats/summary.js'
import type { StepMetrics } from '../../train/trainer.js'
import { Rng } from '../../util/prng.js'
import { EvalLog, evaluateBenchmarks, greedyProtocol, selectBenchmarks } from '../common/evaluation.js'
import type { BaseStepRecord } from '../common/run.js'
import { type BaseRunState, checkedPath, checkedRngState, checkpointRun, resumeRun, RUN_STATE_VERSION } from '../common/checkpoint.js'
import { openPolicy, PolicySet, type OpenPolicy, type Policy, type PolicyTrainer } from '../common/policy.js'
import { openReference, openTrainee, ppoPlan, sampledSequence, samplingSeed, type TrainingPlan } from '../common/training.js'
import { openRoleTrainee, roleAdaptersCheckpointRole, ROLE_ADAPTERS_ROLE, RolePolicy, type RoleAdapter } from '../common/role-adapters.js'
import { resolveRzeroConfig, TOY_PRESET, usesEnsemble, type RzeroConfig } from './config.js'
import { toySecondModel } from '../../toymodel/llama-variant.js'
import type { Benchmark, TaskWorld } from '../../worlds/types.js'
import { checkLevels, isReferenceAnswer, shareTrue, verifyPosed, worldRecord } from '../common/world.js'



export type Phase = 'challenger' | 'solver'
type Role = Phase
const ROLES: readonly Role[] = ['challenger', 'solver']

export interface EnsembleRecord {
  /** Variants queried per call, and those that answered (mean over this step's calls). */
  variants: number
  responding: number
  timeouts: number
  errors: number
  perVariant: VariantStats[]
}

export interface ChallengerRecord extends BaseStepRecord {
  step: number
  phase: 'challenger'
  level: number
  questions: number
  parseRate: number
  /** Distinct parsed questions over parsed questions. */
  distinctRate: number
  /** DIS Table 2: per-batch r_dis, r_unc and r_rep over the parsed questions. */
  rDis: Spread
  rUnc: Spread
  rRep: Spread
  pHat: Spread
  reward: Spread
  /** Diagnostics (ground truth, never a reward): well-posed questions, their mean difficulty level. */
  questionGoodRate: number
  questionLevel: Spread
  /** Diagnostics (verifier, never a reward): per parsed question, the share of the Solver's own ensemble samples that are right. */
  solverTrueAccuracy: Spread
  /** Pearson correlation over the parsed questions of r_dis, and of the pooled p̂, with the Solver's true accuracy. */
  disagreementAccuracyCorrelation: number
  pHatAccuracyCorrelation: number
  ensemble: EnsembleRecord
  skipped: string | null
  train: StepMetrics | null
}

export interface SolverRecord extends BaseStepRecord {
  step: number
  phase: 'solver'
  candidates: number
  parseRate: number
  distinct: number
  /** Questions in the informative band of pooled p̂, and the share of distinct ones. */
  kept: number
  keptRate: number
  pHat: Spread
  /** Diagnostics: pseudo-labels that are right (verifier), Solver rollouts that are right. */
  pseudoLabelAccuracy: number
  rolloutAccuracy: number
  reward: Spread
  ensemble: EnsembleRecord
  train: StepMetrics | null
}

export type RzeroStepRecord = ChallengerRecord | SolverRecord

export interface RzeroRunState extends BaseRunState {
  format: 'autodidact.rzero.run'
  rng: [number, number, number, number]
  baseModel: string
  secondModel: string | null
  config: RzeroConfig
}

export interface RzeroRunOptions {
  threads?: number
  /** Where the Llama ensemble variant is cached (default ~/.cache/autodidact/variants). */
  cacheRoot?: string
  /** Variants added to the configured ensemble (when the ensemble is used), e.g. a RemoteSampler with its own fetch. */
  extraVariants?: EnsembleVariant[]
  log?: (line: string) => void
  /** How policies are opened (default: the engine's). */
  openPolicy?: OpenPolicy
}

const FORMAT = 'autodidact.rzero.run'
/** Sampling calls of a step (the seed's `call`). */
const CALL = { challengerBatch: 0, challengerEnsemble: 1, solverCandidates: 2, solverEnsemble: 3, solverRollouts: 4 }

/** The sampling seed of a call: 31-bit, as remote endpoints take. */
function seedOf(c: RzeroConfig, step: number, call: number): number {
  return samplingSeed(c.seed, step, call, { modulus: 2_147_483_647 })
}

/** Phase of 0-based step `s`: each iteration is challengerSteps Challenger steps, then solverSteps Solver steps. */
export function phaseOf(c: RzeroConfig, s: number): Phase {
  const period = c.phases.challengerSteps + c.phases.solverSteps
  return s % period < c.phases.challengerSteps ? 'challenger' : 'solver'
}

/** How many of the run's steps a role trains (its learning-rate schedule's length). */
export function phaseSteps(c: RzeroConfig, phase: Phase): number {
  let n = 0
  for (let s = 0; s < c.steps; s++) if (phaseOf(c, s) === phase) n++
  return n
}

/** How many of buildVariants' variants (the first ones) are the Solver itself. */
export function solverVariantCount(c: RzeroConfig): number {
  return usesEnsemble(c) ? c.ensemble.solverTemperatures.length : 1
}

/** GRPO on one role over the steps it trains (DIS §5.1 on R-Zero's settings): cosine schedule, KL to the base. */
const rolePlan = (c: RzeroConfig, updates: number) => ppoPlan(c.grpo, updates)

/** With `roleAdapters`: both roles' adapters train, each on its own schedule over the steps of its phase. */
function rzeroRoleAdapters(c: RzeroConfig): RoleAdapter[] {
  return ROLES.map((name) => ({ name, trained: true, schedule: rolePlan(c, phaseSteps(c, name)).schedule }))
}

function ensembleRecord(results: EnsembleResult[]): EnsembleRecord {
  const calls = results.length
  const per = variantStats(results)
  const sum = (f: (r: EnsembleResult) => number) => (calls ? results.reduce((a, r) => a + f(r), 0) / calls : 0)
  return {
    variants: sum((r) => r.variants.length),
    responding: sum((r) => r.variants.filter((v) => v.status === 'ok').length),
    timeouts: per.reduce((a, v) => a + v.timeouts, 0),
    errors: per.reduce((a, v) => a + v.errors, 0),
    perVariant: per,
  }
}

function tokensOf(result: EnsembleResult | null): number {
  let n = 0
  for (const v of result?.variants ?? []) for (const g of v.samples ?? []) for (const s of g) n += s.tokens?.length ?? 0
  return n
}

export interface ChallengerScores {
  /** Per question of the batch: the composite reward (DIS §3), −parseFailure for parse failures. */
  rewards: number[]
  /** Over the parsed questions only (DIS Table 2): r_unc, r_dis, r_rep and the pooled p̂. */
  rUnc: number[]
  rDis: number[]
  rRep: number[]
  pHat: number[]
}

/**
 * The Challenger rewards of one batch (one GRPO group). `questions[i]` is null on a parse failure
 * (reward −1, DIS §4.3); otherwise `verdicts[i]` is the ensemble's verdict on it. r_rep clusters
 * the parsed questions only by BLEU distance (DIS §4.5 (iii)); r_unc has the configured form.
 */
export function scoreChallengerBatch(
  questions: readonly (string | null)[],
  verdicts: readonly (QuestionVerdict | null)[],
  reward: RzeroConfig['reward'],
  bleuText: (q: string) => string = (q) => q,
): ChallengerScores {
  const rep = repetitionPenalty(questions.map((q) => (q === null ? null : bleuText(q))), reward.repetition)
  const out: ChallengerScores = { rewards: [], rUnc: [], rDis: [], rRep: [], pHat: [] }
  questions.forEach((q, i) => {
    const v = verdicts[i]
    if (q === null || v === null) {
      out.rewards.push(disChallengerReward({ parsed: false, rUnc: 0, rDis: 0, rRep: 0 }, { failure: reward.parseFailure })) // DIS §4.3
      return
    }
    const rUnc = uncertaintyReward(v.pHat, reward.uncertainty)
    out.rUnc.push(rUnc)
    out.rDis.push(v.rDis)
    out.rRep.push(rep.penalty[i])
    out.pHat.push(v.pHat)
    out.rewards.push(disChallengerReward({ parsed: true, rUnc, rDis: v.rDis, rRep: rep.penalty[i] }, { alpha: reward.alpha, beta: reward.beta, failure: reward.parseFailure })) // DIS §3
  })
  return out
}

export class RzeroRun {
  private readonly benchmarks: Benchmark[]
  private readonly evals = new EvalLog()

  private constructor(
    readonly config: RzeroConfig,
    readonly world: TaskWorld,
    readonly challenger: Policy,
    readonly solver: Policy,
    private readonly challengerTrainer: PolicyTrainer,
    private readonly solverTrainer: PolicyTrainer,
    private readonly policies: PolicySet,
    readonly second: Policy | null,
    readonly variants: EnsembleVariant[],
    private rng: Rng,
    private stepIndex: number,
    readonly baseModel: string,
    private readonly secondDir: string | null,
  ) {
    this.benchmarks = selectBenchmarks(world, config.eval.benchmarks, config.eval.size)
  }

  /** A fresh run: Challenger and Solver both start from `baseModel`. */
  static async start(baseModel: string, config: RzeroConfig, world: TaskWorld, o: RzeroRunOptions = {}): Promise<RzeroRun> {
    checkLevels(world, config.challenger.levels, 'challenger.levels')
    return RzeroRun.open(config, world, o, { baseModel: resolve(baseModel), checkpoint: null, secondModel: undefined, step: 0, rng: new Rng(config.seed) })
  }

  /** Continues from a checkpoint folder written by `checkpoint()`; the folder is checked before anything is loaded. */
  static async resume(dir: string, world: TaskWorld, o: RzeroRunOptions = {}): Promise<RzeroRun> {
    const ckpt = await resumeRun<RzeroRunState>(dir, {
      format: FORMAT,
      world,
      parse: (s, file) => {
        if (s.secondModel !== null && typeof s.secondModel !== 'string') throw new CheckpointError(file, 'secondModel', 'field', `${file}: secondModel must be a folder path or null`)
        return { ...s, format: FORMAT, rng: checkedRngState(s.rng, file), baseModel: checkedPath(s.baseModel, file, 'baseModel'), secondModel: s.secondModel, config: resolveRzeroConfig(s.config, TOY_PRESET, file) }
      },
      roles: (s) => (s.config.roleAdapters ? [roleAdaptersCheckpointRole(rzeroRoleAdapters(s.config))] : ROLES.map((name) => ({ name, trained: true }))),
    })
    const { state } = ckpt
    return RzeroRun.open(state.config, world, o, { baseModel: state.baseModel, checkpoint: ckpt.paths, secondModel: state.secondModel, step: state.step, rng: Rng.fromState(state.rng) })
  }

  private static async open(
    config: RzeroConfig,
    world: TaskWorld,
    o: RzeroRunOptions,
    s: { baseModel: string; checkpoint: ((role: string) => { model: string; trainer: string }) | null; secondModel: string | null | undefined; step: number; rng: Rng },
  ): Promise<RzeroRun> {
    const set = new PolicySet(o.openPolicy ?? openPolicy)
    return set.build(async () => {
      const { challenger, solver } = await RzeroRun.openRoles(set, config, s, o)
      // a resumed run reuses its S_c folder; a built variant whose cache was cleared is rebuilt
      const stale = typeof s.secondModel === 'string' && !existsSync(join(s.secondModel, 'config.json')) && config.ensemble.second.model === ''
      const secondModel = s.secondModel === undefined || stale ? await RzeroRun.secondModelDir(config, s.baseModel, o) : s.secondModel
      const second = secondModel && usesEnsemble(config) ? await set.open({ model: secondModel, threads: o.threads, weights: config.frozenWeights }) : null // an ensemble member only samples: it takes the run's frozenWeights
      const variants = [...RzeroRun.buildVariants(config, solver.policy, second), ...(usesEnsemble(config) ? (o.extraVariants ?? []) : [])]
      return new RzeroRun(config, world, challenger.policy, solver.policy, challenger.trainer, solver.trainer, set, second, variants, s.rng, s.step, s.baseModel, secondModel ?? null)
    })
  }

  /** The Challenger and the Solver: two models from the base, or (roleAdapters) two adapters on it with one trainer. */
  private static async openRoles(
    set: PolicySet,
    config: RzeroConfig,
    s: { baseModel: string; checkpoint: ((role: string) => { model: string; trainer: string }) | null },
    o: RzeroRunOptions,
  ): Promise<Record<Role, { policy: Policy; trainer: PolicyTrainer }>> {
    const challengerPlan = rolePlan(config, phaseSteps(config, 'challenger'))
    const solverPlan = rolePlan(config, phaseSteps(config, 'solver'))
    if (config.roleAdapters) {
      // the roles' plans differ only in their schedules, which the adapters keep on their own clocks
      const shared = await openRoleTrainee(set, { base: s.baseModel, checkpoint: s.checkpoint?.(ROLE_ADAPTERS_ROLE), threads: o.threads, plan: solverPlan, roles: rzeroRoleAdapters(config), seed: config.seed })
      const role = (name: Role) => ({ policy: new RolePolicy(shared.policy, name), trainer: shared.trainer })
      return { challenger: role('challenger'), solver: role('solver') }
    }
    const reference = await openReference(set, { base: s.baseModel, weights: config.frozenWeights }, solverPlan) // one frozen base serves both roles' KL
    const trainee = (role: Role, plan: TrainingPlan) => openTrainee(set, { base: s.baseModel, checkpoint: s.checkpoint?.(role), threads: o.threads, plan, reference })
    return { challenger: await trainee('challenger', challengerPlan), solver: await trainee('solver', solverPlan) }
  }

  /**
   * The folder of DIS's S_c: the configured one; by default ('') the cached Llama variant when the
   * base is the bundled toy model, and none on any other model (its ensemble is then the Solver
   * at several temperatures).
   */
  private static async secondModelDir(c: RzeroConfig, baseModel: string, o: RzeroRunOptions): Promise<string | null> {
    if (!usesEnsemble(c) || c.ensemble.second.model === 'none') return null
    if (c.ensemble.second.model !== '') return c.ensemble.second.model
    return toySecondModel(baseModel, c.ensemble.second.healSteps, { cacheRoot: o.cacheRoot, threads: o.threads, log: o.log, openPolicy: o.openPolicy })
  }

  /** DIS §4.2: the current Solver at two temperatures, the second model, and any remote endpoints; or the Solver alone (the Solver's variants first: solverVariantCount). */
  static buildVariants(c: RzeroConfig, solver: Policy, second: Policy | null): EnsembleVariant[] {
    const e = c.ensemble
    if (!usesEnsemble(c)) return [{ sampler: new InProcessSampler(solver, { name: `solver@${e.solverOnly.temperature}` }), temperature: e.solverOnly.temperature, k: e.solverOnly.k, timeoutMs: e.timeoutMs }]
    const out: EnsembleVariant[] = e.solverTemperatures.map((t) => ({ sampler: new InProcessSampler(solver, { name: `solver@${t}` }), temperature: t, k: e.k, timeoutMs: e.timeoutMs }))
    if (second) out.push({ sampler: new InProcessSampler(second, { name: `${second.config.architecture}:${second.dir.split(/[\\/]/).filter(Boolean).pop()}@${e.second.temperature}` }), temperature: e.second.temperature, k: e.k, timeoutMs: e.timeoutMs })
    e.remote.forEach((r) => {
      const timeoutMs = r.timeoutMs || e.timeoutMs
      const sampler = new RemoteSampler({ baseUrl: r.url, model: r.model || undefined, requestTimeoutMs: timeoutMs })
      out.push({ sampler, temperature: r.temperature, k: r.k || e.k, timeoutMs })
    })
    return out
  }

  get step(): number {
    return this.stepIndex
  }

  get phase(): Phase {
    return phaseOf(this.config, this.stepIndex)
  }

  dispose(): void {
    for (const v of this.variants) void v.sampler.dispose?.()
    this.policies.dispose()
  }

  /** The LoRA adapter `role`'s training sequences run through (undefined: the role's own model). */
  private adapterOf(role: Role): string | undefined {
    return this.config.roleAdapters ? role : undefined
  }

  /** Asks the ensemble about parsed questions (never throws for a variant's failure). */
  private async askEnsemble(questions: string[], role: number): Promise<EnsembleResult> {
    const answers = this.world.answers
    return queryEnsemble(this.variants, questions.map((q) => this.world.rzero.solverPrompt(q)), {
      extract: (t) => answers.parse(t)?.answer ?? null,
      equivalent: (a, b) => answers.equivalent(a, b),
      maxTokens: this.config.ensemble.maxTokens,
      seed: seedOf(this.config, this.stepIndex, role),
      timeoutMs: this.config.ensemble.timeoutMs,
      keepSamples: true,
    })
  }

  async runStep(): Promise<RzeroStepRecord> {
    const record = this.phase === 'challenger' ? await this.challengerStep() : await this.solverStep()
    return record
  }

  /** One Challenger GRPO step (the Solver frozen). */
  private async challengerStep(): Promise<ChallengerRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const w = this.world.rzero
    const level = c.challenger.levels[this.rng.nextInt(c.challenger.levels.length)]
    const prompt = w.challengerPrompt(level)
    const [group] = await this.challenger.generate([prompt], { n: c.challenger.batch, temperature: c.challenger.temperature, maxTokens: c.challenger.maxTokens, seed: seedOf(c, this.stepIndex, CALL.challengerBatch) })
    let generatedTokens = group.reduce((a, t) => a + t.tokens.length, 0)
    const parsed = group.map((t) => w.parseQuestion(t.text))
    const valid = parsed.flatMap((p, i) => (p ? [i] : []))
    const ens = valid.length ? await this.askEnsemble(valid.map((i) => parsed[i]!.question), CALL.challengerEnsemble) : null
    generatedTokens += tokensOf(ens)
    const verdicts = parsed.map(() => null as QuestionVerdict | null)
    valid.forEach((i, j) => (verdicts[i] = ens!.questions[j]))
    const { rewards, rUnc, rDis, rRep, pHat } = scoreChallengerBatch(parsed.map((p) => p?.question ?? null), verdicts, c.reward, (q) => this.world.answers.repetitionText(q))
    // If no variant answered, parsed questions have no measured reward: skip the update, keep the record.
    const silent = ens !== null && ens.variants.every((v) => v.status !== 'ok')
    let train: StepMetrics | null = null
    let skipped: string | null = silent ? 'no ensemble variant responded' : null
    if (!silent) {
      const adv = computeAdvantages('grpo', rewards, rewards.map(() => 0))
      const encoded = this.challenger.encodePrompt(prompt)
      const sequences = group.map((t, i) => sampledSequence(encoded, t, adv[i], undefined, this.adapterOf('challenger'))).filter((s) => s.completion.length > 0)
      if (sequences.length) train = await this.challengerTrainer.step({ sequences })
      else skipped = 'no completion tokens'
    }
    const infos = valid.flatMap((i) => this.world.verifier.questionInfo?.(parsed[i]!.question) ?? [])
    const trueAccuracy = ens ? this.solverTrueAccuracy(valid.map((i) => parsed[i]!.question), ens) : []
    const parsedVerdicts = valid.map((i) => verdicts[i]!)
    this.stepIndex++
    return {
      step: this.stepIndex,
      phase: 'challenger',
      level,
      questions: group.length,
      parseRate: valid.length / group.length,
      distinctRate: valid.length ? new Set(valid.map((i) => parsed[i]!.key)).size / valid.length : NaN,
      rDis: spread(rDis),
      rUnc: spread(rUnc),
      rRep: spread(rRep),
      pHat: spread(pHat),
      reward: spread(rewards),
      questionGoodRate: infos.length ? infos.filter((x) => x.wellPosed).length / infos.length : NaN,
      questionLevel: spread(infos.flatMap((x) => (x.level === null ? [] : [x.level]))),
      solverTrueAccuracy: spread(trueAccuracy),
      disagreementAccuracyCorrelation: pearson(parsedVerdicts.map((v) => v.rDis), trueAccuracy),
      pHatAccuracyCorrelation: pearson(parsedVerdicts.map((v) => v.pHat), trueAccuracy),
      ensemble: ensembleRecord(ens ? [ens] : []),
      skipped,
      train,
      generatedTokens,
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    }
  }

  /**
   * Per question, the share of the Solver variants' samples (the first variants, buildVariants'
   * order) whose answer is the reference; a sample with no answer is wrong; NaN when unverifiable
   * or when no Solver variant answered.
   */
  private solverTrueAccuracy(questions: readonly string[], ens: EnsembleResult): number[] {
    const solverReports = ens.variants.slice(0, solverVariantCount(this.config)).filter((v) => v.status === 'ok' && v.answers)
    return questions.map((q, j) => {
      if (this.world.verifier.referenceAnswer(q) === null) return NaN
      return shareTrue(solverReports.flatMap((v) => v.answers![j].map((a) => a !== null && isReferenceAnswer(this.world, q, a) === true)))
    })
  }

  /** One Solver GRPO step on pseudo-labelled questions from the frozen Challenger. */
  private async solverStep(): Promise<SolverRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const w = this.world.rzero
    const prompts = Array.from({ length: c.solver.candidates }, () => w.challengerPrompt(c.challenger.levels[this.rng.nextInt(c.challenger.levels.length)]))
    const proposed = await this.challenger.generate(prompts, { n: 1, temperature: c.challenger.temperature, maxTokens: c.challenger.maxTokens, seed: seedOf(c, this.stepIndex, CALL.solverCandidates) })
    let generatedTokens = proposed.reduce((a, g) => a + g[0].tokens.length, 0)
    const parsed = proposed.map((g) => w.parseQuestion(g[0].text))
    const unique = new Map<string, string>()
    for (const p of parsed) if (p && !unique.has(p.key)) unique.set(p.key, p.question)
    const questions = [...unique.values()]
    const ens = questions.length ? await this.askEnsemble(questions, CALL.solverEnsemble) : null
    generatedTokens += tokensOf(ens)
    const [lo, hi] = c.solver.band
    // R-Zero's filter on the pooled p̂, majority answer as pseudo-label
    const kept = questions
      .map((q, j) => ({ q, v: ens!.questions[j] }))
      .filter(({ v }) => v.responding > 0 && v.vote.answer !== null && v.pHat >= lo && v.pHat <= hi)
      .slice(0, c.solver.questions)
    let train: StepMetrics | null = null
    const rewards: number[] = []
    let right = 0
    if (kept.length) {
      const rollouts = await this.solver.generate(kept.map(({ q }) => w.solverPrompt(q)), { n: c.solver.n, temperature: c.solver.temperature, maxTokens: c.solver.maxTokens, seed: seedOf(c, this.stepIndex, CALL.solverRollouts) })
      const groups: number[] = []
      const flat: { prompt: number[]; t: Completion }[] = []
      rollouts.forEach((g, qi) => {
        const label = kept[qi].v.vote.answer as string
        const encoded = this.solver.encodePrompt(w.solverPrompt(kept[qi].q))
        for (const t of g) {
          generatedTokens += t.tokens.length
          const a = this.world.answers.parse(t.text)?.answer ?? null
          rewards.push(a !== null && this.world.answers.equivalent(a, label) ? 1 : 0) // R-Zero Solver reward: agreement with the pseudo-label
          if (verifyPosed(this.world, kept[qi].q, t.text)) right++
          groups.push(qi)
          flat.push({ prompt: encoded, t })
        }
      })
      const adv = computeAdvantages('grpo', rewards, groups)
      const sequences = flat.map(({ prompt, t }, i) => sampledSequence(prompt, t, adv[i], undefined, this.adapterOf('solver'))).filter((s) => s.completion.length > 0)
      if (sequences.length) train = await this.solverTrainer.step({ sequences })
    }
    this.stepIndex++
    return {
      step: this.stepIndex,
      phase: 'solver',
      candidates: prompts.length,
      parseRate: parsed.filter(Boolean).length / prompts.length,
      distinct: questions.length,
      kept: kept.length,
      keptRate: questions.length ? kept.length / questions.length : NaN,
      pHat: spread(ens ? ens.questions.map((v) => v.pHat) : []),
      pseudoLabelAccuracy: shareTrue(kept.map(({ q, v }) => isReferenceAnswer(this.world, q, v.vote.answer as string))),
      rolloutAccuracy: rewards.length && kept.every(({ q }) => this.world.verifier.referenceAnswer(q) !== null) ? right / rewards.length : NaN,
      reward: spread(rewards),
      ensemble: ensembleRecord(ens ? [ens] : []),
      train,
      generatedTokens,
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    }
  }

  /** Greedy held-out Solver accuracy (macro over the benchmarks; ground truth from the world's verifier), kept for the step's eval file. */
  async evaluate(): Promise<number> {
    const solver = { prompt: (q: string) => this.world.rzero.solverPrompt(q), verifier: this.world.verifier }
    return this.evals.add(await evaluateBenchmarks(this.solver, this.benchmarks, solver, greedyProtocol(this.config.solver.maxTokens), this.stepIndex))
  }

  /** Writes both models (or the base with both role adapters), the optimizer state(s), the RNG and the evaluations since the last checkpoint under `dir` (checkpointRun). */
  async checkpoint(dir: string): Promise<void> {
    const state: RzeroRunState = { format: FORMAT, version: RUN_STATE_VERSION, step: this.stepIndex, world: worldRecord(this.world), rng: this.rng.state(), baseModel: this.baseModel, secondModel: this.secondDir, config: this.config }
    await checkpointRun(dir, {
      state,
      roles:
        this.challenger instanceof RolePolicy
          ? [{ name: ROLE_ADAPTERS_ROLE, policy: this.challenger.base, trainer: this.challengerTrainer }]
          : [
              { name: 'challenger', policy: this.challenger, trainer: this.challengerTrainer },
              { name: 'solver', policy: this.solver, trainer: this.solverTrainer },
            ],
      extra: (tmp) => this.evals.intoCheckpoint(tmp, this.stepIndex),
    })
    await this.evals.flush(dir)
  }
}
