// Training objectives as pure float64 functions of small per-token arrays.
//
// The native engine computes, per completion token t, the raw-logit log-probability of the
// target token logp_t and the full-vocabulary entropy H_t (and ref_t when asked). An objective
// here returns the scalar loss L and its coefficients a_t = ∂L/∂logp_t and b_t = ∂L/∂H_t; the
// engine back-propagates dz = a_t·(onehot(target) − p) + b_t·(−p ⊙ (log p + H_t)) through the
// network, so no [tokens × vocab] tensor ever reaches TypeScript (DESIGN.md, "one pass over the
// vocabulary"). The Bradley–Terry objective works on one scalar score per sequence instead and
// returns ∂L/∂s.
//
// Conventions shared by every objective:
// - Arrays are per sequence, over that sequence's completion tokens only (prompt tokens are
//   never passed). `mask[t] = 0` drops token t entirely: its a_t = b_t = 0 and its values are not
//   read, so padding may hold anything (NaN included).
// - Gradient accumulation: pass a `BatchNormalizer` computed over the whole (global) batch with
//   `globalNormalizer(microBatches)`; then the micro-batch losses and gradients sum exactly to
//   the full-batch ones (verl's agg_loss `global_batch_size` / `batch_num_tokens`).
// - NaN/Inf: an unmasked non-finite input, or a non-finite loss or coefficient, throws
//   `NonFiniteError` (never a silently poisoned gradient). The trainer catches it, skips the step
//   and reports `error.field`.
// - A bad config or a malformed batch throws `InvalidArgumentError` whose `argument` names the
//   offending field (`aggregation`, `sequences[3].oldLogp`, …).

import { AutodidactError, InvalidArgumentError } from '../engine/errors.js'

// ---------------------------------------------------------------------------------------------
// Types
// ---------------------------------------------------------------------------------------------

/** Per-token values of one sequence (Float64Array, Float32Array or number[]). */
export type TokenValues = ArrayLike<number>
/** Per-token mask of one sequence: nonzero/true = the token counts. */
export type TokenMask = ArrayLike<number | boolean>

/** What every token-level objective reads from a sequence. */
export interface TokenSequence {
  /** log π_θ(y_t | ·) of the target token, from raw logits, one per completion token. */
  logp: TokenValues
  /** Optional token mask (same length as `logp`); absent = every token counts. */
  mask?: TokenMask
  /** Per-sample weight w ≥ 0 (COSE Eq. 4–5, UID Eq. 7); default 1. */
  weight?: number
}

/** One sampled completion for the policy objective. */
export interface PolicySequence extends TokenSequence {
  /** Full-vocabulary entropy H_t of π_θ at each completion position. */
  entropy: TokenValues
  /**
   * Sampling-time log-probabilities. Absent = on-policy: old = stop-gradient(logp), so the
   * ratio is exactly 1 and a_t = −c·w·A_t (no clipping can occur).
   */
  oldLogp?: TokenValues
  /** Reference-model log-probabilities; required when `klCoef > 0`. */
  refLogp?: TokenValues
  /** A_t: one number shared by every token (outcome advantage) or one per token. */
  advantages: number | TokenValues
}

/** One supervised sequence for weighted SFT. */
export type SftSequence = TokenSequence

/** A batch of sequences for a token-level objective. */
export interface TokenBatch<S extends TokenSequence = PolicySequence> {
  sequences: readonly S[]
}
export type PolicyBatch = TokenBatch<PolicySequence>
export type SftBatch = TokenBatch<SftSequence>

/** A preference pair as indices into the batch: [chosen (preferred), rejected]. */
export type PairIndex = readonly [chosen: number, rejected: number]

/** One DPO sequence: policy logprobs and the frozen reference's (per token, or their sum). */
export interface DpoSequence {
  logp: TokenValues
  /** Reference log-probabilities per token (masked like `logp`), or the sequence sum Σ_t ref_t. */
  refLogp: TokenValues | number
  mask?: TokenMask
}

export interface DpoBatch {
  sequences: readonly DpoSequence[]
  pairs: readonly PairIndex[]
}

/** Scalar scores s_i (one per sequence, from the score head) and preference pairs over them. */
export interface ScoreBatch {
  scores: TokenValues
  pairs: readonly PairIndex[]
}

/**
 * Global denominators for gradient accumulation. Any field left out is taken from the batch
 * itself. Build it with `globalNormalizer(allMicroBatches)`.
 */
export interface BatchNormalizer {
  /** Unmasked tokens in the global batch (token-mean). */
  tokens?: number
  /** Sequences with ≥ 1 unmasked token in the global batch (seq-mean-*, SFT). */
  sequences?: number
  /** Longest sequence array (masked positions included) in the global batch (seq-mean-token-sum-norm). */
  maxLength?: number
  /** Preference pairs in the global batch (DPO, Bradley–Terry). */
  pairs?: number
}

