// Tensor-core causal attention (see ops_attention.h). Every kernel works on 64-row tiles with 4
// warps; warp w owns matrix rows [16w, 16w + 16). Fragments follow mma.sync.m16n8k16 (row.col,
// bf16 in, f32 accumulate): with g = lane / 4 and t = lane % 4, an accumulator holds (row g,
// cols 2t, 2t+1) in c0, c1 and (row g + 8, same cols) in c2, c3; an A operand holds (g, 2t..),
// (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); a B operand holds (k 2t.., n g), (k 2t + 8.., n g).
//
// Shared tiles are 64 rows of HD bf16 padded to HD + 8, so the 8 row addresses of an ldmatrix
// phase fall 16 bytes apart in the bank space (no conflicts) and rows stay 16-byte aligned.
#include "cuda/ops_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ad::cuda {

namespace {

constexpr int kRows = 64;  // matrix rows of a q tile = keys of a key tile = queries of a key-pass chunk
constexpr int kThreads = 128;
constexpr int kMaxSplits = 64;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HD>
struct Tile {
  static constexpr int kStride = HD + 8;            // bf16 per padded row
  static constexpr int kElems = kRows * kStride;    // bf16 per tile
  static constexpr int kBytes = kElems * 2;
};

inline void check_launch(const char* what) { layers_check(cudaGetLastError(), what); }

// ------------------------------------------------------------------------ PTX wrappers

__device__ __forceinline__ unsigned smem_addr(const void* p) { return static_cast<unsigned>(__cvta_generic_to_shared(p)); }

// 16 bytes global → shared, asynchronously; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src), "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a · b for one 16×8 output block.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Two floats as one bf16x2 register, lo in the low half (the smaller column of a fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
}

// ------------------------------------------------------------------------ fragment loads
// All three read a padded [rows × HD] shared tile; see the file comment for the layouts.

// A operand: matrix rows [r0, r0 + 16), cols [c0, c0 + 16) of a row-major tile.
template <int HD>
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* tile, int r0, int c0) {
  const int l = threadIdx.x & 31;
  ldsm_x4(a, tile + (r0 + (l & 7) + ((l >> 3) & 1) * 8) * Tile<HD>::kStride + c0 + (l >> 4) * 8);
}
// B operands of two n-blocks when the tile is stored [n][k] (n = tile row): n rows [n0, n0 + 16),
// k cols [k0, k0 + 16). b[0], b[1] serve n-block n0; b[2], b[3] serve n0 + 8.
template <int HD>
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const bf16* tile, int n0, int k0) {
  const int l = threadIdx.x & 31;
  ldsm_x4(b, tile + (n0 + (l & 7) + (l >> 4) * 8) * Tile<HD>::kStride + k0 + ((l >> 3) & 1) * 8);
}
// B operands of two n-blocks when the tile is stored [k][n] (k = tile row): k rows [k0, k0 + 16),
// n cols [n0, n0 + 16), transposed by ldmatrix. b[0], b[1] serve n0; b[2], b[3] serve n0 + 8.
template <int HD>
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const bf16* tile, int k0, int n0) {
  const int l = threadIdx.x & 31;
  ldsm_x4_trans(b, tile + (k0 + (l & 7) + ((l >> 3) & 1) * 8) * Tile<HD>::kStride + n0 + (l >> 4) * 8);
}

// The 16×16 A operand of k-step kk from a 16×64 accumulator (P or dS), rounded to bf16.
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c)[8][4], int kk) {
  a[0] = pack_bf16(c[2 * kk][0], c[2 * kk][1]);
  a[1] = pack_bf16(c[2 * kk][2], c[2 * kk][3]);
  a[2] = pack_bf16(c[2 * kk + 1][0], c[2 * kk + 1][1]);
  a[3] = pack_bf16(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// acc[16 × 64] = A[16 × HD] · B[64 × HD]ᵀ, A rows [a_r0, +16) of tile a, B rows [0, 64) of tile b.
template <int HD>
__device__ __forceinline__ void mma_abt(float (&acc)[8][4], const bf16* a_tile, int a_r0, const bf16* b_tile) {
#pragma unroll
  for (int n = 0; n < 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    uint32_t a[4];
    load_a<HD>(a, a_tile, a_r0, kk * 16);
#pragma unroll
    for (int n2 = 0; n2 < 4; ++n2) {
      uint32_t b[4];
      load_b_nk<HD>(b, b_tile, n2 * 16, kk * 16);
      mma16816(acc[2 * n2], a, b[0], b[1]);
      mma16816(acc[2 * n2 + 1], a, b[2], b[3]);
    }
  }
}

// out[16 × HD] += P[16 × 64] · B[64 × HD], P an accumulator (rounded to bf16), B a [k][n] tile.
template <int HD>
__device__ __forceinline__ void mma_pb(float (&out)[HD / 8][4], const float (&p)[8][4], const bf16* b_tile) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    uint32_t a[4];
    acc_to_a(a, p, kk);
#pragma unroll
    for (int n2 = 0; n2 < HD / 16; ++n2) {
      uint32_t b[4];
      load_b_kn<HD>(b, b_tile, kk * 16, n2 * 16);
      mma16816(out[2 * n2], a, b[0], b[1]);
      mma16816(out[2 * n2 + 1], a, b[2], b[3]);
    }
  }
}

