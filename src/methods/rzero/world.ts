// What R-Zero needs of a task world: the Challenger's prompt and parser, the Solver's prompt and
// answer extraction with an equivalence, the text the BLEU repetition penalty compares, and a
// verifier for held-out evaluation and diagnostics only (the loop itself never sees ground truth).
import { answersEquivalent, type Answer, type Equivalence } from '../../tasks/index.js'
import { classifyQuestion, difficultyOf, evalSet, parseExpr, parseSolution, proposerPrompt, solverPrompt, verifyAnswer } from '../../worlds/arith/index.js'
import { parseQuestion } from '../../worlds/arith/index.js'

export interface RzeroWorld {
  name: string
  challengerPrompt(level: number): string
  /** The question of a Challenger output, or null on a parse failure (DIS §4.3). `key` identifies duplicates. */
  parseQuestion(output: string): { question: string; key: string } | null
  solverPrompt(question: string): string
  /** The answer a Solver output states, or null (malformed output: no answer, never a throw). */
  extractAnswer(output: string): Answer
  equivalent: Equivalence
  /** The text BLEU compares for r_rep (whitespace-tokenized, as NLTK's sentence_bleu is used). */
  bleuText(question: string): string
  evalSet(level: number, size: number): { id: string; question: string }[]
  /** Ground truth: is `output` a right answer to `question`? */
  verify(question: string, output: string): boolean
  /** Ground truth of an extracted answer (diagnostics: pseudo-label accuracy). */
  isRightAnswer(question: string, answer: string): boolean
  /** Diagnostics: is the question well posed, and its difficulty level. */
  questionInfo(question: string): { good: boolean; level: number | null }
}

export const arithRzeroWorld: RzeroWorld = {
  name: 'arith',
  challengerPrompt: (level) => proposerPrompt(level),
  parseQuestion(output) {
    // No Validator in R-Zero: a question that is not an expression is a parse failure.
    const r = parseQuestion(output, { requireExpr: true })
    return r.ok ? { question: r.value.canonical ?? r.value.text, key: r.value.canonical ?? r.value.text } : null
  },
  solverPrompt: (q) => solverPrompt(q),
  extractAnswer(output) {
    const r = parseSolution(output)
    return r.ok ? r.value.answerText : null
  },
  equivalent: (a, b) => answersEquivalent(a, b),
  // Toy questions hold no spaces ("(12+7)*3-4"): one whitespace token each, so BLEU of any two would
  // be 0 or ~0.18 (method1 on empty 2–4-gram counts) and nothing would ever cluster. Spacing the
  // numbers, operators and parentheses makes BLEU compare their structure.
  bleuText: (q) => q.replace(/\s+/g, '').replace(/(\d+|[^\d])/g, ' $1').trim(),
  evalSet: (level, size) => evalSet(level, size).map((e) => ({ id: e.id, question: e.question })),
  verify: (q, output) => verifyAnswer(q, output) === true,
  isRightAnswer: (q, answer) => verifyAnswer(q, answer) === true,
  questionInfo(q) {
    const e = parseExpr(q)
    return { good: classifyQuestion(q) === 'good', level: e === null ? null : difficultyOf(e) }
  },
}