export interface TokenObjectiveResult<M> {
  /** The scalar loss of this (micro-)batch, float64. */
  loss: number
  /** a_t = ∂L/∂logp_t, one array per sequence (zeros at masked tokens). */
  a: Float64Array[]
  /** b_t = ∂L/∂H_t, one array per sequence (zeros at masked tokens). */
  b: Float64Array[]
  metrics: M
}

export interface ScoreObjectiveResult<M> {
  loss: number
  /** ∂L/∂s_i, one per score. */
  dScores: Float64Array
  metrics: M
}

/** verl's loss_agg_mode values. */
export type LossAggregation = 'token-mean' | 'seq-mean-token-mean' | 'seq-mean-token-sum' | 'seq-mean-token-sum-norm'
export const LOSS_AGGREGATIONS: readonly LossAggregation[] = [
  'token-mean',
  'seq-mean-token-mean',
  'seq-mean-token-sum',
  'seq-mean-token-sum-norm',
]

/** KL estimators of Schulman's "Approximating KL divergence" as verl names them. */
export type KlEstimator = 'k1' | 'k2' | 'k3'
export const KL_ESTIMATORS: readonly KlEstimator[] = ['k1', 'k2', 'k3']

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/**
 * A NaN or ±Infinity in an objective's (unmasked) input or in its loss/gradients. The step that
 * produced it must be skipped and reported, never applied.
 */
export class NonFiniteError extends AutodidactError {
  /** Where: e.g. `sequences[2].logp[17]`, `loss`, `a[0][3]`, `dScores[5]`. */
  readonly field: string
  readonly stage: 'input' | 'output'
  readonly value: number

  constructor(stage: 'input' | 'output', field: string, value: number) {
    super('NON_FINITE', `non-finite ${stage === 'input' ? 'input' : 'result'} ${field} = ${value}`)
    this.field = field
    this.stage = stage
    this.value = value
  }
}

// ---------------------------------------------------------------------------------------------
// Formulas: one small function each
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// Validation helpers
// ---------------------------------------------------------------------------------------------

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === 'object' && x !== null && !Array.isArray(x)
}

function checkKeys(config: Record<string, unknown>, allowed: readonly string[], what: string): void {
  for (const k of Object.keys(config)) {
    if (!allowed.includes(k)) {
      throw new InvalidArgumentError(k, `unknown ${what} option "${k}"; known: ${allowed.join(', ')}`)
    }
  }
}

interface NumberRule {
  min?: number
  minExclusive?: boolean
  max?: number
  maxExclusive?: boolean
}

function numberField(config: Record<string, unknown>, key: string, fallback: number, rule: NumberRule): number {
  const v = config[key]
  if (v === undefined) return fallback
  if (typeof v !== 'number' || !Number.isFinite(v)) {
    throw new InvalidArgumentError(key, `${key} must be a finite number, got ${String(v)}`)
  }
  if (rule.min !== undefined && (rule.minExclusive ? v <= rule.min : v < rule.min)) {
    throw new InvalidArgumentError(key, `${key} must be ${rule.minExclusive ? '>' : '≥'} ${rule.min}, got ${v}`)
  }
  if (rule.max !== undefined && (rule.maxExclusive ? v >= rule.max : v > rule.max)) {
    throw new InvalidArgumentError(key, `${key} must be ${rule.maxExclusive ? '<' : '≤'} ${rule.max}, got ${v}`)
  }
  return v
}

function enumField<T extends string>(config: Record<string, unknown>, key: string, allowed: readonly T[], fallback: T): T {
  const v = config[key]
  if (v === undefined) return fallback
  if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) {
    throw new InvalidArgumentError(key, `${key} must be one of ${allowed.join(', ')}, got ${JSON.stringify(v)}`)
  }
  return v as T
}

function asConfig(config: unknown, what: string): Record<string, unknown> {
  if (config === undefined) return {}
  if (!isRecord(config)) throw new InvalidArgumentError('config', `${what} config must be an object`)
  return config
}

function inputFinite(x: number, field: () => string): void {
  if (!Number.isFinite(x)) throw new NonFiniteError('input', field(), x)
}

function checkOutputs(loss: number, a: readonly Float64Array[], b: readonly Float64Array[]): void {
  if (!Number.isFinite(loss)) throw new NonFiniteError('output', 'loss', loss)
  for (let i = 0; i < a.length; i++) {
    const ai = a[i]
    const bi = b[i]
    for (let t = 0; t < ai.length; t++) {
      if (!Number.isFinite(ai[t])) throw new NonFiniteError('output', `a[${i}][${t}]`, ai[t])
      if (!Number.isFinite(bi[t])) throw new NonFiniteError('output', `b[${i}][${t}]`, bi[t])
    }
  }
}

function checkArray(x: unknown, field: string): asserts x is ArrayLike<number> {
  if (x === null || typeof x !== 'object' || typeof (x as { length?: unknown }).length !== 'number') {
    throw new InvalidArgumentError(field, `${field} must be an array of numbers`)
  }
}

function checkSameLength(x: ArrayLike<unknown>, n: number, field: string): void {
  if (x.length !== n) throw new InvalidArgumentError(field, `${field} has length ${x.length}, expected ${n} (one per completion token)`)
}

