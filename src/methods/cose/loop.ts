// COSE (Confidence-Orchestrated Self-Evolution, §3): one backbone, four prompt roles. Each step:
// the Proposer proposes, the Validator scores (v, c_V), accepted questions enter the
// confidence-prioritized replay (Eq. 6); the Solver answers n times, the Judge scores each answer
// (p(q,a), c_J); p(q) is updated (Eq. 1); rewards (Eq. 7–8), weights (Eq. 4–5), advantages; one
// PPO update on Proposer and Solver trajectories only (Validator and Judge are inference-only).
// With `roleAdapters`, the roles share the base but not the update: the Proposer, the Solver (with
// the Validator) and the Judge each run through their own LoRA adapter, and the one optimizer step
// moves the Proposer's adapter by r_P and the Solver's by r_S. With `switches.judge: 'verifier'`
// (a control outside the paper) the world's verifier scores the answers in the Judge's place; with
// `switches.judge: 'model'` (outside the paper too) another model's Judge role does, frozen.
import { join, resolve } from 'node:path'
import { CheckpointError } from '../../engine/errors.js'
import type { Completion, Prompt } from '../../engine/model.js'
import { PrioritizedReplay } from '../../replay/index.js'
import { computeAdvantages } from '../../rl/advantages.js'
import { coseProposerReward, coseProposerWeight, coseSolverReward, coseSolverWeight, solveRate } from '../../rl/cose.js'
import { sequenceConfidence } from '../../signals/confidence.js'
import { pearson, spread, type Spread } from '../../stats/summary.js'
import type { StepMetrics, TrainSequence } from '../../train/trainer.js'
import { Rng } from '../../util/prng.js'
import { EvalLog, evaluateBenchmarks, greedyProtocol, selectBenchmarks } from '../common/evaluation.js'
import type { BaseStepRecord } from '../common/run.js'
import { type BaseRunState, checkedPath, checkedRngState, checkpointRun, resumeRun, RUN_STATE_VERSION } from '../common/checkpoint.js'
import type { OpenPolicy, Policy, PolicySet, PolicyTrainer } from '../common/policy.js'
import { readJsonObject } from '../common/run-folder.js'
import { openRoleAdapters, roleAdaptersCheckpointRole, ROLE_ADAPTERS_ROLE, RolePolicy, type RoleAdapter } from '../common/role-adapters.js'
import { openTrainedPolicy, ppoPlan, sampledSequence, samplingSeed, type Sample } from '../common/training.js'
import { resolveCoseConfig, TOY_PRESET, type CoseConfig } from './config.js'
import type { Benchmark, TaskWorld } from '../../worlds/types.js'
import { checkLevels, shareTrue, verifierScore, verifyPosed, worldRecord } from '../common/world.js'

export interface QuestionItem {
  question: string
}

export interface CoseStepRecord extends BaseStepRecord {
  step: number
  proposals: number
  proposerFormatRate: number
  acceptRate: number
  validatorFormatRate: number
  bufferSize: number
  prioritySpread: { min: number; max: number }
  questionsSolved: number
  solverFormatRate: number
  judgeFormatRate: number
  rewardSolver: Spread
  rewardProposer: Spread
  weightSolver: Spread
  weightProposer: Spread
  confidenceValidator: Spread
  confidenceJudge: Spread
  solveRate: Spread
  /** Diagnostics against the world's verifier (never a reward: COSE trains on its own feedback). */
  diagnostics: CoseDiagnostics
  train: StepMetrics | null
}

/** How right the step's self-feedback was, by the world's verifier (NaN where it cannot tell). */
export interface CoseDiagnostics {
  /** Well-formed proposals the verifier calls well posed: the base rate the Validator filters. */
  proposalGoodRate: number
  /** Accepted proposals the verifier calls well posed: the Validator's accept precision. */
  validatorAcceptPrecision: number
  /** Judged answers whose Judge verdict (p(q, a) ≥ ½, the reward as used) matches the verifier's. */
  judgeVerifierAgreement: number
  /** Per solved question, the share of its Solver answers the verifier marks right. */
  trueSolveRate: Spread
  /** Mean |p(q) − true solve rate| over the solved questions (p(q): COSE Eq. 1). */
  solveRateError: number
  /** Pearson correlation of p(q) with the true solve rate over the solved questions. */
  solveRateCorrelation: number
}


