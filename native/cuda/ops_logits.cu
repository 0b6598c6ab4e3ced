// Per-row work over logits rows (ops.h): the one-pass statistics, sampling, and the chunked
// LM-head loss backward. The arithmetic is kernels/logit_stats.h's and kernels/sampling.h's.
//
// Statistics: a row is split into chunks, one block each (enough blocks to fill the GPU even for
// a few rows). A block streams its chunk once with 16-byte loads. Each thread keeps the mergeable
// softmax state (SoftmaxState<float>) and its running max; per element that is a max, one __expf
// and three adds, so the kernel stays at the memory's speed. Top-K never sorts the chunk:
//   - a block-wide threshold τ is the cap-th largest of the threads' running maxima (cap real
//     elements reach it, so every element of the chunk's top-cap does too). It only rises; it is
//     recomputed after iterations 1, 2, 4, 8, ... of the stream;
//   - an element is offered only when its thread's group of values reaches τ (one compare per
//     group), and then appended to a shared candidate buffer (a few hundred per chunk);
//   - at the end the candidates at or above the final τ are sorted (bitonic, shared memory). When
//     the buffer overflowed (heavy ties at the top, sorted rows) the block rescans its chunk, and
//     as a last resort radix-selects the cap-th key (exact in every case, slow only there).
// K = 0 needs only the two largest values (the margin): three min/max per element, no keys.
// A second kernel, one block per row, merges the chunks: states in f64, rescaled to the row max in
// parallel; top lists by rank among the keys that can still make the row's top-cap.
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
#include "kernels/sampling_split.h"

namespace ad::cuda {

using detail::ceil_div;
using detail::invalid;

namespace {

constexpr unsigned kFull = 0xffffffffu;

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

// Below every key of a value ≥ v (and above every key of a smaller value).
__device__ __forceinline__ uint64_t key_floor(float v) { return static_cast<uint64_t>(orderable(v)) << 32; }

__device__ __forceinline__ TopKEntry entry_of(uint64_t key) {
  return TopKEntry{from_orderable(static_cast<uint32_t>(key >> 32)),
                   static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key))};
}

// NaN when either is NaN (PTX min.NaN, sm_80+): a NaN value must never become the runner-up.
__device__ __forceinline__ float min_nan(float a, float b) {
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
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

__host__ __device__ __forceinline__ int pow2_at_least(int n) {
  int p = 1;
  while (p < n) p <<= 1;
  return p;
}

// Pads keys[n, pow2) with 0 and sorts; all threads call it.
__device__ void pad_and_sort_desc(uint64_t* keys, int n) {
  const int p = pow2_at_least(n > 0 ? n : 1);
  __syncthreads();
  for (int i = n + threadIdx.x; i < p; i += blockDim.x) keys[i] = 0;
  block_sort_desc(keys, p);
}

// ---------------------------------------------------------------------------------------------
// Loads: 16 bytes (4 f32 or 8 bf16) as raw bits, element e unpacked on use (fewer registers).

template <class T>
struct Vec;
template <>
struct Vec<float> {
  static constexpr int kN = 4;
  static constexpr uint32_t kNegInfWord = 0xFF800000u;
  __device__ __forceinline__ static float get(const uint4& r, int e) {
    return __uint_as_float(e == 0 ? r.x : e == 1 ? r.y : e == 2 ? r.z : r.w);
  }
  __device__ __forceinline__ static void put(uint32_t (&w)[4], int e, const float* p) { w[e] = __float_as_uint(__ldg(p)); }
};
template <>
struct Vec<__nv_bfloat16> {
  static constexpr int kN = 8;
  static constexpr uint32_t kNegInfWord = 0xFF80FF80u;
  __device__ __forceinline__ static float get(const uint4& r, int e) {
    const int q = e >> 1;
    const uint32_t w = q == 0 ? r.x : q == 1 ? r.y : q == 2 ? r.z : r.w;
    return __uint_as_float((e & 1) ? (w & 0xFFFF0000u) : (w << 16));  // element 2q is the low half
  }
  __device__ __forceinline__ static void put(uint32_t (&w)[4], int e, const __nv_bfloat16* p) {
    const uint32_t h = __ldg(reinterpret_cast<const unsigned short*>(p));
    uint32_t& d = w[e >> 1];
    d = (e & 1) ? ((d & 0x0000FFFFu) | (h << 16)) : ((d & 0xFFFF0000u) | h);
  }
};

// Elements [e0, e0 + N) of p, those at or past `end` read as −inf. vec_ok: p is 16-byte aligned
// and e0 a multiple of N.
template <class T>
__device__ __noinline__ uint4 load_vec_slow(const T* p, int64_t e0, int64_t end) {
  uint32_t w[4] = {Vec<T>::kNegInfWord, Vec<T>::kNegInfWord, Vec<T>::kNegInfWord, Vec<T>::kNegInfWord};
#pragma unroll
  for (int e = 0; e < Vec<T>::kN; ++e)
    if (e0 + e < end) Vec<T>::put(w, e, p + e0 + e);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

template <class T>
__device__ __forceinline__ uint4 load_vec(const T* p, int64_t e0, int64_t end, bool vec_ok) {
  if (vec_ok && e0 + Vec<T>::kN <= end) return __ldg(reinterpret_cast<const uint4*>(p + e0));
  return load_vec_slow(p, e0, end);
}

__device__ __forceinline__ float ld1(const float* p) { return __ldg(p); }
__device__ __forceinline__ float ld1(const __nv_bfloat16* p) { return __bfloat162float(*p); }
// Coherent loads, for rows the same kernel overwrites (the in-place loss backward): ld.global.nc
// (__ldg) is only defined for data that stays read-only while the kernel runs.
__device__ __forceinline__ float ld_rw(const float* p) { return *p; }
__device__ __forceinline__ float ld_rw(const __nv_bfloat16* p) { return __bfloat162float(*p); }

// ---------------------------------------------------------------------------------------------
// Logit statistics, pass 1: one block per (chunk, row)

constexpr int kStatsThreads = 256;
constexpr int kStatsWarps = kStatsThreads / 32;
constexpr int kStatsUnroll = 4;   // 16-byte vectors per thread per iteration (per row read)
constexpr int kCandCap = 1024;    // candidate keys a block holds
constexpr int kMaxChunks = 1024;  // gridDim.x bound (K = 0)
constexpr int kMergeThreads = 256;
constexpr int kMergeKeys = 2048;  // chunks · cap ≤ this (K > 0)
constexpr float kExpFloor = -88.0f;

struct StatsShared {
  SoftmaxState<float> warp_states[kStatsWarps];
  float2 warp_top2[kStatsWarps];
  float sorted[kStatsThreads];  // thread maxima, sorted within each warp
  unsigned hist[256];
  uint64_t cand[kCandCap];
  uint64_t sel[kCandCap];
  uint64_t prefix;
  float tau;
  int count, nsel, need, bin;
};

struct ChunkArgs {
  const void* logits;
  const void* ref;
  int64_t vocab, row_stride, chunk_len;
  int cap;
  bool vec_ok;
  SoftmaxState<float>* states;
  void* tops;  // K > 0: uint64_t [parts·cap] keys; K = 0: float2 [parts] (largest, runner-up)
};

// Descending bitonic sort of one value per lane (all 32 lanes active).
__device__ __forceinline__ float warp_sort_desc(float v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int k = 2; k <= 32; k <<= 1) {
#pragma unroll
    for (int j = k >> 1; j > 0; j >>= 1) {
      const float o = __shfl_xor_sync(kFull, v, j);
      const bool keep_max = ((lane & j) == 0) == ((lane & k) == 0);
      v = keep_max ? fmaxf(v, o) : fminf(v, o);
    }
  }
  return v;
}

// The value of rank r (0 = largest) among the block's values v (one per thread, never NaN); ties
// ordered by warp, then by position. All threads call it; it synchronizes.
__device__ float block_rank_value(StatsShared& sh, float v, int r) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sort_desc(v);
  __syncthreads();  // the previous call's readers are done with sorted/tau
  sh.sorted[threadIdx.x] = v;
  __syncthreads();
  int rank = lane;
  for (int w = 0; w < kStatsWarps; ++w) {
    if (w == warp) continue;
    const float* s = sh.sorted + w * 32;
    int lo = 0, hi = 32;  // entries ranking before v form a prefix of the sorted warp
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      const bool before = w < warp ? s[mid] >= v : s[mid] > v;
      if (before) lo = mid + 1;
      else hi = mid;
    }
    rank += lo;
  }
  if (rank == r) sh.tau = v;
  __syncthreads();
  return sh.tau;
}

// Max of one vector's values (NaN never counts) starting from `run`; TOP2 also folds the
// runner-up m2 (a NaN never becomes it: min.NaN turns it into NaN, which fmaxf drops).
template <class T, bool TOP2>
__device__ __forceinline__ float vec_max(const uint4& r, float run, float& m2) {
#pragma unroll
  for (int e = 0; e < Vec<T>::kN; ++e) {
    const float x = Vec<T>::get(r, e);
    if (TOP2) m2 = fmaxf(m2, min_nan(run, x));
    run = fmaxf(run, x);
  }
  return run;
}

constexpr float kLog2eF = 1.4426950408889634f;

// 2^x, denormal results flushed to 0 (one MUFU op; __expf without -ftz adds a denormal fix-up).
__device__ __forceinline__ float ex2_ftz(float x) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
  return r;
}

// e^d, flushed to 0 below e^−87.3 (negligible next to the max's 1 in every sum).
__device__ __forceinline__ float exp_ftz(float d) { return ex2_ftz(d * kLog2eF); }