function sequencesOf<S>(batch: { sequences: readonly S[] } | undefined, what: string): readonly S[] {
  if (!isRecord(batch) || !Array.isArray(batch.sequences)) {
    throw new InvalidArgumentError('sequences', `${what} batch must have a sequences array`)
  }
  return batch.sequences as readonly S[]
}

/** Unmasked token count of a sequence (validates the mask's length). */
function unmaskedCount(logp: TokenValues, mask: TokenMask | undefined, field: string): number {
  if (mask === undefined) return logp.length
  checkArray(mask, `${field}.mask`)
  checkSameLength(mask, logp.length, `${field}.mask`)
  let n = 0
  for (let t = 0; t < mask.length; t++) if (mask[t]) n++
  return n
}

function sampleWeight(w: number | undefined, field: string): number {
  if (w === undefined) return 1
  if (typeof w !== 'number') throw new InvalidArgumentError(`${field}.weight`, `${field}.weight must be a number`)
  if (!Number.isFinite(w)) throw new NonFiniteError('input', `${field}.weight`, w)
  if (w < 0) throw new InvalidArgumentError(`${field}.weight`, `${field}.weight must be ≥ 0, got ${w}`)
  return w
}

function normalizerField(norm: BatchNormalizer | undefined, key: keyof BatchNormalizer, local: number): number {
  const v = norm?.[key]
  if (v === undefined) return local
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) {
    throw new InvalidArgumentError(`normalizer.${key}`, `normalizer.${key} must be a finite number ≥ 0, got ${String(v)}`)
  }
  return v
}

function checkPairs(pairs: unknown, count: number, countName: string): readonly PairIndex[] {
  if (!Array.isArray(pairs)) throw new InvalidArgumentError('pairs', 'pairs must be an array of [chosen, rejected] index pairs')
  for (let p = 0; p < pairs.length; p++) {
    const pair: unknown = pairs[p]
    if (!Array.isArray(pair) || pair.length !== 2) {
      throw new InvalidArgumentError(`pairs[${p}]`, `pairs[${p}] must be a [chosen, rejected] index pair`)
    }
    for (const k of [0, 1]) {
      const i: unknown = pair[k]
      if (typeof i !== 'number' || !Number.isInteger(i) || i < 0 || i >= count) {
        throw new InvalidArgumentError(`pairs[${p}][${k}]`, `pairs[${p}][${k}] = ${String(i)} is not an index into ${count} ${countName}`)
      }
    }
    if (pair[0] === pair[1]) throw new InvalidArgumentError(`pairs[${p}]`, `pairs[${p}] pairs ${countName} ${String(pair[0])} with itself`)
  }
  return pairs as readonly PairIndex[]
}

// ---------------------------------------------------------------------------------------------
// Policy (PPO clipped surrogate, verl semantics)
// ---------------------------------------------------------------------------------------------

export interface PolicyObjectiveConfig {
  /** Symmetric clip ε (default 0.2: COSE App. C, UID B.2); the default for clipLow/clipHigh. */
  clip?: number
  /** ε_low: the ratio's lower bound is 1 − ε_low (0 ≤ ε_low < 1). */
  clipLow?: number
  /** ε_high: the ratio's upper bound is 1 + ε_high (JZ Table 4: 0.28). */
  clipHigh?: number
  /** Dual-clip c > 1 for negative advantages (verl clip_ratio_c, default 3; UID B.2: 3); null disables. */
  dualClip?: number | null
  /** Coefficient of the KL-to-reference loss term (COSE: 0.01, UID: 1e-3); default 0. */
  klCoef?: number
  /** KL estimator: k1 | k2 | k3 (verl kl_loss_type; k3 = low_var_kl, the default). */
  klEstimator?: KlEstimator
  /** Entropy bonus: loss −= entropyCoef·agg(H). Default 0. */
  entropyCoef?: number
  /** Loss aggregation (verl loss_agg_mode). Default token-mean. */
  aggregation?: LossAggregation
  /** Constant divisor for seq-mean-token-sum-norm (Dr. GRPO's max response length); default: the batch's longest sequence. */
  lossScaleFactor?: number
  /**
   * Which terms the per-sample weight multiplies. 'policy' (default): only the clipped surrogate,
   * as COSE scales the feedback-driven update; 'all': the KL and entropy terms too.
   */
  weightScope?: 'policy' | 'all'
}

export interface ResolvedPolicyConfig {
  clipLow: number
  clipHigh: number
  dualClip: number | null
  klCoef: number
  klEstimator: KlEstimator
  entropyCoef: number
  aggregation: LossAggregation
  lossScaleFactor: number | null
  weightScope: 'policy' | 'all'
}

const POLICY_KEYS = [
  'clip',
  'clipLow',
  'clipHigh',
  'dualClip',
  'klCoef',
  'klEstimator',
  'entropyCoef',
  'aggregation',
  'lossScaleFactor',
  'weightScope',
] as const

