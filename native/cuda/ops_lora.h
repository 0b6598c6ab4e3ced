// The element-wise LoRA op of the CUDA backend: the merge W' = W + α/r·B·A (kernels/lora.h's
// arithmetic, one thread per output element). LoRA's forward and backward are GEMMs (ops.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace ad::cuda {

// W_out[out × in] = W + scale·B·A (f32 masters: A [rank × in], B [out × rank]); W_out may be W.
// With W16_out, also its bf16 copy. Launches on `s`; throws std::runtime_error on a launch error.
void lora_merge(const float* W, float* W_out, __nv_bfloat16* W16_out, const float* A, const float* B, int64_t out, int64_t in,
                int rank, float scale, cudaStream_t s);

}  // namespace ad::cuda
