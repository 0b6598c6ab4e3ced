// Role formats of the arithmetic world: prompt builders (short plain strings for the bundled toy
// model, ChatML message lists for chat models) and strict parsers for every role's output.
//
// Toy prompts (the completion follows the prompt directly):
//   proposer   "Propose a level 4 problem.\n"            → "<question>(12+7)*3-4</question>"
//   solver     "Solve: (12+7)*3-4\n"                     → "<think>12+7=19; 19*3=57; 57-4=53</think><answer>53</answer>"
//   validator  "Rate problem: (12+7)*3-4\n"              → "<think>ok; 3 ops; not trivial</think><score>9</score>"
//   judge      "Judge: (12+7)*3-4\nResponse: <solver output>\n"
//                                                        → "<think>7+12=19 ok; 3*19=57 ok; (-4)+57=53 ok. got 53: right</think><score>9</score>"
//   decompose  "Decompose: (12+7)*3-4\n"                 → "1. 12+7\n2. #1*3\n3. #2-4"
//   subtask    "Task: (12+7)*3-4\nKnown: #1=19\nSolve #2: #1*3\n"
//                                                        → "<think>19*3=57</think><answer>57</answer>"
//   compose    "Compose: (12+7)*3-4\nSolved: #1=19; #2=57; #3=53\n" → "<answer>53</answer>"
// The proposer is also the R-Zero / J-Zero Challenger; `#k` in a subtask is the answer to subtask k.
// Validator and Judge scores are integers 1..10 (COSE App. G); `normalized = (score − 1) / 9`.
//
// Parsers return { ok, value, formatError? } and never throw, whatever the input. Strict mode (the
// default, for the toy model) accepts exactly the toy grammar: surrounding whitespace, an optional
// leading <think>…</think>, then the role's block and nothing else; no tag may appear inside
// another. Lenient mode (for chat models that add prose) reads only what follows the last
// </think>, takes the last complete block there, and ignores the rest. f = ok ? 1 : 0 (COSE §3,
// "format-validity indicators that ensure outputs contain the required tags").

import { matchBrace } from '../../tasks/extract.js'
import { parseExpr, parseInteger, printExpr, type Expr, type Op } from './expr.js'
import { DEFAULT_LEVEL, levelSpec } from './levels.js'

export type Role = 'proposer' | 'solver' | 'validator' | 'judge' | 'decompose' | 'subtask' | 'compose'
export const ROLES: readonly Role[] = ['proposer', 'solver', 'validator', 'judge', 'decompose', 'subtask', 'compose']

/** What a role is asked. Questions are raw text (a model's proposal may be malformed). */
export type RoleInput =
  | { role: 'proposer'; level?: number }
  | { role: 'solver'; question: string }
  | { role: 'validator'; question: string }
  | { role: 'judge'; question: string; response: string }
  | { role: 'decompose'; question: string }
  | {
      role: 'subtask'
      question: string
      /** 1-based index of the subtask to solve now. */
      index: number
      /** The subtask's text, e.g. `#1*3`. */
      subtask: string
      /** Answers to subtasks 1..index−1 (the values of #1, #2, …). */
      known: readonly (string | bigint)[]
    }
  | {
      role: 'compose'
      question: string
      /** Answers to subtasks 1..n. */
      answers: readonly (string | bigint)[]
      /** The subtasks' texts; shown only in the paper-style chat prompt. */
      subtasks?: readonly string[]
    }

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant'
  content: string
}

/** One line, single spaces: model text placed inside a prompt cannot break the prompt's layout. */
function oneLine(s: unknown): string {
  return String(s).replace(/\s+/g, ' ').trim()
}

function answerList(values: readonly (string | bigint)[]): string {
  return values.map((v, i) => `#${i + 1}=${oneLine(v) || '?'}`).join('; ')
}

/** The toy-format prompt (ends with a newline; the completion follows it directly). */
export function rolePrompt(input: RoleInput): string {
  switch (input.role) {
    case 'proposer':
      return `Propose a level ${levelSpec(input.level ?? DEFAULT_LEVEL).level} problem.\n`
    case 'solver':
      return `Solve: ${oneLine(input.question)}\n`
    case 'validator':
      return `Rate problem: ${oneLine(input.question)}\n`
    case 'judge':
      return `Judge: ${oneLine(input.question)}\nResponse: ${oneLine(input.response)}\n`
    case 'decompose':
      return `Decompose: ${oneLine(input.question)}\n`
    case 'subtask': {
      const known = input.known.length > 0 ? `Known: ${answerList(input.known)}\n` : ''
      return `Task: ${oneLine(input.question)}\n${known}Solve #${input.index}: ${oneLine(input.subtask)}\n`
    }
    case 'compose':
      return `Compose: ${oneLine(input.question)}\nSolved: ${answerList(input.answers)}\n`
  }
}

