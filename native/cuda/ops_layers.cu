// Device kernels of the transformer's layers (see ops_layers.h). The per-element arithmetic is
// native/kernels/*.h's, the functions the CPU backend calls too (float accumulators here, the
// device's fast exp and rsqrt); only the parallel structure is this file's: a block per row for
// norms, a warp per (token, head) for attention.
#include "cuda/ops_layers.h"

#include <algorithm>

#include "kernels/attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace ad::cuda {

void layers_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string("CUDA error in ") + what + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

namespace {

constexpr int kMaxHeadDim = 256;

inline void check_launch(const char* what) { layers_check(cudaGetLastError(), what); }

inline unsigned blocks_for(int64_t n, int threads, int64_t cap = 1 << 16) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, cap)));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // part[] may still be read by a previous call
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float x = lane < static_cast<int>(blockDim.x >> 5) ? part[lane] : 0.f;
    x = warp_sum(x);
    if (lane == 0) total = x;
  }
  __syncthreads();
  return total;
}

// ------------------------------------------------------------------------ casts, elementwise

__global__ void k_f32_to_bf16(const float* __restrict__ x, bf16* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}
__global__ void k_bf16_to_f32(const bf16* __restrict__ x, float* __restrict__ y, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}
__global__ void k_fill(float* x, float v, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) x[i] = v;
}
__global__ void k_add_bias_rows(float* y, const float* __restrict__ b, int64_t T, int n) {
  const int64_t total = T * n;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x)
    y[i] += b[i % n];
}

// ------------------------------------------------------------------------ embedding

__global__ void k_embed_gather(const bf16* __restrict__ table, const int32_t* __restrict__ tokens, int64_t T, int H,
                               float* __restrict__ x) {
  const int64_t t = blockIdx.x;
  if (t >= T) return;
  const bf16* row = table + static_cast<int64_t>(tokens[t]) * H;
  for (int j = threadIdx.x; j < H; j += blockDim.x) x[t * H + j] = __bfloat162float(row[j]);
}
__global__ void k_embed_scatter(const float* __restrict__ dx, const int32_t* __restrict__ tokens, int64_t T, int H,
                                float* grad) {
  const int64_t t = blockIdx.x;
  if (t >= T) return;
  float* row = grad + static_cast<int64_t>(tokens[t]) * H;
  for (int j = threadIdx.x; j < H; j += blockDim.x) atomicAdd(row + j, dx[t * H + j]);
}

// ------------------------------------------------------------------------ RMSNorm

// Block per row; `rows` (optional) maps output row r to input row rows[r].
__global__ void k_rmsnorm_fwd(const float* __restrict__ x, const int32_t* __restrict__ rows, const float* __restrict__ w,
                              bf16* __restrict__ y, float* __restrict__ y32, float* __restrict__ rstd_out, int64_t R, int H,
                              float eps) {
  const int64_t r = blockIdx.x;
  if (r >= R) return;
  const float* xr = x + (rows ? static_cast<int64_t>(rows[r]) : r) * H;
  float ss = 0.f;
  for (int j = threadIdx.x; j < H; j += blockDim.x) ss += xr[j] * xr[j];
  ss = block_sum(ss);
  const float rstd = kernels::rms_inverse(ss, H, eps);
  if (rstd_out && threadIdx.x == 0) rstd_out[r] = rstd;
  for (int j = threadIdx.x; j < H; j += blockDim.x) {
    const float v = kernels::rmsnorm_element(xr[j], rstd, w[j]);
    y[r * H + j] = __float2bfloat16(v);
    if (y32) y32[r * H + j] = v;
  }
}

