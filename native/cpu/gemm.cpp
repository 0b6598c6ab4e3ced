// Dot-product-form GEMM: both operands are read along K contiguously, a register tile of
// kMR rows of X × kNR rows of W accumulates in SIMD registers, X is blocked by kMB rows so a
// tile of W stays in L1 while the X block streams from L2. Threads split the N dimension
// (decode: weights are the traffic) or the M dimension (when N is too small to share).
#include "cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/vec.h"

namespace ad::cpu {
namespace {

#if defined(__AVX512F__)
constexpr int kMR = 4, kNR = 4;
#else
constexpr int kMR = 4, kNR = 2;
#endif
constexpr int64_t kMB = 64;

// out[r][c] = Σ_k X[r,k]·W[c,k] for an MR × NR tile. Every element is summed in the same order
// whatever the tile shape, so a row's result never depends on which other rows share its batch.
template <int MR, int NR>
inline void tile(const float* X, int64_t ldx, const float* W, int64_t ldw, int64_t K, float out[kMR][kNR]) {
  vfloat acc[MR][NR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < NR; ++c) acc[r][c] = vzero();
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    vfloat w[NR];
#pragma GCC unroll 4
    for (int c = 0; c < NR; ++c) w[c] = vload(W + c * ldw + k);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      vfloat x = vload(X + r * ldx + k);
#pragma GCC unroll 4
      for (int c = 0; c < NR; ++c) acc[r][c] = vfma(x, w[c], acc[r][c]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < NR; ++c) {
      float s = vsum(acc[r][c]);
      for (int64_t kk = k; kk < K; ++kk) s += X[r * ldx + kk] * W[c * ldw + kk];
      out[r][c] = s;
    }
}

inline void store(float* y, float v, const float* bias, int64_t n, bool accumulate) {
  if (bias) v += bias[n];
  *y = accumulate ? *y + v : v;
}

template <int NR>
void columns(const float* X, int64_t ldx, const float* W, int64_t ldw, const float* bias, float* Y, int64_t ldy,
             int64_t mb, int64_t me, int64_t n, int64_t K, bool accumulate) {
  float t[kMR][kNR];
  int64_t m = mb;
  for (; m + kMR <= me; m += kMR) {
    tile<kMR, NR>(X + m * ldx, ldx, W + n * ldw, ldw, K, t);
    for (int r = 0; r < kMR; ++r)
      for (int c = 0; c < NR; ++c) store(Y + (m + r) * ldy + n + c, t[r][c], bias, n + c, accumulate);
  }
  for (; m < me; ++m) {
    tile<1, NR>(X + m * ldx, ldx, W + n * ldw, ldw, K, t);
    for (int c = 0; c < NR; ++c) store(Y + m * ldy + n + c, t[0][c], bias, n + c, accumulate);
  }
}

void gemm_nt_range(const float* X, int64_t ldx, const float* W, int64_t ldw, const float* bias, float* Y, int64_t ldy,
                   int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, bool accumulate) {
  for (int64_t mb = m0; mb < m1; mb += kMB) {
    int64_t me = std::min(m1, mb + kMB);
    int64_t n = n0;
    for (; n + kNR <= n1; n += kNR) columns<kNR>(X, ldx, W, ldw, bias, Y, ldy, mb, me, n, K, accumulate);
    for (; n < n1; ++n) columns<1>(X, ldx, W, ldw, bias, Y, ldy, mb, me, n, K, accumulate);
  }
}

// Packs the K×N block of a row-major matrix into N×K (transposed) so the dot-product kernel applies.
void transpose_into(const float* A, int64_t lda, int64_t rows, int64_t cols, float* out) {
  constexpr int64_t B = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t c0 = 0; c0 < cols; c0 += B)
      for (int64_t r = r0; r < std::min(rows, r0 + B); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + B); ++c) out[c * rows + r] = A[r * lda + c];
}

}  // namespace