// bf16x2 max (a NaN half yields the other operand's half) and min.NaN (NaN wins), on raw bits.
__device__ __forceinline__ uint32_t bmax2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t bmin2_nan(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// The vector's max (NaN never counts; NaN only when every value is NaN, which callers compare
// false against anything). bf16: two packed steps and one float max instead of eight.
template <class T>
__device__ __forceinline__ float vec_max_only(const uint4& r) {
  float unused;
  return vec_max<T, false>(r, kNegInf, unused);
}
template <>
__device__ __forceinline__ float vec_max_only<__nv_bfloat16>(const uint4& r) {
  const uint32_t w = bmax2(bmax2(r.x, r.y), bmax2(r.z, r.w));
  return fmaxf(bf_lo(w), bf_hi(w));
}

// K = 0: (run, m2) ← the two largest of (run, m2) and the vector's values. bf16 works on the two
// halves as two sets of four (packed max / min.NaN tournament), then folds each half's top two.
template <class T>
__device__ __forceinline__ float vec_top2(const uint4& r, float run, float& m2) {
  return vec_max<T, true>(r, run, m2);
}
template <>
__device__ __forceinline__ float vec_top2<__nv_bfloat16>(const uint4& r, float run, float& m2) {
  const uint32_t M01 = bmax2(r.x, r.y), m01 = bmin2_nan(r.x, r.y);
  const uint32_t M23 = bmax2(r.z, r.w), m23 = bmin2_nan(r.z, r.w);
  const uint32_t t1 = bmax2(M01, M23);
  const uint32_t t2 = bmax2(bmin2_nan(M01, M23), bmax2(m01, m23));
  // A NaN a (its half all NaN) is dropped by min.NaN + fmaxf; b is NaN when the half has < 2 values.
  float a = bf_lo(t1), b = bf_lo(t2);
  m2 = fmaxf(fmaxf(m2, min_nan(run, a)), b);
  run = fmaxf(run, a);
  a = bf_hi(t1);
  b = bf_hi(t2);
  m2 = fmaxf(fmaxf(m2, min_nan(run, a)), b);
  return fmaxf(run, a);
}

// Softmax sums of one vector, relative to the state's maxima (already raised to cover it).
// −inf gives e = 0 and adds 0·(−88) to t (not 0·−inf); NaN poisons s and t, as on the CPU.
template <class T, bool REF>
__device__ __forceinline__ void accumulate(SoftmaxState<float>& st, const uint4& zr, const uint4& yr) {
  const float bz = st.m > kNegInf ? st.m : 0.0f;  // no finite value yet: relative to 0
  const float by = REF ? (st.my > kNegInf ? st.my : 0.0f) : 0.0f;
#pragma unroll
  for (int e = 0; e < Vec<T>::kN; ++e) {
    const float d = Vec<T>::get(zr, e) - bz;
    const float ex = exp_ftz(d);
    st.s += ex;
    st.t = fmaf(ex, fmaxf(d, kExpFloor), st.t);
    if (REF) {
      const float dy = Vec<T>::get(yr, e) - by;
      st.sy += exp_ftz(dy);
      if (ex > 0.0f) st.u = fmaf(ex, dy, st.u);  // p > 0 meeting q = 0 gives −inf, as on the CPU
    }
  }
}

// One vector into the thread's state: maxima first (rarely raised), then the sums. Returns the
// vector's max (TOPK) or the running max (K = 0).
template <class T, bool REF, bool TOPK>
__device__ __forceinline__ float consume(SoftmaxState<float>& st, float& m2, const uint4& zr, const uint4& yr) {
  const float vm = TOPK ? vec_max_only<T>(zr) : vec_top2<T>(zr, st.m, m2);
  if (vm > st.m) softmax_rescale_z(st, vm);
  if (REF) {
    const float vy = vec_max_only<T>(yr);
    if (vy > st.my) softmax_rescale_y(st, vy);
  }
  accumulate<T, REF>(st, zr, yr);
  return vm;
}

// Appends the group's values ≥ tau (ids below len) to the candidate buffer; counts past the cap.
template <class T, int U>
__device__ void offer_group(StatsShared& sh, const uint4 (&zr)[U], int64_t base, int64_t len, int64_t c0,
                            float tau) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int e = 0; e < Vec<T>::kN; ++e) {
      const float x = Vec<T>::get(zr[u], e);
      const int64_t id = base + int64_t(u) * kStatsThreads * Vec<T>::kN + e;
      if (x >= tau && id < len) {
        const int slot = atomicAdd(&sh.count, 1);
        if (slot < kCandCap) sh.cand[slot] = topk_key(x, c0 + id);
      }
    }
  }
}

// f(x, id) for every element of the chunk (the rare rescans).
template <class T, class F>
__device__ void scan_chunk(const T* z, int64_t len, bool vec_ok, F f) {
  constexpr int N = Vec<T>::kN;
  for (int64_t v = threadIdx.x; v * N < len; v += kStatsThreads) {
    const uint4 r = load_vec(z, v * N, len, vec_ok);
#pragma unroll
    for (int e = 0; e < N; ++e)
      if (v * N + e < len) f(Vec<T>::get(r, e), v * N + e);
  }
}

// Every thread's state merged into thread 0's: the block's maxima first, then each thread's
// sums rescaled to them once (one exp per thread, not one per tree level) and summed in a fixed
// order (what softmax_combine computes, without its serial chain of rescales).
__device__ SoftmaxState<float> block_reduce_state(StatsShared& sh, SoftmaxState<float> st) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float m = st.m, my = st.my;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    m = fmaxf(m, __shfl_xor_sync(kFull, m, o));
    my = fmaxf(my, __shfl_xor_sync(kFull, my, o));
  }
  if (lane == 0) sh.warp_top2[warp] = make_float2(m, my);
  __syncthreads();
  float M = sh.warp_top2[0].x, MY = sh.warp_top2[0].y;
#pragma unroll
  for (int w = 1; w < kStatsWarps; ++w) {
    M = fmaxf(M, sh.warp_top2[w].x);
    MY = fmaxf(MY, sh.warp_top2[w].y);
  }
  softmax_rescale_z(st, M);
  softmax_rescale_y(st, MY);
  float s = detail::warp_sum(st.s), t = detail::warp_sum(st.t), sy = detail::warp_sum(st.sy),
        u = detail::warp_sum(st.u);
  if (lane == 0) {
    SoftmaxState<float> w;
    w.m = M;
    w.my = MY;
    w.s = s;
    w.t = t;
    w.sy = sy;
    w.u = u;
    sh.warp_states[warp] = w;
  }
  __syncthreads();
  SoftmaxState<float> total = sh.warp_states[0];
  if (threadIdx.x == 0)
    for (int w = 1; w < kStatsWarps; ++w) {
      total.s += sh.warp_states[w].s;
      total.t += sh.warp_states[w].t;
      total.sy += sh.warp_states[w].sy;
      total.u += sh.warp_states[w].u;
    }
  return total;
}

// (largest, runner-up) of two such pairs.
__device__ __forceinline__ float2 merge_top2(float2 a, float2 b) {
  return make_float2(fmaxf(a.x, b.x), fmaxf(fminf(a.x, b.x), fmaxf(a.y, b.y)));
}

// Keys of src[0, n) at or above lo, copied to dst; returns how many. All threads call it.
__device__ int filter_keys(StatsShared& sh, const uint64_t* src, int n, uint64_t lo, uint64_t* dst) {
  if (threadIdx.x == 0) sh.nsel = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kStatsThreads) {
    const uint64_t k = src[i];
    if (k >= lo) dst[atomicAdd(&sh.nsel, 1)] = k;
  }
  __syncthreads();
  return sh.nsel;
}

// Sorts keys[0, n) (n ≤ kCandCap) and writes the best cap, 0-padded.
__device__ void write_top(uint64_t* keys, int n, uint64_t* out, int cap) {
  pad_and_sort_desc(keys, n);
  for (int j = threadIdx.x; j < cap; j += kStatsThreads) out[j] = j < n ? keys[j] : 0;
}

// The cap-th largest key among the chunk's elements ≥ tau (more than cap of them): 8-bit digits
// from the top, one rescan each.
template <class T>
__device__ uint64_t radix_select_key(StatsShared& sh, const T* z, int64_t len, bool vec_ok, int64_t c0, float tau,
                                     int cap) {
  uint64_t prefix = 0, mask = 0;
  int need = cap;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kStatsThreads) sh.hist[b] = 0;
    __syncthreads();
    scan_chunk<T>(z, len, vec_ok, [&](float x, int64_t id) {
      if (!(x >= tau)) return;
      const uint64_t k = topk_key(x, c0 + id);
      if ((k & mask) == prefix) atomicAdd(&sh.hist[(k >> shift) & 255u], 1u);
    });
    __syncthreads();
    if (threadIdx.x == 0) {
      int cum = 0, b = 255;
      for (; b > 0; --b) {
        if (cum + int(sh.hist[b]) >= need) break;
        cum += int(sh.hist[b]);
      }
      sh.bin = b;
      sh.need = need - cum;
    }
    __syncthreads();
    prefix |= uint64_t(sh.bin) << shift;
    mask |= uint64_t(255) << shift;
    need = sh.need;
  }
  return prefix;
}

// The chunk's best cap keys into out (descending, 0-padded), from the candidates ≥ tau.
template <class T>
__device__ void chunk_top(StatsShared& sh, const T* z, int64_t len, bool vec_ok, int64_t c0, float tau, int cap,
                          uint64_t* out) {
  const uint64_t lo = key_floor(tau);
  if (sh.count <= kCandCap) {  // every element ≥ tau is in the buffer (offered with a lower or equal τ)
    const int n = filter_keys(sh, sh.cand, sh.count, lo, sh.sel);
    write_top(sh.sel, n, out, cap);
    return;
  }
  __syncthreads();
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  scan_chunk<T>(z, len, vec_ok, [&](float x, int64_t id) {
    if (!(x >= tau)) return;
    const int slot = atomicAdd(&sh.count, 1);
    if (slot < kCandCap) sh.cand[slot] = topk_key(x, c0 + id);
  });
  __syncthreads();
  const int n = sh.count;
  if (n <= kCandCap) {
    write_top(sh.cand, n, out, cap);
    return;
  }
  const uint64_t kappa = radix_select_key<T>(sh, z, len, vec_ok, c0, tau, cap);
  __syncthreads();
  if (threadIdx.x == 0) sh.nsel = 0;
  __syncthreads();
  scan_chunk<T>(z, len, vec_ok, [&](float x, int64_t id) {
    if (!(x >= tau)) return;
    const uint64_t k = topk_key(x, c0 + id);
    if (k >= kappa) sh.sel[atomicAdd(&sh.nsel, 1)] = k;  // exactly cap keys (keys are unique)
  });
  __syncthreads();
  write_top(sh.sel, sh.nsel, out, cap);
}

