// The one-pass logit statistics (native/kernels/logit_stats.h, native/cpu/logit_stats_cpu.cpp)
// against the float64 reference (test/reference/stats64.ts) on fresh random rows of the real
// vocabulary sizes and on rows built to break things: ties, a duplicated max, −inf entries,
// magnitudes of 1e4, a vocabulary smaller than K, NaN.
//
// Bounds, with err(x) = |native − f64| / max(1, |f64|):
//   maxLogit, topkIds, topkLogits              exact (ties → lower id first)
//   margin                                     ≤ 1e-6 (one f32 subtraction of exact values)
//   logsumexp, entropy, chosenLogprob          ≤ 1e-5
//   k1, k2, k3                                 ≤ 1e-5
//   klExact                                    ≤ 2e-5 (t/s − u/s cancels when p ≈ q)
// The naive multi-pass baseline (the benchmark's peer) is held to 1e-4: libm expf and f32 terms.
// The binding pre-fills every output with NaN (ids with −2^31), so a missed element shows.
import { beforeAll, describe, expect, it } from 'vitest'
import { logitStats64, type LogitStats64 } from '../reference/stats64.js'
import { gaussian, mulberry32 } from '../reference/random-weights.js'
import { kernels, normalLogits, row, type Kernels, type LogitStatsOptions, type LogitStatsResult } from './kernels.js'

const TOL = { margin: 1e-6, lse: 1e-5, entropy: 1e-5, logprob: 1e-5, k: 1e-5, kl: 2e-5 }
const NAIVE_TOL = 1e-4
const MISSING_ID = -(2 ** 31)

let k: Kernels
beforeAll(async () => {
  k = await kernels()
})

const relErr = (a: number, e: number) => (a === e ? 0 : Math.abs(a - e) / Math.max(1, Math.abs(e)))

interface Case {
  name: string
  vocab: number
  logits: Float32Array
  ref?: Float32Array
  targets: Int32Array
  topK: number
}

// The f64 statistics of every row of a case.
function reference(c: Case): LogitStats64[] {
  const rows = c.logits.length / c.vocab
  return Array.from({ length: rows }, (_, r) =>
    logitStats64(row(c.logits, r, c.vocab), {
      target: c.targets[r] >= 0 ? c.targets[r] : undefined,
      topK: c.topK,
      reference: c.ref ? row(c.ref, r, c.vocab) : undefined,
    }),
  )
}

function run(c: Case, opts: Partial<LogitStatsOptions> = {}, naive = false): LogitStatsResult {
  const fn = naive ? k.naiveLogitStats : k.logitStats
  return fn(c.logits, c.logits.length / c.vocab, c.vocab, { targets: c.targets, topK: c.topK, ref: c.ref, ...opts })
}

