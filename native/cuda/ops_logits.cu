// Per-row work over logits rows (ops.h): the one-pass statistics, sampling, and the chunked
// LM-head loss backward. The arithmetic is kernels/logit_stats.h's and kernels/sampling.h's.
//
// Statistics: a row is split into chunks, one block each (enough blocks to fill the GPU even for
// one row). A block reads its chunk once with 16-byte loads; each thread keeps the mergeable
// softmax state (SoftmaxState<float>) and its own best LIST entries (64-bit keys: value mapped to
// an unsigned order in the high word, inverted id in the low word, so "ranks before" is one
// integer compare and keys are unique). The block then sorts the union of the thread lists
// (bitonic, shared memory) and checks that it is exact: every element a thread dropped ranks
// below that thread's LIST-th key, so the union holds every element ranking at or above the
// largest such key B; when fewer than `cap` union entries reach B (rare: it takes a thread holding
// more than LIST of the chunk's best), the block rescans its chunk (from L2) for the entries below
// B. A second kernel merges the chunks of each row in f64 and finalizes with
// logit_stats_finalize.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/ops.h"
#include "cuda/ops_common.h"
#include "kernels/logit_stats.h"
#include "kernels/philox.h"
#include "kernels/sampling.h"

namespace ad::cuda {

using detail::ceil_div;
using detail::invalid;

namespace {

// ---------------------------------------------------------------------------------------------
// Keys

// −0 maps to +0's key: the CPU's order (topk_before, select_top_k) holds −0 == +0 and breaks the
// tie by id, so the two zeros must tie here too.
__device__ __forceinline__ uint32_t orderable(float f) {
  const uint32_t b = f == 0.0f ? 0u : __float_as_uint(f);
  return b ^ ((b >> 31) ? 0xFFFFFFFFu : 0x80000000u);
}

__device__ __forceinline__ float from_orderable(uint32_t o) {
  const uint32_t b = (o & 0x80000000u) ? (o ^ 0x80000000u) : ~o;
  return __uint_as_float(b);
}

// 0 for NaN (never ranks); otherwise > 0 (the id word is never all ones for id < 2^32 − 1).
__device__ __forceinline__ uint64_t topk_key(float v, int64_t id) {
  if (v != v) return 0;
  return (static_cast<uint64_t>(orderable(v)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

__device__ __forceinline__ TopKEntry entry_of(uint64_t key) {
  return TopKEntry{from_orderable(static_cast<uint32_t>(key >> 32)),
                   static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key))};
}

// Sorts keys[0, n) descending (n a power of two); all threads of the block call it.
__device__ void block_sort_desc(uint64_t* keys, int n) {
  for (int size = 2; size <= n; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
        const int lo = 2 * i - (i & (stride - 1));
        const int hi = lo + stride;
        const bool desc = (lo & size) == 0;
        const uint64_t a = keys[lo], b = keys[hi];
        if ((a < b) == desc) {
          keys[lo] = b;
          keys[hi] = a;
        }
      }
    }
  }
  __syncthreads();
}

__device__ __forceinline__ int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// ---------------------------------------------------------------------------------------------
// Loads

template <class T>
struct Vec;
template <>
struct Vec<float> {
  static constexpr int kN = 4;
  __device__ __forceinline__ static void load(const float* p, float (&o)[4]) {
    const float4 v = __ldg(reinterpret_cast<const float4*>(p));
    o[0] = v.x;
    o[1] = v.y;
    o[2] = v.z;
    o[3] = v.w;
  }
};
template <>
struct Vec<__nv_bfloat16> {
  static constexpr int kN = 8;
  __device__ __forceinline__ static void load(const __nv_bfloat16* p, float (&o)[8]) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float2 f = __bfloat1622float2(h[e]);
      o[2 * e] = f.x;
      o[2 * e + 1] = f.y;
    }
  }
};

__device__ __forceinline__ float ld1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ld1(const __nv_bfloat16* p) { return __bfloat162float(*p); }
// Coherent loads, for rows the same kernel overwrites (the in-place loss backward): ld.global.nc
// (__ldg) is only defined for data that stays read-only while the kernel runs.
__device__ __forceinline__ float ld_rw(const float* p) { return *p; }
__device__ __forceinline__ float ld_rw(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// ---------------------------------------------------------------------------------------------
// Logit statistics, pass 1: one block per (row, chunk)

constexpr int kStatsThreads = 256;
constexpr int kChunkAlign = 2048;  // chunk starts are multiples of this many elements
constexpr float kExpFloor = -88.0f;

struct ChunkPartial {
  SoftmaxState<float> st;
};

// Per-thread accumulation of one group of n values (ids base..base+n−1).
template <int LIST, bool REF>
struct ThreadScan {
  SoftmaxState<float> st;
  uint64_t list[LIST];
  int offered = 0;

  __device__ __forceinline__ void init() {
    st = SoftmaxState<float>();
#pragma unroll
    for (int i = 0; i < LIST; ++i) list[i] = 0;
    offered = 0;
  }

  __device__ __forceinline__ void offer(uint64_t k) {
    if (k <= list[LIST - 1]) return;
    list[LIST - 1] = k;
#pragma unroll
    for (int i = LIST - 1; i > 0; --i) {
      if (list[i] > list[i - 1]) {
        const uint64_t t = list[i];
        list[i] = list[i - 1];
        list[i - 1] = t;
      }
    }
  }

  // Softmax sums (round 0 only) and top-list offers of keys below `upper`.
  template <int N, bool SUMS>
  __device__ __forceinline__ void consume(const float (&z)[N], const float (&y)[N], int64_t base, uint64_t upper) {
    if (SUMS) {
      float mz = kNegInf, my = kNegInf;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        mz = z[e] > mz ? z[e] : mz;  // NaN never raises the max (it poisons the sums below)
        if (REF) my = y[e] > my ? y[e] : my;
      }
      if (mz > st.m) softmax_rescale_z(st, mz);
      if (REF && my > st.my) softmax_rescale_y(st, my);
      const float bz = st.m > kNegInf ? st.m : 0.0f;  // no finite value yet: relative to 0
      const float by = st.my > kNegInf ? st.my : 0.0f;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        float d = z[e] - bz;
        d = d < kExpFloor ? kExpFloor : d;  // NaN stays NaN
        const float ex = d > kExpFloor ? __expf(d) : (d == kExpFloor ? 0.0f : d);
        st.s += ex;
        st.t += ex * d;
        if (REF) {
          float dy = y[e] - by;
          st.u += ex > 0.0f ? ex * dy : 0.0f;  // p > 0 meeting q = 0 gives −inf, as on the CPU
          dy = dy < kExpFloor ? kExpFloor : dy;
          st.sy += dy > kExpFloor ? __expf(dy) : (dy == kExpFloor ? 0.0f : dy);
        }
      }
    }
#pragma unroll
    for (int e = 0; e < N; ++e) {
      const uint64_t k = topk_key(z[e], base + e);
      if (k != 0 && k < upper) {
        ++offered;
        offer(k);
      }
    }
  }
};

