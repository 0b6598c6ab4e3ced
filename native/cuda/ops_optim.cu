// Fused AdamW with global-norm clipping (ops.h). The update of each element is
// kernels::adamw_update (kernels/adamw.h) on one element, the same arithmetic as the CPU trainer;
// the clipping factor is computed on the device from Σ g² so no host round trip is needed.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/ops.h"
#include "cuda/ops_common.h"
#include "kernels/adamw.h"

namespace ad::cuda {

using detail::invalid;

namespace {

constexpr int kThreads = 256;

int grid_for(int64_t n) {
  const int64_t blocks = detail::ceil_div(n, kThreads);
  const int64_t cap = int64_t(detail::sm_count()) * 8;
  return static_cast<int>(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

__global__ void clip_reset_kernel(GradClip* clip) {
  clip->sumsq = 0.0;
  clip->norm = 0.0f;
  clip->scale = 1.0f;
  clip->finite = 1;
}

// Σ g² per block in f64 (grid-stride, fixed order within a block), one atomicAdd per block.
__global__ void __launch_bounds__(kThreads) sumsq_kernel(const float* __restrict__ g, int64_t n, GradClip* clip) {
  __shared__ double red[32];
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const double x = g[i];
    s += x * x;
  }
  s = detail::block_sum<double>(s, red);
  if (threadIdx.x == 0) atomicAdd(&clip->sumsq, s);
}

__global__ void clip_finalize_kernel(GradClip* clip, float max_norm) {
  const double ss = clip->sumsq;
  const double norm = sqrt(ss);
  clip->norm = static_cast<float>(norm);
  clip->finite = isfinite(norm) ? 1 : 0;
  clip->scale = (max_norm > 0.0f && norm > max_norm) ? static_cast<float>(double(max_norm) / norm) : 1.0f;
}

__device__ __forceinline__ void adamw_one(float* w, __nv_bfloat16* wb, const float* g, float* m, float* v, int64_t i,
                                          const kernels::AdamWParams& p, bool decay) {
  kernels::adamw_update(w + i, g + i, m + i, v + i, 1, p, decay);
  if (wb) wb[i] = __float2bfloat16_rn(w[i]);
}

__global__ void __launch_bounds__(kThreads) adamw_kernel(float* __restrict__ w, __nv_bfloat16* __restrict__ wb,
                                                          const float* __restrict__ g, float* __restrict__ m,
                                                          float* __restrict__ v, int64_t n, kernels::AdamWParams p,
                                                          bool decay, const GradClip* clip) {
  if (clip) {
    if (!clip->finite) return;
    p.grad_scale *= clip->scale;
  }
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads)
    adamw_one(w, wb, g, m, v, i, p, decay);
}

// blockIdx.y = tensor; blocks of x stride over its elements.
__global__ void __launch_bounds__(kThreads) adamw_multi_kernel(const AdamWTensor* tensors, kernels::AdamWParams p,
                                                                const GradClip* clip) {
  if (clip) {
    if (!clip->finite) return;
    p.grad_scale *= clip->scale;
  }
  const AdamWTensor t = tensors[blockIdx.y];
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < t.n; i += int64_t(gridDim.x) * kThreads)
    adamw_one(t.w, t.w_bf16, t.g, t.m, t.v, i, p, t.decay != 0);
}

__global__ void __launch_bounds__(kThreads) sumsq_multi_kernel(const AdamWTensor* tensors, GradClip* clip) {
  __shared__ double red[32];
  const AdamWTensor t = tensors[blockIdx.y];
  double s = 0.0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < t.n; i += int64_t(gridDim.x) * kThreads) {
    const double x = t.g[i];
    s += x * x;
  }
  s = detail::block_sum<double>(s, red);
  if (threadIdx.x == 0) atomicAdd(&clip->sumsq, s);
}

__global__ void __launch_bounds__(kThreads) zero_multi_kernel(const AdamWTensor* tensors) {
  const AdamWTensor t = tensors[blockIdx.y];
  float* g = const_cast<float*>(t.g);  // gradient buffers: read-only to AdamW, cleared here
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < t.n; i += int64_t(gridDim.x) * kThreads) g[i] = 0.0f;
}