// Compares one native result with the f64 rows; `scale` widens every bound (naive baseline).
function check(c: Case, got: LogitStatsResult, want: LogitStats64[], what: string, looseTol?: number): void {
  const tol = (t: number) => looseTol ?? t
  const K = c.topK
  want.forEach((w, r) => {
    const at = `${what} ${c.name} row ${r}`
    expect(got.maxLogit[r], `${at}: maxLogit`).toBe(w.maxLogit)
    expect(relErr(got.logsumexp[r], w.logsumexp), `${at}: logsumexp ${got.logsumexp[r]} vs ${w.logsumexp}`).toBeLessThanOrEqual(tol(TOL.lse))
    expect(relErr(got.entropy[r], w.entropy), `${at}: entropy ${got.entropy[r]} vs ${w.entropy}`).toBeLessThanOrEqual(tol(TOL.entropy))
    if (Number.isFinite(w.margin)) {
      expect(relErr(got.margin[r], w.margin), `${at}: margin ${got.margin[r]} vs ${w.margin}`).toBeLessThanOrEqual(tol(TOL.margin))
    } else {
      expect(got.margin[r], `${at}: margin`).toBe(w.margin)
    }
    if (w.chosenLogprob !== undefined) {
      const e = relErr(got.chosenLogprob![r], w.chosenLogprob)
      expect(e, `${at}: chosenLogprob ${got.chosenLogprob![r]} vs ${w.chosenLogprob}`).toBeLessThanOrEqual(tol(TOL.logprob))
    }
    if (K > 0) {
      const ids = Array.from(got.topkIds.subarray(r * K, (r + 1) * K))
      const logits = Array.from(got.topkLogits.subarray(r * K, (r + 1) * K))
      const n = w.topK!.ids.length
      expect(ids.slice(0, n), `${at}: topkIds`).toEqual(w.topK!.ids)
      expect(logits.slice(0, n), `${at}: topkLogits`).toEqual(w.topK!.logits)
      expect(ids.slice(n), `${at}: ids past the vocabulary`).toEqual(new Array(K - n).fill(-1))
      expect(logits.slice(n), `${at}: logits past the vocabulary`).toEqual(new Array(K - n).fill(-Infinity))
    }
    if (w.kl) {
      expect(relErr(got.k1![r], w.kl.k1), `${at}: k1 ${got.k1![r]} vs ${w.kl.k1}`).toBeLessThanOrEqual(tol(TOL.k))
      expect(relErr(got.k2![r], w.kl.k2), `${at}: k2 ${got.k2![r]} vs ${w.kl.k2}`).toBeLessThanOrEqual(tol(TOL.k))
      expect(relErr(got.k3![r], w.kl.k3), `${at}: k3 ${got.k3![r]} vs ${w.kl.k3}`).toBeLessThanOrEqual(tol(TOL.k))
      if (Number.isFinite(w.kl.exact)) {
        const e = relErr(got.klExact![r], w.kl.exact)
        expect(e, `${at}: klExact ${got.klExact![r]} vs ${w.kl.exact}`).toBeLessThanOrEqual(tol(TOL.kl))
      } else {
        expect(got.klExact![r], `${at}: klExact`).toBe(w.kl.exact)
      }
    }
  })
  expectAllWritten(got, `${what} ${c.name}`)
}

function expectAllWritten(got: LogitStatsResult, what: string): void {
  for (const [name, arr] of Object.entries(got)) {
    if (arr === null) continue
    const missing = name === 'topkIds' ? (arr as Int32Array).indexOf(MISSING_ID) : (arr as Float32Array).findIndex(Number.isNaN)
    expect(missing, `${what}: ${name}[${missing}] never written`).toBe(-1)
  }
}

// Every implementation and thread layout on one case: 1 thread, 2 threads, 8 threads (rows <
// threads splits each row into vocabulary chunks), the element-at-a-time header reference.
function checkAll(c: Case): void {
  const want = reference(c)
  check(c, run(c, { threads: 1 }), want, 'fused/1')
  check(c, run(c, { threads: 2 }), want, 'fused/2')
  check(c, run(c, { threads: 8 }), want, 'fused/8')
  check(c, run(c, { threads: 2, scalar: true }), want, 'scalar')
  check(c, run(c, { threads: 2 }, true), want, 'naive', NAIVE_TOL)
}

function targetsFor(logits: Float32Array, vocab: number, seed: number): Int32Array {
  const u = mulberry32(seed)
  const rows = logits.length / vocab
  return Int32Array.from({ length: rows }, (_, r) => {
    for (;;) {
      const t = Math.floor(u() * vocab)
      if (Number.isFinite(logits[r * vocab + t])) return t
    }
  })
}

// A reference row near the policy row: y = z + N(0, 0.5²), −inf where z is −inf.
function nearby(logits: Float32Array, seed: number): Float32Array {
  const g = gaussian(mulberry32(seed))
  return logits.map((z) => (Number.isFinite(z) ? z + 0.5 * g() : z))
}

function makeCase(name: string, vocab: number, logits: Float32Array, seed: number, topK = 25): Case {
  return { name, vocab, logits, ref: nearby(logits, seed + 1), targets: targetsFor(logits, vocab, seed + 2), topK }
}

