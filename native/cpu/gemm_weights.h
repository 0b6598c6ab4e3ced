// Weight matrices kept in a frozen model's memory type (the loadModel `weights` option): bf16 and
// f16 bits, or int8 codes with one f16 scale per block of 32 along the depth (Q8_0's layout);
// made from f32 at load, read by gemm_nt through WeightMatrix views, widened to f32 in registers.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "cpu/gemm.h"

namespace ad::cpu {

// f32 → bf16 / f16 bits, round to nearest even (NaN stays NaN; f16 overflow becomes ±inf).
uint16_t f32_to_bf16(float f);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t h);
float f16_to_f32(uint16_t h);

// The int8 format's scale of a block whose largest magnitude is `amax`: the least f16 d with
// 127·d ≥ amax, so round(w/d) never needs clamping and |w − q·d| ≤ d/2 exactly. Throws
// std::domain_error when amax is not finite or 127·d would exceed f16's range.
uint16_t q8_scale_for(float amax);

struct StoredWeights {
  WeightType type = WeightType::kF32;
  int64_t rows = 0, cols = 0;
  std::vector<uint16_t> halves;  // bf16 / f16: rows × cols
  std::vector<int8_t> codes;     // int8: rows × cols
  std::vector<uint16_t> scales;  // int8: rows × scale_blocks()

  int64_t scale_blocks() const { return (cols + 31) / 32; }
  WeightMatrix view() const;
  int64_t bytes() const;
  // Element (r, c) as the GEMM reads it (widened to f32; int8: code · scale, exact).
  float value(int64_t r, int64_t c) const;
  // Row r widened into dst[0, cols).
  void widen_row(int64_t r, float* dst) const;
};

// W [rows × cols] f32 in `type` (not kF32). Throws std::domain_error naming `name` for a value
// the type cannot hold (beyond f16's range; int8: a non-finite weight).
StoredWeights store_weights(const float* w, int64_t rows, int64_t cols, WeightType type, const std::string& name);

const char* weight_type_name(WeightType t);

// Bytes a weight of type t takes in memory (int8: the code and its share of the block's f16 scale).
double bytes_per_weight(WeightType t);

}  // namespace ad::cpu
