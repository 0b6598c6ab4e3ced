// LoRA (Hu et al. 2021, Eq. 3): h = W·x + (α/r)·B·A·x with A [r × in], B [out × r]. The forward and
// backward are matrix products (each backend's GEMM); what is element-wise lives here, for both:
// the merge W' = W + (α/r)·B·A, one output element at a time, summed over the rank in order.
#pragma once
#include "kernels/common.h"

namespace ad::kernels {

// W'[o, i] = W[o, i] + scale·Σ_k B[o, k]·A[k, i]; `b_row` = B + o·rank, A row-major [rank × in].
AD_HD float lora_merged_element(float w, const float* b_row, const float* A, int rank, int64_t in, int64_t i, float scale) {
  float acc = 0.f;
  for (int k = 0; k < rank; ++k) acc += b_row[k] * A[static_cast<int64_t>(k) * in + i];
  return w + scale * acc;
}

}  // namespace ad::kernels
