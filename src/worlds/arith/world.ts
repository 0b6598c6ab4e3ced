// The arithmetic toy world as a TaskWorld (src/worlds/types.ts): the bundled model's toy prompts
// and strict parsers ('toy', `--world arith`), or the papers' role prompts specialised to
// arithmetic as chat messages with lenient parsers for chat models ('chat', `--world arith-chat`).
// Benchmarks are the reserved held-out streams of the difficulty levels (L1..L5); TTRL's unlabeled
// prompts are the tail of level 3's stream; training problems are fresh questions outside every
// reserve; the verifier evaluates the expression exactly.
import type { Prompt } from '../../engine/model.js'
import { answersEquivalent } from '../../tasks/index.js'
import type { Benchmark, HeldOutPreference, LabeledProblem, PosedTask, TaskWorld } from '../types.js'
import { EVAL_CAPACITY, evalSet, isEvalQuestion } from './evalset.js'
import { evaluate, parseExpr, printExpr } from './expr.js'
import {
  composePrompt,
  decomposePrompt,
  judgePrompt,
  parseDecomposition,
  parseQuestion,
  parseScore,
  parseSolution,
  parseSteps,
  proposerPrompt,
  roleChat,
  solverPrompt,
  subtaskPrompt,
  validatorPrompt,
  type ParseOptions,
  type RoleInput,
} from './formats.js'
import { DEFAULT_LEVEL, difficultyOf, generateExpr, generateQuestions, LEVELS } from './levels.js'
import { deriveSeed, Rng } from './prng.js'
import { isHedged, scriptedSolve } from './teachers.js'
import { answerOf, classifyQuestion, extractAnswer } from './verify.js'

export type ArithStyle = 'toy' | 'chat'

export interface ArithWorldOptions {
  /** 'toy' (default): the toy prompts the bundled model was trained on; 'chat': paper-style chat prompts. */
  style?: ArithStyle
  /** Benchmarks by name, L1..L5 (default ['L3'], the default difficulty). */
  benchmarks?: readonly string[]
  /** The level whose reserved stream's tail (items 900 on) holds TTRL's unlabeled prompts (default 3; level 1's reserve is too short). */
  unlabeledLevel?: number
}

/** TTRL's unlabeled test-time prompts: by default level 3's reserved stream from here on (UID adapts on a test set). */
export const UNLABELED_LEVEL = DEFAULT_LEVEL
export const UNLABELED_OFFSET = 900
/** The levels whose held-out preference pairs measure a Judge (JZ App. B counterpart). */
export const JUDGE_HELD_OUT_LEVELS: readonly number[] = [2, 3, 4]

/** One line, single spaces (as the toy prompts print model text). */
function oneLine(s: string): string {
  return s.replace(/\s+/g, ' ').trim()
}

/** A level's reserved held-out stream as a benchmark `L<level>`. */
export function levelBenchmark(level: number): Benchmark {
  return { name: `L${level}`, problems: evalSet(level, EVAL_CAPACITY[level]).map((e) => ({ id: e.id, question: e.question, answer: e.answer })) }
}

/** The benchmark names the world knows. */
export const ARITH_BENCHMARKS: readonly string[] = LEVELS.map((l) => `L${l.level}`)

function levelOfBenchmark(name: string): number {
  const i = ARITH_BENCHMARKS.indexOf(name)
  if (i < 0) throw new RangeError(`unknown arith benchmark '${name}' (${ARITH_BENCHMARKS.join(', ')})`)
  return i + 1
}

/**
 * Fresh distinct questions of a level from a named seed stream, disjoint from every held-out set
 * (exact duplicates of the stream are dropped, UID C.1 "exact deduplication of prompts").
 */
export function trainingQuestions(seed: string, level: number, count: number): LabeledProblem[] {
  const seen = new Set<string>()
  const out: LabeledProblem[] = []
  for (const q of generateQuestions(seed, level, count, { exclude: isEvalQuestion })) {
    if (seen.has(q)) continue
    seen.add(q)
    out.push({ id: `${seed}-L${level}-${out.length}`, question: q, answer: String(answerOf(q)) })
  }
  return out
}

/** Questions of a level that are never in the held-out sets (for the toy Judge's training data). */
export function arithTrainingQuestions(seed: string, level: number, count: number): string[] {
  const rng = new Rng(deriveSeed(seed, level))
  return Array.from({ length: count }, () => printExpr(generateExpr(rng, level, { exclude: isEvalQuestion })))
}

