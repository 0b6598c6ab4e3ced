// The one task interface (issue 17): everything a method knows about the task it runs on. A world
// gives each paper's role prompts and their parsers, the answer rules (extraction, normalization,
// equivalence), a verifier for evaluation and diagnostics only, and its data — the unlabeled
// prompt stream TTRL adapts on, labeled training problems, and named held-out benchmarks.
//
// The methods in src/methods read a world only through this interface, so they run unchanged on
// the bundled arithmetic toy world (src/worlds/arith), on the `math` world (chat templates,
// `\boxed{}` answers, JSONL data sets; src/worlds/math) or on a user's module (`--world
// ./my-world.js`, loaded by src/worlds/load.ts). A user world type-checks against `TaskWorld`,
// exported from the package like TRL's user reward functions.
//
// Parsers never throw: a malformed model output is null (a format failure, f = 0), whatever it holds.
import type { Prompt, ScorePair } from '../engine/model.js'

/** A problem: its question and, when known, its reference answer (read by the verifier only, never by a reward). */
export interface Problem {
  id: string
  question: string
  /** The reference answer; null for an unlabeled prompt (e.g. TTRL's test-time prompts). */
  answer: string | null
  /** A reference solution, when the data set has one (MATH `solution`, GSM8K `answer` text). */
  solution?: string
}

/** A problem with a reference answer. */
export interface LabeledProblem extends Problem {
  answer: string
}

/** A named held-out set: every problem has a reference answer. */
export interface Benchmark {
  name: string
  problems: readonly LabeledProblem[]
}

/** A task a Proposer or Challenger posed: its text, and the key that identifies duplicates. */
export interface PosedTask {
  question: string
  key: string
}

/** A Solver-format output read: its working (null when none) and its final answer as written. */
export interface WrittenAnswer {
  think: string | null
  answer: string
}

/** Two responses to one task, the preferred one first. */
export interface PreferencePair {
  question: string
  chosen: string
  rejected: string
}

/** A held-out preference pair whose order the verifier fixed (chosen right, rejected wrong). */
export interface HeldOutPreference extends PreferencePair {
  /** The group the pair is reported under (e.g. a difficulty level or a benchmark). */
  group: string
  /** Neither response hedges: wording cannot decide the pair (RM-Bench's hard split, JZ App. B). */
  plain: boolean
}

/** COSE's four roles of one backbone (COSE §3, App. G). */
export interface CoseRoles {
  /** App. G.1. `level` is a difficulty the world understands (see WorldData.levels). */
  proposerPrompt(level: number): Prompt
  /** f_P and the question, or null when the output lacks the required tags (content is the Validator's to judge). */
  parseProposal(output: string): PosedTask | null
  /** App. G.2. */
  validatorPrompt(question: string): Prompt
  /** The Validator's or Judge's integer score normalized to [0, 1] (COSE §3 Notation), or null when malformed. */
  parseScore(output: string): number | null
  /** App. G.3. */
  solverPrompt(question: string): Prompt
  /** f_S: the Solver's output holds its final answer in the required form. */
  solverFormat(output: string): boolean
  /** App. G.4. */
  judgePrompt(question: string, response: string): Prompt
}

/** R-Zero's Challenger and Solver (DIS §3, R-Zero's prompts). */
export interface RzeroRoles {
  challengerPrompt(level: number): Prompt
  /** A well-posed question, or null: a parse failure (reward −1, DIS §4.3). There is no Validator. */
  parseQuestion(output: string): PosedTask | null
  solverPrompt(question: string): Prompt
}

/** J-Zero's Challenger, Solver and the Judge's view of a response (JZ §3, App. C). */
export interface JzeroRoles {
  /** App. C.1: one task-generation instruction (all its samples form one GRPO group). */
  challengerPrompt(level: number): Prompt
  /** The format check of Eq. 6: a well-formed task inside <question> tags; null when it fails. */
  parseTask(output: string): PosedTask | null
  /** App. C.2: the answer prompt, shared by Solver and Challenger in role-asymmetry pairs (Eq. 10). */
  solverPrompt(question: string): Prompt
  /** App. C.1: the Challenger breaks a task into subtasks (Eq. 11). */
  decomposePrompt(question: string): Prompt
  /** The subtasks of a decomposition (JZ asks for 3–5; `min`/`max` bound them), null when malformed. */
  parseDecomposition(output: string, min: number, max: number): string[] | null
  /** App. C.2: the Solver answers subtask `index` (1-based) of `question`; `known` are the earlier sub-answers. */
  subtaskPrompt(question: string, index: number, subtask: string, known: readonly string[]): Prompt
  /** A subtask answer (App. C.2 asks for the answer only): its working and its text; null when empty or malformed. */
  parseSubtaskAnswer(output: string): WrittenAnswer | null
  /** App. C.1: the Challenger composes the solved subtasks into one answer. */
  composePrompt(question: string, solved: readonly { subtask: string; answer: string }[]): Prompt
  /** The response an amplified answer stands for, in the Solver's own format (the subtasks' working, then the answer). */
  amplifiedResponse(subtaskWork: readonly (string | null)[], composedAnswer: string): string
  /** How the scalar Judge sees a task and a response (prompt, completion). */
  judgeInput(question: string, response: string): ScorePair
  /** A critiquing Judge's roles (judge.critiqueTokens > 0, outside JZ); a world without them runs the paper's Judge only. */
  critique?: JzeroCritique
}

