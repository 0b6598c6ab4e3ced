// Causal attention for one query row and one head over the keys of its sequence, softmax
// scaled by 1/sqrt(d). Scores are kept in caller scratch so training can reuse them.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

// out[d] = Σ_j softmax(q·k_j · scale)_j v_j over j ∈ [0, n_keys). k_j = keys + j·stride.
// probs[n_keys] receives the softmax weights.
template <typename Dot, typename Axpy>
AD_HD void attention_row(const float* q, const float* keys, const float* values, int64_t stride, int n_keys,
                         int head_dim, float scale, float* probs, float* out, Dot dot, Axpy axpy) {
  float m = kNegInf;
  for (int j = 0; j < n_keys; ++j) {
    float s = dot(q, keys + j * stride, head_dim) * scale;
    probs[j] = s;
    m = s > m ? s : m;
  }
  double sum = 0.0;
  for (int j = 0; j < n_keys; ++j) {
    float e = ad_expf(probs[j] - m);
    probs[j] = e;
    sum += e;
  }
  float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < head_dim; ++i) out[i] = 0.f;
  for (int j = 0; j < n_keys; ++j) {
    probs[j] *= inv;
    axpy(probs[j], values + j * stride, out, head_dim);
  }
}

}  // namespace ad::kernels
