// J-Zero (JZ §3): a Challenger C_θc and a Solver S_θs (two copies of one policy) and a scalar Judge
// J_φ (a reward model) co-evolve. Each iteration has three stages:
//   1. Challenger GRPO steps: N tasks from one instruction form one group; the Solver answers
//      each M times, the Judge scores the answers; r^C = max(0, 1 − r̄ − r_rep), or −1 − r_rep
//      on a format failure (Eq. 4–6), with BLEU-distance clusters for r_rep (Eq. 5).
//   2. Solver GRPO steps on tasks of the frozen Challenger selected by Judge-score dispersion
//      (Eq. 8), rewarded by the Judge σ(J(x, y)) (Eq. 9), clip (0.20, 0.28).
//   3. Judge Bradley–Terry steps (Eq. 13) on role-asymmetry (Eq. 10) and subtask-amplification
//      (Eq. 11–12) pairs, in equal proportions, built on fresh held-out tasks.
// Measured each iteration, never fed back: the Judge's pairwise accuracy on a verifier-ordered
// held-out preference set (JZ App. B counterpart) and the verifier win rate of each pair type's
// chosen side (JZ Figure 2 counterpart); held-out Solver accuracy via evaluate().
// With `roleAdapters`, the two copies of the policy are two LoRA adapters on one shared base
// ('challenger', 'solver') with one trainer: each role samples through its own adapter, and each
// stage's steps move only its role's, on the role's own step clock. The Judge stays its own model.
// With `switches.judge: 'verifier'` (a control outside the paper) the world's verifier scores every
// answer 1/0 wherever σ(J) would (stages 1 and 2, Eq. 8's dispersion); the frozen Judge is measured.
import { resolve } from 'node:path'
import { CheckpointError } from '../../engine/errors.js'
import type { Prompt } from '../../engine/model.js'
import { computeAdvantages } from '../../rl/advantages.js'
import { spread, type Spread } from '../../stats/summary.js'
import type { StepMetrics } from '../../train/trainer.js'
import { Rng } from '../../util/prng.js'
import { EvalLog, evaluateBenchmarks, greedyProtocol, selectBenchmarks } from '../common/evaluation.js'
import type { BaseStepRecord } from '../common/run.js'
import { type BaseRunState, checkedPath, checkedRngState, checkpointRun, resumeRun, RUN_STATE_VERSION } from '../common/checkpoint.js'
import { openPolicy, PolicySet, type OpenPolicy, type Policy, type PolicyTrainer } from '../common/policy.js'
import { loraOf, openReference, openTrainee, sampledSequence, samplingSeed, type Sample, trainerOptions, type TrainingPlan } from '../common/training.js'
import { openRoleTrainee, roleAdaptersCheckpointRole, ROLE_ADAPTERS_ROLE, RolePolicy, type RoleAdapter } from '../common/role-adapters.js'
import { resolveJzeroConfig, TOY_PRESET, type JzeroConfig, type PolicyStage } from './config.js'
import { bradleyTerryBatch, critiqueCacheFor, judgeRewards, openJudge, pairMargins, pairwiseAccuracy, type JudgeView } from './judge.js'
import { amplify, ampPair, balancedUnion, judgeBatches, rolePair, verifierWinRate, type JudgePair, type WinRate } from './pairs.js'
import { challengerBatchRewards } from './rewards.js'
import { selectByDispersion } from './select.js'
import type { Benchmark, HeldOutPreference, TaskWorld } from '../../worlds/types.js'
import { checkLevels, verifierScore, verifyPosed, worldRecord } from '../common/world.js'

const mean = (xs: readonly number[]) => spread(xs).mean

/** The optimizer steps of one stage, summarized. */
export interface StageTrain {
  updates: number
  skipped: number
  loss: number
  gradNorm: number
  kl: number
  clipFrac: number
}

function summarize(steps: StepMetrics[]): StageTrain {
  const ok = steps.filter((s) => !s.skipped)
  const obj = (k: string) => mean(ok.map((s) => s.objective[k] ?? NaN))
  return { updates: ok.length, skipped: steps.length - ok.length, loss: mean(ok.map((s) => s.loss)), gradNorm: mean(ok.map((s) => s.gradNorm)), kl: obj('kl'), clipFrac: obj('clipFrac') }
}

