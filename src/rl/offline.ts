// Offline uses of auxiliary scores among verifier-correct responses (UID §4.3, B.3): DPO pairs
// and weighted SFT; and J-Zero's Bradley–Terry Judge loss (JZ Eq. 13) as a scalar reference.

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

// UID Eq. 8: L = −(1/N) Σ_i (w_i/T_i) Σ_t log π(y_{i,t} | ·), T_i = scored tokens of response i.
export function weightedSftLoss(
  weights: ArrayLike<number>,
  tokenLogprobs: ReadonlyArray<ArrayLike<number>>,
  masks?: ReadonlyArray<ArrayLike<number | boolean> | undefined>,
): number {
  const N = tokenLogprobs.length
  if (weights.length !== N) throw new RangeError(`${weights.length} weights for ${N} responses`)
  if (N === 0) return NaN
  let total = 0
  for (let i = 0; i < N; i++) {
    const lp = tokenLogprobs[i]
    const mask = masks?.[i]
    if (mask !== undefined && mask.length !== lp.length) throw new RangeError(`mask ${i} length differs from its logprobs`)
    let s = 0
    let T = 0
    for (let t = 0; t < lp.length; t++) {
      if (mask === undefined || mask[t]) {
        s += lp[t]
        T++
      }
    }
    if (T > 0) total += (weights[i] / T) * s
  }
  return -total / N
}

/** log σ(x), computed without overflow. */
export function logSigmoid(x: number): number {
  return x >= 0 ? -Math.log1p(Math.exp(-x)) : x - Math.log1p(Math.exp(x))
}

// JZ Eq. 13: L_J = −E[log σ(J(x, y+) − J(x, y−))] over preference pairs.
export function bradleyTerryLoss(chosen: ArrayLike<number>, rejected: ArrayLike<number>): number {
  if (chosen.length !== rejected.length) throw new RangeError('chosen and rejected differ in length')
  if (chosen.length === 0) return NaN
  let s = 0
  for (let i = 0; i < chosen.length; i++) s += logSigmoid(chosen[i] - rejected[i])
  return 0 - s / chosen.length
}
