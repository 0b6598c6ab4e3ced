// Scripted, deliberately imperfect teachers: they write the synthetic SFT transcripts the bundled
// toy model learns every role from. Every one is a pure function of an Rng, so a seed fixes the
// corpus. The rates below are the designed ones; the tests measure the realised ones.
//
// How they err (rates indexed by level, index 0 unused, index 6 = beyond level 5):
// - Solver: with probability SOLVER_SLIP_RATE[level] one step of the trace carries an arithmetic
//   slip (±1, ±10, a dropped carry, swapped digits, a sign error, a factor off by one); later steps
//   compute correctly from the slipped value, so the final answer is wrong. The slipped step is
//   drawn with weight digits(a) + digits(b) (+2 for ×): bigger steps go wrong more. With
//   probability SOLVER_FORMAT_ERROR_RATE the output is malformed (truncated, answer missing or
//   empty, think unclosed).
// - Proposer: asked for level L, it proposes a good level-L question, or (PROPOSER_RATES) a good
//   question one level off, a trivial one, a malformed one, one beyond level 5, or breaks the tags.
// - Validator: believes the right class of the question except with VALIDATOR_ERROR_RATE
//   (by true class; higher for trivial and too-hard questions, and for good ones at higher levels),
//   then scores by its belief: good 9–10, too-hard 4–5, trivial 4–5, malformed 1–3.
// - Judge: with JUDGE_LAZY_RATE[level] it skims ("looks fine", score 7–8) whatever the response;
//   otherwise it checks the response's own steps one at a time — recomputes each step from the
//   operands the response wrote, in its own written form (judgeStepForm: `4+3=7 ok` for the
//   response's `3+4=7`; a mismatch `4+3=7 not 8` ends the check), then that the answer is the last
//   step's result — slipping in one check with JUDGE_SLIP_RATE[level]. Checking a written step is
//   one operation on operands in plain view, so checking is easier than solving (the premise of a
//   useful verifier); the own form keeps the characters before its result from repeating the
//   response's, so that copying the response's result is not the same text as computing it (a
//   model trained on it was measured to copy still, by position). A response without readable
//   steps is recomputed from the question instead, in the same form. Verdict right 8–10, wrong
//   1–3, no readable answer 1. (The bundled weights were trained on the previous form, the
//   response's own `a op b=`: a retrain on this one was measured no better,
//   models/arith-qwen3-tiny/README.md.) With `check: 'units'` or `'nines'` (JudgeCheck) it checks
//   each step's units digit or its residue mod 9 instead: checks cheaper than the step, which a
//   fine-tuned small model was measured to compute rather than copy (bench/evidence-probes.mjs
//   judge-checks).
// - Decompose: one subtask per operation (decomposeExpr); with DECOMPOSE_ERROR_RATE[level] it
//   miscopies one literal, so the decomposition no longer computes the question.
// - Subtask solver: like the Solver on one operation, slipping with SUBTASK_SLIP_RATE[level]
//   (lower per subtask than the one-shot rate per problem, so composing usually beats one-shot
//   answering, the premise of J-Zero's subtask-amplification pairs).
// - Compose: copies the last sub-answer, miscopying it with COMPOSE_SLIP_RATE.
// Hedges: a completion's thinking carries a hedge ("maybe …", "I think …", "…, not sure") with
// HEDGE_RATE.right when the teacher's output is right and HEDGE_RATE.wrong when it is wrong, and
// a hedged score sits one step closer to the middle (e.g. 8 instead of 9–10), so the wording — and
// a trained model's token entropy — carries signal about correctness.

import {
  applyOp,
  evaluate,
  formatOperand,
  formatStep,
  parseExpr,
  printExpr,
  solutionSteps,
  type Expr,
  type Op,
  type Step,
} from './expr.js'
import { parseSolution } from './formats.js'
import { difficultyOf, generateExpr, LEVEL_BEYOND, MAX_LEVEL, MIN_LEVEL, sampleShape, type GenerateOptions } from './levels.js'
import { Rng } from './prng.js'
import { checkDecomposition, classifyQuestion, decomposeExpr, type QuestionClass } from './verify.js'

