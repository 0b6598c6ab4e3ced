// The synthetic SFT corpus: role transcripts written by the scripted teachers (teachers.ts).
//
// Item i is drawn from its own stream Rng(deriveSeed(seed, 'arith-corpus-v1', i)), so it depends
// only on (seed, i): buildCorpus({ seed, size: 10 }) is a prefix of buildCorpus({ seed, size: 1000 }).
// Each item picks a role by `mix` and a level by `levelWeights`, then asks that role's teacher.
// Every question the corpus generates avoids the reserved evaluation questions (isEvalQuestion).
// Inputs per role:
// - proposer: the prompt asks for level L; the completion is the scripted proposal.
// - solver: a good level-L question.
// - validator: a proposal from the scripted Proposer with more bad questions than it makes on its
//   own (VALIDATOR_INPUT_RATES), so the Validator sees enough of every class.
// - judge: a good level-L question and a scripted Solver response that is wrong with probability
//   max(SOLVER_SLIP_RATE[L], JUDGE_INPUT_WRONG_RATE) and malformed with JUDGE_INPUT_MALFORMED_RATE;
//   `judge` sets the share of wrong ones, the skimming rate and the check form (JudgeCheck).
// - decompose: a good level-L question.
// - subtask: one subtask k of the reference decomposition, the earlier answers as the scripted
//   subtask solver produced them (so an earlier slip is visible in the context).
// - compose: the scripted subtask answers of the reference decomposition.

import { evaluate, parseExpr, printExpr } from './expr.js'
import {
  parseDecomposition,
  parseQuestion,
  parseScore,
  parseSolution,
  roleChat,
  rolePrompt,
  ROLES,
  type ChatMessage,
  type Role,
  type RoleInput,
} from './formats.js'
import { generateExpr, LEVELS } from './levels.js'
import { isEvalQuestion } from './evalset.js'
import { deriveSeed, Rng, type WorldSeed } from './prng.js'
import {
  isHedged,
  scriptedCompose,
  scriptedDecompose,
  scriptedJudge,
  scriptedPropose,
  scriptedSolve,
  scriptedSolveSubtask,
  scriptedValidate,
  JUDGE_CHECKS,
  SOLVER_SLIP_RATE,
  type JudgeCheck,
  type ProposalKind,
} from './teachers.js'
import { decomposeExpr, type QuestionClass } from './verify.js'

/** Role weights used when `mix` is not given. */
export const DEFAULT_MIX: Readonly<Record<Role, number>> = {
  proposer: 0.1,
  solver: 0.35,
  validator: 0.15,
  judge: 0.2,
  decompose: 0.06,
  subtask: 0.08,
  compose: 0.06,
}

/** Proposal rates for the Validator's inputs (the Proposer's own are PROPOSER_RATES). */
export const VALIDATOR_INPUT_RATES = { tagError: 0, malformed: 0.15, trivial: 0.15, tooHard: 0.07, offLevel: 0.1 } as const
/** Least fraction of wrong Solver responses among the Judge's inputs. */
export const JUDGE_INPUT_WRONG_RATE = 0.4
/** Fraction of malformed Solver responses among the Judge's inputs. */
export const JUDGE_INPUT_MALFORMED_RATE = 0.05

export interface CorpusOptions {
  seed: WorldSeed
  size: number
  /** Role weights (missing roles get 0 when `mix` is given). Default DEFAULT_MIX. */
  mix?: Partial<Record<Role, number>>
  /** Weights of levels 1..5 (length 5). Default uniform. */
  levelWeights?: readonly number[]
  /** Also give each item its prompt as toy-style ChatML messages (`messages`). Default false. */
  chat?: boolean
  /** The Judge items: its check form, its skimming rate, and the least share of wrong responses it judges (default JUDGE_INPUT_WRONG_RATE). */
  judge?: JudgeCorpusOptions
}

export interface JudgeCorpusOptions {
  check?: JudgeCheck
  lazyRate?: number
  inputWrongRate?: number
}

