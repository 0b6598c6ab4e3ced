// What the kit does with a run's task world (src/worlds/types.ts) beyond asking it for prompts:
// checks a config's difficulty levels against it, records which world a checkpoint was taken on
// (a run resumes on the same world only), and verifies a posed task where the world can.
import { ConfigError } from '../../engine/errors.js'
import type { TaskWorld, WorldSpec } from '../../worlds/types.js'
import { Rng } from '../../util/prng.js'

/** The world of a checkpoint: its name, and how to load it again (null: a world built in code). */
export interface WorldRecord {
  name: string
  spec: WorldSpec | null
}

export function worldRecord(world: TaskWorld): WorldRecord {
  return { name: world.name, spec: world.origin ?? null }
}

/** A ConfigError unless every level is one of the world's (a world without levels takes any: it ignores them). */
export function checkLevels(world: TaskWorld, levels: readonly number[], field: string): void {
  const known = world.data.levels
  if (!known.length) return
  const bad = levels.find((l) => !known.includes(l))
  if (bad !== undefined) throw new ConfigError('(config)', field, `(config): ${field}: level ${bad} is not a difficulty of world '${world.name}' (${known.join(', ')})`)
}

/**
 * Ground truth of an output to a task a model posed, when the world can compute the task's answer
 * (measurement only, never a reward where the paper forbids one); null: unverifiable.
 */
export function verifyPosed(world: TaskWorld, question: string, output: string): boolean | null {
  const answer = world.verifier.referenceAnswer(question)
  return answer === null ? null : world.verifier.verify({ id: '', question, answer }, output)
}

/**
 * A verifier control's score of an output: 1 when the world's verifier marks it right, else 0 (an
 * unverifiable task included). With `flip` p > 0 the verdict is wrong for a fixed share p of
 * (question, output) inputs, chosen by a hash keyed on `key`: a deterministic Judge whose pairwise
 * accuracy on (right, wrong) pairs is 1 − p (ties ½), as consistent in its errors as a trained one.
 */
export function verifierScore(world: TaskWorld, question: string, output: string, flip = 0, key = ''): number {
  const right = verifyPosed(world, question, output) === true
  const flipped = flip > 0 && new Rng(`verifier-flip:${key}:${question}\n${output}`).nextFloat() < flip
  return right !== flipped ? 1 : 0
}

/** Whether a stated answer is a posed task's reference answer (null: unverifiable). */
export function isReferenceAnswer(world: TaskWorld, question: string, answer: string): boolean | null {
  const ref = world.verifier.referenceAnswer(question)
  return ref === null ? null : world.answers.equivalent(answer, ref)
}

/** The share of true verdicts among the known ones (null: unverifiable), NaN when none is known. */
export function shareTrue(verdicts: readonly (boolean | null)[]): number {
  const known = verdicts.filter((v): v is boolean => v !== null)
  return known.length ? known.filter(Boolean).length / known.length : NaN
}
