// Small numeric helpers shared by the toolkit. Plain loops over ArrayLike<number>, float64
// accumulation, no allocation beyond what the result needs.

export type NumericArray = ArrayLike<number>

export function sum(x: NumericArray): number {
  let s = 0
  for (let i = 0; i < x.length; i++) s += x[i]
  return s
}

/** Arithmetic mean; NaN for an empty array. */
export function mean(x: NumericArray): number {
  return x.length === 0 ? NaN : sum(x) / x.length
}

/** Population variance (divide by n); NaN for an empty array. */
export function populationVariance(x: NumericArray): number {
  const n = x.length
  if (n === 0) return NaN
  const m = mean(x)
  let s = 0
  for (let i = 0; i < n; i++) {
    const d = x[i] - m
    s += d * d
  }
  return s / n
}

/** Sample variance (divide by n − 1); 0 for n = 1 by convention here, NaN for n = 0. */
export function sampleVariance(x: NumericArray): number {
  const n = x.length
  if (n === 0) return NaN
  if (n === 1) return 0
  const m = mean(x)
  let s = 0
  for (let i = 0; i < n; i++) {
    const d = x[i] - m
    s += d * d
  }
  return s / (n - 1)
}

/** Standard deviation with `ddof` delta degrees of freedom (0 = population, 1 = sample). */
export function std(x: NumericArray, ddof: 0 | 1 = 0): number {
  return Math.sqrt(ddof === 1 ? sampleVariance(x) : populationVariance(x))
}

/** Median (average of the two middle values for even n, like numpy); NaN for empty input. */
export function median(x: NumericArray): number {
  const n = x.length
  if (n === 0) return NaN
  const a = Float64Array.from(x).sort()
  const h = n >> 1
  return n % 2 === 1 ? a[h] : 0.5 * (a[h - 1] + a[h])
}

/**
 * Quantile of an ascending-sorted array by linear interpolation between order statistics
 * (Hyndman–Fan type 7, numpy's default): h = (n − 1)·q.
 */
export function quantileSorted(sorted: NumericArray, q: number): number {
  const n = sorted.length
  if (n === 0) return NaN
  if (!(q >= 0 && q <= 1)) throw new RangeError(`quantile must be in [0, 1], got ${q}`)
  const h = (n - 1) * q
  const lo = Math.floor(h)
  const hi = Math.min(lo + 1, n - 1)
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo])
}

/** Clamp x into [lo, hi]. NaN stays NaN. */
export function clip(x: number, lo: number, hi: number): number {
  return x < lo ? lo : x > hi ? hi : x
}

/** log Σ exp(x_i) over x[offset .. offset+len), stable; −∞ when every entry is −∞ or len = 0. */
export function logSumExp(x: NumericArray, offset = 0, len = x.length - offset): number {
  let m = -Infinity
  for (let i = 0; i < len; i++) {
    const v = x[offset + i]
    if (v > m) m = v
  }
  if (m === -Infinity) return -Infinity
  if (m === Infinity) return Infinity
  let s = 0
  for (let i = 0; i < len; i++) s += Math.exp(x[offset + i] - m)
  return m + Math.log(s)
}

/** Throws a RangeError naming the first non-finite entry. */
export function assertFinite(x: NumericArray, what: string): void {
  for (let i = 0; i < x.length; i++) {
    if (!Number.isFinite(x[i])) throw new RangeError(`${what}[${i}] is not finite (${x[i]})`)
  }
}
