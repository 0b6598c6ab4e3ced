#include "cpu/logit_stats_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace ad::cpu {
namespace {

// ---------------------------------------------------------------------------------------------
// 16-lane float vectors through GCC/Clang vector extensions: one zmm register with AVX-512, two
// ymm with AVX2, plain lanes elsewhere. Comparisons are written as selects so that NaN flows
// through (a NaN logit must poison the sums, not vanish).

typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

inline v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store16(float* p, v16f v) { std::memcpy(p, &v, sizeof v); }

inline v16f splat(float x) { return v16f{} + x; }

// The first n (< 16) lanes from p, the rest `fill`.
inline v16f load_partial(const float* p, int64_t n, float fill) {
  float buf[kLanes];
  for (int64_t i = 0; i < kLanes; ++i) buf[i] = i < n ? p[i] : fill;
  return load16(buf);
}

inline void store_partial(float* p, v16f v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = v[i];
}

inline v16f vmax(v16f a, v16f b) { return a > b ? a : b; }
inline v16f clamp_below(v16f x, float lo) { return x < lo ? splat(lo) : x; }  // NaN stays NaN
inline v16f clamp_above(v16f x, float hi) { return x > hi ? splat(hi) : x; }

inline float hmax(v16f v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

inline double hsum(v16f v) {
  double s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// True when some lane is > thr (mostly false: the top-K and sampler filters' fast path).
inline bool any_gt(v16f v, float thr) {
#if defined(__AVX512F__)
  __m512 x;
  std::memcpy(&x, &v, sizeof x);
  return _mm512_cmp_ps_mask(x, _mm512_set1_ps(thr), _CMP_GT_OQ) != 0;
#elif defined(__AVX2__)
  __m256 lo, hi, t = _mm256_set1_ps(thr);
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  return (_mm256_movemask_ps(_mm256_cmp_ps(lo, t, _CMP_GT_OQ)) | _mm256_movemask_ps(_mm256_cmp_ps(hi, t, _CMP_GT_OQ))) != 0;
#else
  v16i m = v > thr;
  int any = 0;
  for (int i = 0; i < kLanes; ++i) any |= m[i];
  return any != 0;
#endif
}

inline bool any_ge(v16f v, float thr) {
#if defined(__AVX512F__)
  __m512 x;
  std::memcpy(&x, &v, sizeof x);
  return _mm512_cmp_ps_mask(x, _mm512_set1_ps(thr), _CMP_GE_OQ) != 0;
#elif defined(__AVX2__)
  __m256 lo, hi, t = _mm256_set1_ps(thr);
  std::memcpy(&lo, &v, sizeof lo);
  std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof lo, sizeof hi);
  return (_mm256_movemask_ps(_mm256_cmp_ps(lo, t, _CMP_GE_OQ)) | _mm256_movemask_ps(_mm256_cmp_ps(hi, t, _CMP_GE_OQ))) != 0;
#else
  v16i m = v >= thr;
  int any = 0;
  for (int i = 0; i < kLanes; ++i) any |= m[i];
  return any != 0;
#endif
}

// e^x, Cephes expf scheme: x = n·ln2 + r with |r| ≤ ln2/2 (Cody–Waite split of ln2, so n·C1 is
// exact), a degree-6 polynomial for e^r, 2^n built in the exponent bits. ≈1 ulp on
// [−87.3, 88.3]; 0 below −87.34 (the result would be subnormal), +inf above 88.37.
constexpr float kExpLo = -87.33654475f;  // ln 2^−126
constexpr float kExpHi = 88.37626266f;   // ln 2^127.5: keeps n ≤ 127
inline v16f vexp(v16f x) {
  v16f xc = clamp_above(clamp_below(x, kExpLo), kExpHi);
  const float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer in the low bits
  v16f t = xc * 1.44269504088896341f + kRound;
  v16f n = t - kRound;
  v16f r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  v16f p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  v16i bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits - 0x4B400000 + 127) << 23;  // 0x4B400000 = bits of kRound: leaves n
  v16f scale;
  std::memcpy(&scale, &bits, sizeof scale);
  v16f y = p * scale;
  y = x < kExpLo ? splat(0.0f) : y;
  return x > kExpHi ? splat(INFINITY) : y;
}

// ---------------------------------------------------------------------------------------------
// The fused row scan

constexpr int64_t kBlock = 1024;      // floats per block: z and ref blocks stay in L1 for pass B
constexpr int64_t kMinChunk = 16384;  // smallest vocabulary chunk worth a thread
constexpr float kExpArgFloor = -104.0f;  // e^{d} is already 0 here; keeps e·d finite (0·−inf = NaN)

struct BlockMax {
  float z, y;
};

// Offers lanes [0, n) of p (ids base + lane) to the heap.
inline void offer_lanes(const float* p, int64_t n, int64_t base, TopKEntry* heap, int& n_heap, int cap) {
  for (int64_t j = 0; j < n; ++j) topk_offer(heap, n_heap, cap, TopKEntry{p[j], static_cast<int32_t>(base + j)});
}

// Pass A over one block: maxima of z and y, and top-K candidates (one compare per 16 elements
// against the current K-th value once the heap is full).
template <bool kRef>
BlockMax block_max_and_topk(const float* z, const float* y, int64_t n, int64_t base, TopKEntry* heap, int& n_heap,
                            int cap) {
  v16f mz = splat(kNegInf), my = splat(kNegInf);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    v16f v = load16(z + i);
    mz = vmax(mz, v);
    if (n_heap < cap || any_gt(v, heap[0].value)) offer_lanes(z + i, kLanes, base + i, heap, n_heap, cap);
    if (kRef) my = vmax(my, load16(y + i));
  }
  if (i < n) {
    mz = vmax(mz, load_partial(z + i, n - i, kNegInf));
    offer_lanes(z + i, n - i, base + i, heap, n_heap, cap);
    if (kRef) my = vmax(my, load_partial(y + i, n - i, kNegInf));
  }
  return {hmax(mz), hmax(my)};
}