// One thread's group of U vectors of z (and y) from element b on.
template <class T, bool REF, int U>
__device__ __forceinline__ void load_group(uint4 (&nz)[U], uint4 (&ny)[U], const T* z, const T* y, int64_t b,
                                           int64_t len, bool vec_ok) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    nz[u] = load_vec(z, b + int64_t(u) * kStatsThreads * Vec<T>::kN, len, vec_ok);
    ny[u] = REF ? load_vec(y, b + int64_t(u) * kStatsThreads * Vec<T>::kN, len, vec_ok) : make_uint4(0, 0, 0, 0);
  }
}

// grid: (chunks, rows). Writes the chunk's softmax state and its top list (see ChunkArgs::tops).
template <class T, bool REF, bool TOPK>
__global__ void __launch_bounds__(kStatsThreads, 4) logit_stats_chunk_kernel(ChunkArgs a) {
  constexpr int N = Vec<T>::kN, U = REF ? kStatsUnroll / 2 : kStatsUnroll;  // REF: two rows in flight
  constexpr int64_t kStep = int64_t(kStatsThreads) * U * N;  // elements per iteration
  __shared__ StatsShared sh;
  const int chunk = blockIdx.x, chunks = gridDim.x;
  const int64_t row = blockIdx.y;
  const int64_t c0 = int64_t(chunk) * a.chunk_len;
  const int64_t len = a.vocab - c0 < a.chunk_len ? a.vocab - c0 : a.chunk_len;
  const T* z = static_cast<const T*>(a.logits) + row * a.row_stride + c0;
  const T* y = REF ? static_cast<const T*>(a.ref) + row * a.row_stride + c0 : nullptr;
  const int iters = static_cast<int>((len + kStep - 1) / kStep);

  SoftmaxState<float> st;
  float m2 = kNegInf, tau = kNegInf;
  if (TOPK && threadIdx.x == 0) sh.count = 0;  // first read after block_rank_value's barriers
  // Software pipelined: the next group's loads are in flight while this one is consumed.
  uint4 nz[U], ny[U];
  if (iters > 0) load_group<T, REF, U>(nz, ny, z, y, int64_t(threadIdx.x) * N, len, a.vec_ok);
  for (int it = 0; it < iters; ++it) {
    const int64_t base = it * kStep + int64_t(threadIdx.x) * N;
    uint4 zr[U], yr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      zr[u] = nz[u];
      yr[u] = ny[u];
    }
    if (it + 1 < iters) load_group<T, REF, U>(nz, ny, z, y, base + kStep, len, a.vec_ok);
    float gm = kNegInf;  // TOPK: the max of this thread's group
#pragma unroll
    for (int u = 0; u < U; ++u) gm = fmaxf(gm, consume<T, REF, TOPK>(st, m2, zr[u], yr[u]));
    if (TOPK) {
      if (((it + 1) & it) == 0) tau = block_rank_value(sh, st.m, a.cap - 1);  // it = 0, 1, 3, 7, ...
      if (gm >= tau) offer_group<T, U>(sh, zr, base, len, c0, tau);
    }
  }

  const SoftmaxState<float> total = block_reduce_state(sh, st);
  const int64_t part = row * chunks + chunk;
  if (TOPK) {
    const float tau_final = block_rank_value(sh, st.m, a.cap - 1);  // also orders the appends above
    chunk_top<T>(sh, z, len, a.vec_ok, c0, tau_final, a.cap, static_cast<uint64_t*>(a.tops) + part * a.cap);
  } else {
    float2 t2 = make_float2(st.m, m2);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
      t2 = merge_top2(t2, make_float2(__shfl_xor_sync(kFull, t2.x, o), __shfl_xor_sync(kFull, t2.y, o)));
    if ((threadIdx.x & 31) == 0) sh.warp_top2[threadIdx.x >> 5] = t2;
    __syncthreads();
    if (threadIdx.x == 0) {
      float2 r = sh.warp_top2[0];
      for (int w = 1; w < kStatsWarps; ++w) r = merge_top2(r, sh.warp_top2[w]);
      static_cast<float2*>(a.tops)[part] = r;
    }
  }
  if (threadIdx.x == 0) a.states[part] = total;
}

// ---------------------------------------------------------------------------------------------
// Logit statistics, pass 2: one block per row merges its chunks and writes the outputs.

struct MergeArgs {
  const void* logits;
  const void* ref;
  int64_t vocab, row_stride;
  const int32_t* targets;
  int K, cap, chunks;
  const SoftmaxState<float>* states;
  const void* tops;
};

struct MergeShared {
  uint64_t keys[kMergeKeys];
  TopKEntry best[kMaxLogitTopK];
  double redd[32];
  unsigned long long redk[32];
  float redf[32];
  float2 red2[32];
  int n_keys, n_best;
};

__device__ float block_max_f(float x, float* red) {
  for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(kFull, x, o));
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  float m = red[0];
  for (int w = 1; w < int(blockDim.x >> 5); ++w) m = fmaxf(m, red[w]);
  return m;
}

__device__ unsigned long long block_max_u64(unsigned long long x, unsigned long long* red) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(kFull, x, o);
    x = other > x ? other : x;
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = x;
  __syncthreads();
  unsigned long long m = red[0];
  for (int w = 1; w < int(blockDim.x >> 5); ++w) m = red[w] > m ? red[w] : m;
  return m;
}

// The row's state: every chunk rescaled to the row maxima in f64, then summed (fixed order).
__device__ SoftmaxState<double> merge_states(MergeShared& sh, const SoftmaxState<float>* states, int chunks) {
  float m = kNegInf, my = kNegInf;
  for (int c = threadIdx.x; c < chunks; c += kMergeThreads) {
    m = fmaxf(m, states[c].m);
    my = fmaxf(my, states[c].my);
  }
  const float M = block_max_f(m, sh.redf), MY = block_max_f(my, sh.redf);
  SoftmaxState<double> acc;
  acc.m = M;
  acc.my = MY;
  for (int c = threadIdx.x; c < chunks; c += kMergeThreads) {
    const SoftmaxState<float> f = states[c];
    SoftmaxState<double> d;
    d.m = f.m;
    d.s = f.s;
    d.t = f.t;
    d.my = f.my;
    d.sy = f.sy;
    d.u = f.u;
    softmax_rescale_z(d, M);
    softmax_rescale_y(d, MY);
    acc.s += d.s;
    acc.t += d.t;
    acc.sy += d.sy;
    acc.u += d.u;
  }
  acc.s = detail::block_sum<double>(acc.s, sh.redd);
  acc.t = detail::block_sum<double>(acc.t, sh.redd);
  acc.sy = detail::block_sum<double>(acc.sy, sh.redd);
  acc.u = detail::block_sum<double>(acc.u, sh.redd);
  return acc;
}

// K > 0: best[0, n_best) from the chunk lists (each sorted descending, 0-padded). Only keys ≥ a
// floor can make the row's top-cap, where a floor is any key with cap real keys at or above it:
// for a position p (1-based) in the lists and r = ⌈cap/p⌉, the r-th largest of the chunks' p-th
// keys, when nonzero, has r lists holding p keys each at or above it. The best of these floors
// over p = 1, 2, 4, ..., cap leaves a few dozen keys for typical rows (p = cap alone, the largest
// chunk's cap-th key, leaves most of the lists when there are many chunks). Each remaining key's
// rank is its place.
__device__ void merge_topk(MergeShared& sh, const uint64_t* tops, int chunks, int cap) {
  unsigned long long floor_key = 0;
  for (int p = 1;; p = p * 2 < cap ? p * 2 : cap) {
    const int r = (cap + p - 1) / p;  // 1-based rank among the chunks' p-th keys
    if (r <= chunks && chunks <= kMergeKeys) {
      __syncthreads();  // sh.keys free (a previous round's readers are done)
      for (int c = threadIdx.x; c < chunks; c += kMergeThreads) sh.keys[c] = tops[int64_t(c) * cap + p - 1];
      __syncthreads();
      for (int c = threadIdx.x; c < chunks; c += kMergeThreads) {
        const uint64_t k = sh.keys[c];
        int above = 0;  // keys ranking before k (ties, only among 0 pads, by chunk)
        for (int j = 0; j < chunks; ++j) {
          const uint64_t o = sh.keys[j];
          above += (o > k || (o == k && j < c)) ? 1 : 0;
        }
        if (above == r - 1) floor_key = k > floor_key ? k : floor_key;
      }
    }
    if (p == cap) break;
  }
  floor_key = block_max_u64(floor_key, sh.redk);
  if (threadIdx.x == 0) sh.n_keys = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < chunks * cap; i += kMergeThreads) {
    const uint64_t k = tops[i];
    if (k != 0 && k >= floor_key) sh.keys[atomicAdd(&sh.n_keys, 1)] = k;
  }
  __syncthreads();
  const int n = sh.n_keys;
  for (int i = threadIdx.x; i < n; i += kMergeThreads) {
    const uint64_t k = sh.keys[i];
    int rank = 0;
    for (int j = 0; j < n; ++j) rank += sh.keys[j] > k;
    if (rank < cap) sh.best[rank] = entry_of(k);
  }
  if (threadIdx.x == 0) sh.n_best = n < cap ? n : cap;
  __syncthreads();
}

// K = 0: the two largest values. A row without a value above −inf is settled by counting its
// non-NaN values (the margin is then NaN for two or more −inf, +inf otherwise, as on the CPU).
template <class T>
__device__ void merge_top2_row(MergeShared& sh, const float2* tops, int chunks, const T* z, int64_t vocab) {
  float2 t = make_float2(kNegInf, kNegInf);
  for (int c = threadIdx.x; c < chunks; c += kMergeThreads) t = merge_top2(t, tops[c]);
  for (int o = 16; o > 0; o >>= 1)
    t = merge_top2(t, make_float2(__shfl_xor_sync(kFull, t.x, o), __shfl_xor_sync(kFull, t.y, o)));
  if ((threadIdx.x & 31) == 0) sh.red2[threadIdx.x >> 5] = t;
  __syncthreads();
  float2 r = sh.red2[0];
  for (int w = 1; w < kMergeThreads / 32; ++w) r = merge_top2(r, sh.red2[w]);
  if (r.x > kNegInf) {
    if (threadIdx.x == 0) {
      sh.best[0] = TopKEntry{r.x, 0};
      sh.best[1] = TopKEntry{r.y, 1};
      sh.n_best = 2;
    }
    __syncthreads();
    return;
  }
  unsigned long long cnt = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kMergeThreads) {
    const float x = ld1(z + i);
    cnt += x == x ? 1 : 0;
  }
  cnt = detail::block_sum<unsigned long long>(cnt, sh.redk);
  if (threadIdx.x == 0) {
    sh.best[0] = TopKEntry{kNegInf, 0};
    sh.best[1] = TopKEntry{kNegInf, 1};
    sh.n_best = cnt >= 2 ? 2 : int(cnt);
  }
  __syncthreads();
}

