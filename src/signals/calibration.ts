// Offline UID scoring (UID §4.1 "Offline setting", Appendix A.1, B.1): a robust entropy scale and
// empirical CDFs are fitted once on a calibration split (no correctness labels), frozen, saved,
// and used to map every later response's features to [0, 1]. Self-Certainty is calibrated the
// same way from its response-token mean.

import { readFile } from 'node:fs/promises'
import { writeJsonAtomic } from '../util/atomic.js'
import { median } from '../util/math.js'
import { uidConj, uidMix, type UidFeatures } from './uid.js'

/** MAD-to-σ factor for normal data, used in UID Eq. 13. */
export const MAD_TO_SIGMA = 1.4826
/** Floor of the robust scale (UID Eq. 13). */
export const SCALE_FLOOR = 1e-3

// UID Eq. 13: s = max(1.4826 · MAD(𝓗), 1e-3), 𝓗 = pooled bin entropies of eligible calibration responses.
export function robustScale(pooledBins: ArrayLike<number>): number {
  if (pooledBins.length === 0) throw new RangeError('robust scale needs at least one bin entropy')
  const med = median(pooledBins)
  const dev = new Float64Array(pooledBins.length)
  for (let i = 0; i < pooledBins.length; i++) dev[i] = Math.abs(pooledBins[i] - med)
  return Math.max(MAD_TO_SIGMA * median(dev), SCALE_FLOOR)
}

// UID Eq. 15: unit-threshold Huber loss ρ₁(d) = d²/2 for |d| ≤ 1, |d| − 1/2 otherwise.
export function huber1(d: number): number {
  const a = Math.abs(d)
  return a <= 1 ? 0.5 * d * d : a - 0.5
}

// UID Eq. 14–15: G^off = (1/B) Σ_b ((h_b − h̄)/s)²;  S^off = −(1/(B−1)) Σ_b ρ₁((h_{b+1} − h_b)/s).
export function offlineUidFeatures(bins: ArrayLike<number>, scale: number): UidFeatures {
  const B = bins.length
  if (B < 2) throw new RangeError('UID features need at least 2 bins')
  if (!(scale > 0)) throw new RangeError(`scale must be positive, got ${scale}`)
  let m = 0
  for (let b = 0; b < B; b++) m += bins[b]
  m /= B
  let g = 0
  for (let b = 0; b < B; b++) {
    const z = (bins[b] - m) / scale
    g += z * z
  }
  let s = 0
  for (let b = 0; b + 1 < B; b++) s += huber1((bins[b + 1] - bins[b]) / scale)
  return { G: g / B, S: 0 - s / (B - 1) }
}

// UID A.1: F̂(x) = (1/M) Σ_m (1[x_m < x] + ½·1[x_m = x]) over ascending-sorted calibration values.
export function empiricalCdfMidrank(sorted: ArrayLike<number>, x: number): number {
  const M = sorted.length
  if (M === 0) throw new RangeError('empirical CDF needs at least one calibration value')
  if (Number.isNaN(x)) return NaN
  // lower = #{x_m < x}, upper = #{x_m ≤ x}
  let lo = 0
  let hi = M
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (sorted[mid] < x) lo = mid + 1
    else hi = mid
  }
  const lower = lo
  hi = M
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (sorted[mid] <= x) lo = mid + 1
    else hi = mid
  }
  return (lower + 0.5 * (lo - lower)) / M
}

/** A frozen offline calibration: the scale and the sorted calibration feature values. */
export interface UidCalibration {
  format: 'autodidact.uid-calibration'
  version: 1
  bins: number
  /** Robust scale s (UID Eq. 13). */
  scale: number
  /** Number of calibration responses. */
  count: number
  /** Ascending G^off values of the calibration responses. */
  G: number[]
  /** Ascending S^off values. */
  S: number[]
  /** Ascending response-mean Self-Certainty values (empty when none was supplied). */
  selfCertainty: number[]
}

export interface CalibrationSample {
  /** The response's B bin entropies (from `entropyBins`; eligible responses only). */
  bins: ArrayLike<number>
  /** The response-token mean of C_t, when Self-Certainty is calibrated as well. */
  selfCertainty?: number
}

/**
 * Fit the offline calibration (UID B.1 "Offline scoring"): pool the bins of the eligible
 * calibration responses for the robust scale, then record each response's G^off, S^off and mean
 * Self-Certainty as the empirical distributions later scores are ranked against.
 */