// ------------------------------------------------------------------------ staging

// 64 rows of HD bf16 into a padded tile with cp.async; row_src(i) == nullptr → zeros.
template <int HD, class RowSrc>
__device__ __forceinline__ void stage_bf16(bf16* tile, const bf16* any_valid, RowSrc row_src) {
  constexpr int kChunks = HD / 8;
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int i = c / kChunks, ch = c % kChunks;
    const bf16* src = row_src(i);
    cp_async16(tile + i * Tile<HD>::kStride + ch * 8, src ? src + ch * 8 : any_valid, src != nullptr);
  }
}

// 64 rows of HD f32 into a padded bf16 tile (plain loads, rounded); row_src(i) == nullptr → zeros.
template <int HD, class RowSrc>
__device__ __forceinline__ void stage_f32_as_bf16(bf16* tile, RowSrc row_src) {
  constexpr int kVecs = HD / 4;
#pragma unroll 4
  for (int c = threadIdx.x; c < kRows * kVecs; c += kThreads) {
    const int i = c / kVecs, v = c % kVecs;
    const float* src = row_src(i);
    const float4 x = src ? __ldg(reinterpret_cast<const float4*>(src) + v) : make_float4(0.f, 0.f, 0.f, 0.f);
    uint2 packed;
    packed.x = pack_bf16(x.x, x.y);
    packed.y = pack_bf16(x.z, x.w);
    *reinterpret_cast<uint2*>(tile + i * Tile<HD>::kStride + v * 4) = packed;
  }
}

// Keys [k0, k0 + 64) of one slot and kv head into K and V tiles; keys ≥ n_keys read as zeros.
template <int HD>
__device__ __forceinline__ void stage_kv(bf16* ks, bf16* vs, const bf16* kbase, const bf16* vbase, int64_t kv_dim, int k0,
                                         int n_keys) {
  stage_bf16<HD>(ks, kbase, [&](int i) { return k0 + i < n_keys ? kbase + (k0 + i) * kv_dim : nullptr; });
  stage_bf16<HD>(vs, vbase, [&](int i) { return k0 + i < n_keys ? vbase + (k0 + i) * kv_dim : nullptr; });
}

// A matrix row of a query tile: (token row r, head g of the kv group) packed as m = r·group + g.
struct PackedRow {
  bool valid;   // r < tile.rows
  int64_t row;  // batch row
  int head;     // q head
  int limit;    // last key this row may attend (padding rows: the tile's last, so never empty)
};

__device__ __forceinline__ PackedRow packed_row(const AttentionTile& t, int group, int kvh, int m) {
  const int r = m / group, g = m - r * group;
  PackedRow p;
  p.valid = r < t.rows;
  p.row = static_cast<int64_t>(t.row0) + r;
  p.head = kvh * group + g;
  p.limit = t.pos0 + min(r, t.rows - 1);
  return p;
}

// Q (bf16) of a query tile's packed rows into a tile with cp.async.
template <int HD>
__device__ __forceinline__ void stage_q_packed(bf16* qs, const bf16* q, const AttentionTile& t, int group, int kvh, int q_dim) {
  stage_bf16<HD>(qs, q, [&](int m) -> const bf16* {
    const PackedRow p = packed_row(t, group, kvh, m);
    return p.valid ? q + p.row * q_dim + p.head * HD : nullptr;
  });
}

// Matrix rows [r0, r1] (inclusive) of warp `warp`, as token rows of the tile; empty when r0 > r1.
__device__ __forceinline__ void warp_token_rows(const AttentionTile& t, int group, int warp, int& r0, int& r1) {
  r0 = (warp * 16) / group;
  r1 = min(t.rows - 1, (warp * 16 + 15) / group);
}

// ------------------------------------------------------------------------ forward