// Shared memory of the stats kernel.
template <int LIST>
struct StatsShared {
  uint64_t keys[kStatsThreads * LIST];
  SoftmaxState<float> warp_states[kStatsThreads / 32];
  uint64_t bound;
  int exact_count;
};

template <class T, int LIST, bool REF, bool SUMS>
__device__ void scan_chunk(ThreadScan<LIST, REF>& ts, const T* z, const T* y, int64_t c0, int64_t c1, bool vec_ok,
                           uint64_t upper) {
  constexpr int N = Vec<T>::kN;
  int64_t i = c0;
  if (vec_ok) {
    const int64_t nvec = (c1 - c0) / N;
    constexpr int kUnroll = 4;
    int64_t v = threadIdx.x;
    for (; v + (kUnroll - 1) * kStatsThreads < nvec; v += kUnroll * kStatsThreads) {
      float zz[kUnroll][N], yy[kUnroll][N];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        Vec<T>::load(z + c0 + (v + u * kStatsThreads) * N, zz[u]);
        if (REF && SUMS) Vec<T>::load(y + c0 + (v + u * kStatsThreads) * N, yy[u]);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) ts.template consume<N, SUMS>(zz[u], yy[u], c0 + (v + u * kStatsThreads) * N, upper);
    }
    for (; v < nvec; v += kStatsThreads) {
      float zz[N], yy[N];
      Vec<T>::load(z + c0 + v * N, zz);
      if (REF && SUMS) Vec<T>::load(y + c0 + v * N, yy);
      ts.template consume<N, SUMS>(zz, yy, c0 + v * N, upper);
    }
    i = c0 + nvec * N;
  }
  for (int64_t j = i + threadIdx.x; j < c1; j += kStatsThreads) {
    float zz[1] = {ld1(z + j)};
    float yy[1] = {(REF && SUMS) ? ld1(y + j) : 0.0f};
    ts.template consume<1, SUMS>(zz, yy, j, upper);
  }
}

