// A scripted actor of the arithmetic world for the scripted fake policy: it reads which role a
// toy-format prompt asks for and answers in that role's format — right or wrong, well formed or
// not — as a deterministic function of the sample's scripted uniform. Tests then recompute what
// a method must have made of those outputs (rewards, labels, advantages) and compare.
import type { ScriptContext, ScriptedPolicyOptions } from '../../src/methods/common/scripted-policy.js'
import { answerOf, verifyAnswer } from '../../src/worlds/arith/index.js'

/** Questions the scripted Proposer/Challenger draws from (all well-formed level 2–3 expressions). */
export const SCRIPT_QUESTIONS = ['12+7', '(3+4)*5', '9*8-6', '(12+7)*3', '15-4*2', '7*7+1', '(6+9)*4', '88-19']

export interface ArithScript {
  /** P(a Solver answer is right). */
  solveRate?: number
  /** P(a proposal has no tags). */
  malformedRate?: number
}

/** The Validator's score of a question: 8 (accept) for the first half of SCRIPT_QUESTIONS, 3 otherwise. */
export function scriptedValidatorScore(question: string): number {
  const i = SCRIPT_QUESTIONS.indexOf(question.replace(/\s+/g, ''))
  return i >= 0 && i < SCRIPT_QUESTIONS.length / 2 ? 8 : 3
}

/** The Judge's score of a response: 9 when the verifier says it is right, 2 otherwise. */
export function scriptedJudgeScore(question: string, response: string): number {
  return verifyAnswer(question, response) === true ? 9 : 2
}

const after = (prompt: string, head: string) => prompt.slice(head.length).split('\n')[0].trim()
const WORKINGS = ['adding up', 'step by step', 'carefully', 'in my head', 'on paper', 'twice']

/** A Solver answer to `question`: the right one when `right`, else off by one; workings vary with `u`. */
export function scriptedAnswer(question: string, right: boolean, u: number): string {
  const truth = answerOf(question)
  const given = truth === null ? 0n : right ? truth : truth + 1n
  return `<think>${WORKINGS[Math.floor(u * WORKINGS.length)]}</think><answer>${given}</answer>`
}

export function arithScript(o: ArithScript = {}): ScriptedPolicyOptions['script'] {
  const solveRate = o.solveRate ?? 0.6
  const malformed = o.malformedRate ?? 0.2
  return (c: ScriptContext) => {
    const p = c.prompt
    if (p.startsWith('Propose')) return c.uniform < malformed ? 'no tags here' : `<question>${SCRIPT_QUESTIONS[Math.floor(((c.uniform - malformed) / (1 - malformed)) * SCRIPT_QUESTIONS.length)]}</question>`
    if (p.startsWith('Rate problem: ')) return `<score>${scriptedValidatorScore(after(p, 'Rate problem: '))}</score>`
    if (p.startsWith('Judge: ')) {
      const [q, r] = p.split('\n')
      return `<score>${scriptedJudgeScore(q.slice('Judge: '.length), r.slice('Response: '.length))}</score>`
    }
    if (p.startsWith('Solve: ')) return scriptedAnswer(after(p, 'Solve: '), c.uniform < solveRate, c.uniform)
    if (p.startsWith('Decompose: ')) return `1. ${after(p, 'Decompose: ')}`
    if (p.startsWith('Task: ')) return scriptedAnswer(after(p, 'Task: '), c.uniform < solveRate, c.uniform)
    if (p.startsWith('Compose: ')) {
      const known = /#1=(-?\d+)/.exec(p)
      return `<answer>${known ? known[1] : '0'}</answer>`
    }
    return 'unscripted prompt'
  }
}

/** The scripted Judge's raw score (a reward model): +2 for a right response, −2 for a wrong one. */
export function scriptedJudge(prompt: string, completion: string): number {
  const q = prompt.replace(/^Judge: /, '').split('\n')[0]
  return verifyAnswer(q, completion) === true ? 2 : -2
}