// Block = (query tile, kv head, key split). Online softmax over key tiles [kt0, kt1) of the
// tile's slot; without a split (work == null) writes out (and lse), else this split's
// normalized partial output and log-sum-exp into work for k_attn_combine.
template <int HD>
__global__ void __launch_bounds__(kThreads) k_attn_fwd(const bf16* __restrict__ q, KVLayer cache,
                                                       const AttentionTile* __restrict__ tiles, int group, int heads,
                                                       float scale_log2, int split_tiles, int64_t T, bf16* __restrict__ out,
                                                       float* __restrict__ lse, float* __restrict__ work) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + Tile<HD>::kElems;  // [2] buffers
  bf16* vs = ks + 2 * Tile<HD>::kElems;

  const AttentionTile tile = tiles[blockIdx.x];
  const int kvh = blockIdx.y, split = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const int q_dim = heads * HD, n_keys = tile.pos0 + tile.rows;
  const int n_kt = (n_keys + kRows - 1) / kRows;
  const int kt0 = split_tiles > 0 ? min(n_kt, split * split_tiles) : 0;
  // the last split takes any remainder, so a short max_keys from the host cannot drop keys
  const int kt1 = split_tiles > 0 && split + 1 < static_cast<int>(gridDim.z) ? min(n_kt, kt0 + split_tiles) : n_kt;
  const int64_t kv_dim = cache.kv_dim;
  const bf16* kbase = cache.k + static_cast<int64_t>(tile.slot) * cache.capacity * kv_dim + kvh * HD;
  const bf16* vbase = cache.v + static_cast<int64_t>(tile.slot) * cache.capacity * kv_dim + kvh * HD;

  stage_q_packed<HD>(qs, q, tile, group, kvh, q_dim);
  if (kt0 < kt1) stage_kv<HD>(ks, vs, kbase, vbase, kv_dim, kt0 * kRows, n_keys);
  cp_async_commit();

  int wr0, wr1;
  warp_token_rows(tile, group, warp, wr0, wr1);
  const bool warp_active = wr0 <= wr1;
  const int warp_first_pos = tile.pos0 + wr0, warp_last_pos = tile.pos0 + wr1;
  const PackedRow ra = packed_row(tile, group, kvh, warp * 16 + (lane >> 2));
  const PackedRow rb = packed_row(tile, group, kvh, warp * 16 + (lane >> 2) + 8);

  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m_a = -INFINITY, m_b = -INFINITY, l_a = 0.f, l_b = 0.f;  // running max (log2 units), partial sums

  for (int kt = kt0; kt < kt1; ++kt) {
    const int buf = (kt - kt0) & 1;
    if (kt + 1 < kt1) {
      stage_kv<HD>(ks + (buf ^ 1) * Tile<HD>::kElems, vs + (buf ^ 1) * Tile<HD>::kElems, kbase, vbase, kv_dim,
                   (kt + 1) * kRows, n_keys);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int k0 = kt * kRows;
    if (warp_active && k0 <= warp_last_pos) {
      const bf16* kt_s = ks + buf * Tile<HD>::kElems;
      float s[8][4];
      mma_abt<HD>(s, qs, warp * 16, kt_s);
      const bool masked = k0 + kRows - 1 > warp_first_pos;  // only tiles reaching past a row's position
      float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = k0 + n * 8 + 2 * tq + e;
          s[n][e] = masked && key > ra.limit ? -INFINITY : s[n][e] * scale_log2;
          s[n][2 + e] = masked && key > rb.limit ? -INFINITY : s[n][2 + e] * scale_log2;
          mx_a = fmaxf(mx_a, s[n][e]);
          mx_b = fmaxf(mx_b, s[n][2 + e]);
        }
      }
      // the 4 lanes of a row group hold its 64 columns
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 1));
      mx_a = fmaxf(mx_a, __shfl_xor_sync(0xffffffffu, mx_a, 2));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 1));
      mx_b = fmaxf(mx_b, __shfl_xor_sync(0xffffffffu, mx_b, 2));
      const float new_a = fmaxf(m_a, mx_a), new_b = fmaxf(m_b, mx_b);
      // −inf-safe base: a row with no key yet keeps p = 0 instead of exp2(−inf − −inf) = NaN
      const float base_a = new_a == -INFINITY ? 0.f : new_a, base_b = new_b == -INFINITY ? 0.f : new_b;
      const float corr_a = fast_exp2(m_a - base_a), corr_b = fast_exp2(m_b - base_b);
      m_a = new_a;
      m_b = new_b;
      float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        s[n][0] = fast_exp2(s[n][0] - base_a);
        s[n][1] = fast_exp2(s[n][1] - base_a);
        s[n][2] = fast_exp2(s[n][2] - base_b);
        s[n][3] = fast_exp2(s[n][3] - base_b);
        sum_a += s[n][0] + s[n][1];
        sum_b += s[n][2] + s[n][3];
      }
      l_a = l_a * corr_a + sum_a;
      l_b = l_b * corr_b + sum_b;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        o[n][0] *= corr_a;
        o[n][1] *= corr_a;
        o[n][2] *= corr_b;
        o[n][3] *= corr_b;
      }
      mma_pb<HD>(o, s, vs + buf * Tile<HD>::kElems);
    }
    __syncthreads();  // the buffer just read is refilled by the next iteration
  }
  cp_async_wait<0>();

  l_a += __shfl_xor_sync(0xffffffffu, l_a, 1);
  l_a += __shfl_xor_sync(0xffffffffu, l_a, 2);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 1);
  l_b += __shfl_xor_sync(0xffffffffu, l_b, 2);
  const float inv_a = l_a > 0.f ? 1.f / l_a : 0.f, inv_b = l_b > 0.f ? 1.f / l_b : 0.f;
  const float lse_a = l_a > 0.f ? (m_a + log2f(l_a)) * kLn2 : -INFINITY;
  const float lse_b = l_b > 0.f ? (m_b + log2f(l_b)) * kLn2 : -INFINITY;

  if (!work) {
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      const int col = n * 8 + 2 * tq;
      if (ra.valid)
        *reinterpret_cast<__nv_bfloat162*>(out + ra.row * q_dim + ra.head * HD + col) =
            __floats2bfloat162_rn(o[n][0] * inv_a, o[n][1] * inv_a);
      if (rb.valid)
        *reinterpret_cast<__nv_bfloat162*>(out + rb.row * q_dim + rb.head * HD + col) =
            __floats2bfloat162_rn(o[n][2] * inv_b, o[n][3] * inv_b);
    }
    if (lse && tq == 0) {
      if (ra.valid) lse[ra.row * heads + ra.head] = lse_a;
      if (rb.valid) lse[rb.row * heads + rb.head] = lse_b;
    }
  } else {
    float* wo = work + static_cast<int64_t>(split) * T * q_dim;
    float* wl = work + static_cast<int64_t>(gridDim.z) * T * q_dim + static_cast<int64_t>(split) * T * heads;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      const int col = n * 8 + 2 * tq;
      if (ra.valid)
        *reinterpret_cast<float2*>(wo + ra.row * q_dim + ra.head * HD + col) = make_float2(o[n][0] * inv_a, o[n][1] * inv_a);
      if (rb.valid)
        *reinterpret_cast<float2*>(wo + rb.row * q_dim + rb.head * HD + col) = make_float2(o[n][2] * inv_b, o[n][3] * inv_b);
    }
    if (tq == 0) {
      if (ra.valid) wl[ra.row * heads + ra.head] = lse_a;
      if (rb.valid) wl[rb.row * heads + rb.head] = lse_b;
    }
  }
}