/** P(one slip) per problem for the one-shot Solver, by level (index 6: beyond level 5). */
export const SOLVER_SLIP_RATE: readonly number[] = [0, 0.05, 0.12, 0.25, 0.4, 0.55, 0.7]
/** P(malformed output) for the Solver, at every level. */
export const SOLVER_FORMAT_ERROR_RATE = 0.02
/** P(slip) per subtask for the J-Zero subtask solver, by level of the whole problem. */
export const SUBTASK_SLIP_RATE: readonly number[] = [0, 0.02, 0.03, 0.05, 0.07, 0.1, 0.12]
/** P(miscopied literal) in a decomposition, by level. */
export const DECOMPOSE_ERROR_RATE: readonly number[] = [0, 0.02, 0.04, 0.06, 0.08, 0.1, 0.12]
/** P(miscopied final answer) when composing. */
export const COMPOSE_SLIP_RATE = 0.03
/** What the Proposer does instead of a good level-L question (the rest: a good level-L question). */
export const PROPOSER_RATES = { tagError: 0.02, malformed: 0.06, trivial: 0.06, tooHard: 0.02, offLevel: 0.1 } as const
/** P(wrong belief about the question's class) for the Validator, by true class. `good` is by level. */
export const VALIDATOR_ERROR_RATE = {
  good: [0, 0.06, 0.07, 0.08, 0.1, 0.12, 0.12] as readonly number[],
  malformed: 0.08,
  trivial: 0.2,
  tooHard: 0.3,
} as const
/** P(the Judge skims instead of recomputing), by level. */
export const JUDGE_LAZY_RATE: readonly number[] = [0, 0.06, 0.08, 0.1, 0.12, 0.14, 0.16]
/** P(a slip in the Judge's own recomputation), by level: half the Solver's. */
export const JUDGE_SLIP_RATE: readonly number[] = SOLVER_SLIP_RATE.map((r) => r / 2)
/** P(hedged wording) when the teacher's output is right / wrong. */
export const HEDGE_RATE = { right: 0.08, wrong: 0.55 } as const

export const HEDGE_PHRASES: readonly string[] = ['maybe', 'I think', 'not sure']

/** Whether a text carries one of the hedge phrases. */
export function isHedged(text: string): boolean {
  return /\bmaybe\b|\bI think\b|\bnot sure\b/.test(text)
}

function hedge(rng: Rng, text: string): string {
  const i = rng.int(0, HEDGE_PHRASES.length - 1)
  return i === 2 ? `${text}, not sure` : `${HEDGE_PHRASES[i]} ${text}`
}

function levelIndex(level: number | null): number {
  if (level === null) return LEVEL_BEYOND
  return Math.min(Math.max(level, MIN_LEVEL), LEVEL_BEYOND)
}

function digits(v: bigint): number {
  return (v < 0n ? -v : v).toString().length
}

// --- Slips -------------------------------------------------------------------------------------

/** A wrong result for a step, plausible for a hurried calculator. Never equals the true result. */
export function slipResult(rng: Rng, step: { op: Op; a: bigint; b: bigint; result: bigint }): bigint {
  const v = step.result
  const cands: bigint[] = [v + 1n, v - 1n]
  if (digits(v) >= 2) cands.push(v + 10n, v - 10n)
  const s = (v < 0n ? -v : v).toString()
  for (let i = 0; i + 1 < s.length; i++) {
    if (s[i] !== s[i + 1] && !(i === 0 && s[i + 1] === '0')) {
      const t = s.slice(0, i) + s[i + 1] + s[i] + s.slice(i + 2)
      cands.push(v < 0n ? -BigInt(t) : BigInt(t))
      break
    }
  }
  if (step.op === '-' && v !== 0n) cands.push(-v)
  if (step.op === '*') cands.push(v + step.a, v - step.a)
  if (step.op === '+' && step.a >= 0n && step.b >= 0n) {
    // dropped carry: digit-wise sum mod 10
    const x = step.a.toString().padStart(20, '0')
    const y = step.b.toString().padStart(20, '0')
    let out = ''
    for (let i = 0; i < 20; i++) out += String((Number(x[i]) + Number(y[i])) % 10)
    cands.push(BigInt(out))
  }
  const wrong = cands.filter((c) => c !== v)
  return rng.pick(wrong)
}