/** Validate a policy config and fill in defaults; throws InvalidArgumentError naming the field. */
export function resolvePolicyConfig(config?: PolicyObjectiveConfig): ResolvedPolicyConfig {
  const c = asConfig(config, 'policy objective')
  checkKeys(c, POLICY_KEYS, 'policy objective')
  const clip = numberField(c, 'clip', 0.2, { min: 0, max: 1, maxExclusive: true })
  const clipLow = numberField(c, 'clipLow', clip, { min: 0, max: 1, maxExclusive: true })
  const clipHigh = numberField(c, 'clipHigh', clip, { min: 0 })
  let dualClip: number | null = 3
  if (c.dualClip === null) dualClip = null
  else dualClip = numberField(c, 'dualClip', 3, { min: 1, minExclusive: true })
  const klCoef = numberField(c, 'klCoef', 0, { min: 0 })
  const klEst = enumField(c, 'klEstimator', KL_ESTIMATORS, 'k3')
  const entropyCoef = numberField(c, 'entropyCoef', 0, {})
  const aggregation = enumField(c, 'aggregation', LOSS_AGGREGATIONS, 'token-mean')
  const lossScaleFactor = c.lossScaleFactor === undefined ? null : numberField(c, 'lossScaleFactor', 0, { min: 0, minExclusive: true })
  const weightScope = enumField(c, 'weightScope', ['policy', 'all'] as const, 'policy')
  return { clipLow, clipHigh, dualClip, klCoef, klEstimator: klEst, entropyCoef, aggregation, lossScaleFactor, weightScope }
}

export interface PolicyMetrics {
  /** agg(w·ℓ_pg): the clipped-surrogate term as it enters the loss. */
  policyLoss: number
  /** agg(k) (× w when weightScope = 'all'); null when some sequence has no refLogp. */
  kl: number | null
  /** agg(H) (× w when weightScope = 'all'). */
  entropy: number
  /** Fraction of unmasked tokens with A < 0 and r < 1 − ε_low (constant branch). */
  clipFracLow: number
  /** Fraction of unmasked tokens with A > 0 and r > 1 + ε_high (constant branch). */
  clipFracHigh: number
  /** verl pg_clipfrac = clipFracLow + clipFracHigh. */
  clipFrac: number
  /** verl pg_clipfrac_lower: fraction of unmasked tokens with A < 0 and r > c. */
  dualClipFrac: number
  /** verl ppo_kl: token mean of old − logp (log ratio clamped ±20); 0 on-policy. */
  approxKl: number
  /** Unmasked tokens in this batch. */
  tokens: number
  /** Sequences with ≥ 1 unmasked token in this batch. */
  sequences: number
}

export type PolicyResult = TokenObjectiveResult<PolicyMetrics>