// Warp per (row, head): merges the splits' partial outputs by their log-sum-exp weights.
__global__ void k_attn_combine(const float* __restrict__ work, int splits, int64_t T, int heads, int hd, bf16* __restrict__ out,
                               float* __restrict__ lse) {
  const int64_t item = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= T * heads) return;
  const int lane = threadIdx.x & 31;
  const int64_t q_dim = static_cast<int64_t>(heads) * hd;
  const float* wl = work + static_cast<int64_t>(splits) * T * q_dim;
  float mx = -INFINITY;
  for (int z = 0; z < splits; ++z) mx = fmaxf(mx, wl[z * T * heads + item]);
  const float base = mx == -INFINITY ? 0.f : mx;
  float total = 0.f;
  for (int z = 0; z < splits; ++z) total += __expf(wl[z * T * heads + item] - base);
  const float inv = total > 0.f ? 1.f / total : 0.f;
  for (int d = lane; d < hd; d += 32) {
    float acc = 0.f;
    for (int z = 0; z < splits; ++z) {
      const float w = __expf(wl[z * T * heads + item] - base);
      if (w > 0.f) acc += w * work[z * T * q_dim + item * hd + d];  // an empty split's lse is −inf
    }
    out[item * hd + d] = __float2bfloat16(acc * inv);
  }
  if (lse && lane == 0) lse[item] = total > 0.f ? base + logf(total) : -INFINITY;
}

// ------------------------------------------------------------------------ backward

// delta[t, h] = Σ dout·out, warp per (t, h), 4 elements per lane per step. dout is rounded to
// bf16 as the passes round it for dP, so Σ_j P_j·dP_j and delta agree up to out's own rounding.
__global__ void k_attn_delta(const bf16* __restrict__ out, const float* __restrict__ dout, int64_t T, int heads, int hd,
                             float* __restrict__ delta) {
  const int64_t item = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= T * heads) return;
  const int lane = threadIdx.x & 31;
  const float4* d4 = reinterpret_cast<const float4*>(dout + item * hd);
  const __nv_bfloat162* o2 = reinterpret_cast<const __nv_bfloat162*>(out + item * hd);
  float s = 0.f;
  for (int v = lane; v < hd / 4; v += 32) {
    float4 d = __ldg(d4 + v);
    d = make_float4(__bfloat162float(__float2bfloat16(d.x)), __bfloat162float(__float2bfloat16(d.y)),
                    __bfloat162float(__float2bfloat16(d.z)), __bfloat162float(__float2bfloat16(d.w)));
    const float2 a = __bfloat1622float2(o2[2 * v]), b = __bfloat1622float2(o2[2 * v + 1]);
    s += d.x * a.x + d.y * a.y + d.z * b.x + d.w * b.y;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) delta[item] = s;
}