/** Post-order trace where step `slipAt` (if ≥ 0) is slipped and the error propagates. */
function tracedSteps(rng: Rng, e: Expr, refs: readonly bigint[], slipAt: number): { steps: Step[]; value: bigint } | null {
  const steps: Step[] = []
  const walk = (n: Expr): bigint | null => {
    if (n.kind === 'num') return n.value
    if (n.kind === 'ref') return n.index >= 1 && n.index <= refs.length ? refs[n.index - 1] : null
    const a = walk(n.left)
    if (a === null) return null
    const b = walk(n.right)
    if (b === null) return null
    const exact = applyOp(n.op, a, b)
    const result = steps.length === slipAt ? slipResult(rng, { op: n.op, a, b, result: exact }) : exact
    steps.push({ op: n.op, a, b, result })
    return result
  }
  const value = walk(e)
  return value === null ? null : { steps, value }
}

/** Which step slips: weight digits(a) + digits(b), +2 for multiplication. */
function chooseSlipStep(rng: Rng, e: Expr, refs: readonly bigint[]): number {
  const steps = solutionSteps(e, refs) ?? []
  if (steps.length === 0) return -1
  return rng.weighted(steps.map((s) => digits(s.a) + digits(s.b) + (s.op === '*' ? 2 : 0)))
}

// --- Solver -------------------------------------------------------------------------------------

export interface SolverOutput {
  completion: string
  /** The answer written, or null when the output is malformed. */
  given: bigint | null
  /** The true value. */
  truth: bigint
  /** Index of the slipped step, or −1. */
  slipStep: number
  hedged: boolean
  /** The completion was deliberately malformed. */
  malformed: boolean
}

export interface SolverTeacherOptions {
  /** Override the slip probability (e.g. to make Judge inputs balanced). */
  slipRate?: number
  /** Override the malformed-output probability. */
  formatErrorRate?: number
  /** Values of #1, #2, … for subtasks. */
  refs?: readonly bigint[]
  /** Slip rate table to use by level when slipRate is not given (default SOLVER_SLIP_RATE). */
  slipTable?: readonly number[]
  /** Level whose rate applies (default: difficultyOf the expression). */
  level?: number
}

function malform(rng: Rng, think: string, answer: string): string {
  switch (rng.int(0, 3)) {
    case 0: {
      const full = `<think>${think}</think><answer>${answer}</answer>`
      return full.slice(0, rng.int(1, full.length - '</answer>'.length))
    }
    case 1:
      return `<think>${think}</think>`
    case 2:
      return `<think>${think}</think><answer></answer>`
    default:
      return `<think>${think}<answer>${answer}</answer>`
  }
}

/** The scripted Solver on a well-formed expression (subtasks: pass `refs`). Null for a missing reference. */
export function scriptedSolve(rng: Rng, e: Expr, opts: SolverTeacherOptions = {}): SolverOutput | null {
  const refs = opts.refs ?? []
  const truth = evaluate(e, refs)
  if (truth === null) return null
  const level = levelIndex(opts.level ?? difficultyOf(e))
  const rate = opts.slipRate ?? (opts.slipTable ?? SOLVER_SLIP_RATE)[level]
  const slipAt = rng.chance(rate) ? chooseSlipStep(rng, e, refs) : -1
  const traced = tracedSteps(rng, e, refs, slipAt)!
  const wrong = traced.value !== truth
  const hedged = rng.chance(wrong ? HEDGE_RATE.wrong : HEDGE_RATE.right) && traced.steps.length > 0
  const texts = traced.steps.map(formatStep)
  if (hedged) {
    const at = slipAt >= 0 ? slipAt : rng.int(0, texts.length - 1)
    texts[at] = hedge(rng, texts[at])
  }
  const think = texts.length > 0 ? texts.join('; ') : `${traced.value}`
  const answer = traced.value.toString()
  if (rng.chance(opts.formatErrorRate ?? SOLVER_FORMAT_ERROR_RATE)) {
    const completion = malform(rng, think, answer)
    const r = parseSolution(completion)
    return { completion, given: r.ok ? r.value.answer : null, truth, slipStep: slipAt, hedged, malformed: true }
  }
  return { completion: `<think>${think}</think><answer>${answer}</answer>`, given: traced.value, truth, slipStep: slipAt, hedged, malformed: false }
}

// --- Proposer -----------------------------------------------------------------------------------

export type ProposalKind = 'good' | 'off-level' | 'trivial' | 'malformed' | 'too-hard' | 'tag-error'

export interface ProposerOutput {
  completion: string
  /** The question text inside the tags ('' when none could be placed). */
  question: string
  kind: ProposalKind
  /** The question's true class. */
  cls: QuestionClass
}

