// @ts-check
// A user world (bring your own task): numbers written in words. It keeps the papers' role prompts
// and `\boxed{}` answers of the math world, and brings its own data (train.jsonl, test.jsonl beside
// this file, or --data / --benchmarks) and its own answer rules: "three hundred forty-seven" is
// right whatever its hyphens, commas, case or an "and".
//
//   autodidact evolve --method grpo --world ./examples/number-words/world.mjs --model DIR
//
// A world module exports the TaskWorld (src/worlds/types.ts) or, as here, a factory of it that gets
// the command line's world options. `// @ts-check` and the JSDoc types make an editor check it
// against the package's types, as a TypeScript world would be.
import { fileURLToPath } from 'node:url'
import { chatWorld, MATH_ANSWERS, readBenchmark, readProblems } from 'autodidact'

const here = (/** @type {string} */ file) => fileURLToPath(new URL(file, import.meta.url))

/** The canonical spelling of a number in words: lower case, no hyphens, commas or "and". */
export function normalizeWords(/** @type {string} */ text) {
  return text
    .toLowerCase()
    .replace(/[-,]/g, ' ')
    .replace(/\band\b/g, ' ')
    .replace(/\s+/g, ' ')
    .trim()
}

/** @type {import('autodidact').AnswerRules} */
export const WORD_ANSWERS = {
  ...MATH_ANSWERS,
  answer: (output) => {
    const a = MATH_ANSWERS.parse(output)?.answer
    return a ? normalizeWords(a) : null
  },
  equivalent: (a, b) => normalizeWords(a) === normalizeWords(b),
}

/** @type {import('autodidact').WorldFactory} */
export default async function numberWords(options) {
  const problems = await readProblems(options.data ?? here('./train.jsonl'))
  const benchmarks = await Promise.all((options.benchmarks ?? [here('./test.jsonl')]).map((file) => readBenchmark(file)))
  return chatWorld({ name: 'number-words', problems, benchmarks, thinking: options.thinking, answers: WORD_ANSWERS })
}