/**
 * Scripted responses to a well-formed question, from the world's imperfect teachers: a right one
 * (no slip) and a wrong one (one slipped step), both well formed; their wording hedges at the
 * teachers' natural rates. Deterministic in `rng`.
 */
export function scriptedRightWrong(rng: Rng, question: string): { right: string; wrong: string } | null {
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

/** A held-out preference set ordered by the verifier: per level, scripted right-over-wrong responses to held-out questions. */
export function arithHeldOutPreferences(levels: readonly number[], perLevel: number): HeldOutPreference[] {
  const out: HeldOutPreference[] = []
  for (const level of levels) {
    const rng = new Rng(deriveSeed('jzero-judge-heldout-v1', level))
    for (const item of evalSet(level, perLevel)) {
      const p = scriptedRightWrong(rng, item.question)
      if (p) out.push({ question: item.question, chosen: p.right, rejected: p.wrong, group: `L${level}`, plain: !isHedged(p.right) && !isHedged(p.wrong) })
    }
  }
  return out
}

/** A posed question keyed by its canonical printing (when it is an expression). */
function posed(r: ReturnType<typeof parseQuestion>, text: 'canonical' | 'as-written'): PosedTask | null {
  if (!r.ok) return null
  const key = r.value.canonical ?? r.value.text
  return { question: text === 'canonical' ? key : r.value.text, key }
}

/** The arithmetic world in one style (see ArithWorldOptions). */
export function arithWorld(o: ArithWorldOptions = {}): TaskWorld {
  const style = o.style ?? 'toy'
  const names = o.benchmarks?.length ? [...o.benchmarks] : [`L${DEFAULT_LEVEL}`]
  const levels = names.map(levelOfBenchmark)
  const unlabeledLevel = o.unlabeledLevel ?? UNLABELED_LEVEL
  if (!((EVAL_CAPACITY[unlabeledLevel] ?? 0) > UNLABELED_OFFSET)) throw new RangeError(`unlabeledLevel ${unlabeledLevel}: that level's reserved stream does not reach item ${UNLABELED_OFFSET}, where the unlabeled prompts start (levels 2-5 do)`)
  const mode: ParseOptions['mode'] = style === 'toy' ? 'strict' : 'lenient'
  const chat = (input: RoleInput): Prompt => ({ messages: roleChat(input, { style: 'paper' }).map((m) => ({ role: m.role, content: m.content })) })
  const prompt = (toy: () => string, input: RoleInput): Prompt => (style === 'toy' ? toy() : chat(input))
  const coseJudgePrompt = (q: string, response: string): Prompt => prompt(() => judgePrompt(q, response), { role: 'judge', question: q, response })
  let benchmarks: Benchmark[] | null = null
  return {
    name: style === 'toy' ? 'arith' : 'arith-chat',
    cose: {
      proposerPrompt: (level) => prompt(() => proposerPrompt(level), { role: 'proposer', level }),
      // COSE f_P: the tags decide; whether the text is a good question is the Validator's job
      parseProposal: (output) => posed(parseQuestion(output, { mode }), 'as-written'),
      validatorPrompt: (q) => prompt(() => validatorPrompt(q), { role: 'validator', question: q }),
      parseScore(output) {
        const r = parseScore(output, { mode })
        return r.ok ? r.value.normalized : null
      },
      solverPrompt: (q) => prompt(() => solverPrompt(q), { role: 'solver', question: q }),
      solverFormat: (output) => parseSolution(output, { mode }).ok,
      judgePrompt: coseJudgePrompt,
    },
    rzero: {
      challengerPrompt: (level) => prompt(() => proposerPrompt(level), { role: 'proposer', level }),
      // No Validator in R-Zero: a question that is not an expression is a parse failure.
      parseQuestion: (output) => posed(parseQuestion(output, { requireExpr: true, mode }), 'canonical'),
      solverPrompt: (q) => prompt(() => solverPrompt(q), { role: 'solver', question: q }),
    },
    jzero: {
      challengerPrompt: (level) => prompt(() => proposerPrompt(level), { role: 'proposer', level }),
      // J-Zero has no Validator: a task that is not an expression fails the format check (Eq. 6).
      parseTask: (output) => posed(parseQuestion(output, { requireExpr: true, mode }), 'canonical'),
      solverPrompt: (q) => prompt(() => solverPrompt(q), { role: 'solver', question: q }),
      decomposePrompt: (q) => prompt(() => decomposePrompt(q), { role: 'decompose', question: q }),
      parseDecomposition(output, min, max) {
        const r = parseDecomposition(output, { minSubtasks: min, maxSubtasks: max, mode })
        return r.ok ? r.value.subtasks.map((s) => s.text) : null
      },
      subtaskPrompt: (q, index, subtask, known) => prompt(() => subtaskPrompt(q, index, subtask, known), { role: 'subtask', question: q, index, subtask, known }),
      parseSubtaskAnswer(output) {
        const r = parseSolution(output, { mode })
        return r.ok ? { think: r.value.think, answer: r.value.answerText } : null
      },
      composePrompt: (q, solved) => {
        const answers = solved.map((s) => s.answer)
        return prompt(() => composePrompt(q, answers), { role: 'compose', question: q, answers, subtasks: solved.map((s) => s.subtask) })
      },
      amplifiedResponse(work, answer) {
        const steps = work.filter((w): w is string => w !== null && w.trim().length > 0).map(oneLine)
        return steps.length ? `<think>${steps.join('; ')}</think><answer>${answer}</answer>` : `<answer>${answer}</answer>`
      },
      judgeInput: (question, response) =>
        style === 'toy' ? { prompt: `Judge: ${oneLine(question)}\nResponse: `, completion: `${oneLine(response)}\n` } : { prompt: { messages: [{ role: 'user', content: question }] }, completion: response },
      // the critique is the model's own Judge-role check (COSE's Judge prompt), on the line after the response
      critique: {
        prompt: coseJudgePrompt,
        input: (question, response, critique) =>
          style === 'toy'
            ? { prompt: `Judge: ${oneLine(question)}\nResponse: `, completion: `${oneLine(response)}\n${oneLine(critique)}\n` }
            : { prompt: { messages: [{ role: 'user', content: question }] }, completion: `${response}\n\nReview:\n${critique}` },
      },
    },
    solve: {
      solverPrompt: (q) => prompt(() => solverPrompt(q), { role: 'solver', question: q }),
      poolPrompt: (q) => prompt(() => solverPrompt(q), { role: 'solver', question: q }),
    },
    answers: {
      parse(output) {
        const r = parseSolution(output, { mode })
        return r.ok ? { think: r.value.think, answer: r.value.answerText } : null
      },
      answer(output) {
        const a = extractAnswer(output)
        return a === null ? null : a.toString()
      },
      equivalent: (a, b) => answersEquivalent(a, b),
      // Toy questions hold no spaces ("(12+7)*3-4"): one whitespace token each, so BLEU of any two would
      // be 0 or ~0.18 (method1 on empty 2–4-gram counts) and nothing would ever cluster. Spacing the
      // numbers, operators and parentheses makes BLEU compare their structure.
      repetitionText: (q) => q.replace(/\s+/g, '').replace(/(\d+|[^\d])/g, ' $1').trim(),
    },
    verifier: {
      verify(problem, output) {
        const a = extractAnswer(output)
        return a !== null && a.toString() === problem.answer
      },
      referenceAnswer(question) {
        const a = answerOf(question)
        return a === null ? null : a.toString()
      },
      questionInfo(q) {
        const e = parseExpr(q)
        return { wellPosed: classifyQuestion(q) === 'good', level: e === null ? null : difficultyOf(e) }
      },
      traceValid(output) {
        const r = parseSolution(output, { mode: 'lenient' })
        const steps = r.ok ? parseSteps(r.value.think ?? '') : []
        return steps.length ? steps.every((s) => s.right) : null
      },
    },
    data: {
      levels: LEVELS.map((l) => l.level),
      unlabeledPrompts: () =>
        evalSet(unlabeledLevel, EVAL_CAPACITY[unlabeledLevel])
          .slice(UNLABELED_OFFSET)
          .map((e) => ({ id: e.id, question: e.question, answer: e.answer })),
      trainingProblems: ({ seed, count, level }) => trainingQuestions(seed, level ?? DEFAULT_LEVEL, count),
      get benchmarks() {
        benchmarks ??= levels.map(levelBenchmark)
        return benchmarks
      },
      heldOutPreferences: (perGroup) => arithHeldOutPreferences(JUDGE_HELD_OUT_LEVELS, perGroup),
    },
  }
}
