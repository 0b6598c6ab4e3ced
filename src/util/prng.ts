// Seeded pseudo-random numbers, the one home of every generator in the library:
// - Rng: xoshiro128** (Blackman & Vigna, 2018) seeded through splitmix32, for sampling decisions,
//   replay and bootstrap. The state can be read and restored, which resume relies on.
// - mulberry32: a one-word generator, for fixed data sets (the arithmetic world's corpus and
//   evaluation sets) and seeded test data, where a stream must never change.
// 32-bit words throughout, so every step is exact in JS integer arithmetic and a given seed gives
// the same stream on every platform.

/** One mulberry32 step (Tommy Ettinger, public domain): the next state and its 32-bit output. */
export function mulberry32Step(state: number): { state: number; output: number } {
  const next = (state + 0x6d2b79f5) | 0
  let t = next
  t = Math.imul(t ^ (t >>> 15), t | 1)
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
  return { state: next, output: (t ^ (t >>> 14)) >>> 0 }
}

/** mulberry32 from a 32-bit seed, as uniforms in [0, 1) with 32 random bits. */
export function mulberry32(seed: number): () => number {
  let state = seed | 0
  return () => {
    const step = mulberry32Step(state)
    state = step.state
    return step.output / 4294967296
  }
}

/** A seed: a finite number (its low 32 bits and the integer part above them are mixed) or a string. */
export type Seed = number | string

/** FNV-1a over UTF-16 code units: turns a string seed into 32 bits. */
function hashString(s: string): number {
  let h = 0x811c9dc5
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i)
    h = Math.imul(h, 0x01000193)
  }
  return h >>> 0
}

/** splitmix32 step: returns [next state, output]. Used only to expand a seed into 128 bits. */
function splitmix32(state: number): [number, number] {
  state = (state + 0x9e3779b9) | 0
  let z = state
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b)
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35)
  z ^= z >>> 16
  return [state, z >>> 0]
}

function seedWord(seed: Seed): number {
  if (typeof seed === 'string') return hashString(seed)
  if (!Number.isFinite(seed)) throw new RangeError(`PRNG seed must be finite, got ${seed}`)
  const lo = seed >>> 0
  const hi = Math.floor(Math.abs(seed) / 4294967296) >>> 0
  return (lo ^ Math.imul(hi, 0x27d4eb2d) ^ (seed < 0 ? 0x5bd1e995 : 0)) >>> 0
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k))
}

/** xoshiro128**: period 2^128 − 1, passes BigCrush; plenty for sampling and bootstrap. */
export class Rng {
  private s0 = 0
  private s1 = 0
  private s2 = 0
  private s3 = 0

  constructor(seed: Seed = 0) {
    let st = seedWord(seed)
    const words: number[] = []
    for (let i = 0; i < 4; i++) {
      const [next, out] = splitmix32(st)
      st = next
      words.push(out)
    }
    this.setState(words)
  }

  /** Restore a generator from `state()` output. */
  static fromState(state: readonly number[]): Rng {
    const r = new Rng(0)
    r.setState(state)
    return r
  }

  /** The four 32-bit state words (unsigned). */
  state(): [number, number, number, number] {
    return [this.s0 >>> 0, this.s1 >>> 0, this.s2 >>> 0, this.s3 >>> 0]
  }

  setState(state: readonly number[]): void {
    if (state.length !== 4 || state.some((w) => !Number.isInteger(w) || w < 0 || w > 0xffffffff)) {
      throw new RangeError('PRNG state must be four unsigned 32-bit integers')
    }
    if (state.every((w) => w === 0)) throw new RangeError('PRNG state must not be all zero')
    this.s0 = state[0] | 0
    this.s1 = state[1] | 0
    this.s2 = state[2] | 0
    this.s3 = state[3] | 0
  }

  /** Next unsigned 32-bit integer. */
  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9)
    const t = this.s1 << 9
    this.s2 ^= this.s0
    this.s3 ^= this.s1
    this.s1 ^= this.s2
    this.s0 ^= this.s3
    this.s2 ^= t
    this.s3 = rotl(this.s3, 11)
    return result >>> 0
  }

  /** Uniform double in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const a = this.nextU32() >>> 5 // 27 bits
    const b = this.nextU32() >>> 6 // 26 bits
    return (a * 67108864 + b) / 9007199254740992
  }

  /** Uniform integer in [0, n), unbiased (rejection sampling); 1 ≤ n ≤ 2^32. */
  nextInt(n: number): number {
    if (!Number.isInteger(n) || n < 1 || n > 4294967296) {
      throw new RangeError(`nextInt bound must be an integer in [1, 2^32], got ${n}`)
    }
    if (n === 1) return 0
    const limit = 4294967296 - (4294967296 % n)
    for (;;) {
      const x = this.nextU32()
      if (x < limit) return x % n
    }
  }

  /** In-place Fisher–Yates shuffle. */
  shuffle<T>(a: T[]): T[] {
    for (let i = a.length - 1; i > 0; i--) {
      const j = this.nextInt(i + 1)
      const t = a[i]
      a[i] = a[j]
      a[j] = t
    }
    return a
  }
}