// grid: (chunks, rows). Writes the chunk's state and its best `cap` keys (descending, 0-padded).
template <class T, int LIST, bool REF>
__global__ void __launch_bounds__(kStatsThreads) logit_stats_chunk_kernel(const T* __restrict__ logits,
                                                                          const T* __restrict__ ref, int64_t vocab,
                                                                          int64_t row_stride, int64_t chunk_len, int cap,
                                                                          bool vec_ok, SoftmaxState<float>* states,
                                                                          uint64_t* tops) {
  __shared__ StatsShared<LIST> sh;
  const int64_t row = blockIdx.y;
  const int chunk = blockIdx.x, chunks = gridDim.x;
  const int64_t c0 = int64_t(chunk) * chunk_len;
  const int64_t c1 = c0 + chunk_len < vocab ? c0 + chunk_len : vocab;
  const T* z = logits + row * row_stride;
  const T* y = REF ? ref + row * row_stride : nullptr;
  uint64_t* out_top = tops + (row * chunks + chunk) * int64_t(cap);

  ThreadScan<LIST, REF> ts;
  ts.init();
  if (c0 < c1) scan_chunk<T, LIST, REF, true>(ts, z, y, c0, c1, vec_ok, ~uint64_t(0));

  // Softmax state: warp then block (fixed order).
  SoftmaxState<float> st = ts.st;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    SoftmaxState<float> other;
    other.m = __shfl_xor_sync(0xffffffffu, st.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, st.s, o);
    other.t = __shfl_xor_sync(0xffffffffu, st.t, o);
    other.my = __shfl_xor_sync(0xffffffffu, st.my, o);
    other.sy = __shfl_xor_sync(0xffffffffu, st.sy, o);
    other.u = __shfl_xor_sync(0xffffffffu, st.u, o);
    st = softmax_combine(st, other);
  }
  if ((threadIdx.x & 31) == 0) sh.warp_states[threadIdx.x >> 5] = st;

  if constexpr (LIST == 2) {
    // cap ≤ LIST: the union of the thread lists always holds the chunk's best cap entries (an
    // entry's thread holds fewer than cap better ones), so a reduction of (best, second) pairs
    // is exact: no sort, no rescan.
    uint64_t k1 = ts.list[0], k2 = ts.list[1];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const uint64_t o1 = __shfl_xor_sync(0xffffffffu, k1, o), o2 = __shfl_xor_sync(0xffffffffu, k2, o);
      if (k1 > o1) {
        k2 = k2 > o1 ? k2 : o1;
      } else {
        k2 = k1 > o2 ? k1 : o2;
        k1 = o1;
      }
    }
    if ((threadIdx.x & 31) == 0) {
      sh.keys[2 * (threadIdx.x >> 5)] = k1;
      sh.keys[2 * (threadIdx.x >> 5) + 1] = k2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint64_t b1 = 0, b2 = 0;
      for (int w = 0; w < kStatsThreads / 32; ++w) {
        const uint64_t w1 = sh.keys[2 * w], w2 = sh.keys[2 * w + 1];
        if (b1 > w1) {
          b2 = b2 > w1 ? b2 : w1;
        } else {
          b2 = b1 > w2 ? b1 : w2;
          b1 = w1;
        }
      }
      out_top[0] = b1;
      out_top[1] = b2;
      for (int j = 2; j < cap; ++j) out_top[j] = 0;
      SoftmaxState<float> total = sh.warp_states[0];
      for (int w = 1; w < kStatsThreads / 32; ++w) total = softmax_combine(total, sh.warp_states[w]);
      states[row * chunks + chunk] = total;
    }
  } else {
    // Top list: exact prefix rounds (see the file comment).
    int have = 0;  // entries written to out_top
    uint64_t upper = ~uint64_t(0);
    for (int round = 0;; ++round) {
      if (round > 0) {
        ts.init();
        if (c0 < c1) scan_chunk<T, LIST, REF, false>(ts, z, y, c0, c1, vec_ok, upper);
      }
#pragma unroll
      for (int i = 0; i < LIST; ++i) sh.keys[threadIdx.x * LIST + i] = ts.list[i];
      if (threadIdx.x == 0) sh.bound = 0;
      __syncthreads();
      // B = the largest LIST-th key of a thread that dropped entries.
      if (ts.offered > LIST) atomicMax(reinterpret_cast<unsigned long long*>(&sh.bound), ts.list[LIST - 1]);
      block_sort_desc(sh.keys, kStatsThreads * LIST);
      const uint64_t bound = sh.bound;
      // Entries ≥ bound are exact; count them (sorted: a prefix).
      if (threadIdx.x == 0) {
        int c = 0;
        const int need = cap - have;
        while (c < need && c < kStatsThreads * LIST && sh.keys[c] != 0 && sh.keys[c] >= bound) ++c;
        sh.exact_count = c;
      }
      __syncthreads();
      const int c = sh.exact_count;
      for (int j = threadIdx.x; j < c; j += kStatsThreads) out_top[have + j] = sh.keys[j];
      have += c;
      const bool done = have >= cap || bound == 0 || c == 0;
      if (done) break;
      upper = sh.keys[c - 1];  // everything at or above it is written; continue strictly below
      __syncthreads();
    }
    for (int j = have + threadIdx.x; j < cap; j += kStatsThreads) out_top[j] = 0;
    __syncthreads();
    if (threadIdx.x == 0) {
      SoftmaxState<float> total = sh.warp_states[0];
      for (int w = 1; w < kStatsThreads / 32; ++w) total = softmax_combine(total, sh.warp_states[w]);
      states[row * chunks + chunk] = total;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Logit statistics, pass 2: one block per row merges its chunks and writes the outputs.

constexpr int kMergeThreads = 256;
constexpr int kMergeKeys = 2048;  // chunks · cap ≤ this

template <class T>
__global__ void __launch_bounds__(kMergeThreads) logit_stats_merge_kernel(const T* __restrict__ logits,
                                                                          const T* __restrict__ ref, int64_t vocab,
                                                                          int64_t row_stride, const int32_t* targets,
                                                                          int K, int cap, int chunks,
                                                                          const SoftmaxState<float>* states,
                                                                          const uint64_t* tops, LogitStatsDeviceOut out) {
  __shared__ uint64_t keys[kMergeKeys];
  __shared__ TopKEntry best[kMaxLogitTopK];
  __shared__ int n_best;
  const int64_t row = blockIdx.x;
  const int n = chunks * cap, np = pow2_at_least(n);
  for (int i = threadIdx.x; i < np; i += kMergeThreads) keys[i] = i < n ? tops[row * n + i] : 0;
  block_sort_desc(keys, np);
  if (threadIdx.x == 0) {
    int c = 0;
    while (c < cap && c < np && keys[c] != 0) {
      best[c] = entry_of(keys[c]);
      ++c;
    }
    n_best = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    // f64 merge of the chunk states, in chunk order.
    SoftmaxState<double> st;
    for (int c = 0; c < chunks; ++c) {
      const SoftmaxState<float> f = states[row * chunks + c];
      SoftmaxState<double> d;
      d.m = f.m;
      d.s = f.s;
      d.t = f.t;
      d.my = f.my;
      d.sy = f.sy;
      d.u = f.u;
      st = softmax_combine(st, d);
    }
    const T* z = logits + row * row_stride;
    const T* y = ref ? ref + row * row_stride : nullptr;
    const int32_t target = targets ? targets[row] : -1;
    const bool has_target = target >= 0 && target < vocab;
    const float zt = has_target ? ld1(z + target) : 0.0f;
    const float yt = (has_target && y) ? ld1(y + target) : 0.0f;
    const LogitRowStats s = logit_stats_finalize(st, best, n_best, has_target, zt, y != nullptr, yt);
    out.max_logit[row] = s.max_logit;
    out.logsumexp[row] = s.logsumexp;
    out.entropy[row] = s.entropy;
    out.margin[row] = s.margin;
    if (out.chosen_logprob) out.chosen_logprob[row] = s.chosen_logprob;
    if (y) {
      out.k1[row] = s.k1;
      out.k2[row] = s.k2;
      out.k3[row] = s.k3;
      out.kl_exact[row] = s.kl_exact;
    }
  }
  for (int j = threadIdx.x; j < K; j += kMergeThreads) {
    const bool real = j < n_best;
    out.topk_ids[row * K + j] = real ? best[j].id : -1;
    out.topk_logits[row * K + j] = real ? best[j].value : kNegInf;
  }
}

struct StatsPlan {
  int cap, list, chunks;
  int64_t chunk_len;
};

// Smallest chunk (elements) worth a block: each block ends with a sort of its threads' lists, so
// top-K blocks want more data. AUTODIDACT_STATS_MIN_CHUNK overrides (benchmark sweeps).
int64_t min_chunk(int list) {
  const char* env = std::getenv("AUTODIDACT_STATS_MIN_CHUNK");
  int64_t v = env ? std::strtoll(env, nullptr, 10) : 0;
  if (v <= 0) v = list == 2 ? 4096 : 16384;
  return ceil_div(v, kChunkAlign) * kChunkAlign;
}

StatsPlan plan_stats(int64_t rows, int64_t vocab, int K) {
  StatsPlan p;
  p.cap = K > 2 ? K : 2;
  p.list = p.cap <= 2 ? 2 : 8;
  const int64_t max_chunks_keys = kMergeKeys / p.cap;
  const int64_t max_chunks_len = ceil_div(vocab, min_chunk(p.list));
  const int64_t want = ceil_div(int64_t(detail::sm_count()) * 8, rows > 0 ? rows : 1);
  int64_t chunks = want;
  if (chunks > max_chunks_keys) chunks = max_chunks_keys;
  if (chunks > max_chunks_len) chunks = max_chunks_len;
  if (chunks < 1) chunks = 1;
  p.chunk_len = ceil_div(ceil_div(vocab, chunks), kChunkAlign) * kChunkAlign;
  p.chunks = static_cast<int>(ceil_div(vocab, p.chunk_len));
  if (p.chunks < 1) p.chunks = 1;
  return p;
}

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

size_t stats_ws_bytes(int64_t rows, const StatsPlan& p) {
  const size_t parts = size_t(rows) * size_t(p.chunks);
  return align256(parts * sizeof(SoftmaxState<float>)) + align256(parts * size_t(p.cap) * sizeof(uint64_t));
}

template <class T, int LIST, bool REF>
cudaError_t launch_stats(const LogitStatsArgs& a, const StatsPlan& p, bool vec_ok, SoftmaxState<float>* states,
                         uint64_t* tops, cudaStream_t stream) {
  dim3 grid(p.chunks, static_cast<unsigned>(a.rows));
  logit_stats_chunk_kernel<T, LIST, REF><<<grid, kStatsThreads, 0, stream>>>(
      static_cast<const T*>(a.logits), static_cast<const T*>(a.ref), a.vocab, a.row_stride, p.chunk_len, p.cap, vec_ok,
      states, tops);
  return detail::launched("logit_stats_chunk_kernel");
}

template <class T>
cudaError_t run_stats(const LogitStatsArgs& a, const LogitStatsDeviceOut& out, const StatsPlan& p,
                      SoftmaxState<float>* states, uint64_t* tops, cudaStream_t stream) {
  const bool vec_ok = detail::aligned16(a.logits) && (!a.ref || detail::aligned16(a.ref)) &&
                      (a.row_stride * int64_t(sizeof(T))) % 16 == 0;
  const bool ref = a.ref != nullptr;
  cudaError_t err;
  if (p.list == 2) {
    err = ref ? launch_stats<T, 2, true>(a, p, vec_ok, states, tops, stream)
              : launch_stats<T, 2, false>(a, p, vec_ok, states, tops, stream);
  } else {
    err = ref ? launch_stats<T, 8, true>(a, p, vec_ok, states, tops, stream)
              : launch_stats<T, 8, false>(a, p, vec_ok, states, tops, stream);
  }
  if (err != cudaSuccess) return err;
  logit_stats_merge_kernel<T><<<static_cast<unsigned>(a.rows), kMergeThreads, 0, stream>>>(
      static_cast<const T*>(a.logits), static_cast<const T*>(a.ref), a.vocab, a.row_stride, a.targets, a.K, p.cap,
      p.chunks, states, tops, out);
  return detail::launched("logit_stats_merge_kernel");
}

}  // namespace

size_t logit_stats_workspace_bytes(int64_t rows, int64_t vocab, int K) {
  if (rows <= 0 || vocab <= 0) return 256;
  return stats_ws_bytes(rows, plan_stats(rows, vocab, K));
}

cudaError_t logit_stats(const LogitStatsArgs& a, const LogitStatsDeviceOut& out, void* workspace, size_t workspace_bytes,
                        cudaStream_t stream) {
  if (a.rows < 0 || a.vocab < 0) return invalid("logit_stats: negative rows or vocab");
  if (a.rows == 0 || a.vocab == 0) return cudaSuccess;
  if (!a.logits) return invalid("logit_stats: logits is null");
  if (a.row_stride < a.vocab) return invalid("logit_stats: row_stride < vocab");
  if (a.K < 0 || a.K > kMaxLogitTopK) return invalid("logit_stats: K must be in [0, 64]");
  if (a.vocab >= INT32_MAX) return invalid("logit_stats: vocab too large");
  if (a.rows > 65535) return invalid("logit_stats: at most 65535 rows per call");
  if (!out.max_logit || !out.logsumexp || !out.entropy || !out.margin) return invalid("logit_stats: null output");
  if (a.K > 0 && (!out.topk_ids || !out.topk_logits)) return invalid("logit_stats: K > 0 needs topk outputs");
  if (a.ref && (!out.k1 || !out.k2 || !out.k3 || !out.kl_exact)) return invalid("logit_stats: ref needs k1..kl_exact");
  const StatsPlan p = plan_stats(a.rows, a.vocab, a.K);
  const size_t need = stats_ws_bytes(a.rows, p);
  if (!workspace || workspace_bytes < need || (reinterpret_cast<uintptr_t>(workspace) & 255u) != 0)
    return invalid("logit_stats: workspace missing, unaligned or smaller than " + std::to_string(need) + " bytes");
  const size_t parts = size_t(a.rows) * size_t(p.chunks);
  auto* states = static_cast<SoftmaxState<float>*>(workspace);
  auto* tops = reinterpret_cast<uint64_t*>(static_cast<char*>(workspace) + align256(parts * sizeof(SoftmaxState<float>)));
  return a.dtype == DType::F32 ? run_stats<float>(a, out, p, states, tops, stream)
                               : run_stats<__nv_bfloat16>(a, out, p, states, tops, stream);
}

// =============================================================================================
// Sampling: one block per row (grid-stride over rows), the row's penalized/scaled logits w in the
// workspace, then block-wide selections over w:
//   - radix select (4 × 8-bit passes over the orderable bits) for the top-k boundary value and,
//     weighted by fixed-point masses, for the top-p boundary mass;
//   - ties at a boundary resolved toward lower ids by locating the j-th tied id;
//   - the inverse CDF by tile sums (one warp per 1024-id tile), then a scan inside one tile.
// Masses m_i = e^{w_i − max w} are summed as round(m_i · 2^40) in 64-bit integers: exact,
// order-independent, so the same inputs give the same token on every run.

namespace {

constexpr int kSampleThreads = 512;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kTile = 1024;
constexpr int kMaxTiles = 4096;  // vocab ≤ 4M
constexpr double kFx = 1099511627776.0;  // 2^40

struct SampleShared {
  unsigned long long tile_sum[kMaxTiles];
  unsigned long long hist[256];
  unsigned long long red[32];
  float redf[32];
  unsigned long long found_prefix;
  int64_t found_id;
  uint32_t found_bin;
  unsigned long long found_above;
};

__device__ __forceinline__ unsigned long long mass_fx(float m) { return __double2ull_rn(double(m) * kFx); }

// Row view: which tokens are kept, and their masses.
struct RowSel {
  const float* w;
  int64_t V;
  float max_w;
  bool use_k;
  uint32_t k_key;   // kept_k: orderable(w) > k_key, or == k_key with id ≤ k_id
  int64_t k_id;
  bool use_p;
  uint32_t p_bits;  // kept_p: mass bits > p_bits, or == p_bits with id ≤ p_id
  int64_t p_id;
  float min_p;

  __device__ __forceinline__ float mass(int64_t i) const {
    const float x = w[i];
    return x == kNegInf ? 0.0f : expf(x - max_w);
  }
  __device__ __forceinline__ bool kept_k(int64_t i) const {
    if (!use_k) return true;
    const float x = w[i];
    if (x != x) return false;
    const uint32_t o = orderable(x);
    return o > k_key || (o == k_key && i <= k_id);
  }
  __device__ __forceinline__ bool kept_p(int64_t i, float m) const {
    if (!use_p) return true;
    const uint32_t b = __float_as_uint(m);
    return b > p_bits || (b == p_bits && i <= p_id);
  }
  // The final weight of token i (fixed point), 0 when not kept.
  __device__ __forceinline__ unsigned long long weight(int64_t i) const {
    if (!kept_k(i)) return 0;
    const float m = mass(i);
    if (!(m > 0.0f) || !kept_p(i, m)) return 0;
    if (min_p > 0.0f && !min_p_keeps(m, 1.0f, min_p)) return 0;
    return mass_fx(m);
  }
};

// Tile sums of f(i) (one warp per tile), then the first id whose running sum exceeds `target`
// (ascending ids). Returns −1 when the total does not exceed target. All threads call it; every
// thread gets the result. *total (optional) receives the sum over the row.
template <class F>
__device__ int64_t locate_first_above(SampleShared& sh, int64_t V, unsigned long long target, F f,
                                      unsigned long long* total_out) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tiles = static_cast<int>((V + kTile - 1) / kTile);
  for (int t = warp; t < tiles; t += kSampleWarps) {
    unsigned long long s = 0;
    const int64_t base = int64_t(t) * kTile;
    for (int j = lane; j < kTile; j += 32) {
      const int64_t i = base + j;
      if (i < V) s += f(i);
    }
    s = detail::warp_sum(s);
    if (lane == 0) sh.tile_sum[t] = s;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long cum = 0;
    int t = 0;
    for (; t < tiles; ++t) {
      if (cum + sh.tile_sum[t] > target) break;
      cum += sh.tile_sum[t];
    }
    unsigned long long total = cum;
    for (int u = t; u < tiles; ++u) total += sh.tile_sum[u];
    sh.found_prefix = cum;
    sh.found_bin = static_cast<uint32_t>(t);
    sh.found_above = total;
  }
  __syncthreads();
  const int t = static_cast<int>(sh.found_bin);
  const unsigned long long total = sh.found_above;
  if (total_out) *total_out = total;
  int64_t found = -1;
  if (t < tiles && warp == 0) {
    unsigned long long cum = sh.found_prefix;
    const int64_t base = int64_t(t) * kTile;
    for (int j0 = 0; j0 < kTile && found < 0; j0 += 32) {
      const int64_t i = base + j0 + lane;
      unsigned long long v = i < V ? f(i) : 0;
      // inclusive warp scan
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long n = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += n;
      }
      const unsigned mask = __ballot_sync(0xffffffffu, cum + v > target);
      if (mask) {
        found = base + j0 + (__ffs(mask) - 1);
      } else {
        cum += __shfl_sync(0xffffffffu, v, 31);
      }
    }
    if (lane == 0) sh.found_id = found;
  }
  __syncthreads();
  found = (t < tiles) ? sh.found_id : -1;
  __syncthreads();
  return found;
}

