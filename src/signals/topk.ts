// Per-token statistics of the renormalized top-K distribution (UID Appendix A.1, B.1): the
// engine returns, for each generated position, the K largest raw (pre-temperature) logits in a
// row-major [T × K] array; each row is renormalized over its own support.

import { checkMask, type TokenMask } from './mask.js'

/** Default support size used by the UID paper (top-25). */
export const UID_TOP_K = 25

export interface TopKTokenStats {
  /** H_t = −Σ p̃ log p̃ over the renormalized top-K support (UID Eq. 9, first line). */
  entropy: Float64Array
  /** C_t = −(1/K) Σ log p̃ − log K = KL(U_K ‖ p̃_t) (UID Eq. 9, second line). */
  selfCertainty: Float64Array
  /** Number of finite logits used at each position (K unless the row holds −∞ padding). */
  support: Int32Array
}

/** Number of rows in a row-major [T × K] array, checking that the shape is whole. */
export function topKRows(topKLogits: ArrayLike<number>, K: number): number {
  if (!Number.isInteger(K) || K < 1) throw new RangeError(`K must be a positive integer, got ${K}`)
  if (topKLogits.length % K !== 0) {
    throw new RangeError(`top-K array of length ${topKLogits.length} is not a multiple of K = ${K}`)
  }
  return topKLogits.length / K
}

/**
 * Entropy and Self-Certainty of each position's renormalized top-k distribution (UID Eq. 9).
 * `k` (≤ K) restricts each row to its k largest logits, e.g. 25 out of an engine call that
 * returned 64. Non-finite logits (−∞ padding when the vocabulary is smaller than K) are left out
 * of the support. Positions outside `mask` are still computed; the sequence-level functions
 * apply the mask.
 */
export function topKTokenStats(
  topKLogits: ArrayLike<number>,
  K: number,
  opts: { k?: number } = {},
): TopKTokenStats {
  const T = topKRows(topKLogits, K)
  const k = opts.k ?? K
  if (!Number.isInteger(k) || k < 1 || k > K) throw new RangeError(`k must be in [1, ${K}], got ${k}`)
  const entropy = new Float64Array(T)
  const selfCertainty = new Float64Array(T)
  const support = new Int32Array(T)
  const row = new Float64Array(K)
  for (let t = 0; t < T; t++) {
    let n = 0
    for (let j = 0; j < K; j++) {
      const z = topKLogits[t * K + j]
      if (Number.isFinite(z)) row[n++] = z
    }
    let start = 0
    if (n > k) {
      // keep the k largest: sort ascending and take the tail
      row.subarray(0, n).sort()
      start = n - k
      n = k
    }
    support[t] = n
    if (n === 0) {
      entropy[t] = NaN
      selfCertainty[t] = NaN
      continue
    }
    let m = -Infinity
    let zsum = 0
    for (let j = start; j < start + n; j++) {
      const z = row[j]
      if (z > m) m = z
      zsum += z
    }
    let s = 0
    for (let j = start; j < start + n; j++) s += Math.exp(row[j] - m)
    const lse = m + Math.log(s)
    let h = 0
    for (let j = start; j < start + n; j++) {
      const logp = row[j] - lse
      h -= Math.exp(logp) * logp
    }
    entropy[t] = h
    // −(1/n) Σ (z_j − lse) − log n = lse − mean(z) − log n
    selfCertainty[t] = lse - zsum / n - Math.log(n)
  }
  return { entropy, selfCertainty, support }
}

/** Mean top-k Self-Certainty of a response over its scored tokens (UID A.1, SC(y)). */
export function selfCertaintyTopK(
  topKLogits: ArrayLike<number>,
  K: number,
  mask?: TokenMask,
  opts: { k?: number } = {},
): number {
  const T = topKRows(topKLogits, K)
  checkMask(mask, T)
  const { selfCertainty } = topKTokenStats(topKLogits, K, opts)
  let s = 0
  let n = 0
  for (let t = 0; t < T; t++) {
    if (mask === undefined || mask[t]) {
      s += selfCertainty[t]
      n++
    }
  }
  return n === 0 ? NaN : s / n
}