function corrupt(rng: Rng, text: string): string {
  for (let tries = 0; tries < 8; tries++) {
    let s: string
    const i = rng.int(0, text.length)
    switch (rng.int(0, 5)) {
      case 0: // unbalanced parenthesis
        s = text.includes(')') ? text.replace(')', '') : `(${text}`
        break
      case 1: // doubled operator
        s = text.replace(/[+\-*]/, (m) => m + rng.pick(['+', '*', '-']))
        break
      case 2: // trailing operator
        s = `${text}${rng.pick(['+', '-', '*'])}`
        break
      case 3: // a stray letter
        s = text.slice(0, i) + rng.pick(['x', 'a', '?', '=']) + text.slice(i)
        break
      case 4: // empty parentheses
        s = text.slice(0, i) + '()' + text.slice(i)
        break
      default: // leading unary minus / operator
        s = `${rng.pick(['-', '*', '+'])}${text}`
    }
    if (parseExpr(s) === null) return s
  }
  return `${text})(`
}

function trivialQuestion(rng: Rng, level: number): string {
  const d = Math.min(level, 3)
  const n = (): string => String(rng.int(d === 1 ? 2 : 10 ** (d - 1), 10 ** d - 1))
  switch (rng.int(0, 4)) {
    case 0:
      return n()
    case 1:
      return `${n()}*1`
    case 2:
      return `${n()}+0`
    case 3: {
      const x = n()
      return `${x}-${x}`
    }
    default:
      return `1*${n()}`
  }
}

function tooHardQuestion(rng: Rng): string {
  for (;;) {
    const e = sampleShape(rng, rng.int(5, 6), 3)
    if (classifyQuestion(printExpr(e)) === 'too-hard') return printExpr(e)
  }
}

export interface ProposerTeacherOptions extends GenerateOptions {
  /** Override PROPOSER_RATES (e.g. more bad questions for Validator training inputs). */
  rates?: Partial<Record<keyof typeof PROPOSER_RATES, number>>
}

/** The scripted Proposer/Challenger asked for a level-`level` problem. */
export function scriptedPropose(rng: Rng, level: number, opts: ProposerTeacherOptions = {}): ProposerOutput {
  const r = { ...PROPOSER_RATES, ...opts.rates }
  const kinds: ProposalKind[] = ['tag-error', 'malformed', 'trivial', 'too-hard', 'off-level', 'good']
  const weights = [r.tagError, r.malformed, r.trivial, r.tooHard, r.offLevel]
  weights.push(Math.max(0, 1 - weights.reduce((a, b) => a + b, 0)))
  const kind = kinds[rng.weighted(weights)]
  const gen = (l: number): string => printExpr(generateExpr(rng, l, opts))
  let question: string
  switch (kind) {
    case 'good':
    case 'tag-error':
      question = gen(level)
      break
    case 'off-level': {
      const l = level === MIN_LEVEL ? level + 1 : level === MAX_LEVEL ? level - 1 : level + (rng.chance(0.5) ? 1 : -1)
      question = gen(l)
      break
    }
    case 'malformed':
      question = corrupt(rng, gen(level))
      break
    case 'trivial':
      question = trivialQuestion(rng, level)
      break
    case 'too-hard':
      question = tooHardQuestion(rng)
      break
  }
  let completion = `<question>${question}</question>`
  if (kind === 'tag-error') {
    completion = rng.pick([
      `<question>${question}`,
      `${question}</question>`,
      `<question>${question}</question></question>`,
      `<question><question>${question}</question>`,
      `<question></question>`,
      `question: ${question}`,
    ])
  }
  return { completion, question, kind, cls: classifyQuestion(question) }
}

// --- Validator ----------------------------------------------------------------------------------

export interface ScoreTeacherOutput {
  completion: string
  score: number
  /** Whether the verdict (score ≥ SCORE_PASS) agrees with the truth. */
  verdictCorrect: boolean
  hedged: boolean
}

export interface ValidatorOutput extends ScoreTeacherOutput {
  cls: QuestionClass
  belief: QuestionClass
}

function countOps(text: string): number {
  return (text.match(/[+\-*\u00d7\u2212]/g) ?? []).length
}

