// LoRA merge on the device: kernels/lora.h's lora_merged_element per output element.
#include "cuda/ops_lora.h"

#include "cuda/ops_layers.h"
#include "kernels/lora.h"

namespace ad::cuda {
namespace {

__global__ void k_lora_merge(const float* __restrict__ W, float* W_out, bf16* W16_out, const float* __restrict__ A,
                             const float* __restrict__ B, int64_t out, int64_t in, int rank, float scale) {
  const int64_t n = out * in;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = e / in, i = e % in;
    const float w = kernels::lora_merged_element(W[e], B + o * rank, A, rank, in, i, scale);
    W_out[e] = w;
    if (W16_out) W16_out[e] = __float2bfloat16(w);
  }
}

}  // namespace

void lora_merge(const float* W, float* W_out, bf16* W16_out, const float* A, const float* B, int64_t out, int64_t in, int rank,
                float scale, cudaStream_t s) {
  const int64_t n = out * in;
  if (n <= 0) return;
  const int64_t blocks = (n + 255) / 256;
  k_lora_merge<<<static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, s>>>(W, W_out, W16_out, A, B, out, in, rank, scale);
  layers_check(cudaGetLastError(), "lora_merge");
}

}  // namespace ad::cuda
