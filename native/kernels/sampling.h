// One sampling step over a raw logits row, in this order (the contract test/reference/sampling64.ts
// states in float64):
//   1. repetition penalty r (HF), each distinct id of history (prompt + generated): z>0 ? z/r : z·r
//   2. presence p and frequency f penalties (OpenAI), each distinct generated id: z −= p + f·count
//   3. temperature T: T == 0 → greedy argmax (lowest id on ties); else z /= T
//   4. top-k (k > 0): the k largest, boundary ties toward lower ids
//   5. softmax over the kept tokens
//   6. top-p (p < 1): by probability descending (ties: lower id), the shortest prefix reaching p
//   7. min-p (m > 0): keep prob ≥ m · maxProb
//   8. renormalize; u = uniform01(seed, stream, position); the first kept id, in ascending id
//      order, whose cumulative mass exceeds u · total
// This header holds the per-element math the backends share; cpu/sampling_cpu.cpp adds selection.
#pragma once
#include "kernels/common.h"
#include "kernels/philox.h"

namespace ad {

struct SamplingParams {
  float temperature = 1;         // 0 = greedy
  int32_t top_k = 0;             // 0 = off
  float top_p = 1;               // 1 = off
  float min_p = 0;               // 0 = off
  float repetition_penalty = 1;  // 1 = off
  float presence_penalty = 0;
  float frequency_penalty = 0;
  uint64_t seed = 0;
  uint64_t stream = 0;  // e.g. the sequence id: draws of different sequences never collide
};

AD_HD bool sampling_is_greedy(const SamplingParams& p) { return !(p.temperature > 0); }

// HF RepetitionPenaltyLogitsProcessor: shrinks positive logits and grows negative ones.
AD_HD float repetition_penalized(float z, float r) { return z > 0 ? z / r : z * r; }

// OpenAI presence/frequency penalties for a token generated `count` (≥ 1) times.
AD_HD float presence_frequency_penalized(float z, float presence, float frequency, int32_t count) {
  return z - (presence + frequency * static_cast<float>(count));
}

// Step 1–3 for one token: raw z, whether it is in history, its count among generated ids.
AD_HD float penalized_logit(float z, const SamplingParams& p, bool in_history, int32_t generated_count) {
  if (in_history) z = repetition_penalized(z, p.repetition_penalty);
  if (generated_count > 0) z = presence_frequency_penalized(z, p.presence_penalty, p.frequency_penalty, generated_count);
  return sampling_is_greedy(p) ? z : z / p.temperature;
}

// Ranking of step 6: probability (here: unnormalized mass) descending, ties toward the lower id.
AD_HD bool mass_before(float ma, int32_t ia, float mb, int32_t ib) { return ma > mb || (ma == mb && ia < ib); }

// Step 7's test on unnormalized masses (the ratio is unchanged by normalization).
AD_HD bool min_p_keeps(float mass, float max_mass, float min_p) { return mass >= min_p * max_mass; }

// The draw of step 8.
AD_HD float sampling_uniform(const SamplingParams& p, uint64_t position) {
  return uniform01(p.seed, p.stream, position);
}

}  // namespace ad