export function fitUidCalibration(samples: readonly CalibrationSample[]): UidCalibration {
  if (samples.length === 0) throw new RangeError('calibration needs at least one eligible response')
  const B = samples[0].bins.length
  const pooled: number[] = []
  for (const [i, s] of samples.entries()) {
    if (s.bins.length !== B) throw new RangeError(`calibration sample ${i} has ${s.bins.length} bins, expected ${B}`)
    for (let b = 0; b < B; b++) {
      if (!Number.isFinite(s.bins[b])) throw new RangeError(`calibration sample ${i} bin ${b} is not finite`)
      pooled.push(s.bins[b])
    }
  }
  const scale = robustScale(pooled)
  const G: number[] = []
  const S: number[] = []
  const sc: number[] = []
  for (const s of samples) {
    const f = offlineUidFeatures(s.bins, scale)
    G.push(f.G)
    S.push(f.S)
    if (s.selfCertainty !== undefined && Number.isFinite(s.selfCertainty)) sc.push(s.selfCertainty)
  }
  const asc = (a: number, b: number) => a - b
  return {
    format: 'autodidact.uid-calibration',
    version: 1,
    bins: B,
    scale,
    count: samples.length,
    G: G.sort(asc),
    S: S.sort(asc),
    selfCertainty: sc.sort(asc),
  }
}

export interface OfflineUidScore extends UidFeatures {
  /** u = F_G(G^off) (UID Eq. 3). */
  u: number
  /** v = F_S(S^off) (UID Eq. 3). */
  v: number
  /** UID-Conj = u·v. */
  conj: number
  /** UID-Mix = (u + v)/2. */
  mix: number
  /** F_SC(SC) when a Self-Certainty mean was given and the calibration has SC values, else NaN. */
  selfCertainty: number
}

/** Score one eligible response with a frozen calibration (UID Eq. 3 with Eq. 13–15). */
export function scoreOfflineUid(cal: UidCalibration, bins: ArrayLike<number>, selfCertainty?: number): OfflineUidScore {
  if (bins.length !== cal.bins) throw new RangeError(`response has ${bins.length} bins, calibration has ${cal.bins}`)
  const f = offlineUidFeatures(bins, cal.scale)
  const u = empiricalCdfMidrank(cal.G, f.G)
  const v = empiricalCdfMidrank(cal.S, f.S)
  const sc =
    selfCertainty !== undefined && cal.selfCertainty.length > 0
      ? empiricalCdfMidrank(cal.selfCertainty, selfCertainty)
      : NaN
  return { ...f, u, v, conj: uidConj(u, v), mix: uidMix(u, v), selfCertainty: sc }
}

function isSortedFinite(a: unknown): a is number[] {
  if (!Array.isArray(a)) return false
  for (let i = 0; i < a.length; i++) {
    if (typeof a[i] !== 'number' || !Number.isFinite(a[i])) return false
    if (i > 0 && a[i] < a[i - 1]) return false
  }
  return true
}

/** Check a parsed calibration object; throws a TypeError naming the first bad field. */
export function validateUidCalibration(x: unknown): UidCalibration {
  const c = x as Partial<UidCalibration> | null
  if (c === null || typeof c !== 'object') throw new TypeError('UID calibration must be an object')
  if (c.format !== 'autodidact.uid-calibration') throw new TypeError('not a UID calibration (format field)')
  if (c.version !== 1) throw new TypeError(`unsupported UID calibration version ${String(c.version)}`)
  if (!Number.isInteger(c.bins) || (c.bins as number) < 2) throw new TypeError('UID calibration: bad bins')
  if (typeof c.scale !== 'number' || !(c.scale > 0) || !Number.isFinite(c.scale)) {
    throw new TypeError('UID calibration: bad scale')
  }
  if (!Number.isInteger(c.count) || (c.count as number) < 1) throw new TypeError('UID calibration: bad count')
  for (const k of ['G', 'S', 'selfCertainty'] as const) {
    if (!isSortedFinite(c[k])) throw new TypeError(`UID calibration: ${k} must be an ascending array of finite numbers`)
  }
  if (c.G!.length !== c.count || c.S!.length !== c.count) {
    throw new TypeError('UID calibration: G and S must hold one value per calibration response')
  }
  return c as UidCalibration
}

/** Save a calibration as JSON (atomic: temp file + rename). */
export async function saveUidCalibration(path: string, cal: UidCalibration): Promise<void> {
  validateUidCalibration(cal)
  await writeJsonAtomic(path, cal)
}

/** Load and validate a calibration saved by `saveUidCalibration`. */
export async function loadUidCalibration(path: string): Promise<UidCalibration> {
  const text = await readFile(path, 'utf8')
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch (err) {
    throw new TypeError(`UID calibration ${path} is not valid JSON: ${(err as Error).message}`)
  }
  return validateUidCalibration(parsed)
}

