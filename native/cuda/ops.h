// The CUDA kernel layer: every device op the CUDA model (native/cuda/model*.cu) builds on, with
// the arithmetic of native/kernels/*.h (shared with the CPU backend) inside the kernels.
//
// Conventions for every function here:
//   - All pointers are DEVICE pointers unless a comment says "host". Row-major everywhere.
//   - Every op is enqueued on the given stream and returns without synchronizing. It returns
//     cudaSuccess, a launch error, or cudaErrorInvalidValue for bad arguments; the detail of the
//     last failure on this host thread is in ops_last_error(). Nothing here aborts the process.
//   - bf16 is __nv_bfloat16; accumulation is f32 (or wider where stated).
//   - Workspaces are caller-owned device buffers sized by the matching *_workspace_bytes()
//     (256-byte aligned base required); ops that take one never allocate.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/adamw.h"
#include "kernels/logit_stats.h"
#include "kernels/sampling.h"

namespace ad::cuda {

enum class DType : int { F32 = 0, BF16 = 1 };

// Message of the last failed op on this host thread ("" when none); never null.
const char* ops_last_error();

// =============================================================================================
// GEMM (ops_gemm.cu): bf16 inputs, f32 accumulation on tensor cores (mma.sync m16n8k16, sm_80+).
//
//   C[M×N] = alpha · op(A, B) + beta · C + bias[N]
//
//   layout  A (bf16)            B (bf16)            op                 model use
//   NT      [M×K], lda ≥ K      [N×K], ldb ≥ K      A · Bᵀ             y = x·Wᵀ (W = HF [out×in])
//   NN      [M×K], lda ≥ K      [K×N], ldb ≥ N      A · B              dx = dy·W
//   TN      [K×M], lda ≥ M      [K×N], ldb ≥ N      Aᵀ · B             dW += dyᵀ·x  (M=out, N=in, K=T)
//
// C is f32 or bf16 with ldc ≥ N; beta == 0 never reads C (it may hold NaN), beta != 0 reads it in
// its own type. bias: f32 [N] or null. Any M, N, K ≥ 0 work (M or N == 0: no-op; K == 0: C =
// beta·C + bias). The fast path needs the contiguous extent of each operand (K for NT; K and N
// for NN; M and N for TN), the leading dimensions, and the pointers to be multiples of 8
// elements / 16 bytes; other shapes run a slower predicated path with the same results.
// M ≤ 16 with NT (decode) runs a bandwidth-bound skinny kernel; products with few output tiles and
// a long K are split over K (deterministic reduce; AUTODIDACT_GEMM_SPLITK=0 turns it off).
//
// Backends: "own" (our kernels, always present) and "cublas" (cuBLAS/cuBLASLt loaded at run time
// with dlopen, see cublaslt_loader.h; never linked). gemm() uses cuBLAS when it was loaded and
// the environment does not say AUTODIDACT_GEMM=own; AUTODIDACT_GEMM=cublas makes a missing
// cuBLAS an error at gemm_init(). Outputs agree to bf16/f32 rounding, not bit for bit.
enum class GemmLayout : int { NT = 0, NN = 1, TN = 2 };

struct GemmArgs {
  GemmLayout layout = GemmLayout::NT;
  int64_t M = 0, N = 0, K = 0;
  const __nv_bfloat16* A = nullptr;
  int64_t lda = 0;
  const __nv_bfloat16* B = nullptr;
  int64_t ldb = 0;
  void* C = nullptr;
  int64_t ldc = 0;
  DType c_type = DType::F32;
  float alpha = 1.0f, beta = 0.0f;
  const float* bias = nullptr;  // [N] f32 or null
};

enum class GemmBackend : int { Auto = 0, Own = 1, Cublas = 2 };

// Loads cuBLAS if present (idempotent, thread-safe); reads AUTODIDACT_GEMM (own|cublas|auto) and
// AUTODIDACT_CUBLAS_DIR. Returns an error only when cuBLAS was demanded and could not be loaded.
cudaError_t gemm_init();
// Which path gemm() takes now: "own mma.sync (sm_80+)" or "cuBLAS 13.x (runtime-loaded from …)".
const char* gemm_path();
// True when a cuBLAS library was loaded.
bool gemm_cublas_available();
// Why cuBLAS is not used ("" when it is).
const char* gemm_cublas_reason();

// Auto: cuBLAS when loaded and not disabled, else ours.
cudaError_t gemm(const GemmArgs& a, cudaStream_t stream, GemmBackend backend = GemmBackend::Auto);
// Changes whenever a split-K workspace moves: a CUDA graph holding GEMMs is stale after.
uint64_t gemm_workspace_generation();

// Conversions (grid-stride, any n, any alignment).
cudaError_t convert_f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);
cudaError_t convert_bf16_to_f32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream);

