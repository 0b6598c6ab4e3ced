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
//
// One objective a file under src/train/objectives/; this module is their public face.

export * from './objectives/types.js'
export * from './objectives/formulas.js'
export * from './objectives/policy.js'
export * from './objectives/sft.js'
export * from './objectives/dpo.js'
export * from './objectives/bradley-terry.js'
export * from './objectives/registry.js'
export * from './objectives/normalizer.js'
