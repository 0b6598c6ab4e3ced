// One sampled response as the UID scorers see it (UID A.1, B.1): its normalized answer, whether
// it is complete, and the per-token statistics captured in the sampling pass (top-25 raw logits:
// no rescoring pass), reduced to the scored-token count, the B entropy bins and the mean
// Self-Certainty. Special tokens and chat control tokens, thinking delimiters included, are not
// scored (UID A.1).
import type { Completion } from '../../engine/model.js'
import type { Policy } from '../common/policy.js'
import { maskExcludingTokens } from '../../signals/mask.js'
import { UID_TOP_K } from '../../signals/topk.js'
import { responseTrajectory } from '../../signals/uid.js'
import type { AnswerRules } from '../../worlds/types.js'

/** How trajectories are scored: top-k support, bins and the UID eligibility threshold (UID B.1). */
export interface ScoringOptions {
  /** Renormalized top-k support (UID: 25). */
  topK: number
  /** Relative-position bins B (UID: 32). */
  bins: number
  /** UID needs at least this many scored tokens (UID: 32). */
  minTokens: number
}

export const PAPER_SCORING: ScoringOptions = { topK: UID_TOP_K, bins: 32, minTokens: 32 }

export interface Trajectory {
  text: string
  /** The sampled completion's token ids (end-of-sequence token included). */
  tokenIds: number[]
  /** Normalized extracted answer; null when none or when the response is incomplete. */
  answer: string | null
  /** Finished by a stop token or string (not truncated, not aborted). */
  complete: boolean
  /** Scored tokens T. */
  tokens: number
  /** The B bin entropies, or null when T < minTokens (UID B.1; selectors and offline also require `complete`). */
  bins: Float64Array | null
  /** Response-token mean of C_t (UID Eq. 9), NaN when no token is scored. */
  selfCertainty: number
}

/** Special-token ids plus the thinking delimiters, which no score reads (UID A.1). */
export function unscoredTokenIds(model: Policy): Set<number> {
  const ids = new Set<number>(model.tokenizer.specialTokenIds)
  for (const t of ['<think>', '</think>', '<thinking>', '</thinking>']) {
    const id = model.tokenizer.tokenToId(t)
    if (id !== null) ids.add(id)
  }
  return ids
}

/** A response's trajectory from its sampling-pass statistics. Throws when top-K logits are missing. */
export function trajectoryOf(c: Completion, answers: Pick<AnswerRules, 'answer'>, unscored: ReadonlySet<number>, o: ScoringOptions): Trajectory {
  if (!c.topK) throw new RangeError('trajectory scoring needs per-token top-K logits: generate with stats: { topK }')
  const complete = c.finishReason === 'stop'
  const mask = maskExcludingTokens(c.tokens, unscored)
  const t = responseTrajectory(c.topK.logits, c.topK.k, mask, { k: Math.min(o.topK, c.topK.k), bins: o.bins, minTokens: o.minTokens })
  return {
    text: c.text,
    tokenIds: Array.from(c.tokens),
    answer: complete ? answers.answer(c.text) : null,
    complete,
    tokens: t.tokens,
    bins: t.bins,
    selfCertainty: t.selfCertainty,
  }
}
