// Reads tensors straight from safetensors files (TypeScript has validated the headers) and
// widens BF16/F16 to the CPU backend's f32.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/gemm_weights.h"
#include "model/engine.h"
#include "model/transformer.h"

namespace ad::model {

// Throws std::runtime_error naming the file and tensor on any I/O failure.
Tensor read_tensor(const TensorSource& src);

// The type a tensor is kept in under `format`: f32 unless kept_at_weight_type(id).
cpu::WeightType weight_type_for(WeightFormat format, TensorId id, DType file_dtype);
// The tensor read and, when `type` is not f32, converted (its f32 copy freed).
Tensor read_tensor_as(const TensorSource& src, cpu::WeightType type);

using cpu::bf16_to_f32;
using cpu::f16_to_f32;

}  // namespace ad::model