describe('logit statistics vs float64, fresh random rows', () => {
  for (const [vocab, rows] of [
    [1000, 8],
    [32000, 3],
    [151936, 2],
  ] as const) {
    it(`V = ${vocab}, ${rows} rows of N(0, 3²)`, () => {
      const seed = 1000 + vocab
      checkAll(makeCase(`normal V=${vocab}`, vocab, normalLogits(rows, vocab, seed, 3), seed))
    })
  }

  it('K = 64 and K = 0 on V = 151936 (one row: eight vocabulary chunks with 8 threads)', () => {
    const logits = normalLogits(1, 151936, 77, 2)
    checkAll(makeCase('K=64', 151936, logits, 77, 64))
    checkAll(makeCase('K=0', 151936, logits, 78, 0))
  })
})

describe('logit statistics vs float64, hostile rows', () => {
  it('many ties and a duplicated max', () => {
    const vocab = 32000
    const g = gaussian(mulberry32(5))
    const quantized = Float32Array.from({ length: 2 * vocab }, () => Math.round(2 * g()) / 2) // ~13 distinct values
    const dup = normalLogits(1, vocab, 6, 2)
    dup[vocab - 1] = dup[17] = 20 // the max twice, the lower id first; margin 0
    checkAll(makeCase('ties', vocab, quantized, 5, 64))
    checkAll(makeCase('duplicated max', vocab, dup, 6, 5))
    checkAll(makeCase('duplicated max, K=1', vocab, dup, 7, 1))
  })

  it('−inf entries: masked vocabulary, fewer finite logits than K, a single finite logit', () => {
    const vocab = 32000
    const u = mulberry32(11)
    const masked = normalLogits(1, vocab, 12, 2).map((z) => (u() < 0.3 ? -Infinity : z))
    const fewFinite = new Float32Array(vocab).fill(-Infinity)
    fewFinite[5] = 1
    fewFinite[31000] = 3
    fewFinite[20000] = 1
    const one = new Float32Array(1000).fill(-Infinity)
    one[999] = -2
    checkAll(makeCase('30% −inf', vocab, masked, 13))
    checkAll(makeCase('3 finite, K=64', vocab, fewFinite, 14, 64))
    checkAll(makeCase('1 finite', 1000, one, 15, 4))
  })

  it('magnitudes of 1e4', () => {
    const vocab = 32000
    const u = mulberry32(21)
    const wide = Float32Array.from({ length: vocab }, () => (2 * u() - 1) * 1e4)
    const offset = normalLogits(1, vocab, 22, 1).map((z) => z + 1e4)
    const negative = normalLogits(1, vocab, 23, 1).map((z) => z - 1e4)
    checkAll(makeCase('uniform ±1e4', vocab, wide, 21))
    checkAll(makeCase('1e4 + N(0,1)', vocab, offset, 22))
    checkAll(makeCase('−1e4 + N(0,1)', vocab, negative, 23))
  })

  it('a vocabulary smaller than K, and a single-token vocabulary', () => {
    const tiny = normalLogits(3, 10, 31, 1)
    checkAll(makeCase('V=10, K=16', 10, tiny, 31, 16))
    const single: Case = { name: 'V=1', vocab: 1, logits: Float32Array.of(0.5, -3), targets: Int32Array.of(0, 0), topK: 2 }
    const got = run(single)
    expect(Array.from(got.logsumexp)).toEqual([0.5, -3])
    expect(Array.from(got.entropy)).toEqual([0, 0])
    expect(Array.from(got.margin)).toEqual([Infinity, Infinity])
    expect(Array.from(got.chosenLogprob!)).toEqual([0, 0])
    expect(Array.from(got.topkIds)).toEqual([0, -1, 0, -1])
  })
})

