// The arithmetic world's seeded streams: mulberry32 (src/util/prng.ts) over a 32-bit state, with
// seeds and stream labels mixed through murmur3's fmix32. Every step is exact in JS 32-bit integer
// arithmetic, so a seed gives the same stream on every platform. The world draws from mulberry32
// (not the toolkit's xoshiro Rng) so that its corpus and evaluation sets stay fixed whatever
// happens elsewhere: changing the stream changes every fixed set, so don't.
import { mulberry32Step } from '../../util/prng.js'

/** A seed: a finite number (mixed over its full integer range) or a string. */
export type WorldSeed = number | string

/** murmur3 fmix32 finalizer: a bijective avalanche on 32 bits. */
function fmix32(h: number): number {
  h ^= h >>> 16
  h = Math.imul(h, 0x85ebca6b)
  h ^= h >>> 13
  h = Math.imul(h, 0xc2b2ae35)
  h ^= h >>> 16
  return h >>> 0
}

/** FNV-1a over UTF-16 code units, finalized. */
function hashString(s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return fmix32(h)
}

function seedWord(seed: WorldSeed): number {
  if (typeof seed === 'string') return hashString(seed)
  if (!Number.isFinite(seed)) throw new RangeError(`seed must be finite, got ${seed}`)
  const int = Math.trunc(seed)
  const lo = int >>> 0
  const hi = Math.floor(Math.abs(int) / 4294967296) >>> 0
  return fmix32(lo ^ fmix32(hi + 0x9e3779b9) ^ (int < 0 ? 0x5bd1e995 : 0))
}

/**
 * Derive a 32-bit seed from a root seed and a path of labels (strings or numbers), e.g.
 * `deriveSeed(7, 'corpus', 123)`. Distinct paths give unrelated streams: this is how the corpus
 * (item i has its own stream, so an item never depends on the corpus size) and the evaluation sets
 * (`'arith-eval-v1'` paths) are kept apart.
 */
export function deriveSeed(root: WorldSeed, ...path: (string | number)[]): number {
  let h = seedWord(root)
  for (const p of path) h = fmix32((h ^ seedWord(p)) + 0x6d2b79f5 + Math.imul(h, 31))
  return h
}

/** mulberry32 with helpers. Not cryptographic; fine for data generation. */
export class Rng {
  private state: number

  constructor(seed: WorldSeed) {
    this.state = seedWord(seed)
  }

  /** Next 32-bit unsigned integer (mulberry32 step). */
  nextU32(): number {
    const step = mulberry32Step(this.state)
    this.state = step.state
    return step.output
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextU32() / 4294967296
  }

  /** Uniform integer in [lo, hi] (inclusive), without modulo bias for spans < 2^32. */
  int(lo: number, hi: number): number {
    if (!Number.isInteger(lo) || !Number.isInteger(hi) || hi < lo) throw new RangeError(`bad range [${lo}, ${hi}]`)
    const span = hi - lo + 1
    if (span > 4294967296) throw new RangeError('range too wide')
    const limit = 4294967296 - (4294967296 % span)
    for (;;) {
      const x = this.nextU32()
      if (x < limit) return lo + (x % span)
    }
  }

  /** True with probability p. */
  chance(p: number): boolean {
    return this.next() < p
  }

  /** A uniformly chosen element (the array must be non-empty). */
  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError('pick from an empty array')
    return items[this.int(0, items.length - 1)]
  }

  /** An index drawn with probability proportional to `weights` (non-negative, some positive). */
  weighted(weights: readonly number[]): number {
    let total = 0
    for (const w of weights) {
      if (!(w >= 0) || !Number.isFinite(w)) throw new RangeError(`bad weight ${w}`)
      total += w
    }
    if (total <= 0) throw new RangeError('weights sum to zero')
    let x = this.next() * total
    for (let i = 0; i < weights.length; i++) {
      x -= weights[i]
      if (x < 0) return i
    }
    for (let i = weights.length - 1; i >= 0; i--) if (weights[i] > 0) return i
    return weights.length - 1
  }

  /** An independent generator for a labelled sub-stream (does not advance this one). */
  fork(...path: (string | number)[]): Rng {
    return new Rng(deriveSeed(this.state, ...path))
  }
}