export interface JzeroStepRecord extends BaseStepRecord {
  step: number
  challenger: {
    tasks: number
    formatRate: number
    /** r^C (Eq. 6). */
    reward: Spread
    /** r̄ (Eq. 4). */
    meanJudgeScore: Spread
    /** r_rep (Eq. 5). */
    repetition: Spread
    /** Distinct well-formed tasks / well-formed tasks (last Challenger step). */
    distinctRate: number
    train: StageTrain
  }
  selection: {
    candidates: number
    kept: number
    /** s_i (Eq. 8) of all candidates and of the kept ones. */
    dispersionAll: Spread
    dispersionKept: Spread
    /** Measurement only: verifier accuracy of the M answers to kept tasks. */
    keptVerifierAccuracy: number
  }
  solver: {
    /** r^S = σ(J) (Eq. 9) of the sampled responses (the verifier's 1/0 in the 'verifier' control). */
    reward: Spread
    /** Measurement only: the verifier's accuracy of those responses. */
    verifierAccuracy: number
    /** Measurement only: the Judge's pairwise accuracy on the Solver's own responses, every (right, wrong) pair of one task's rollouts by the verifier (ties ½); the Judge's even when the verifier rewards them. */
    judgePairAccuracy: number
    /** The (right, wrong) pairs it is measured on. */
    judgePairs: number
    train: StageTrain
  }
  judge: {
    tasks: number
    rolePairs: number
    ampPairs: number
    ampFailures: { decompose: number; compose: number }
    /** Pairs in D after balancing (Eq. 13's data). */
    trainPairs: number
    /** Verifier win rate of each type's chosen side (JZ Figure 2 counterpart). */
    winRate: { role: WinRate; amp: WinRate }
    /** Pairwise accuracy on D before and after this iteration's Judge steps. */
    trainPairAccuracy: { before: number; after: number }
    /** Mean margin J(x, y⁺) − J(x, y⁻) over D before and after. */
    trainPairMargin: { before: number; after: number }
    /** Pairwise accuracy on the verifier-ordered held-out set, before and after. */
    heldOut: { before: number; after: number; plainAfter: number }
    train: StageTrain | null
  }
  /** = judge.heldOut.after (for the report). */
  judgeAccuracy: number
}


/** The sampling seed of a call: steps spaced 100,003 apart to hold the call codes below. */
function seedOf(runSeed: number, step: number, call: number): number {
  return samplingSeed(runSeed, step, call, { stride: 100_003 })
}

// Sampling-call codes, distinct within an iteration for up to 99 Challenger and 999 Solver steps.
const CALL = {
  challengerTasks: (s: number) => 1000 + 10 * s,
  challengerSolver: (s: number) => 1001 + 10 * s,
  poolTasks: 2000,
  poolSolver: 2001,
  solver: (s: number) => 3000 + s,
  judgeTasks: 4000,
  judgeOneShot: 4001,
  judgeChallengerAnswer: 4002,
  decompose: 4003,
  subtask: (k: number) => 4010 + k,
  compose: 4004,
}

export interface JzeroRunState extends BaseRunState {
  format: 'autodidact.jzero.run'
  rng: [number, number, number, number]
  baseModel: string
  /** The Judge's initial folder, or null: a fresh score head on the base (seeded by the run's seed). */
  judgeModel: string | null
  judgeAccuracy: number
  config: JzeroConfig
}

export interface RunOptions {
  threads?: number
  openPolicy?: OpenPolicy
}

const FORMAT = 'autodidact.jzero.run'
type Role = 'challenger' | 'solver' | 'judge'

/** With `roleAdapters`: the Challenger's and the Solver's adapters, both trained, each on its own step clock (JZ: constant lr). */
const JZERO_ROLE_ADAPTERS: readonly RoleAdapter[] = [
  { name: 'challenger', trained: true, schedule: { kind: 'constant' } },
  { name: 'solver', trained: true, schedule: { kind: 'constant' } },
]

export class JzeroRun {
  private readonly heldOutPreferences: HeldOutPreference[]
  /** How the Judge reads a response (judge.critiqueTokens), counting the critique tokens it writes. */
  private readonly judgeView: JudgeView
  private critiqueTokensWritten = 0
  private readonly benchmarks: Benchmark[]
  private readonly evals = new EvalLog()

