#include "cpu/logit_stats_cpu.h"
#include "cpu/profiler.h"

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
// Native-width float vectors through GCC/Clang vector extensions: 16 lanes (one zmm) with
// AVX-512, 8 (one ymm) with AVX2, 4 elsewhere (SSE, NEON). Never wider than the ISA: a 64-byte
// vector on AVX2 is lowered through memory and runs ~10× slower. Comparisons are written as
// selects so that NaN flows through (a NaN logit must poison the sums, not vanish).

#if defined(__AVX512F__)
#define AD_VEC_BYTES 64
#elif defined(__AVX2__)
#define AD_VEC_BYTES 32
#else
#define AD_VEC_BYTES 16
#endif

typedef float vf __attribute__((vector_size(AD_VEC_BYTES)));
typedef int32_t vi __attribute__((vector_size(AD_VEC_BYTES)));
constexpr int64_t kLanes = AD_VEC_BYTES / 4;

inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }

inline vf splat(float x) { return vf{} + x; }

// The first n (< kLanes) lanes from p, the rest `fill`.
inline vf load_partial(const float* p, int64_t n, float fill) {
  float buf[kLanes];
  for (int64_t i = 0; i < kLanes; ++i) buf[i] = i < n ? p[i] : fill;
  return load(buf);
}

inline void store_partial(float* p, vf v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = v[i];
}

inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf clamp_below(vf x, float lo) { return x < lo ? splat(lo) : x; }  // NaN stays NaN

inline float hmax(vf v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

inline double hsum(vf v) {
  double s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// Bit j set when lane j is > thr (>= thr with kOrEqual). Mostly 0: the fast path of the top-K
// and the sampler's candidate filters.
template <bool kOrEqual>
inline uint32_t mask_above(vf v, float thr) {
#if defined(__AVX512F__)
  __m512 x;
  std::memcpy(&x, &v, sizeof x);
  return _mm512_cmp_ps_mask(x, _mm512_set1_ps(thr), kOrEqual ? _CMP_GE_OQ : _CMP_GT_OQ);
#elif defined(__AVX2__)
  __m256 x;
  std::memcpy(&x, &v, sizeof x);
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_cmp_ps(x, _mm256_set1_ps(thr), kOrEqual ? _CMP_GE_OQ : _CMP_GT_OQ)));
#else
  uint32_t m = 0;
  for (int i = 0; i < kLanes; ++i) m |= static_cast<uint32_t>(kOrEqual ? v[i] >= thr : v[i] > thr) << i;
  return m;
#endif
}

constexpr uint32_t kAllLanes = kLanes == 32 ? ~0u : (1u << kLanes) - 1;

inline int lowest_bit(uint32_t m) { return __builtin_ctz(m); }