// Radix select over 32-bit keys key(i) (elements with include(i)), weighted by wt(i): the key κ
// with S(> κ) < need ≤ S(≥ κ), where S sums weights. *above receives S(> κ). need ≥ 1 and
// need ≤ S(all) are the caller's to ensure.
template <class Key, class Wt>
__device__ uint32_t radix_select_desc(SampleShared& sh, int64_t V, unsigned long long need, Key key, Wt wt,
                                      unsigned long long* above_out) {
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSampleThreads) sh.hist[b] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) {
      const unsigned long long wgt = wt(i);
      if (wgt == 0) continue;
      const uint32_t k = key(i);
      if ((k & mask) != prefix) continue;
      atomicAdd(&sh.hist[(k >> shift) & 255u], wgt);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long cum = above;
      int b = 255;
      for (; b > 0; --b) {
        if (cum + sh.hist[b] >= need) break;
        cum += sh.hist[b];
      }
      sh.found_bin = static_cast<uint32_t>(b);
      sh.found_above = cum;
    }
    __syncthreads();
    prefix |= sh.found_bin << shift;
    mask |= 255u << shift;
    above = sh.found_above;
    __syncthreads();
  }
  *above_out = above;
  return prefix;
}

__device__ float block_max(float x, SampleShared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, x, o);
    x = other > x ? other : x;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh.redf[threadIdx.x >> 5] = x;
  __syncthreads();
  float m = sh.redf[0];
  for (int w = 1; w < kSampleWarps; ++w) m = sh.redf[w] > m ? sh.redf[w] : m;
  return m;
}

