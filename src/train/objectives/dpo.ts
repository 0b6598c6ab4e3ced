// DPO on sequence logprob sums of the policy and its frozen reference (UID §4.3, B.3), optionally
// with RPO's NLL term on the chosen response (Pang et al. 2024; TRL's rpo_alpha) or DPO-Positive's
// penalty on a chosen response below its reference (Pal et al. 2024), both outside UID.

import { InvalidArgumentError } from '../../engine/errors.js'
import { dpoMargin, dpopPenalty, negLogSigmoid } from './formulas.js'
import type { BatchNormalizer, DpoBatch, TokenObjective, TokenObjectiveResult } from './types.js'
import { asConfig, checkArray, checkedSequence, checkKeys, checkOutputs, checkPairs, checkSameLength, inputFinite, normalizerField, numberField, sequencesOf, unmaskedCount } from './validation.js'

export interface DpoObjectiveConfig {
  /** DPO coefficient β > 0 (UID B.3: 0.1, the default). */
  beta?: number
  /** α ≥ 0 of RPO's term α·NLL(chosen), the chosen response's mean token NLL (default 0: plain DPO, as UID). */
  rpoAlpha?: number
  /** λ ≥ 0 of DPO-Positive's β·λ·max(0, ref_c − π_c) inside the sigmoid (default 0: plain DPO, as UID). */
  dpopLambda?: number
}

export interface ResolvedDpoConfig {
  beta: number
  rpoAlpha: number
  dpopLambda: number
}

/** Validate a DPO config; throws InvalidArgumentError naming the field. */
export function resolveDpoConfig(config?: DpoObjectiveConfig): ResolvedDpoConfig {
  const c = asConfig(config, 'dpo objective')
  checkKeys(c, ['beta', 'rpoAlpha', 'dpopLambda'], 'dpo objective')
  return {
    beta: numberField(c, 'beta', 0.1, { min: 0, minExclusive: true }),
    rpoAlpha: numberField(c, 'rpoAlpha', 0, { min: 0 }),
    dpopLambda: numberField(c, 'dpopLambda', 0, { min: 0 }),
  }
}

export interface DpoMetrics {
  /** Mean of β(π_c − ref_c) over this batch's pairs. */
  rewardChosen: number
  /** Mean of β(π_r − ref_r). */
  rewardRejected: number
  /** Mean of z = β[(π_c − ref_c) − (π_r − ref_r)]. */
  rewardMargin: number
  /** Fraction of pairs whose chosen implicit reward is above the rejected one's (DPO's z > 0; DPO-Positive's penalty aside). */
  accuracy: number
  /** Mean over pairs of the chosen response's mean token NLL (what RPO's term weighs by α). */
  chosenNll: number
  /** Fraction of pairs whose chosen response is below the reference, π_c < ref_c (what DPO-Positive penalizes). */
  chosenBelowReference: number
  pairs: number
  tokens: number
}

export type DpoResult = TokenObjectiveResult<DpoMetrics>

// UID §4.3 / B.3 with the standard DPO objective: L = (1/P) Σ_p −log σ(z_p); ∂L/∂logp_t = ±β·∂L/∂z for every unmasked token of the chosen (+) / rejected (−) sequence.
// RPO (Pang et al. 2024, Eq. 1) adds (α/P) Σ_p −(1/T_c) Σ_t logp_t over the chosen tokens: ∂/∂logp_t = −α/(P·T_c) there.
// DPO-Positive (Pal et al. 2024, §3) puts −β·λ·max(0, ref_c − π_c) into z: ∂z/∂π_c = β·(1 + λ) while π_c < ref_c.
function computeDpo(cfg: ResolvedDpoConfig, batch: DpoBatch, norm?: BatchNormalizer): DpoResult {
  const seqs = sequencesOf(batch, 'dpo')
  const S = seqs.length
  const pairs = checkPairs((batch as { pairs?: unknown }).pairs, S, 'sequences')
  const pol = new Float64Array(S)
  const ref = new Float64Array(S)
  const counts = new Float64Array(S)
  let tokens = 0
  for (let i = 0; i < S; i++) {
    const { s, f } = checkedSequence(seqs, i)
    const T = s.logp.length
    counts[i] = unmaskedCount(s.logp, s.mask, f)
    tokens += counts[i]
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
  let nll = 0
  let below = 0
  for (const [ci, ri] of pairs) {
    const margin = dpoMargin(cfg.beta, pol[ci], ref[ci], pol[ri], ref[ri])
    const z = margin - dpopPenalty(cfg.beta, cfg.dpopLambda, pol[ci], ref[ci])
    const chosenBelow = pol[ci] < ref[ci]
    if (chosenBelow) below++
    rc += cfg.beta * (pol[ci] - ref[ci])
    rr += cfg.beta * (pol[ri] - ref[ri])
    if (margin > 0) correct++
    const chosenNll = counts[ci] > 0 ? -pol[ci] / counts[ci] : 0
    nll += chosenNll
    if (P === 0) continue
    const l = negLogSigmoid(z)
    loss += l.value / P
    const g = (cfg.beta * l.grad) / P // ∂L/∂π_r = −g; ∂L/∂π_c = g, times (1 + λ) below the reference
    dSeq[ci] += chosenBelow ? g * (1 + cfg.dpopLambda) : g
    dSeq[ri] -= g
    if (cfg.rpoAlpha > 0 && counts[ci] > 0) {
      loss += (cfg.rpoAlpha * chosenNll) / P
      dSeq[ci] -= cfg.rpoAlpha / (P * counts[ci])
    }
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
      chosenNll: np > 0 ? nll / np : 0,
      chosenBelowReference: np > 0 ? below / np : 0,
      pairs: np,
      tokens,
    },
  }
}

export type DpoObjective = TokenObjective<'dpo', DpoBatch, DpoMetrics, ResolvedDpoConfig>

/** DPO on sequence logprob sums of policy and frozen reference (UID §4.3, B.3), with RPO's chosen-NLL term when rpoAlpha > 0 and DPO-Positive's penalty when dpopLambda > 0. */
export function dpoObjective(config?: DpoObjectiveConfig): DpoObjective {
  const cfg = Object.freeze(resolveDpoConfig(config))
  return { name: 'dpo', kind: 'token', config: cfg, compute: (batch, normalizer) => computeDpo(cfg, batch, normalizer) }
}
