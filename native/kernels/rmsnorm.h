// RMSNorm as Llama/Qwen compute it, forward and backward side by side:
//   y = x · r · w,  r = (mean(x²) + eps)^(−1/2)
//   dx = r·(w⊙dy) − r³/n · x · Σ(w⊙dy⊙x),  dw += dy⊙x·r
// The accumulator A of the row sums is a parameter: double on the CPU (the mean of squares of a
// few thousand elements stays exact to f32), float on the device (its block and warp sums); the
// element functions are what both backends compute per element.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

// r from the row's sum of squares, in the accumulator's precision.
AD_HD double rms_inverse(double sum_squares, int n, float eps) { return 1.0 / sqrt(sum_squares / n + eps); }
AD_HD float rms_inverse(float sum_squares, int n, float eps) { return ad_rsqrtf(sum_squares / n + eps); }

AD_HD float rmsnorm_element(float x, float r, float w) { return x * r * w; }

// r³/n · Σ(w⊙dy⊙x), the coefficient of x in dx.
template <class A>
AD_HD A rmsnorm_grad_coef(A r, A dot, int n) {
  return r * r * r * dot / n;
}

// One element of dx (r and c in the accumulator's precision).
template <class A>
AD_HD float rmsnorm_grad_element(A r, A c, float w, float dy, float x) {
  return static_cast<float>(r * w * dy - c * x);
}

// One element of dw.
template <class A>
AD_HD float rmsnorm_weight_grad_element(float dy, float x, A r) {
  return static_cast<float>(dy * x * r);
}

// One row; returns r (kept by training for the backward pass).
template <class A = double>
AD_HD float rmsnorm_row(const float* x, const float* w, float* y, int n, float eps) {
  A ss = 0;
  for (int i = 0; i < n; ++i) ss += static_cast<A>(x[i]) * x[i];
  const float r = static_cast<float>(rms_inverse(ss, n, eps));
  for (int i = 0; i < n; ++i) y[i] = rmsnorm_element(x[i], r, w[i]);
  return r;
}

// Backward of one row: dx (=|+=) ∂L/∂x; dw (when not null) += ∂L/∂w. r is recomputed from x.
template <class A = double>
AD_HD void rmsnorm_row_backward(const float* x, const float* w, const float* dy, float* dx, float* dw, int n, float eps,
                                bool accumulate_dx) {
  A ss = 0, dot = 0;
  for (int i = 0; i < n; ++i) {
    ss += static_cast<A>(x[i]) * x[i];
    dot += static_cast<A>(w[i]) * dy[i] * x[i];
  }
  const A r = rms_inverse(ss, n, eps);
  const A c = rmsnorm_grad_coef(r, dot, n);
  for (int i = 0; i < n; ++i) {
    const float g = rmsnorm_grad_element(r, c, w[i], dy[i], x[i]);
    dx[i] = accumulate_dx ? dx[i] + g : g;
    if (dw) dw[i] += rmsnorm_weight_grad_element(dy[i], x[i], r);
  }
}

}  // namespace ad::kernels
