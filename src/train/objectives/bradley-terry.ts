// The Bradley–Terry loss on scalar scores of preference pairs (JZ Eq. 13).

import { InvalidArgumentError } from '../../engine/errors.js'
import { negLogSigmoid } from './formulas.js'
import { type BatchNormalizer, NonFiniteError, type ScoreBatch, type ScoreObjective, type ScoreObjectiveResult } from './types.js'
import { asConfig, checkArray, checkKeys, checkPairs, inputFinite, isRecord, normalizerField } from './validation.js'

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

export type BradleyTerryObjective = ScoreObjective<'bradley-terry', ScoreBatch, BradleyTerryMetrics, Record<string, never>>

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