template <class T, bool TOPK>
__global__ void __launch_bounds__(kMergeThreads) logit_stats_merge_kernel(MergeArgs a, LogitStatsDeviceOut out) {
  __shared__ MergeShared sh;
  const int64_t row = blockIdx.x;
  const T* z = static_cast<const T*>(a.logits) + row * a.row_stride;
  const T* y = a.ref ? static_cast<const T*>(a.ref) + row * a.row_stride : nullptr;
  const SoftmaxState<double> st = merge_states(sh, a.states + row * a.chunks, a.chunks);
  if (TOPK) merge_topk(sh, static_cast<const uint64_t*>(a.tops) + row * a.chunks * a.cap, a.chunks, a.cap);
  else merge_top2_row<T>(sh, static_cast<const float2*>(a.tops) + row * a.chunks, a.chunks, z, a.vocab);
  if (threadIdx.x == 0) {
    const int32_t target = a.targets ? a.targets[row] : -1;
    const bool has_target = target >= 0 && target < a.vocab;
    const float zt = has_target ? ld1(z + target) : 0.0f;
    const float yt = (has_target && y) ? ld1(y + target) : 0.0f;
    const LogitRowStats s = logit_stats_finalize(st, sh.best, sh.n_best, has_target, zt, y != nullptr, yt);
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
  for (int j = threadIdx.x; j < a.K; j += kMergeThreads) {
    const bool real = j < sh.n_best;
    out.topk_ids[row * a.K + j] = real ? sh.best[j].id : -1;
    out.topk_logits[row * a.K + j] = real ? sh.best[j].value : kNegInf;
  }
}

// ---------------------------------------------------------------------------------------------
// Planning: chunks per row so that one wave of blocks covers the GPU (rows · chunks ≤ resident
// blocks), in whole 16-byte vectors per thread, bounded by what the merge holds.

struct StatsPlan {
  int cap, chunks;
  int64_t chunk_len;
};

template <class T, bool REF, bool TOPK>
int chunk_blocks_per_sm() {
  static const int n = [] {
    int b = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, logit_stats_chunk_kernel<T, REF, TOPK>, kStatsThreads, 0) !=
            cudaSuccess ||
        b < 1) {
      (void)cudaGetLastError();
      b = 4;
    }
    return b;
  }();
  return n;
}

template <class T>
int chunk_blocks_per_sm(bool ref, bool topk) {
  if (ref) return topk ? chunk_blocks_per_sm<T, true, true>() : chunk_blocks_per_sm<T, true, false>();
  return topk ? chunk_blocks_per_sm<T, false, true>() : chunk_blocks_per_sm<T, false, false>();
}

// What bounds the chunks of a row: the chunk granule (one vector per thread), the resident
// blocks of one wave, and the most chunks a row may have (vocabulary granules; merge capacity).
struct StatsLimits {
  int64_t gran, slots, max_chunks;
};

StatsLimits stats_limits(int64_t vocab, int K, DType dt, bool ref) {
  const bool topk = K > 0;
  const int cap = K > 2 ? K : 2;
  StatsLimits l;
  l.gran = int64_t(kStatsThreads) * (dt == DType::F32 ? 4 : 8);
  const int per_sm = dt == DType::F32 ? chunk_blocks_per_sm<float>(ref, topk)
                                      : chunk_blocks_per_sm<__nv_bfloat16>(ref, topk);
  l.slots = int64_t(detail::sm_count()) * per_sm;
  const int64_t by_len = ceil_div(vocab, l.gran);
  const int64_t by_keys = topk ? kMergeKeys / cap : kMaxChunks;
  l.max_chunks = by_len < by_keys ? by_len : by_keys;
  return l;
}

StatsPlan plan_stats(int64_t rows, int64_t vocab, int K, DType dt, bool ref) {
  const StatsLimits l = stats_limits(vocab, K, dt, ref);
  StatsPlan p;
  p.cap = K > 2 ? K : 2;
  int64_t c = rows >= l.slots ? 1 : l.slots / rows;  // rows · c ≤ max(rows, slots)
  if (c > l.max_chunks) c = l.max_chunks;
  if (c < 1) c = 1;
  p.chunk_len = ceil_div(ceil_div(vocab, c), l.gran) * l.gran;
  p.chunks = static_cast<int>(ceil_div(vocab, p.chunk_len));
  return p;
}

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

size_t stats_ws_bytes(int64_t rows, const StatsPlan& p) {
  const size_t parts = size_t(rows) * size_t(p.chunks);
  return align256(parts * sizeof(SoftmaxState<float>)) + align256(parts * size_t(p.cap) * sizeof(uint64_t));
}

template <class T, bool REF, bool TOPK>
cudaError_t run_stats(const LogitStatsArgs& a, const LogitStatsDeviceOut& out, const StatsPlan& p,
                      SoftmaxState<float>* states, void* tops, cudaStream_t stream) {
  ChunkArgs c;
  c.logits = a.logits;
  c.ref = a.ref;
  c.vocab = a.vocab;
  c.row_stride = a.row_stride;
  c.chunk_len = p.chunk_len;
  c.cap = p.cap;
  c.vec_ok = detail::aligned16(a.logits) && (!a.ref || detail::aligned16(a.ref)) &&
             (a.row_stride * int64_t(sizeof(T))) % 16 == 0;
  c.states = states;
  c.tops = tops;
  logit_stats_chunk_kernel<T, REF, TOPK>
      <<<dim3(p.chunks, static_cast<unsigned>(a.rows)), kStatsThreads, 0, stream>>>(c);
  AD_CUDA_TRY(detail::launched("logit_stats_chunk_kernel"));
  MergeArgs m{a.logits, a.ref, a.vocab, a.row_stride, a.targets, a.K, p.cap, p.chunks, states, tops};
  logit_stats_merge_kernel<T, TOPK><<<static_cast<unsigned>(a.rows), kMergeThreads, 0, stream>>>(m, out);
  return detail::launched("logit_stats_merge_kernel");
}

template <class T>
cudaError_t run_stats(const LogitStatsArgs& a, const LogitStatsDeviceOut& out, const StatsPlan& p,
                      SoftmaxState<float>* states, void* tops, cudaStream_t stream) {
  const bool topk = a.K > 0;
  if (a.ref) return topk ? run_stats<T, true, true>(a, out, p, states, tops, stream)
                         : run_stats<T, true, false>(a, out, p, states, tops, stream);
  return topk ? run_stats<T, false, true>(a, out, p, states, tops, stream)
              : run_stats<T, false, false>(a, out, p, states, tops, stream);
}

}  // namespace

// Enough for any call with at most `rows` rows (callers size once for their largest chunk): a plan
// has rows · chunks ≤ min(max(rows, slots), rows · max_chunks), for every dtype and ref.
size_t logit_stats_workspace_bytes(int64_t rows, int64_t vocab, int K) {
  if (rows <= 0 || vocab <= 0) return 256;
  const int cap = K > 2 ? K : 2;
  int64_t parts = 1;
  for (DType dt : {DType::F32, DType::BF16})
    for (bool ref : {false, true}) {
      const StatsLimits l = stats_limits(vocab, K, dt, ref);
      int64_t b = rows > l.slots ? rows : l.slots;
      if (b > rows * l.max_chunks) b = rows * l.max_chunks;
      parts = b > parts ? b : parts;
    }
  return align256(size_t(parts) * sizeof(SoftmaxState<float>)) + align256(size_t(parts) * size_t(cap) * sizeof(uint64_t));
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
  const StatsPlan p = plan_stats(a.rows, a.vocab, a.K, a.dtype, a.ref != nullptr);
  const size_t need = stats_ws_bytes(a.rows, p);
  if (!workspace || workspace_bytes < need || (reinterpret_cast<uintptr_t>(workspace) & 255u) != 0)
    return invalid("logit_stats: workspace missing, unaligned or smaller than " + std::to_string(need) + " bytes");
  const size_t parts = size_t(a.rows) * size_t(p.chunks);
  auto* states = static_cast<SoftmaxState<float>*>(workspace);
  void* tops = static_cast<char*>(workspace) + align256(parts * sizeof(SoftmaxState<float>));
  return a.dtype == DType::F32 ? run_stats<float>(a, out, p, states, tops, stream)
                               : run_stats<__nv_bfloat16>(a, out, p, states, tops, stream);
}

// =============================================================================================
// Sampling: one block of 1024 threads per row (grid-stride over rows). Masses m_i = e^{w_i − max w}
// are summed as round(m_i · 2^40) in 64-bit integers: exact and order-independent, so the same
// inputs give the same token on every run, whichever path finds it.
//
// Fast path (0 < top_k ≤ 1024, the usual setting): the k-th largest of the threads' best keys is
// a lower bound on the row's k-th largest (k threads reach it), so one more read of the row
// gathers the few candidates at or above it into shared memory; top-k, top-p, min-p and the
// inverse CDF then run on that short list (bitonic sorts by key, by mass, by id). Without
// penalties the row is never written: both reads recompute w = z / T from the logits.
//
// General path (no top-k, top_k > 1024, or too many candidates): w lives in the workspace and
//   - a radix select (11 + 11 + 10 bits, 2048-bin histograms, so a bin rarely holds more than a
//     few lanes of a warp) finds the top-k boundary value and, weighted by the fixed-point
//     masses, the top-p boundary mass;
//   - ties at a boundary go to the lower ids by locating the j-th tied id;
//   - the inverse CDF sums 2048-id tiles (one warp each), then scans one tile.