__device__ unsigned long long block_max_u64(unsigned long long x, SampleShared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, x, o);
    x = other > x ? other : x;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = x;
  __syncthreads();
  unsigned long long m = sh.red[0];
  for (int w = 1; w < kSampleWarps; ++w) m = sh.red[w] > m ? sh.red[w] : m;
  return m;
}

template <class T>
__global__ void __launch_bounds__(kSampleThreads) sample_kernel(SampleArgs a, float* ws_w, int32_t* ws_marks) {
  extern __shared__ __align__(16) unsigned char sample_smem[];
  SampleShared& sh = *reinterpret_cast<SampleShared*>(sample_smem);
  const int64_t V = a.vocab;
  float* w = ws_w + int64_t(blockIdx.x) * V;
  int32_t* marks = ws_marks + int64_t(blockIdx.x) * V;

  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* z = static_cast<const T*>(a.logits) + row * a.row_stride;
    const SamplingParams p = a.params[row];
    if (V <= 1) {
      if (threadIdx.x == 0) a.out_tokens[row] = 0;
      continue;
    }
    // Steps 1–3: w = z / T (z when greedy), then each penalized id rewritten once from z.
    const bool greedy = sampling_is_greedy(p);
    for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) {
      const float x = ld1(z + i);
      w[i] = greedy ? x : x / p.temperature;
    }
    const int64_t h0 = (a.history && p.repetition_penalty != 1.0f) ? a.history_offsets[row] : 0;
    const int64_t h1 = (a.history && p.repetition_penalty != 1.0f) ? a.history_offsets[row + 1] : 0;
    const bool pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    const int64_t g0 = (a.generated && pf) ? a.generated_offsets[row] : 0;
    const int64_t g1 = (a.generated && pf) ? a.generated_offsets[row + 1] : 0;
    if (h1 > h0 || g1 > g0) {
      auto valid = [V](int32_t id) { return id >= 0 && id < V; };
      for (int64_t j = h0 + threadIdx.x; j < h1; j += kSampleThreads)
        if (valid(a.history[j])) marks[a.history[j]] = 0;
      for (int64_t j = g0 + threadIdx.x; j < g1; j += kSampleThreads)
        if (valid(a.generated[j])) marks[a.generated[j]] = 0;
      __syncthreads();
      for (int64_t j = h0 + threadIdx.x; j < h1; j += kSampleThreads)
        if (valid(a.history[j])) atomicOr(&marks[a.history[j]], 1);
      for (int64_t j = g0 + threadIdx.x; j < g1; j += kSampleThreads)
        if (valid(a.generated[j])) atomicAdd(&marks[a.generated[j]], 2);
      __syncthreads();
      auto rewrite = [&](int32_t id) {
        if (!valid(id)) return;
        const int32_t m = atomicExch(&marks[id], -1);
        if (m < 0) return;
        w[id] = penalized_logit(ld1(z + id), p, (m & 1) != 0, m >> 1);
      };
      for (int64_t j = h0 + threadIdx.x; j < h1; j += kSampleThreads) rewrite(a.history[j]);
      for (int64_t j = g0 + threadIdx.x; j < g1; j += kSampleThreads) rewrite(a.generated[j]);
    }
    __syncthreads();

    float mx = kNegInf;
    for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) mx = w[i] > mx ? w[i] : mx;
    const float max_w = block_max(mx, sh);

    if (greedy || !(max_w > kNegInf)) {
      // argmax, lowest id on ties; 0 for a row of NaN.
      unsigned long long best = 0;
      for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) {
        const unsigned long long k = topk_key(w[i], i);
        best = k > best ? k : best;
      }
      best = block_max_u64(best, sh);
      if (threadIdx.x == 0) a.out_tokens[row] = best == 0 ? 0 : entry_of(best).id;
      __syncthreads();
      continue;
    }

    const float u = sampling_uniform(p, a.positions[row]);
    RowSel sel{w, V, max_w, false, 0, -1, false, 0, -1, p.min_p};

    // Step 4: top-k boundary (k-th largest w; ties toward lower ids).
    if (p.top_k > 0 && p.top_k < V) {
      unsigned long long greater = 0;
      const uint32_t kk = radix_select_desc(
          sh, V, static_cast<unsigned long long>(p.top_k),
          [&](int64_t i) { return orderable(w[i]); },
          [&](int64_t i) { return w[i] != w[i] ? 0ull : 1ull; }, &greater);
      const unsigned long long nth = static_cast<unsigned long long>(p.top_k) - greater - 1;  // 0-based among ties
      const int64_t id = locate_first_above(
          sh, V, nth, [&](int64_t i) { return (w[i] == w[i] && orderable(w[i]) == kk) ? 1ull : 0ull; }, nullptr);
      sel.use_k = true;
      sel.k_key = kk;
      sel.k_id = id >= 0 ? id : V;
    }

    // Step 6: top-p boundary over the kept masses.
    if (p.top_p < 1.0f) {
      unsigned long long total = 0;
      {
        unsigned long long s = 0;
        for (int64_t i = threadIdx.x; i < V; i += kSampleThreads)
          if (sel.kept_k(i)) s += mass_fx(sel.mass(i));
        total = detail::block_sum<unsigned long long>(s, sh.red);
      }
      double need_d = static_cast<double>(p.top_p) * static_cast<double>(total);
      unsigned long long need = need_d > 0 ? static_cast<unsigned long long>(ceil(need_d)) : 1ull;
      if (need > total) need = total;
      if (need >= 1) {
        unsigned long long above = 0;
        const uint32_t pb = radix_select_desc(
            sh, V, need, [&](int64_t i) { return __float_as_uint(sel.mass(i)); },
            [&](int64_t i) { return sel.kept_k(i) ? mass_fx(sel.mass(i)) : 0ull; }, &above);
        const unsigned long long each = mass_fx(__uint_as_float(pb));
        // Tied masses enter in ascending id order until the prefix reaches need.
        unsigned long long j = each > 0 ? (need - above + each - 1) / each : 1;
        if (j < 1) j = 1;
        const int64_t id = locate_first_above(
            sh, V, j - 1,
            [&](int64_t i) { return (sel.kept_k(i) && __float_as_uint(sel.mass(i)) == pb) ? 1ull : 0ull; }, nullptr);
        sel.use_p = true;
        sel.p_bits = pb;
        sel.p_id = id >= 0 ? id : V;
      }
    }

    // Steps 7–8: min-p, then the inverse CDF in ascending id order.
    unsigned long long total = 0;
    {
      unsigned long long s = 0;
      for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) s += sel.weight(i);
      total = detail::block_sum<unsigned long long>(s, sh.red);
    }
    int32_t token = 0;
    if (total > 0) {
      const unsigned long long target =
          static_cast<unsigned long long>(floor(static_cast<double>(u) * static_cast<double>(total)));
      const int64_t id = locate_first_above(sh, V, target < total ? target : total - 1,
                                            [&](int64_t i) { return sel.weight(i); }, nullptr);
      token = static_cast<int32_t>(id >= 0 ? id : 0);
    } else {
      unsigned long long best = 0;  // nothing kept (cannot happen for finite rows): the argmax
      for (int64_t i = threadIdx.x; i < V; i += kSampleThreads) {
        const unsigned long long k = topk_key(w[i], i);
        best = k > best ? k : best;
      }
      best = block_max_u64(best, sh);
      token = best == 0 ? 0 : entry_of(best).id;
    }
    if (threadIdx.x == 0) a.out_tokens[row] = token;
    __syncthreads();
  }
}