// Accumulators of pass B: f32 lanes, 4 independent sets so each sums at most kBlock/64 terms
// (relative error ≲ 1e-6 before the per-block fold into f64).
struct BlockAcc {
  v16f s[4] = {}, t[4] = {}, u[4] = {}, sy[4] = {};
};

template <bool kRef>
inline void accumulate(BlockAcc& a, int k, v16f z, v16f y, float bz, float by) {
  v16f d = clamp_below(z - bz, kExpArgFloor);
  v16f e = vexp(d);
  a.s[k] += e;
  a.t[k] += e * d;
  if (kRef) {
    v16f dy = y - by;
    a.u[k] += e > 0.0f ? e * dy : splat(0.0f);  // p = 0 terms add 0 even where q = 0
    a.sy[k] += vexp(clamp_below(dy, kExpArgFloor));
  }
}

inline double fold(const v16f* acc) { return hsum((acc[0] + acc[1]) + (acc[2] + acc[3])); }

// Pass B over one block (hot in L1): its softmax state relative to the block maxima.
template <bool kRef>
SoftmaxState<double> block_sums(const float* z, const float* y, int64_t n, BlockMax bm) {
  // A block with no finite z (or y) sums relative to 0: every e^{−inf} is then 0.
  float bz = bm.z > kNegInf ? bm.z : 0.0f;
  float by = bm.y > kNegInf ? bm.y : 0.0f;
  BlockAcc a;
  v16f zero = splat(0.0f);
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    for (int k = 0; k < 4; ++k) {
      const int64_t o = i + k * kLanes;
      accumulate<kRef>(a, k, load16(z + o), kRef ? load16(y + o) : zero, bz, by);
    }
  }
  for (; i + kLanes <= n; i += kLanes) accumulate<kRef>(a, 0, load16(z + i), kRef ? load16(y + i) : zero, bz, by);
  if (i < n) {
    accumulate<kRef>(a, 0, load_partial(z + i, n - i, kNegInf), kRef ? load_partial(y + i, n - i, kNegInf) : zero, bz,
                     by);
  }
  SoftmaxState<double> st;
  st.m = bm.z;
  st.s = fold(a.s);
  st.t = fold(a.t);
  if (kRef) {
    st.my = bm.y;
    st.sy = fold(a.sy);
    st.u = fold(a.u);
  }
  return st;
}