// Query pass. Block = (query tile, kv head); for each key tile: S = Q·Kᵀ, P = exp(S·scale − lse),
// dP = dO·Vᵀ, dS = P∘(dP − delta), dQ += dS·K. Writes dq = scale·dQ.
template <int HD>
__global__ void __launch_bounds__(kThreads) k_attn_dq(const bf16* __restrict__ q, const float* __restrict__ dout,
                                                      const float* __restrict__ lse, const float* __restrict__ delta,
                                                      KVLayer cache, const AttentionTile* __restrict__ tiles, int group,
                                                      int heads, float scale_log2, float scale, float* __restrict__ dq) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* dos = qs + Tile<HD>::kElems;
  bf16* ks = dos + Tile<HD>::kElems;  // [2] buffers
  bf16* vs = ks + 2 * Tile<HD>::kElems;

  const AttentionTile tile = tiles[blockIdx.x];
  const int kvh = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3;
  const int q_dim = heads * HD, n_keys = tile.pos0 + tile.rows;
  const int n_kt = (n_keys + kRows - 1) / kRows;
  const int64_t kv_dim = cache.kv_dim;
  const bf16* kbase = cache.k + static_cast<int64_t>(tile.slot) * cache.capacity * kv_dim + kvh * HD;
  const bf16* vbase = cache.v + static_cast<int64_t>(tile.slot) * cache.capacity * kv_dim + kvh * HD;

  stage_q_packed<HD>(qs, q, tile, group, kvh, q_dim);
  stage_kv<HD>(ks, vs, kbase, vbase, kv_dim, 0, n_keys);
  cp_async_commit();
  stage_f32_as_bf16<HD>(dos, [&](int m) -> const float* {
    const PackedRow p = packed_row(tile, group, kvh, m);
    return p.valid ? dout + p.row * q_dim + p.head * HD : nullptr;
  });

  int wr0, wr1;
  warp_token_rows(tile, group, warp, wr0, wr1);
  const bool warp_active = wr0 <= wr1;
  const int warp_first_pos = tile.pos0 + wr0, warp_last_pos = tile.pos0 + wr1;
  const PackedRow ra = packed_row(tile, group, kvh, warp * 16 + (lane >> 2));
  const PackedRow rb = packed_row(tile, group, kvh, warp * 16 + (lane >> 2) + 8);
  // padding rows: lse = +inf makes every p 0
  const float lse_a = ra.valid ? lse[ra.row * heads + ra.head] * kLog2e : INFINITY;
  const float lse_b = rb.valid ? lse[rb.row * heads + rb.head] * kLog2e : INFINITY;
  const float dl_a = ra.valid ? delta[ra.row * heads + ra.head] : 0.f;
  const float dl_b = rb.valid ? delta[rb.row * heads + rb.head] : 0.f;

  float acc[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;

  for (int kt = 0; kt < n_kt; ++kt) {
    const int buf = kt & 1;
    if (kt + 1 < n_kt) {
      stage_kv<HD>(ks + (buf ^ 1) * Tile<HD>::kElems, vs + (buf ^ 1) * Tile<HD>::kElems, kbase, vbase, kv_dim,
                   (kt + 1) * kRows, n_keys);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int k0 = kt * kRows;
    if (warp_active && k0 <= warp_last_pos) {
      const bf16* kt_s = ks + buf * Tile<HD>::kElems;
      const bf16* vt_s = vs + buf * Tile<HD>::kElems;
      float p[8][4], dp[8][4];
      mma_abt<HD>(p, qs, warp * 16, kt_s);
      const bool masked = k0 + kRows - 1 > warp_first_pos;
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = k0 + n * 8 + 2 * tq + e;
          p[n][e] = masked && key > ra.limit ? 0.f : fast_exp2(p[n][e] * scale_log2 - lse_a);
          p[n][2 + e] = masked && key > rb.limit ? 0.f : fast_exp2(p[n][2 + e] * scale_log2 - lse_b);
        }
      }
      mma_abt<HD>(dp, dos, warp * 16, vt_s);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
        dp[n][0] = p[n][0] * (dp[n][0] - dl_a);
        dp[n][1] = p[n][1] * (dp[n][1] - dl_a);
        dp[n][2] = p[n][2] * (dp[n][2] - dl_b);
        dp[n][3] = p[n][3] * (dp[n][3] - dl_b);
      }
      mma_pb<HD>(acc, dp, kt_s);
    }
    __syncthreads();
  }
  cp_async_wait<0>();

#pragma unroll
  for (int n = 0; n < HD / 8; ++n) {
    const int col = n * 8 + 2 * tq;
    if (ra.valid) *reinterpret_cast<float2*>(dq + ra.row * q_dim + ra.head * HD + col) = make_float2(acc[n][0] * scale, acc[n][1] * scale);
    if (rb.valid) *reinterpret_cast<float2*>(dq + rb.row * q_dim + rb.head * HD + col) = make_float2(acc[n][2] * scale, acc[n][3] * scale);
  }
}