export interface CorpusMeta {
  /** The level the item was drawn at. */
  level: number
  /** The question in the prompt (proposer: the proposed text; '' when none). */
  question: string
  /** Whether the completion parses with its role's strict parser (f = 1). */
  formatOk: boolean
  /**
   * Whether the teacher's output is right: proposer — the proposal is a good question;
   * solver, subtask — the answer is the true value (of the subtask, given its context);
   * compose — the final answer is the question's value; validator, judge — the verdict
   * (score ≥ SCORE_PASS) agrees with the truth; decompose — the subtasks compute the question.
   */
  correct: boolean
  /** Whether the completion's wording hedges. */
  hedged: boolean
  /** proposer: what was proposed. */
  kind?: ProposalKind
  /** proposer, validator: the question's true class. */
  cls?: QuestionClass
  /** validator, judge: the score given. */
  score?: number
  /** judge: whether the judged response was right. */
  candidateCorrect?: boolean
  /** judge: the teacher skimmed. */
  lazy?: boolean
  /** solver, subtask, compose: the true answer. */
  truth?: string
  /** solver, subtask, compose: the answer given (null when the output has none). */
  given?: string | null
  /** subtask: which subtask (1-based). */
  subtaskIndex?: number
}

export interface CorpusItem {
  role: Role
  prompt: string
  completion: string
  meta: CorpusMeta
  messages?: ChatMessage[]
}

function good(rng: Rng, level: number) {
  return generateExpr(rng, level, { exclude: isEvalQuestion })
}

function makeItem(rng: Rng, role: Role, level: number, judge: JudgeCorpusOptions = {}): { input: RoleInput; completion: string; meta: CorpusMeta } {
  switch (role) {
    case 'proposer': {
      const p = scriptedPropose(rng, level, { exclude: isEvalQuestion })
      const formatOk = parseQuestion(p.completion).ok
      const meta: CorpusMeta = { level, question: p.question, formatOk, correct: formatOk && p.cls === 'good', hedged: false, kind: p.kind, cls: p.cls }
      return { input: { role, level }, completion: p.completion, meta }
    }
    case 'solver': {
      const e = good(rng, level)
      const s = scriptedSolve(rng, e)!
      const meta: CorpusMeta = {
        level,
        question: printExpr(e),
        formatOk: !s.malformed && parseSolution(s.completion).ok,
        correct: s.given === s.truth,
        hedged: s.hedged,
        truth: s.truth.toString(),
        given: s.given === null ? null : s.given.toString(),
      }
      return { input: { role, question: meta.question }, completion: s.completion, meta }
    }
    case 'validator': {
      const p = scriptedPropose(rng, level, { exclude: isEvalQuestion, rates: VALIDATOR_INPUT_RATES })
      const v = scriptedValidate(rng, p.question)
      const meta: CorpusMeta = { level, question: p.question, formatOk: parseScore(v.completion).ok, correct: v.verdictCorrect, hedged: v.hedged, cls: v.cls, score: v.score }
      return { input: { role, question: p.question }, completion: v.completion, meta }
    }
    case 'judge': {
      const e = good(rng, level)
      const slipRate = Math.max(SOLVER_SLIP_RATE[level], judge.inputWrongRate ?? JUDGE_INPUT_WRONG_RATE)
      const response = scriptedSolve(rng, e, { slipRate, formatErrorRate: JUDGE_INPUT_MALFORMED_RATE })!.completion
      const j = scriptedJudge(rng, e, response, { check: judge.check, lazyRate: judge.lazyRate })
      const meta: CorpusMeta = {
        level,
        question: printExpr(e),
        formatOk: parseScore(j.completion).ok,
        correct: j.verdictCorrect,
        hedged: j.hedged,
        score: j.score,
        candidateCorrect: j.candidateCorrect,
        lazy: j.lazy,
      }
      return { input: { role, question: meta.question, response }, completion: j.completion, meta }
    }
    case 'decompose': {
      const e = good(rng, level)
      const d = scriptedDecompose(rng, e)
      const meta: CorpusMeta = { level, question: printExpr(e), formatOk: parseDecomposition(d.completion).ok, correct: d.faithful, hedged: false }
      return { input: { role, question: meta.question }, completion: d.completion, meta }
    }
    case 'subtask':
    case 'compose': {
      const e = good(rng, level)
      const question = printExpr(e)
      const subtasks = decomposeExpr(e)
      const k = role === 'subtask' ? rng.int(1, subtasks.length) : subtasks.length
      // Earlier answers as the scripted subtask solver gave them (malformed ones re-drawn clean).
      const known: bigint[] = []
      let last: ReturnType<typeof scriptedSolveSubtask> = null
      for (let i = 0; i < k; i++) {
        const sub = parseExpr(subtasks[i], { allowRefs: true })!
        last = scriptedSolveSubtask(rng, sub, known, level)!
        known.push(last.given ?? last.truth)
      }
      if (role === 'subtask') {
        const s = last!
        const meta: CorpusMeta = {
          level,
          question,
          formatOk: !s.malformed && parseSolution(s.completion).ok,
          correct: s.given === s.truth,
          hedged: s.hedged,
          truth: s.truth.toString(),
          given: s.given === null ? null : s.given.toString(),
          subtaskIndex: k,
        }
        const input: RoleInput = { role, question, index: k, subtask: subtasks[k - 1], known: known.slice(0, k - 1) }
        return { input, completion: s.completion, meta }
      }
      const c = scriptedCompose(rng, known)
      const truth = evaluate(e)!.toString()
      const meta: CorpusMeta = {
        level,
        question,
        formatOk: parseSolution(c.completion).ok,
        correct: c.given !== null && c.given.toString() === truth,
        hedged: isHedged(c.completion),
        truth,
        given: c.given === null ? null : c.given.toString(),
      }
      return { input: { role, question, answers: known, subtasks }, completion: c.completion, meta }
    }
  }
}