// One row chunk's partial result.
struct Partial {
  SoftmaxState<double> st;
  TopKEntry top[kMaxLogitTopK];
  int n_top = 0;
};

template <bool kRef>
void scan_chunk(const float* z, const float* y, int64_t begin, int64_t end, int cap, Partial& p) {
  for (int64_t b = begin; b < end; b += kBlock) {
    int64_t n = std::min(kBlock, end - b);
    BlockMax bm = block_max_and_topk<kRef>(z + b, kRef ? y + b : nullptr, n, b, p.top, p.n_top, cap);
    p.st = softmax_combine(p.st, block_sums<kRef>(z + b, kRef ? y + b : nullptr, n, bm));
  }
  topk_sort(p.top, p.n_top);
}

void scan(const float* z, const float* y, int64_t begin, int64_t end, int cap, Partial& p) {
  if (y) {
    scan_chunk<true>(z, y, begin, end, cap, p);
  } else {
    scan_chunk<false>(z, nullptr, begin, end, cap, p);
  }
}

// Merges b into a (both best-first).
void merge_partial(Partial& a, const Partial& b, int cap) {
  a.st = softmax_combine(a.st, b.st);
  TopKEntry merged[kMaxLogitTopK];
  a.n_top = topk_merge(a.top, a.n_top, b.top, b.n_top, merged, cap);
  std::copy(merged, merged + a.n_top, a.top);
}

int topk_capacity(int K) { return std::max(K, 2); }  // margin needs the runner-up even at K = 0

// Writes row r's outputs from its scalars and best-first top list.
void write_row_stats(const LogitStatsOut& out, int64_t r, int K, const LogitRowStats& s, const TopKEntry* top, int n_top,
                     bool has_ref) {
  out.max_logit[r] = s.max_logit;
  out.logsumexp[r] = s.logsumexp;
  out.entropy[r] = s.entropy;
  out.margin[r] = s.margin;
  if (out.chosen_logprob) out.chosen_logprob[r] = s.chosen_logprob;
  for (int j = 0; j < K; ++j) {
    bool real = j < n_top;
    out.topk_ids[r * K + j] = real ? top[j].id : -1;
    out.topk_logits[r * K + j] = real ? top[j].value : kNegInf;
  }
  if (has_ref) {
    out.k1[r] = s.k1;
    out.k2[r] = s.k2;
    out.k3[r] = s.k3;
    out.kl_exact[r] = s.kl_exact;
  }
}

// Writes row r's outputs from its finished (sorted) partial.
void write_row(const LogitStatsOut& out, int64_t r, const float* z, const float* y, int64_t vocab, const int32_t* targets,
               int K, const Partial& p) {
  int32_t target = targets ? targets[r] : -1;
  bool has_target = target >= 0 && target < vocab;
  LogitRowStats s = logit_stats_finalize(p.st, p.top, p.n_top, has_target, has_target ? z[target] : 0.0f, y != nullptr,
                                         (has_target && y) ? y[target] : 0.0f);
  write_row_stats(out, r, K, s, p.top, p.n_top, y != nullptr);
}

// Vocabulary chunks per row: 1 when rows alone keep every thread busy.
int64_t chunks_per_row(int64_t rows, int64_t vocab, int threads) {
  if (rows >= threads) return 1;
  int64_t want = (threads + rows - 1) / rows;
  return std::max<int64_t>(1, std::min(want, vocab / kMinChunk));
}

// Chunk c of `chunks` over [0, vocab), boundaries on 16-element lanes.
int64_t chunk_begin(int64_t vocab, int64_t chunks, int64_t c) {
  if (c >= chunks) return vocab;
  return (vocab * c / chunks) & ~(kLanes - 1);
}

}  // namespace