namespace {

constexpr int kSampleThreads = 1024;
constexpr int kSampleWarps = kSampleThreads / 32;
constexpr int kSampleUnroll = 4;          // 16-byte vectors in flight per thread
constexpr int kTile = 2048;
constexpr int kMaxTiles = 2048;           // vocab ≤ 4,194,304
constexpr int kRadixBins = 2048;
constexpr int kFastTopK = kSampleThreads;  // one best key per thread bounds the k-th largest
constexpr int kFastCap = 2048;            // candidates the fast path holds
constexpr double kFx = 1099511627776.0;   // 2^40

struct SampleShared {
  union {
    struct {
      unsigned long long tile_sum[kMaxTiles];
      unsigned long long hist[kRadixBins];
    } g;
    struct {
      uint64_t keys[kFastCap];
      uint64_t order[kFastTopK];
      int32_t ids[kFastTopK];
      float mass[kFastTopK];
    } f;
  };
  unsigned long long red[32];
  unsigned long long found_prefix, found_above;
  int64_t found_id;
  uint32_t found_bin;
  int count;
};

// NaN and masses below 2^−41 weigh 0. m · 2^40 is exact in f32 (a power-of-two scaling of a mass
// in (2^−149, 1]), so converting it directly gives round(m · 2^40) without the f64 detour.
__device__ __forceinline__ unsigned long long mass_fx(float m) {
  return m > 0.0f ? __float2ull_rn(m * static_cast<float>(kFx)) : 0ull;
}

// How many of the kept masses top-p needs (the caller's `total` is their fixed-point sum).
__device__ __forceinline__ unsigned long long top_p_need(float top_p, unsigned long long total) {
  const double need_d = static_cast<double>(top_p) * static_cast<double>(total);
  unsigned long long need = need_d > 0 ? static_cast<unsigned long long>(ceil(need_d)) : 1ull;
  return need > total ? total : need;
}

// f(i, w_i) for every id of a row read from p (T = the logits' type, or float for the workspace);
// divide: w = value / temp (bit-identical to the first pass).
template <class T, class F>
__device__ void scan_values(const T* p, int64_t V, bool vec_ok, bool divide, float temp, F f) {
  constexpr int N = Vec<T>::kN, U = kSampleUnroll;
  constexpr int64_t kStep = int64_t(kSampleThreads) * U * N;
  for (int64_t base = 0; base < V; base += kStep) {
    uint4 r[U];
#pragma unroll
    for (int u = 0; u < U; ++u) r[u] = load_vec(p, base + (int64_t(u) * kSampleThreads + threadIdx.x) * N, V, vec_ok);
#pragma unroll
    for (int u = 0; u < U; ++u) {
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const int64_t i = base + (int64_t(u) * kSampleThreads + threadIdx.x) * N + e;
        if (i >= V) continue;
        float x = Vec<T>::get(r[u], e);
        if (divide) x = x / temp;
        f(i, x);
      }
    }
  }
}

// Where a pass reads w from: the workspace (penalized rows) or the logits themselves.
template <class T>
struct RowSrc {
  const T* z;
  const float* w;
  int64_t V;
  bool from_ws, greedy, z_vec, w_vec;
  float temp;

  template <class F>
  __device__ void scan(F f) const {
    if (from_ws) scan_values<float>(w, V, w_vec, false, 1.0f, f);
    else scan_values<T>(z, V, z_vec, !greedy, temp, f);
  }
};

__device__ unsigned long long block_max_key(unsigned long long x, SampleShared& sh) {
  return block_max_u64(x, sh.red);
}

// Warp 0 walks weights wt(0..n) in order: the first r whose running sum exceeds target, or −1.
// All threads call it.
template <class F>
__device__ int first_exceeding(SampleShared& sh, int n, unsigned long long target, F wt) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    unsigned long long cum = 0;
    int found = -1;
    for (int r0 = 0; r0 < n && found < 0; r0 += 32) {
      unsigned long long v = r0 + lane < n ? wt(r0 + lane) : 0ull;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long up = __shfl_up_sync(kFull, v, o);
        if (lane >= o) v += up;
      }
      const unsigned hit = __ballot_sync(kFull, cum + v > target);
      if (hit) found = r0 + __ffs(hit) - 1;
      else cum += __shfl_sync(kFull, v, 31);
    }
    if (lane == 0) sh.found_id = found;
  }
  __syncthreads();
  const int r = static_cast<int>(sh.found_id);
  __syncthreads();
  return r;
}

// Row view of the general path: which tokens are kept, and their masses.
struct RowSel {
  float max_w;
  bool use_k;
  uint32_t k_key;  // kept_k: orderable(w) > k_key, or == k_key with id ≤ k_id
  int64_t k_id;
  bool use_p;
  uint32_t p_bits;  // kept_p: mass bits > p_bits, or == p_bits with id ≤ p_id
  int64_t p_id;
  float min_p;

  __device__ __forceinline__ float mass(float x) const { return x == kNegInf ? 0.0f : expf(x - max_w); }
  __device__ __forceinline__ bool kept_k(int64_t i, float x) const {
    if (!use_k) return true;
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
  __device__ __forceinline__ unsigned long long weight(int64_t i, float x) const {
    if (!kept_k(i, x)) return 0;
    const float m = mass(x);
    if (!(m > 0.0f) || !kept_p(i, m)) return 0;
    if (min_p > 0.0f && !min_p_keeps(m, 1.0f, min_p)) return 0;
    return mass_fx(m);
  }
};

// Σ f(i, w_i) per kTile ids (one warp per tile) into sh.g.tile_sum; returns the row's total.
template <class F>
__device__ unsigned long long tile_sums(SampleShared& sh, const float* w, int64_t V, F f) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tiles = static_cast<int>((V + kTile - 1) / kTile);
  for (int t = warp; t < tiles; t += kSampleWarps) {
    unsigned long long s = 0;
    const int64_t base = int64_t(t) * kTile;
#pragma unroll 8
    for (int j = lane; j < kTile; j += 32) {
      const int64_t i = base + j;
      if (i < V) s += f(i, w[i]);
    }
    s = detail::warp_sum(s);
    if (lane == 0) sh.g.tile_sum[t] = s;
  }
  __syncthreads();
  unsigned long long s = 0;
  for (int t = threadIdx.x; t < tiles; t += kSampleThreads) s += sh.g.tile_sum[t];
  return detail::block_sum<unsigned long long>(s, sh.red);
}

// After tile_sums(f): the first id whose running sum of f (ascending ids) exceeds target; −1
// when none does.
template <class F>
__device__ int64_t first_above(SampleShared& sh, const float* w, int64_t V, unsigned long long target, F f) {
  const int lane = threadIdx.x & 31;
  const int tiles = static_cast<int>((V + kTile - 1) / kTile);
  if (threadIdx.x == 0) {
    unsigned long long cum = 0;
    int t = 0;
    for (; t < tiles; ++t) {
      if (cum + sh.g.tile_sum[t] > target) break;
      cum += sh.g.tile_sum[t];
    }
    sh.found_prefix = cum;
    sh.found_bin = static_cast<uint32_t>(t);
  }
  __syncthreads();
  const int t = static_cast<int>(sh.found_bin);
  if (t < tiles && threadIdx.x < 32) {
    unsigned long long cum = sh.found_prefix;
    int64_t found = -1;
    const int64_t base = int64_t(t) * kTile;
    for (int j0 = 0; j0 < kTile && found < 0; j0 += 32) {
      const int64_t i = base + j0 + lane;
      unsigned long long v = i < V ? f(i, w[i]) : 0;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned long long up = __shfl_up_sync(kFull, v, o);
        if (lane >= o) v += up;
      }
      const unsigned hit = __ballot_sync(kFull, cum + v > target);
      if (hit) found = base + j0 + (__ffs(hit) - 1);
      else cum += __shfl_sync(kFull, v, 31);
    }
    if (lane == 0) sh.found_id = found;
  }
  __syncthreads();
  const int64_t found = t < tiles ? sh.found_id : -1;
  __syncthreads();
  return found;
}

// Warp 0: the bin b (of nb, scanned from the top) with above + S(bins > b) < need ≤ above +
// S(bins ≥ b); sh.found_bin = b, sh.found_above = above + S(bins > b).
__device__ void find_bin_desc(SampleShared& sh, int nb, unsigned long long above, unsigned long long need) {
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, per = nb / 32;
    const int hi = nb - lane * per, lo = hi - per;  // lane 0 holds the highest bins
    unsigned long long mine = 0;
    for (int b = lo; b < hi; ++b) mine += sh.g.hist[b];
    unsigned long long incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long up = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += up;
    }
    const unsigned hit = __ballot_sync(kFull, above + incl >= need);
    const int owner = hit ? __ffs(hit) - 1 : 31;  // need beyond the total: the lowest bin
    if (lane == owner) {
      unsigned long long cum = above + incl - mine;
      int b = hi - 1;
      for (; b > lo; --b) {
        if (cum + sh.g.hist[b] >= need) break;
        cum += sh.g.hist[b];
      }
      sh.found_bin = static_cast<uint32_t>(b);
      sh.found_above = cum;
    }
  }
  __syncthreads();
}

// Radix select over 32-bit keys key(i, w_i), weighted by wt(i, w_i) (0 = left out): the key κ
// with S(> κ) < need ≤ S(≥ κ), where need = need_of(total weight), computed after the first
// pass. *above receives S(> κ), *need_out the need.
template <class Key, class Wt, class Need>
__device__ uint32_t radix_select_desc(SampleShared& sh, const float* w, int64_t V, bool w_vec, Key key, Wt wt,
                                      Need need_of, unsigned long long* above_out, unsigned long long* need_out) {
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0, need = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = pass == 0 ? 21 : pass == 1 ? 10 : 0;
    const int nb = pass == 2 ? 1024 : 2048;
    for (int b = threadIdx.x; b < nb; b += kSampleThreads) sh.g.hist[b] = 0;
    __syncthreads();
    scan_values<float>(w, V, w_vec, false, 1.0f, [&](int64_t i, float x) {
      const unsigned long long g = wt(i, x);
      if (g == 0) return;
      const uint32_t k = key(i, x);
      if ((k & mask) != prefix) return;
      atomicAdd(&sh.g.hist[(k >> shift) & uint32_t(nb - 1)], g);
    });
    __syncthreads();
    if (pass == 0) {
      unsigned long long s = 0;
      for (int b = threadIdx.x; b < nb; b += kSampleThreads) s += sh.g.hist[b];
      need = need_of(detail::block_sum<unsigned long long>(s, sh.red));
    }
    find_bin_desc(sh, nb, above, need);
    prefix |= sh.found_bin << shift;
    mask |= uint32_t(nb - 1) << shift;
    above = sh.found_above;
    __syncthreads();
  }
  *above_out = above;
  *need_out = need;
  return prefix;
}

