// What J-Zero needs of a task world: the Challenger's task prompt and format check, the Solver's
// answer prompt, the decompose / subtask / compose prompts of subtask amplification (JZ Eq. 11,
// App. C), how a (task, response) pair is shown to the scalar Judge, and — for measurement only,
// never seen by the loop — the verifier and the held-out sets. The bundled arithmetic world
// provides its toy formats.
import type { Prompt, ScorePair } from '../../engine/model.js'
import {
  answerOf,
  composePrompt,
  decomposePrompt,
  evalSet,
  evaluate,
  generateExpr,
  isEvalQuestion,
  isHedged,
  parseDecomposition,
  parseExpr,
  parseQuestion,
  parseSolution,
  printExpr,
  proposerPrompt,
  Rng as WorldRng,
  roleChat,
  type RoleInput,
  deriveSeed,
  scriptedSolve,
  solverPrompt,
  subtaskPrompt,
  verifyAnswer,
} from '../../worlds/arith/index.js'

/** A preference pair of responses to one task, chosen first. */
export interface PreferencePair {
  question: string
  chosen: string
  rejected: string
}

/** A held-out preference pair whose order the world's verifier fixed (chosen right, rejected wrong). */
export interface HeldOutPreference extends PreferencePair {
  level: number
  /** Neither response hedges: wording cannot decide the pair (the toy counterpart of RM-Bench's hard split). */
  plain: boolean
}

export interface JzeroWorld {
  name: string
  /** The Challenger's task-generation prompt (JZ App. C.1: one instruction, so one GRPO group). */
  challengerPrompt(level: number): Prompt
  /** The format check of Eq. 6: a well-formed task inside <question> tags; null when it fails. */
  parseTask(output: string): { question: string; key: string } | null
  /**
   * The text BLEU compares for the repetition penalty (Eq. 5; BLEU splits on whitespace). An
   * arithmetic task is one whitespace token, so the toy world spaces out numbers and operators.
   */
  repetitionText(question: string): string
  /** The answer-generation prompt, shared by Solver and Challenger in role-asymmetry pairs (Eq. 10). */
  solverPrompt(question: string): Prompt
  decomposePrompt(question: string): Prompt
  /** Subtasks of a decomposition (JZ asks for 3–5; `min`/`max` bound them); null when malformed. */
  parseDecomposition(output: string, min: number, max: number): string[] | null
  subtaskPrompt(question: string, index: number, subtask: string, known: readonly string[]): Prompt
  composePrompt(question: string, answers: readonly string[]): Prompt
  /** A Solver-format answer: its working (or null) and the final answer text; null when malformed. */
  parseAnswer(output: string): { think: string | null; answer: string } | null
  /** The response a well-formed composed answer stands for, in the Solver's own format. */
  amplifiedResponse(subtaskWork: readonly (string | null)[], composedAnswer: string): string
  /** How the Judge sees a task and a response (prompt text, completion text). */
  judgeInput(question: string, response: string): ScorePair
  /** Ground truth, for measurement only: whether `output` answers `question` correctly (null: unverifiable task). */
  verify(question: string, output: string): boolean | null
  /** Held-out Solver questions of a difficulty, fixed by seed. */
  evalSet(level: number, size: number): { id: string; question: string }[]
  /** A held-out preference set ordered by the verifier (the toy counterpart of RM-Bench, JZ App. B). */
  heldOutPreferences(levels: readonly number[], perLevel: number): HeldOutPreference[]
}

/** One line, single spaces (as the toy prompts print model text). */
function oneLine(s: string): string {
  return s.replace(/\s+/g, ' ').trim()
}

/**
 * Scripted responses to a well-formed question, from the world's imperfect teachers: a right one
 * (no slip) and a wrong one (one slipped step), both well formed; their wording hedges at the
 * teachers' natural rates. Deterministic in `rng`.
 */
export function scriptedRightWrong(rng: WorldRng, question: string): { right: string; wrong: string } | null {
  const e = parseExpr(question)
  if (e === null) return null
  const truth = evaluate(e)
  if (truth === null) return null
  for (let attempt = 0; attempt < 16; attempt++) {
    const right = scriptedSolve(rng, e, { slipRate: 0, formatErrorRate: 0 })
    const wrong = scriptedSolve(rng, e, { slipRate: 1, formatErrorRate: 0 })
    if (right && wrong && right.given === truth && wrong.given !== null && wrong.given !== truth) return { right: right.completion, wrong: wrong.completion }
  }
  return null
}