export const proposerPrompt = (level: number = DEFAULT_LEVEL): string => rolePrompt({ role: 'proposer', level })
export const solverPrompt = (question: string): string => rolePrompt({ role: 'solver', question })
export const validatorPrompt = (question: string): string => rolePrompt({ role: 'validator', question })
export const judgePrompt = (question: string, response: string): string => rolePrompt({ role: 'judge', question, response })
export const decomposePrompt = (question: string): string => rolePrompt({ role: 'decompose', question })
export const subtaskPrompt = (question: string, index: number, subtask: string, known: readonly (string | bigint)[]): string =>
  rolePrompt({ role: 'subtask', question, index, subtask, known })
export const composePrompt = (question: string, answers: readonly (string | bigint)[]): string =>
  rolePrompt({ role: 'compose', question, answers })

// Paper-style system prompts: COSE App. G (proposer, validator, solver, judge) and J-Zero App. C
// (decompose, subtask, compose), abbreviated and specialised to this world.
const SYSTEM: Record<Role, string> = {
  proposer: [
    'Task: Create a challenging and self-contained integer arithmetic problem.',
    'Requirements:',
    '- Use only non-negative integers, +, -, * and parentheses; no variables, no division.',
    '- The problem must require multi-step calculation and have exactly one integer answer.',
    '- Output format:',
    '<question>',
    '[expression]',
    '</question>',
  ].join('\n'),
  validator: [
    'Task: Evaluate the quality of a generated arithmetic question using a strict rubric.',
    'Scoring Criteria:',
    '- Malformed, unsolvable or incoherent questions receive scores in [1, 3].',
    '- Trivial, ambiguous or incomplete questions receive scores in [4, 7].',
    '- Clear, well-formed, self-contained questions that need real calculation receive scores in [8, 10].',
    'First reason inside <think></think> tags, then output a final integer score inside <score></score> tags.',
  ].join('\n'),
  solver: [
    'Task: Produce a complete solution to the provided arithmetic problem.',
    'Instructions:',
    '- Reason step-by-step inside <think></think>, one operation per step (innermost first, left to right).',
    '- Return the final integer inside:',
    '<answer>',
    '[solution]',
    '</answer>',
  ].join('\n'),
  judge: [
    'Task: Evaluate the Solver response using a strict correctness rubric.',
    'Scoring Criteria:',
    '- Any arithmetic or logical error, or a wrong final answer, results in a score in [1, 3].',
    '- Incomplete but partially correct answers receive scores in [4, 7].',
    '- Fully correct, concise, and instruction-following answers receive scores in [8, 10].',
    'First reason inside <think></think> tags, then output a final integer score inside <score></score> tags.',
  ].join('\n'),
  decompose: [
    'You are an expert at breaking a hard task into simpler subtasks. Given an arithmetic task, output the',
    'few essential subtasks whose answers, once combined, fully solve the task.',
    'Rules:',
    '- Output at most 5 subtasks, one operation each where possible; write #k for the answer of subtask k.',
    '- Each subtask must be SIMPLER than the whole task and genuinely needed.',
    '- Order them so earlier subtasks are useful for later ones.',
    'Output a numbered list of the subtasks only ("1. ...", "2. ..."), nothing else.',
  ].join('\n'),
  subtask: [
    'You are solving ONE subtask that is part of a larger task. Answer the subtask fully and correctly,',
    'using the larger task only as context. Be concise and self-contained. #k stands for the answer of',
    'subtask k. Put the result inside <answer></answer>.',
  ].join('\n'),
  compose: [
    'You are an expert problem solver. You are given a task, and a set of subtasks that have each already',
    'been solved. Combine the subtask solutions into ONE final answer to the original task: resolve any',
    'contradictions and fix obvious subtask errors. Output ONLY the final answer, inside <answer></answer>.',
  ].join('\n'),
}