// The fast path; returns the token, or −1 when the candidates overflow (then the general path).
// best_t: this thread's best key; best: the row's.
template <class T>
__device__ int32_t sample_fast(SampleShared& sh, const RowSrc<T>& src, const SamplingParams& p, uint64_t best_t,
                               uint64_t best, float max_w, float u) {
  const int k = p.top_k;
  // 1. The k-th largest thread best: every key of the row's top-k is at or above it.
  __syncthreads();
  sh.f.keys[threadIdx.x] = best_t;
  block_sort_desc(sh.f.keys, kSampleThreads);
  const uint64_t floor_key = sh.f.keys[k - 1];
  __syncthreads();
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  // 2. Gather the candidates.
  src.scan([&](int64_t i, float x) {
    const uint64_t key = topk_key(x, i);
    if (key != 0 && key >= floor_key) {
      const int slot = atomicAdd(&sh.count, 1);
      if (slot < kFastCap) sh.f.keys[slot] = key;
    }
  });
  __syncthreads();
  const int n = sh.count;
  if (n > kFastCap) return -1;
  // 3. Top-k: the first k in (value desc, id asc); fewer when the row has fewer non-NaN values.
  pad_and_sort_desc(sh.f.keys, n);
  const int nk = n < k ? n : k;
  for (int j = threadIdx.x; j < nk; j += kSampleThreads) {
    const TopKEntry e = entry_of(sh.f.keys[j]);
    sh.f.ids[j] = e.id;
    sh.f.mass[j] = e.value == kNegInf ? 0.0f : expf(e.value - max_w);
  }
  __syncthreads();
  // 4. Top-p: the shortest prefix in (mass desc, id asc) whose fixed-point sum reaches need.
  bool use_p = false;
  uint32_t p_bits = 0;
  int64_t p_id = -1;
  if (p.top_p < 1.0f) {
    unsigned long long s = 0;
    for (int j = threadIdx.x; j < nk; j += kSampleThreads) s += mass_fx(sh.f.mass[j]);
    const unsigned long long need = top_p_need(p.top_p, detail::block_sum<unsigned long long>(s, sh.red));
    if (need >= 1) {
      for (int j = threadIdx.x; j < nk; j += kSampleThreads)
        sh.f.order[j] = (uint64_t(__float_as_uint(sh.f.mass[j])) << 32) | (0xFFFFFFFFu - uint32_t(sh.f.ids[j]));
      pad_and_sort_desc(sh.f.order, nk);
      const int r = first_exceeding(sh, nk, need - 1, [&](int q) {
        return mass_fx(__uint_as_float(uint32_t(sh.f.order[q] >> 32)));
      });
      if (r >= 0) {
        use_p = true;
        p_bits = uint32_t(sh.f.order[r] >> 32);
        p_id = int64_t(0xFFFFFFFFu - uint32_t(sh.f.order[r]));
      }
    }
  }
  auto weight = [&](int j) -> unsigned long long {
    const float m = sh.f.mass[j];
    if (!(m > 0.0f)) return 0;
    const uint32_t b = __float_as_uint(m);
    if (use_p && !(b > p_bits || (b == p_bits && sh.f.ids[j] <= p_id))) return 0;
    if (p.min_p > 0.0f && !min_p_keeps(m, 1.0f, p.min_p)) return 0;
    return mass_fx(m);
  };
  // 5. Min-p inside weight(); the inverse CDF in ascending id order.
  unsigned long long s = 0;
  for (int j = threadIdx.x; j < nk; j += kSampleThreads) s += weight(j);
  const unsigned long long total = detail::block_sum<unsigned long long>(s, sh.red);
  if (total == 0) return best == 0 ? 0 : entry_of(best).id;  // nothing kept: the argmax
  __syncthreads();
  for (int j = threadIdx.x; j < nk; j += kSampleThreads)
    sh.f.order[j] = (uint64_t(0xFFFFFFFFu - uint32_t(sh.f.ids[j])) << 32) | uint32_t(j);
  pad_and_sort_desc(sh.f.order, nk);
  unsigned long long target = static_cast<unsigned long long>(floor(static_cast<double>(u) * static_cast<double>(total)));
  if (target >= total) target = total - 1;
  const int r = first_exceeding(sh, nk, target, [&](int q) { return weight(int(uint32_t(sh.f.order[q]))); });
  return sh.f.ids[uint32_t(sh.f.order[r >= 0 ? r : 0])];
}

struct SampleKernelArgs {
  SampleArgs a;
  float* ws_w;
  int32_t* ws_marks;
  bool z_vec;  // rows start 16-byte aligned
};

template <class T>
__global__ void __launch_bounds__(kSampleThreads) sample_kernel(SampleKernelArgs ka) {
  extern __shared__ __align__(16) unsigned char sample_smem[];
  SampleShared& sh = *reinterpret_cast<SampleShared*>(sample_smem);
  const SampleArgs& a = ka.a;
  const int64_t V = a.vocab;
  float* w = ka.ws_w + int64_t(blockIdx.x) * V;
  int32_t* marks = ka.ws_marks + int64_t(blockIdx.x) * V;

  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* z = static_cast<const T*>(a.logits) + row * a.row_stride;
    const SamplingParams p = a.params[row];
    if (V <= 1) {
      if (threadIdx.x == 0) a.out_tokens[row] = 0;
      continue;
    }
    const bool greedy = sampling_is_greedy(p);
    const int64_t h0 = (a.history && p.repetition_penalty != 1.0f) ? a.history_offsets[row] : 0;
    const int64_t h1 = (a.history && p.repetition_penalty != 1.0f) ? a.history_offsets[row + 1] : 0;
    const bool pf = p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
    const int64_t g0 = (a.generated && pf) ? a.generated_offsets[row] : 0;
    const int64_t g1 = (a.generated && pf) ? a.generated_offsets[row + 1] : 0;
    const bool penalized = h1 > h0 || g1 > g0;
    const bool use_k = p.top_k > 0 && p.top_k < V;
    const bool fast = !greedy && use_k && p.top_k <= kFastTopK;
    RowSrc<T> src{z, w, V, false, greedy, ka.z_vec, V % 4 == 0, p.temperature};
    bool ws_ready = false;

    // Steps 1–3: w = z / T (z when greedy), then each penalized id rewritten once from z. The
    // best key (max w, lowest id on ties) comes with the last pass that reads every w.
    uint64_t best_t = 0;
    const bool write_ws = penalized || !(fast || greedy);
    src.scan([&](int64_t i, float x) {
      if (write_ws) w[i] = x;
      if (!penalized) {
        const uint64_t k = topk_key(x, i);
        best_t = k > best_t ? k : best_t;
      }
    });
    ws_ready = write_ws;
    if (penalized) {
      auto valid = [V](int32_t id) { return id >= 0 && id < V; };
      __syncthreads();
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
      __syncthreads();
      src.from_ws = true;
      src.scan([&](int64_t i, float x) {
        const uint64_t k = topk_key(x, i);
        best_t = k > best_t ? k : best_t;
      });
    }
    const uint64_t best = block_max_key(best_t, sh);
    const float max_w = best == 0 ? kNegInf : entry_of(best).value;

    if (greedy || !(max_w > kNegInf)) {  // argmax, lowest id on ties; 0 for a row of NaN
      if (threadIdx.x == 0) a.out_tokens[row] = best == 0 ? 0 : entry_of(best).id;
      __syncthreads();
      continue;
    }
    const float u = sampling_uniform(p, a.positions[row]);
    if (fast) {
      const int32_t token = sample_fast<T>(sh, src, p, best_t, best, max_w, u);
      if (token >= 0) {
        if (threadIdx.x == 0) a.out_tokens[row] = token;
        __syncthreads();
        continue;
      }
    }
    if (!ws_ready) {
      __syncthreads();
      src.scan([&](int64_t i, float x) { w[i] = x; });
      __syncthreads();
    }

    RowSel sel{max_w, false, 0, -1, false, 0, -1, p.min_p};
    // Step 4: top-k boundary (k-th largest w; ties toward lower ids).
    if (use_k) {
      unsigned long long above = 0, need = 0;
      const uint32_t kk = radix_select_desc(
          sh, w, V, src.w_vec, [](int64_t, float x) { return orderable(x); },
          [](int64_t, float x) { return x != x ? 0ull : 1ull; },
          [&](unsigned long long total) {
            const unsigned long long k = static_cast<unsigned long long>(p.top_k);
            return k < total ? k : total;
          },
          &above, &need);
      auto tied = [&](int64_t, float x) { return (x == x && orderable(x) == kk) ? 1ull : 0ull; };
      tile_sums(sh, w, V, tied);
      const int64_t id = first_above(sh, w, V, need - above - 1, tied);  // 0-based among the ties
      sel.use_k = true;
      sel.k_key = kk;
      sel.k_id = id >= 0 ? id : V;
    }

    // Step 6: top-p boundary over the kept masses.
    if (p.top_p < 1.0f) {
      unsigned long long above = 0, need = 0;
      const uint32_t pb = radix_select_desc(
          sh, w, V, src.w_vec, [&](int64_t, float x) { return __float_as_uint(sel.mass(x)); },
          [&](int64_t i, float x) { return sel.kept_k(i, x) ? mass_fx(sel.mass(x)) : 0ull; },
          [&](unsigned long long total) { return top_p_need(p.top_p, total); }, &above, &need);
      if (need >= 1) {
        const unsigned long long each = mass_fx(__uint_as_float(pb));
        // Tied masses enter in ascending id order until the prefix reaches need.
        unsigned long long j = each > 0 ? (need - above + each - 1) / each : 1;
        if (j < 1) j = 1;
        auto tied = [&](int64_t i, float x) {
          return (sel.kept_k(i, x) && __float_as_uint(sel.mass(x)) == pb) ? 1ull : 0ull;
        };
        tile_sums(sh, w, V, tied);
        const int64_t id = first_above(sh, w, V, j - 1, tied);
        sel.use_p = true;
        sel.p_bits = pb;
        sel.p_id = id >= 0 ? id : V;
      }
    }

    // Steps 7–8: min-p, then the inverse CDF in ascending id order.
    auto weight = [&](int64_t i, float x) { return sel.weight(i, x); };
    const unsigned long long total = tile_sums(sh, w, V, weight);
    int32_t token = best == 0 ? 0 : entry_of(best).id;  // nothing kept (cannot happen for finite rows): the argmax
    if (total > 0) {
      unsigned long long target =
          static_cast<unsigned long long>(floor(static_cast<double>(u) * static_cast<double>(total)));
      if (target >= total) target = total - 1;
      const int64_t id = first_above(sh, w, V, target, weight);
      token = static_cast<int32_t>(id >= 0 ? id : 0);
    }
    if (threadIdx.x == 0) a.out_tokens[row] = token;
    __syncthreads();
  }
}

