// The policy objective: PPO clipped surrogate with dual clip, KL to the reference and an entropy
// bonus, with verl's semantics (compute_policy_loss_vanilla, kl_penalty, agg_loss).

import { InvalidArgumentError } from '../../engine/errors.js'
import { aggregationCoefficient, type AggregationDenominators, clippedSurrogate, importanceRatio, klEstimator, LOG_RATIO_CLAMP, type ValueGrad } from './formulas.js'
import { type BatchNormalizer, KL_ESTIMATORS, type KlEstimator, LOSS_AGGREGATIONS, type LossAggregation, type PolicyBatch, type TokenObjective, type TokenObjectiveResult, type TokenValues } from './types.js'
import { asConfig, checkArray, checkedSequence, checkKeys, checkOutputs, checkSameLength, enumField, inputFinite, normalizerField, numberField, sampleWeight, sequencesOf, unmaskedCount } from './validation.js'

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
    const { s, f } = checkedSequence(seqs, i)
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
  const kl = klEstimator(cfg.klEstimator)
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

export type PolicyObjective = TokenObjective<'policy', PolicyBatch, PolicyMetrics, ResolvedPolicyConfig>

/** PPO clipped surrogate with dual clip, KL to the reference, entropy bonus (verl semantics; COSE Eq. 4–5 weights). */
export function policyObjective(config?: PolicyObjectiveConfig): PolicyObjective {
  const cfg = Object.freeze(resolvePolicyConfig(config))
  return { name: 'policy', kind: 'token', config: cfg, compute: (batch, normalizer) => computePolicy(cfg, batch, normalizer) }
}