export interface ChatOptions {
  /**
   * 'toy' (default): one user message holding the toy prompt, for the bundled model under its ChatML
   * template. 'paper': a system message with the paper's role prompt and a user message with the
   * request, for chat models.
   */
  style?: 'toy' | 'paper'
}

function paperUser(input: RoleInput): string {
  switch (input.role) {
    case 'proposer': {
      const s = levelSpec(input.level ?? DEFAULT_LEVEL)
      return `Create one new problem of difficulty level ${s.level}: exactly ${s.ops} operation${s.ops > 1 ? 's' : ''}, operands of up to ${s.digits} digit${s.digits > 1 ? 's' : ''}.`
    }
    case 'solver':
      return oneLine(input.question)
    case 'validator':
      return `Question: ${oneLine(input.question)}`
    case 'judge':
      return `Question: ${oneLine(input.question)}\n\nSolver response:\n${String(input.response).trim()}`
    case 'decompose':
      return `Task: ${oneLine(input.question)}\nBreak this into the essential, simpler subtasks that together solve it, ordered so earlier ones help later ones.`
    case 'subtask': {
      const known = input.known.length > 0 ? `\nAlready solved: ${input.known.map((v, i) => `#${i + 1} = ${oneLine(v)}`).join(', ')}` : ''
      return `Larger task (context): ${oneLine(input.question)}${known}\nSubtask to solve now (#${input.index}): ${oneLine(input.subtask)}\nAnswer this subtask.`
    }
    case 'compose': {
      const lines = input.answers.map((v, i) => {
        const sub = input.subtasks?.[i]
        return sub === undefined ? `#${i + 1} = ${oneLine(v)}` : `${i + 1}. ${oneLine(sub)} → #${i + 1} = ${oneLine(v)}`
      })
      return `Original task: ${oneLine(input.question)}\nSolved subtasks:\n${lines.join('\n')}\nCombine these into the single best final answer to the original task. Output ONLY the final answer.`
    }
  }
}

/** ChatML messages for a role (see ChatOptions.style). */
export function roleChat(input: RoleInput, opts: ChatOptions = {}): ChatMessage[] {
  if ((opts.style ?? 'toy') === 'toy') return [{ role: 'user', content: rolePrompt(input).replace(/\n$/, '') }]
  return [
    { role: 'system', content: SYSTEM[input.role] },
    { role: 'user', content: paperUser(input) },
  ]
}

// ---------------------------------------------------------------------------------------------
// Parsers

export type ParseResult<T> =
  | { ok: true; value: T; formatError?: undefined }
  | { ok: false; value: null; formatError: string }

export interface ParseOptions {
  /** Strict toy grammar (default) or lenient reading for chat models (see the header). */
  mode?: 'strict' | 'lenient'
}

/** COSE f ∈ {0, 1}. */
export function formatIndicator(r: { ok: boolean }): 0 | 1 {
  return r.ok ? 1 : 0
}

function fail(formatError: string): { ok: false; value: null; formatError: string } {
  return { ok: false, value: null, formatError }
}

const TAG_NAMES = 'think|thinking|answer|score|question'
const ANY_TAG = new RegExp(`<\\s*/?\\s*(?:${TAG_NAMES})\\s*>`, 'i')

function hasTag(s: string): boolean {
  return ANY_TAG.test(s)
}

/** Strict: split an optional leading <think>…</think>; returns [think, rest] or an error string. */
function splitThinkStrict(s: string): { think: string | null; rest: string } | string {
  if (!s.startsWith('<think>')) return { think: null, rest: s }
  const close = s.indexOf('</think>')
  if (close < 0) return 'unclosed <think>'
  const think = s.slice('<think>'.length, close)
  if (hasTag(think)) return 'tag inside <think>'
  return { think, rest: s.slice(close + '</think>'.length).trim() }
}

/** Lenient: text after the last closing think tag, and the thinking text before it (if any). */
function splitThinkLenient(s: string): { think: string | null; rest: string } {
  let cut = -1
  let tagLen = 0
  for (const tag of ['</think>', '</thinking>']) {
    const i = s.lastIndexOf(tag)
    if (i > cut) {
      cut = i
      tagLen = tag.length
    }
  }
  if (cut < 0) return { think: null, rest: s }
  const think = s.slice(0, cut).replace(/^\s*<think(?:ing)?>/, '')
  return { think, rest: s.slice(cut + tagLen) }
}