int sample_blocks(int64_t rows) {
  const int64_t cap = int64_t(detail::sm_count()) * 2;
  return static_cast<int>(rows < cap ? rows : cap);
}

// ---------------------------------------------------------------------------------------------
// Split-row sampling (kernels/sampling_split.h): rows of the general path (T > 0, no top-k, no
// penalties) cut into C chunks of one block each, for batches too small to fill the device one
// block per row. Same math in the same fixed point as sample_kernel, so the same token:
//   split_best     (C × rows)  each chunk's best key; the row's histograms zeroed
//   split_hist ×3  (C × rows)  the top-p radix passes: each block finds the bins of the passes
//                              before from the row's histograms, then adds its chunk's weights
//   split_weights  (C × rows)  per chunk: tokens of mass κ, and the kept weight without them
//   split_pick     (rows)      the j-th tie, the chunk the CDF target falls in, the id inside it

constexpr int kSplitThreads = 256;
constexpr int kSplitMaxChunks = 64;
constexpr int kSplitMinChunkIds = 2048;

struct SplitWs {
  unsigned long long* best;   // [rows][C] chunk best keys
  unsigned long long* hist;   // [rows][passes][kMaxRadixBins] radix histograms
  unsigned long long* ties;   // [rows][C] tokens of mass κ per chunk
  unsigned long long* above;  // [rows][C] kept weight per chunk, ties left out
};

struct SplitKernelArgs {
  SampleArgs a;
  int chunks;
  SplitWs ws;
};

struct SplitShared {
  unsigned long long local[split::kMaxRadixBins];
  unsigned long long red[32];
  unsigned long long above, rank, sub_target;
  int64_t found;
  int bin, chunk;
};

template <class T>
__device__ __forceinline__ float split_w(const T* z, int64_t i, float temp) {
  return ld1(z + i) / temp;  // sample_kernel's w, bit for bit
}

// The row's best key from its chunks' (0: no non-NaN value).
__device__ unsigned long long split_row_best(const SplitKernelArgs& ka, int64_t row, SplitShared& sh) {
  unsigned long long b = 0;
  for (int c = threadIdx.x; c < ka.chunks; c += blockDim.x) {
    const unsigned long long k = ka.ws.best[row * ka.chunks + c];
    b = k > b ? k : b;
  }
  return block_max_u64(b, sh.red);
}

// One radix step over the row's histogram of `pass`: warp 0 scans lane shares from the top, the
// lane where the need is reached walks its bins (split::walk_bins_desc). All threads call it.
__device__ void split_find_bin(const unsigned long long* hist, int pass, split::RadixState& s, SplitShared& sh) {
  const int nb = split::radix_bins(pass);
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, per = nb / 32;
    const int hi = nb - lane * per, lo = hi - per;  // lane 0 holds the highest bins
    unsigned long long mine = 0;
    for (int b = lo; b < hi; ++b) mine += hist[b];
    unsigned long long incl = mine;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const unsigned long long up = __shfl_up_sync(kFull, incl, o);
      if (lane >= o) incl += up;
    }
    const unsigned hit = __ballot_sync(kFull, s.above + incl >= s.need);
    const int owner = hit ? __ffs(hit) - 1 : 31;  // need beyond the total: the lowest bin
    if (lane == owner) {
      unsigned long long above = 0;
      sh.bin = split::walk_bins_desc(hist, lo, hi, s.above + incl - mine, s.need, &above);
      sh.above = above;
    }
  }
  __syncthreads();
  split::radix_advance(s, pass, sh.bin, sh.above);
  __syncthreads();
}

// The radix select after `passes` passes of the row's histograms (the need from pass 0's total).
__device__ split::RadixState split_state(const unsigned long long* hist, int passes, float top_p, SplitShared& sh) {
  split::RadixState s;
  if (passes == 0) return s;
  unsigned long long t = 0;
  for (int b = threadIdx.x; b < split::radix_bins(0); b += blockDim.x) t += hist[b];
  s.need = split::top_p_need(top_p, detail::block_sum<unsigned long long>(t, sh.red));
  for (int q = 0; q < passes; ++q) split_find_bin(hist + q * split::kMaxRadixBins, q, s, sh);
  return s;
}

// Exclusive prefix sum over the block (every thread gets its own).
__device__ unsigned long long block_exclusive_sum(unsigned long long x, SplitShared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long incl = x;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long up = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += up;
  }
  __syncthreads();
  if (lane == 31) sh.red[warp] = incl;
  __syncthreads();
  unsigned long long off = 0;
  for (int w = 0; w < warp; ++w) off += sh.red[w];
  return off + incl - x;
}

// The first id of [b, e), ascending, whose running sum of f exceeds target, or −1: each thread
// sums a contiguous share, the one whose share holds the target walks it. All threads call it.
template <class F>
__device__ int64_t block_first_exceeding(int64_t b, int64_t e, unsigned long long target, F f, SplitShared& sh) {
  const int64_t per = (e - b + blockDim.x - 1) / blockDim.x;
  const int64_t lo = b + threadIdx.x * per < e ? b + threadIdx.x * per : e;
  const int64_t hi = lo + per < e ? lo + per : e;
  unsigned long long mine = 0;
  for (int64_t i = lo; i < hi; ++i) mine += f(i);
  const unsigned long long before = block_exclusive_sum(mine, sh);
  if (threadIdx.x == 0) sh.found = -1;
  __syncthreads();
  if (before <= target && target < before + mine) {
    unsigned long long cum = before;
    for (int64_t i = lo; i < hi; ++i) {
      cum += f(i);
      if (cum > target) {
        sh.found = i;
        break;
      }
    }
  }
  __syncthreads();
  const int64_t found = sh.found;
  __syncthreads();
  return found;
}

template <class T>
__global__ void __launch_bounds__(kSplitThreads) split_best_kernel(SplitKernelArgs ka) {
  __shared__ SplitShared sh;
  const SampleArgs& a = ka.a;
  const int c = blockIdx.x;
  const int64_t row = blockIdx.y;
  const T* z = static_cast<const T*>(a.logits) + row * a.row_stride;
  const float temp = a.params[row].temperature;
  const split::Chunk ch = split::chunk_of(a.vocab, ka.chunks, c);
  unsigned long long best = 0;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    const unsigned long long k = topk_key(split_w(z, i, temp), i);
    best = k > best ? k : best;
  }
  best = block_max_u64(best, sh.red);
  if (threadIdx.x == 0) ka.ws.best[row * ka.chunks + c] = best;
  unsigned long long* h = ka.ws.hist + row * split::kRadixPasses * split::kMaxRadixBins;
  for (int j = c * blockDim.x + threadIdx.x; j < split::kRadixPasses * split::kMaxRadixBins; j += ka.chunks * blockDim.x) h[j] = 0;
}

template <class T>
__global__ void __launch_bounds__(kSplitThreads) split_hist_kernel(SplitKernelArgs ka, int pass) {
  __shared__ SplitShared sh;
  const SampleArgs& a = ka.a;
  const int c = blockIdx.x;
  const int64_t row = blockIdx.y;
  const SamplingParams p = a.params[row];
  if (!(p.top_p < 1.0f)) return;  // the whole row's blocks: no top-p
  const unsigned long long best = split_row_best(ka, row, sh);
  if (best == 0 || !(entry_of(best).value > kNegInf)) return;  // the argmax: no draw
  const float max_w = entry_of(best).value;
  unsigned long long* hist = ka.ws.hist + row * split::kRadixPasses * split::kMaxRadixBins;
  const split::RadixState s = split_state(hist, pass, p.top_p, sh);
  const int nb = split::radix_bins(pass);
  for (int b = threadIdx.x; b < nb; b += blockDim.x) sh.local[b] = 0;
  __syncthreads();
  const T* z = static_cast<const T*>(a.logits) + row * a.row_stride;
  const split::Chunk ch = split::chunk_of(a.vocab, ka.chunks, c);
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    const float m = split::mass_of(split_w(z, i, p.temperature), max_w);
    const unsigned long long g = split::mass_weight(m);
    if (!g) continue;
    const int b = split::radix_bin(s, pass, split::mass_bits(m));
    if (b >= 0) atomicAdd(&sh.local[b], g);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < nb; b += blockDim.x)
    if (sh.local[b]) atomicAdd(&hist[pass * split::kMaxRadixBins + b], sh.local[b]);
}

// Which tokens the draw keeps, ties left out (p_id −1), or nothing to draw (false).
__device__ bool split_kept(const SplitKernelArgs& ka, int64_t row, const SamplingParams& p, SplitShared& sh, float* max_w,
                           split::Kept* kept, split::RadixState* state) {
  const unsigned long long best = split_row_best(ka, row, sh);
  if (best == 0 || !(entry_of(best).value > kNegInf)) return false;
  *max_w = entry_of(best).value;
  kept->min_p = p.min_p;
  if (p.top_p < 1.0f) {
    *state = split_state(ka.ws.hist + row * split::kRadixPasses * split::kMaxRadixBins, split::kRadixPasses, p.top_p, sh);
    if (state->need >= 1) {
      kept->use_p = true;
      kept->p_bits = state->prefix;
      kept->p_id = -1;
    }
  }
  return true;
}

