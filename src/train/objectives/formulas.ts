// The objectives' formulas, one small function each (importance ratio, clipped surrogate, KL
// estimators, loss aggregation, softplus/σ, DPO margin), each citing the equation it implements.

import { InvalidArgumentError } from '../../engine/errors.js'
import { KL_ESTIMATORS, type KlEstimator, type LossAggregation } from './types.js'

/** Bound on |log ratio| and on the k3 input (verl: `torch.clamp(..., -20, 20)`). */
export const LOG_RATIO_CLAMP = 20
/** Bound on the k3 output (verl low_var_kl: `torch.clamp(kld, -10, 10)`). */
export const K3_CLAMP = 10

/** A value together with its derivative with respect to logp. */
export interface ValueGrad {
  value: number
  grad: number
}

// verl compute_policy_loss_vanilla: log r = clamp(logp − old, ±20), r = exp(log r); ∂r/∂logp = 0 where clamped.
export function importanceRatio(logp: number, oldLogp: number): ValueGrad {
  const d = logp - oldLogp
  if (d > LOG_RATIO_CLAMP) return { value: Math.exp(LOG_RATIO_CLAMP), grad: 0 }
  if (d < -LOG_RATIO_CLAMP) return { value: Math.exp(-LOG_RATIO_CLAMP), grad: 0 }
  const r = Math.exp(d)
  return { value: r, grad: r }
}

/**
 * Which branch of the clipped surrogate a token took: 'none' (−A·r, gradient flows), 'high'
 * (A > 0, r > 1 + ε_high: constant −A·(1 + ε_high)), 'low' (A < 0, r < 1 − ε_low: constant
 * −A·(1 − ε_low)), 'dual' (A < 0, r > c: constant −A·c).
 */
export type ClipRegion = 'none' | 'high' | 'low' | 'dual'

export interface SurrogateToken extends ValueGrad {
  region: ClipRegion
}

// verl compute_policy_loss_vanilla (dual-clip PPO, arXiv 1912.09729): ℓ = max(−A·r, −A·clip(r, 1−ε_lo, 1+ε_hi)), and for A < 0, ℓ = min(ℓ, −A·c).
export function clippedSurrogate(
  ratio: ValueGrad,
  advantage: number,
  clipLow: number,
  clipHigh: number,
  dualClip: number | null,
): SurrogateToken {
  const A = advantage
  const r = ratio.value
  if (A > 0) {
    // −A·clip(r) > −A·r ⇔ r > 1 + ε_high: the clipped (constant) branch wins
    if (r > 1 + clipHigh) return { value: -A * (1 + clipHigh), grad: 0, region: 'high' }
    return { value: -A * r, grad: -A * ratio.grad, region: 'none' }
  }
  if (A < 0) {
    if (r < 1 - clipLow) return { value: -A * (1 - clipLow), grad: 0, region: 'low' }
    // here max(−A·r, −A·clip(r)) = −A·r; the dual clip caps it at −A·c (verl: torch.gt(..., pg_losses3))
    if (dualClip !== null && r > dualClip) return { value: -A * dualClip, grad: 0, region: 'dual' }
    return { value: -A * r, grad: -A * ratio.grad, region: 'none' }
  }
  return { value: 0, grad: 0, region: 'none' }
}

// verl kl_penalty "k1": k1 = logp − ref; ∂/∂logp = 1.
export function klK1(logp: number, ref: number): ValueGrad {
  return { value: logp - ref, grad: 1 }
}

// verl kl_penalty "k2" (mse): k2 = ½(logp − ref)²; ∂/∂logp = logp − ref.
export function klK2(logp: number, ref: number): ValueGrad {
  const d = logp - ref
  return { value: 0.5 * d * d, grad: d }
}

