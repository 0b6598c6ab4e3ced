// RMSNorm as Llama/Qwen compute it: y = x · rsqrt(mean(x²) + eps) · w.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

// Returns rstd = 1/sqrt(mean(x²)+eps), kept by training for the backward pass.
AD_HD float rmsnorm_row(const float* x, const float* w, float* y, int n, float eps) {
  double ss = 0.0;  // double: the mean of squares over a few thousand elements stays exact to f32
  for (int i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  float rstd = static_cast<float>(1.0 / sqrt(ss / n + eps));
  for (int i = 0; i < n; ++i) y[i] = x[i] * rstd * w[i];
  return rstd;
}

}  // namespace ad::kernels
