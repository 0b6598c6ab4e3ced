// Tensor-core causal attention over the slot KV cache (FlashAttention-2 style): forward with a
// split-key (flash-decoding) path for short batches, and the backward as a query pass (dq) and a
// key pass (dk, dv) without atomics. Same semantics as attention_fwd / attention_bwd in
// ops_layers.h: token t attends keys [0, pos[t]] of its slot; q head h uses kv head h / group.
//
// Work is described from the host as tiles of consecutive rows of one slot (AttentionTile); the
// caller uploads the planned tiles into a device buffer it owns and passes that pointer.
//
// Numerics: bf16 operands on mma.sync m16n8k16 with f32 accumulation; softmax in f32 (exp2 of
// log2e-prescaled scores); P and dS are rounded to bf16 before their products (≈2^-9 relative),
// dout is rounded to bf16 when staged.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cuda/ops_layers.h"

namespace ad::cuda {

// Rows [row0, row0 + rows) of the batch belong to slot `slot` at positions [pos0, pos0 + rows).
// The spans of a batch must cover every batch row exactly once (outputs of uncovered rows are
// not written).
struct SlotSpan {
  int slot, row0, pos0, rows;
};

// A tile: rows [row0, row0 + rows) of one slot at positions [pos0, …); row_end is the end of its
// slot's span (the key pass reads the queries [row0, row_end)).
struct AttentionTile {
  int32_t slot, row0, pos0, rows, row_end;
};

// Keys per key tile, and the rows per tile of the key pass (plan_attention_key_tiles).
constexpr int kAttentionKeyTile = 64;

// True when the tensor-core kernels handle this shape: hd ∈ {32, 64, 128}, heads a multiple of
// kv_heads, group = heads / kv_heads ≤ 64. Otherwise keep the warp kernels of ops_layers.h.
bool attention_tc_supported(int hd, int heads, int kv_heads);

// Token rows per query tile: the block packs (row, head-of-group) pairs into 64 matrix rows so
// one K/V tile serves every q head of a kv group. = 64 / (heads / kv_heads).
int attention_q_tile_rows(int heads, int kv_heads);

// Query tiles (forward and dq pass): each span cut into tiles of ≤ tile_rows rows
// (tile_rows = attention_q_tile_rows), longest key range first (load balance).
std::vector<AttentionTile> plan_attention_q_tiles(const std::vector<SlotSpan>& spans, int tile_rows);
// Key tiles (dk/dv pass): each span cut into tiles of ≤ 64 rows, most queries first.
std::vector<AttentionTile> plan_attention_key_tiles(const std::vector<SlotSpan>& spans);

// f32 workspace that lets the forward split long key ranges across blocks (decode: few rows,
// long context); with less (or none) it splits less (or not at all). Fits `splits` splits of a
// batch of T rows.
size_t attention_fwd_work_floats(int64_t T, int heads, int hd, int splits = 16);

// Forward. Device arrays: q [T × heads·hd] bf16; cache K/V [slots × capacity × kv_heads·hd]
// bf16 (16-byte aligned rows: hd multiple of 8, base pointers 16-byte aligned); tiles
// [n_tiles] from plan_attention_q_tiles with tile_rows = attention_q_tile_rows(heads, kv_heads);
// out [T × heads·hd] bf16; lse [T × heads] f32 or null; work [work_floats] f32 or null.
// max_keys = max over spans of pos0 + rows (host-known; sizes the key split).
void attention_tc_fwd(const bf16* q, KVLayer cache, const AttentionTile* tiles, int n_tiles, int tile_rows, int64_t T,
                      int max_keys, int heads, int kv_heads, int hd, float scale, bf16* out, float* lse, float* work,
                      size_t work_floats, cudaStream_t s);

// How the forward splits the key range for these sizes (splits 1: not at all): the only way its
// launch depends on max_keys (a CUDA graph of it is valid while this stays the same).
struct AttentionSplit {
  int splits = 1, split_tiles = 0;
  bool operator==(const AttentionSplit& o) const { return splits == o.splits && split_tiles == o.split_tiles; }
};
AttentionSplit attention_tc_fwd_split(int n_tiles, int64_t T, int max_keys, int heads, int kv_heads, int hd, size_t work_floats);

// Backward. Device arrays: q, out [T × q_dim] bf16; dout [T × q_dim] f32; lse [T × heads] f32
// (from the forward); cache as above; q_tiles (as the forward's tiles) and k_tiles
// (plan_attention_key_tiles); outputs delta [T × heads], dq [T × q_dim], dk, dv [T × kv_dim]
// f32, written (not accumulated). dk/dv row r is the gradient of the key/value at
// (slot[r], pos[r]); keys before a span's pos0 get none.
void attention_tc_bwd(const bf16* q, const bf16* out, const float* dout, const float* lse, KVLayer cache,
                      const AttentionTile* q_tiles, int n_q_tiles, int tile_rows, const AttentionTile* k_tiles, int n_k_tiles,
                      int64_t T, int heads, int kv_heads, int hd, float scale, float* delta, float* dq, float* dk, float* dv,
                      cudaStream_t s);

}  // namespace ad::cuda