// e^x for x >= kExpFloor (or NaN), Cephes expf scheme: x = n·ln2 + r with |r| ≤ ln2/2 (ln2 split
// Cody–Waite so n·C1 is exact), e^r = 1 + r + r²·P(r), 2^n built in the exponent bits. ≈1 ulp
// down to −87.3; at the floor n = −127 gives a zero scale, so e^{floor} is exactly 0.
constexpr float kExpFloor = -88.0f;
constexpr float kExpHi = 88.37626266f;  // ln 2^127.5: keeps n ≤ 127
inline vf vexp_from_floor(vf x) {
  const float kRound = 12582912.0f;  // 1.5·2^23: adding it rounds to an integer in the low bits
  vf t = x * 1.44269504088896341f + kRound;
  vf n = t - kRound;
  vf r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  vf p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  vi bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = (bits << 23) + (127 << 23);  // kRound's bits vanish in the shift, leaving (n + 127) << 23
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// e^x on the whole float range: 0 below −88, subnormal approximations in [−88, −87.3), +inf above
// 88.37.
inline vf vexp(vf x) {
  vf y = vexp_from_floor(clamp_below(x > kExpHi ? splat(kExpHi) : x, kExpFloor));
  return x > kExpHi ? splat(INFINITY) : y;
}

// ---------------------------------------------------------------------------------------------
// The fused row scan. Per block: pass A (block maxima, top-K candidates), then, if a maximum grew,
// the running sums are rescaled (rare after the first blocks), then pass B adds the block's
// e^{z−m} terms relative to the running maxima in f32 lanes and folds them into the f64 state.

constexpr int64_t kBlock = 64 * kLanes;  // 4 accumulator sets × kLanes lanes × 16 terms; 4 KiB at AVX-512
constexpr int64_t kMinChunk = 16384;     // smallest vocabulary chunk worth a thread

struct BlockMax {
  float z, y;
};

// Offers the lanes of p set in `lanes` (ids base + lane) to the heap; each is re-tested against
// the root, which rises as entries go in.
inline void offer_lanes(const float* p, uint32_t lanes, int64_t base, TopKEntry* heap, int& n_heap, int cap) {
  for (; lanes; lanes &= lanes - 1) {
    const int j = lowest_bit(lanes);
    topk_offer(heap, n_heap, cap, TopKEntry{p[j], static_cast<int32_t>(base + j)});
  }
}

// The lanes of v that may enter a heap: all until it is full, then those above its root.
inline uint32_t topk_candidates(vf v, const TopKEntry* heap, int n_heap, int cap) {
  return n_heap < cap ? kAllLanes : mask_above<false>(v, heap[0].value);
}

inline uint32_t first_lanes(int64_t n) { return n >= 32 ? ~0u : (1u << n) - 1; }

// The fused pass's top-K: a min-heap of 64-bit keys (value in the high word, mapped so that
// unsigned order is float order; inverted id in the low word), so "ranks before" is one integer
// compare and the sift is branch-free: replacing the root walks the hole down to a leaf along
// the worse child (picked with a compare, not a branch; UINT64_MAX pads missing children), then
// lifts the newcomer, which rarely moves. ~25% cheaper than the (value, id) heap of the header,
// whose sift compares mispredict.
inline uint32_t orderable_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b ^ ((b >> 31) ? 0xFFFFFFFFu : 0x80000000u);
}

inline float from_orderable_bits(uint32_t o) {
  const uint32_t b = (o & 0x80000000u) ? (o ^ 0x80000000u) : ~o;
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

inline uint64_t topk_key(float value, int64_t id) {
  return (static_cast<uint64_t>(orderable_bits(value)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}

inline TopKEntry entry_of(uint64_t key) {
  return TopKEntry{from_orderable_bits(static_cast<uint32_t>(key >> 32)),
                   static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key))};
}

struct KeyHeap {
  uint64_t h[2 * kMaxLogitTopK + 2];  // h[0]: the K-th best key; UINT64_MAX past n
  int n = 0, cap;
  float threshold = kNegInf;  // values below it cannot enter: a seeded bound, then the root's value

  explicit KeyHeap(int capacity) : cap(capacity) { std::fill(h, h + 2 * kMaxLogitTopK + 2, ~uint64_t(0)); }

  void offer(float value, int64_t id) {
    if (!(value >= threshold)) return;  // below a seeded bound (or NaN): never ranks
    const uint64_t x = topk_key(value, id);
    int i;
    if (n < cap) {
      i = n++;
    } else {
      if (x <= h[0]) return;
      i = 0;
      for (int l = 1; l < n; l = 2 * i + 1) {  // hole to a leaf along the worse child
        const int c = l + (h[l + 1] < h[l]);
        h[i] = h[c];
        i = c;
      }
    }
    for (int p; i > 0 && h[p = (i - 1) / 2] > x; i = p) h[i] = h[p];
    h[i] = x;
    if (n == cap) threshold = from_orderable_bits(static_cast<uint32_t>(h[0] >> 32));
  }

  // The lanes of v worth offering (value ≥ threshold; an equal value enters only on a lower id,
  // which the key compare decides).
  uint32_t candidates(vf v) const { return mask_above<true>(v, threshold); }

  void offer_lanes(const float* p, uint32_t lanes, int64_t base) {
    for (; lanes; lanes &= lanes - 1) {
      const int j = lowest_bit(lanes);
      offer(p[j], base + j);
    }
  }

  // Best first into out; returns the count.
  int sorted(TopKEntry* out) const {
    uint64_t keys[2 * kMaxLogitTopK + 2];
    std::copy(h, h + n, keys);
    std::sort(keys, keys + n, [](uint64_t a, uint64_t b) { return a > b; });
    for (int j = 0; j < n; ++j) out[j] = entry_of(keys[j]);
    return n;
  }
};

// Pass A over one block: maxima of z and y, and top-K candidates (one compare per vector against
// the current K-th value once the heap is full).
template <bool kRef>
BlockMax block_max_and_topk(const float* z, const float* y, int64_t n, int64_t base, KeyHeap& top) {
  vf mz = splat(kNegInf), my = splat(kNegInf);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    vf v = load(z + i);
    mz = vmax(mz, v);
    if (uint32_t c = top.candidates(v)) top.offer_lanes(z + i, c, base + i);
    if (kRef) my = vmax(my, load(y + i));
  }
  if (i < n) {
    mz = vmax(mz, load_partial(z + i, n - i, kNegInf));
    top.offer_lanes(z + i, first_lanes(n - i), base + i);
    if (kRef) my = vmax(my, load_partial(y + i, n - i, kNegInf));
  }
  return {hmax(mz), kRef ? hmax(my) : kNegInf};
}