export interface CoseRunState extends BaseRunState {
  format: 'autodidact.cose.run'
  rng: [number, number, number, number]
  baseModel: string
  config: CoseConfig
}

export interface RunOptions {
  threads?: number
  openPolicy?: OpenPolicy
}

const FORMAT = 'autodidact.cose.run'
const REPLAY_FILE = 'replay.json'
/** The one trained role: the backbone's Proposer and Solver trajectories update the same policy (with role adapters, the base that holds them). */
const ROLE = ROLE_ADAPTERS_ROLE
/** Sampling calls of a step (the seed's `call`). */
const CALL = { proposer: 0, validator: 1, solver: 2, judge: 3 }
type CoseRole = keyof typeof CALL
/** With `roleAdapters`: the adapter each prompt role runs through (the Validator is the Solver's role model). */
const ROLE_ADAPTER: Record<CoseRole, string> = { proposer: 'proposer', validator: 'solver', solver: 'solver', judge: 'judge' }
/** The role adapters on the shared base: Proposer and Solver train (Eq. 7–8); the Judge is inference-only (§3). */
export const COSE_ROLE_ADAPTERS: readonly RoleAdapter[] = [
  { name: 'proposer', trained: true },
  { name: 'solver', trained: true },
  { name: 'judge', trained: false },
]

/** A fresh run's role adapters: the Judge's from judge.adapter when one is named (a Judge stage trained as LoRA). */
function coseRoleAdapters(config: CoseConfig): readonly RoleAdapter[] {
  const from = config.judge.adapter
  return from === null ? COSE_ROLE_ADAPTERS : COSE_ROLE_ADAPTERS.map((r) => (r.name === ROLE_ADAPTER.judge ? { ...r, from } : r))
}

/** The PPO plan of Appendix C: clipped surrogate with KL to the reference, cosine schedule over the run. */
const trainingPlan = (c: CoseConfig) => ppoPlan(c.ppo, c.steps)

/** The replay buffer of a checkpoint, or a CheckpointError naming the file. */
async function loadReplay(file: string): Promise<PrioritizedReplay<QuestionItem>> {
  const snapshot = await readJsonObject(file)
  try {
    return PrioritizedReplay.fromJSON<QuestionItem>(snapshot)
  } catch (e) {
    throw new CheckpointError(file, null, 'field', `${file}: ${(e as Error).message}`, { cause: e })
  }
}

export class CoseRun {
  private readonly benchmarks: Benchmark[]
  private readonly evals = new EvalLog()

  private constructor(
    readonly config: CoseConfig,
    readonly world: TaskWorld,
    readonly model: Policy,
    private readonly trainer: PolicyTrainer,
    readonly replay: PrioritizedReplay<QuestionItem>,
    private readonly policies: PolicySet,
    private rng: Rng,
    private stepIndex: number,
    readonly baseModel: string,
    /** switches.judge 'model': the frozen Judge model (in `policies`); null: the policy judges. */
    private readonly judge: Policy | null = null,
  ) {
    this.benchmarks = selectBenchmarks(world, config.eval.benchmarks, config.eval.size)
  }

  /** A fresh run on the model folder `baseModel`. */
  static async start(baseModel: string, config: CoseConfig, world: TaskWorld, o: RunOptions = {}): Promise<CoseRun> {
    checkLevels(world, config.proposer.levels, 'proposer.levels')
    const base = resolve(baseModel)
    const replay = new PrioritizedReplay<QuestionItem>({ capacity: config.replay.capacity, floor: config.replay.floor, mode: config.switches.priority }, config.seed)
    // the Judge's folders are kept absolute in the config, so a resume elsewhere opens the same ones
    const absolute = (dir: string | null) => (dir === null ? null : resolve(dir))
    const judged = { ...config, judge: { ...config.judge, model: absolute(config.judge.model), adapter: absolute(config.judge.adapter) } }
    const { policies, policy, trainer } = config.roleAdapters
      ? await openRoleAdapters({ ...o, base, plan: trainingPlan(judged), roles: coseRoleAdapters(judged), seed: config.seed })
      : await openTrainedPolicy({ ...o, base, plan: trainingPlan(config), frozenWeights: config.frozenWeights })
    return new CoseRun(judged, world, policy, trainer, replay, policies, new Rng(config.seed), 0, base, await openJudge(policies, judged, o))
  }