// verl kl_penalty "k3" (low_var_kl): x = clamp(ref − logp, ±20), k3 = clamp(eˣ − x − 1, ±10); ∂/∂logp = 1 − eˣ, 0 where clamped.
export function klK3(logp: number, ref: number): ValueGrad {
  const x = ref - logp
  const clampedIn = x > LOG_RATIO_CLAMP || x < -LOG_RATIO_CLAMP
  const xc = x > LOG_RATIO_CLAMP ? LOG_RATIO_CLAMP : x < -LOG_RATIO_CLAMP ? -LOG_RATIO_CLAMP : x
  const e = Math.exp(xc)
  const k = e - xc - 1
  if (k > K3_CLAMP) return { value: K3_CLAMP, grad: 0 }
  if (k < -K3_CLAMP) return { value: -K3_CLAMP, grad: 0 }
  return { value: k, grad: clampedIn ? 0 : 1 - e }
}

const KL_FUNCTIONS: Record<KlEstimator, (logp: number, ref: number) => ValueGrad> = {
  k1: klK1,
  k2: klK2,
  k3: klK3,
}

/** The KL estimator registered as `name` (verl's kl_loss_type). */
export function klEstimator(name: KlEstimator): (logp: number, ref: number) => ValueGrad {
  const f = KL_FUNCTIONS[name]
  if (f === undefined) throw new InvalidArgumentError('klEstimator', `unknown KL estimator "${String(name)}"; known: ${KL_ESTIMATORS.join(', ')}`)
  return f
}

/** Denominators of one aggregation, resolved for a batch. */
export interface AggregationDenominators {
  tokens: number
  sequences: number
  maxLength: number
}

// verl agg_loss: the weight c_i of each unmasked token of sequence i (n_i of them), so that L = Σ_i Σ_t c_i·ℓ_{i,t}.
//   token-mean:              Σ_{i,t} ℓ / N_tokens
//   seq-mean-token-mean:     Σ_i (Σ_t ℓ / n_i) / N_seq
//   seq-mean-token-sum:      Σ_i Σ_t ℓ / N_seq
//   seq-mean-token-sum-norm: Σ_i Σ_t ℓ / L_max   (Dr. GRPO; L_max = padded length or lossScaleFactor)
// N_seq counts sequences with ≥ 1 unmasked token (verl excludes fully masked ones); a zero
// denominator gives a zero loss (verl returns loss·0).
export function aggregationCoefficient(mode: LossAggregation, n: number, d: AggregationDenominators): number {
  if (n === 0) return 0
  switch (mode) {
    case 'token-mean':
      return d.tokens > 0 ? 1 / d.tokens : 0
    case 'seq-mean-token-mean':
      return d.sequences > 0 ? 1 / (d.sequences * n) : 0
    case 'seq-mean-token-sum':
      return d.sequences > 0 ? 1 / d.sequences : 0
    case 'seq-mean-token-sum-norm':
      return d.maxLength > 0 ? 1 / d.maxLength : 0
  }
}

// softplus(x) = log(1 + eˣ), computed without overflow or cancellation.
export function softplus(x: number): number {
  return x > 0 ? x + Math.log1p(Math.exp(-x)) : Math.log1p(Math.exp(x))
}

// σ(x) = 1/(1 + e⁻ˣ), computed without overflow.
export function sigmoid(x: number): number {
  if (x >= 0) return 1 / (1 + Math.exp(-x))
  const e = Math.exp(x)
  return e / (1 + e)
}

// JZ Eq. 13 (and DPO's logistic loss): −log σ(d) = softplus(−d); ∂/∂d = −σ(−d).
export function negLogSigmoid(d: number): ValueGrad {
  return { value: softplus(-d), grad: -sigmoid(-d) }
}

// DPO (Rafailov et al. 2023; UID §4.3, B.3): z = β·[(π_c − ref_c) − (π_r − ref_r)] on sequence logprob sums.
export function dpoMargin(beta: number, policyChosen: number, refChosen: number, policyRejected: number, refRejected: number): number {
  return beta * (policyChosen - refChosen - (policyRejected - refRejected))
}

// DPO-Positive (Pal et al. 2024, §3): z − β·λ·max(0, ref_c − π_c); this is the penalty, taken once the chosen response falls below the reference.
export function dpopPenalty(beta: number, lambda: number, policyChosen: number, refChosen: number): number {
  return beta * lambda * Math.max(0, refChosen - policyChosen)
}