// Key pass. Block = (key tile, kv head); warp w owns keys [16w, 16w + 16). Loops over the
// group's q heads and the 64-query chunks of the slot from the tile's first row on (only chunk 0
// straddles the diagonal): Sᵀ = K·Qᵀ, Pᵀ = exp(Sᵀ·scale − lse), dV += Pᵀ·dO, dPᵀ = V·dOᵀ,
// dSᵀ = Pᵀ∘(dPᵀ − delta), dK += dSᵀ·Q. Writes dk = scale·dK, dv = dV.
template <int HD>
__global__ void __launch_bounds__(kThreads) k_attn_dkdv(const bf16* __restrict__ q, const float* __restrict__ dout,
                                                        const float* __restrict__ lse, const float* __restrict__ delta,
                                                        KVLayer cache, const AttentionTile* __restrict__ tiles, int group,
                                                        int heads, float scale_log2, float scale, float* __restrict__ dk,
                                                        float* __restrict__ dv) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + Tile<HD>::kElems;
  bf16* qs = vs + Tile<HD>::kElems;
  bf16* dos = qs + Tile<HD>::kElems;
  float* lse_s = reinterpret_cast<float*>(dos + Tile<HD>::kElems);  // [64], log2 units
  float* dl_s = lse_s + kRows;                                       // [64]

  const AttentionTile tile = tiles[blockIdx.x];
  const int kvh = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, tq = lane & 3, g8 = lane >> 2;
  const int q_dim = heads * HD;
  const int64_t kv_dim = cache.kv_dim;
  const bf16* kbase = cache.k + static_cast<int64_t>(tile.slot) * cache.capacity * kv_dim + kvh * HD;
  const bf16* vbase = cache.v + static_cast<int64_t>(tile.slot) * cache.capacity * kv_dim + kvh * HD;
  stage_kv<HD>(ks, vs, kbase, vbase, kv_dim, tile.pos0, tile.pos0 + tile.rows);
  cp_async_commit();

  const bool warp_active = warp * 16 < tile.rows;
  const int key_a = warp * 16 + g8, key_b = key_a + 8;  // this thread's key rows (local)
  const int n_chunks = (tile.row_end - tile.row0 + kRows - 1) / kRows;

  float ak[HD / 8][4], av[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) ak[n][0] = ak[n][1] = ak[n][2] = ak[n][3] = av[n][0] = av[n][1] = av[n][2] = av[n][3] = 0.f;

  for (int g = 0; g < group; ++g) {
    const int h = kvh * group + g;
    for (int c = 0; c < n_chunks; ++c) {
      const int qr0 = tile.row0 + c * kRows, qn = min(kRows, tile.row_end - qr0);
      __syncthreads();  // the previous chunk's tiles are no longer read
      stage_bf16<HD>(qs, q, [&](int i) { return i < qn ? q + static_cast<int64_t>(qr0 + i) * q_dim + h * HD : nullptr; });
      cp_async_commit();
      stage_f32_as_bf16<HD>(dos, [&](int i) { return i < qn ? dout + static_cast<int64_t>(qr0 + i) * q_dim + h * HD : nullptr; });
      if (threadIdx.x < kRows) {
        const int i = threadIdx.x;
        const int64_t at = static_cast<int64_t>(qr0 + i) * heads + h;
        lse_s[i] = i < qn ? lse[at] * kLog2e : INFINITY;  // padding queries: p = 0
        dl_s[i] = i < qn ? delta[at] : 0.f;
      }
      cp_async_wait<0>();
      __syncthreads();
      // chunk 0 starts at the tile's first key: query i sees key j iff i ≥ j; a warp whose keys all
      // lie past the chunk's last query has nothing to do
      if (!warp_active || (c == 0 && warp * 16 >= qn)) continue;
      float p[8][4], dp[8][4];
      mma_abt<HD>(p, ks, warp * 16, qs);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int qi = n * 8 + 2 * tq + e;
          const float l2 = lse_s[qi];
          p[n][e] = c == 0 && qi < key_a ? 0.f : fast_exp2(p[n][e] * scale_log2 - l2);
          p[n][2 + e] = c == 0 && qi < key_b ? 0.f : fast_exp2(p[n][2 + e] * scale_log2 - l2);
        }
      }
      mma_pb<HD>(av, p, dos);
      mma_abt<HD>(dp, vs, warp * 16, dos);
#pragma unroll
      for (int n = 0; n < 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float d = dl_s[n * 8 + 2 * tq + e];
          dp[n][e] = p[n][e] * (dp[n][e] - d);
          dp[n][2 + e] = p[n][2 + e] * (dp[n][2 + e] - d);
        }
      }
      mma_pb<HD>(ak, dp, qs);
    }
  }
  cp_async_wait<0>();

  const int kvd = static_cast<int>(kv_dim);
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) {
    const int col = kvh * HD + n * 8 + 2 * tq;
    if (key_a < tile.rows) {
      const int64_t at = static_cast<int64_t>(tile.row0 + key_a) * kvd + col;
      *reinterpret_cast<float2*>(dk + at) = make_float2(ak[n][0] * scale, ak[n][1] * scale);
      *reinterpret_cast<float2*>(dv + at) = make_float2(av[n][0], av[n][1]);
    }
    if (key_b < tile.rows) {
      const int64_t at = static_cast<int64_t>(tile.row0 + key_b) * kvd + col;
      *reinterpret_cast<float2*>(dk + at) = make_float2(ak[n][2] * scale, ak[n][3] * scale);
      *reinterpret_cast<float2*>(dv + at) = make_float2(av[n][2], av[n][3]);
    }
  }
}

// ------------------------------------------------------------------------ host helpers

int sm_count() {
  static int cached[64] = {};
  int dev = 0;
  layers_check(cudaGetDevice(&dev), "attention: cudaGetDevice");
  if (dev < 0 || dev >= 64) dev = 0;
  if (!cached[dev]) {
    int n = 0;
    layers_check(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), "attention: SM count");
    cached[dev] = std::max(1, n);
  }
  return cached[dev];
}