  /** Continues from a checkpoint folder written by `checkpoint()`; the folder is checked before anything is loaded. */
  static async resume(dir: string, world: TaskWorld, o: RunOptions = {}): Promise<CoseRun> {
    const ckpt = await resumeRun<CoseRunState>(dir, {
      format: FORMAT,
      world,
      parse: (s, file) => ({ ...s, format: FORMAT, rng: checkedRngState(s.rng, file), baseModel: checkedPath(s.baseModel, file, 'baseModel'), config: resolveCoseConfig(s.config, TOY_PRESET, file) }),
      roles: (s) => [s.config.roleAdapters ? roleAdaptersCheckpointRole(COSE_ROLE_ADAPTERS) : { name: ROLE, trained: true }],
    })
    const replay = await loadReplay(join(dir, REPLAY_FILE))
    const { state } = ckpt
    const opened = { ...o, base: state.baseModel, checkpoint: ckpt.paths(ROLE), plan: trainingPlan(state.config) }
    const { policies, policy, trainer } = state.config.roleAdapters
      ? await openRoleAdapters({ ...opened, roles: COSE_ROLE_ADAPTERS, seed: state.config.seed })
      : await openTrainedPolicy({ ...opened, frozenWeights: state.config.frozenWeights })
    return new CoseRun(state.config, world, policy, trainer, replay, policies, Rng.fromState(state.rng), state.step, state.baseModel, await openJudge(policies, state.config, o))
  }

  get step(): number {
    return this.stepIndex
  }

  dispose(): void {
    this.policies.dispose()
  }

  /** c_V or c_J of a verdict sampled by `by` (its vocabulary normalizes the entropy). */
  private confidence(c: Completion, by: Policy = this.model): number {
    return sequenceConfidence(this.config.confidence, {
      entropy: c.entropy,
      maxLogit: c.maxLogit,
      margin: c.margin,
      topKLogits: c.topK?.logits,
      topK: c.topK?.k,
      vocabSize: by.config.vocabSize,
    })
  }

  /** The Solver: the policy, or with role adapters its view through the Solver's adapter (what evaluate() and an outside evaluation sample). */
  get solver(): Policy {
    const adapter = this.adapterOf('solver')
    return adapter === undefined ? this.model : new RolePolicy(this.model, adapter)
  }

  /** The LoRA adapter `role` runs through and trains (undefined: the one shared policy). */
  private adapterOf(role: CoseRole): string | undefined {
    return this.config.roleAdapters ? ROLE_ADAPTER[role] : undefined
  }

  /** `role`'s samples of `prompts`, by the policy (through the role's adapter) or by `by` (the frozen Judge model). */
  private async sample(prompts: Prompt[], o: { n: number; temperature: number; maxTokens: number }, role: CoseRole, by: Policy = this.model): Promise<Sample[][]> {
    if (!prompts.length) return []
    const topK = this.config.confidence === 'self-certainty-topk' ? 25 : 0
    const adapter = by === this.model ? this.adapterOf(role) : undefined
    const out = await by.generate(prompts, { ...o, seed: samplingSeed(this.config.seed, this.stepIndex, CALL[role]), stats: { topK }, ...(adapter === undefined ? {} : { adapter }) })
    return out.map((group, i) => group.map((completion) => ({ prompt: by.encodePrompt(prompts[i]), completion })))
  }

