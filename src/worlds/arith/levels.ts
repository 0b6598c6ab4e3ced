// Difficulty levels and the seeded problem generator.
//
// | level | ops | digits | maxAbs  | example            |
// |-------|-----|--------|---------|--------------------|
// |   1   |  1  |   1    |      99 | 7+5                |
// |   2   |  2  |   1    |     999 | (3+8)*4            |
// |   3   |  2  |   2    |     999 | (12+7)*3           |  ← DEFAULT_LEVEL
// |   4   |  3  |   2    |    9999 | (12+7)*3-45        |
// |   5   |  4  |   3    |   99999 | 4*(125-37)+6*19    |
//
// ops: exactly this many binary operations. digits: every literal has 1..digits digits and at
// least one has exactly `digits` (one-digit literals are 2..9, so no literal is 0 or 1). maxAbs:
// every intermediate value and the answer satisfy |v| ≤ maxAbs — it keeps products tractable for
// a tiny model (a 2-digit × 2-digit product only appears at level 3 when it stays under 1000).
// Operators are drawn + 40 %, − 30 %, × 30 %; tree shapes are random binary splits, so
// parentheses appear wherever a tree needs them. Generated expressions are never trivial.

import { exprStats, isTrivialExpr, parseExpr, printExpr, type Expr, type Op } from './expr.js'
import { Rng } from './prng.js'

export interface LevelSpec {
  readonly level: number
  /** Exact number of binary operations. */
  readonly ops: number
  /** Most digits per literal. */
  readonly digits: number
  /** Bound on |value| of every intermediate result and the answer. */
  readonly maxAbs: number
}

export const LEVELS: readonly LevelSpec[] = [
  { level: 1, ops: 1, digits: 1, maxAbs: 99 },
  { level: 2, ops: 2, digits: 1, maxAbs: 999 },
  { level: 3, ops: 2, digits: 2, maxAbs: 999 },
  { level: 4, ops: 3, digits: 2, maxAbs: 9999 },
  { level: 5, ops: 4, digits: 3, maxAbs: 99999 },
]

export const MIN_LEVEL = 1
export const MAX_LEVEL = 5
/** The default difficulty: two operations on operands of up to two digits. */
export const DEFAULT_LEVEL = 3
/** What `difficultyOf` returns for an expression beyond every level (too many ops or digits, or too large). */
export const LEVEL_BEYOND = 6

const OPS: readonly Op[] = ['+', '-', '*']
const OP_WEIGHTS: readonly number[] = [0.4, 0.3, 0.3]

export function isLevel(level: unknown): level is number {
  return typeof level === 'number' && Number.isInteger(level) && level >= MIN_LEVEL && level <= MAX_LEVEL
}

/** The spec of a level (1..5); throws RangeError for anything else (a caller's mistake, not model output). */
export function levelSpec(level: number): LevelSpec {
  if (!isLevel(level)) throw new RangeError(`difficulty level must be an integer in ${MIN_LEVEL}..${MAX_LEVEL}, got ${level}`)
  return LEVELS[level - 1]
}

/**
 * The smallest level whose (ops, digits, maxAbs) bounds all cover the expression; LEVEL_BEYOND (6)
 * when none does; `null` when the text is malformed. A bare number is level 1 if it has one digit
 * (it is also trivial: see isTrivial). References (`#k`) are accepted only as parsed Expr values;
 * their values are unknown, so maxAbs is not checked for them.
 */
export function difficultyOf(expr: string | Expr): number | null {
  const e = typeof expr === 'string' ? parseExpr(expr) : expr
  if (e === null || typeof e !== 'object') return null
  const s = exprStats(e)
  for (const spec of LEVELS) {
    if (s.ops <= spec.ops && s.maxDigits <= spec.digits && (s.maxAbs === null || s.maxAbs <= BigInt(spec.maxAbs))) {
      return spec.level
    }
  }
  return LEVEL_BEYOND
}

function literal(rng: Rng, len: number): Expr {
  if (len === 1) return { kind: 'num', value: BigInt(rng.int(2, 9)) }
  const lo = 10 ** (len - 1)
  return { kind: 'num', value: BigInt(rng.int(lo, 10 * lo - 1)) }
}

/** A random tree with exactly `ops` operations; literal lengths are filled in afterwards. */
function shape(rng: Rng, ops: number, lens: number[]): Expr {
  if (ops === 0) return literal(rng, lens.pop() ?? 1)
  const leftOps = rng.int(0, ops - 1)
  const op = OPS[rng.weighted(OP_WEIGHTS)]
  const left = shape(rng, leftOps, lens)
  const right = shape(rng, ops - 1 - leftOps, lens)
  return { kind: 'bin', op, left, right }
}

/** One candidate at exactly (ops, digits), not yet checked against maxAbs or triviality. */
export function sampleShape(rng: Rng, ops: number, digits: number): Expr {
  const n = ops + 1
  const lens: number[] = []
  for (let i = 0; i < n; i++) lens.push(rng.int(1, digits))
  lens[rng.int(0, n - 1)] = digits
  return shape(rng, ops, lens)
}

export interface GenerateOptions {
  /** Reject candidates whose canonical text this returns true for (e.g. the evaluation sets). */
  exclude?: (canonical: string) => boolean
  /** Give up after this many rejected candidates (default 10 000); then throws. */
  maxAttempts?: number
}

/**
 * A non-trivial expression of exactly the level's (ops, digits) within its maxAbs, drawn from
 * `rng`. Deterministic given the generator state. Throws only when `exclude` rejects everything.
 */
export function generateExpr(rng: Rng, level: number, opts: GenerateOptions = {}): Expr {
  const spec = levelSpec(level)
  const cap = BigInt(spec.maxAbs)
  const maxAttempts = opts.maxAttempts ?? 10_000
  for (let attempt = 0; attempt < maxAttempts; attempt++) {
    const e = sampleShape(rng, spec.ops, spec.digits)
    const s = exprStats(e)
    if (s.maxAbs === null || s.maxAbs > cap) continue
    if (isTrivialExpr(e)) continue
    if (opts.exclude !== undefined && opts.exclude(printExpr(e))) continue
    return e
  }
  throw new Error(`no level-${level} expression found in ${maxAttempts} attempts (is the exclusion set too large?)`)
}

/** `count` canonical questions at a level from a seed (duplicates possible; see evalSet for distinct sets). */
export function generateQuestions(seed: number | string, level: number, count: number, opts: GenerateOptions = {}): string[] {
  const rng = new Rng(seed)
  const out: string[] = []
  for (let i = 0; i < count; i++) out.push(printExpr(generateExpr(rng, level, opts)))
  return out
}