// COSE Eq. 4–5 weights enter as w_i; verl compute_policy_loss_vanilla + kl_penalty + agg_loss:
// L = agg(w·ℓ_pg) + klCoef·agg(w'·k) − entropyCoef·agg(w'·H), w' = w if weightScope = 'all' else 1.
function computePolicy(cfg: ResolvedPolicyConfig, batch: PolicyBatch, norm?: BatchNormalizer): PolicyResult {
  const seqs = sequencesOf(batch, 'policy')
  const S = seqs.length
  const counts = new Int32Array(S)
  const weights = new Float64Array(S)
  let localTokens = 0
  let localSeqs = 0
  let localMax = 0
  let haveAllRefs = true
  // pass 1: shapes, weights, counts
  for (let i = 0; i < S; i++) {
    const s = seqs[i]
    const f = `sequences[${i}]`
    if (!isRecord(s)) throw new InvalidArgumentError(f, `${f} must be an object`)
    checkArray(s.logp, `${f}.logp`)
    const T = s.logp.length
    checkArray(s.entropy, `${f}.entropy`)
    checkSameLength(s.entropy, T, `${f}.entropy`)
    if (s.oldLogp !== undefined) {
      checkArray(s.oldLogp, `${f}.oldLogp`)
      checkSameLength(s.oldLogp, T, `${f}.oldLogp`)
    }
    if (s.refLogp !== undefined) {
      checkArray(s.refLogp, `${f}.refLogp`)
      checkSameLength(s.refLogp, T, `${f}.refLogp`)
    } else {
      haveAllRefs = false
      if (cfg.klCoef > 0) throw new InvalidArgumentError(`${f}.refLogp`, `${f}.refLogp is required when klCoef > 0`)
    }
    if (typeof s.advantages !== 'number') {
      checkArray(s.advantages, `${f}.advantages`)
      checkSameLength(s.advantages, T, `${f}.advantages`)
    }
    weights[i] = sampleWeight(s.weight, f)
    const n = unmaskedCount(s.logp, s.mask, f)
    counts[i] = n
    localTokens += n
    if (n > 0) localSeqs++
    if (T > localMax) localMax = T
  }
  const denoms: AggregationDenominators = {
    tokens: normalizerField(norm, 'tokens', localTokens),
    sequences: normalizerField(norm, 'sequences', localSeqs),
    maxLength: cfg.lossScaleFactor ?? normalizerField(norm, 'maxLength', localMax),
  }
  const kl = KL_FUNCTIONS[cfg.klEstimator]
  const a: Float64Array[] = new Array(S)
  const b: Float64Array[] = new Array(S)
  let pgSum = 0
  let klSum = 0
  let entSum = 0
  let nHigh = 0
  let nLow = 0
  let nDual = 0
  let approxKlSum = 0
  // pass 2: per-token values and coefficients
  for (let i = 0; i < S; i++) {
    const s = seqs[i]
    const f = `sequences[${i}]`
    const T = s.logp.length
    const ai = new Float64Array(T)
    const bi = new Float64Array(T)
    a[i] = ai
    b[i] = bi
    const n = counts[i]
    if (n === 0) continue
    const c = aggregationCoefficient(cfg.aggregation, n, denoms)
    const w = weights[i]
    const ws = cfg.weightScope === 'all' ? w : 1
    const mask = s.mask
    const adv = s.advantages
    const advScalar = typeof adv === 'number' ? adv : null
    if (advScalar !== null) inputFinite(advScalar, () => `${f}.advantages`)
    const { logp, entropy, oldLogp, refLogp } = s
    for (let t = 0; t < T; t++) {
      if (mask !== undefined && !mask[t]) continue
      const lp = logp[t]
      inputFinite(lp, () => `${f}.logp[${t}]`)
      const H = entropy[t]
      inputFinite(H, () => `${f}.entropy[${t}]`)
      const A = advScalar ?? (adv as TokenValues)[t]
      if (advScalar === null) inputFinite(A, () => `${f}.advantages[${t}]`)
      let ratio: ValueGrad
      if (oldLogp !== undefined) {
        const old = oldLogp[t]
        inputFinite(old, () => `${f}.oldLogp[${t}]`)
        ratio = importanceRatio(lp, old)
        const d = lp - old
        approxKlSum -= d > LOG_RATIO_CLAMP ? LOG_RATIO_CLAMP : d < -LOG_RATIO_CLAMP ? -LOG_RATIO_CLAMP : d
      } else {
        ratio = { value: 1, grad: 1 } // old = stop-gradient(logp)
      }
      const pg = clippedSurrogate(ratio, A, cfg.clipLow, cfg.clipHigh, cfg.dualClip)
      if (pg.region === 'high') nHigh++
      else if (pg.region === 'low') nLow++
      else if (pg.region === 'dual') nDual++
      pgSum += c * w * pg.value
      let grad = w * pg.grad
      if (refLogp !== undefined) {
        const ref = refLogp[t]
        inputFinite(ref, () => `${f}.refLogp[${t}]`)
        const k = kl(lp, ref)
        klSum += c * ws * k.value
        grad += cfg.klCoef * ws * k.grad
      }
      entSum += c * ws * H
      ai[t] = c * grad
      bi[t] = -cfg.entropyCoef * c * ws
    }
  }
  const loss = pgSum + cfg.klCoef * klSum - cfg.entropyCoef * entSum
  checkOutputs(loss, a, b)
  const frac = (k: number): number => (localTokens > 0 ? k / localTokens : 0)
  return {
    loss,
    a,
    b,
    metrics: {
      policyLoss: pgSum,
      kl: haveAllRefs ? klSum : null,
      entropy: entSum,
      clipFracLow: frac(nLow),
      clipFracHigh: frac(nHigh),
      clipFrac: frac(nLow + nHigh),
      dualClipFrac: frac(nDual),
      approxKl: frac(approxKlSum),
      tokens: localTokens,
      sequences: localSeqs,
    },
  }
}

// ---------------------------------------------------------------------------------------------
// Weighted SFT
// ---------------------------------------------------------------------------------------------

/** Weighted SFT has no options: the normalization is fixed by UID Eq. 8 and B.3. */
export type SftObjectiveConfig = Record<string, never>

export interface SftMetrics {
  /** Unweighted token-mean negative log-likelihood over this batch. */
  nll: number
  /** Mean weight over the sequences with ≥ 1 unmasked token. */
  meanWeight: number
  tokens: number
  sequences: number
}

export type SftResult = TokenObjectiveResult<SftMetrics>