// Grid-stride over rows; each block accumulates its weight-gradient partial in shared memory
// (thread j owns columns j, j + blockDim, …) and adds it to dw once.
// xrows maps row r to the x/dx row (null: identity); dy is dense [R × H].
__global__ void k_rmsnorm_bwd(const float* __restrict__ x, const int32_t* __restrict__ xrows, const float* __restrict__ w,
                              const float* __restrict__ dy, float* __restrict__ dx, int accumulate, float* __restrict__ dw,
                              int64_t R, int H, float eps) {
  extern __shared__ float dw_part[];
  if (dw)
    for (int j = threadIdx.x; j < H; j += blockDim.x) dw_part[j] = 0.f;
  for (int64_t r = blockIdx.x; r < R; r += gridDim.x) {
    const int64_t xr = xrows ? static_cast<int64_t>(xrows[r]) : r;
    const float* xv = x + xr * H;
    const float* g = dy + r * H;
    float ss = 0.f, dot = 0.f;
    for (int j = threadIdx.x; j < H; j += blockDim.x) {
      ss += xv[j] * xv[j];
      dot += w[j] * g[j] * xv[j];
    }
    ss = block_sum(ss);
    dot = block_sum(dot);
    const float rs = kernels::rms_inverse(ss, H, eps);
    const float c = kernels::rmsnorm_grad_coef(rs, dot, H);
    float* d = dx + xr * H;
    for (int j = threadIdx.x; j < H; j += blockDim.x) {
      const float v = kernels::rmsnorm_grad_element(rs, c, w[j], g[j], xv[j]);
      d[j] = accumulate ? d[j] + v : v;
      if (dw) dw_part[j] += kernels::rmsnorm_weight_grad_element(g[j], xv[j], rs);
    }
  }
  if (dw) {
    __syncthreads();
    for (int j = threadIdx.x; j < H; j += blockDim.x) atomicAdd(dw + j, dw_part[j]);
  }
}

// ------------------------------------------------------------------------ q/k-norm + RoPE

// One warp per head vector; lane owns rotation pairs (i, i + half) for i = lane, lane + 32, ….
// Returns the normalization factor applied (1 without a norm weight) via the in/out registers.
template <int P>
__device__ void head_norm_rope(float (&a)[P], float (&b)[P], const float* norm_w, const float2* __restrict__ cs, int half,
                               float eps) {
  const int lane = threadIdx.x & 31;
  if (norm_w) {
    float ss = 0.f;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i = lane + 32 * p;
      if (i < half) ss += a[p] * a[p] + b[p] * b[p];
    }
    ss = warp_sum(ss);
    const float r = kernels::rms_inverse(ss, 2 * half, eps);
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i = lane + 32 * p;
      if (i < half) {
        a[p] = kernels::rmsnorm_element(a[p], r, norm_w[i]);
        b[p] = kernels::rmsnorm_element(b[p], r, norm_w[i + half]);
      }
    }
  }
#pragma unroll
  for (int p = 0; p < P; ++p) {
    const int i = lane + 32 * p;
    if (i < half) kernels::rope_rotate(a[p], b[p], cs[i].x, cs[i].y);
  }
}

// cos/sin of every rotation angle of every token: computed in double (exact angles at long
// positions, as the CPU), once per forward instead of once per layer and head.
__global__ void k_rope_table(const int32_t* __restrict__ pos, const double* __restrict__ inv_freq, int64_t T, int half,
                             float2* __restrict__ cs) {
  const int64_t n = T * half;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    const int64_t t = e / half;
    const int i = static_cast<int>(e - t * half);
    double sn, c;
    sincos(static_cast<double>(pos[t]) * inv_freq[i], &sn, &c);
    cs[e] = make_float2(static_cast<float>(c), static_cast<float>(sn));
  }
}

template <int P>
__global__ void k_qk_rope(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                          const float* __restrict__ q_norm, const float* __restrict__ k_norm, const float2* __restrict__ rope_cs,
                          TokenMap map, int64_t T, int heads, int kv_heads, int hd, float eps, bf16* __restrict__ q_out,
                          KVLayer cache) {
  const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = blockIdx.x;
  if (t >= T) return;
  const int half = hd / 2, pos = map.pos[t], slot = map.slot[t];
  const int qd = heads * hd, kvd = kv_heads * hd;
  const int64_t cache_row = (static_cast<int64_t>(slot) * cache.capacity + pos) * cache.kv_dim;
  for (int h = warp; h < heads + kv_heads; h += warps) {
    const bool is_q = h < heads;
    const float* src = is_q ? q + t * qd + h * hd : k + t * kvd + (h - heads) * hd;
    float a[P], b[P];
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i = lane + 32 * p;
      a[p] = i < half ? src[i] : 0.f;
      b[p] = i < half ? src[i + half] : 0.f;
    }
    head_norm_rope<P>(a, b, is_q ? q_norm : k_norm, rope_cs + t * half, half, eps);
    bf16* dst = is_q ? q_out + t * qd + h * hd : cache.k + cache_row + (h - heads) * hd;
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i = lane + 32 * p;
      if (i < half) {
        dst[i] = __float2bfloat16(a[p]);
        dst[i + half] = __float2bfloat16(b[p]);
      }
    }
  }
  for (int j = threadIdx.x; j < kvd; j += blockDim.x) cache.v[cache_row + j] = __float2bfloat16(v[t * kvd + j]);
}