int sample_blocks(int64_t rows) {
  const int64_t cap = int64_t(detail::sm_count()) * 2;
  return static_cast<int>(rows < cap ? rows : cap);
}

}  // namespace

size_t sample_workspace_bytes(int64_t rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 256;
  const size_t per = size_t(vocab) * (sizeof(float) + sizeof(int32_t));
  return size_t(sample_blocks(rows)) * per + 256;
}

cudaError_t sample_tokens(const SampleArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (a.rows < 0 || a.vocab < 0) return invalid("sample_tokens: negative rows or vocab");
  if (a.rows == 0) return cudaSuccess;
  if (!a.logits || !a.params || !a.positions || !a.out_tokens) return invalid("sample_tokens: null argument");
  if (a.row_stride < a.vocab) return invalid("sample_tokens: row_stride < vocab");
  if (a.vocab > int64_t(kMaxTiles) * kTile) return invalid("sample_tokens: vocab above 4,194,304");
  if ((a.history && !a.history_offsets) || (a.generated && !a.generated_offsets))
    return invalid("sample_tokens: ids without offsets");
  const size_t need = sample_workspace_bytes(a.rows, a.vocab);
  if (!workspace || workspace_bytes < need || (reinterpret_cast<uintptr_t>(workspace) & 255u) != 0)
    return invalid("sample_tokens: workspace missing, unaligned or smaller than " + std::to_string(need) + " bytes");
  const int blocks = sample_blocks(a.rows);
  float* ws_w = static_cast<float*>(workspace);
  int32_t* ws_marks = reinterpret_cast<int32_t*>(ws_w + int64_t(blocks) * a.vocab);
  static_assert(sizeof(SampleShared) <= 48 * 1024, "sample_kernel's shared memory must fit the default 48 KiB");
  const size_t smem = sizeof(SampleShared);
  auto kernel = a.dtype == DType::F32 ? sample_kernel<float> : sample_kernel<__nv_bfloat16>;
  kernel<<<blocks, kSampleThreads, smem, stream>>>(a, ws_w, ws_marks);
  return detail::launched("sample_kernel");
}

