// The global batch normalizer: denominators over every micro-batch of a step, so that micro-batch
// losses and gradients sum exactly to the full batch's (verl's agg_loss global_batch_size).

import { InvalidArgumentError } from '../../engine/errors.js'
import type { BatchNormalizer, DpoBatch, ScoreBatch, TokenBatch, TokenSequence } from './types.js'
import { checkArray, isRecord, sequencesOf, unmaskedCount } from './validation.js'

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
