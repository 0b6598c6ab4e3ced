// Held-out evaluation sets, one per level, fixed by seed.
//
// Level L's set is the first `size` distinct questions of the stream Rng(deriveSeed(EVAL_SEED, L)),
// so evalSet(L, 50) is a prefix of evalSet(L, 100). The first EVAL_CAPACITY[L] questions of each
// level are reserved: disjointness from training data is guaranteed by rejection, not by luck of
// seeds — the corpus (corpus.ts) draws from a different seed space ('arith-corpus-v1' paths) AND
// rejects every question whose canonical text is reserved (isEvalQuestion), at every level.
// Disjointness is by canonical text: `5+7` reserved does not reserve `7+5`.
// Level 1 has only 184 non-trivial questions, so its reserve is 100 (the default size); the other
// levels reserve 1000. Changing the generator, the PRNG or EVAL_SEED changes the sets: don't.

import { evaluate, printExpr } from './expr.js'
import { generateExpr, levelSpec } from './levels.js'
import { deriveSeed, Rng } from './prng.js'

export const EVAL_SEED = 'arith-eval-v1'

/** How many questions each level's evaluation stream reserves (index = level; index 0 unused). */
export const EVAL_CAPACITY: readonly number[] = [0, 100, 1000, 1000, 1000, 1000]

export interface EvalItem {
  /** Stable id, e.g. `L3-007`. */
  id: string
  level: number
  /** Canonical question text. */
  question: string
  /** The exact answer, as a decimal string. */
  answer: string
}

const cache = new Map<number, EvalItem[]>()

function reserved(level: number): EvalItem[] {
  const hit = cache.get(level)
  if (hit !== undefined) return hit
  levelSpec(level)
  const cap = EVAL_CAPACITY[level]
  const rng = new Rng(deriveSeed(EVAL_SEED, level))
  const seen = new Set<string>()
  const items: EvalItem[] = []
  while (items.length < cap) {
    const e = generateExpr(rng, level)
    const question = printExpr(e)
    if (seen.has(question)) continue
    seen.add(question)
    items.push({ id: `L${level}-${String(items.length).padStart(3, '0')}`, level, question, answer: evaluate(e)!.toString() })
  }
  cache.set(level, items)
  return items
}

/**
 * The held-out set of a level: `size` distinct questions with answers, the same on every call and
 * machine. Throws RangeError for a level outside 1..5 or a size above EVAL_CAPACITY[level].
 */
export function evalSet(level: number, size = 100): EvalItem[] {
  levelSpec(level)
  if (!Number.isInteger(size) || size < 0 || size > EVAL_CAPACITY[level]) {
    throw new RangeError(`evalSet(${level}, size): size must be an integer in 0..${EVAL_CAPACITY[level]}, got ${size}`)
  }
  return reserved(level)
    .slice(0, size)
    .map((it) => ({ ...it }))
}

let allReserved: Set<string> | null = null

/** Whether a canonical question text is reserved for evaluation at any level. */
export function isEvalQuestion(canonicalText: string): boolean {
  if (allReserved === null) {
    const s = new Set<string>()
    for (let level = 1; level < EVAL_CAPACITY.length; level++) for (const it of reserved(level)) s.add(it.question)
    allReserved = s
  }
  return allReserved.has(canonicalText)
}