  private constructor(
    readonly config: JzeroConfig,
    readonly world: TaskWorld,
    readonly challenger: Policy,
    readonly solver: Policy,
    readonly judge: Policy,
    private readonly challengerTrainer: PolicyTrainer,
    private readonly solverTrainer: PolicyTrainer,
    private readonly judgeTrainer: PolicyTrainer | null,
    private readonly policies: PolicySet,
    private rng: Rng,
    private stepIndex: number,
    readonly baseModel: string,
    readonly judgeModel: string | null,
    private judgeAccuracy: number,
    /** The folder a frozen Judge kept below f32 was read from (its checkpoint copies it), else null. */
    private readonly frozenJudgeFolder: string | null,
  ) {
    this.heldOutPreferences = world.data.heldOutPreferences?.(config.eval.judgePairs) ?? []
    this.judgeView = {
      critiqueTokens: config.judge.critiqueTokens,
      wrote: (tokens) => void (this.critiqueTokensWritten += tokens),
      critiqueCache: critiqueCacheFor(config.judge, config.switches.trainJudge),
    }
    this.benchmarks = selectBenchmarks(world, config.eval.benchmarks, config.eval.size)
  }

  /**
   * A fresh run: Challenger and Solver start from `baseModel`; the Judge from `judgeModel`, or
   * (null) from `baseModel` with a fresh score head (JZ §3.1: J_φ is a scalar reward model).
   */
  static async start(baseModel: string, judgeModel: string | null, config: JzeroConfig, world: TaskWorld, o: RunOptions = {}): Promise<JzeroRun> {
    checkLevels(world, [config.challenger.level], 'challenger.level')
    const set = new PolicySet(o.openPolicy ?? openPolicy)
    return set.build(async () => {
      const run = await JzeroRun.open(set, config, world, { baseModel: resolve(baseModel), judgeModel: judgeModel === null ? null : resolve(judgeModel), checkpoint: null, step: 0, rng: new Rng(config.seed), judgeAccuracy: NaN }, o)
      run.judgeAccuracy = (await run.judgeHeldOut()).accuracy
      return run
    })
  }

  /** Continues from a checkpoint folder written by `checkpoint()`; the folder is checked before anything is loaded. */
  static async resume(dir: string, world: TaskWorld, o: RunOptions = {}): Promise<JzeroRun> {
    const ckpt = await resumeRun<JzeroRunState>(dir, {
      format: FORMAT,
      world,
      parse: (s, file) => {
        // JSON writes NaN (a world without a held-out preference set) as null
        if (typeof s.judgeAccuracy !== 'number' && s.judgeAccuracy !== null) throw new CheckpointError(file, 'judgeAccuracy', 'field', `${file}: judgeAccuracy must be a number`)
        const judgeModel = s.judgeModel === null ? null : checkedPath(s.judgeModel, file, 'judgeModel')
        return { ...s, format: FORMAT, rng: checkedRngState(s.rng, file), baseModel: checkedPath(s.baseModel, file, 'baseModel'), judgeModel, judgeAccuracy: s.judgeAccuracy ?? NaN, config: resolveJzeroConfig(s.config, TOY_PRESET, file) }
      },
      roles: (s) => [
        ...(s.config.roleAdapters ? [roleAdaptersCheckpointRole(JZERO_ROLE_ADAPTERS)] : [{ name: 'challenger', trained: true }, { name: 'solver', trained: true }]),
        { name: 'judge', trained: s.config.switches.trainJudge },
      ],
    })
    const { state } = ckpt
    const set = new PolicySet(o.openPolicy ?? openPolicy)
    return set.build(() => JzeroRun.open(set, state.config, world, { baseModel: state.baseModel, judgeModel: state.judgeModel, checkpoint: ckpt.paths, step: state.step, rng: Rng.fromState(state.rng), judgeAccuracy: state.judgeAccuracy }, o))
  }