// Raises a kernel's dynamic shared memory limit (once per kernel and device; the kernel is a
// template argument so that each instantiation keeps its own flag).
template <auto Kernel>
void allow_smem(int bytes, const char* what) {
  static bool done[64] = {};
  int dev = 0;
  layers_check(cudaGetDevice(&dev), what);
  if (dev < 0 || dev >= 64) dev = 0;
  if (done[dev]) return;
  layers_check(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
  done[dev] = true;
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void check_shape(const char* fn, int hd, int heads, int kv_heads, int tile_rows) {
  require(attention_tc_supported(hd, heads, kv_heads), std::string(fn) + ": unsupported shape (hd " + std::to_string(hd) +
                                                           ", heads " + std::to_string(heads) + ", kv_heads " +
                                                           std::to_string(kv_heads) + ")");
  require(tile_rows >= 1 && tile_rows <= attention_q_tile_rows(heads, kv_heads),
          std::string(fn) + ": tile_rows " + std::to_string(tile_rows) + " exceeds attention_q_tile_rows");
}

// Splits the forward's key range when too few blocks would run; limited by the workspace.
int choose_splits(int blocks, int max_keys, int64_t T, int heads, int hd, size_t work_floats, int& split_tiles) {
  split_tiles = 0;
  const int n_kt = (max_keys + kRows - 1) / kRows;
  const int target = 3 * sm_count();
  if (blocks >= target || n_kt < 2 || T <= 0) return 1;
  const size_t per_split = static_cast<size_t>(T) * heads * (hd + 1);
  const int by_work = static_cast<int>(std::min<size_t>(kMaxSplits, work_floats / per_split));
  int splits = std::min({(target + blocks - 1) / blocks, n_kt, by_work});
  if (splits < 2) return 1;
  split_tiles = (n_kt + splits - 1) / splits;
  return (n_kt + split_tiles - 1) / split_tiles;
}

std::vector<AttentionTile> cut_spans(const std::vector<SlotSpan>& spans, int tile_rows) {
  require(tile_rows >= 1 && tile_rows <= kRows, "plan_attention: tile_rows must be in [1, 64]");
  std::vector<AttentionTile> tiles;
  for (const SlotSpan& s : spans) {
    require(s.rows >= 0 && s.pos0 >= 0 && s.row0 >= 0 && s.slot >= 0, "plan_attention: negative span field");
    for (int r = 0; r < s.rows; r += tile_rows)
      tiles.push_back({s.slot, s.row0 + r, s.pos0 + r, std::min(tile_rows, s.rows - r), s.row0 + s.rows});
  }
  return tiles;
}

template <int HD>
void launch_fwd(const bf16* q, KVLayer cache, const AttentionTile* tiles, int n_tiles, int64_t T, int max_keys, int heads,
                int kv_heads, float scale, bf16* out, float* lse, float* work, size_t work_floats, cudaStream_t s) {
  const int group = heads / kv_heads;
  int split_tiles = 0;
  const int splits = work ? choose_splits(n_tiles * kv_heads, max_keys, T, heads, HD, work_floats, split_tiles) : 1;
  const int smem = 5 * Tile<HD>::kBytes;
  allow_smem<k_attn_fwd<HD>>(smem, "attention_tc_fwd: smem limit");
  const dim3 grid(n_tiles, kv_heads, splits);
  k_attn_fwd<HD><<<grid, kThreads, smem, s>>>(q, cache, tiles, group, heads, scale * kLog2e, splits > 1 ? split_tiles : 0, T,
                                              out, lse, splits > 1 ? work : nullptr);
  check_launch("attention_tc_fwd (k_attn_fwd)");
  if (splits > 1) {
    const int64_t items = T * heads;
    k_attn_combine<<<static_cast<unsigned>((items + 7) / 8), 256, 0, s>>>(work, splits, T, heads, HD, out, lse);
    check_launch("attention_tc_fwd (k_attn_combine)");
  }
}

template <int HD>
void launch_bwd(const bf16* q, const float* dout, const float* lse, KVLayer cache, const AttentionTile* q_tiles, int n_q_tiles,
                const AttentionTile* k_tiles, int n_k_tiles, int heads, int kv_heads, float scale, const float* delta, float* dq,
                float* dk, float* dv, cudaStream_t s) {
  const int group = heads / kv_heads;
  if (n_q_tiles > 0) {
    const int smem = 6 * Tile<HD>::kBytes;
    allow_smem<k_attn_dq<HD>>(smem, "attention_tc_bwd: smem limit (dq)");
    k_attn_dq<HD><<<dim3(n_q_tiles, kv_heads), kThreads, smem, s>>>(q, dout, lse, delta, cache, q_tiles, group, heads,
                                                                     scale * kLog2e, scale, dq);
    check_launch("attention_tc_bwd (k_attn_dq)");
  }
  if (n_k_tiles > 0) {
    const int smem = 4 * Tile<HD>::kBytes + 2 * kRows * static_cast<int>(sizeof(float));
    allow_smem<k_attn_dkdv<HD>>(smem, "attention_tc_bwd: smem limit (dk, dv)");
    k_attn_dkdv<HD><<<dim3(n_k_tiles, kv_heads), kThreads, smem, s>>>(q, dout, lse, delta, cache, k_tiles, group, heads,
                                                                       scale * kLog2e, scale, dk, dv);
    check_launch("attention_tc_bwd (k_attn_dkdv)");
  }
}

}  // namespace

bool attention_tc_supported(int hd, int heads, int kv_heads) {
  return (hd == 32 || hd == 64 || hd == 128) && heads > 0 && kv_heads > 0 && heads % kv_heads == 0 &&
         heads / kv_heads <= kRows;
}

int attention_q_tile_rows(int heads, int kv_heads) {
  require(heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && heads / kv_heads <= kRows,
          "attention_q_tile_rows: heads must be a multiple of kv_heads, group ≤ 64");
  return kRows / (heads / kv_heads);
}

std::vector<AttentionTile> plan_attention_q_tiles(const std::vector<SlotSpan>& spans, int tile_rows) {
  std::vector<AttentionTile> tiles = cut_spans(spans, tile_rows);
  std::stable_sort(tiles.begin(), tiles.end(), [](const AttentionTile& a, const AttentionTile& b) {
    return a.pos0 + a.rows > b.pos0 + b.rows;  // most keys first
  });
  return tiles;
}

std::vector<AttentionTile> plan_attention_key_tiles(const std::vector<SlotSpan>& spans) {
  std::vector<AttentionTile> tiles = cut_spans(spans, kAttentionKeyTile);
  std::stable_sort(tiles.begin(), tiles.end(), [](const AttentionTile& a, const AttentionTile& b) {
    return a.row_end - a.row0 > b.row_end - b.row0;  // most queries first
  });
  return tiles;
}

size_t attention_fwd_work_floats(int64_t T, int heads, int hd, int splits) {
  return static_cast<size_t>(std::max<int64_t>(T, 0)) * heads * (hd + 1) * std::clamp(splits, 1, kMaxSplits);
}

AttentionSplit attention_tc_fwd_split(int n_tiles, int64_t T, int max_keys, int heads, int kv_heads, int hd, size_t work_floats) {
  const int HD = hd == 32 ? 32 : hd == 64 ? 64 : 128;  // attention_tc_fwd's dispatch
  AttentionSplit a;
  a.splits = choose_splits(n_tiles * kv_heads, max_keys, T, heads, HD, work_floats, a.split_tiles);
  if (a.splits <= 1) a.split_tiles = 0;
  return a;
}

void attention_tc_fwd(const bf16* q, KVLayer cache, const AttentionTile* tiles, int n_tiles, int tile_rows, int64_t T,
                      int max_keys, int heads, int kv_heads, int hd, float scale, bf16* out, float* lse, float* work,
                      size_t work_floats, cudaStream_t s) {
  if (n_tiles <= 0 || T <= 0) return;
  check_shape("attention_tc_fwd", hd, heads, kv_heads, tile_rows);
  require(cache.kv_dim == kv_heads * hd, "attention_tc_fwd: cache.kv_dim != kv_heads·hd");
  require(aligned16(q) && aligned16(cache.k) && aligned16(cache.v), "attention_tc_fwd: q and the cache must be 16-byte aligned");
  require(!work || aligned16(work), "attention_tc_fwd: work must be 16-byte aligned");
  switch (hd) {
    case 32: launch_fwd<32>(q, cache, tiles, n_tiles, T, max_keys, heads, kv_heads, scale, out, lse, work, work_floats, s); break;
    case 64: launch_fwd<64>(q, cache, tiles, n_tiles, T, max_keys, heads, kv_heads, scale, out, lse, work, work_floats, s); break;
    default: launch_fwd<128>(q, cache, tiles, n_tiles, T, max_keys, heads, kv_heads, scale, out, lse, work, work_floats, s); break;
  }
}

void attention_tc_bwd(const bf16* q, const bf16* out, const float* dout, const float* lse, KVLayer cache,
                      const AttentionTile* q_tiles, int n_q_tiles, int tile_rows, const AttentionTile* k_tiles, int n_k_tiles,
                      int64_t T, int heads, int kv_heads, int hd, float scale, float* delta, float* dq, float* dk, float* dv,
                      cudaStream_t s) {
  if (T <= 0) return;
  check_shape("attention_tc_bwd", hd, heads, kv_heads, tile_rows);
  require(cache.kv_dim == kv_heads * hd, "attention_tc_bwd: cache.kv_dim != kv_heads·hd");
  require(aligned16(q) && aligned16(out) && aligned16(dout) && aligned16(cache.k) && aligned16(cache.v) && aligned16(dq) &&
              aligned16(dk) && aligned16(dv),
          "attention_tc_bwd: arrays must be 16-byte aligned");
  const int64_t items = T * heads;
  k_attn_delta<<<static_cast<unsigned>((items + 7) / 8), 256, 0, s>>>(out, dout, T, heads, hd, delta);
  check_launch("attention_tc_bwd (k_attn_delta)");
  switch (hd) {
    case 32: launch_bwd<32>(q, dout, lse, cache, q_tiles, n_q_tiles, k_tiles, n_k_tiles, heads, kv_heads, scale, delta, dq, dk, dv, s); break;
    case 64: launch_bwd<64>(q, dout, lse, cache, q_tiles, n_q_tiles, k_tiles, n_k_tiles, heads, kv_heads, scale, delta, dq, dk, dv, s); break;
    default: launch_bwd<128>(q, dout, lse, cache, q_tiles, n_q_tiles, k_tiles, n_k_tiles, heads, kv_heads, scale, delta, dq, dk, dv, s); break;
  }
}

}  // namespace ad::cuda