describe('logit statistics: semantics at the edges', () => {
  it('KL(p‖q) is +inf where the reference gives a zero probability to a possible token', () => {
    const vocab = 1000
    const z = normalLogits(1, vocab, 41, 1)
    const y = nearby(z, 42)
    y[123] = -Infinity
    const got = k.logitStats(z, 1, vocab, { targets: Int32Array.of(5), ref: y })
    expect(got.klExact![0]).toBe(Infinity)
    expect(Number.isFinite(got.k1![0])).toBe(true)
  })

  it('target −1: chosenLogprob and k1..k3 are NaN, everything else is written', () => {
    const vocab = 5000
    const z = normalLogits(2, vocab, 51, 1)
    const got = k.logitStats(z, 2, vocab, { targets: Int32Array.of(-1, 7), ref: nearby(z, 52), topK: 3 })
    expect(got.chosenLogprob![0]).toBeNaN()
    expect(got.k1![0]).toBeNaN()
    expect(got.k3![0]).toBeNaN()
    expect(Number.isFinite(got.chosenLogprob![1])).toBe(true)
    expect(Number.isFinite(got.klExact![0])).toBe(true)
    expect(Number.isFinite(got.entropy[0])).toBe(true)
  })

  it('a NaN logit makes logsumexp and entropy NaN instead of vanishing', () => {
    const vocab = 40000
    for (const at of [0, 20001, vocab - 1]) {
      const z = normalLogits(1, vocab, 61, 1)
      z[at] = NaN
      for (const threads of [1, 8]) {
        const got = k.logitStats(z, 1, vocab, { topK: 4, threads })
        expect(got.logsumexp[0], `NaN at ${at}, ${threads} threads`).toBeNaN()
        expect(got.entropy[0], `NaN at ${at}, ${threads} threads`).toBeNaN()
        expect(Array.from(got.topkIds)).not.toContain(at)
      }
    }
  })

  it('rejects bad arguments with a typed error', () => {
    const z = new Float32Array(20)
    expect(() => k.logitStats(z, 2, 11)).toThrow(RangeError)
    expect(() => k.logitStats(z, 2, 10, { topK: 65 })).toThrow(RangeError)
    expect(() => k.logitStats(z, 2, 10, { targets: Int32Array.of(0, 10) })).toThrow(RangeError)
    expect(() => k.logitStats(z, 2, 10, { targets: Int32Array.of(0) })).toThrow(RangeError)
    expect(() => k.logitStats(z, 2, 10, { ref: new Float32Array(19) })).toThrow(RangeError)
    expect(() => k.logitStats(new Float64Array(20) as unknown as Float32Array, 2, 10)).toThrow(TypeError)
  })
})

describe('SIMD expf', () => {
  // ulp of the float32 nearest to x.
  function ulp(x: number): number {
    const f = Math.abs(Math.fround(x))
    if (f < 2 ** -126) return 2 ** -149
    return 2 ** (Math.floor(Math.log2(f)) - 23)
  }

  it('is within 2 ulp of exp on [−87.3, 88.3], 0 below −88, +inf above 88.4, NaN for NaN', () => {
    const n = 200001
    const x = Float32Array.from({ length: n }, (_, i) => -87.3 + (175.6 * i) / (n - 1))
    const y = k.expf(x)
    let worst = 0
    let at = 0
    for (let i = 0; i < n; i++) {
      const e = Math.exp(x[i])
      const err = Math.abs(y[i] - e) / ulp(e)
      if (err > worst) {
        worst = err
        at = x[i]
      }
    }
    expect(worst, `worst at x = ${at}`).toBeLessThanOrEqual(2)
    const edges = k.expf(Float32Array.of(-Infinity, -1000, -88.5, 0, 100, Infinity, NaN))
    expect(Array.from(edges.subarray(0, 6))).toEqual([0, 0, 0, 1, Infinity, Infinity])
    expect(edges[6]).toBeNaN()
  })
})

describe('readBytes (the read-only bandwidth floor of the benches)', () => {
  it('reads every byte: its XOR of the 32-bit words matches a scalar fold, on 1 and 2 threads, across chunk edges', async () => {
    const k = await kernels()
    const random = mulberry32(4242)
    for (const words of [2, 1 << 16, (1 << 18) / 4 + 6, 3 * (1 << 16) + 2]) {
      const buf = new Uint32Array(words)
      for (let i = 0; i < words; i++) buf[i] = Math.floor(random() * 2 ** 32)
      let fold = 0
      for (const w of buf) fold ^= w
      for (const threads of [1, 2]) expect(k.readBytes(buf, threads), `${words} words, ${threads} threads`).toBe(fold >>> 0)
      buf[words - 1] ^= 0x80000000 // one bit of the last word: the result moves with it
      expect(k.readBytes(buf, 2)).toBe((fold ^ 0x80000000) >>> 0)
    }
    expect(() => k.readBytes(new Uint8Array(12))).toThrow(RangeError)
  })
})
