// SwiGLU gate of the Llama/Qwen MLP: h = silu(gate) · up.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

AD_HD float silu(float x) { return x / (1.0f + ad_expf(-x)); }

AD_HD void swiglu_row(const float* gate, const float* up, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = silu(gate[i]) * up[i];
}

}  // namespace ad::kernels
