// CPU backend of the one-pass logit statistics (math in kernels/logit_stats.h): each row is read
// from memory once, in L1-sized blocks: one SIMD pass per block adds the softmax sums in f32 lanes
// (a polynomial exp against a reference max that moves only when a block's max passes it by more
// than a slack; the rare such block is summed again while hot), folded into f64 every block, and
// tests the top-K bound once per 4 vectors, acting on the few hits after the block. The top-K of a
// chunk's first elements waits for a bound read off their maxima, so few candidates come in.
// Threads split rows, and split rows into vocabulary chunks (merged with the header's combine
// helpers) when rows alone would leave threads idle.
#pragma once
#include <cstdint>

#include "cpu/threadpool.h"
#include "kernels/logit_stats.h"

namespace ad::cpu {

struct LogitStatsOut {
  float* max_logit;       // [rows]
  float* logsumexp;       // [rows]
  float* entropy;         // [rows], nats
  float* margin;          // [rows], top1 − top2 (0 for a duplicated max, +inf when vocab == 1)
  float* chosen_logprob;  // [rows] or null; NaN where targets[r] == −1
  int32_t* topk_ids;      // [rows*K] or null when K == 0; −1 past the vocabulary
  float* topk_logits;     // [rows*K] or null when K == 0; −inf past the vocabulary
  float* k1;              // [rows] each, written only when ref != null (NaN where no target)
  float* k2;
  float* k3;
  float* kl_exact;
};

// logits and ref: rows × vocab floats, row r at r*row_stride. targets: [rows] or null, −1 = none.
// K in [0, kMaxLogitTopK].
void logit_stats(ThreadPool& pool, const float* logits, int64_t rows, int64_t vocab, int64_t row_stride,
                 const int32_t* targets, int K, const float* ref, const LogitStatsOut& out);

// The same outputs from the element-at-a-time reference in kernels/logit_stats.h (no SIMD, no
// blocks): for tests of the header math the CUDA backend shares.
void logit_stats_scalar(ThreadPool& pool, const float* logits, int64_t rows, int64_t vocab, int64_t row_stride,
                        const int32_t* targets, int K, const float* ref, const LogitStatsOut& out);

// The same outputs computed the obvious way, one pass per statistic (max, sum-exp, entropy,
// reference logsumexp, KL) with libm expf and a partial sort for top-K: the benchmark's baseline.
void logit_stats_naive(ThreadPool& pool, const float* logits, int64_t rows, int64_t vocab, int64_t row_stride,
                       const int32_t* targets, int K, const float* ref, const LogitStatsOut& out);

// ---------------------------------------------------------------------------------------------
// Row primitives shared with the sampler (SIMD inside, single-threaded).

// y[i] = e^{x[i]}: ≈1 ulp for x in [−87.3, 88.37], 0 below −88 (rough subnormals between), +inf
// above 88.37.
void exp_f32(const float* x, float* y, int64_t n);

// out[i] = e^{x[i] − shift}, set to 0 where below `floor` (out may alias x); returns Σ out[i]
// accumulated in double.
double exp_shifted(const float* x, int64_t n, float shift, float* out, float floor = 0.0f);

// Σ x[i] (f32 lanes folded into double every block).
double sum_f32(const float* x, int64_t n);

// Σ x[i]² (f32 lanes folded into double every block).
double sum_squares_f32(const float* x, int64_t n);

// One row of the LM head's loss gradient, in place: z (n logits) becomes ∂/∂z of
// a·log p_target + b·H(p), p = softmax(z): −a·p_j − b·p_j·(log p_j + H), plus a at the target
// (target outside [0, n): none). Sums in double; e holds n floats of scratch.
void softmax_objective_gradient(float* z, int64_t n, double a, double b, int32_t target, float* e);

// max_i x[i] (−inf for n == 0).
float max_f32(const float* x, int64_t n);

// Offers x[i] (ids base + i) to a best-first-is-root heap of cap entries, skipping 16-element
// groups that cannot enter it with one compare; elements must come in ascending id order.
void topk_scan(const float* x, int64_t n, int32_t base, TopKEntry* heap, int& n_heap, int cap);

// Writes to ids the indices i with x[i] >= cutoff (in ascending order); returns their count.
int64_t indices_at_least(const float* x, int64_t n, float cutoff, int32_t* ids);

// Writes to ids the indices i with lo < x[i] <= hi (in ascending order); returns their count.
int64_t indices_between(const float* x, int64_t n, float lo, float hi, int32_t* ids);

// Σ x[i] over x[i] > thr (in double) and, in *count, how many there are.
double sum_above(const float* x, int64_t n, float thr, int64_t* count);

// x[i] = 0 where x[i] <= thr or x[i] < floor.
void zero_unless_above(float* x, int64_t n, float thr, float floor);

// The lowest index holding the maximum (0 for n == 0 or a row of NaN).
int64_t argmax_first(const float* x, int64_t n);

}  // namespace ad::cpu
