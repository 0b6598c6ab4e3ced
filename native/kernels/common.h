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

constexpr float kNegInf = -INFINITY;

}  // namespace ad