void logit_stats(ThreadPool& pool, const float* logits, int64_t rows, int64_t vocab, int64_t row_stride,
                 const int32_t* targets, int K, const float* ref, const LogitStatsOut& out) {
  if (rows <= 0 || vocab <= 0) return;
  const int cap = topk_capacity(K);
  auto row_z = [&](int64_t r) { return logits + r * row_stride; };
  auto row_y = [&](int64_t r) { return ref ? ref + r * row_stride : nullptr; };
  const int64_t chunks = chunks_per_row(rows, vocab, pool.size());
  if (chunks == 1) {
    pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
      for (int64_t r = r0; r < r1; ++r) {
        Partial p;
        scan(row_z(r), row_y(r), 0, vocab, cap, p);
        write_row(out, r, row_z(r), row_y(r), vocab, targets, K, p);
      }
    });
    return;
  }
  std::vector<Partial> parts(static_cast<size_t>(rows * chunks));
  pool.parallel_for(rows * chunks, 1, [&](int64_t i0, int64_t i1, int) {
    for (int64_t i = i0; i < i1; ++i) {
      int64_t r = i / chunks, c = i % chunks;
      scan(row_z(r), row_y(r), chunk_begin(vocab, chunks, c), chunk_begin(vocab, chunks, c + 1), cap, parts[i]);
    }
  });
  for (int64_t r = 0; r < rows; ++r) {
    Partial& p = parts[r * chunks];
    for (int64_t c = 1; c < chunks; ++c) merge_partial(p, parts[r * chunks + c], cap);
    write_row(out, r, row_z(r), row_y(r), vocab, targets, K, p);
  }
}