// Grid-stride over tokens; lane-owned norm-weight partials, added once per warp at the end.
template <int P>
__global__ void k_qk_rope_bwd(float* dq, float* dk, bf16* __restrict__ dq_b, bf16* __restrict__ dk_b,
                              const float* __restrict__ q_raw, const float* __restrict__ k_raw, const float* __restrict__ q_norm,
                              const float* __restrict__ k_norm, const float2* __restrict__ rope_cs, int64_t T, int heads,
                              int kv_heads, int hd, float eps, float* dqn, float* dkn) {
  const int warps = blockDim.x >> 5, warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int half = hd / 2, qd = heads * hd, kvd = kv_heads * hd;
  float gqa[P], gqb[P], gka[P], gkb[P];
#pragma unroll
  for (int p = 0; p < P; ++p) gqa[p] = gqb[p] = gka[p] = gkb[p] = 0.f;
  for (int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    for (int h = warp; h < heads + kv_heads; h += warps) {
      const bool is_q = h < heads;
      float* g = is_q ? dq + t * qd + h * hd : dk + t * kvd + (h - heads) * hd;
      const float* raw = is_q ? q_raw + t * qd + h * hd : k_raw + t * kvd + (h - heads) * hd;
      const float* nw = is_q ? q_norm : k_norm;
      float a[P], b[P];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int i = lane + 32 * p;
        a[p] = 0.f;
        b[p] = 0.f;
        if (i < half) {
          const float2 r = rope_cs[t * half + i];
          a[p] = g[i];
          b[p] = g[i + half];
          kernels::rope_unrotate(a[p], b[p], r.x, r.y);
        }
      }
      if (nw) {
        // y = x·r·w: dx = r·w·dy − r³/n·x·Σ(w·dy·x); dw += dy·x·r
        float ss = 0.f, dot = 0.f;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const int i = lane + 32 * p;
          if (i < half) {
            ss += raw[i] * raw[i] + raw[i + half] * raw[i + half];
            dot += nw[i] * a[p] * raw[i] + nw[i + half] * b[p] * raw[i + half];
          }
        }
        ss = warp_sum(ss);
        dot = warp_sum(dot);
        const float r = kernels::rms_inverse(ss, hd, eps), c = kernels::rmsnorm_grad_coef(r, dot, hd);
#pragma unroll
        for (int p = 0; p < P; ++p) {
          const int i = lane + 32 * p;
          if (i < half) {
            const float da = a[p], db = b[p];
            if (is_q) {
              gqa[p] += kernels::rmsnorm_weight_grad_element(da, raw[i], r);
              gqb[p] += kernels::rmsnorm_weight_grad_element(db, raw[i + half], r);
            } else {
              gka[p] += kernels::rmsnorm_weight_grad_element(da, raw[i], r);
              gkb[p] += kernels::rmsnorm_weight_grad_element(db, raw[i + half], r);
            }
            a[p] = kernels::rmsnorm_grad_element(r, c, nw[i], da, raw[i]);
            b[p] = kernels::rmsnorm_grad_element(r, c, nw[i + half], db, raw[i + half]);
          }
        }
      }
      bf16* gb16 = is_q ? (dq_b ? dq_b + t * qd + h * hd : nullptr) : (dk_b ? dk_b + t * kvd + (h - heads) * hd : nullptr);
#pragma unroll
      for (int p = 0; p < P; ++p) {
        const int i = lane + 32 * p;
        if (i < half) {
          g[i] = a[p];
          g[i + half] = b[p];
          if (gb16) {  // the bf16 copy the projections' backward GEMMs read
            gb16[i] = __float2bfloat16(a[p]);
            gb16[i + half] = __float2bfloat16(b[p]);
          }
        }
      }
    }
  }
  if (dqn && q_norm) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i = lane + 32 * p;
      if (i < half) {
        atomicAdd(dqn + i, gqa[p]);
        atomicAdd(dqn + i + half, gqb[p]);
      }
    }
  }
  if (dkn && k_norm) {
#pragma unroll
    for (int p = 0; p < P; ++p) {
      const int i = lane + 32 * p;
      if (i < half) {
        atomicAdd(dkn + i, gka[p]);
        atomicAdd(dkn + i + half, gkb[p]);
      }
    }
  }
}