  private static async open(
    set: PolicySet,
    c: JzeroConfig,
    world: TaskWorld,
    s: { baseModel: string; judgeModel: string | null; checkpoint: ((role: string) => { model: string; trainer: string }) | null; step: number; rng: Rng; judgeAccuracy: number },
    o: RunOptions,
  ): Promise<JzeroRun> {
    // the Judge first: a folder that is not a reward model fails before the policies load
    const judgePaths = s.checkpoint?.('judge')
    // a frozen Judge folder takes the run's frozenWeights, read from the run's judgeModel (a checkpoint's copy of it may be pruned later); a fresh score head on the base stays f32
    const frozenJudgeFolder = !c.switches.trainJudge && (c.frozenWeights ?? 'f32') !== 'f32' && s.judgeModel !== null ? s.judgeModel : null
    const judgeRef = frozenJudgeFolder
      ? { model: frozenJudgeFolder, weights: c.frozenWeights }
      : judgePaths
        ? { model: judgePaths.model }
        : s.judgeModel !== null
          ? { model: s.judgeModel }
          : { model: s.baseModel, scoreHead: { seed: c.seed } }
    const judge = await openJudge(set, { ...judgeRef, threads: o.threads }, world, c.judge)
    const judgeTrainer = c.switches.trainJudge ? await judge.trainer(trainerOptions(judgePlan(c), null)) : null
    if (judgeTrainer && judgePaths) await judgeTrainer.loadState(judgePaths.trainer)
    const { challenger, solver } = await JzeroRun.openPolicies(set, c, s, o)
    return new JzeroRun(c, world, challenger.policy, solver.policy, judge, challenger.trainer, solver.trainer, judgeTrainer, set, s.rng, s.step, s.baseModel, s.judgeModel, s.judgeAccuracy, frozenJudgeFolder)
  }

  /** The Challenger and the Solver: two copies of the base, or (roleAdapters) two adapters on it with one trainer. */
  private static async openPolicies(
    set: PolicySet,
    c: JzeroConfig,
    s: { baseModel: string; checkpoint: ((role: string) => { model: string; trainer: string }) | null },
    o: RunOptions,
  ): Promise<Record<'challenger' | 'solver', { policy: Policy; trainer: PolicyTrainer }>> {
    const challengerPlan = stagePlan(c.challenger, c)
    const solverPlan = stagePlan(c.solver, c)
    if (c.roleAdapters) {
      // the config refuses stages whose lr, KL or clip differ (SHARED_TRAINER_FIELDS): one plan serves both
      const shared = await openRoleTrainee(set, { base: s.baseModel, checkpoint: s.checkpoint?.(ROLE_ADAPTERS_ROLE), threads: o.threads, plan: solverPlan, roles: JZERO_ROLE_ADAPTERS, seed: c.seed })
      const role = (name: 'challenger' | 'solver') => ({ policy: new RolePolicy(shared.policy, name), trainer: shared.trainer })
      return { challenger: role('challenger'), solver: role('solver') }
    }
    // one frozen copy of the initial policy is the KL reference of both (they share the initialization)
    const reference = await openReference(set, { base: s.baseModel, weights: c.frozenWeights }, challengerPlan, solverPlan)
    const challenger = await openTrainee(set, { base: s.baseModel, checkpoint: s.checkpoint?.('challenger'), threads: o.threads, plan: challengerPlan, reference })
    const solver = await openTrainee(set, { base: s.baseModel, checkpoint: s.checkpoint?.('solver'), threads: o.threads, plan: solverPlan, reference })
    return { challenger, solver }
  }

  /** The LoRA adapter `role`'s training sequences run through (undefined: the role's own policy). */
  private adapterOf(role: 'challenger' | 'solver'): string | undefined {
    return this.config.roleAdapters ? role : undefined
  }

  get step(): number {
    return this.stepIndex
  }

  dispose(): void {
    this.policies.dispose()
  }

  private async sample(model: Policy, prompts: Prompt[], n: number, o: PolicyStage, call: number): Promise<Sample[][]> {
    if (!prompts.length) return []
    const out = await model.generate(prompts, { n, temperature: o.temperature, topP: o.topP, maxTokens: o.maxTokens, seed: seedOf(this.config.seed, this.stepIndex, call) })
    return out.map((group, i) => {
      const prompt = model.encodePrompt(prompts[i])
      return group.map((completion) => ({ prompt, completion }))
    })
  }

