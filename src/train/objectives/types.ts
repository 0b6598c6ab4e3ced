// Types shared by every objective: per-token sequences and batches, the batch normalizer of
// gradient accumulation, results, and the error a non-finite value raises.

import { AutodidactError } from '../../engine/errors.js'

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
