// Sequence-level confidence of a generated feedback sequence (Validator or Judge output), from
// the per-token statistics the engine's sampling pass returns. COSE uses normalized entropy
// (Eq. 2–3); its Table 7 compares Self-Certainty, margin, max logit and negative entropy. Every
// function averages over the positions kept by `mask` and returns NaN when the mask keeps none
// (an empty feedback sequence carries no confidence; callers decide what that means, e.g.
// `coseProposerWeight` maps it to the 0.1 floor).

import { clip, logSumExp } from '../util/math.js'
import { Registry } from '../util/registry.js'
import { checkMask, maskedMean, type TokenMask } from './mask.js'
import { selfCertaintyTopK } from './topk.js'

// COSE Eq. 2: c_t = 1 − H(P_t) / log|V|, clamped to [0, 1] against rounding in H.
export function tokenNormalizedEntropyConfidence(entropy: number, vocabSize: number): number {
  if (!(vocabSize >= 2)) throw new RangeError(`vocabSize must be ≥ 2, got ${vocabSize}`)
  return clip(1 - entropy / Math.log(vocabSize), 0, 1)
}

// COSE Eq. 3: c_seq = (1/T) Σ_t c_t over the scored tokens.
export function normalizedEntropyConfidence(
  entropies: ArrayLike<number>,
  vocabSize: number,
  mask?: TokenMask,
): number {
  checkMask(mask, entropies.length)
  if (!(vocabSize >= 2)) throw new RangeError(`vocabSize must be ≥ 2, got ${vocabSize}`)
  const logV = Math.log(vocabSize)
  let s = 0
  let n = 0
  for (let t = 0; t < entropies.length; t++) {
    if (mask === undefined || mask[t]) {
      s += clip(1 - entropies[t] / logV, 0, 1)
      n++
    }
  }
  return n === 0 ? NaN : s / n
}

// UID A.1 (Kang et al. 2025), full vocabulary: C_t = KL(U_V ‖ p_t) = logsumexp(z) − mean(z) − log|V|.
export function tokenSelfCertaintyFromLogits(logits: ArrayLike<number>): number {
  const V = logits.length
  if (V < 1) throw new RangeError('empty logit row')
  let zsum = 0
  for (let j = 0; j < V; j++) zsum += logits[j]
  return logSumExp(logits) - zsum / V - Math.log(V)
}

// UID A.1, full-vocabulary Self-Certainty of a sequence from per-token logsumexp and mean logit
// (Σ_v z_v / |V|), the two reductions a fused vocabulary pass produces.
export function selfCertaintyFullVocab(
  logsumexp: ArrayLike<number>,
  meanLogit: ArrayLike<number>,
  vocabSize: number,
  mask?: TokenMask,
): number {
  if (logsumexp.length !== meanLogit.length) {
    throw new RangeError(`logsumexp (${logsumexp.length}) and meanLogit (${meanLogit.length}) differ in length`)
  }
  checkMask(mask, logsumexp.length)
  const logV = Math.log(vocabSize)
  let s = 0
  let n = 0
  for (let t = 0; t < logsumexp.length; t++) {
    if (mask === undefined || mask[t]) {
      s += logsumexp[t] - meanLogit[t] - logV
      n++
    }
  }
  return n === 0 ? NaN : s / n
}

// COSE Table 7 "Margin": mean over tokens of the top-1 minus top-2 raw logit.
export function marginConfidence(margins: ArrayLike<number>, mask?: TokenMask): number {
  return maskedMean(margins, mask)
}

/**
 * Per-token margins from row-major top-K logits, as the engine would report them: top-1 minus
 * top-2 raw logit (`space: 'logit'`, default) or top-1 minus top-2 probability under the full
 * softmax, which needs the per-token logsumexp (`space: 'prob'`).
 */