/** Strict: `rest` must be exactly <tag>…</tag> with no tag inside. */
function exactBlock(rest: string, tag: string): string | { error: string } {
  const open = `<${tag}>`
  const close = `</${tag}>`
  if (rest.length === 0) return { error: `missing <${tag}>` }
  if (!rest.startsWith(open)) return { error: rest.includes(open) ? `text before <${tag}>` : `missing <${tag}>` }
  const end = rest.indexOf(close)
  if (end < 0) return { error: `missing </${tag}>` }
  const inner = rest.slice(open.length, end)
  if (hasTag(inner)) return { error: `tag inside <${tag}>` }
  if (end + close.length !== rest.length) return { error: `text after </${tag}>` }
  return inner
}

/** Lenient: inner text of the last complete <tag>…</tag> (no tag inside) in `s`, or null. */
function lastBlock(s: string, tag: string): string | null {
  const open = `<${tag}>`
  const close = `</${tag}>`
  let end = s.lastIndexOf(close)
  while (end >= 0) {
    const start = s.lastIndexOf(open, end)
    if (start < 0) return null
    const inner = s.slice(start + open.length, end)
    if (!hasTag(inner)) return inner
    end = end > 0 ? s.lastIndexOf(close, end - 1) : -1
  }
  return null
}


// An optional leading <think>, then exactly one <tag>…</tag> (strict), or the last complete
// <tag> block after the last </think> (lenient): the shared reader of single-tag role outputs.
function readTagBlock(
  output: unknown,
  tag: string,
  opts: ParseOptions,
): { ok: true; think: string | null; inner: string } | { ok: false; error: string } {
  if (typeof output !== 'string') return { ok: false, error: 'not a string' }
  if ((opts.mode ?? 'strict') === 'strict') {
    const sp = splitThinkStrict(output.trim())
    if (typeof sp === 'string') return { ok: false, error: sp }
    const b = exactBlock(sp.rest, tag)
    if (typeof b !== 'string') return { ok: false, error: b.error }
    return { ok: true, think: sp.think, inner: b }
  }
  const sp = splitThinkLenient(output)
  const b = lastBlock(sp.rest, tag)
  if (b === null) return { ok: false, error: `no complete <${tag}> block` }
  return { ok: true, think: sp.think, inner: b }
}

// --- Proposer / Challenger ----------------------------------------------------------------------

export interface QuestionValue {
  think: string | null
  /** The question text, trimmed, whitespace runs collapsed. */
  text: string
  /** The parsed expression, or null when the text is not a valid expression. */
  expr: Expr | null
  /** Canonical printing of `expr`, or null. */
  canonical: string | null
}

export interface QuestionParseOptions extends ParseOptions {
  /**
   * Make a question that is not a valid expression a format error (f = 0). Default false: the
   * tags alone decide f (COSE f_P), and judging the content is the Validator's job. Set it for
   * loops without a Validator (R-Zero, J-Zero Challengers).
   */
  requireExpr?: boolean
}

export function parseQuestion(output: unknown, opts: QuestionParseOptions = {}): ParseResult<QuestionValue> {
  const read = readTagBlock(output, 'question', opts)
  if (!read.ok) return fail(read.error)
  const { think, inner } = read
  const text = oneLine(inner)
  if (text.length === 0) return fail('empty question')
  const expr = parseExpr(text)
  if (expr === null && opts.requireExpr === true) return fail('question is not a valid expression')
  return { ok: true, value: { think, text, expr, canonical: expr === null ? null : printExpr(expr) } }
}

// --- Solver / subtask / compose -----------------------------------------------------------------

export interface SolutionValue {
  think: string | null
  /** The answer text, trimmed. */
  answerText: string
  /** The answer as an integer, or null when it is not one. */
  answer: bigint | null
  /** Where the answer came from. */
  via: 'answer' | 'boxed'
}

export interface SolutionParseOptions extends ParseOptions {
  /** Make a non-integer answer a format error. Default false (the tags alone decide f_S). */
  requireInteger?: boolean
}

