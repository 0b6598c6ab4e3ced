// The `math` world, as the papers run it: the role prompts of their appendices (prompts.ts) as chat
// messages under the model's own chat template, answers read from the last `\boxed{}` after any
// `</think>` (COSE's `<answer>` block as a fallback) and compared with src/tasks' symbolic /
// numeric equivalence, problems from JSONL files (jsonl.ts), and a bundled generated problem set
// (data/, generate.ts) so that it runs offline.
//
// `chatWorld` builds such a world from problems in memory: a user world (examples/) changes its
// data, its answer rules or its verifier and keeps the papers' prompts.
import { existsSync } from 'node:fs'
import { basename, extname, join } from 'node:path'
import type { Prompt, ScorePair } from '../../engine/model.js'
import type { ChatTemplateOptions } from '../../engine/tokenizer.js'
import { packageRoot } from '../../native.js'
import { afterThinking, extractBoxed, extractQuestion, extractScore, extractTag, matchBrace } from '../../tasks/extract.js'
import { answersEquivalent, normalizeAnswer } from '../../tasks/math.js'
import { Rng } from '../../util/prng.js'
import { DataError } from '../errors.js'
import { readProblems } from '../jsonl.js'
import type { AnswerRules, Benchmark, HeldOutPreference, LabeledProblem, PosedTask, Problem, TaskWorld, WrittenAnswer } from '../types.js'
import {
  chatPrompt,
  COSE_JUDGE,
  COSE_PROPOSER,
  COSE_SCORE_RANGE,
  COSE_SOLVER,
  COSE_VALIDATOR,
  JZERO_CHALLENGER,
  JZERO_COMPOSE_SYSTEM,
  JZERO_DECOMPOSE_SYSTEM,
  JZERO_SUBTASK_SYSTEM,
  jzeroComposeUser,
  jzeroDecomposeUser,
  jzeroSubtaskUser,
  RZERO_CHALLENGER_SYSTEM,
  RZERO_CHALLENGER_USER,
  SOLVER_SYSTEM,
  uidPoolUser,
  uidRolloutUser,
} from './prompts.js'

/** The bundled problem set (src/worlds/math/data, written by generate.ts): training problems and three benchmarks in three formats. */
export const BUNDLED_MATH_DIR = join(packageRoot, 'src', 'worlds', 'math', 'data')
export const BUNDLED_MATH_TRAIN = join(BUNDLED_MATH_DIR, 'train.jsonl')
export const BUNDLED_MATH_BENCHMARKS: readonly string[] = ['gsm8k-style.jsonl', 'math-style.jsonl', 'aime-style.jsonl'].map((f) => join(BUNDLED_MATH_DIR, f))

/** The normalized text that identifies a posed task (duplicates differ in spacing or case only). */
export function taskKey(question: string): string {
  return question.replace(/\s+/g, ' ').trim().toLowerCase()
}

/** The last `\boxed{}` after any `</think>`, else the last `<answer>` block there (COSE G.3's format); null when neither. */
export function readBoxedAnswer(output: string): WrittenAnswer | null {
  if (typeof output !== 'string') return null
  const after = afterThinking(output)
  const answer = extractBoxed(after, { afterThink: false }) ?? extractTag(after, 'answer', { afterThink: false })
  if (answer === null) return null
  return { think: thinkingOf(output), answer }
}

/** The text of the thinking block (before the last `</think>`), or null when there is none. */
function thinkingOf(output: string): string | null {
  const after = afterThinking(output)
  if (after.length === output.length) return null
  return output.slice(0, output.length - after.length).replace(/<\/think(?:ing)?>$/, '').replace(/^\s*<think(?:ing)?>/, '').trim()
}

/** The math answer rules: `\boxed{}` answers, src/tasks normalization and equivalence. */
export const MATH_ANSWERS: AnswerRules = {
  parse: readBoxedAnswer,
  answer: (output) => normalizeAnswer(readBoxedAnswer(output)?.answer),
  equivalent: (a, b) => answersEquivalent(a, b),
  // natural-language tasks: BLEU's whitespace tokens are their words (as NLTK's sentence_bleu is used)
  repetitionText: (q) => q.replace(/\s+/g, ' ').trim(),
}