/** How a critiquing Judge writes its critique of a response, and how its score head then reads the three. */
export interface JzeroCritique {
  /** The prompt the Judge writes its critique to (a world's Judge prompt: COSE App. G.4's, say). */
  prompt(question: string, response: string): Prompt
  /** How the score head sees the task, the response and the critique (prompt, completion). */
  input(question: string, response: string, critique: string): ScorePair
}

/** UID's solver and verifier-rewarded GRPO. */
export interface SolveRoles {
  /** UID Table 16: TTRL rollouts (also the selectors and GRPO). */
  solverPrompt(question: string): Prompt
  /** UID Tables 17–18: the offline response pool, and the DPO / weighted-SFT examples built on it. */
  poolPrompt(question: string): Prompt
}

/** How answers are read and compared (UID A.1, DIS §3). */
export interface AnswerRules {
  /** A Solver-format output: its working and final answer as written; null when it states none. */
  parse(output: string): WrittenAnswer | null
  /** The normalized final answer of an output (UID A.1: extracted, then normalized), null when none. */
  answer(output: string): string | null
  /** Whether two stated answers are the same (majority votes, pseudo-labels: DIS's "symbolic equivalence"). */
  equivalent(a: string, b: string): boolean
  /** The text BLEU compares for the repetition penalty (R-Zero r_rep, JZ Eq. 5; BLEU splits on whitespace). */
  repetitionText(question: string): string
}

/** Ground truth, for evaluation and diagnostics only: never a reward where the paper forbids one. */
export interface Verifier {
  /** Whether `output` answers `problem` right (against its reference answer). */
  verify(problem: LabeledProblem, output: string): boolean
  /** The reference answer of a question the world can check on its own (a posed task), or null when it cannot. */
  referenceAnswer(question: string): string | null
  /** Diagnostics of a posed question: is it well posed, and its difficulty level (null: unknown). */
  questionInfo?(question: string): { wellPosed: boolean; level: number | null }
  /** A verifiable trace-quality proxy (UID §3.3's validity rubric): every written step is right; null when unreadable. */
  traceValid?(output: string): boolean | null
}

/** The problems a world offers. */
export interface WorldData {
  /** Difficulty levels its Proposer/Challenger prompts take; [] when it has none (a level is then ignored). */
  levels: readonly number[]
  /** TTRL's unlabeled test-time prompts, in a fixed order (answers, when present, feed diagnostics only). */
  unlabeledPrompts(): readonly Problem[]
  /**
   * `count` distinct labeled training problems drawn by the stream named `seed` (a pure function of
   * it), disjoint from every benchmark; fewer when the world has fewer. `level`: a difficulty hint.
   */
  trainingProblems(o: { seed: string; count: number; level?: number }): LabeledProblem[]
  /** The held-out benchmarks, in order (a method evaluates on all of them unless its config names some). */
  benchmarks: readonly Benchmark[]
  /** A verifier-ordered held-out preference set for a Judge's pairwise accuracy (JZ App. B counterpart), `perGroup` pairs per group. */
  heldOutPreferences?(perGroup: number): HeldOutPreference[]
}

/** How a world was loaded (`--world`, `--data`, `--benchmarks`, `--thinking`): what a resumed run loads again. */
export interface WorldSpec {
  /** A built-in name (`arith`, `arith-chat`, `math`), a module path or a package name. */
  world: string
  /** Absolute paths of the training / unlabeled data file. */
  data?: string
  /** Benchmark files (math, user worlds) or names (arith: L1..L5). */
  benchmarks?: string[]
  /** Qwen3's `enable_thinking` for chat templates (undefined: the template's default). */
  thinking?: boolean
}

/** The task interface every method runs on. */
export interface TaskWorld {
  /** Names the world in run states and reports (a resumed run must run on the same world). */
  readonly name: string
  readonly cose: CoseRoles
  readonly rzero: RzeroRoles
  readonly jzero: JzeroRoles
  readonly solve: SolveRoles
  readonly answers: AnswerRules
  readonly verifier: Verifier
  readonly data: WorldData
  /** How the loader made it (set by loadWorld; a world built in code may leave it out). */
  readonly origin?: WorldSpec
}
