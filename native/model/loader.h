// Reads tensors straight from safetensors files (TypeScript has validated the headers) and
// widens BF16/F16 to the CPU backend's f32.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/engine.h"
#include "model/transformer.h"

namespace ad::model {

// Throws std::runtime_error naming the file and tensor on any I/O failure.
Tensor read_tensor(const TensorSource& src);

float bf16_to_f32(uint16_t h);
float f16_to_f32(uint16_t h);

}  // namespace ad::model
