// Matrix products of the CPU backend, in the layouts the transformer uses (row-major, HF Linear
// weights stored [out, in]).
#pragma once
#include <cstdint>

#include "cpu/threadpool.h"

namespace ad::cpu {

// Y[M×N] (=|+=) X[M×K] · W[N×K]ᵀ (+ bias[N]). Leading dimensions in elements.
void gemm_nt(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, const float* bias,
             float* Y, int64_t ldy, int64_t M, int64_t N, int64_t K, bool accumulate);

// Y[M×N] (=|+=) X[M×K] · W[K×N] (W row-major, not transposed).
void gemm_nn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate);

// Y[M×N] (=|+=) X[K×M]ᵀ · W[K×N]: the weight-gradient product dW = dYᵀ·X.
void gemm_tn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate);

}  // namespace ad::cpu