export function parseSolution(output: unknown, opts: SolutionParseOptions = {}): ParseResult<SolutionValue> {
  if (typeof output !== 'string') return fail('not a string')
  let think: string | null
  let inner: string
  let via: 'answer' | 'boxed'
  if ((opts.mode ?? 'strict') === 'strict') {
    const sp = splitThinkStrict(output.trim())
    if (typeof sp === 'string') return fail(sp)
    think = sp.think
    const rest = sp.rest
    if (rest.startsWith('\\boxed{')) {
      const end = matchBrace(rest, '\\boxed'.length)
      if (end < 0) return fail('unbalanced \\boxed{')
      if (end !== rest.length) return fail('text after \\boxed{}')
      inner = rest.slice('\\boxed{'.length, end - 1)
      if (hasTag(inner)) return fail('tag inside \\boxed{}')
      via = 'boxed'
    } else {
      const b = exactBlock(rest, 'answer')
      if (typeof b !== 'string') return fail(b.error)
      inner = b
      via = 'answer'
    }
  } else {
    const sp = splitThinkLenient(output)
    think = sp.think
    const b = lastBlock(sp.rest, 'answer')
    if (b !== null) {
      inner = b
      via = 'answer'
    } else {
      const boxed = lastBoxed(sp.rest)
      if (boxed === null) return fail('no <answer> block or \\boxed{}')
      inner = boxed
      via = 'boxed'
    }
  }
  const answerText = inner.trim()
  if (answerText.length === 0) return fail('empty answer')
  const answer = parseInteger(answerText)
  if (answer === null && opts.requireInteger === true) return fail('answer is not an integer')
  return { ok: true, value: { think, answerText, answer, via } }
}

function lastBoxed(s: string): string | null {
  let at = s.lastIndexOf('\\boxed{')
  while (at >= 0) {
    const open = at + '\\boxed'.length
    const end = matchBrace(s, open)
    if (end >= 0) return s.slice(open + 1, end - 1)
    at = at > 0 ? s.lastIndexOf('\\boxed{', at - 1) : -1
  }
  return null
}

/** J-Zero subtask answers use the Solver format. */
export const parseSubtaskAnswer = parseSolution
/** J-Zero compose output: an optional <think>, then <answer>…</answer> or \boxed{…}. */
export const parseCompose = parseSolution

// --- Validator / Judge --------------------------------------------------------------------------

export const MIN_SCORE = 1
export const MAX_SCORE = 10
/** A score at or above this is the verdict "acceptable" (Validator) / "correct" (Judge) in this world. */
export const SCORE_PASS = 6

export interface ScoreValue {
  think: string | null
  /** Integer in 1..10. */
  score: number
  /** (score − 1) / 9, in [0, 1]. */
  normalized: number
}

export function normalizeScore(score: number): number {
  return (score - MIN_SCORE) / (MAX_SCORE - MIN_SCORE)
}

function scoreOf(inner: string): number | string {
  const m = /^\s*(\d{1,2})\s*$/.exec(inner)
  if (m === null) return 'score is not an integer'
  if (m[1].length > 1 && m[1][0] === '0') return 'score has a leading zero'
  const n = Number(m[1])
  if (n < MIN_SCORE || n > MAX_SCORE) return `score ${n} outside ${MIN_SCORE}..${MAX_SCORE}`
  return n
}

/** Validator and Judge output: `<think>…</think><score>N</score>`, N an integer in 1..10. */
export function parseScore(output: unknown, opts: ParseOptions = {}): ParseResult<ScoreValue> {
  const read = readTagBlock(output, 'score', opts)
  if (!read.ok) return fail(read.error)
  const { think, inner } = read
  const n = scoreOf(inner)
  if (typeof n === 'string') return fail(n)
  return { ok: true, value: { think, score: n, normalized: normalizeScore(n) } }
}

export const parseValidator = parseScore
export const parseJudge = parseScore

// --- J-Zero decompose ---------------------------------------------------------------------------

export interface Subtask {
  /** 1-based. */
  index: number
  /** The subtask text, trimmed. */
  text: string
  /** Parsed with `#k` references allowed; null when not an expression (lenient mode only). */
  expr: Expr | null
}

export interface DecompositionValue {
  think: string | null
  subtasks: Subtask[]
}

/** JZ App. C asks for 3–5 subtasks; a toy problem of n ≤ 2 operations has only n natural ones. */
export const MIN_SUBTASKS = 1
export const MAX_SUBTASKS = 5