// Pass B accumulators: 4 independent sets (latency hiding), each lane summing at most 16 terms of
// a block before the fold into f64, so f32 rounding stays ≲ 1e-6 relative.
struct BlockAcc {
  vf s[4], t[4], u[4], sy[4];
  BlockAcc() {
    for (int k = 0; k < 4; ++k) s[k] = t[k] = u[k] = sy[k] = splat(0.0f);
  }
};

template <bool kRef>
inline void accumulate(BlockAcc& a, int k, vf z, vf y, float mz, float my) {
  vf d = clamp_below(z - mz, kExpFloor);  // e^{floor} = 0 and e·d stays finite (0·−inf = NaN)
  vf e = vexp_from_floor(d);
  a.s[k] += e;
  a.t[k] += e * d;
  if (kRef) {
    vf dy = y - my;
    a.u[k] += e > 0.0f ? e * dy : splat(0.0f);  // p = 0 adds 0 even where q = 0; p > 0, q = 0 → −inf
    a.sy[k] += vexp_from_floor(clamp_below(dy, kExpFloor));
  }
}

inline double fold(const vf* acc) { return hsum((acc[0] + acc[1]) + (acc[2] + acc[3])); }

// Pass B over one block (hot in L1): adds its terms to st, relative to st's maxima.
template <bool kRef>
void block_sums(const float* z, const float* y, int64_t n, SoftmaxState<double>& st) {
  // No finite value yet: sum relative to 0, where every e^{−inf} is 0.
  const float mz = st.m > kNegInf ? st.m : 0.0f;
  const float my = st.my > kNegInf ? st.my : 0.0f;
  BlockAcc a;
  const vf zero = splat(0.0f);
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    for (int k = 0; k < 4; ++k) {
      const int64_t o = i + k * kLanes;
      accumulate<kRef>(a, k, load(z + o), kRef ? load(y + o) : zero, mz, my);
    }
  }
  for (; i + kLanes <= n; i += kLanes) accumulate<kRef>(a, 0, load(z + i), kRef ? load(y + i) : zero, mz, my);
  if (i < n) {
    accumulate<kRef>(a, 1, load_partial(z + i, n - i, kNegInf), kRef ? load_partial(y + i, n - i, kNegInf) : zero, mz,
                     my);
  }
  st.s += fold(a.s);
  st.t += fold(a.t);
  if (kRef) {
    st.sy += fold(a.sy);
    st.u += fold(a.u);
  }
}

// One row chunk's partial result.
struct Partial {
  SoftmaxState<double> st;
  TopKEntry top[kMaxLogitTopK];  // best first
  int n_top = 0;
};

