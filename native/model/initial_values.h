// The initial values of the tensors an engine adds to a model (LoRA adapters, a score head), drawn
// on the host from one seeded stream so that every backend starts from the same numbers.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace ad::model {

// PEFT's default LoRA A: kaiming-uniform, U(±1/sqrt(in)); B starts at 0 so the adapter is a no-op.
// Drawn in the order (layer, target) from `rng`, rank·in values each.
inline void lora_initial_a(std::mt19937_64& rng, int64_t rank, int64_t in, float* out) {
  const float bound = 1.f / std::sqrt(static_cast<float>(in));
  std::uniform_real_distribution<float> u(-bound, bound);
  for (int64_t i = 0; i < rank * in; ++i) out[i] = u(rng);
}

// A score head's weight as transformers initializes it: N(0, std²), `n` values.
inline std::vector<float> score_head_initial(uint64_t seed, float std, int64_t n) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.f, std);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& v : out) v = d(rng);
  return out;
}

}  // namespace ad::model