// ------------------------------------------------------------------------ attention

// Lane owns E contiguous elements [lane·E, lane·E + E) of a head vector (E·32 ≥ hd).
template <int E>
__device__ __forceinline__ void load_head_bf16(const bf16* src, int hd, float (&x)[E]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane * E + e;
    x[e] = i < hd ? __bfloat162float(src[i]) : 0.f;
  }
}
template <int E>
__device__ __forceinline__ void load_head_f32(const float* src, int hd, float (&x)[E]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane * E + e;
    x[e] = i < hd ? src[i] : 0.f;
  }
}
template <int E>
__device__ __forceinline__ float dot_head(const float (&a)[E], const float (&b)[E]) {
  float s = 0.f;
#pragma unroll
  for (int e = 0; e < E; ++e) s += a[e] * b[e];
  return warp_sum(s);
}

// Warp per (token, head): online softmax over the keys [0, pos] of the token's slot.
template <int E>
__global__ void k_attention_fwd(const bf16* __restrict__ q, KVLayer cache, TokenMap map, int64_t T, int heads, int kv_heads,
                                int hd, float scale, bf16* __restrict__ out, float* __restrict__ lse) {
  const int64_t item = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= T * heads) return;
  const int64_t t = item / heads;
  const int h = static_cast<int>(item % heads), kvh = h / (heads / kv_heads);
  const int qd = heads * hd, n_keys = map.pos[t] + 1;
  const int64_t base = static_cast<int64_t>(map.slot[t]) * cache.capacity * cache.kv_dim + kvh * hd;
  float qv[E], acc[E];
  load_head_bf16<E>(q + t * qd + h * hd, hd, qv);
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int j = 0; j < n_keys; ++j) {
    float kv[E];
    load_head_bf16<E>(cache.k + base + static_cast<int64_t>(j) * cache.kv_dim, hd, kv);
    float corr, p;
    kernels::online_softmax_add(m, l, dot_head<E>(qv, kv) * scale, corr, p);
    load_head_bf16<E>(cache.v + base + static_cast<int64_t>(j) * cache.kv_dim, hd, kv);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = acc[e] * corr + p * kv[e];
  }
  const float inv = 1.f / l;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane * E + e;
    if (i < hd) out[t * qd + h * hd + i] = __float2bfloat16(acc[e] * inv);
  }
  if (lse && lane == 0) lse[t * heads + h] = kernels::online_softmax_lse(m, l);
}

// delta[t, h] = Σ_i dout · out
template <int E>
__global__ void k_attention_delta(const bf16* __restrict__ out, const float* __restrict__ dout, int64_t T, int heads, int hd,
                                  float* __restrict__ delta) {
  const int64_t item = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= T * heads) return;
  const int64_t off = item * hd;  // [T × heads × hd] is [T × q_dim]
  float o[E], d[E];
  load_head_bf16<E>(out + off, hd, o);
  load_head_f32<E>(dout + off, hd, d);
  const float s = dot_head<E>(o, d);
  if ((threadIdx.x & 31) == 0) delta[item] = s;
}