  /** The Judge role's verdict on each prompt (the policy's, or the frozen Judge model's): p(q, a) (null when malformed) and c_J (COSE §3.2). */
  private async judgeVerdicts(prompts: Prompt[], count: (groups: Sample[][]) => void): Promise<Verdict[]> {
    const c = this.config
    const by = this.judge ?? this.model
    const judged = await this.sample(prompts, { n: 1, temperature: c.judge.temperature, maxTokens: c.judge.maxTokens }, 'judge', by)
    count(judged)
    return judged.map(([{ completion }]) => ({ score: this.world.cose.parseScore(completion.text), cJ: this.confidence(completion, by) }))
  }

  /** One COSE iteration; returns its metrics line. */
  async runStep(): Promise<CoseStepRecord> {
    const started = process.hrtime.bigint()
    const c = this.config
    const w = this.world.cose
    const weighting = { enabled: c.switches.weighting }
    let generatedTokens = 0
    const count = (groups: Sample[][]) => groups.forEach((g) => g.forEach((t) => (generatedTokens += t.completion.tokens.length)))

    // ---- Proposer / Validator phase (every K steps)
    interface Proposal { traj: Sample; fP: boolean; question: string | null; key: string | null; v: number; cV: number; accepted: boolean }
    const proposals: Proposal[] = []
    let validatorFormatOk = 0
    if (this.stepIndex % c.proposeEvery === 0) {
      const levels = Array.from({ length: c.proposer.count }, () => c.proposer.levels[this.rng.nextInt(c.proposer.levels.length)])
      const proposed = await this.sample(levels.map((l) => w.proposerPrompt(l)), { n: 1, temperature: c.proposer.temperature, maxTokens: c.proposer.maxTokens }, 'proposer')
      count(proposed)
      for (const [traj] of proposed) {
        const parsed = w.parseProposal(traj.completion.text)
        proposals.push({ traj, fP: parsed !== null, question: parsed?.question ?? null, key: parsed?.key ?? null, v: 0, cV: 0, accepted: false })
      }
      const wellFormed = proposals.filter((p) => p.fP)
      const verdicts = await this.sample(wellFormed.map((p) => w.validatorPrompt(p.question!)), { n: 1, temperature: c.validator.temperature, maxTokens: c.validator.maxTokens }, 'validator')
      count(verdicts)
      wellFormed.forEach((p, i) => {
        const verdict = verdicts[i][0].completion
        const v = w.parseScore(verdict.text)
        if (v !== null) validatorFormatOk++
        p.v = v ?? 0 // a malformed verdict validates nothing
        p.cV = this.confidence(verdict)
        p.accepted = p.v >= c.validator.acceptThreshold
        if (p.accepted && !this.replay.has(p.key!)) this.replay.add(p.key!, { question: p.question! }, { v: p.v, cV: p.cV })
      })
    }

    // ---- Solver / Judge phase on questions from the replay buffer
    // Up to freshFirst of this step's accepted proposals are solved first, so their r_P (Eq. 8) uses a
    // measured p(q); the rest of the batch is drawn by priority (Eq. 6).
    const chosen = new Map<string, { question: string; v: number; cV: number }>()
    const fresh = Math.min(c.solver.questions, c.solver.freshFirst)
    for (const p of proposals) if (p.accepted && chosen.size < fresh) chosen.set(p.key!, { question: p.question!, v: p.v, cV: p.cV })
    const room = Math.min(c.solver.questions - chosen.size, this.replay.size - chosen.size)
    if (room > 0) for (const e of this.replay.sample(room + chosen.size).filter((e) => !chosen.has(e.id)).slice(0, room)) chosen.set(e.id, { question: e.item.question, v: e.v, cV: e.cV })
    const questions = [...chosen]
    const answers = await this.sample(questions.map(([, q]) => w.solverPrompt(q.question)), { n: c.solver.n, temperature: c.solver.temperature, maxTokens: c.solver.maxTokens }, 'solver')
    count(answers)
    const flat = answers.flatMap((group, qi) => group.map((traj) => ({ qi, traj })))
    const verdicts = c.switches.judge === 'verifier'
      ? flat.map(({ qi, traj }) => verifierVerdict(this.world, questions[qi][1].question, traj.completion.text))
      : await this.judgeVerdicts(flat.map(({ qi, traj }) => w.judgePrompt(questions[qi][1].question, traj.completion.text)), count)
    const solverRows = flat.map(({ qi, traj }, i) => ({ qi, traj, fS: w.solverFormat(traj.completion.text), pqa: verdicts[i].score ?? 0, cJ: verdicts[i].cJ }))
    const solveRates = questions.map((_, qi) => solveRate(solverRows.filter((r) => r.qi === qi).map((r) => r.pqa))) // Eq. 1
    questions.forEach(([key], qi) => this.replay.setSolveRate(key, solveRates[qi]))
    const pOf = new Map(questions.map(([key], qi) => [key, solveRates[qi]]))

    // ---- Rewards (Eq. 7–8), weights (Eq. 4–5), advantages
    const rS = solverRows.map((r) => coseSolverReward(r.fS, r.pqa))
    const wS = solverRows.map((r) => coseSolverWeight(questions[r.qi][1].v, questions[r.qi][1].cV, r.cJ, weighting))
    const aS = computeAdvantages(c.ppo.advantage, rS, solverRows.map((r) => r.qi))
    // A question not solved this step (rejected or malformed) has no measured p(q): learnability 0.
    const rP = proposals.map((p) => coseProposerReward(p.fP, p.v, p.accepted && pOf.has(p.key!) ? pOf.get(p.key!)! : UNSOLVED_SOLVE_RATE))
    const wP = proposals.map((p) => coseProposerWeight(p.v, p.cV, weighting))
    const aP = computeAdvantages(c.ppo.advantage, rP, proposals.map(() => 0))

    const sequences: TrainSequence[] = [
      ...proposals.map((p, i) => sampledSequence(p.traj.prompt, p.traj.completion, aP[i], wP[i], this.adapterOf('proposer'))),
      ...solverRows.map((r, i) => sampledSequence(r.traj.prompt, r.traj.completion, aS[i], wS[i], this.adapterOf('solver'))),
    ].filter((s) => s.completion.length > 0)
    const train = sequences.length ? await this.trainer.step({ sequences }) : null

    this.stepIndex++
    const priorities = this.replay.size ? [...chosen.keys()].map((k) => this.replay.priority(k) ?? NaN) : []
    return {
      step: this.stepIndex,
      proposals: proposals.length,
      proposerFormatRate: proposals.length ? proposals.filter((p) => p.fP).length / proposals.length : NaN,
      acceptRate: proposals.length ? proposals.filter((p) => p.accepted).length / proposals.length : NaN,
      validatorFormatRate: proposals.some((p) => p.fP) ? validatorFormatOk / proposals.filter((p) => p.fP).length : NaN,
      bufferSize: this.replay.size,
      prioritySpread: { min: Math.min(...priorities), max: Math.max(...priorities) },
      questionsSolved: questions.length,
      solverFormatRate: solverRows.length ? solverRows.filter((r) => r.fS).length / solverRows.length : NaN,
      judgeFormatRate: solverRows.length && c.switches.judge !== 'verifier' ? verdicts.filter((v) => v.score !== null).length / solverRows.length : NaN,
      rewardSolver: spread(rS),
      rewardProposer: spread(rP),
      weightSolver: spread(wS),
      weightProposer: spread(wP),
      confidenceValidator: spread(proposals.filter((p) => p.fP).map((p) => p.cV)),
      confidenceJudge: spread(solverRows.map((r) => r.cJ)),
      solveRate: spread(solveRates),
      diagnostics: coseDiagnostics(this.world, proposals, questions.map(([, q]) => q.question), solverRows.map((r) => ({ qi: r.qi, text: r.traj.completion.text, pqa: r.pqa })), solveRates),
      train,
      generatedTokens,
      seconds: Number(process.hrtime.bigint() - started) / 1e9,
    }
  }

