// The per-layer device ops of the transformer (everything but the matrix products, the logit
// statistics, sampling and AdamW, which live in ops.h): embedding gather, RMSNorm, q/k-norm +
// RoPE (Llama 3 scaling through kernels/rope.h's inverse frequencies), SwiGLU, causal attention
// over the slot KV cache (prefill and decode in one ragged batch), their backward passes, casts.
//
// Precision: the residual stream and every gradient in f32; GEMM inputs (normed activations,
// attention output, SwiGLU output, the KV cache) in bf16; all reductions in f32.
// Each function launches on `stream` and checks the launch; none synchronizes.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ad::cuda {

using bf16 = __nv_bfloat16;

// Throws std::runtime_error naming the call and CUDA's message on any error.
void layers_check(cudaError_t err, const char* what);
#define ADL_CHECK(call) ::ad::cuda::layers_check((call), #call)

// Where each token of a ragged batch goes: its cache slot and position.
struct TokenMap {
  const int32_t* slot;  // [T]
  const int32_t* pos;   // [T]
};

// A layer's view of the KV cache: [slots × capacity × kv_dim] bf16 for K and V.
struct KVLayer {
  bf16* k;
  bf16* v;
  int capacity;
  int kv_dim;
};

// ---- casts and elementwise
void cast_f32_to_bf16(const float* x, bf16* y, int64_t n, cudaStream_t s);
void cast_bf16_to_f32(const bf16* x, float* y, int64_t n, cudaStream_t s);
// y[t, :] += b (a bias row added to every token row of an f32 matrix)
void add_bias_rows(float* y, const float* b, int64_t T, int n, cudaStream_t s);
void fill_f32(float* x, float v, int64_t n, cudaStream_t s);

// ---- embedding
// x[t, :] = f32(table[tokens[t], :])
void embed_gather(const bf16* table, const int32_t* tokens, int64_t T, int H, float* x, cudaStream_t s);
// grad[tokens[t], :] += dx[t, :] (atomic; duplicates add up)
void embed_scatter_add(const float* dx, const int32_t* tokens, int64_t T, int H, float* grad, cudaStream_t s);

// ---- RMSNorm: y = x · rstd · w, rstd = (mean x² + eps)^(−1/2)
// rows of f32 x → bf16 y (and f32 y when y32 != null); rstd [T] optional.
void rmsnorm_fwd(const float* x, const float* w, bf16* y, float* y32, float* rstd, int64_t T, int H, float eps, cudaStream_t s);
// dx (=|+=) rstd·(w⊙dy) − rstd³/H · x · Σ(w⊙dy⊙x); dw_partial[block, :] rows summed later by
// column_sum (null: no weight gradient). Recomputes rstd from x.
void rmsnorm_bwd(const float* x, const float* w, const float* dy, float* dx, bool accumulate, float* dw, int64_t T, int H,
                 float eps, cudaStream_t s);

// ---- q/k-norm + RoPE, K/V into the cache
// The rotation of each token: cs [T × hd/2] = (cos, sin)(pos[t]·inv_freq[i]), angles in double
// (inv_freq [hd/2] with Llama 3 scaling applied on the host), stored f32. Once per forward.
void rope_table(const int32_t* pos, const double* inv_freq, int64_t T, int hd, float2* cs, cudaStream_t s);
// Per token: q heads [heads × hd] and k heads [kv_heads × hd] of f32 q/k: optional per-head
// RMSNorm (q_norm/k_norm weights, null = off), then RoPE with the token's row of rope_cs.
// Writes q as bf16 [T × q_dim] and K, V (v as given) into the cache at (slot, pos).
void qk_rope_to_cache(const float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                      const float2* rope_cs, TokenMap map, int64_t T, int heads, int kv_heads, int hd, float eps,
                      bf16* q_out, KVLayer cache, cudaStream_t s);
// Backward of the above for dq [T × q_dim] and dk [T × kv_dim] in place (rope transpose, then
// the head RMSNorm backward against the raw q/k), also written as bf16 to dq_b/dk_b when given;
// dqn/dkn [hd] accumulate the norm weights' gradients (atomic), null = not trained.
void qk_rope_bwd(float* dq, float* dk, bf16* dq_b, bf16* dk_b, const float* q_raw, const float* k_raw, const float* q_norm,
                 const float* k_norm, const float2* rope_cs, int64_t T, int heads, int kv_heads, int hd, float eps, float* dqn,
                 float* dkn, cudaStream_t s);

// ---- causal attention over the cache: token t attends keys [0, pos[t]] of its slot.
// out [T × q_dim] bf16; lse [T × heads] f32 (natural-log softmax normalizer of the scaled
// scores), optional, kept by training for the backward pass.
void attention_fwd(const bf16* q, KVLayer cache, TokenMap map, int64_t T, int heads, int kv_heads, int hd, float scale,
                   bf16* out, float* lse, cudaStream_t s);
// Backward, FlashAttention-2 style without atomics: a query pass for dq and a key pass for dk,
// dv. Keys of a slot before first_pos (from an earlier, untaped call) get no gradient. The rows
// of each slot are contiguous in the batch: slot s owns rows [row0[s], row0[s] + rows[s]) at
// positions [pos0[s], …). dout [T × q_dim] f32, delta [T × heads] = Σ dout·out (computed here).
struct SlotRows {
  const int32_t* row0;  // [slots], −1 when absent
  const int32_t* pos0;  // [slots]
  const int32_t* rows;  // [slots]
};
void attention_bwd(const bf16* q, const bf16* out, const float* dout, const float* lse, KVLayer cache, TokenMap map,
                   SlotRows slots, int64_t T, int heads, int kv_heads, int hd, float scale, float* delta, float* dq, float* dk,
                   float* dv, cudaStream_t s);

// ---- SwiGLU: h = silu(gate) · up (bf16 out for the down projection)
void swiglu_fwd(const float* gate, const float* up, bf16* h, int64_t n, cudaStream_t s);
// From dh: dgate = dh·up·silu'(gate), dup = dh·silu(gate), each in f32 and/or bf16 (null = not
// wanted; dgate may alias dh).
void swiglu_bwd(const float* gate, const float* up, const float* dh, float* dgate, float* dup, bf16* dgate_b, bf16* dup_b,
                int64_t n, cudaStream_t s);

// ---- reductions
// out[j] (+)= Σ_t x[t, j] (bias gradients); accumulate into out.
void column_sum_add(const float* x, int64_t T, int n, float* out, cudaStream_t s);
// Σ x² over n elements into *out (f64, atomic): the global gradient norm.
void sum_squares_add(const float* x, int64_t n, double* out, cudaStream_t s);

// RMSNorm of the final hidden rows picked by `rows` (output rows of the batch): bf16 and f32.
void rmsnorm_gather_fwd(const float* x, const int32_t* rows, int64_t R, const float* w, bf16* y, float* y32, int H, float eps,
                        cudaStream_t s);
// Scatter of the final-norm backward: dx[rows[r]] = rmsnorm_bwd(x[rows[r]], dy[r]); dx zeroed by the caller.
void rmsnorm_scatter_bwd(const float* x, const int32_t* rows, int64_t R, const float* w, const float* dy, float* dx, float* dw,
                         int H, float eps, cudaStream_t s);

// Copies `len` positions of every layer's K and V from slot src to dst.
void cache_copy_positions(KVLayer cache, int src, int dst, int len, cudaStream_t s);

}  // namespace ad::cuda