// dq[t, h] = scale · Σ_j p_j (dp_j − delta) k_j, p_j = exp(s_j − lse), dp_j = dout·v_j.
template <int E>
__global__ void k_attention_dq(const bf16* __restrict__ q, const float* __restrict__ dout, const float* __restrict__ lse,
                               const float* __restrict__ delta, KVLayer cache, TokenMap map, int64_t T, int heads, int kv_heads,
                               int hd, float scale, float* __restrict__ dq) {
  const int64_t item = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= T * heads) return;
  const int64_t t = item / heads;
  const int h = static_cast<int>(item % heads), kvh = h / (heads / kv_heads);
  const int qd = heads * hd, n_keys = map.pos[t] + 1;
  const int64_t base = static_cast<int64_t>(map.slot[t]) * cache.capacity * cache.kv_dim + kvh * hd;
  float qv[E], dv[E], acc[E];
  load_head_bf16<E>(q + t * qd + h * hd, hd, qv);
  load_head_f32<E>(dout + t * qd + h * hd, hd, dv);
#pragma unroll
  for (int e = 0; e < E; ++e) acc[e] = 0.f;
  const float L = lse[item], D = delta[item];
  for (int j = 0; j < n_keys; ++j) {
    float kv[E], vv[E];
    load_head_bf16<E>(cache.k + base + static_cast<int64_t>(j) * cache.kv_dim, hd, kv);
    load_head_bf16<E>(cache.v + base + static_cast<int64_t>(j) * cache.kv_dim, hd, vv);
    const float p = kernels::attention_probability(dot_head<E>(qv, kv) * scale, L);
    const float ds = kernels::softmax_grad_element(p, dot_head<E>(dv, vv), D, scale);
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] += ds * kv[e];
  }
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane * E + e;
    if (i < hd) dq[t * qd + h * hd + i] = acc[e];
  }
}

// Warp per (key row r, kv head): the key at row r is attended by rows r … end of its slot, by
// every query head of the group. dk = scale·Σ ds·q, dv = Σ p·dout.
template <int E>
__global__ void k_attention_dkdv(const bf16* __restrict__ q, const float* __restrict__ dout, const float* __restrict__ lse,
                                 const float* __restrict__ delta, KVLayer cache, TokenMap map, SlotRows slots, int64_t T,
                                 int heads, int kv_heads, int hd, float scale, float* __restrict__ dk, float* __restrict__ dvo) {
  const int64_t item = blockIdx.x * (int64_t)(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (item >= T * kv_heads) return;
  const int64_t r = item / kv_heads;
  const int kvh = static_cast<int>(item % kv_heads), group = heads / kv_heads;
  const int qd = heads * hd, kvd = kv_heads * hd, slot = map.slot[r];
  const int64_t end = static_cast<int64_t>(slots.row0[slot]) + slots.rows[slot];
  const int64_t krow = (static_cast<int64_t>(slot) * cache.capacity + map.pos[r]) * cache.kv_dim + kvh * hd;
  float kv[E], vv[E], ak[E], av[E];
  load_head_bf16<E>(cache.k + krow, hd, kv);
  load_head_bf16<E>(cache.v + krow, hd, vv);
#pragma unroll
  for (int e = 0; e < E; ++e) ak[e] = av[e] = 0.f;
  for (int64_t i = r; i < end; ++i) {
    for (int h = kvh * group; h < (kvh + 1) * group; ++h) {
      float qv[E], dv[E];
      load_head_bf16<E>(q + i * qd + h * hd, hd, qv);
      load_head_f32<E>(dout + i * qd + h * hd, hd, dv);
      const float p = kernels::attention_probability(dot_head<E>(qv, kv) * scale, lse[i * heads + h]);
      const float ds = kernels::softmax_grad_element(p, dot_head<E>(dv, vv), delta[i * heads + h], scale);
#pragma unroll
      for (int e = 0; e < E; ++e) {
        ak[e] += ds * qv[e];
        av[e] += p * dv[e];
      }
    }
  }
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    const int i = lane * E + e;
    if (i < hd) {
      dk[r * kvd + kvh * hd + i] = ak[e];
      dvo[r * kvd + kvh * hd + i] = av[e];
    }
  }
}

// ------------------------------------------------------------------------ SwiGLU

