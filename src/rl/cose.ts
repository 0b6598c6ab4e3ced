// COSE weights and rewards (COSE §3.1–3.5). Inputs are normalized scores in [0, 1]: v(q)
// Validator quality, c_V(q) Validator confidence, c_J(q, a) Judge confidence, p(q, a) Judge
// correctness, p(q) solve rate, and the format indicators f_P, f_S ∈ {0, 1}.

import { clip } from '../util/math.js'

/** Weight floor and ceiling of COSE Eq. 4–5 (Appendix C: per-sample weight floor 0.1). */
export const COSE_WEIGHT_FLOOR = 0.1
export const COSE_WEIGHT_CEIL = 1

export interface CoseWeightOptions {
  /** false = the "w/o weighting" ablation (COSE Table 5): every weight is 1. */
  enabled?: boolean
  floor?: number
  ceil?: number
}

/** clip(x, floor, ceil), with a non-finite product (missing confidence) mapped to the floor. */
function clipWeight(x: number, opts: CoseWeightOptions): number {
  if (opts.enabled === false) return 1
  const floor = opts.floor ?? COSE_WEIGHT_FLOOR
  const ceil = opts.ceil ?? COSE_WEIGHT_CEIL
  return Number.isNaN(x) ? floor : clip(x, floor, ceil)
}

// COSE Eq. 1: p(q) = (1/|A_q|) Σ_{a∈A_q} p(q, a); NaN when no answer was judged.
export function solveRate(judgeScores: ArrayLike<number>): number {
  if (judgeScores.length === 0) return NaN
  let s = 0
  for (let i = 0; i < judgeScores.length; i++) s += judgeScores[i]
  return s / judgeScores.length
}

// COSE §3.4: learnability 4p(1 − p) ∈ [0, 1], maximal at p = ½.
export function learnability(p: number): number {
  return 4 * p * (1 - p)
}

// COSE Eq. 4: w_P(q) = clip(v(q)·c_V(q), 0.1, 1.0).
export function coseProposerWeight(v: number, cV: number, opts: CoseWeightOptions = {}): number {
  return clipWeight(v * cV, opts)
}

// COSE Eq. 5: w_S(q, a) = clip(v(q)·c_V(q)·c_J(q, a), 0.1, 1.0).
export function coseSolverWeight(v: number, cV: number, cJ: number, opts: CoseWeightOptions = {}): number {
  return clipWeight(v * cV * cJ, opts)
}

// COSE Eq. 7: r_S(q, a) = f_S(a)·p(q, a).
export function coseSolverReward(fS: 0 | 1 | boolean, pqa: number): number {
  return fS ? pqa : 0
}

// COSE Eq. 8: r_P(q) = f_P(q)·(v(q) + 4p(q)(1 − p(q)))/2.
export function coseProposerReward(fP: 0 | 1 | boolean, v: number, pq: number): number {
  return fP ? (v + learnability(pq)) / 2 : 0
}
