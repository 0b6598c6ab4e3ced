// Majority-gated TTRL reward with an auxiliary trajectory term (UID §4.2, Eq. 4–5, Appendix B.2)
// and its two controls (B.2.1): seeded random scores and a within-group permutation of the
// realized auxiliary terms.

import type { Rng } from '../util/prng.js'

export interface GatedRewardOptions {
  /** λ, weight of the auxiliary term (default 0.1). */
  lambda?: number
  /** δ, clip of the centered score (default 0.5). */
  delta?: number
  /** Smallest majority-agreeing set that receives an adjustment (default 2). */
  minAgreeing?: number
}

function agreeing(agree: ArrayLike<number | boolean>): number[] {
  const m: number[] = []
  for (let i = 0; i < agree.length; i++) if (agree[i]) m.push(i)
  return m
}

// UID Eq. 5: b_i = clip(q_i − q̄_M, −δ, δ) for i ∈ M when |M| ≥ 2, else 0; q̄_M = mean of q over M.
// Ineligible responses carry q = 0 and still enter q̄_M when they agree (UID B.1).
export function gatedAuxTerms(
  agree: ArrayLike<number | boolean>,
  q: ArrayLike<number>,
  opts: GatedRewardOptions = {},
): Float64Array {
  const n = agree.length
  if (q.length !== n) throw new RangeError(`${q.length} scores for ${n} responses`)
  const delta = opts.delta ?? 0.5
  const minAgreeing = opts.minAgreeing ?? 2
  const b = new Float64Array(n)
  const M = agreeing(agree)
  if (M.length < minAgreeing || M.length === 0) return b
  let qbar = 0
  for (const i of M) {
    if (!Number.isFinite(q[i])) throw new RangeError(`auxiliary score q[${i}] is not finite`)
    qbar += q[i]
  }
  qbar /= M.length
  for (const i of M) b[i] = Math.min(delta, Math.max(-delta, q[i] - qbar))
  return b
}

export interface GatedReward {
  /** R_i = 2g_i − 1 + λ·b_i. */
  rewards: Float64Array
  /** The gated, centered, clipped auxiliary terms b_i. */
  aux: Float64Array
}

// UID Eq. 5: R_i = 2g_i − 1 + λ·b_i.
export function ttrlAuxReward(
  agree: ArrayLike<number | boolean>,
  q: ArrayLike<number>,
  opts: GatedRewardOptions = {},
): GatedReward {
  const aux = gatedAuxTerms(agree, q, opts)
  return { rewards: combineGatedReward(agree, aux, opts.lambda ?? 0.1), aux }
}

/** R_i = 2g_i − 1 + λ·b_i from given auxiliary terms (used by the permutation control). */
export function combineGatedReward(agree: ArrayLike<number | boolean>, aux: ArrayLike<number>, lambda = 0.1): Float64Array {
  if (aux.length !== agree.length) throw new RangeError(`${aux.length} auxiliary terms for ${agree.length} responses`)
  const r = new Float64Array(agree.length)
  for (let i = 0; i < agree.length; i++) r[i] = (agree[i] ? 1 : -1) + lambda * aux[i]
  return r
}

// Original TTRL (UID B.2): binary reward R_i = g_i ∈ {0, 1}.
export function ttrlBinaryReward(agree: ArrayLike<number | boolean>): Float64Array {
  const r = new Float64Array(agree.length)
  for (let i = 0; i < agree.length; i++) r[i] = agree[i] ? 1 : 0
  return r
}

// UID B.2.1 / C.3 random control: auxiliary scores drawn i.i.d. U[0, 1) from a seeded generator.
export function randomAuxScores(n: number, rng: Rng): Float64Array {
  const q = new Float64Array(n)
  for (let i = 0; i < n; i++) q[i] = rng.nextFloat()
  return q
}

// UID B.2.1 permutation control: b^perm_i = b_{π(i)} for i ∈ M (π a uniform permutation of M),
// 0 outside M. Keeps the group's reward multiset, mean, std and advantage distribution.
export function permuteAuxTerms(aux: ArrayLike<number>, agree: ArrayLike<number | boolean>, rng: Rng): Float64Array {
  if (aux.length !== agree.length) throw new RangeError(`${aux.length} auxiliary terms for ${agree.length} responses`)
  const M = agreeing(agree)
  const perm = rng.shuffle(M.slice())
  const out = new Float64Array(aux.length)
  M.forEach((i, k) => (out[i] = aux[perm[k]]))
  return out
}