  /** Well-formed, distinct tasks from the Challenger's instruction (n samples of one prompt). */
  private async sampleTasks(n: number, call: number, exclude: ReadonlySet<string> = new Set()): Promise<{ tasks: string[]; outputs: number; tokens: number }> {
    const [group] = await this.sample(this.challenger, [this.world.jzero.challengerPrompt(this.config.challenger.level)], n, this.config.challenger, call)
    const seen = new Set(exclude)
    const tasks: string[] = []
    for (const t of group) {
      const p = this.world.jzero.parseTask(t.completion.text)
      if (p && !seen.has(p.key)) {
        seen.add(p.key)
        tasks.push(p.question)
      }
    }
    return { tasks, outputs: group.length, tokens: tokens(group) }
  }

  /** One J-Zero iteration (three stages); returns its metrics line. */
  async runStep(): Promise<JzeroStepRecord> {
    const started = process.hrtime.bigint()
    const counter = { tokens: 0 }
    const critiqueBefore = this.critiqueTokensWritten
    const challenger = await this.challengerStage(counter)
    const { kept, record: selection } = await this.selectionStage(counter)
    const solver = await this.solverStage(kept, counter)
    const judge = await this.judgeStage(new Set(kept), counter)
    this.stepIndex++
    this.judgeAccuracy = judge.heldOut.after
    return { step: this.stepIndex, challenger, selection, solver, judge, judgeAccuracy: judge.heldOut.after, generatedTokens: counter.tokens + this.critiqueTokensWritten - critiqueBefore, seconds: Number(process.hrtime.bigint() - started) / 1e9 }
  }

  /** The reward of each (task, answer): σ(J_φ) (JZ Eq. 2, 9), or the verifier's 1/0 in the 'verifier' control (wrong on judge.verifierFlip of inputs). */
  private answerRewards(items: readonly { question: string; response: string }[]): Promise<number[]> {
    const { judge: source } = this.config.switches
    const { verifierFlip } = this.config.judge
    if (source === 'verifier') return Promise.resolve(items.map((it) => verifierScore(this.world, it.question, it.response, verifierFlip, String(this.config.seed))))
    return judgeRewards(this.judge, this.world, items, this.judgeView)
  }

  // ---- Stage 1: Challenger GRPO steps (Eq. 4–7)
  private async challengerStage(counter: { tokens: number }): Promise<JzeroStepRecord['challenger']> {
    const c = this.config.challenger
    const w = this.world.jzero
    const steps: StepMetrics[] = []
    let last = { tasks: 0, formatRate: NaN, reward: spread([]), meanJudgeScore: spread([]), repetition: spread([]), distinctRate: NaN }
    for (let s = 0; s < c.steps; s++) {
      const groups = await this.sample(this.challenger, Array(c.batch).fill(w.challengerPrompt(c.level)), c.rollouts, c, CALL.challengerTasks(s))
      const trajs = groups.flat()
      counter.tokens += tokens(trajs)
      const tasks = trajs.map((t) => w.parseTask(t.completion.text)?.question ?? null)
      const ok = tasks.map((t, i) => (t === null ? -1 : i)).filter((i) => i >= 0)
      const answers = await this.sample(this.solver, ok.map((i) => w.solverPrompt(tasks[i]!)), c.solverSamples, this.config.solver, CALL.challengerSolver(s))
      counter.tokens += answers.reduce((a, g) => a + tokens(g), 0)
      const flat = answers.flatMap((g, k) => g.map((t) => ({ question: tasks[ok[k]]!, response: t.completion.text })))
      const scores = await this.answerRewards(flat)
      const perTask: number[][] = tasks.map(() => [])
      flat.forEach((_, j) => perTask[ok[Math.floor(j / c.solverSamples)]].push(scores[j]))
      const r = challengerBatchRewards({ tasks: tasks.map((t) => (t === null ? null : this.world.answers.repetitionText(t))), scores: perTask, tau: c.repetition.tau, lambda: c.repetition.lambda })
      // all N tasks answer one instruction: one GRPO group (JZ §3.1)
      const advantages = computeAdvantages(this.config.ppo.advantage, r.rewards, r.rewards.map(() => 0))
      const sequences = trajs.map((t, i) => sampledSequence(t.prompt, t.completion, advantages[i], undefined, this.adapterOf('challenger'))).filter((q) => q.completion.length > 0)
      if (sequences.length) steps.push(await this.challengerTrainer.step({ sequences }))
      const wellFormed = tasks.filter((t): t is string => t !== null)
      last = {
        tasks: tasks.length,
        formatRate: wellFormed.length / tasks.length,
        reward: spread(r.rewards),
        meanJudgeScore: spread(r.meanScores),
        repetition: spread(r.repetition),
        distinctRate: wellFormed.length ? new Set(wellFormed).size / wellFormed.length : NaN,
      }
    }
    return { ...last, train: summarize(steps) }
  }

