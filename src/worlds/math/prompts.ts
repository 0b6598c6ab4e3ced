// The papers' role prompts, quoted from their appendices, for the math world (and any chat world
// built on it). Each is rendered as chat messages under the model folder's own chat template
// (`Tokenizer.applyChatTemplate` via the engine's `{ messages, template }` prompts), Qwen3's
// `enable_thinking` passed through when the world sets it.
//
// Where a paper prints a placeholder ("Given Task", "Sub-answers", "{problem}") the task text goes
// in its place. Two extraction artifacts of the paper texts are repaired: J-Zero's decompose prompt
// has a stray quote before "fully solve", and its Compose and Solver prompts lost `\boxed{}` after
// "put it within" (restored: the Solver prompt is Qwen's standard math prompt, as UID Table 16
// prints it). COSE App. G describes the Validator's and Judge's output format in the third person
// ("The Validator first generates …"); the prompts give it as an instruction.
import type { ChatMessage, ChatTemplateOptions } from '../../engine/tokenizer.js'
import type { Prompt } from '../../engine/model.js'

// ---------------------------------------------------------------------------------------------
// COSE App. G (Proposer, Validator, Solver, Judge)

/** COSE App. G.1 Proposer Prompt. */
export const COSE_PROPOSER = [
  'Task: Create a challenging and self-contained reasoning task suitable for evaluating general intelligence or instruction following.',
  '',
  'Requirements:',
  '',
  '• The task must require multi-step reasoning or structured planning.',
  '',
  '• The task must be deterministic or tightly constrained.',
  '',
  '• Avoid trivia, subjective prompts, web-dependent knowledge, or unsolvable questions.',
  '',
  '• Output format:',
  '',
  '<question>',
  '[generated question]',
  '</question>',
].join('\n')

/** COSE App. G.2 Validator Prompt. */
export const COSE_VALIDATOR = [
  'Task: Evaluate the quality of a generated question using a strict rubric.',
  '',
  'Scoring Criteria:',
  '',
  '• Unsolvable, contradictory, unsafe, or incoherent questions receive scores in [1,3].',
  '',
  '• Ambiguous or incomplete questions receive scores in [4,7].',
  '',
  '• Clear, feasible, self-contained, and logically sound questions receive scores in [8,10].',
  '',
  'First generate internal reasoning inside <think> tags, then output a final integer score inside <score> tags.',
].join('\n')

/** COSE App. G.3 Solver Prompt. */
export const COSE_SOLVER = [
  'Task: Produce a complete solution to the provided reasoning or planning problem.',
  '',
  'Instructions:',
  '',
  '• Reason step-by-step before answering.',
  '',
  '• Satisfy all constraints in the task.',
  '',
  '• Return the final response inside:',
  '',
  '<answer>',
  '[solution]',
  '</answer>',
].join('\n')

/** COSE App. G.4 Judge Prompt. */
export const COSE_JUDGE = [
  'Task: Evaluate the Solver response using a strict correctness rubric.',
  '',
  'Scoring Criteria:',
  '',
  '• Any factual, logical, arithmetic, or commonsense error results in a score in [1,3].',
  '',
  '• Incomplete but partially correct answers receive scores in [4,7].',
  '',
  '• Fully correct, concise, and instruction-following answers receive scores in [8,10].',
  '',
  'First produce internal reasoning inside <think> tags, then a final score inside <score> tags.',
].join('\n')

/** COSE App. G: the Validator and Judge score on a fixed integer scale, normalized to [0, 1] before use. */
export const COSE_SCORE_RANGE = { min: 1, max: 10 } as const

// ---------------------------------------------------------------------------------------------
// R-Zero (Huang et al. 2025), the Challenger–Solver loop DIS builds on: its questioner and solver
// prompts (R-Zero's released prompts; DIS §4.5 parses "the generated question and reference answer")

/** R-Zero's questioner system prompt. */
export const RZERO_CHALLENGER_SYSTEM = [
  'You are an expert competition-math problem setter.',
  'FIRST, in your private scratch-pad, think step-by-step to design a brand-new, non-trivial problem. ' +
    'The problem could come from any field of mathematics, including but not limited to algebra, geometry, number theory, combinatorics, prealgebra, probability, statistics, and calculus. ' +
    'Aim for a difficulty such that fewer than 30 % of advanced high-school students could solve it. ' +
    'Avoid re-using textbook clichés or famous contest problems.',
  'THEN, without revealing any of your private thoughts, output **exactly** the following two blocks:',
  '',
  '<question>',
  '{The full problem statement on one or more lines}',
  '</question>',
  '',
  '\\boxed{final_answer}',
  '',
  'Do NOT output anything else—no explanations, no extra markup.',
].join('\n')

/** R-Zero's questioner user prompt. */
export const RZERO_CHALLENGER_USER = 'Generate one new, challenging reasoning question now. Remember to format the output exactly as instructed.'

/** The Solver system prompt of R-Zero and J-Zero (JZ App. C.2 "Solver System Prompt"). */
export const SOLVER_SYSTEM = 'Please reason step by step, and put your final answer within \\boxed{}.'

// ---------------------------------------------------------------------------------------------
// J-Zero App. C

