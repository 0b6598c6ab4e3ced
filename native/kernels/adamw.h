// AdamW (Loshchilov & Hutter): decoupled weight decay, bias-corrected moments.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

struct AdamWParams {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;  // 1 − β1^t
  float bias_correction2;  // 1 − β2^t
  float grad_scale;        // global-norm clipping factor (1 when not clipped)
};

// w, g, m, v never overlap; with `p` copied into registers the loop reads nothing a store could
// change, so the host compiler vectorizes it (the same IEEE operations on every lane).
AD_HD void adamw_update(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v, int64_t n,
                        const AdamWParams& params, bool decay) {
  const AdamWParams p = params;
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * p.grad_scale;
    m[i] = p.beta1 * m[i] + (1.f - p.beta1) * gi;
    v[i] = p.beta2 * v[i] + (1.f - p.beta2) * gi * gi;
    const float mhat = m[i] / p.bias_correction1;
    const float vhat = v[i] / p.bias_correction2;
    if (decay) w[i] -= p.lr * p.weight_decay * w[i];
    w[i] -= p.lr * mhat / (ad_sqrtf(vhat) + p.eps);
  }
}

}  // namespace ad::kernels
