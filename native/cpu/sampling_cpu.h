// CPU backend of one sampling step (semantics in kernels/sampling.h): penalties and temperature in
// one vector pass, then partial selection (a bounded heap or weighted quickselect), never a full
// O(V log V) sort of the vocabulary.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/sampling.h"

namespace ad::cpu {

using SamplingParams = ad::SamplingParams;

// Bytes of caller-provided scratch sample_token needs for a row of `vocab` logits, any alignment
// (about 16·vocab + 20 KiB). One scratch per concurrent caller.
size_t sampling_scratch_bytes(int64_t vocab);

// One token from one row of raw logits. history = prompt + generated ids (repetition penalty),
// generated = generated ids (presence/frequency penalties); ids outside [0, vocab) are ignored.
// Same (params.seed, params.stream, position) and inputs → same token.
int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position,
                     const int32_t* history, int64_t n_history, const int32_t* generated, int64_t n_generated,
                     void* scratch);

}  // namespace ad::cpu
