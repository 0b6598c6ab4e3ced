// The chat half of the toy model's corpus (issue 17 "chat everywhere"): beside the toy-format role
// transcripts, the same transcripts as ChatML conversations, and math-style Solver conversations —
// the papers' Solver prompts (prompts.ts of the math world: UID's rollout and pool prompts, the
// R-Zero / J-Zero system prompt, COSE G.3) around arithmetic questions and generated word
// problems, answered with the toy's working and a `\boxed{}` answer (`<answer>` for COSE G.3).
// So the bundled model answers chat requests (the README's examples, `autodidact serve`) and the
// math world's Solver prompts, not only its toy strings.
//
// Word problems come from the math world's generator under seeds of their own, and never one of
// the bundled problem set's texts (bundledMathQuestions), so `eval --world math` measures held-out
// problems. Arithmetic questions avoid the reserved evaluation questions (isEvalQuestion).
import type { ChatMessage } from '../engine/tokenizer.js'
import { bundledMathQuestions, generateProblems, traceOf } from '../worlds/math/generate.js'
import { COSE_SOLVER, SOLVER_SYSTEM, uidPoolUser, uidRolloutUser } from '../worlds/math/prompts.js'
import { deriveSeed, generateExpr, isEvalQuestion, parseSolution, printExpr, Rng, scriptedSolve, type CorpusItem } from '../worlds/arith/index.js'

/** A chat training item: the conversation up to the assistant's turn, and what the assistant says. */
export interface ChatItem {
  kind: 'toy-chatml' | 'math-expression' | 'math-word'
  messages: ChatMessage[]
  completion: string
  /** The question's true answer (the completion may hold a teacher's slip). */
  truth: string
}

/** The Solver prompt styles of the math world a question is wrapped in. */
type SolverStyle = 'uid-rollout' | 'uid-pool' | 'solver-system' | 'cose' | 'plain'
const STYLES: readonly SolverStyle[] = ['uid-rollout', 'uid-pool', 'solver-system', 'cose', 'plain']

function wrap(style: SolverStyle, question: string): ChatMessage[] {
  switch (style) {
    case 'uid-rollout':
      return [{ role: 'user', content: uidRolloutUser(question) }]
    case 'uid-pool':
      return [{ role: 'user', content: uidPoolUser(question) }]
    case 'solver-system':
      return [{ role: 'system', content: SOLVER_SYSTEM }, { role: 'user', content: question }]
    case 'cose':
      return [{ role: 'system', content: COSE_SOLVER }, { role: 'user', content: question }]
    case 'plain':
      return [{ role: 'user', content: question }]
  }
}

/** The toy's working and answer in the style's answer format: `\boxed{}`, or COSE G.3's `<answer>`. */
function answerIn(style: SolverStyle, think: string, answer: string): string {
  return style === 'cose' ? `<think>${think}</think><answer>${answer}</answer>` : `<think>${think}</think>\\boxed{${answer}}`
}

const PHRASINGS: readonly ((e: string) => string)[] = [(e) => `What is ${e}?`, (e) => `Compute ${e}.`, (e) => e, (e) => `Calculate ${e}`]

let excluded: Set<string> | null = null

/** The math-style Solver item of stream `seed` at index `i` (a pure function of both). */
export function mathChatItem(seed: number | string, i: number, o: { levelWeights: readonly number[]; wordShare: number }): ChatItem {
  const rng = new Rng(deriveSeed(seed, 'toy-chat-math-v1', i))
  const style = STYLES[rng.int(0, STYLES.length - 1)]
  if (rng.chance(o.wordShare)) {
    excluded ??= bundledMathQuestions()
    const [p] = generateProblems(`toy-chat-${String(seed)}-${i}`, 1, { kinds: 'any', exclude: excluded })
    return { kind: 'math-word', messages: wrap(style, p.question), completion: answerIn(style, traceOf(p), p.answer), truth: p.answer }
  }
  const level = 1 + rng.weighted([...o.levelWeights])
  const e = generateExpr(rng, level, { exclude: isEvalQuestion })
  const spaced = rng.chance(0.5) ? printExpr(e).replace(/([+\-*])/g, ' $1 ') : printExpr(e)
  const solved = scriptedSolve(rng, e, { formatErrorRate: 0 })!
  const r = parseSolution(solved.completion)
  const think = r.ok ? (r.value.think ?? '') : ''
  const answer = r.ok ? r.value.answerText : solved.truth.toString()
  return { kind: 'math-expression', messages: wrap(style, PHRASINGS[rng.int(0, PHRASINGS.length - 1)](spaced)), completion: answerIn(style, think, answer), truth: solved.truth.toString() }
}

/** A toy corpus item as a ChatML conversation: its toy prompt as the user's message (buildCorpus `chat: true`). */
export function toyChatItem(it: CorpusItem): ChatItem {
  if (!it.messages) throw new RangeError('toyChatItem needs a corpus built with chat: true')
  return { kind: 'toy-chatml', messages: it.messages.filter((m) => m.role !== 'assistant').map((m) => ({ role: m.role, content: m.content })), completion: it.completion, truth: it.meta.truth ?? '' }
}

/** Where item `i` of the recipe's corpus is a chat item, and which: a pure function of (seed, i). */
export function chatSlot(seed: number, i: number, share: { chatml: number; math: number }): 'toy' | 'chatml' | 'math' {
  const u = new Rng(deriveSeed(seed, 'toy-chat-slot-v1', i)).next()
  return u < share.chatml ? 'chatml' : u < share.chatml + share.math ? 'math' : 'toy'
}