__global__ void k_swiglu_fwd(const float* __restrict__ g, const float* __restrict__ u, bf16* __restrict__ h, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    h[i] = __float2bfloat16(kernels::swiglu_element(g[i], u[i]));
}
// dg may alias dh (each element is read before it is written). Each output is written in f32,
// bf16 or both (null = not wanted).
__global__ void k_swiglu_bwd(const float* __restrict__ g, const float* __restrict__ u, const float* dh, float* dg,
                             float* __restrict__ du, bf16* __restrict__ dg_b, bf16* __restrict__ du_b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    float vg, vu;
    kernels::swiglu_backward_element(g[i], u[i], dh[i], vg, vu);
    if (du) du[i] = vu;
    if (dg) dg[i] = vg;
    if (du_b) du_b[i] = __float2bfloat16(vu);
    if (dg_b) dg_b[i] = __float2bfloat16(vg);
  }
}

// ------------------------------------------------------------------------ reductions

__global__ void k_column_sum_add(const float* __restrict__ x, int64_t T, int n, float* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  float s = 0.f;
  for (int64_t t = 0; t < T; ++t) s += x[t * n + j];
  out[j] += s;
}

__global__ void k_sum_squares(const float* __restrict__ x, int64_t n, double* out) {
  float s = 0.f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) s += x[i] * x[i];
  s = block_sum(s);
  if (threadIdx.x == 0) atomicAdd(out, static_cast<double>(s));
}

int elems_per_lane(int hd) {
  if (hd <= 0 || hd > kMaxHeadDim || hd % 2) throw std::invalid_argument("head_dim must be even and at most 256 on the CUDA backend");
  return hd <= 32 ? 1 : hd <= 64 ? 2 : hd <= 128 ? 4 : 8;
}

}  // namespace

// ================================================================== host wrappers

void cast_f32_to_bf16(const float* x, bf16* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_f32_to_bf16<<<blocks_for(n, 256, 4096), 256, 0, s>>>(x, y, n);
  check_launch("cast_f32_to_bf16");
}
void cast_bf16_to_f32(const bf16* x, float* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_bf16_to_f32<<<blocks_for(n, 256, 4096), 256, 0, s>>>(x, y, n);
  check_launch("cast_bf16_to_f32");
}
void fill_f32(float* x, float v, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_fill<<<blocks_for(n, 256, 4096), 256, 0, s>>>(x, v, n);
  check_launch("fill_f32");
}
void add_bias_rows(float* y, const float* b, int64_t T, int n, cudaStream_t s) {
  if (T * n <= 0) return;
  k_add_bias_rows<<<blocks_for(T * n, 256, 4096), 256, 0, s>>>(y, b, T, n);
  check_launch("add_bias_rows");
}

void embed_gather(const bf16* table, const int32_t* tokens, int64_t T, int H, float* x, cudaStream_t s) {
  if (T <= 0) return;
  k_embed_gather<<<static_cast<unsigned>(T), 256, 0, s>>>(table, tokens, T, H, x);
  check_launch("embed_gather");
}
void embed_scatter_add(const float* dx, const int32_t* tokens, int64_t T, int H, float* grad, cudaStream_t s) {
  if (T <= 0) return;
  k_embed_scatter<<<static_cast<unsigned>(T), 256, 0, s>>>(dx, tokens, T, H, grad);
  check_launch("embed_scatter_add");
}

void rmsnorm_fwd(const float* x, const float* w, bf16* y, float* y32, float* rstd, int64_t T, int H, float eps, cudaStream_t s) {
  if (T <= 0) return;
  k_rmsnorm_fwd<<<static_cast<unsigned>(T), 256, 0, s>>>(x, nullptr, w, y, y32, rstd, T, H, eps);
  check_launch("rmsnorm_fwd");
}
void rmsnorm_gather_fwd(const float* x, const int32_t* rows, int64_t R, const float* w, bf16* y, float* y32, int H, float eps,
                        cudaStream_t s) {
  if (R <= 0) return;
  k_rmsnorm_fwd<<<static_cast<unsigned>(R), 256, 0, s>>>(x, rows, w, y, y32, nullptr, R, H, eps);
  check_launch("rmsnorm_gather_fwd");
}

