// Offline uses of auxiliary scores among verifier-correct responses (UID §4.3, B.3): DPO pairs
// and weighted-SFT weights. The losses they train with live in src/train/objectives/ (their
// scalar float64 oracles in test/reference/offline-losses64.ts).

import type { Rng } from '../util/prng.js'

export interface PreferencePair {
  chosen: number
  rejected: number
  /** Score difference q_chosen − q_rejected. */
  gap: number
}

// UID Eq. 6: y+ = argmax_C q, y− = argmin_C q over eligible correct responses, kept only when the
// gap is ≥ minGap (0.05, B.3). Non-finite scores are ineligible; ties → earliest response.
export function auxPreferencePair(
  scores: ReadonlyArray<number | null>,
  opts: { minGap?: number } = {},
): PreferencePair | null {
  const minGap = opts.minGap ?? 0.05
  let hi = -1
  let lo = -1
  for (let i = 0; i < scores.length; i++) {
    const s = scores[i]
    if (s === null || !Number.isFinite(s)) continue
    if (hi < 0 || s > (scores[hi] as number)) hi = i
    if (lo < 0 || s < (scores[lo] as number)) lo = i
  }
  if (hi < 0 || hi === lo) return null
  const gap = (scores[hi] as number) - (scores[lo] as number)
  return gap >= minGap ? { chosen: hi, rejected: lo, gap } : null
}

// UID B.3 random-DPO control: two distinct responses drawn uniformly, orientation random.
export function randomPreferencePair(n: number, rng: Rng): { chosen: number; rejected: number } | null {
  if (n < 2) return null
  const a = rng.nextInt(n)
  let b = rng.nextInt(n - 1)
  if (b >= a) b++
  return rng.nextInt(2) === 0 ? { chosen: a, rejected: b } : { chosen: b, rejected: a }
}

// UID Eq. 7: w_i = m·exp(α q_i) / Σ_j exp(α q_j), α = 2 (B.3); mean weight 1 within the prompt.
export function auxSftWeights(q: ArrayLike<number>, alpha = 2): Float64Array {
  const m = q.length
  const w = new Float64Array(m)
  if (m === 0) return w
  let mx = -Infinity
  for (let i = 0; i < m; i++) {
    if (!Number.isFinite(q[i])) throw new RangeError(`score q[${i}] is not finite`)
    if (alpha * q[i] > mx) mx = alpha * q[i]
  }
  let s = 0
  for (let i = 0; i < m; i++) {
    w[i] = Math.exp(alpha * q[i] - mx)
    s += w[i]
  }
  for (let i = 0; i < m; i++) w[i] = (m * w[i]) / s
  return w
}