// A lower bound on a chunk's K-th largest value from its first block, so the heap does not take
// in most of that block while it is not yet full: the K-th largest of the block's per-vector
// maxima (K maxima are K distinct elements). −inf when the block has fewer than K vectors or a NaN.
float seed_threshold(const float* z, int64_t n, int cap) {
  const int64_t vecs = std::min<int64_t>(n, kBlock) / kLanes;
  if (vecs < cap) return kNegInf;
  float maxima[kBlock / kLanes];
  for (int64_t v = 0; v < vecs; ++v) {
    maxima[v] = hmax(load(z + v * kLanes));
    if (maxima[v] != maxima[v]) return kNegInf;
  }
  std::nth_element(maxima, maxima + (cap - 1), maxima + vecs, [](float a, float b) { return a > b; });
  return maxima[cap - 1];
}

template <bool kRef>
void scan_chunk(const float* z, const float* y, int64_t begin, int64_t end, int cap, Partial& p) {
  KeyHeap top(cap);
  top.threshold = seed_threshold(z + begin, end - begin, cap);
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    BlockMax bm = block_max_and_topk<kRef>(z + b, kRef ? y + b : nullptr, n, b, top);
    if (bm.z > p.st.m) softmax_rescale_z(p.st, bm.z);
    if (kRef && bm.y > p.st.my) softmax_rescale_y(p.st, bm.y);
    block_sums<kRef>(z + b, kRef ? y + b : nullptr, n, p.st);
  }
  p.n_top = top.sorted(p.top);
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

// Vocabulary chunks per row: the count c whose makespan ceil(rows·c / threads) · (vocab / c) is
// least (fewest chunks on ties), with chunks of at least kMinChunk. 1 when rows alone balance.
int64_t chunks_per_row(int64_t rows, int64_t vocab, int threads) {
  const int64_t most = std::max<int64_t>(1, std::min<int64_t>(4 * threads, vocab / kMinChunk));
  int64_t best = 1;
  double best_span = static_cast<double>((rows + threads - 1) / threads);
  for (int64_t c = 2; c <= most; ++c) {
    const double span = static_cast<double>((rows * c + threads - 1) / threads) / static_cast<double>(c);
    if (span < best_span * 0.999) {
      best = c;
      best_span = span;
    }
  }
  return best;
}

// Chunk c of `chunks` over [0, vocab), boundaries on whole vectors.
int64_t chunk_begin(int64_t vocab, int64_t chunks, int64_t c) {
  if (c >= chunks) return vocab;
  return (vocab * c / chunks) & ~(kLanes - 1);
}

}  // namespace

void logit_stats(ThreadPool& pool, const float* logits, int64_t rows, int64_t vocab, int64_t row_stride,
                 const int32_t* targets, int K, const float* ref, const LogitStatsOut& out) {
  if (rows <= 0 || vocab <= 0) return;
  AD_PROFILE("logit_stats", 4.0 * rows * vocab * (ref ? 2 : 1), (ref ? 12.0 : 6.0) * rows * vocab);
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
  for (; i + kLanes <= n; i += kLanes) store(y + i, vexp(load(x + i)));
  if (i < n) store_partial(y + i, vexp(load_partial(x + i, n - i, 0.0f)), n - i);
}

double exp_shifted(const float* x, int64_t n, float shift, float* out, float floor) {
  auto term = [shift, floor](vf v) {
    vf e = vexp_from_floor(clamp_below(v - shift, kExpFloor));
    return e < floor ? splat(0.0f) : e;
  };
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    // Fold f32 lanes into f64 every kBlock elements, as in the fused pass.
    const int64_t end = std::min(n, i + kBlock);
    vf acc[2] = {splat(0.0f), splat(0.0f)};
    for (; i + 2 * kLanes <= end; i += 2 * kLanes) {
      vf e0 = term(load(x + i)), e1 = term(load(x + i + kLanes));
      acc[0] += e0;
      acc[1] += e1;
      store(out + i, e0);
      store(out + i + kLanes, e1);
    }
    for (; i < end; i += kLanes) {
      const int64_t m = std::min(kLanes, end - i);
      vf e = term(m == kLanes ? load(x + i) : load_partial(x + i, m, kNegInf));
      acc[0] += e;
      store_partial(out + i, e, m);
    }
    total += hsum(acc[0] + acc[1]);
  }
  return total;
}