static void rmsnorm_bwd_launch(const float* x, const int32_t* rows, const float* w, const float* dy, float* dx, bool accumulate,
                               float* dw, int64_t R, int H, float eps, cudaStream_t s) {
  if (R <= 0) return;
  const size_t smem = dw ? sizeof(float) * H : 0;
  if (smem > 48 * 1024) throw std::invalid_argument("hidden size too large for the RMSNorm backward kernel");
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(R, 1024));
  k_rmsnorm_bwd<<<grid, 256, smem, s>>>(x, rows, w, dy, dx, accumulate ? 1 : 0, dw, R, H, eps);
  check_launch("rmsnorm_bwd");
}
void rmsnorm_bwd(const float* x, const float* w, const float* dy, float* dx, bool accumulate, float* dw, int64_t T, int H,
                 float eps, cudaStream_t s) {
  rmsnorm_bwd_launch(x, nullptr, w, dy, dx, accumulate, dw, T, H, eps, s);
}
void rmsnorm_scatter_bwd(const float* x, const int32_t* rows, int64_t R, const float* w, const float* dy, float* dx, float* dw,
                         int H, float eps, cudaStream_t s) {
  rmsnorm_bwd_launch(x, rows, w, dy, dx, false, dw, R, H, eps, s);
}

void rope_table(const int32_t* pos, const double* inv_freq, int64_t T, int hd, float2* cs, cudaStream_t s) {
  if (T <= 0) return;
  const int half = hd / 2;
  k_rope_table<<<blocks_for(T * half, 256, 4096), 256, 0, s>>>(pos, inv_freq, T, half, cs);
  check_launch("rope_table");
}

void qk_rope_to_cache(const float* q, const float* k, const float* v, const float* q_norm, const float* k_norm,
                      const float2* rope_cs, TokenMap map, int64_t T, int heads, int kv_heads, int hd, float eps, bf16* q_out,
                      KVLayer cache, cudaStream_t s) {
  if (T <= 0) return;
  elems_per_lane(hd);  // validates hd
  const int half = hd / 2;
  const unsigned grid = static_cast<unsigned>(T);
  if (half <= 32) k_qk_rope<1><<<grid, 256, 0, s>>>(q, k, v, q_norm, k_norm, rope_cs, map, T, heads, kv_heads, hd, eps, q_out, cache);
  else if (half <= 64) k_qk_rope<2><<<grid, 256, 0, s>>>(q, k, v, q_norm, k_norm, rope_cs, map, T, heads, kv_heads, hd, eps, q_out, cache);
  else k_qk_rope<4><<<grid, 256, 0, s>>>(q, k, v, q_norm, k_norm, rope_cs, map, T, heads, kv_heads, hd, eps, q_out, cache);
  check_launch("qk_rope_to_cache");
}

void qk_rope_bwd(float* dq, float* dk, bf16* dq_b, bf16* dk_b, const float* q_raw, const float* k_raw, const float* q_norm,
                 const float* k_norm, const float2* rope_cs, int64_t T, int heads, int kv_heads, int hd, float eps, float* dqn,
                 float* dkn, cudaStream_t s) {
  if (T <= 0) return;
  elems_per_lane(hd);
  const int half = hd / 2;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(T, 1024));
  if (half <= 32)
    k_qk_rope_bwd<1><<<grid, 256, 0, s>>>(dq, dk, dq_b, dk_b, q_raw, k_raw, q_norm, k_norm, rope_cs, T, heads, kv_heads, hd, eps, dqn, dkn);
  else if (half <= 64)
    k_qk_rope_bwd<2><<<grid, 256, 0, s>>>(dq, dk, dq_b, dk_b, q_raw, k_raw, q_norm, k_norm, rope_cs, T, heads, kv_heads, hd, eps, dqn, dkn);
  else
    k_qk_rope_bwd<4><<<grid, 256, 0, s>>>(dq, dk, dq_b, dk_b, q_raw, k_raw, q_norm, k_norm, rope_cs, T, heads, kv_heads, hd, eps, dqn, dkn);
  check_launch("qk_rope_bwd");
}

