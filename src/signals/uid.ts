// UID trajectory scores (UID §4.1, Appendix A.1, B.1): the entropy trajectory of a response is
// cut into B = 32 relative-position bins; global variation and local smoothness of the binned
// trajectory are ranked within the prompt's group (online) and combined by product (UID-Conj) or
// mean (UID-Mix). Offline scoring with a frozen calibration lives in calibration.ts.

import { checkMask, compactMasked, type TokenMask } from './mask.js'
import { topKRows, topKTokenStats, UID_TOP_K } from './topk.js'

/** Number of relative-position bins (UID B.1). */
export const UID_BINS = 32
/** UID variants need at least this many scored tokens (UID B.1, Eligibility). */
export const UID_MIN_TOKENS = 32

/** Is a response with `scoredTokens` valid positions eligible for UID scoring (UID B.1)? */
export function isUidEligible(scoredTokens: number, minTokens = UID_MIN_TOKENS): boolean {
  return scoredTokens >= minTokens
}

// UID A.1: bin boundaries b_k = ⌊kT/B⌋, k = 0..B; bin k covers positions b_{k−1}+1 .. b_k (1-based).
export function binBoundaries(T: number, B = UID_BINS): Int32Array {
  if (!Number.isInteger(T) || T < 0) throw new RangeError(`T must be a non-negative integer, got ${T}`)
  if (!Number.isInteger(B) || B < 1) throw new RangeError(`B must be a positive integer, got ${B}`)
  const b = new Int32Array(B + 1)
  for (let k = 0; k <= B; k++) b[k] = Math.floor((k * T) / B)
  return b
}

// UID A.1: h_k = mean of H_t over bin k of the scored positions. Returns null when the response
// has fewer than `minTokens` (default B) scored positions, where some bins would be empty.
export function entropyBins(
  entropies: ArrayLike<number>,
  mask?: TokenMask,
  opts: { bins?: number; minTokens?: number } = {},
): Float64Array | null {
  const B = opts.bins ?? UID_BINS
  const minTokens = Math.max(opts.minTokens ?? UID_MIN_TOKENS, B)
  const H = compactMasked(entropies, mask)
  const T = H.length
  if (T < minTokens) return null
  const b = binBoundaries(T, B)
  const h = new Float64Array(B)
  for (let k = 1; k <= B; k++) {
    let s = 0
    for (let t = b[k - 1]; t < b[k]; t++) s += H[t]
    h[k - 1] = s / (b[k] - b[k - 1])
  }
  return h
}

export interface UidFeatures {
  /** Global variation G (larger = more entropy variation across the response). */
  G: number
  /** Local smoothness S (larger = smoother adjacent-bin changes; always ≤ 0). */
  S: number
}

// UID Eq. 10: h̄_i = (1/B) Σ_b h_{i,b};  h̃_{i,b} = h_{i,b} / max(|h̄_i|, 1e-8).
export function meanNormalizeBins(bins: ArrayLike<number>): Float64Array {
  const B = bins.length
  let s = 0
  for (let b = 0; b < B; b++) s += bins[b]
  const denom = Math.max(Math.abs(s / B), 1e-8)
  const out = new Float64Array(B)
  for (let b = 0; b < B; b++) out[b] = bins[b] / denom
  return out
}

// UID Eq. 11: G^on = population Var_b(h̃_b);  S^on = −(1/(B−1)) Σ_b |h̃_{b+1} − h̃_b|.
export function onlineUidFeatures(bins: ArrayLike<number>): UidFeatures {
  const B = bins.length
  if (B < 2) throw new RangeError('UID features need at least 2 bins')
  const h = meanNormalizeBins(bins)
  let m = 0
  for (let b = 0; b < B; b++) m += h[b]
  m /= B
  let v = 0
  for (let b = 0; b < B; b++) v += (h[b] - m) * (h[b] - m)
  let d = 0
  for (let b = 0; b + 1 < B; b++) d += Math.abs(h[b + 1] - h[b])
  return { G: v / B, S: 0 - d / (B - 1) }
}

// UID Eq. 12: Q_x(z_i) = (1/|E|) Σ_{j∈E} (1[z_j < z_i] + ½·1[z_j = z_i]), the within-group midrank.
// Computed in O(n log n) by sorting; values lie in [1/(2n), 1 − 1/(2n)] ⊂ (0, 1).
export function midrankQuantiles(values: ArrayLike<number>): Float64Array {
  const n = values.length
  const out = new Float64Array(n)
  if (n === 0) return out
  for (let i = 0; i < n; i++) {
    if (Number.isNaN(values[i])) throw new RangeError(`midrank input [${i}] is NaN`)
  }
  const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => values[a] - values[b] || a - b)
  let start = 0
  while (start < n) {
    let end = start + 1
    while (end < n && values[order[end]] === values[order[start]]) end++
    // `start` values are strictly smaller; the run of (end − start) equal values counts half
    const q = (start + 0.5 * (end - start)) / n
    for (let r = start; r < end; r++) out[order[r]] = q
    start = end
  }
  return out
}