// UID Eq. 8: L = −(1/N) Σ_i (w_i/T_i) Σ_t logp_{i,t}; a_t = −w_i/(N·T_i). N = responses with ≥ 1
// unmasked token, global across micro-batches (UID B.3: "averaged over examples across gradient
// accumulation … weights are not renormalized within microbatches"), so N and not Σ w_i.
function computeSft(batch: SftBatch, norm?: BatchNormalizer): SftResult {
  const seqs = sequencesOf(batch, 'sft')
  const S = seqs.length
  const counts = new Int32Array(S)
  const weights = new Float64Array(S)
  let localTokens = 0
  let localSeqs = 0
  let weightSum = 0
  for (let i = 0; i < S; i++) {
    const s = seqs[i]
    const f = `sequences[${i}]`
    if (!isRecord(s)) throw new InvalidArgumentError(f, `${f} must be an object`)
    checkArray(s.logp, `${f}.logp`)
    weights[i] = sampleWeight(s.weight, f)
    const n = unmaskedCount(s.logp, s.mask, f)
    counts[i] = n
    localTokens += n
    if (n > 0) {
      localSeqs++
      weightSum += weights[i]
    }
  }
  const N = normalizerField(norm, 'sequences', localSeqs)
  const a: Float64Array[] = new Array(S)
  const b: Float64Array[] = new Array(S)
  let loss = 0
  let nllSum = 0
  for (let i = 0; i < S; i++) {
    const s = seqs[i]
    const T = s.logp.length
    const ai = new Float64Array(T)
    a[i] = ai
    b[i] = new Float64Array(T)
    const n = counts[i]
    if (n === 0) continue
    const coef = N > 0 ? weights[i] / (N * n) : 0
    let sum = 0
    for (let t = 0; t < T; t++) {
      if (s.mask !== undefined && !s.mask[t]) continue
      const lp = s.logp[t]
      inputFinite(lp, () => `sequences[${i}].logp[${t}]`)
      sum += lp
      ai[t] = -coef
    }
    nllSum -= sum
    loss -= coef * sum
  }
  checkOutputs(loss, a, b)
  return {
    loss,
    a,
    b,
    metrics: {
      nll: localTokens > 0 ? nllSum / localTokens : 0,
      meanWeight: localSeqs > 0 ? weightSum / localSeqs : 0,
      tokens: localTokens,
      sequences: localSeqs,
    },
  }
}

// ---------------------------------------------------------------------------------------------
// DPO
// ---------------------------------------------------------------------------------------------

export interface DpoObjectiveConfig {
  /** DPO coefficient β > 0 (UID B.3: 0.1, the default). */
  beta?: number
}

export interface ResolvedDpoConfig {
  beta: number
}

/** Validate a DPO config; throws InvalidArgumentError naming the field. */
export function resolveDpoConfig(config?: DpoObjectiveConfig): ResolvedDpoConfig {
  const c = asConfig(config, 'dpo objective')
  checkKeys(c, ['beta'], 'dpo objective')
  return { beta: numberField(c, 'beta', 0.1, { min: 0, minExclusive: true }) }
}

export interface DpoMetrics {
  /** Mean of β(π_c − ref_c) over this batch's pairs. */
  rewardChosen: number
  /** Mean of β(π_r − ref_r). */
  rewardRejected: number
  /** Mean of z = β[(π_c − ref_c) − (π_r − ref_r)]. */
  rewardMargin: number
  /** Fraction of pairs with z > 0. */
  accuracy: number
  pairs: number
  tokens: number
}

export type DpoResult = TokenObjectiveResult<DpoMetrics>

// UID §4.3 / B.3 with the standard DPO objective: L = (1/P) Σ_p −log σ(z_p); ∂L/∂logp_t = ±β·∂L/∂z for every unmasked token of the chosen (+) / rejected (−) sequence.
function computeDpo(cfg: ResolvedDpoConfig, batch: DpoBatch, norm?: BatchNormalizer): DpoResult {
  const seqs = sequencesOf(batch, 'dpo')
  const S = seqs.length
  const pairs = checkPairs((batch as { pairs?: unknown }).pairs, S, 'sequences')
  const pol = new Float64Array(S)
  const ref = new Float64Array(S)
  let tokens = 0
  for (let i = 0; i < S; i++) {
    const s = seqs[i]
    const f = `sequences[${i}]`
    if (!isRecord(s)) throw new InvalidArgumentError(f, `${f} must be an object`)
    checkArray(s.logp, `${f}.logp`)
    const T = s.logp.length
    tokens += unmaskedCount(s.logp, s.mask, f)
    const refArr = typeof s.refLogp === 'number' ? null : s.refLogp
    if (refArr === null) {
      inputFinite(s.refLogp as number, () => `${f}.refLogp`)
      ref[i] = s.refLogp as number
    } else {
      if (refArr === undefined) throw new InvalidArgumentError(`${f}.refLogp`, `${f}.refLogp is required`)
      checkArray(refArr, `${f}.refLogp`)
      checkSameLength(refArr, T, `${f}.refLogp`)
    }
    let sp = 0
    let sr = 0
    for (let t = 0; t < T; t++) {
      if (s.mask !== undefined && !s.mask[t]) continue
      const lp = s.logp[t]
      inputFinite(lp, () => `${f}.logp[${t}]`)
      sp += lp
      if (refArr !== null) {
        const r = refArr[t]
        inputFinite(r, () => `${f}.refLogp[${t}]`)
        sr += r
      }
    }
    pol[i] = sp
    if (refArr !== null) ref[i] = sr
  }
  const P = normalizerField(norm, 'pairs', pairs.length)
  const dSeq = new Float64Array(S)
  let loss = 0
  let rc = 0
  let rr = 0
  let correct = 0
  for (const [ci, ri] of pairs) {
    const z = dpoMargin(cfg.beta, pol[ci], ref[ci], pol[ri], ref[ri])
    rc += cfg.beta * (pol[ci] - ref[ci])
    rr += cfg.beta * (pol[ri] - ref[ri])
    if (z > 0) correct++
    if (P === 0) continue
    const l = negLogSigmoid(z)
    loss += l.value / P
    const g = (cfg.beta * l.grad) / P // ∂L/∂π_c; ∂L/∂π_r = −g
    dSeq[ci] += g
    dSeq[ri] -= g
  }
  const a: Float64Array[] = new Array(S)
  const b: Float64Array[] = new Array(S)
  for (let i = 0; i < S; i++) {
    const s = seqs[i]
    const T = s.logp.length
    const ai = new Float64Array(T)
    for (let t = 0; t < T; t++) if (s.mask === undefined || s.mask[t]) ai[t] = dSeq[i]
    a[i] = ai
    b[i] = new Float64Array(T)
  }
  checkOutputs(loss, a, b)
  const np = pairs.length
  return {
    loss,
    a,
    b,
    metrics: {
      rewardChosen: np > 0 ? rc / np : 0,
      rewardRejected: np > 0 ? rr / np : 0,
      rewardMargin: np > 0 ? (rc - rr) / np : 0,
      accuracy: np > 0 ? correct / np : 0,
      pairs: np,
      tokens,
    },
  }
}