  // ---- Task selection by score dispersion (Eq. 8)
  private async selectionStage(counter: { tokens: number }): Promise<{ kept: string[]; record: JzeroStepRecord['selection'] }> {
    const o = this.config.selection
    const pool = await this.sampleTasks(o.pool, CALL.poolTasks)
    counter.tokens += pool.tokens
    const answers = await this.sample(this.solver, pool.tasks.map((q) => this.world.jzero.solverPrompt(q)), o.samples, this.config.solver, CALL.poolSolver)
    counter.tokens += answers.reduce((a, g) => a + tokens(g), 0)
    const flat = answers.flatMap((g, i) => g.map((t) => ({ question: pool.tasks[i], response: t.completion.text })))
    const scores = await this.answerRewards(flat)
    const perTask = pool.tasks.map((_, i) => scores.slice(i * o.samples, (i + 1) * o.samples))
    const sel = selectByDispersion(perTask, o.keep)
    const keptSet = new Set(sel.kept)
    const keptAnswers = flat.filter((_, j) => keptSet.has(Math.floor(j / o.samples)))
    return {
      kept: sel.kept.map((i) => pool.tasks[i]),
      record: {
        candidates: pool.tasks.length,
        kept: sel.kept.length,
        dispersionAll: spread(sel.dispersions),
        dispersionKept: spread(sel.kept.map((i) => sel.dispersions[i])),
        keptVerifierAccuracy: verifierAccuracy(this.world, keptAnswers),
      },
    }
  }

  // ---- Stage 2: Solver GRPO steps on the Judge's reward (Eq. 9)
  private async solverStage(kept: string[], counter: { tokens: number }): Promise<JzeroStepRecord['solver']> {
    const o = this.config.solver
    const steps: StepMetrics[] = []
    const rewards: number[] = []
    const sampled: { question: string; response: string }[] = []
    const margins: number[] = []
    if (kept.length) {
      for (let s = 0; s < o.steps; s++) {
        const tasks = Array.from({ length: Math.min(o.batch, kept.length) }, (_, k) => kept[(s * o.batch + k) % kept.length])
        const groups = await this.sample(this.solver, tasks.map((q) => this.world.jzero.solverPrompt(q)), o.rollouts, o, CALL.solver(s))
        counter.tokens += groups.reduce((a, g) => a + tokens(g), 0)
        const items = groups.flatMap((g, i) => g.map((t) => ({ question: tasks[i], response: t.completion.text })))
        const r = await this.answerRewards(items)
        rewards.push(...r)
        sampled.push(...items)
        // the Judge's ordering of these rollouts, whatever rewarded them (the 'verifier' control's reward orders every pair)
        const judged = this.config.switches.judge === 'verifier' ? await judgeRewards(this.judge, this.world, items, this.judgeView) : r
        margins.push(...verifierPairMargins(this.world, items, judged, o.rollouts))
        const advantages = computeAdvantages(this.config.ppo.advantage, r, items.map((_, j) => Math.floor(j / o.rollouts)))
        const trajs = groups.flat()
        // mini-batches of `miniBatch` tasks, each one optimizer update on the same rollouts
        for (let m = 0; m < tasks.length; m += o.miniBatch) {
          const sequences = trajs
            .map((t, j) => ({ t, j }))
            .filter(({ j }) => Math.floor(j / o.rollouts) >= m && Math.floor(j / o.rollouts) < m + o.miniBatch)
            .map(({ t, j }) => sampledSequence(t.prompt, t.completion, advantages[j], undefined, this.adapterOf('solver')))
            .filter((q) => q.completion.length > 0)
          if (sequences.length) steps.push(await this.solverTrainer.step({ sequences }))
        }
      }
    }
    return { reward: spread(rewards), verifierAccuracy: verifierAccuracy(this.world, sampled), judgePairAccuracy: pairwiseAccuracy(margins), judgePairs: margins.length, train: summarize(steps) }
  }

