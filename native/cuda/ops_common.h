// Internal helpers of the ops_*.cu files: error recording, launch checks, warp/block reductions.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "cuda/ops.h"

namespace ad::cuda::detail {

// Records `what` as this thread's last error and returns err.
cudaError_t fail(cudaError_t err, const std::string& what);
// cudaErrorInvalidValue with a message.
inline cudaError_t invalid(const std::string& what) { return fail(cudaErrorInvalidValue, what); }
// Checks the launch just made (cudaGetLastError); names `kernel` in the message.
cudaError_t launched(const char* kernel);

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Multiprocessors of the current device (cached per device; 108 if the query fails).
int sm_count();

// ---------------------------------------------------------------------------------------------
// Device helpers

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ void store_as(float* p, float x) { *p = x; }
__device__ __forceinline__ void store_as(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ double warp_sum(double x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ unsigned long long warp_sum(unsigned long long x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `red` is shared scratch of ≥ 32 elements; the call synchronizes twice.
template <class T>
__device__ __forceinline__ T block_sum(T x, T* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = warp_sum(x);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = x;
  __syncthreads();
  T total = T(0);
  for (int w = 0; w < warps; ++w) total += red[w];  // fixed order: deterministic
  return total;
}

}  // namespace ad::cuda::detail

#define AD_CUDA_TRY(expr)                          \
  do {                                             \
    cudaError_t ad_try_err_ = (expr);              \
    if (ad_try_err_ != cudaSuccess) return ad_try_err_; \
  } while (0)