// =============================================================================================
// LM-head loss backward: model::Transformer::lm_head_backward's per-row math.

namespace {

constexpr int kLossThreads = 512;

template <class TI, class TO>
__global__ void __launch_bounds__(kLossThreads) lm_head_loss_backward_kernel(LossBackwardArgs a) {
  __shared__ SoftmaxState<float> warp_states[kLossThreads / 32];
  __shared__ float row_m, row_logs, row_h;
  const int64_t row = blockIdx.x;
  const int64_t V = a.vocab;
  const TI* z = static_cast<const TI*>(a.logits) + row * a.row_stride;
  TO* dz = static_cast<TO*>(a.dlogits) + row * a.row_stride;

  // Pass 1: m, s = Σ e^{z−m}, t = Σ e^{z−m}(z−m) (online, per thread; merged with the header's combine).
  SoftmaxState<float> st;
  for (int64_t i = threadIdx.x; i < V; i += kLossThreads) {
    const float x = ld_rw(z + i);
    if (x > st.m) softmax_rescale_z(st, x);
    const float base = st.m > kNegInf ? st.m : 0.0f;
    float d = x - base;
    d = d < kExpFloor ? kExpFloor : d;
    const float e = d > kExpFloor ? expf(d) : (d == kExpFloor ? 0.0f : d);
    st.s += e;
    st.t += e * d;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    SoftmaxState<float> other;
    other.m = __shfl_xor_sync(0xffffffffu, st.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, st.s, o);
    other.t = __shfl_xor_sync(0xffffffffu, st.t, o);
    st = softmax_combine(st, other);
  }
  if ((threadIdx.x & 31) == 0) warp_states[threadIdx.x >> 5] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    SoftmaxState<double> tot;
    for (int w = 0; w < kLossThreads / 32; ++w) {
      SoftmaxState<double> d;
      d.m = warp_states[w].m;
      d.s = warp_states[w].s;
      d.t = warp_states[w].t;
      tot = softmax_combine(tot, d);
    }
    const double logs = tot.s > 0 ? log(tot.s) : 0.0;
    row_m = tot.m;
    row_logs = static_cast<float>(logs);
    row_h = static_cast<float>(softmax_entropy(tot));
    const int32_t target = a.targets ? a.targets[row] : -1;
    const bool has_target = target >= 0 && target < V;
    if (a.lse) a.lse[row] = static_cast<float>(softmax_lse(tot));
    if (a.entropy) a.entropy[row] = row_h;
    if (a.target_logprob)
      a.target_logprob[row] = has_target ? static_cast<float>(double(ld_rw(z + target)) - softmax_lse(tot)) : NAN;
  }
  __syncthreads();
  // Pass 2: dz = −a·p − b·p(log p + H), + a at the target.
  const float m = row_m, logs = row_logs, H = row_h;
  const float ai = a.a[row], bi = a.b ? a.b[row] : 0.0f;
  const int32_t target = a.targets ? a.targets[row] : -1;
  for (int64_t i = threadIdx.x; i < V; i += kLossThreads) {
    const float logp = (ld_rw(z + i) - m) - logs;
    const float p = expf(logp);
    float g = p > 0.0f ? -ai * p - bi * p * (logp + H) : 0.0f;
    if (i == target) g += ai;
    detail::store_as(dz + i, g);
  }
}

}  // namespace