/** The Judge items' options, refused with a RangeError before any item is drawn (they may come from a recipe JSON). */
function checkJudgeOptions(j: JudgeCorpusOptions): void {
  if (j.check !== undefined && !JUDGE_CHECKS.includes(j.check)) throw new RangeError(`judge.check must be one of ${JUDGE_CHECKS.join(', ')}, got ${String(j.check)}`)
  for (const key of ['lazyRate', 'inputWrongRate'] as const) {
    const v = j[key]
    if (v !== undefined && !(typeof v === 'number' && v >= 0 && v <= 1)) throw new RangeError(`judge.${key} must be a probability in [0, 1], got ${String(v)}`)
  }
}

/**
 * The synthetic SFT corpus: `size` items `{ role, prompt, completion, meta }`, deterministic in
 * `seed` (and prefix-stable in `size`). Prompts are the toy format (rolePrompt); `chat: true` adds
 * the same prompt as ChatML messages.
 */
export function buildCorpus(opts: CorpusOptions): CorpusItem[] {
  const { seed, size } = opts
  if (!Number.isInteger(size) || size < 0) throw new RangeError(`corpus size must be a non-negative integer, got ${size}`)
  const mix = opts.mix === undefined ? DEFAULT_MIX : opts.mix
  const roleWeights = ROLES.map((r) => mix[r] ?? 0)
  const levelWeights = opts.levelWeights ?? LEVELS.map(() => 1)
  if (levelWeights.length !== LEVELS.length) throw new RangeError(`levelWeights must have ${LEVELS.length} entries`)
  checkJudgeOptions(opts.judge ?? {})
  const items: CorpusItem[] = []
  for (let i = 0; i < size; i++) {
    const rng = new Rng(deriveSeed(seed, 'arith-corpus-v1', i))
    const role = ROLES[rng.weighted(roleWeights)]
    const level = LEVELS[rng.weighted(levelWeights)].level
    const { input, completion, meta } = makeItem(rng, role, level, opts.judge)
    const item: CorpusItem = { role, prompt: rolePrompt(input), completion, meta }
    if (opts.chat === true) item.messages = [...roleChat(input), { role: 'assistant', content: completion }]
    items.push(item)
  }
  return items
}