// ---------------------------------------------------------------------------------------------
// Bradley–Terry
// ---------------------------------------------------------------------------------------------

/** Bradley–Terry has no options. */
export type BradleyTerryObjectiveConfig = Record<string, never>

export interface BradleyTerryMetrics {
  /** Fraction of pairs with s⁺ > s⁻. */
  accuracy: number
  /** Mean of s⁺ − s⁻. */
  margin: number
  pairs: number
}

export type BradleyTerryResult = ScoreObjectiveResult<BradleyTerryMetrics>

// JZ Eq. 13: L_J = −(1/P) Σ_p log σ(s⁺_p − s⁻_p) = (1/P) Σ softplus(s⁻ − s⁺); ∂L/∂s⁺ = −σ(s⁻ − s⁺)/P = −∂L/∂s⁻.
function computeBradleyTerry(batch: ScoreBatch, norm?: BatchNormalizer): BradleyTerryResult {
  if (!isRecord(batch)) throw new InvalidArgumentError('scores', 'bradley-terry batch must be an object with scores and pairs')
  checkArray(batch.scores, 'scores')
  const scores = batch.scores
  const pairs = checkPairs(batch.pairs, scores.length, 'scores')
  const P = normalizerField(norm, 'pairs', pairs.length)
  const dScores = new Float64Array(scores.length)
  let loss = 0
  let marginSum = 0
  let correct = 0
  for (const [wi, li] of pairs) {
    const sw = scores[wi]
    const sl = scores[li]
    inputFinite(sw, () => `scores[${wi}]`)
    inputFinite(sl, () => `scores[${li}]`)
    const d = sw - sl
    marginSum += d
    if (d > 0) correct++
    if (P === 0) continue
    const l = negLogSigmoid(d)
    loss += l.value / P
    dScores[wi] += l.grad / P
    dScores[li] -= l.grad / P
  }
  if (!Number.isFinite(loss)) throw new NonFiniteError('output', 'loss', loss)
  for (let i = 0; i < dScores.length; i++) {
    if (!Number.isFinite(dScores[i])) throw new NonFiniteError('output', `dScores[${i}]`, dScores[i])
  }
  const np = pairs.length
  return {
    loss,
    dScores,
    metrics: { accuracy: np > 0 ? correct / np : 0, margin: np > 0 ? marginSum / np : 0, pairs: np },
  }
}

// ---------------------------------------------------------------------------------------------
// Objective objects and the registry
// ---------------------------------------------------------------------------------------------

/** An objective over per-token logprobs/entropies (the engine back-propagates a_t, b_t). */
export interface TokenObjective<N extends string, B, M, C> {
  readonly name: N
  readonly kind: 'token'
  readonly config: Readonly<C>
  compute(batch: B, normalizer?: BatchNormalizer): TokenObjectiveResult<M>
}

/** An objective over one scalar score per sequence (the engine back-propagates ∂L/∂s). */
export interface ScoreObjective<N extends string, B, M, C> {
  readonly name: N
  readonly kind: 'score'
  readonly config: Readonly<C>
  compute(batch: B, normalizer?: BatchNormalizer): ScoreObjectiveResult<M>
}

export type PolicyObjective = TokenObjective<'policy', PolicyBatch, PolicyMetrics, ResolvedPolicyConfig>
export type SftObjective = TokenObjective<'sft', SftBatch, SftMetrics, Record<string, never>>
export type DpoObjective = TokenObjective<'dpo', DpoBatch, DpoMetrics, ResolvedDpoConfig>
export type BradleyTerryObjective = ScoreObjective<'bradley-terry', ScoreBatch, BradleyTerryMetrics, Record<string, never>>
export type Objective = PolicyObjective | SftObjective | DpoObjective | BradleyTerryObjective

