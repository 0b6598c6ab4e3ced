// What TTRL, the selectors and the offline extensions need of a task world (UID §3–4): a prompt
// for a question, an answer extractor for voting, and a verifier used only for evaluation and
// diagnostics (never for rewards). The arithmetic world provides its toy format (the bundled
// model) and its paper-style chat format (chat models).
import type { Prompt } from '../../engine/model.js'
import { evalSet, extractAnswer, generateQuestions, isEvalQuestion, answerOf, parseSolution, parseSteps, roleChat, solverPrompt } from '../../worlds/arith/index.js'

export type PromptFormat = 'toy' | 'chat'

/** A question with its reference answer (the answer is read only by evaluation). */
export interface Item {
  id: string
  question: string
  answer: string
}

export interface SolveWorld {
  name: string
  format: PromptFormat
  prompt(question: string): Prompt
  /** The normalized final answer of an output (UID A.1: extracted, then normalized), null when none. */
  answer(output: string): string | null
  /** Is the output's answer the question's reference answer? Evaluation and diagnostics only. */
  verify(item: Item, output: string): boolean
  /**
   * A verifiable trace-quality proxy for diagnostics (the toy world's analogue of UID §3.3's
   * validity rubric): every written step is arithmetically right. Null when no step can be read.
   */
  traceValid?(output: string): boolean | null
}

export function arithSolveWorld(format: PromptFormat = 'toy'): SolveWorld {
  return {
    name: 'arith',
    format,
    prompt: (q): Prompt => (format === 'toy' ? solverPrompt(q) : { messages: roleChat({ role: 'solver', question: q }, { style: 'paper' }).map((m) => ({ role: m.role, content: m.content })) }),
    answer: (output) => {
      const a = extractAnswer(output)
      return a === null ? null : a.toString()
    },
    verify: (item, output) => {
      const a = extractAnswer(output)
      return a !== null && a.toString() === item.answer
    },
    traceValid: (output) => {
      const r = parseSolution(output, { mode: 'lenient' })
      const steps = r.ok ? parseSteps(r.value.think ?? '') : []
      return steps.length ? steps.every((s) => s.right) : null
    },
  }
}

/** A slice of a level's held-out stream: items [offset, offset + size) of evalSet(level). */
export interface SliceSpec {
  level: number
  offset: number
  size: number
}

/** The held-out items of a slice (the reserved evaluation stream, so never in any training corpus). */
export function heldOutSlice(s: SliceSpec): Item[] {
  return evalSet(s.level, s.offset + s.size)
    .slice(s.offset)
    .map((e) => ({ id: e.id, question: e.question, answer: e.answer }))
}

/**
 * Fresh distinct questions of a level from a named seed stream, disjoint from every held-out set
 * (exact duplicates of the stream are dropped, UID C.1 "exact deduplication of prompts").
 */
export function trainingQuestions(seed: string, level: number, count: number): Item[] {
  const seen = new Set<string>()
  const out: Item[] = []
  for (const q of generateQuestions(seed, level, count, { exclude: isEvalQuestion })) {
    if (seen.has(q)) continue
    seen.add(q)
    out.push({ id: `${seed}-L${level}-${out.length}`, question: q, answer: String(answerOf(q)) })
  }
  return out
}