/** The scripted Validator on a raw question text. */
export function scriptedValidate(rng: Rng, question: string): ValidatorOutput {
  const cls = classifyQuestion(question)
  const level = levelIndex(difficultyOf(question))
  const err =
    cls === 'good'
      ? VALIDATOR_ERROR_RATE.good[level]
      : cls === 'malformed'
        ? VALIDATOR_ERROR_RATE.malformed
        : cls === 'trivial'
          ? VALIDATOR_ERROR_RATE.trivial
          : VALIDATOR_ERROR_RATE.tooHard
  let belief: QuestionClass = cls
  if (rng.chance(err)) belief = cls === 'good' ? rng.pick(['malformed', 'trivial'] as const) : 'good'
  const verdictCorrect = (belief === 'good') === (cls === 'good')
  const hedged = rng.chance(verdictCorrect ? HEDGE_RATE.right : HEDGE_RATE.wrong)
  const ops = countOps(question)
  let think: string
  let score: number
  switch (belief) {
    case 'good':
      think = `ok; ${ops} ops; not trivial`
      score = hedged ? 8 : rng.pick([9, 10])
      break
    case 'too-hard':
      think = `ok; ${ops} ops; too big`
      score = hedged ? 5 : 4
      break
    case 'trivial':
      think = `ok; ${ops} ops; trivial`
      score = hedged ? 5 : 4
      break
    case 'malformed':
      think = 'bad syntax'
      score = hedged ? 3 : rng.pick([1, 2])
      break
  }
  if (hedged) think = hedge(rng, think)
  return { completion: `<think>${think}</think><score>${score}</score>`, score, verdictCorrect, hedged, cls, belief }
}

// --- Judge --------------------------------------------------------------------------------------

export interface JudgeOutput extends ScoreTeacherOutput {
  /** Whether the judged response states the true answer (its strict parse). */
  candidateCorrect: boolean
  lazy: boolean
}

/** The steps `a op b=r` a response's thinking writes, in order (hedge words around them ignored). */
export function writtenSteps(response: string): Step[] {
  const think = /<think>([\s\S]*?)<\/think>/.exec(response)?.[1] ?? ''
  const operand = String.raw`(\(-\d+\)|-?\d+)`
  const step = new RegExp(`^${operand}([+\\-*])${operand}=(-?\\d+)$`)
  const out: Step[] = []
  for (const part of think.split(';')) {
    const m = step.exec(part.replace(/\bmaybe\b|\bI think\b|, not sure/g, '').trim())
    if (!m) return []
    const num = (t: string) => BigInt(t.replace(/[()]/g, ''))
    out.push({ op: m[2] as Op, a: num(m[1]), b: num(m[3]), result: num(m[4]) })
  }
  return out
}

/**
 * How the Judge writes its own computation of a step `a op b`, so that the text before its result
 * never repeats the response's `a op b=`: `b+a` and `b*a` (operands swapped); `a-b` as `(-b)+a`;
 * `a+a` as `2*a` and `a*a` as `a^2`, where a swap would read the same. Same value as the step.
 */
export function judgeStepForm(s: { op: Op; a: bigint; b: bigint }): string {
  const [a, b] = [formatOperand(s.a), formatOperand(s.b)]
  if (s.op === '-') return `${formatOperand(-s.b)}+${a}`
  if (s.a === s.b) return s.op === '+' ? `2*${a}` : `${a}^2`
  return `${b}${s.op}${a}`
}

/** One line of the Judge's own working: its form of the step, `=`, the value it computed. */
function judgeStep(s: { op: Op; a: bigint; b: bigint }, own: bigint): string {
  return `${judgeStepForm(s)}=${own}`
}

/**
 * How the scripted Judge checks one written step `a op b=r`:
 * - `recompute`: the step's result in its own form (judgeStepForm), `68+17=85 ok` / `68+17=85 not 75`.
 *   Checking costs what the step costs, and a small model copies r instead (the model card, "The
 *   Judge copies").
 * - `units`: the units digit only, (a mod 10) op (b mod 10) mod 10 against r mod 10, `7+8:5 75:5 ok`
 *   / `7+8:5 84:4 not`: one single-digit operation, cheaper than the step. It misses slips that keep
 *   the units digit (±10, a dropped carry: about 60% of the bundled Solver's level-3 slips).
 * - `nines`: casting out nines, each number's residue mod 9 (its digit sum), the operation on the
 *   residues, against r's, `17:8 68:5 8+5:4 75:3 not`: several single-digit operations; it misses only
 *   slips that keep the digit sum (swapped digits).
 * Residues are of the signed value (−21 mod 10 = 9). A response without readable steps is recomputed
 * from the question in the `recompute` form, whatever the check.
 */
