// Weighted SFT (UID Eq. 8).

import type { BatchNormalizer, SftBatch, TokenObjective, TokenObjectiveResult } from './types.js'
import { asConfig, checkedSequence, checkKeys, checkOutputs, inputFinite, normalizerField, sampleWeight, sequencesOf, unmaskedCount } from './validation.js'

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
    const { s, f } = checkedSequence(seqs, i)
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

export type SftObjective = TokenObjective<'sft', SftBatch, SftMetrics, Record<string, never>>

/** Weighted SFT with a response-token mean per sequence (UID Eq. 8). */
export function sftObjective(config?: SftObjectiveConfig): SftObjective {
  checkKeys(asConfig(config, 'sft objective'), [], 'sft objective')
  return { name: 'sft', kind: 'token', config: Object.freeze({}), compute: (batch, normalizer) => computeSft(batch, normalizer) }
}