template <class T>
__global__ void __launch_bounds__(kSplitThreads) split_weights_kernel(SplitKernelArgs ka) {
  __shared__ SplitShared sh;
  const SampleArgs& a = ka.a;
  const int c = blockIdx.x;
  const int64_t row = blockIdx.y;
  const SamplingParams p = a.params[row];
  float max_w = kNegInf;
  split::Kept kept;
  split::RadixState state;
  unsigned long long ties = 0, above = 0;
  if (split_kept(ka, row, p, sh, &max_w, &kept, &state)) {
    const T* z = static_cast<const T*>(a.logits) + row * a.row_stride;
    const split::Chunk ch = split::chunk_of(a.vocab, ka.chunks, c);
    for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
      const float m = split::mass_of(split_w(z, i, p.temperature), max_w);
      if (kept.use_p && split::mass_bits(m) == kept.p_bits) ++ties;
      above += kept.weight(i, m);
    }
  }
  ties = detail::block_sum<unsigned long long>(ties, sh.red);
  above = detail::block_sum<unsigned long long>(above, sh.red);
  if (threadIdx.x == 0) {
    ka.ws.ties[row * ka.chunks + c] = ties;
    ka.ws.above[row * ka.chunks + c] = above;
  }
}

template <class T>
__global__ void __launch_bounds__(kSplitThreads) split_pick_kernel(SplitKernelArgs ka) {
  __shared__ SplitShared sh;
  const SampleArgs& a = ka.a;
  const int64_t row = blockIdx.x;
  const int C = ka.chunks;
  const int64_t V = a.vocab;
  const SamplingParams p = a.params[row];
  const unsigned long long best = split_row_best(ka, row, sh);
  const int32_t argmax = best == 0 ? 0 : entry_of(best).id;
  float max_w = kNegInf;
  split::Kept kept;
  split::RadixState state;
  if (!split_kept(ka, row, p, sh, &max_w, &kept, &state)) {
    if (threadIdx.x == 0) a.out_tokens[row] = argmax;
    return;
  }
  const T* z = static_cast<const T*>(a.logits) + row * a.row_stride;
  auto mass = [&](int64_t i) { return split::mass_of(split_w(z, i, p.temperature), max_w); };
  const unsigned long long* ties = ka.ws.ties + row * C;
  const unsigned long long* above = ka.ws.above + row * C;
  // Step 3's last tie: the chunk whose tie count reaches j, then the id inside it.
  if (threadIdx.x == 0) {
    sh.chunk = C;
    if (kept.use_p) {
      const unsigned long long j = split::ties_kept(state.need, state.above, split::mass_weight(split::mass_from_bits(kept.p_bits)));
      unsigned long long cum = 0;
      for (int c = 0; c < C; ++c) {
        if (cum + ties[c] >= j) {
          sh.chunk = c;
          sh.rank = j - cum;
          break;
        }
        cum += ties[c];
      }
    }
  }
  __syncthreads();
  const int tie_chunk = sh.chunk;
  const unsigned long long tie_rank = sh.rank;
  __syncthreads();
  kept.p_id = V;  // every tie kept, unless the j-th is found
  if (tie_chunk < C) {
    const split::Chunk ch = split::chunk_of(V, C, tie_chunk);
    const int64_t id = block_first_exceeding(ch.begin, ch.end, tie_rank - 1, [&](int64_t i) {
      return split::mass_bits(mass(i)) == kept.p_bits ? 1ull : 0ull;
    }, sh);
    if (id >= 0) kept.p_id = id;
  }
  // Steps 4–5: each chunk's kept weight, the chunk the target falls in, the id inside it.
  if (threadIdx.x == 0) {
    const unsigned long long each = kept.use_p ? kept.tie_weight() : 0;
    auto chunk_weight = [&](int c) {
      const unsigned long long n = tie_chunk >= C || c < tie_chunk ? ties[c] : c == tie_chunk ? tie_rank : 0;
      return above[c] + n * each;
    };
    unsigned long long total = 0;
    for (int c = 0; c < C; ++c) total += chunk_weight(c);
    sh.chunk = -1;
    if (total > 0) {
      const unsigned long long target = split::cdf_target(sampling_uniform(p, a.positions[row]), total);
      unsigned long long cum = 0;
      for (int c = 0; c < C; ++c) {
        const unsigned long long wc = chunk_weight(c);
        if (cum + wc > target) {
          sh.chunk = c;
          sh.sub_target = target - cum;
          break;
        }
        cum += wc;
      }
    }
  }
  __syncthreads();
  const int pick_chunk = sh.chunk;
  const unsigned long long sub_target = sh.sub_target;
  __syncthreads();
  if (pick_chunk < 0) {  // nothing kept (cannot happen for finite rows): the argmax
    if (threadIdx.x == 0) a.out_tokens[row] = argmax;
    return;
  }
  const split::Chunk ch = split::chunk_of(V, C, pick_chunk);
  const int64_t id = block_first_exceeding(ch.begin, ch.end, sub_target, [&](int64_t i) { return kept.weight(i, mass(i)); }, sh);
  if (threadIdx.x == 0) a.out_tokens[row] = static_cast<int32_t>(id >= 0 ? id : 0);
}

// Chunks per row for `rows` rows: enough blocks to fill the device twice over, each chunk at
// least kSplitMinChunkIds ids; 1 means the batch fills the device one block per row already.
int split_chunks(int64_t rows, int64_t vocab) {
  if (rows <= 0) return 1;
  int64_t c = int64_t(detail::sm_count()) * 2 / rows;
  c = std::min<int64_t>(c, kSplitMaxChunks);
  c = std::min<int64_t>(c, vocab / kSplitMinChunkIds);
  return static_cast<int>(std::max<int64_t>(c, 1));
}

size_t split_ws_bytes(int64_t rows, int chunks) {
  return size_t(rows) * (size_t(3) * chunks + size_t(split::kRadixPasses) * split::kMaxRadixBins) * sizeof(unsigned long long);
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
  SampleKernelArgs ka;
  ka.a = a;
  ka.ws_w = static_cast<float*>(workspace);
  ka.ws_marks = reinterpret_cast<int32_t*>(ka.ws_w + int64_t(blocks) * a.vocab);
  const size_t esz = a.dtype == DType::F32 ? sizeof(float) : sizeof(__nv_bfloat16);
  ka.z_vec = detail::aligned16(a.logits) && (size_t(a.row_stride) * esz) % 16 == 0;
  static_assert(sizeof(SampleShared) <= 48 * 1024, "sample_kernel's shared memory must fit the default 48 KiB");
  const size_t smem = sizeof(SampleShared);
  auto kernel = a.dtype == DType::F32 ? sample_kernel<float> : sample_kernel<__nv_bfloat16>;
  kernel<<<blocks, kSampleThreads, smem, stream>>>(ka);
  return detail::launched("sample_kernel");
}

int sample_split_chunks(int64_t rows, int64_t vocab) { return split_chunks(rows, vocab); }

size_t sample_split_workspace_bytes(int64_t rows, int64_t vocab) {
  if (rows <= 0 || vocab <= 0) return 256;
  // rows · C ≤ max(2 · SMs, rows) for every batch of at most `rows` rows (split_chunks).
  const size_t row_chunks = std::max<size_t>(size_t(detail::sm_count()) * 2, size_t(rows));
  return (3 * row_chunks + size_t(rows) * split::kRadixPasses * split::kMaxRadixBins) * sizeof(unsigned long long) + 256;
}

cudaError_t sample_tokens_split(const SampleArgs& a, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  if (a.rows < 0 || a.vocab < 0) return invalid("sample_tokens_split: negative rows or vocab");
  if (a.rows == 0) return cudaSuccess;
  if (!a.logits || !a.params || !a.positions || !a.out_tokens) return invalid("sample_tokens_split: null argument");
  if (a.row_stride < a.vocab) return invalid("sample_tokens_split: row_stride < vocab");
  if (a.vocab < 2 || a.vocab > 2147483647) return invalid("sample_tokens_split: vocab outside [2, 2^31)");
  if (a.rows > 65535) return invalid("sample_tokens_split: more than 65,535 rows");
  if (a.history || a.generated) return invalid("sample_tokens_split: penalties are not split (no history ids)");
  const int C = split_chunks(a.rows, a.vocab);
  const size_t need = split_ws_bytes(a.rows, C);
  if (!workspace || workspace_bytes < need || (reinterpret_cast<uintptr_t>(workspace) & 255u) != 0)
    return invalid("sample_tokens_split: workspace missing, unaligned or smaller than " + std::to_string(need) + " bytes");
  SplitKernelArgs ka;
  ka.a = a;
  ka.chunks = C;
  unsigned long long* ws = static_cast<unsigned long long*>(workspace);
  const int64_t rc = a.rows * C;
  ka.ws.best = ws;
  ka.ws.ties = ws + rc;
  ka.ws.above = ws + 2 * rc;
  ka.ws.hist = ws + 3 * rc;
  const dim3 grid(static_cast<unsigned>(C), static_cast<unsigned>(a.rows));
  const bool f32 = a.dtype == DType::F32;
  (f32 ? split_best_kernel<float> : split_best_kernel<__nv_bfloat16>)<<<grid, kSplitThreads, 0, stream>>>(ka);
  AD_CUDA_TRY(detail::launched("split_best_kernel"));
  for (int pass = 0; pass < split::kRadixPasses; ++pass) {
    (f32 ? split_hist_kernel<float> : split_hist_kernel<__nv_bfloat16>)<<<grid, kSplitThreads, 0, stream>>>(ka, pass);
    AD_CUDA_TRY(detail::launched("split_hist_kernel"));
  }
  (f32 ? split_weights_kernel<float> : split_weights_kernel<__nv_bfloat16>)<<<grid, kSplitThreads, 0, stream>>>(ka);
  AD_CUDA_TRY(detail::launched("split_weights_kernel"));
  (f32 ? split_pick_kernel<float> : split_pick_kernel<__nv_bfloat16>)<<<static_cast<unsigned>(a.rows), kSplitThreads, 0, stream>>>(ka);
  return detail::launched("split_pick_kernel");
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