void gemm_nt(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, const float* bias, float* Y,
             int64_t ldy, int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  const int threads = pool.size();
  // Split N when it offers every thread at least a few tiles; else split M.
  if (N >= threads * 4 * kNR || M < threads * kMR) {
    int64_t groups = (N + kNR - 1) / kNR;
    pool.parallel_for(groups, 4, [&](int64_t g0, int64_t g1, int) {
      gemm_nt_range(X, ldx, W, ldw, bias, Y, ldy, 0, M, g0 * kNR, std::min(N, g1 * kNR), K, accumulate);
    });
  } else {
    int64_t groups = (M + kMR - 1) / kMR;
    pool.parallel_for(groups, 1, [&](int64_t g0, int64_t g1, int) {
      gemm_nt_range(X, ldx, W, ldw, bias, Y, ldy, g0 * kMR, std::min(M, g1 * kMR), 0, N, K, accumulate);
    });
  }
}

// Y[M×K] (=|+=) X[M×N] · W[N×K], with W read in place (no transposed copy: W can be the
// vocabulary-sized LM head). Threads own column slices of Y; a block of W rows × one slice stays
// in L2 while every 4-row block of X sweeps over it, so W streams from memory once.
namespace {
constexpr int64_t kSlice = 4 * kLanes;
constexpr int64_t kRowsOfW = 256;

template <int MR>
void nn_block(const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy, int64_t m, int64_t n0,
              int64_t n1, int64_t k0, bool load) {
  vfloat acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < 4; ++c) acc[r][c] = load ? vload(Y + (m + r) * ldy + k0 + c * kLanes) : vzero();
  for (int64_t n = n0; n < n1; ++n) {
    vfloat w[4];
    for (int c = 0; c < 4; ++c) w[c] = vload(W + n * ldw + k0 + c * kLanes);
    for (int r = 0; r < MR; ++r) {
      vfloat x = vset1(X[(m + r) * ldx + n]);
      for (int c = 0; c < 4; ++c) acc[r][c] = vfma(x, w[c], acc[r][c]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < 4; ++c) vstore(Y + (m + r) * ldy + k0 + c * kLanes, acc[r][c]);
}

void nn_tail(const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy, int64_t M, int64_t n0,
             int64_t n1, int64_t k0, int64_t k1, bool load) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = k0; k < k1; ++k) {
      float s = load ? Y[m * ldy + k] : 0.f;
      for (int64_t n = n0; n < n1; ++n) s += X[m * ldx + n] * W[n * ldw + k];
      Y[m * ldy + k] = s;
    }
}
}  // namespace

void gemm_nn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (M <= 0 || K <= 0) return;
  if (N <= 0) {
    if (!accumulate)
      for (int64_t m = 0; m < M; ++m) std::memset(Y + m * ldy, 0, sizeof(float) * K);
    return;
  }
  const int64_t slices = (K + kSlice - 1) / kSlice;
  pool.parallel_for(slices, 1, [&](int64_t s0, int64_t s1, int) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t k0 = s * kSlice, k1 = std::min(K, k0 + kSlice);
      for (int64_t n0 = 0; n0 < N; n0 += kRowsOfW) {
        const int64_t n1 = std::min(N, n0 + kRowsOfW);
        const bool load = accumulate || n0 > 0;
        if (k1 - k0 < kSlice) {
          nn_tail(X, ldx, W, ldw, Y, ldy, M, n0, n1, k0, k1, load);
          continue;
        }
        int64_t m = 0;
        for (; m + 4 <= M; m += 4) nn_block<4>(X, ldx, W, ldw, Y, ldy, m, n0, n1, k0, load);
        for (; m < M; ++m) nn_block<1>(X, ldx, W, ldw, Y, ldy, m, n0, n1, k0, load);
      }
    }
  });
}

void gemm_tn(ThreadPool& pool, const float* X, int64_t ldx, const float* W, int64_t ldw, float* Y, int64_t ldy,
             int64_t M, int64_t N, int64_t K, bool accumulate) {
  if (M <= 0 || N <= 0) return;
  std::vector<float> Xt(static_cast<size_t>(M * K)), Wt(static_cast<size_t>(N * K));
  transpose_into(X, ldx, K, M, Xt.data());
  transpose_into(W, ldw, K, N, Wt.data());
  gemm_nt(pool, Xt.data(), K, Wt.data(), K, nullptr, Y, ldy, M, N, K, accumulate);
}

}  // namespace ad::cpu
