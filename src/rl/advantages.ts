// Advantage estimators for outcome (sequence-level) rewards, registered by name in the manner of
// verl's core_algos. Each takes one reward per response and a group id per response (the prompt
// the response answers) and returns one advantage per response, which the trainer broadcasts over
// the response's tokens. Non-finite rewards are rejected with a RangeError so the caller can skip
// the step and report it.

import { assertFinite } from '../util/math.js'
import { Registry } from '../util/registry.js'

export type GroupId = number | string

export interface AdvantageOptions {
  /** Stabilizer in the denominator (GRPO: 1e-6, UID Eq. 16; REINFORCE++: 1e-8 inside the sqrt). */
  epsilon?: number
  /** REINFORCE++ only: tokens per response, to whiten as the token-level estimator does. */
  tokenCounts?: ArrayLike<number>
}

export type AdvantageEstimator = (
  rewards: ArrayLike<number>,
  groups: ArrayLike<GroupId>,
  opts?: AdvantageOptions,
) => Float64Array

/** Response indices of each group, groups in first-occurrence order. */
export function groupIndices(groups: ArrayLike<GroupId>): Map<GroupId, number[]> {
  const m = new Map<GroupId, number[]>()
  for (let i = 0; i < groups.length; i++) {
    const g = groups[i]
    const list = m.get(g)
    if (list === undefined) m.set(g, [i])
    else list.push(i)
  }
  return m
}

function check(rewards: ArrayLike<number>, groups: ArrayLike<GroupId>): void {
  if (rewards.length !== groups.length) {
    throw new RangeError(`${rewards.length} rewards but ${groups.length} group ids`)
  }
  assertFinite(rewards, 'rewards')
}

// UID Eq. 16 (GRPO): A_i = (R_i − R̄_x) / (Std(R_1..R_n) + ε), sample std, ε = 1e-6.
// Groups of one response get 0 (UID B.2 normalizes groups of n > 1 only); a zero-std group gets 0.
export function grpoAdvantages(
  rewards: ArrayLike<number>,
  groups: ArrayLike<GroupId>,
  opts: AdvantageOptions = {},
): Float64Array {
  check(rewards, groups)
  const eps = opts.epsilon ?? 1e-6
  const out = new Float64Array(rewards.length)
  for (const idx of groupIndices(groups).values()) {
    const n = idx.length
    if (n < 2) continue
    let m = 0
    for (const i of idx) m += rewards[i]
    m /= n
    let ss = 0
    for (const i of idx) ss += (rewards[i] - m) ** 2
    const sd = Math.sqrt(ss / (n - 1))
    for (const i of idx) out[i] = (rewards[i] - m) / (sd + eps)
  }
  return out
}

// Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"): A_i = R_i − R̄_x, no std division
// (its length-unbiased loss aggregation belongs to the policy loss, not to the advantage).
export function drGrpoAdvantages(rewards: ArrayLike<number>, groups: ArrayLike<GroupId>): Float64Array {
  check(rewards, groups)
  const out = new Float64Array(rewards.length)
  for (const idx of groupIndices(groups).values()) {
    if (idx.length < 2) continue
    let m = 0
    for (const i of idx) m += rewards[i]
    m /= idx.length
    for (const i of idx) out[i] = rewards[i] - m
  }
  return out
}

// RLOO (Ahmadian et al. 2024): A_i = R_i − (1/(n−1)) Σ_{j≠i} R_j = n/(n−1)·(R_i − R̄_x); 0 for n = 1.
export function rlooAdvantages(rewards: ArrayLike<number>, groups: ArrayLike<GroupId>): Float64Array {
  check(rewards, groups)
  const out = new Float64Array(rewards.length)
  for (const idx of groupIndices(groups).values()) {
    const n = idx.length
    if (n < 2) continue
    let s = 0
    for (const i of idx) s += rewards[i]
    for (const i of idx) out[i] = rewards[i] - (s - rewards[i]) / (n - 1)
  }
  return out
}

/**
 * Whitening over the whole batch, as verl's masked_whiten: (x − mean)/√(var + ε) with the
 * unbiased variance; with `tokenCounts`, each response weighs as many times as it has tokens
 * (the token-level estimator with a constant return per response). Fewer than two units → 0.
 */
export function batchWhiten(x: ArrayLike<number>, opts: AdvantageOptions = {}): Float64Array {
  const n = x.length
  const eps = opts.epsilon ?? 1e-8
  const w = opts.tokenCounts
  if (w !== undefined && w.length !== n) throw new RangeError(`${w.length} token counts for ${n} responses`)
  let W = 0
  let m = 0
  for (let i = 0; i < n; i++) {
    const wi = w === undefined ? 1 : w[i]
    if (!(wi >= 0)) throw new RangeError(`tokenCounts[${i}] must be non-negative`)
    W += wi
    m += wi * x[i]
  }
  const out = new Float64Array(n)
  if (W <= 1) return out
  m /= W
  let ss = 0
  for (let i = 0; i < n; i++) ss += (w === undefined ? 1 : w[i]) * (x[i] - m) ** 2
  const inv = 1 / Math.sqrt(ss / (W - 1) + eps)
  for (let i = 0; i < n; i++) out[i] = (x[i] - m) * inv
  return out
}

// REINFORCE++ (Hu 2025): outcome reward as the return of every token (γ = 1), whitened over the batch.
export function reinforcePlusPlusAdvantages(
  rewards: ArrayLike<number>,
  groups: ArrayLike<GroupId>,
  opts: AdvantageOptions = {},
): Float64Array {
  check(rewards, groups)
  return batchWhiten(rewards, opts)
}

// REINFORCE++-baseline (verl): subtract the group mean (Dr. GRPO), then whiten over the batch.
export function reinforcePlusPlusBaselineAdvantages(
  rewards: ArrayLike<number>,
  groups: ArrayLike<GroupId>,
  opts: AdvantageOptions = {},
): Float64Array {
  return batchWhiten(drGrpoAdvantages(rewards, groups), opts)
}

/** Advantage estimators by name: 'grpo', 'dr-grpo', 'rloo', 'reinforce++', 'reinforce++-baseline'. */
export const advantageEstimators = new Registry<AdvantageEstimator>('advantage estimator')
advantageEstimators.register('grpo', grpoAdvantages)
advantageEstimators.register('dr-grpo', (r, g) => drGrpoAdvantages(r, g))
advantageEstimators.register('rloo', (r, g) => rlooAdvantages(r, g))
advantageEstimators.register('reinforce++', reinforcePlusPlusAdvantages)
advantageEstimators.register('reinforce++-baseline', reinforcePlusPlusBaselineAdvantages)

/** Advantages with the estimator registered as `name`. */
export function computeAdvantages(
  name: string,
  rewards: ArrayLike<number>,
  groups: ArrayLike<GroupId>,
  opts?: AdvantageOptions,
): Float64Array {
  return advantageEstimators.get(name)(rewards, groups, opts)
}
