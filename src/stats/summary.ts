// Summary statistics of per-item outcomes: a seeded percentile bootstrap of a mean, AUROC and
// Pearson correlation.
import { Rng } from '../util/prng.js'
import type { Interval } from './bootstrap.js'

/** Mean of per-question values with a seeded percentile bootstrap over questions (95% by default). */
export function bootstrapMean(values: ArrayLike<number>, opts: { replicates?: number; seed?: number | string; alpha?: number } = {}): Interval {
  const n = values.length
  if (n === 0) return { estimate: NaN, lo: NaN, hi: NaN }
  let s = 0
  for (let i = 0; i < n; i++) s += values[i]
  const B = opts.replicates ?? 2000
  const alpha = opts.alpha ?? 0.05
  const rng = new Rng(opts.seed ?? 'toymodel-bootstrap')
  const reps = new Float64Array(B)
  for (let b = 0; b < B; b++) {
    let t = 0
    for (let i = 0; i < n; i++) t += values[rng.nextInt(n)]
    reps[b] = t / n
  }
  reps.sort()
  const q = (p: number) => reps[Math.min(B - 1, Math.max(0, Math.round(p * (B - 1))))]
  return { estimate: s / n, lo: q(alpha / 2), hi: q(1 - alpha / 2) }
}

/** Wilson score interval of a proportion p̂ of n trials (z = 1.96: 95%), for when only the rate and n are known. */
export function wilsonInterval(p: number, n: number, z = 1.959963984540054): Interval {
  if (!(n > 0) || !(p >= 0 && p <= 1)) return { estimate: p, lo: NaN, hi: NaN }
  const z2 = z * z
  const centre = (p + z2 / (2 * n)) / (1 + z2 / n)
  const half = (z / (1 + z2 / n)) * Math.sqrt((p * (1 - p)) / n + z2 / (4 * n * n))
  return { estimate: p, lo: Math.max(0, centre - half), hi: Math.min(1, centre + half) }
}

/** Area under the ROC curve of `scores` for positives vs negatives (Mann–Whitney U, ties count ½). NaN if a class is empty. */
export function auroc(positives: readonly number[], negatives: readonly number[]): number {
  if (positives.length === 0 || negatives.length === 0) return NaN
  const all = [...positives.map((v) => ({ v, p: 1 })), ...negatives.map((v) => ({ v, p: 0 }))].sort((a, b) => a.v - b.v)
  let rankSumPos = 0
  for (let i = 0; i < all.length; ) {
    let j = i
    while (j < all.length && all[j].v === all[i].v) j++
    const mid = (i + 1 + j) / 2
    for (let k = i; k < j; k++) if (all[k].p) rankSumPos += mid
    i = j
  }
  const P = positives.length
  return (rankSumPos - (P * (P + 1)) / 2) / (P * negatives.length)
}


/** The summary of a list of numbers in a metrics line (DIS Table 2 reports mean and std per batch). */
export interface Spread {
  mean: number
  /** Population standard deviation. */
  std: number
  min: number
  max: number
  /** Finite values summarized (non-finite ones are left out). */
  n: number
}

/** Mean, population std, min and max of the finite values of `xs` (NaN for none). */
export function spread(xs: ArrayLike<number>): Spread {
  let n = 0
  let total = 0
  let min = Infinity
  let max = -Infinity
  for (let i = 0; i < xs.length; i++) {
    const x = xs[i]
    if (!Number.isFinite(x)) continue
    n++
    total += x
    if (x < min) min = x
    if (x > max) max = x
  }
  if (!n) return { mean: NaN, std: NaN, min: NaN, max: NaN, n: 0 }
  const mean = total / n
  let ss = 0
  for (let i = 0; i < xs.length; i++) if (Number.isFinite(xs[i])) ss += (xs[i] - mean) ** 2
  return { mean, std: Math.sqrt(ss / n), min, max, n }
}

/**
 * Pearson correlation of paired values, over the pairs where both are finite; NaN when fewer than
 * two pairs remain or either side is constant (no linear relation can be measured).
 */
export function pearson(xs: ArrayLike<number>, ys: ArrayLike<number>): number {
  if (xs.length !== ys.length) throw new RangeError(`pearson: ${xs.length} x values but ${ys.length} y values`)
  const keep: number[] = []
  for (let i = 0; i < xs.length; i++) if (Number.isFinite(xs[i]) && Number.isFinite(ys[i])) keep.push(i)
  const n = keep.length
  if (n < 2) return NaN
  let mx = 0
  let my = 0
  for (const i of keep) [mx, my] = [mx + xs[i] / n, my + ys[i] / n]
  let sxy = 0
  let sxx = 0
  let syy = 0
  for (const i of keep) {
    const [dx, dy] = [xs[i] - mx, ys[i] - my]
    sxy += dx * dy
    sxx += dx * dx
    syy += dy * dy
  }
  return sxx > 0 && syy > 0 ? sxy / Math.sqrt(sxx * syy) : NaN
}
