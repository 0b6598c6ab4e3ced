// Reads tensors straight from safetensors files (TypeScript has validated the headers), widens
// BF16/F16 to the CPU backend's f32, and refuses a tensor holding NaN or ±Inf (NonFiniteTensor) in
// the same pass: a non-finite weight can only make every logit it reaches NaN.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/gemm_weights.h"
#include "model/engine.h"
#include "model/transformer.h"

namespace ad::model {

// A tensor that holds NaN or ±Inf: its first such element (flat index) and that element's value.
class NonFiniteTensor : public std::runtime_error {
 public:
  NonFiniteTensor(const TensorSource& src, int64_t index, int64_t numel, float value);
  std::string file, tensor;
  int64_t index, numel;
  float value;
};

// Index of the first NaN or ±Inf among `n` f32 values, or -1 (bf16/f16 are tested as they widen).
int64_t first_non_finite(const float* v, int64_t n);

// Throws std::runtime_error naming the file and tensor on any I/O failure, NonFiniteTensor on a
// NaN or ±Inf.
Tensor read_tensor(const TensorSource& src);

// The type a tensor is kept in under `format`: f32 unless kept_at_weight_type(id).
cpu::WeightType weight_type_for(WeightFormat format, TensorId id, DType file_dtype);
// The tensor read and, when `type` is not f32, converted (its f32 copy freed).
Tensor read_tensor_as(const TensorSource& src, cpu::WeightType type);

using cpu::bf16_to_f32;
using cpu::f16_to_f32;

}  // namespace ad::model
