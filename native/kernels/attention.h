// Causal attention for one query row and one head over the keys of its sequence, softmax scaled
// by 1/sqrt(d), forward and backward side by side:
//   s_j = q·k_j·scale,  p = softmax(s),  out = Σ_j p_j v_j
//   dv_j += p_j·dout,  dp_j = dout·v_j,  ds_j = p_j (dp_j − Σ_i p_i dp_i),  dq = scale·Σ_j ds_j k_j,
//   dk_j += scale·ds_j·q
// Two forwards: attention_row (two passes, the CPU's) and attention_row_online (one pass with a
// running max, the device's per-warp kernels); their element steps and the score gradient are
// what both backends compute.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

// A score's softmax weight given the row's log-sum-exp.
AD_HD float attention_probability(float score, float lse) { return ad_fast_expf(score - lse); }

// One step of the one-pass softmax: adds score sc to the running max m and sum l; corr rescales
// what was accumulated before, p is sc's weight relative to the new max.
AD_HD void online_softmax_add(float& m, float& l, float sc, float& corr, float& p) {
  const float m_new = fmaxf(m, sc);
  corr = ad_fast_expf(m - m_new);
  p = ad_fast_expf(sc - m_new);
  l = l * corr + p;
  m = m_new;
}

AD_HD float online_softmax_lse(float m, float l) { return m + ad_logf(l); }

// d s_j = p_j (dp_j − delta) · scale, delta = Σ_i p_i dp_i (= dout·out) in the accumulator's precision.
template <class A>
AD_HD float softmax_grad_element(float p, float dp, A delta, float scale) {
  return static_cast<float>(p * (dp - delta)) * scale;
}

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

// The same row in one pass over the keys (no score buffer).
template <typename Dot>
AD_HD void attention_row_online(const float* q, const float* keys, const float* values, int64_t stride, int n_keys, int head_dim,
                                float scale, float* out, Dot dot) {
  float m = kNegInf, l = 0.f;
  for (int i = 0; i < head_dim; ++i) out[i] = 0.f;
  for (int j = 0; j < n_keys; ++j) {
    float corr, p;
    online_softmax_add(m, l, dot(q, keys + j * stride, head_dim) * scale, corr, p);
    for (int i = 0; i < head_dim; ++i) out[i] = out[i] * corr + p * values[j * stride + i];
  }
  const float inv = 1.f / l;
  for (int i = 0; i < head_dim; ++i) out[i] *= inv;
}

// Backward of attention_row for one query row: dq[d] is written; dk and dv are accumulated for
// keys j ≥ first_grad_key (earlier keys came from an untaped call), into dk_first + (j −
// first_grad_key)·stride and likewise dv. probs and dprobs are caller scratch of n_keys.
template <typename Dot, typename Axpy>
AD_HD void attention_row_backward(const float* q, const float* keys, const float* values, int64_t stride, int n_keys, int head_dim,
                                  float scale, const float* dout, float* probs, float* dprobs, float* dq, float* dk_first,
                                  float* dv_first, int first_grad_key, Dot dot, Axpy axpy) {
  float m = kNegInf;
  for (int j = 0; j < n_keys; ++j) {
    probs[j] = dot(q, keys + j * stride, head_dim) * scale;
    m = probs[j] > m ? probs[j] : m;
  }
  double sum = 0.0;
  for (int j = 0; j < n_keys; ++j) sum += (probs[j] = ad_expf(probs[j] - m));
  double delta = 0.0;
  for (int j = 0; j < n_keys; ++j) {
    probs[j] = static_cast<float>(probs[j] / sum);
    dprobs[j] = dot(dout, values + j * stride, head_dim);
    delta += static_cast<double>(probs[j]) * dprobs[j];
  }
  for (int i = 0; i < head_dim; ++i) dq[i] = 0.f;
  for (int j = 0; j < n_keys; ++j) {
    const float ds = softmax_grad_element(probs[j], dprobs[j], delta, scale);
    axpy(ds, keys + j * stride, dq, head_dim);
    if (j < first_grad_key) continue;
    axpy(ds, q, dk_first + (j - first_grad_key) * stride, head_dim);
    axpy(probs[j], dout, dv_first + (j - first_grad_key) * stride, head_dim);
  }
}

}  // namespace ad::kernels