// =============================================================================================
// Logit statistics (ops_logits.cu): kernels/logit_stats.h on the device, one read of each row.
//
// logits and ref: rows × vocab, row r at r·row_stride elements, f32 or bf16 (both the same type);
// ref null = no KL. targets: [rows] int32 or null (−1 = none). K in [0, 64]. Outputs as
// cpu::LogitStatsOut: device arrays of [rows] (topk: [rows·K]); chosen_logprob may be null;
// k1..kl_exact written only with ref. At most 65535 rows per call. Rows are split across blocks;
// partial states and top lists live in the workspace, then merged per row (f64) and finalized with
// logit_stats_finalize. Sums are f32 per thread (__expf), merged in f64: logsumexp agrees with the
// CPU's f64 to ~1e-6 relative, top-K ids/values and max/margin exactly (same tie rule).
struct LogitStatsDeviceOut {
  float* max_logit;
  float* logsumexp;
  float* entropy;
  float* margin;
  float* chosen_logprob;  // or null
  int32_t* topk_ids;      // [rows·K] or null when K == 0; −1 past the vocabulary
  float* topk_logits;     // [rows·K] or null when K == 0; −inf past the vocabulary
  float *k1, *k2, *k3, *kl_exact;  // [rows] each, used only when ref != null
};

struct LogitStatsArgs {
  const void* logits = nullptr;
  const void* ref = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, vocab = 0, row_stride = 0;
  const int32_t* targets = nullptr;
  int K = 0;
};

size_t logit_stats_workspace_bytes(int64_t rows, int64_t vocab, int K);
cudaError_t logit_stats(const LogitStatsArgs& a, const LogitStatsDeviceOut& out, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream);

// =============================================================================================
// Sampling (ops_logits.cu): one token per row, the semantics of kernels/sampling.h and
// cpu/sampling_cpu.cpp (penalties, temperature, top-k, top-p, min-p, inverse CDF in ascending id
// order with u = uniform01(seed, stream, position), Philox-4x32-10). Masses are summed in 2^-40
// fixed point (deterministic, no float atomics). One block per row at a time (min(rows, 2·SMs)
// blocks); the workspace holds each block's penalized row, so size it on the device that runs it.
//
// params: [rows] (device). positions: [rows] (device) — the draw's position counter.
// Penalty ids in CSR form (device): history ids of row r are history[history_offsets[r] ..
// history_offsets[r+1]) (prompt + generated, repetition penalty); generated likewise
// (presence/frequency). Either pair may be null (no ids). out_tokens: [rows] int32.
struct SampleArgs {
  const void* logits = nullptr;
  DType dtype = DType::F32;
  int64_t rows = 0, vocab = 0, row_stride = 0;
  const SamplingParams* params = nullptr;
  const uint64_t* positions = nullptr;
  const int32_t* history = nullptr;
  const int64_t* history_offsets = nullptr;
  const int32_t* generated = nullptr;
  const int64_t* generated_offsets = nullptr;
  int32_t* out_tokens = nullptr;
};

