// Matrix products of the CPU backend, in the layouts the transformer uses (row-major, HF Linear
// weights stored [out, in]). Leading dimensions are in elements. Every element of Y in range is
// written; with `accumulate` the product is added to Y, else Y's old contents are never read.
// A row of gemm_nt's Y is the same bits whatever M, the other rows and the thread count: its
// summation order depends on K alone (see cpu/gemm_kernels.h).
#pragma once
#include <cstdint>
#include <vector>

#include "cpu/threadpool.h"

namespace ad::cpu {

// Y[M×N] (=|+=) X[M×K] · W[N×K]ᵀ (+ bias[N]): a Linear's forward.
void gemm_nt(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, const float* bias,
             float* Y, int64_t ldy, int64_t M, int64_t N, int64_t K, bool accumulate);

// The types a frozen model's weight W[N×K] may be kept in (the loadModel `weights` option).
enum class WeightType { kF32, kBF16, kF16, kQ8 };

// A weight matrix in one of them: `data` holds N rows `ld` elements apart (f32, bf16 or f16
// bits, or int8 codes); kQ8 adds one f16 scale per block of 32 along K, rows `scales_ld` apart
// (w = code · scale; cpu/gemm_kernels.h).
struct WeightMatrix {
  WeightType type = WeightType::kF32;
  const void* data = nullptr;
  int64_t ld = 0;
  const uint16_t* scales = nullptr;
  int64_t scales_ld = 0;
};

// gemm_nt over W in any of those types, widened to f32 in registers: the bits of the f32 gemm_nt
// over the widened weights (same order of every sum).
void gemm_nt(ThreadPool& pool, const float* X, int64_t ldx, const WeightMatrix& W, const float* bias, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate);

// Y[M×K] (=|+=) X[M×N] · W[N×K] (W row-major, not transposed): the input gradient dX = dY·W.
// Note the names: here N is the depth of the sum and K the width of Y.
void gemm_nn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate);

// Y[M×N] (=|+=) X[K×M]ᵀ · W[K×N]: the weight-gradient product dW = dYᵀ·X.
void gemm_tn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate);

// The micro-kernels this build runs, in words (e.g. "avx2+fma: dot 4x3x8, outer 6x16").
const char* gemm_kernel();

// The machine's FMA peak, measured: flops per second of each pool thread running `iterations`
// rounds of 12 independent register-only FMA chains, all threads at once (cpu/gemm_peak.cpp).
std::vector<double> fma_peak_flops(ThreadPool& pool, int64_t iterations);

}  // namespace ad::cpu
