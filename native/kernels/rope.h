// Rotary position embeddings in the Hugging Face layout (rotate_half: element i pairs with
// i + d/2), with Llama 3's frequency-dependent scaling of the inverse frequencies.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

struct Llama3RopeScaling {
  bool enabled;
  float factor;
  float low_freq_factor;
  float high_freq_factor;
  float original_max_position;
};

// inv_freq[i] = θ^(−2i/d), then Llama 3's rescaling of long wavelengths (transformers'
// _compute_llama3_parameters).
AD_HD double rope_inv_freq(int i, int head_dim, double theta, const Llama3RopeScaling& s) {
  double inv = 1.0 / pow(theta, (2.0 * i) / head_dim);
  if (!s.enabled) return inv;
  const double pi = 3.14159265358979323846;
  double low_wavelen = s.original_max_position / s.low_freq_factor;
  double high_wavelen = s.original_max_position / s.high_freq_factor;
  double wavelen = 2.0 * pi / inv;
  if (wavelen < high_wavelen) return inv;
  if (wavelen > low_wavelen) return inv / s.factor;
  double smooth = (s.original_max_position / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * inv / s.factor + smooth * inv;
}

// The rotation of one pair (a, b) = (x[i], x[i + d/2]) by the angle whose cos and sin are c, s,
// and its inverse (the transpose: the backward of the forward rotation).
AD_HD void rope_rotate(float& a, float& b, float c, float s) {
  const float x0 = a, x1 = b;
  a = x0 * c - x1 * s;
  b = x1 * c + x0 * s;
}
AD_HD void rope_unrotate(float& a, float& b, float c, float s) {
  const float g0 = a, g1 = b;
  a = g0 * c + g1 * s;
  b = g1 * c - g0 * s;
}

// Rotates one head vector x[d] in place given cos/sin tables of length d/2 for its position.
AD_HD void rope_apply(float* x, const float* cos_t, const float* sin_t, int head_dim) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) rope_rotate(x[i], x[i + half], cos_t[i], sin_t[i]);
}

// The inverse of rope_apply, which is also its backward: the transpose rotation of a gradient.
AD_HD void rope_apply_inverse(float* g, const float* cos_t, const float* sin_t, int head_dim) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) rope_unrotate(g[i], g[i + half], cos_t[i], sin_t[i]);
}

}  // namespace ad::kernels
