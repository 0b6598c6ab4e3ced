// The verifier: exact answers, question classes, and J-Zero decompositions, checked against the
// expression's true value. Nothing here throws on model output; malformed input gives null.

import {
  evaluate,
  formatStep,
  isTrivialExpr,
  parseExpr,
  parseInteger,
  printExpr,
  solutionSteps,
  type Expr,
} from './expr.js'
import { parseSolution, type Subtask } from './formats.js'
import { difficultyOf, LEVEL_BEYOND } from './levels.js'

/** The exact value of a question, or null when it is malformed. */
export function answerOf(question: unknown): bigint | null {
  const e = parseExpr(question)
  return e === null ? null : evaluate(e)
}

/**
 * The integer an answer text states: a bare integer (`53`, ` -53 `), or else what a Solver output
 * holds in its last `<answer>…</answer>` or `\boxed{…}` (read leniently). Null when there is none.
 */
export function extractAnswer(answerText: unknown): bigint | null {
  if (typeof answerText !== 'string') return null
  const bare = parseInteger(answerText)
  if (bare !== null) return bare
  const r = parseSolution(answerText, { mode: 'lenient' })
  return r.ok ? r.value.answer : null
}

/**
 * Whether `answerText` (a bare integer or a whole Solver output) states the question's value.
 * Null when the question is malformed or no integer answer can be read; `=== true` is "correct".
 */
export function verifyAnswer(question: unknown, answerText: unknown): boolean | null {
  const truth = answerOf(question)
  if (truth === null) return null
  const given = extractAnswer(answerText)
  return given === null ? null : given === truth
}

/** Whether an expression is trivial (see isTrivialExpr); null when the text is malformed. */
export function isTrivial(expr: string | Expr): boolean | null {
  const e = typeof expr === 'string' ? parseExpr(expr) : expr
  return e === null || typeof e !== 'object' ? null : isTrivialExpr(e)
}

/** What a question is, from the Validator's point of view. Only 'good' is acceptable. */
export type QuestionClass = 'good' | 'malformed' | 'trivial' | 'too-hard'

/** malformed (does not parse) → trivial → too-hard (beyond level 5) → good. */
export function classifyQuestion(question: unknown): QuestionClass {
  const e = parseExpr(question)
  if (e === null) return 'malformed'
  if (isTrivialExpr(e)) return 'trivial'
  if (difficultyOf(e) === LEVEL_BEYOND) return 'too-hard'
  return 'good'
}

/** The Validator's ground truth: well-formed, non-trivial, within level 5. */
export function isAcceptableQuestion(question: unknown): boolean {
  return classifyQuestion(question) === 'good'
}

/** A perfect Solver completion (no slips, no hedges), or null for a malformed question. */
export function referenceSolution(question: unknown): string | null {
  const e = parseExpr(question)
  if (e === null) return null
  const steps = solutionSteps(e) ?? []
  return `<think>${steps.map(formatStep).join('; ')}</think><answer>${evaluate(e)}</answer>`
}

/**
 * J-Zero decomposition by the reference procedure: one subtask per operation in solution order
 * (post-order), each written over literals and `#k` references to earlier subtasks; when there
 * are more operations than `maxSubtasks`, the first maxSubtasks − 1 operations get their own
 * subtasks and the last subtask finishes the whole expression. `(12+7)*3-4` → [`12+7`, `#1*3`,
 * `#2-4`]. A bare number gives [] (nothing to decompose).
 */
export function decomposeExpr(e: Expr, maxSubtasks = 5): string[] {
  const nodes: Expr[] = []
  const walk = (n: Expr): void => {
    if (n.kind !== 'bin') return
    walk(n.left)
    walk(n.right)
    nodes.push(n)
  }
  walk(e)
  if (nodes.length === 0) return []
  const own = nodes.length <= maxSubtasks ? nodes : [...nodes.slice(0, maxSubtasks - 1), e]
  const index = new Map<Expr, number>()
  const out: string[] = []
  for (const node of own) {
    const sub = (n: Expr, top: boolean): Expr => {
      if (!top && index.has(n)) return { kind: 'ref', index: index.get(n)! }
      if (n.kind !== 'bin') return n
      return { kind: 'bin', op: n.op, left: sub(n.left, false), right: sub(n.right, false) }
    }
    out.push(printExpr(sub(node, true)))
    index.set(node, out.length)
  }
  return out
}

/**
 * The values of a list of subtasks evaluated in order (`#k` = value of subtask k), or null when
 * a subtask is malformed or refers forward.
 */
export function subtaskValues(subtasks: readonly (string | Subtask)[]): bigint[] | null {
  const values: bigint[] = []
  for (const s of subtasks) {
    const e = typeof s === 'string' ? parseExpr(s, { allowRefs: true }) : s.expr
    if (e === null) return null
    const v = evaluate(e, values)
    if (v === null) return null
    values.push(v)
  }
  return values
}

/**
 * Whether a decomposition is faithful: every subtask evaluates (references point backwards) and
 * the last subtask's value is the question's value. Null when the question is malformed; false
 * for an empty list.
 */
export function checkDecomposition(question: unknown, subtasks: readonly (string | Subtask)[]): boolean | null {
  const truth = answerOf(question)
  if (truth === null) return null
  const values = subtaskValues(subtasks)
  if (values === null || values.length === 0) return false
  return values[values.length - 1] === truth
}