// UID Eq. 2: UID-Conj q = u·v (product of the global and local quantiles).
export function uidConj(u: number, v: number): number {
  return u * v
}

// UID Appendix D.2: UID-Mix q = (u + v) / 2.
export function uidMix(u: number, v: number): number {
  return 0.5 * (u + v)
}

export type UidCombine = 'conj' | 'mix'

export interface GroupScores {
  /** Score per response; ineligible responses get 0 (UID B.1). */
  scores: Float64Array
  /** 1 where the response was eligible and ranked. */
  eligible: Uint8Array
}

export interface UidGroupScores extends GroupScores {
  /** Within-group quantiles of G and S (NaN for ineligible responses). */
  u: Float64Array
  v: Float64Array
  G: Float64Array
  S: Float64Array
}

/**
 * Online UID scores for one prompt group (UID §4.1, Eq. 1–2, B.1). `bins[i]` is the output of
 * `entropyBins` for response i (null = ineligible). Eligible responses are ranked among
 * themselves regardless of their answers; ineligible ones score 0 and are not ranked.
 */
export function uidGroupScoresOnline(
  bins: ReadonlyArray<ArrayLike<number> | null>,
  combine: UidCombine = 'conj',
): UidGroupScores {
  const n = bins.length
  const scores = new Float64Array(n)
  const eligible = new Uint8Array(n)
  const u = new Float64Array(n).fill(NaN)
  const v = new Float64Array(n).fill(NaN)
  const G = new Float64Array(n).fill(NaN)
  const S = new Float64Array(n).fill(NaN)
  const idx: number[] = []
  for (let i = 0; i < n; i++) {
    const b = bins[i]
    if (b === null) continue
    const f = onlineUidFeatures(b)
    G[i] = f.G
    S[i] = f.S
    eligible[i] = 1
    idx.push(i)
  }
  const qG = midrankQuantiles(idx.map((i) => G[i]))
  const qS = midrankQuantiles(idx.map((i) => S[i]))
  idx.forEach((i, r) => {
    u[i] = qG[r]
    v[i] = qS[r]
    scores[i] = combine === 'conj' ? uidConj(qG[r], qS[r]) : uidMix(qG[r], qS[r])
  })
  return { scores, eligible, u, v, G, S }
}

/**
 * Online Self-Certainty scores for one prompt group (UID B.1, C.3): within-group midranks of the
 * response-token mean of C_t. `scMeans[i]` null or NaN, or fewer than `minTokens` scored tokens
 * (when `tokenCounts` is given), makes response i ineligible (score 0).
 */
export function selfCertaintyGroupScoresOnline(
  scMeans: ReadonlyArray<number | null>,
  opts: { tokenCounts?: ArrayLike<number>; minTokens?: number } = {},
): GroupScores {
  const n = scMeans.length
  const minTokens = opts.minTokens ?? 1
  if (opts.tokenCounts !== undefined && opts.tokenCounts.length !== n) {
    throw new RangeError('tokenCounts length differs from the group size')
  }
  const scores = new Float64Array(n)
  const eligible = new Uint8Array(n)
  const idx: number[] = []
  for (let i = 0; i < n; i++) {
    const c = scMeans[i]
    if (c === null || Number.isNaN(c)) continue
    if (opts.tokenCounts !== undefined && opts.tokenCounts[i] < minTokens) continue
    eligible[i] = 1
    idx.push(i)
  }
  const q = midrankQuantiles(idx.map((i) => scMeans[i] as number))
  idx.forEach((i, r) => (scores[i] = q[r]))
  return { scores, eligible }
}

export interface ResponseTrajectory {
  /** Number of scored tokens T (positions kept by the mask). */
  tokens: number
  /** The B bin entropies h_k, or null when T is below the UID eligibility threshold. */
  bins: Float64Array | null
  /** Response-token mean of the top-k Self-Certainty C_t; NaN when no token is scored. */
  selfCertainty: number
}

/**
 * Everything UID scoring needs from one response (UID B.1): renormalize each position's top-k
 * logits (k = min(K, 25) by default), then bin the entropies of the scored positions and average
 * their Self-Certainty. `topKLogits` is row-major [T × K] over all generated positions.
 */
export function responseTrajectory(
  topKLogits: ArrayLike<number>,
  K: number,
  mask?: TokenMask,
  opts: { k?: number; bins?: number; minTokens?: number } = {},
): ResponseTrajectory {
  const T = topKRows(topKLogits, K)
  checkMask(mask, T)
  const { entropy, selfCertainty } = topKTokenStats(topKLogits, K, { k: opts.k ?? Math.min(K, UID_TOP_K) })
  const sc = compactMasked(selfCertainty, mask)
  let s = 0
  for (let i = 0; i < sc.length; i++) s += sc[i]
  return {
    tokens: sc.length,
    bins: entropyBins(entropy, mask, opts),
    selfCertainty: sc.length === 0 ? NaN : s / sc.length,
  }
}