/** A posed task in `<question>` tags (after any thinking); `requireBoxed`: R-Zero's questioner also writes `\boxed{answer}` after it. */
function posedTask(output: string, requireBoxed: boolean): PosedTask | null {
  if (typeof output !== 'string') return null
  const after = afterThinking(output)
  const question = extractQuestion(after, { afterThink: false })
  if (question === null) return null
  if (requireBoxed && extractBoxed(after.slice(after.lastIndexOf('</question>')), { afterThink: false }) === null) return null
  return { question, key: taskKey(question) }
}

/** A numbered list `1. …` (after any thinking), numbered 1..n consecutively with min ≤ n ≤ max; other lines are skipped. */
export function numberedList(output: string, min: number, max: number): string[] | null {
  if (typeof output !== 'string') return null
  const items: string[] = []
  for (const raw of afterThinking(output).split('\n')) {
    const m = /^\s*(?:\*\*)?(\d{1,2})[.)](?:\*\*)?\s+(.*\S)\s*$/.exec(raw)
    if (!m) continue
    if (Number(m[1]) !== items.length + 1) return null
    items.push(m[2])
    if (items.length > max) return null
  }
  return items.length >= min ? items : null
}

/** A wrong answer to stand beside `answer` in a held-out preference pair. */
function wrongAnswer(answer: string): string {
  return /^-?\d+$/.test(answer.trim()) ? String(BigInt(answer.trim()) + 1n) : `${answer}+1`
}

/** A response stating `answer` after `solution`: its last balanced `\boxed{}` replaced, or the answer appended in one. */
function responseWith(solution: string | undefined, answer: string): string {
  const s = (solution ?? '').trim()
  const at = s.lastIndexOf('\\boxed{')
  const end = at >= 0 ? matchBrace(s, at + '\\boxed'.length) : -1
  if (end >= 0) return `${s.slice(0, at)}\\boxed{${answer}}${s.slice(end)}`
  return `${s}${s ? '\n\n' : ''}The final answer is \\boxed{${answer}}.`
}

export interface ChatWorldSpec {
  name: string
  /** The problems of `--data`: TTRL's unlabeled prompts, and (those with answers) the training problems. */
  problems: readonly Problem[]
  /** Named held-out sets (every problem with a reference answer). */
  benchmarks: readonly Benchmark[]
  /** Qwen3's enable_thinking for every prompt (undefined: the template's default). */
  thinking?: boolean
  /** Answer rules (default MATH_ANSWERS). */
  answers?: AnswerRules
  /** The verifier (default: the stated answer equivalent to the reference, by the answer rules). */
  verify?: (problem: LabeledProblem, output: string) => boolean
  /** Names the data in errors (e.g. the --data file). */
  dataSource?: string
}

/**
 * A chat world: the papers' prompts, the given answer rules and verifier, the given problems. The
 * math world is one (MATH_ANSWERS, JSONL data); a user world may be another.
 */