#define AD_DISPATCH_E(hd, KERNEL, grid, block, stream, ...)                             \
  switch (elems_per_lane(hd)) {                                                          \
    case 1: KERNEL<1><<<grid, block, 0, stream>>>(__VA_ARGS__); break;                   \
    case 2: KERNEL<2><<<grid, block, 0, stream>>>(__VA_ARGS__); break;                   \
    case 4: KERNEL<4><<<grid, block, 0, stream>>>(__VA_ARGS__); break;                   \
    default: KERNEL<8><<<grid, block, 0, stream>>>(__VA_ARGS__); break;                  \
  }

void attention_fwd(const bf16* q, KVLayer cache, TokenMap map, int64_t T, int heads, int kv_heads, int hd, float scale, bf16* out,
                   float* lse, cudaStream_t s) {
  if (T <= 0) return;
  const int64_t items = T * heads;
  const unsigned grid = static_cast<unsigned>((items + 3) / 4);
  AD_DISPATCH_E(hd, k_attention_fwd, grid, 128, s, q, cache, map, T, heads, kv_heads, hd, scale, out, lse);
  check_launch("attention_fwd");
}

void attention_bwd(const bf16* q, const bf16* out, const float* dout, const float* lse, KVLayer cache, TokenMap map,
                   SlotRows slots, int64_t T, int heads, int kv_heads, int hd, float scale, float* delta, float* dq, float* dk,
                   float* dv, cudaStream_t s) {
  if (T <= 0) return;
  const unsigned gq = static_cast<unsigned>((T * heads + 3) / 4), gk = static_cast<unsigned>((T * kv_heads + 3) / 4);
  AD_DISPATCH_E(hd, k_attention_delta, gq, 128, s, out, dout, T, heads, hd, delta);
  check_launch("attention_bwd(delta)");
  AD_DISPATCH_E(hd, k_attention_dq, gq, 128, s, q, dout, lse, delta, cache, map, T, heads, kv_heads, hd, scale, dq);
  check_launch("attention_bwd(dq)");
  AD_DISPATCH_E(hd, k_attention_dkdv, gk, 128, s, q, dout, lse, delta, cache, map, slots, T, heads, kv_heads, hd, scale, dk, dv);
  check_launch("attention_bwd(dk, dv)");
}

void swiglu_fwd(const float* gate, const float* up, bf16* h, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_swiglu_fwd<<<blocks_for(n, 256, 8192), 256, 0, s>>>(gate, up, h, n);
  check_launch("swiglu_fwd");
}
void swiglu_bwd(const float* gate, const float* up, const float* dh, float* dgate, float* dup, bf16* dgate_b, bf16* dup_b,
                int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  k_swiglu_bwd<<<blocks_for(n, 256, 8192), 256, 0, s>>>(gate, up, dh, dgate, dup, dgate_b, dup_b, n);
  check_launch("swiglu_bwd");
}

void column_sum_add(const float* x, int64_t T, int n, float* out, cudaStream_t s) {
  if (T <= 0 || n <= 0) return;
  k_column_sum_add<<<blocks_for(n, 256), 256, 0, s>>>(x, T, n, out);
  check_launch("column_sum_add");
}
void sum_squares_add(const float* x, int64_t n, double* out, cudaStream_t s) {
  if (n <= 0) return;
  k_sum_squares<<<blocks_for(n, 256, 1024), 256, 0, s>>>(x, n, out);
  check_launch("sum_squares_add");
}

void cache_copy_positions(KVLayer cache, int src, int dst, int len, cudaStream_t s) {
  if (len <= 0 || src == dst) return;
  const size_t bytes = sizeof(bf16) * static_cast<size_t>(len) * cache.kv_dim;
  const int64_t so = static_cast<int64_t>(src) * cache.capacity * cache.kv_dim, d = static_cast<int64_t>(dst) * cache.capacity * cache.kv_dim;
  ADL_CHECK(cudaMemcpyAsync(cache.k + d, cache.k + so, bytes, cudaMemcpyDeviceToDevice, s));
  ADL_CHECK(cudaMemcpyAsync(cache.v + d, cache.v + so, bytes, cudaMemcpyDeviceToDevice, s));
}

}  // namespace ad::cuda