void logit_stats_scalar(ThreadPool& pool, const float* logits, int64_t rows, int64_t vocab, int64_t row_stride,
                        const int32_t* targets, int K, const float* ref, const LogitStatsOut& out) {
  pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
    TopKEntry heap[kMaxLogitTopK];
    for (int64_t r = r0; r < r1; ++r) {
      const float* z = logits + r * row_stride;
      const float* y = ref ? ref + r * row_stride : nullptr;
      int n_top = 0;
      LogitRowStats s = logit_stats_row<double>(z, y, vocab, targets ? targets[r] : -1, K, heap, &n_top);
      write_row_stats(out, r, K, s, heap, n_top, y != nullptr);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Naive multi-pass baseline

namespace {

struct NaiveRow {
  double lse, entropy;
  float max_logit;
};

float naive_max(const float* z, int64_t n) {
  float m = kNegInf;
  for (int64_t i = 0; i < n; ++i) m = z[i] > m ? z[i] : m;
  return m;
}

double naive_lse(const float* z, int64_t n) {
  float m = naive_max(z, n);  // pass 1
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += expf(z[i] - m);  // pass 2
  return m + std::log(s);
}

double naive_entropy(const float* z, int64_t n, double lse) {
  double h = 0;
  for (int64_t i = 0; i < n; ++i) {
    float lp = static_cast<float>(z[i] - lse);
    float p = expf(lp);
    if (p > 0) h -= p * lp;
  }
  return h;
}

double naive_kl(const float* z, const float* y, int64_t n, double lse_z, double lse_y) {
  double kl = 0;
  for (int64_t i = 0; i < n; ++i) {
    float lp = static_cast<float>(z[i] - lse_z);
    float p = expf(lp);
    if (p > 0) kl += p * (lp - static_cast<float>(y[i] - lse_y));
  }
  return kl;
}

// Top `count` ids by (value desc, id asc) via std::partial_sort over an index array.
void naive_topk(const float* z, int64_t n, int count, std::vector<int32_t>& idx) {
  idx.resize(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  auto before = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + std::min<int64_t>(count, n), idx.end(), before);
}

}  // namespace

void logit_stats_naive(ThreadPool& pool, const float* logits, int64_t rows, int64_t vocab, int64_t row_stride,
                       const int32_t* targets, int K, const float* ref, const LogitStatsOut& out) {
  pool.parallel_for(rows, 1, [&](int64_t r0, int64_t r1, int) {
    std::vector<int32_t> idx;
    for (int64_t r = r0; r < r1; ++r) {
      const float* z = logits + r * row_stride;
      const float* y = ref ? ref + r * row_stride : nullptr;
      double lse = naive_lse(z, vocab);
      out.max_logit[r] = naive_max(z, vocab);
      out.logsumexp[r] = static_cast<float>(lse);
      out.entropy[r] = static_cast<float>(naive_entropy(z, vocab, lse));
      naive_topk(z, vocab, topk_capacity(K), idx);
      out.margin[r] = vocab >= 2 ? z[idx[0]] - z[idx[1]] : INFINITY;
      for (int j = 0; j < K; ++j) {
        out.topk_ids[r * K + j] = j < vocab ? idx[j] : -1;
        out.topk_logits[r * K + j] = j < vocab ? z[idx[j]] : kNegInf;
      }
      int32_t target = targets ? targets[r] : -1;
      bool has_target = target >= 0 && target < vocab;
      double logp = has_target ? z[target] - lse : NAN;
      if (out.chosen_logprob) out.chosen_logprob[r] = static_cast<float>(logp);
      if (y) {
        double lse_y = naive_lse(y, vocab);
        out.kl_exact[r] = static_cast<float>(naive_kl(z, y, vocab, lse, lse_y));
        double logq = has_target ? y[target] - lse_y : NAN;
        kl_estimators<double>(logp, logq, out.k1[r], out.k2[r], out.k3[r]);
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Row primitives

void exp_f32(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store16(y + i, vexp(load16(x + i)));
  if (i < n) store_partial(y + i, vexp(load_partial(x + i, n - i, 0.0f)), n - i);
}

double exp_shifted(const float* x, int64_t n, float shift, float* out, float floor) {
  auto floored = [floor](v16f e) { return e < floor ? splat(0.0f) : e; };
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    // Fold f32 lanes into f64 every kBlock elements, as in the fused pass.
    int64_t end = std::min(n, i + kBlock);
    v16f acc = splat(0.0f);
    for (; i + kLanes <= end; i += kLanes) {
      v16f e = floored(vexp(load16(x + i) - shift));
      acc += e;
      store16(out + i, e);
    }
    if (i < end) {
      v16f e = floored(vexp(load_partial(x + i, end - i, kNegInf) - shift));
      acc += e;
      store_partial(out + i, e, end - i);
      i = end;
    }
    total += hsum(acc);
  }
  return total;
}

double sum_f32(const float* x, int64_t n) {
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    int64_t end = std::min(n, i + kBlock);
    v16f acc[2] = {splat(0.0f), splat(0.0f)};
    for (; i + 2 * kLanes <= end; i += 2 * kLanes) {
      acc[0] += load16(x + i);
      acc[1] += load16(x + i + kLanes);
    }
    for (; i + kLanes <= end; i += kLanes) acc[0] += load16(x + i);
    if (i < end) {
      acc[1] += load_partial(x + i, end - i, 0.0f);
      i = end;
    }
    total += hsum(acc[0] + acc[1]);
  }
  return total;
}

float max_f32(const float* x, int64_t n) {
  v16f m = splat(kNegInf);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) m = vmax(m, load16(x + i));
  if (i < n) m = vmax(m, load_partial(x + i, n - i, kNegInf));
  return hmax(m);
}

void topk_scan(const float* x, int64_t n, int32_t base, TopKEntry* heap, int& n_heap, int cap) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if (n_heap < cap || any_gt(load16(x + i), heap[0].value)) offer_lanes(x + i, kLanes, base + i, heap, n_heap, cap);
  }
  if (i < n) offer_lanes(x + i, n - i, base + i, heap, n_heap, cap);
}

int64_t indices_at_least(const float* x, int64_t n, float cutoff, int32_t* ids) {
  int64_t count = 0, i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if (!any_ge(load16(x + i), cutoff)) continue;
    for (int64_t j = i; j < i + kLanes; ++j) {
      if (x[j] >= cutoff) ids[count++] = static_cast<int32_t>(j);
    }
  }
  for (; i < n; ++i) {
    if (x[i] >= cutoff) ids[count++] = static_cast<int32_t>(i);
  }
  return count;
}

}  // namespace ad::cpu