size_t sample_workspace_bytes(int64_t rows, int64_t vocab);
cudaError_t sample_tokens(const SampleArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// Split-row sampling (kernels/sampling_split.h): the tokens sample_tokens draws, for batches whose
// every row has T > 0, no top-k and no penalties (split::splits), each row cut across
// sample_split_chunks(rows, vocab) blocks (1: the batch fills the device one block per row, do
// not split). The workspace bound holds for any batch of at most `rows` rows.
int sample_split_chunks(int64_t rows, int64_t vocab);
size_t sample_split_workspace_bytes(int64_t rows, int64_t vocab);
cudaError_t sample_tokens_split(const SampleArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// =============================================================================================
// Chunked LM-head loss backward (ops_logits.cu), the per-row math of
// model::Transformer::lm_head_backward (native/model/backward.cpp):
//   p = softmax(z), H = −Σ p log p,
//   dz_j = a·(onehot(target)_j − p_j) + b·(−p_j (log p_j + H))
// for a chunk of rows of logits z (the LM-head GEMM's output). dlogits may alias logits when both
// have the same dtype (in place). a: [rows] f32; b: [rows] f32 or null (0); targets: [rows] (−1 or
// out of range: no one-hot term). Optional per-row outputs (null = skip): lse, entropy, and the
// target's logprob (NaN without a target). One block per row, two reads of the row, one write.
struct LossBackwardArgs {
  const void* logits = nullptr;
  DType logits_dtype = DType::F32;
  void* dlogits = nullptr;
  DType dlogits_dtype = DType::BF16;
  int64_t rows = 0, vocab = 0, row_stride = 0;  // the same stride for logits and dlogits
  const int32_t* targets = nullptr;
  const float* a = nullptr;
  const float* b = nullptr;
  float* lse = nullptr;
  float* entropy = nullptr;
  float* target_logprob = nullptr;
};

cudaError_t lm_head_loss_backward(const LossBackwardArgs& a, cudaStream_t stream);

// =============================================================================================
// Optimizer (ops_optim.cu): kernels/adamw.h's update, fused, with global-norm clipping.
//
// The clipping factor stays on the device (no host sync): accumulate Σ g² of every gradient
// tensor into one double, then grad_clip_finalize writes a GradClip record that adamw_step reads.
struct GradClip {
  double sumsq;  // Σ g² (accumulated by grad_sumsq)
  float norm;    // sqrt(sumsq)
  float scale;   // max_norm / norm when max_norm > 0 and norm > max_norm, else 1 (as the CPU trainer)
  int32_t finite;  // 0 when some gradient is NaN/Inf: adamw_step then leaves everything untouched
};

// clip->sumsq = 0 (before the first grad_sumsq of a step).
cudaError_t grad_clip_reset(GradClip* clip, cudaStream_t stream);
// clip->sumsq += Σ g[i]² (f64 accumulation; deterministic order within a call, atomics across
// blocks, so the last bits of sumsq may vary run to run).
cudaError_t grad_sumsq(const float* g, int64_t n, GradClip* clip, cudaStream_t stream);
// Fills norm, scale and finite from sumsq. max_norm ≤ 0: no clipping (scale 1).
cudaError_t grad_clip_finalize(GradClip* clip, float max_norm, cudaStream_t stream);

// One AdamW step over n elements: w (f32 master), m, v (f32 moments) updated in place, w_bf16
// (or null) rewritten from the new w. p.grad_scale is multiplied by clip->scale when clip is
// non-null; a non-finite clip skips the update. decay: apply weight decay (false for norms/biases,
// as the caller decides). Same arithmetic as kernels::adamw_update, element by element.
cudaError_t adamw_step(float* w, __nv_bfloat16* w_bf16, const float* g, float* m, float* v, int64_t n,
                       const kernels::AdamWParams& p, bool decay, const GradClip* clip, cudaStream_t stream);

// Several tensors in one launch: descriptors in DEVICE memory (count entries).
struct AdamWTensor {
  float* w;
  __nv_bfloat16* w_bf16;  // or null
  const float* g;
  float* m;
  float* v;
  int64_t n;
  int32_t decay;
};
cudaError_t adamw_step_multi(const AdamWTensor* tensors, int count, int64_t max_n, const kernels::AdamWParams& p,
                             const GradClip* clip, cudaStream_t stream);
// clip->sumsq += Σ g² over several tensors' g in one launch (descriptors in device memory; only
// g and n are read): many small gradients (norm weights, biases) cost a launch each otherwise.
cudaError_t grad_sumsq_multi(const AdamWTensor* tensors, int count, int64_t max_n, GradClip* clip, cudaStream_t stream);
// Writes 0 to every element of each descriptor's g (which must point at a writable gradient).
cudaError_t grad_zero_multi(const AdamWTensor* tensors, int count, int64_t max_n, cudaStream_t stream);

}  // namespace ad::cuda