export function arithHeldOutPreferences(levels: readonly number[], perLevel: number): HeldOutPreference[] {
  const out: HeldOutPreference[] = []
  for (const level of levels) {
    const rng = new WorldRng(deriveSeed('jzero-judge-heldout-v1', level))
    for (const item of evalSet(level, perLevel)) {
      const p = scriptedRightWrong(rng, item.question)
      if (p) out.push({ question: item.question, chosen: p.right, rejected: p.wrong, level, plain: !isHedged(p.right) && !isHedged(p.wrong) })
    }
  }
  return out
}

/** Questions of a level that are never in the held-out sets (for the toy Judge's training data). */
export function arithTrainingQuestions(seed: string, level: number, count: number): string[] {
  const rng = new WorldRng(deriveSeed(seed, level))
  return Array.from({ length: count }, () => printExpr(generateExpr(rng, level, { exclude: isEvalQuestion })))
}

/** The toy world's prompts (strings the bundled model was trained on), strict parsers. */
export const arithJzeroWorld: JzeroWorld = {
  name: 'arith',
  challengerPrompt: (level) => proposerPrompt(level),
  parseTask(output) {
    // J-Zero has no Validator: a task that is not an expression fails the format check (Eq. 6).
    const r = parseQuestion(output, { requireExpr: true })
    return r.ok ? { question: r.value.canonical ?? r.value.text, key: r.value.canonical ?? r.value.text } : null
  },
  repetitionText: (q) => q.replace(/([()+\-*])/g, ' $1 ').replace(/\s+/g, ' ').trim(),
  solverPrompt: (q) => solverPrompt(q),
  decomposePrompt: (q) => decomposePrompt(q),
  parseDecomposition(output, min, max) {
    const r = parseDecomposition(output, { minSubtasks: min, maxSubtasks: max })
    return r.ok ? r.value.subtasks.map((s) => s.text) : null
  },
  subtaskPrompt: (q, index, subtask, known) => subtaskPrompt(q, index, subtask, known),
  composePrompt: (q, answers) => composePrompt(q, answers),
  parseAnswer(output) {
    const r = parseSolution(output)
    return r.ok ? { think: r.value.think, answer: r.value.answerText } : null
  },
  amplifiedResponse(work, answer) {
    const steps = work.filter((w): w is string => w !== null && w.trim().length > 0).map(oneLine)
    return steps.length ? `<think>${steps.join('; ')}</think><answer>${answer}</answer>` : `<answer>${answer}</answer>`
  },
  judgeInput: (question, response) => ({ prompt: `Judge: ${oneLine(question)}\nResponse: `, completion: `${oneLine(response)}\n` }),
  verify: (question, output) => (answerOf(question) === null ? null : verifyAnswer(question, output) === true),
  evalSet: (level, size) => evalSet(level, size).map((e) => ({ id: e.id, question: e.question })),
  heldOutPreferences: arithHeldOutPreferences,
}

const chat = (input: RoleInput): Prompt => ({ messages: roleChat(input, { style: 'paper' }).map((m) => ({ role: m.role, content: m.content })) })

/**
 * The arithmetic world for chat models: JZ App. C's role prompts (specialised to arithmetic in
 * src/worlds/arith/formats.ts) as system + user messages under the model's chat template, lenient
 * parsers (prose around the tags is allowed), and the Judge reading a user/assistant exchange.
 */
export const arithJzeroChatWorld: JzeroWorld = {
  ...arithJzeroWorld,
  name: 'arith-chat',
  challengerPrompt: (level) => chat({ role: 'proposer', level }),
  parseTask(output) {
    const r = parseQuestion(output, { requireExpr: true, mode: 'lenient' })
    return r.ok ? { question: r.value.canonical ?? r.value.text, key: r.value.canonical ?? r.value.text } : null
  },
  solverPrompt: (q) => chat({ role: 'solver', question: q }),
  decomposePrompt: (q) => chat({ role: 'decompose', question: q }),
  parseDecomposition(output, min, max) {
    const r = parseDecomposition(output, { minSubtasks: min, maxSubtasks: max, mode: 'lenient' })
    return r.ok ? r.value.subtasks.map((s) => s.text) : null
  },
  subtaskPrompt: (q, index, subtask, known) => chat({ role: 'subtask', question: q, index, subtask, known }),
  composePrompt: (q, answers) => chat({ role: 'compose', question: q, answers }),
  parseAnswer(output) {
    const r = parseSolution(output, { mode: 'lenient' })
    return r.ok ? { think: r.value.think, answer: r.value.answerText } : null
  },
  judgeInput: (question, response) => ({ prompt: { messages: [{ role: 'user', content: question }] }, completion: response }),
}

/** The world of a prompt style: 'toy' for the bundled model, 'paper' (App. C chat prompts) for chat models. */
export function arithWorldFor(style: 'toy' | 'paper'): JzeroWorld {
  return style === 'paper' ? arithJzeroChatWorld : arithJzeroWorld
}