export interface DecompositionParseOptions extends ParseOptions {
  /** Default MIN_SUBTASKS (1); pass 3 for the paper's bound. */
  minSubtasks?: number
  /** Default MAX_SUBTASKS (5). */
  maxSubtasks?: number
}

/**
 * A numbered list `1. …\n2. …`, numbered 1..n consecutively, n within bounds. Strict: nothing but
 * the list (blank lines allowed), each item an expression whose `#k` references point to earlier
 * items. Lenient: lines that do not start with a number are skipped, and items may be prose.
 */
export function parseDecomposition(output: unknown, opts: DecompositionParseOptions = {}): ParseResult<DecompositionValue> {
  if (typeof output !== 'string') return fail('not a string')
  const strict = (opts.mode ?? 'strict') === 'strict'
  const min = opts.minSubtasks ?? MIN_SUBTASKS
  const max = opts.maxSubtasks ?? MAX_SUBTASKS
  let think: string | null
  let body: string
  if (strict) {
    const sp = splitThinkStrict(output.trim())
    if (typeof sp === 'string') return fail(sp)
    think = sp.think
    body = sp.rest
  } else {
    const sp = splitThinkLenient(output)
    think = sp.think
    body = sp.rest
  }
  if (strict && hasTag(body)) return fail('tag in the subtask list')
  const subtasks: Subtask[] = []
  for (const raw of body.split('\n')) {
    const line = raw.trim()
    if (line.length === 0) continue
    const m = /^(\d{1,2})[.)]\s*(.*)$/.exec(line)
    if (m === null) {
      if (strict) return fail('a line is not a numbered subtask')
      continue
    }
    const index = Number(m[1])
    if (index !== subtasks.length + 1) return fail(`subtasks not numbered 1..n (found ${index} after ${subtasks.length})`)
    if (index > max) return fail(`more than ${max} subtasks`)
    const text = m[2].trim()
    if (text.length === 0) return fail(`subtask ${index} is empty`)
    const expr = parseExpr(text, { allowRefs: true })
    if (strict) {
      if (expr === null) return fail(`subtask ${index} is not an expression`)
      if (!refsBefore(expr, index)) return fail(`subtask ${index} refers to a later or missing subtask`)
    }
    subtasks.push({ index, text, expr: expr !== null && refsBefore(expr, index) ? expr : null })
  }
  if (subtasks.length === 0) return fail('no subtasks')
  if (subtasks.length < min) return fail(`fewer than ${min} subtasks`)
  return { ok: true, value: { think, subtasks } }
}

function refsBefore(e: Expr, index: number): boolean {
  if (e.kind === 'ref') return e.index < index
  if (e.kind === 'num') return true
  return refsBefore(e.left, index) && refsBefore(e.right, index)
}

// --- Solution steps (process-level reading of a Solver's <think>) -------------------------------

export interface ParsedStep {
  op: Op
  a: bigint
  b: bigint
  /** The result the text claims. */
  claimed: bigint
  /** Whether the claim is arithmetically right. */
  right: boolean
}

const STEP_RE = /(\(\s*[-\u2212]\s*\d{1,40}\s*\)|\d{1,40})\s*([+\-*\u00d7\u2212])\s*(\(\s*[-\u2212]\s*\d{1,40}\s*\)|\d{1,40})\s*=\s*([-\u2212]?\s*\d{1,40})/g

function operand(s: string): bigint | null {
  return parseInteger(s.replace(/[()]/g, ''))
}

/**
 * The `a op b=c` steps written in a thinking text (hedge words and separators are skipped), each
 * checked. Never throws; unreadable text gives [].
 */
export function parseSteps(think: unknown): ParsedStep[] {
  if (typeof think !== 'string' || think.length > 100_000) return []
  const out: ParsedStep[] = []
  for (const m of think.matchAll(STEP_RE)) {
    const a = operand(m[1])
    const b = operand(m[3])
    const claimed = parseInteger(m[4])
    if (a === null || b === null || claimed === null) continue
    const op: Op = m[2] === '+' ? '+' : m[2] === '*' || m[2] === '\u00d7' ? '*' : '-'
    const truth = op === '+' ? a + b : op === '-' ? a - b : a * b
    out.push({ op, a, b, claimed, right: truth === claimed })
  }
  return out
}

/** Format a list of sub-answers as the toy prompts do (`#1=19; #2=57`). */
export function formatKnown(values: readonly (string | bigint)[]): string {
  return answerList(values)
}