// Blocks per tensor for the multi-tensor kernels: enough to cover the largest, ≤ 8 waves in all.
dim3 multi_grid(int count, int64_t max_n) {
  int64_t bx = detail::ceil_div(max_n, kThreads);
  const int64_t cap = detail::ceil_div(int64_t(detail::sm_count()) * 8, count);
  if (bx > cap) bx = cap > 0 ? cap : 1;
  return dim3(static_cast<unsigned>(bx), static_cast<unsigned>(count));
}

}  // namespace

cudaError_t grad_sumsq_multi(const AdamWTensor* tensors, int count, int64_t max_n, GradClip* clip, cudaStream_t stream) {
  if (!clip || count < 0 || max_n < 0 || (count > 0 && !tensors)) return invalid("grad_sumsq_multi: bad arguments");
  if (count > 65535) return invalid("grad_sumsq_multi: at most 65535 tensors per launch");
  if (count == 0 || max_n == 0) return cudaSuccess;
  sumsq_multi_kernel<<<multi_grid(count, max_n), kThreads, 0, stream>>>(tensors, clip);
  return detail::launched("sumsq_multi_kernel");
}

cudaError_t grad_zero_multi(const AdamWTensor* tensors, int count, int64_t max_n, cudaStream_t stream) {
  if (count < 0 || max_n < 0 || (count > 0 && !tensors)) return invalid("grad_zero_multi: bad arguments");
  if (count > 65535) return invalid("grad_zero_multi: at most 65535 tensors per launch");
  if (count == 0 || max_n == 0) return cudaSuccess;
  zero_multi_kernel<<<multi_grid(count, max_n), kThreads, 0, stream>>>(tensors);
  return detail::launched("zero_multi_kernel");
}

cudaError_t grad_clip_reset(GradClip* clip, cudaStream_t stream) {
  if (!clip) return invalid("grad_clip_reset: null clip");
  clip_reset_kernel<<<1, 1, 0, stream>>>(clip);
  return detail::launched("clip_reset_kernel");
}

cudaError_t grad_sumsq(const float* g, int64_t n, GradClip* clip, cudaStream_t stream) {
  if (!clip || n < 0 || (n > 0 && !g)) return invalid("grad_sumsq: bad arguments");
  if (n == 0) return cudaSuccess;
  sumsq_kernel<<<grid_for(n), kThreads, 0, stream>>>(g, n, clip);
  return detail::launched("sumsq_kernel");
}

cudaError_t grad_clip_finalize(GradClip* clip, float max_norm, cudaStream_t stream) {
  if (!clip) return invalid("grad_clip_finalize: null clip");
  clip_finalize_kernel<<<1, 1, 0, stream>>>(clip, max_norm);
  return detail::launched("clip_finalize_kernel");
}

cudaError_t adamw_step(float* w, __nv_bfloat16* w_bf16, const float* g, float* m, float* v, int64_t n,
                       const kernels::AdamWParams& p, bool decay, const GradClip* clip, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (!w || !g || !m || !v))) return invalid("adamw_step: bad arguments");
  if (!(p.bias_correction1 > 0.0f) || !(p.bias_correction2 > 0.0f))
    return invalid("adamw_step: bias corrections must be positive (step ≥ 1)");
  if (n == 0) return cudaSuccess;
  adamw_kernel<<<grid_for(n), kThreads, 0, stream>>>(w, w_bf16, g, m, v, n, p, decay, clip);
  return detail::launched("adamw_kernel");
}

cudaError_t adamw_step_multi(const AdamWTensor* tensors, int count, int64_t max_n, const kernels::AdamWParams& p,
                             const GradClip* clip, cudaStream_t stream) {
  if (count < 0 || max_n < 0 || (count > 0 && !tensors)) return invalid("adamw_step_multi: bad arguments");
  if (count > 65535) return invalid("adamw_step_multi: at most 65535 tensors per launch");
  if (!(p.bias_correction1 > 0.0f) || !(p.bias_correction2 > 0.0f))
    return invalid("adamw_step_multi: bias corrections must be positive (step ≥ 1)");
  if (count == 0 || max_n == 0) return cudaSuccess;
  adamw_multi_kernel<<<multi_grid(count, max_n), kThreads, 0, stream>>>(tensors, p, clip);
  return detail::launched("adamw_multi_kernel");
}

}  // namespace ad::cuda