double sum_f32(const float* x, int64_t n) {
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + kBlock);
    vf acc[2] = {splat(0.0f), splat(0.0f)};
    for (; i + 2 * kLanes <= end; i += 2 * kLanes) {
      acc[0] += load(x + i);
      acc[1] += load(x + i + kLanes);
    }
    for (; i < end; i += kLanes) acc[1] += load_partial(x + i, std::min(kLanes, end - i), 0.0f);
    total += hsum(acc[0] + acc[1]);
  }
  return total;
}

float max_f32(const float* x, int64_t n) {
  vf m[2] = {splat(kNegInf), splat(kNegInf)};
  int64_t i = 0;
  for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
    m[0] = vmax(m[0], load(x + i));
    m[1] = vmax(m[1], load(x + i + kLanes));
  }
  for (; i < n; i += kLanes) m[0] = vmax(m[0], load_partial(x + i, std::min(kLanes, n - i), kNegInf));
  return hmax(vmax(m[0], m[1]));
}

void topk_scan(const float* x, int64_t n, int32_t base, TopKEntry* heap, int& n_heap, int cap) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if (uint32_t c = topk_candidates(load(x + i), heap, n_heap, cap)) offer_lanes(x + i, c, base + i, heap, n_heap, cap);
  }
  if (i < n) offer_lanes(x + i, first_lanes(n - i), base + i, heap, n_heap, cap);
}

int64_t indices_at_least(const float* x, int64_t n, float cutoff, int32_t* ids) {
  int64_t count = 0, i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (uint32_t m = mask_above<true>(load(x + i), cutoff); m; m &= m - 1) ids[count++] = static_cast<int32_t>(i + lowest_bit(m));
  }
  for (; i < n; ++i) {
    if (x[i] >= cutoff) ids[count++] = static_cast<int32_t>(i);
  }
  return count;
}

int64_t indices_between(const float* x, int64_t n, float lo, float hi, int32_t* ids) {
  int64_t count = 0, i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const vf v = load(x + i);
    for (uint32_t m = mask_above<false>(v, lo) & ~mask_above<false>(v, hi); m; m &= m - 1) {
      ids[count++] = static_cast<int32_t>(i + lowest_bit(m));
    }
  }
  for (; i < n; ++i) {
    if (x[i] > lo && x[i] <= hi) ids[count++] = static_cast<int32_t>(i);
  }
  return count;
}

double sum_above(const float* x, int64_t n, float thr, int64_t* count) {
  double total = 0;
  int64_t c = 0, i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + kBlock);
    vf acc[4] = {splat(0.0f), splat(0.0f), splat(0.0f), splat(0.0f)};  // independent chains
    vi hits = vi{};  // lane counts, as −1 per true compare
    for (; i + 4 * kLanes <= end; i += 4 * kLanes) {
      for (int k = 0; k < 4; ++k) {
        const vf v = load(x + i + k * kLanes);
        const vi above = v > thr;
        acc[k] += above ? v : splat(0.0f);
        hits += above;
      }
    }
    for (; i < end; i += kLanes) {
      const vf v = load_partial(x + i, std::min(kLanes, end - i), kNegInf);
      const vi above = v > thr;
      acc[0] += above ? v : splat(0.0f);
      hits += above;
    }
    total += hsum((acc[0] + acc[1]) + (acc[2] + acc[3]));
    for (int k = 0; k < kLanes; ++k) c -= hits[k];
  }
  *count = c;
  return total;
}

void zero_unless_above(float* x, int64_t n, float thr, float floor) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const vf v = load(x + i);
    store(x + i, (v > thr) & (v >= floor) ? v : splat(0.0f));
  }
  for (; i < n; ++i) x[i] = (x[i] > thr && x[i] >= floor) ? x[i] : 0.0f;
}

int64_t argmax_first(const float* x, int64_t n) {
  const float m = max_f32(x, n);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    if (uint32_t hit = mask_above<true>(load(x + i), m)) return i + lowest_bit(hit);
  }
  for (; i < n; ++i) {
    if (x[i] >= m) return i;
  }
  return 0;
}

}  // namespace ad::cpu