  /** Greedy held-out Solver accuracy (macro over the benchmarks; ground truth from the world's verifier), kept for the step's eval file. */
  async evaluate(): Promise<number> {
    const solver = { prompt: (q: string) => this.world.cose.solverPrompt(q), verifier: this.world.verifier }
    return this.evals.add(await evaluateBenchmarks(this.solver, this.benchmarks, solver, greedyProtocol(this.config.solver.maxTokens), this.stepIndex))
  }

  /** Writes the policy (with role adapters: every role's adapter), its optimizer (every trained adapter's moments), the replay buffer, the RNG and the evaluations since the last checkpoint under `dir` (checkpointRun). */
  async checkpoint(dir: string): Promise<void> {
    const state: CoseRunState = { format: FORMAT, version: RUN_STATE_VERSION, step: this.stepIndex, world: worldRecord(this.world), rng: this.rng.state(), baseModel: this.baseModel, config: this.config }
    await checkpointRun(dir, {
      state,
      roles: [{ name: ROLE, policy: this.model, trainer: this.trainer }],
      extra: async (tmp) => {
        await this.replay.save(join(tmp, REPLAY_FILE))
        await this.evals.intoCheckpoint(tmp, this.stepIndex)
      },
    })
    await this.evals.flush(dir)
  }
}