export function chatWorld(spec: ChatWorldSpec): TaskWorld {
  const template: ChatTemplateOptions | undefined = spec.thinking === undefined ? undefined : { enableThinking: spec.thinking }
  const chat = (system: string | null, user: string): Prompt => chatPrompt(system, user, template)
  const answers = spec.answers ?? MATH_ANSWERS
  const verify = spec.verify ?? ((p: LabeledProblem, output: string) => answers.equivalent(answers.parse(output)?.answer ?? '', p.answer))
  const heldOut = new Set(spec.benchmarks.flatMap((b) => b.problems.map((p) => taskKey(p.question))))
  const labeled = spec.problems.filter((p): p is LabeledProblem => p.answer !== null && !heldOut.has(taskKey(p.question)))
  const judgeInput = (question: string, response: string): ScorePair => ({ prompt: chat(null, question), completion: response })
  const coseJudgePrompt = (q: string, response: string): Prompt => chat(COSE_JUDGE, `Question:\n${q}\n\nSolver response:\n${response}`)
  return {
    name: spec.name,
    cose: {
      proposerPrompt: () => chat(null, COSE_PROPOSER),
      parseProposal: (output) => posedTask(output, false),
      validatorPrompt: (q) => chat(COSE_VALIDATOR, `Question:\n${q}`),
      parseScore: (output) => (typeof output === 'string' ? extractScore(output, COSE_SCORE_RANGE)?.normalized ?? null : null),
      solverPrompt: (q) => chat(COSE_SOLVER, q),
      solverFormat: (output) => answers.parse(output) !== null,
      judgePrompt: coseJudgePrompt,
    },
    rzero: {
      challengerPrompt: () => chat(RZERO_CHALLENGER_SYSTEM, RZERO_CHALLENGER_USER),
      parseQuestion: (output) => posedTask(output, true),
      solverPrompt: (q) => chat(SOLVER_SYSTEM, q),
    },
    jzero: {
      challengerPrompt: () => chat(null, JZERO_CHALLENGER),
      parseTask: (output) => posedTask(output, false),
      solverPrompt: (q) => chat(SOLVER_SYSTEM, q),
      decomposePrompt: (q) => chat(JZERO_DECOMPOSE_SYSTEM, jzeroDecomposeUser(q)),
      parseDecomposition: numberedList,
      subtaskPrompt: (q, _index, subtask) => chat(JZERO_SUBTASK_SYSTEM, jzeroSubtaskUser(q, subtask)),
      parseSubtaskAnswer(output) {
        if (typeof output !== 'string') return null
        const answer = afterThinking(output).trim()
        return answer ? { think: thinkingOf(output), answer } : null
      },
      composePrompt: (q, solved) => chat(JZERO_COMPOSE_SYSTEM, jzeroComposeUser(q, solved)),
      amplifiedResponse(work, answer) {
        const steps = work.filter((w): w is string => w !== null && w.trim().length > 0).map((w) => w.trim())
        return `${steps.length ? `${steps.join('\n\n')}\n\n` : ''}The final answer is \\boxed{${answer}}.`
      },
      judgeInput,
      // the critique is the model's own review in COSE's Judge prompt, after the response
      critique: { prompt: coseJudgePrompt, input: (question, response, critique) => ({ prompt: chat(null, question), completion: `${response}\n\nReview:\n${critique}` }) },
    },
    solve: {
      solverPrompt: (q) => chat(null, uidRolloutUser(q)),
      poolPrompt: (q) => chat(null, uidPoolUser(q)),
    },
    answers,
    verifier: {
      verify,
      // a task a model posed has no reference answer here
      referenceAnswer: () => null,
    },
    data: {
      levels: [],
      unlabeledPrompts: () => spec.problems,
      trainingProblems({ seed, count }) {
        if (!labeled.length)
          throw new DataError(spec.dataSource ?? spec.name, null, 'answer', `${spec.dataSource ?? spec.name}: no training problems with a reference answer (outside the benchmarks); this method needs labeled --data`)
        return new Rng(`training-${seed}`).shuffle([...labeled]).slice(0, count)
      },
      benchmarks: spec.benchmarks,
      heldOutPreferences(perGroup) {
        const out: HeldOutPreference[] = []
        for (const b of spec.benchmarks) {
          for (const p of b.problems.slice(0, perGroup)) {
            const chosen = responseWith(p.solution, p.answer)
            const rejected = responseWith(p.solution, wrongAnswer(p.answer))
            if (verify(p, chosen) && !verify(p, rejected)) out.push({ question: p.question, chosen, rejected, group: b.name, plain: true })
          }
        }
        return out
      },
    },
  }
}

/** A benchmark file: every record must carry a reference answer; named after the file (`math500.jsonl` → math500). */
export async function readBenchmark(file: string): Promise<Benchmark> {
  return { name: basename(file, extname(file)), problems: await readProblems(file, { requireAnswers: true }) }
}

export interface MathWorldOptions {
  /** Training / unlabeled problems (JSONL; default: the bundled train.jsonl). */
  data?: string
  /** Benchmark files (JSONL, answers required; default: the bundled three). */
  benchmarks?: readonly string[]
  thinking?: boolean
}

/** `--world math [--data FILE] [--benchmarks A.jsonl,B.jsonl] [--thinking|--no-thinking]`. */
export async function loadMathWorld(o: MathWorldOptions = {}): Promise<TaskWorld> {
  const data = o.data ?? BUNDLED_MATH_TRAIN
  const files = o.benchmarks?.length ? o.benchmarks : BUNDLED_MATH_BENCHMARKS
  for (const f of [data, ...files]) if (!existsSync(f)) throw new DataError(f, null, null, `${f}: no such file`)
  const benchmarks = await Promise.all(files.map(readBenchmark))
  const names = benchmarks.map((b) => b.name)
  const dup = names.find((n, i) => names.indexOf(n) !== i)
  if (dup !== undefined) throw new DataError(files[names.lastIndexOf(dup)], null, null, `two benchmark files are named '${dup}': rename one`)
  return chatWorld({ name: 'math', problems: await readProblems(data), benchmarks, thinking: o.thinking, dataSource: data })
}