/** JZ App. C.1 "Challenger User Prompt for Generating Questions (Modified from G-Zero)"; no system prompt. */
export const JZERO_CHALLENGER = [
  'Produce one challenging request that a real user might ask a capable assistant. The request should come from a general-domain distribution. Sample across task types, not from a single area.',
  '',
  'Examples of task types you can draw from:',
  '- writing (email, story, essay, pitch, review, poem)',
  '- explanation (make a concept clear to a specific audience)',
  '- advice or planning (career, travel, project, learning)',
  '- analysis (argument, text, dataset description, product)',
  '- coding (small function, debugging, design question)',
  '- role-play, dialogue, or creative tasks',
  '- open-ended questions about ethics, science, everyday life',
  '- reasoning, math, or logic problems (fine to include - roughly 1 in 6 requests, no more)',
  '',
  'Weight the non-math categories above heavily. A little math is good for diversity, but it should not dominate - favor tasks where the response quality depends on tone, structure, audience-fit, clarity, or creativity, not just arithmetic correctness.',
  '',
  'Requirements:',
  '- The request must be self-contained and non-trivial to answer well.',
  '- Wrap the request in <question> and </question> tags.',
  '- Output nothing else before, between, or after the tagged blocks.',
  '',
  'Example 1 (writing):',
  '<question>Write a resignation email to my manager that keeps the door open for future collaboration. I’ve been at the company for 4 years and I’m leaving to join a competitor. Tone should be professional and warm without being effusive.</question>',
  '',
  'Example 2 (explanation):',
  '<question>Explain what a Kalman filter does to a software engineer who is comfortable with linear algebra but has never touched signal processing. Avoid control-theory jargon where possible.</question>',
  '',
  'Now produce one new request of your own:',
].join('\n')

/** JZ App. C.1 "Challenger System Prompt to Decompose a Task". */
export const JZERO_DECOMPOSE_SYSTEM = [
  'You are an expert at breaking a hard task into simpler subtasks. Given a task, output the FEW essential sub-questions/subtasks whose answers, once combined, fully solve the task.',
  '',
  'Rules:',
  '- Output the 3-5 most essential subtasks only — never more than 5.',
  '- Each subtask must be SIMPLER than the whole task and genuinely needed.',
  '- Order them so earlier subtasks are useful for later ones.',
  '- Make them specific to THIS task; avoid vague meta-steps like ‘understand the problem’ or ‘write the answer’.',
  '',
  'Output a numbered list of the subtasks only, nothing else.',
].join('\n')

/** JZ App. C.1 "Challenger User Prompt to Decompose a Task". */
export const jzeroDecomposeUser = (task: string) => `Task: ${task}\n\nBreak this into the 3-5 essential, simpler subtasks that together solve it, ordered so earlier ones help later ones.`

/** JZ App. C.1 "Challenger System Prompt to Compose the Sub-answers". */
export const JZERO_COMPOSE_SYSTEM =
  'You are an expert problem solver. You are given a task, and a set of subtasks that have each already been solved. Combine the subtask solutions into ONE coherent, complete final answer to the original task: integrate them, resolve any contradictions, fix obvious subtask errors, and do not be unnecessarily verbose. Output ONLY the final answer to the original task — do NOT restate the subtasks, their solutions, or your procedure. If the task has a closed-form answer, put it within \\boxed{}.'

/** JZ App. C.1 "Challenger User Prompt to Compose the Sub-answers". */
export const jzeroComposeUser = (task: string, solved: readonly { subtask: string; answer: string }[]) =>
  `Original task: ${task}\n\nSolved subtasks:\n${solved.map((s, i) => `${i + 1}. ${s.subtask}\n${s.answer}`).join('\n\n')}\n\nCombine these into the single best final answer to the original task. Output ONLY the final answer.`

/** JZ App. C.2 "Solver System Prompt to Solve Each Subtask". */
export const JZERO_SUBTASK_SYSTEM =
  'You are solving ONE subtask that is part of a larger task. Answer the subtask fully and correctly, using the larger task only as context. Be concise and self-contained - output only the answer to this subtask.'

/** JZ App. C.2 "Solver User Prompt to Solve Each Subtask". */
export const jzeroSubtaskUser = (task: string, subtask: string) => `Larger task (context): ${task}\n\nSubtask to solve now: ${subtask}\n\nAnswer this subtask.`

// ---------------------------------------------------------------------------------------------
// UID App. G

/** UID Table 16: the TTRL rollout prompt (one user message). */
export const uidRolloutUser = (problem: string) => `${problem}\n\nPlease reason step by step, and put your final answer within \\boxed{}.`

/** UID Tables 17–18: the prompt of the shared offline response pool (DPO and weighted SFT). */
export const uidPoolUser = (question: string) => `${question} Let’s think step by step and output the final answer within \\boxed{}.`

// ---------------------------------------------------------------------------------------------

/** A chat prompt: optional system message, one user message, the template options (e.g. enable_thinking). */
export function chatPrompt(system: string | null, user: string, template?: ChatTemplateOptions): Prompt {
  const messages: ChatMessage[] = system === null ? [{ role: 'user', content: user }] : [{ role: 'system', content: system }, { role: 'user', content: user }]
  return template ? { messages, template } : { messages }
}
