// Paired prompt-cluster percentile bootstrap for the difference between two methods (UID
// Appendix D.4). Prompts are the resampling units: each resampled prompt keeps all of its
// responses from both methods, and the same prompt indices are used for both, which preserves
// pairing. Prompts are resampled with replacement within each benchmark (benchmark identities and
// sizes stay fixed); responses and benchmarks are not resampled. The benchmark-macro estimate
// (Eq. 20, primary) and the prompt-weighted estimate (Eq. 21, secondary) use the same draws.

import { quantileSorted } from '../util/math.js'
import { Rng, type Seed } from '../util/prng.js'

export interface BenchmarkOutcomes {
  name: string
  /** Per prompt, the scores of method A's responses (e.g. 0/1 correctness of 5 samples). */
  a: ReadonlyArray<ArrayLike<number>>
  /** Per prompt, the scores of method B's responses; same prompts in the same order. */
  b: ReadonlyArray<ArrayLike<number>>
}

export interface Interval {
  estimate: number
  lo: number
  hi: number
}

export interface BootstrapResult {
  /** Benchmark-macro difference (UID Eq. 20) with its percentile interval. */
  macro: Interval
  /** Prompt-weighted difference (UID Eq. 21). */
  promptWeighted: Interval
  perBenchmark: Array<Interval & { name: string; prompts: number }>
  replicates: number
  /** Replicate values of the macro estimate, ascending (only with `keepDistribution`). */
  macroDistribution?: Float64Array
}

export interface BootstrapOptions {
  /** Number of bootstrap replicates (UID D.4: 100,000). */
  replicates?: number
  seed?: Seed
  /** Two-sided level: the interval is the [α/2, 1 − α/2] percentiles (default 0.05 → 95%). */
  alpha?: number
  /** Multiplier of the differences (default 100: percentage points, UID Eq. 19). */
  scale?: number
  keepDistribution?: boolean
}

// UID Eq. 19: d_bq = scale·(mean_s y^A_bqs − mean_s y^B_bqs), the prompt-level paired difference
// (= 100/5 Σ_s (y^A − y^B) with five responses per method).
export function promptDifference(a: ArrayLike<number>, b: ArrayLike<number>, scale = 100): number {
  if (a.length === 0 || b.length === 0) throw new RangeError('each prompt needs at least one response per method')
  let sa = 0
  for (let i = 0; i < a.length; i++) sa += a[i]
  let sb = 0
  for (let i = 0; i < b.length; i++) sb += b[i]
  return scale * (sa / a.length - sb / b.length)
}

// UID Eq. 20: Δ_macro = (1/B) Σ_b Δ_b.
export function macroAverage(perBenchmark: ArrayLike<number>): number {
  let s = 0
  for (let i = 0; i < perBenchmark.length; i++) s += perBenchmark[i]
  return s / perBenchmark.length
}

// UID Eq. 21: Δ_prompt = Σ_b (Q_b / Σ_j Q_j)·Δ_b.
export function promptWeightedAverage(perBenchmark: ArrayLike<number>, prompts: ArrayLike<number>): number {
  let s = 0
  let q = 0
  for (let i = 0; i < perBenchmark.length; i++) {
    s += prompts[i] * perBenchmark[i]
    q += prompts[i]
  }
  return s / q
}

/** Paired prompt-cluster percentile bootstrap of method A minus method B (UID D.4). */
export function pairedPromptBootstrap(
  benchmarks: readonly BenchmarkOutcomes[],
  opts: BootstrapOptions = {},
): BootstrapResult {
  const R = opts.replicates ?? 100_000
  const alpha = opts.alpha ?? 0.05
  const scale = opts.scale ?? 100
  if (!Number.isInteger(R) || R < 1) throw new RangeError(`replicates must be a positive integer, got ${R}`)
  if (!(alpha > 0 && alpha < 1)) throw new RangeError(`alpha must be in (0, 1), got ${alpha}`)
  if (benchmarks.length === 0) throw new RangeError('bootstrap needs at least one benchmark')
  const d: Float64Array[] = benchmarks.map((bm) => {
    if (bm.a.length !== bm.b.length) {
      throw new RangeError(`benchmark "${bm.name}": ${bm.a.length} prompts for A but ${bm.b.length} for B`)
    }
    if (bm.a.length === 0) throw new RangeError(`benchmark "${bm.name}" has no prompts`)
    return Float64Array.from(bm.a, (ya, q) => promptDifference(ya, bm.b[q], scale))
  })
  const Q = d.map((x) => x.length)
  const Bn = d.length
  const point = d.map((x) => macroAverage(x))
  const rng = new Rng(opts.seed ?? 0)
  const macro = new Float64Array(R)
  const weighted = new Float64Array(R)
  const per = d.map(() => new Float64Array(R))
  const delta = new Float64Array(Bn)
  for (let r = 0; r < R; r++) {
    for (let b = 0; b < Bn; b++) {
      const x = d[b]
      const n = x.length
      let s = 0
      for (let k = 0; k < n; k++) s += x[rng.nextInt(n)]
      delta[b] = s / n
      per[b][r] = delta[b]
    }
    macro[r] = macroAverage(delta)
    weighted[r] = promptWeightedAverage(delta, Q)
  }
  const interval = (estimate: number, reps: Float64Array): Interval => {
    reps.sort()
    return { estimate, lo: quantileSorted(reps, alpha / 2), hi: quantileSorted(reps, 1 - alpha / 2) }
  }
  const result: BootstrapResult = {
    macro: interval(macroAverage(point), macro),
    promptWeighted: interval(promptWeightedAverage(point, Q), weighted),
    perBenchmark: benchmarks.map((bm, b) => ({ name: bm.name, prompts: Q[b], ...interval(point[b], per[b]) })),
    replicates: R,
  }
  if (opts.keepDistribution) result.macroDistribution = macro
  return result
}