export type JudgeCheck = 'recompute' | 'units' | 'nines'
export const JUDGE_CHECKS: readonly JudgeCheck[] = ['recompute', 'units', 'nines']

/** The modulus of a residue check. */
const CHECK_MODULUS: Readonly<Record<'units' | 'nines', bigint>> = { units: 10n, nines: 9n }

function residue(v: bigint, m: bigint): bigint {
  return ((v % m) + m) % m
}

/**
 * A written step's residues under a residue check: the operands', the one the operation on them
 * gives (what a faultless Judge writes as its own) and the written result's. The step passes
 * the check when `own === written`.
 */
export function stepResidues(check: 'units' | 'nines', s: Step): { a: bigint; b: bigint; own: bigint; written: bigint } {
  const m = CHECK_MODULUS[check]
  const [a, b] = [residue(s.a, m), residue(s.b, m)]
  return { a, b, own: residue(applyOp(s.op, a, b), m), written: residue(s.result, m) }
}

/** One written step checked in the `check` form; `slip`: the Judge's own value is wrong. */
function checkStep(rng: Rng, s: Step, check: JudgeCheck, slip: boolean): { text: string; agrees: boolean } {
  if (check === 'recompute') {
    const exact = applyOp(s.op, s.a, s.b)
    const own = slip ? slipResult(rng, { ...s, result: exact }) : exact
    const agrees = own === s.result
    return { text: `${judgeStep(s, own)} ${agrees ? 'ok' : `not ${s.result}`}`, agrees }
  }
  const m = CHECK_MODULUS[check]
  const { a: ra, b: rb, own: faultless, written: rr } = stepResidues(check, s)
  const own = slip ? (faultless + BigInt(rng.int(1, Number(m) - 1))) % m : faultless
  const agrees = own === rr
  const operands = check === 'nines' ? `${s.a}:${ra} ${s.b}:${rb} ` : ''
  return { text: `${operands}${ra}${s.op}${rb}:${own} ${s.result}:${rr} ${agrees ? 'ok' : 'not'}`, agrees }
}

/**
 * The Judge's check of written steps, one at a time in the `check` form (one of them, drawn like a
 * Solver slip, slipped with probability `slipRate`), stopping at the first step that disagrees;
 * then the answer against the last step's result.
 */
function checkWrittenSteps(rng: Rng, steps: readonly Step[], given: bigint, slipRate: number, check: JudgeCheck): { think: string; saysRight: boolean } {
  const slipAt = rng.chance(slipRate) ? rng.weighted(steps.map((s) => digits(s.a) + digits(s.b) + (s.op === '*' ? 2 : 0))) : -1
  const checked: string[] = []
  for (let i = 0; i < steps.length; i++) {
    const c = checkStep(rng, steps[i], check, i === slipAt)
    checked.push(c.text)
    if (!c.agrees) return { think: `${checked.join('; ')}. got ${given}: wrong`, saysRight: false }
  }
  const last = steps[steps.length - 1].result
  if (last !== given) return { think: `${checked.join('; ')}. got ${given} not ${last}: wrong`, saysRight: false }
  return { think: `${checked.join('; ')}. got ${given}: right`, saysRight: true }
}

/** Rates the scripted Judge errs with (tests set them to 0 to check the check itself). */
export interface JudgeTeacherOptions {
  /** P(skimming), default JUDGE_LAZY_RATE[level]. */
  lazyRate?: number
  /** P(a slip in its own recomputation), default JUDGE_SLIP_RATE[level]. */
  slipRate?: number
  /** How it checks a written step, default `recompute` (the form the bundled weights learned). */
  check?: JudgeCheck
}