export function marginsFromTopK(
  topKLogits: ArrayLike<number>,
  K: number,
  opts: { space?: 'logit' | 'prob'; logsumexp?: ArrayLike<number> } = {},
): Float64Array {
  if (K < 2) throw new RangeError('margins need K ≥ 2')
  if (topKLogits.length % K !== 0) throw new RangeError('top-K array length is not a multiple of K')
  const T = topKLogits.length / K
  const space = opts.space ?? 'logit'
  if (space === 'prob' && (opts.logsumexp === undefined || opts.logsumexp.length !== T)) {
    throw new RangeError("space 'prob' needs one logsumexp per position")
  }
  const out = new Float64Array(T)
  for (let t = 0; t < T; t++) {
    let a = -Infinity
    let b = -Infinity
    for (let j = 0; j < K; j++) {
      const z = topKLogits[t * K + j]
      if (z > a) {
        b = a
        a = z
      } else if (z > b) b = z
    }
    out[t] = space === 'logit' ? a - b : Math.exp(a - opts.logsumexp![t]) - Math.exp(b - opts.logsumexp![t])
  }
  return out
}

// COSE Table 7 "Max logit": mean over tokens of the largest raw logit.
export function maxLogitConfidence(maxLogits: ArrayLike<number>, mask?: TokenMask): number {
  return maskedMean(maxLogits, mask)
}

// COSE Table 7 "Neg. entropy": −(1/T) Σ_t H(P_t) over the full vocabulary.
export function negativeEntropyConfidence(entropies: ArrayLike<number>, mask?: TokenMask): number {
  const m = maskedMean(entropies, mask)
  return Number.isNaN(m) ? NaN : -m
}

/** Per-token statistics as the engine returns them; each signal reads the fields it needs. */
export interface TokenStats {
  /** Full-vocabulary entropy of each position's raw-logit distribution (nats). */
  entropy?: ArrayLike<number>
  logsumexp?: ArrayLike<number>
  /** Mean raw logit over the vocabulary, Σ_v z_v / |V|. */
  meanLogit?: ArrayLike<number>
  maxLogit?: ArrayLike<number>
  /** Top-1 minus top-2 raw logit. */
  margin?: ArrayLike<number>
  /** Row-major [T × topK] raw logits. */
  topKLogits?: ArrayLike<number>
  topK?: number
  vocabSize?: number
}

export type ConfidenceSignal = (stats: TokenStats, mask?: TokenMask) => number

function need<K extends keyof TokenStats>(stats: TokenStats, key: K, signal: string): NonNullable<TokenStats[K]> {
  const v = stats[key]
  if (v === undefined || v === null) throw new Error(`confidence signal "${signal}" needs stats.${String(key)}`)
  return v as NonNullable<TokenStats[K]>
}

/** Confidence signals by name (COSE §4.7, Table 7); configs select one for Validator and Judge. */
export const confidenceSignals = new Registry<ConfidenceSignal>('confidence signal')

confidenceSignals.register('normalized-entropy', (s, m) =>
  normalizedEntropyConfidence(need(s, 'entropy', 'normalized-entropy'), need(s, 'vocabSize', 'normalized-entropy'), m),
)
confidenceSignals.register('self-certainty', (s, m) =>
  selfCertaintyFullVocab(
    need(s, 'logsumexp', 'self-certainty'),
    need(s, 'meanLogit', 'self-certainty'),
    need(s, 'vocabSize', 'self-certainty'),
    m,
  ),
)
confidenceSignals.register('self-certainty-topk', (s, m) =>
  selfCertaintyTopK(need(s, 'topKLogits', 'self-certainty-topk'), need(s, 'topK', 'self-certainty-topk'), m),
)
confidenceSignals.register('margin', (s, m) => marginConfidence(need(s, 'margin', 'margin'), m))
confidenceSignals.register('max-logit', (s, m) => maxLogitConfidence(need(s, 'maxLogit', 'max-logit'), m))
confidenceSignals.register('neg-entropy', (s, m) => negativeEntropyConfidence(need(s, 'entropy', 'neg-entropy'), m))

/** Sequence confidence by signal name, e.g. `sequenceConfidence('normalized-entropy', stats, mask)`. */
export function sequenceConfidence(signal: string, stats: TokenStats, mask?: TokenMask): number {
  return confidenceSignals.get(signal)(stats, mask)
}
