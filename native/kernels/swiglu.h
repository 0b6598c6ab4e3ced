// SwiGLU, the gate of the Llama/Qwen MLP, forward and backward side by side:
//   h = silu(g) · u,  silu(g) = g·σ(g)
//   dh/du = silu(g),  dh/dg = u · σ(g)·(1 + g·(1 − σ(g)))
// The element functions are what both backends compute per element (the device's fast exp).
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

AD_HD float sigmoid(float x) { return 1.f / (1.f + ad_fast_expf(-x)); }
AD_HD float silu(float x) { return x / (1.0f + ad_fast_expf(-x)); }

AD_HD float swiglu_element(float g, float u) { return silu(g) * u; }

// d gate and d up of one element from the incoming d h.
AD_HD void swiglu_backward_element(float g, float u, float dh, float& dg, float& du) {
  const float s = sigmoid(g);
  du = dh * g * s;                        // dh · silu(g)
  dg = dh * u * s * (1.f + g * (1.f - s));  // silu'(g) = σ(g)(1 + g(1 − σ(g)))
}

AD_HD void swiglu_row(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = swiglu_element(gate[i], up[i]);
}

// dgate may alias dh (each element is read before it is written).
AD_HD void swiglu_row_backward(const float* gate, const float* up, const float* dh, float* dgate, float* dup, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float dg, du;
    swiglu_backward_element(gate[i], up[i], dh[i], dg, du);
    dgate[i] = dg;
    dup[i] = du;
  }
}

}  // namespace ad::kernels