/** The scripted Judge on a well-formed question and a raw Solver response. */
export function scriptedJudge(rng: Rng, question: Expr, response: string, opts: JudgeTeacherOptions = {}): JudgeOutput {
  const truth = evaluate(question)!
  const level = levelIndex(difficultyOf(question))
  const parsed = parseSolution(response)
  const given = parsed.ok ? parsed.value.answer : null
  const candidateCorrect = given !== null && given === truth
  if (given === null) {
    const hedged = rng.chance(HEDGE_RATE.right)
    const think = hedged ? hedge(rng, 'no answer') : 'no answer'
    return { completion: `<think>${think}</think><score>1</score>`, score: 1, verdictCorrect: true, hedged, candidateCorrect, lazy: false }
  }
  const lazy = rng.chance(opts.lazyRate ?? JUDGE_LAZY_RATE[level])
  const slipRate = opts.slipRate ?? JUDGE_SLIP_RATE[level]
  const written = writtenSteps(response)
  let think: string
  let saysRight: boolean
  if (lazy) {
    think = 'looks fine'
    saysRight = true
  } else if (written.length > 0) {
    ;({ think, saysRight } = checkWrittenSteps(rng, written, given, slipRate, opts.check ?? 'recompute'))
  } else {
    const slipAt = rng.chance(slipRate) ? chooseSlipStep(rng, question, []) : -1
    const own = tracedSteps(rng, question, [], slipAt)!
    saysRight = own.value === given
    think = `${own.steps.map((s) => judgeStep(s, s.result)).join('; ')}. got ${given}: ${saysRight ? 'right' : 'wrong'}`
  }
  const verdictCorrect = saysRight === candidateCorrect
  const hedged = rng.chance(verdictCorrect ? HEDGE_RATE.right : HEDGE_RATE.wrong)
  if (hedged) think = hedge(rng, think)
  const score = saysRight ? (lazy ? (hedged ? 7 : 8) : hedged ? 8 : rng.pick([9, 10])) : hedged ? 3 : rng.pick([1, 2])
  return { completion: `<think>${think}</think><score>${score}</score>`, score, verdictCorrect, hedged, candidateCorrect, lazy }
}

// --- J-Zero decompose / subtask / compose ------------------------------------------------------

export interface DecomposeOutput {
  completion: string
  subtasks: string[]
  /** Whether the decomposition computes the question (no miscopied literal). */
  faithful: boolean
}

function miscopy(rng: Rng, sub: string): string {
  const lits = [...sub.matchAll(/\d+/g)].filter((m) => m.index === 0 || sub[m.index - 1] !== '#')
  if (lits.length === 0) return sub
  const m = rng.pick(lits)
  const v = BigInt(m[0])
  const w = rng.pick([v + 1n, v > 2n ? v - 1n : v + 2n, v + 10n])
  return sub.slice(0, m.index) + w.toString() + sub.slice(m.index + m[0].length)
}

export function scriptedDecompose(rng: Rng, question: Expr): DecomposeOutput {
  const level = levelIndex(difficultyOf(question))
  const subtasks = decomposeExpr(question)
  let faithful = true
  if (subtasks.length > 0 && rng.chance(DECOMPOSE_ERROR_RATE[level])) {
    // the first subtask always has literals on both sides; later ones may be all references
    const candidates = subtasks.map((s, i) => ({ s, i })).filter(({ s }) => /(^|[^#\d])\d/.test(s))
    const { i } = rng.pick(candidates)
    const before = subtasks[i]
    subtasks[i] = miscopy(rng, before)
    faithful = checkDecomposition(printExpr(question), subtasks) === true
  }
  return { completion: subtasks.map((s, i) => `${i + 1}. ${s}`).join('\n'), subtasks, faithful }
}

/** The scripted subtask solver: one subtask (an expression over `#k`) given the known values. */
export function scriptedSolveSubtask(rng: Rng, subtask: Expr, known: readonly bigint[], level: number): SolverOutput | null {
  return scriptedSolve(rng, subtask, { refs: known, slipTable: SUBTASK_SLIP_RATE, level, formatErrorRate: SOLVER_FORMAT_ERROR_RATE / 2 })
}

export interface ComposeOutput {
  completion: string
  given: bigint | null
}

/** The scripted composer: the last sub-answer, miscopied with COMPOSE_SLIP_RATE. */
export function scriptedCompose(rng: Rng, answers: readonly (bigint | null)[]): ComposeOutput {
  const last = answers.length > 0 ? answers[answers.length - 1] : null
  if (last === null) return { completion: '<think>no sub-answer</think><answer>0</answer>', given: 0n }
  const given = rng.chance(COMPOSE_SLIP_RATE) ? slipResult(rng, { op: '+', a: last, b: 0n, result: last }) : last
  return { completion: `<answer>${given}</answer>`, given }
}