  // ---- Stage 3: Judge Bradley–Terry steps on D_role ∪ D_amp (Eq. 10–13)
  private async judgeStage(solverTasks: ReadonlySet<string>, counter: { tokens: number }): Promise<JzeroStepRecord['judge']> {
    const c = this.config
    const w = this.world
    const answerStage = { ...c.solver }
    const { tasks, tokens: taskTokens } = await this.sampleTasks(c.judge.tasks, CALL.judgeTasks, solverTasks)
    counter.tokens += taskTokens
    const prompts = tasks.map((q) => w.jzero.solverPrompt(q))
    const oneShot = (await this.sample(this.solver, prompts, 1, answerStage, CALL.judgeOneShot)).map((g) => g[0])
    const challengerAnswers = (await this.sample(this.challenger, prompts, 1, { ...answerStage, temperature: c.challenger.temperature, topP: c.challenger.topP }, CALL.judgeChallengerAnswer)).map((g) => g[0])
    counter.tokens += tokens(oneShot) + tokens(challengerAnswers)
    const role = tasks.map((q, i) => rolePair(q, oneShot[i].completion.text, challengerAnswers[i].completion.text))
    const texts = async (model: Policy, ps: Prompt[], call: number, o: PolicyStage) => {
      const out = (await this.sample(model, ps, 1, o, call)).map((g) => g[0])
      counter.tokens += tokens(out)
      return out.map((t) => t.completion.text)
    }
    const challengerAnswerStage = { ...answerStage, temperature: c.challenger.temperature, topP: c.challenger.topP }
    const amplified = await amplify(w, tasks, {
      decompose: (ps) => texts(this.challenger, ps, CALL.decompose, challengerAnswerStage),
      subtask: (() => {
        let k = 0
        return (ps: Prompt[]) => texts(this.solver, ps, CALL.subtask(++k), answerStage)
      })(),
      compose: (ps) => texts(this.challenger, ps, CALL.compose, challengerAnswerStage),
    }, { minSubtasks: c.judge.minSubtasks, maxSubtasks: c.judge.maxSubtasks, ampResponse: c.judge.ampResponse })
    const amp: JudgePair[] = []
    amplified.forEach((a, i) => {
      if (a.ok) amp.push(ampPair(tasks[i], a.response, oneShot[i].completion.text))
    })
    const D = balancedUnion(role, amp, { role: c.switches.rolePairs, amp: c.switches.ampPairs }, this.rng)
    const heldOutBefore = this.judgeAccuracy
    let train: StageTrain | null = null
    const marginsBefore = D.length ? await pairMargins(this.judge, w, D, this.judgeView) : []
    let marginsAfter = marginsBefore
    if (this.judgeTrainer && D.length && c.judge.steps > 0) {
      const steps: StepMetrics[] = []
      for (const batch of judgeBatches(D, c.judge.steps, c.judge.batch, this.rng)) steps.push(await this.judgeTrainer.step(await bradleyTerryBatch(this.judge, w, batch, this.judgeView)))
      train = summarize(steps)
      marginsAfter = await pairMargins(this.judge, w, D, this.judgeView)
    }
    const heldOut = await this.judgeHeldOut()
    return {
      tasks: tasks.length,
      rolePairs: role.length,
      ampPairs: amp.length,
      ampFailures: { decompose: amplified.filter((a) => !a.ok && a.stage === 'decompose').length, compose: amplified.filter((a) => !a.ok && a.stage === 'compose').length },
      trainPairs: D.length,
      winRate: { role: verifierWinRate(w, role), amp: verifierWinRate(w, amp) },
      trainPairAccuracy: { before: pairwiseAccuracy(marginsBefore), after: pairwiseAccuracy(marginsAfter) },
      trainPairMargin: { before: mean(marginsBefore), after: mean(marginsAfter) },
      heldOut: { before: heldOutBefore, after: heldOut.accuracy, plainAfter: heldOut.plain },
      train,
    }
  }

  /** The Judge's pairwise accuracy on the verifier-ordered held-out preference set (and its no-hedge split). */
  async judgeHeldOut(): Promise<{ accuracy: number; plain: number }> {
    const margins = await pairMargins(this.judge, this.world, this.heldOutPreferences, this.judgeView)
    return { accuracy: pairwiseAccuracy(margins), plain: pairwiseAccuracy(margins.filter((_, i) => this.heldOutPreferences[i].plain)) }
  }