/** switches.judge 'model': the Judge's model folder, opened into the run's policies (disposed with them, and with them on a failed open); else null. */
async function openJudge(policies: PolicySet, c: CoseConfig, o: RunOptions): Promise<Policy | null> {
  const dir = c.judge.model
  if (c.switches.judge !== 'model' || dir === null) return null
  // a frozen model: it takes the run's frozenWeights, as the KL reference does
  return policies.build((set) => set.open({ model: dir, threads: o.threads, ...(c.frozenWeights && c.frozenWeights !== 'f32' ? { weights: c.frozenWeights } : {}) }))
}

/** A verdict on one answer: the Judge's score p(q, a) (null: malformed, which scores 0) and its confidence c_J. */
interface Verdict {
  score: number | null
  cJ: number
}

/** The 'verifier' control's verdict: 1 when the world's verifier marks the answer right, else 0 (an unposed question included), with full confidence. */
function verifierVerdict(world: TaskWorld, question: string, answer: string): Verdict {
  return { score: verifierScore(world, question, answer), cJ: 1 }
}

/** A Judge score at or above this says "right" (the arith world's verdict is score ≥ 6 of 1..10, normalized ≥ 0.56). */
const JUDGE_SAYS_RIGHT = 0.5

/**
 * The step's feedback measured against the world's verifier: the Validator's accept precision, the
 * Judge's agreement with the verifier, and p(q) (Eq. 1) against each question's true solve rate.
 */
export function coseDiagnostics(
  world: TaskWorld,
  proposals: readonly { fP: boolean; question: string | null; accepted: boolean }[],
  questions: readonly string[],
  answers: readonly { qi: number; text: string; pqa: number }[],
  solveRates: readonly number[],
): CoseDiagnostics {
  const wellPosed = (q: string) => world.verifier.questionInfo?.(q).wellPosed ?? null
  const formed = proposals.filter((p) => p.fP)
  const verified = answers.map((a) => verifyPosed(world, questions[a.qi], a.text))
  const trueRates = questions.map((_, qi) => shareTrue(verified.filter((_, i) => answers[i].qi === qi)))
  const paired = trueRates.map((t, qi) => [solveRates[qi], t]).filter(([p, t]) => Number.isFinite(p) && Number.isFinite(t))
  return {
    proposalGoodRate: shareTrue(formed.map((p) => wellPosed(p.question!))),
    validatorAcceptPrecision: shareTrue(formed.filter((p) => p.accepted).map((p) => wellPosed(p.question!))),
    judgeVerifierAgreement: shareTrue(answers.map((a, i) => (verified[i] === null ? null : a.pqa >= JUDGE_SAYS_RIGHT === verified[i]))),
    trueSolveRate: spread(trueRates),
    solveRateError: paired.length ? paired.reduce((s, [p, t]) => s + Math.abs(p - t), 0) / paired.length : NaN,
    solveRateCorrelation: pearson(paired.map(([p]) => p), paired.map(([, t]) => t)),
  }
}

/** p(q) used in Eq. 8 for a proposal no Solver answered (rejected or malformed): learnability 4p(1−p) = 0. */
const UNSOLVED_SOLVE_RATE = 0