/** PPO clipped surrogate with dual clip, KL to the reference, entropy bonus (verl semantics; COSE Eq. 4–5 weights). */
export function policyObjective(config?: PolicyObjectiveConfig): PolicyObjective {
  const cfg = Object.freeze(resolvePolicyConfig(config))
  return { name: 'policy', kind: 'token', config: cfg, compute: (batch, normalizer) => computePolicy(cfg, batch, normalizer) }
}

/** Weighted SFT with a response-token mean per sequence (UID Eq. 8). */
export function sftObjective(config?: SftObjectiveConfig): SftObjective {
  checkKeys(asConfig(config, 'sft objective'), [], 'sft objective')
  return { name: 'sft', kind: 'token', config: Object.freeze({}), compute: (batch, normalizer) => computeSft(batch, normalizer) }
}

/** DPO on sequence logprob sums of policy and frozen reference (UID §4.3, B.3). */
export function dpoObjective(config?: DpoObjectiveConfig): DpoObjective {
  const cfg = Object.freeze(resolveDpoConfig(config))
  return { name: 'dpo', kind: 'token', config: cfg, compute: (batch, normalizer) => computeDpo(cfg, batch, normalizer) }
}

/** Bradley–Terry loss on scalar scores (JZ Eq. 13). */
export function bradleyTerryObjective(config?: BradleyTerryObjectiveConfig): BradleyTerryObjective {
  checkKeys(asConfig(config, 'bradley-terry objective'), [], 'bradley-terry objective')
  return {
    name: 'bradley-terry',
    kind: 'score',
    config: Object.freeze({}),
    compute: (batch, normalizer) => computeBradleyTerry(batch, normalizer),
  }
}

/** Objective factories by name, as verl's POLICY_LOSS_REGISTRY. */
export const OBJECTIVES = Object.freeze({
  policy: policyObjective,
  sft: sftObjective,
  dpo: dpoObjective,
  'bradley-terry': bradleyTerryObjective,
})

export type ObjectiveName = keyof typeof OBJECTIVES
export const OBJECTIVE_NAMES = Object.keys(OBJECTIVES) as ObjectiveName[]

/** The factory registered as `name`; throws InvalidArgumentError('name') for an unknown one. */
export function getObjective<N extends ObjectiveName>(name: N): (typeof OBJECTIVES)[N] {
  if (typeof name !== 'string' || !Object.prototype.hasOwnProperty.call(OBJECTIVES, name)) {
    throw new InvalidArgumentError('name', `unknown objective name "${String(name)}"; known: ${OBJECTIVE_NAMES.join(', ')}`)
  }
  return OBJECTIVES[name]
}

/** A trainer's `objective` option: the name plus that objective's config. */
export type ObjectiveSpec =
  | ({ name: 'policy' } & PolicyObjectiveConfig)
  | { name: 'sft' }
  | ({ name: 'dpo' } & DpoObjectiveConfig)
  | { name: 'bradley-terry' }

/** Build (and validate) an objective from `{ name, ...config }`. */
export function createObjective(spec: ObjectiveSpec): Objective {
  if (!isRecord(spec)) throw new InvalidArgumentError('objective', 'objective spec must be an object with a name')
  const { name, ...config } = spec as { name: unknown } & Record<string, unknown>
  getObjective(name as ObjectiveName) // validates the name
  switch (name as ObjectiveName) {
    case 'policy':
      return policyObjective(config as PolicyObjectiveConfig)
    case 'sft':
      return sftObjective(config as SftObjectiveConfig)
    case 'dpo':
      return dpoObjective(config as DpoObjectiveConfig)
    case 'bradley-terry':
      return bradleyTerryObjective(config as BradleyTerryObjectiveConfig)
  }
}

/**
 * Denominators of the global batch made of `microBatches`, for `compute(microBatch, normalizer)`:
 * then Σ over micro-batches of loss (and the concatenated a, b, dScores) equals the full batch's.
 */
export function globalNormalizer(
  microBatches: ReadonlyArray<TokenBatch<TokenSequence> | DpoBatch | ScoreBatch>,
): Required<BatchNormalizer> {
  let tokens = 0
  let sequences = 0
  let maxLength = 0
  let pairs = 0
  microBatches.forEach((mb, k) => {
    if (!isRecord(mb)) throw new InvalidArgumentError(`microBatches[${k}]`, `microBatches[${k}] must be a batch object`)
    if ('sequences' in mb) {
      const seqs = sequencesOf(mb as { sequences: readonly TokenSequence[] }, 'micro')
      seqs.forEach((s, i) => {
        const f = `microBatches[${k}].sequences[${i}]`
        checkArray(s.logp, `${f}.logp`)
        const n = unmaskedCount(s.logp, s.mask, f)
        tokens += n
        if (n > 0) sequences++
        if (s.logp.length > maxLength) maxLength = s.logp.length
      })
    }
    if ('pairs' in mb && Array.isArray(mb.pairs)) pairs += mb.pairs.length
  })
  return { tokens, sequences, maxLength, pairs }
}
