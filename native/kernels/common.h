// Shared definitions for the kernel math. Every function in native/kernels/*.h is plain inline
// arithmetic callable from host code (g++) and device code (nvcc): backends add only the
// parallel structure around it.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define AD_HD __host__ __device__ __forceinline__
#else
#define AD_HD inline
#endif

namespace ad {

AD_HD float ad_expf(float x) { return expf(x); }
AD_HD float ad_logf(float x) { return logf(x); }
AD_HD float ad_sqrtf(float x) { return sqrtf(x); }

// The exponential of the layer kernels' elementwise math: the device's fast __expf (as its
// kernels have always used), the library expf on the host.
AD_HD float ad_fast_expf(float x) {
#if defined(__CUDA_ARCH__)
  return __expf(x);
#else
  return expf(x);
#endif
}

// 1/sqrt(x): the device's rsqrtf, on the host 1/sqrtf.
AD_HD float ad_rsqrtf(float x) {
#if defined(__CUDA_ARCH__)
  return rsqrtf(x);
#else
  return 1.0f / sqrtf(x);
#endif
}

constexpr float kNegInf = -INFINITY;

}  // namespace ad
