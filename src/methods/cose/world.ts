// What COSE needs of a task world: the four roles' prompts and parsers, and a verifier for the
// held-out evaluation. The bundled arithmetic world provides its toy formats.
import {
  evalSet,
  judgePrompt,
  parseQuestion,
  parseSolution,
  parseValidator,
  proposerPrompt,
  solverPrompt,
  validatorPrompt,
  verifyAnswer,
} from '../../worlds/arith/index.js'

export interface CoseWorld {
  name: string
  proposerPrompt(level: number): string
  /** f_P and the question text (null when malformed). */
  parseQuestion(output: string): { ok: boolean; question: string | null; key: string | null }
  validatorPrompt(question: string): string
  /** The Validator's or Judge's score normalized to [0, 1], or null when malformed. */
  parseScore(output: string): number | null
  solverPrompt(question: string): string
  /** f_S: the Solver's output has the required tags. */
  solverFormat(output: string): boolean
  judgePrompt(question: string, response: string): string
  /** Held-out questions of a difficulty, fixed by seed. */
  evalSet(level: number, size: number): { id: string; question: string }[]
  /** Ground truth, for evaluation only: never seen by the loop. */
  verify(question: string, output: string): boolean
}

export const arithWorld: CoseWorld = {
  name: 'arith',
  proposerPrompt: (level) => proposerPrompt(level),
  parseQuestion(output) {
    const r = parseQuestion(output)
    return r.ok ? { ok: true, question: r.value.text, key: r.value.canonical ?? r.value.text } : { ok: false, question: null, key: null }
  },
  validatorPrompt: (q) => validatorPrompt(q),
  parseScore(output) {
    const r = parseValidator(output)
    return r.ok ? r.value.normalized : null
  },
  solverPrompt: (q) => solverPrompt(q),
  solverFormat: (output) => parseSolution(output).ok,
  judgePrompt: (q, response) => judgePrompt(q, response),
  evalSet: (level, size) => evalSet(level, size).map((e) => ({ id: e.id, question: e.question })),
  verify: (q, output) => verifyAnswer(q, output) === true,
}