cudaError_t lm_head_loss_backward(const LossBackwardArgs& a, cudaStream_t stream) {
  if (a.rows < 0 || a.vocab < 0) return invalid("lm_head_loss_backward: negative rows or vocab");
  if (a.rows == 0 || a.vocab == 0) return cudaSuccess;
  if (!a.logits || !a.dlogits || !a.a) return invalid("lm_head_loss_backward: null logits, dlogits or a");
  if (a.row_stride < a.vocab) return invalid("lm_head_loss_backward: row_stride < vocab");
  if (a.rows > INT32_MAX) return invalid("lm_head_loss_backward: too many rows");
  if (a.logits == a.dlogits && a.logits_dtype != a.dlogits_dtype)
    return invalid("lm_head_loss_backward: in place needs the same dtype");
  const unsigned grid = static_cast<unsigned>(a.rows);
  const bool in_f32 = a.logits_dtype == DType::F32, out_f32 = a.dlogits_dtype == DType::F32;
  if (in_f32 && out_f32) {
    lm_head_loss_backward_kernel<float, float><<<grid, kLossThreads, 0, stream>>>(a);
  } else if (in_f32) {
    lm_head_loss_backward_kernel<float, __nv_bfloat16><<<grid, kLossThreads, 0, stream>>>(a);
  } else if (out_f32) {
    lm_head_loss_backward_kernel<__nv_bfloat16, float><<<grid, kLossThreads, 0, stream>>>(a);
  } else {
    lm_head_loss_backward_kernel<__nv_bfloat16, __nv_bfloat16><<<grid, kLossThreads, 0, stream>>>(a);
  }
  return detail::launched("lm_head_loss_backward_kernel");
}

}  // namespace ad::cuda