  /** Greedy held-out Solver accuracy (macro over the benchmarks; ground truth from the world's verifier), kept for the step's eval file. */
  async evaluate(): Promise<number> {
    const solver = { prompt: (q: string) => this.world.jzero.solverPrompt(q), verifier: this.world.verifier }
    return this.evals.add(await evaluateBenchmarks(this.solver, this.benchmarks, solver, greedyProtocol(this.config.solver.maxTokens), this.stepIndex))
  }

  /** Writes the three models (or the base with both role adapters, and the Judge), their optimizer states, the RNG and the config under `dir` (checkpointRun). */
  async checkpoint(dir: string): Promise<void> {
    const state: JzeroRunState = { format: FORMAT, version: RUN_STATE_VERSION, step: this.stepIndex, world: worldRecord(this.world), rng: this.rng.state(), baseModel: this.baseModel, judgeModel: this.judgeModel, judgeAccuracy: this.judgeAccuracy, config: this.config }
    await checkpointRun(dir, {
      state,
      roles: [
        ...(this.challenger instanceof RolePolicy
          ? [{ name: ROLE_ADAPTERS_ROLE, policy: this.challenger.base, trainer: this.challengerTrainer }]
          : [
              { name: 'challenger', policy: this.challenger, trainer: this.challengerTrainer },
              { name: 'solver', policy: this.solver, trainer: this.solverTrainer },
            ]),
        { name: 'judge', policy: this.judge, trainer: this.judgeTrainer, ...(this.frozenJudgeFolder ? { copyOf: this.frozenJudgeFolder } : {}) },
      ],
      extra: (tmp) => this.evals.intoCheckpoint(tmp, this.stepIndex),
    })
    await this.evals.flush(dir)
  }
}

function tokens(trajs: readonly Sample[]): number {
  return trajs.reduce((a, t) => a + t.completion.tokens.length, 0)
}

function verifierAccuracy(world: TaskWorld, items: readonly { question: string; response: string }[]): number {
  const v = items.map((it) => verifyPosed(world, it.question, it.response)).filter((x): x is boolean => x !== null)
  return v.length ? v.filter(Boolean).length / v.length : NaN
}

/**
 * Judge score margins r(right) − r(wrong) over every pair of one task's responses that the verifier
 * orders (groups of `groupSize` consecutive items share a task): what pairwiseAccuracy reads.
 */
export function verifierPairMargins(world: TaskWorld, items: readonly { question: string; response: string }[], scores: readonly number[], groupSize: number): number[] {
  const margins: number[] = []
  for (let g = 0; g < items.length; g += groupSize) {
    const right: number[] = []
    const wrong: number[] = []
    for (let j = g; j < Math.min(g + groupSize, items.length); j++) {
      const v = verifyPosed(world, items[j].question, items[j].response)
      if (v !== null) (v ? right : wrong).push(scores[j])
    }
    for (const a of right) for (const b of wrong) margins.push(a - b)
  }
  return margins
}

/** JZ Eq. 7 / 9: GRPO with the asymmetric clip (ε_low, ε_high) = (0.20, 0.28) and KL to the reference, constant lr, no weight decay. */
function stagePlan(stage: PolicyStage, c: JzeroConfig): TrainingPlan {
  return {
    objective: { name: 'policy', clipLow: stage.clipLow, clipHigh: stage.clipHigh, klCoef: stage.klCoef, aggregation: c.ppo.aggregation },
    optimizer: { lr: stage.lr, weightDecay: 0 },
    schedule: { kind: 'constant' },
    clipGradNorm: c.ppo.clipGradNorm,
    microBatchSize: c.ppo.microBatchSize,
    lora: loraOf(c.ppo.loraRank, c.ppo.loraAlpha),
  }
}

/** JZ Eq. 13: the Judge's Bradley–Terry steps, constant lr, no weight decay. */
function judgePlan(c: JzeroConfig): TrainingPlan {
  return { objective: { name: 'bradley-terry' }, optimizer: { lr: c.judge.lr, weightDecay: 0 }, schedule: { kind: 'constant' }, clipGradNorm: c.ppo.clipGradNorm, lora: null, scoreHeadOnly: c.judge.scoreHeadOnly }
}
