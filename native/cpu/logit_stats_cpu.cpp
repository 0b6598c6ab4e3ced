#include "cpu/logit_stats_cpu.h"
#include "cpu/profiler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <utility>
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

// a·b + c, one FMA instruction where the ISA has it.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define AD_HAVE_FMA 1
#else
#define AD_HAVE_FMA 0
#endif

inline vf fmadd(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  __m512 x, y, z;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  std::memcpy(&z, &c, sizeof z);
  const __m512 r = _mm512_fmadd_ps(x, y, z);
#elif AD_HAVE_FMA
  __m256 x, y, z;
  std::memcpy(&x, &a, sizeof x);
  std::memcpy(&y, &b, sizeof y);
  std::memcpy(&z, &c, sizeof z);
  const __m256 r = _mm256_fmadd_ps(x, y, z);
#else
  const vf r = a * b + c;
#endif
  vf out;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

// max(lo, x) lane-wise in one maxps, which returns its second operand when either is NaN: a NaN x
// stays NaN.
inline vf clamp_below_fast(vf x, float lo) {
#if defined(__AVX512F__)
  __m512 v;
  std::memcpy(&v, &x, sizeof v);
  v = _mm512_maskz_max_ps(0xFFFF, _mm512_set1_ps(lo), v);  // maskz: GCC 12's unmasked form warns
#elif defined(__AVX2__)
  __m256 v;
  std::memcpy(&v, &x, sizeof v);
  v = _mm256_max_ps(_mm256_set1_ps(lo), v);
#else
  vf v = clamp_below(x, lo);
#endif
  std::memcpy(&x, &v, sizeof x);
  return x;
}

// Halves of a vector by shuffles (no 512-bit extract intrinsics: GCC 12 warns on them).
typedef float vhalf __attribute__((vector_size(AD_VEC_BYTES / 2)));
typedef double vdhalf __attribute__((vector_size(AD_VEC_BYTES)));  // kLanes / 2 doubles
#if AD_VEC_BYTES == 64
#define AD_LO_HALF 0, 1, 2, 3, 4, 5, 6, 7
#define AD_HI_HALF 8, 9, 10, 11, 12, 13, 14, 15
#elif AD_VEC_BYTES == 32
#define AD_LO_HALF 0, 1, 2, 3
#define AD_HI_HALF 4, 5, 6, 7
#else
#define AD_LO_HALF 0, 1
#define AD_HI_HALF 2, 3
#endif

// Σ lanes in f64: the two halves widened and added as vectors, then the kLanes / 2 doubles.
inline double hsum_f64(vf v) {
  const vhalf lo = __builtin_shufflevector(v, v, AD_LO_HALF), hi = __builtin_shufflevector(v, v, AD_HI_HALF);
  const vdhalf d = __builtin_convertvector(lo, vdhalf) + __builtin_convertvector(hi, vdhalf);
  double s = 0;
  for (int i = 0; i < kLanes / 2; ++i) s += d[i];
  return s;
}

// max over lanes by halving (a NaN lane may or may not win: callers treat NaN rows separately).
inline float hmax_fast(vf v) {
  vhalf h = __builtin_shufflevector(v, v, AD_LO_HALF), g = __builtin_shufflevector(v, v, AD_HI_HALF);
  h = h > g ? h : g;
  float m = h[0];
  for (int i = 1; i < kLanes / 2; ++i) m = h[i] > m ? h[i] : m;
  return m;
}

// e^d for the fused pass, d in [kFusedExpFloor, 88] or NaN: with x = d·log2(e), 2^x = 2^n·2^f,
// 2^f by a degree-5 minimax polynomial in f (relative error ≤ 2.3e-7 in f32 Horner; c0 = 1, so
// e^0 = 1 exactly), 2^n by vscalefps (AVX-512: n = floor x, f = x − n by vreduceps) or the exponent
// bits (n = round x, and f = d·log2(e) − n in one FMA). About 4 ulp against vexp's 1 ulp, for about
// half its instructions: the softmax sums need ~1e-6 relative (tests hold lse, entropy and KL to
// 1e-5 of float64). e^{kFusedExpFloor} is exactly 0.
constexpr float kLog2e = 1.44269504088896341f;

#if defined(__AVX512F__)
// f in [0, 1)
constexpr float kExp2C1 = 0.6931527256965637f, kExp2C2 = 0.24014736711978912f, kExp2C3 = 0.05586128309369087f;
constexpr float kExp2C4 = 0.008932990953326225f, kExp2C5 = 0.00190586200915277f;
constexpr float kFusedExpFloor = -105.0f;  // n = −152 and p < 2: p·2^−152 rounds to 0
#else
// f in [−0.5, 0.5]
constexpr float kExp2C1 = 0.6931470632553101f, kExp2C2 = 0.24022206664085388f, kExp2C3 = 0.05550570413470268f;
constexpr float kExp2C4 = 0.009675521403551102f, kExp2C5 = 0.0013342768652364612f;
constexpr float kFusedExpFloor = -88.0f;  // n = −127: a zero exponent field, so exactly 0
#endif

inline vf exp2_poly5(vf f) {
  vf p = fmadd(splat(kExp2C5), f, splat(kExp2C4));
  p = fmadd(p, f, splat(kExp2C3));
  p = fmadd(p, f, splat(kExp2C2));
  p = fmadd(p, f, splat(kExp2C1));
  return fmadd(p, f, splat(1.0f));
}

#if defined(__AVX512F__)
// All-lanes masks: GCC 12's unmasked AVX-512 intrinsics trip -Wmaybe-uninitialized.
constexpr __mmask16 kAll16 = 0xFFFF;
inline vf vexp_fused(vf d) {
  __m512 x;
  const vf xv = d * kLog2e;
  std::memcpy(&x, &xv, sizeof x);
#if defined(__AVX512DQ__)
  const __m512 f = _mm512_maskz_reduce_ps(kAll16, x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);  // x − floor(x)
#else
  const __m512 f = _mm512_sub_ps(x, _mm512_maskz_roundscale_ps(kAll16, x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
#endif
  vf fv, out;
  std::memcpy(&fv, &f, sizeof fv);
  const vf pv = exp2_poly5(fv);
  __m512 p;
  std::memcpy(&p, &pv, sizeof p);
  const __m512 e = _mm512_maskz_scalef_ps(kAll16, p, x);  // p·2^floor(x)
  std::memcpy(&out, &e, sizeof out);
  return out;
}
#else
inline vf vexp_fused(vf d) {
  const float kShift = 12582912.0f + 127.0f;  // 1.5·2^23 + the exponent bias: t's low bits hold n + 127
  const vf t = fmadd(d, splat(kLog2e), splat(kShift));  // rounds d·log2(e) to the nearest integer n
  const vf n = t - kShift;
  const vf f = fmadd(d, splat(kLog2e), -n);
  vi bits;
  std::memcpy(&bits, &t, sizeof bits);
  bits = bits << 23;  // the high bits of t (sign, exponent, the 2^22 of the shift) fall off
  vf scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return exp2_poly5(f) * scale;
}
#endif

// ---------------------------------------------------------------------------------------------
// The fused row scan (scan_chunk below): blocks of kBlock elements, each read once.

constexpr int64_t kBlock = 64 * kLanes;  // 4 accumulator sets × kLanes lanes × 16 terms; 4 KiB at AVX-512
constexpr int64_t kMinChunk = 16384;     // smallest vocabulary chunk worth a thread

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

// The fused pass's top-K: the kept entries as 64-bit keys (value in the high word, mapped so that
// unsigned order is float order; inverted id in the low word, so "ranks before" is one integer
// compare), unordered, with the least kept key tracked. A newcomer replaces the least key and the
// next least is found by a full min-reduction over the ≤ 64 keys: a short, branch-free chain that
// vectorizes, where a heap's sift is a chain of dependent loads (or of mispredicted branches)
// several times as long, and the scan waits on it.
struct KeyHeap {
  static constexpr int kSlots = kMaxLogitTopK;
  uint64_t h[kSlots + 1];   // kept keys; UINT64_MAX in the slots past n (never the least); h[kSlots]: scratch
  int n = 0, cap, slots;    // slots: cap rounded up to 8, the span the reductions run over
  uint64_t least = 0;       // the least kept key once n == cap (the K-th best)
  int least_at = 0;
  // Values below it cannot enter: a seeded bound while filling, then just above the least kept
  // value (a later element equal to it has a larger id, so it ranks after it).
  float threshold = kNegInf;

  explicit KeyHeap(int capacity) : cap(capacity), slots(std::min(kSlots, (capacity + 7) & ~7)) {
    std::fill(h, h + kSlots + 1, ~uint64_t(0));
  }

  void find_least() {
    uint64_t m = ~uint64_t(0);
    for (int j = 0; j < slots; ++j) m = h[j] < m ? h[j] : m;
    int at = 0;
    for (int j = 0; j < slots; ++j) at += h[j] == m ? j : 0;  // keys are distinct
    least = m;
    least_at = at;
    threshold = from_orderable_bits(static_cast<uint32_t>(m >> 32) + 1);  // above +inf: NaN bits, nothing passes
  }

  void offer(float value, int64_t id) {
    if (value != value) return;  // NaN never ranks
    const uint64_t x = topk_key(value, id);
    if (n < cap) {
      h[n++] = x;
      if (n == cap) find_least();
      return;
    }
    if (x <= least) return;
    h[least_at] = x;
    find_least();
  }

  // Keeps the best cap of keys[0..count) (distinct; they replace what is kept, so pass that too):
  // each key's rank by counting the keys above it (vectorizes, no data-dependent branch).
  void take_best(const uint64_t* keys, int count) {
    n = 0;
    for (int j = 0; j < count; ++j) {
      int above = 0;
      for (int i = 0; i < count; ++i) above += keys[i] > keys[j];
      h[n] = keys[j];  // n ≤ cap ≤ kSlots: a key that ranks past cap lands in the scratch slot at most
      n += above < cap;
    }
    std::fill(h + n, h + kSlots + 1, ~uint64_t(0));
    if (n == cap) find_least();
  }

  // The least value an element of any id may still enter with (threshold is stricter, for later ids).
  float entry_bound() const { return n == cap ? from_orderable_bits(static_cast<uint32_t>(least >> 32)) : threshold; }

  // Offers the lanes of the 4·kLanes floats at p whose bits are set in `lanes` (ids base + bit).
  void offer_bits(const float* p, uint64_t lanes, int64_t base) {
    for (; lanes; lanes &= lanes - 1) {
      const int j = __builtin_ctzll(lanes);
      offer(p[j], base + j);
    }
  }

  // Offers block elements again after a NaN may have hidden them from the block's candidate test,
  // skipping those already kept (the kept set does not depend on the order of the offers).
  void offer_again(const float* p, int64_t count, int64_t base) {
    for (int64_t j = 0; j < count; ++j) {
      const uint64_t x = topk_key(p[j], base + j);
      if (p[j] != p[j] || (n == cap && x <= least)) continue;
      if (std::find(h, h + n, x) == h + n) offer(p[j], base + j);
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

// Bit k·kLanes + j set when lane j of the k-th of the 4 vectors at p is ≥ thr.
inline uint64_t group_candidates(const float* p, float thr) {
  uint64_t m = 0;
  for (int k = 0; k < 4; ++k) m |= static_cast<uint64_t>(mask_above<true>(load(p + k * kLanes), thr)) << (k * kLanes);
  return m;
}

// One row chunk's partial result.
struct Partial {
  SoftmaxState<double> st;
  TopKEntry top[kMaxLogitTopK];  // best first
  int n_top = 0;
};

// The first reference maxima: the maxima of the chunk's first block, read once before the scan.
template <bool kRef>
std::pair<float, float> first_block_maxima(const float* z, const float* y, int64_t n) {
  n = std::min(n, kBlock);
  return {max_f32(z, n), kRef ? max_f32(y, n) : kNegInf};
}

// How many of x[0..m) are ≥ t (vectorizes; a NaN counts nowhere).
inline int count_at_least(const float* x, int64_t m, float t) {
  int c = 0;
  for (int64_t i = 0; i < m; ++i) c += x[i] >= t;
  return c;
}

// The top-K of a chunk's first kSeedPerK·K elements (at least one block) waits for a lower bound on
// the chunk's K-th largest value, so that few elements come in: every candidate costs a dependent
// chain of ~100 cycles that the scan waits on, and with a bound from the first n0 elements about
// K·ln(n/n0) more come in. Meanwhile the scan keeps each group's lane-wise max (4 vectors); the
// lane-wise maxima of each 16 groups are distinct elements, so their K-th largest is a bound, found
// by a binary search on the bits (vectorized counts, no data-dependent branch). Then the kept
// groups are tested against it and offered.
constexpr int64_t kSeedPerK = 1024, kSeedBucketGroups = 16;
constexpr int64_t kSeedMaxGroups = (kSeedPerK * kMaxLogitTopK + kBlock) / (4 * kLanes);

float seed_bound(const vf* groups, int64_t n_groups, int cap) {
  const int64_t buckets = n_groups / kSeedBucketGroups;
  const int64_t m = buckets * kLanes;
  if (m < cap) return kNegInf;
  alignas(64) float maxima[kSeedMaxGroups / kSeedBucketGroups * kLanes];
  for (int64_t b = 0; b < buckets; ++b) {
    const vf* g = groups + b * kSeedBucketGroups;
    vf a = vmax(vmax(g[0], g[1]), vmax(g[2], g[3]));
    for (int64_t j = 4; j < kSeedBucketGroups; j += 4) {
      a = vmax(a, vmax(vmax(g[j], g[j + 1]), vmax(g[j + 2], g[j + 3])));
    }
    store(maxima + b * kLanes, a);
  }
  // The largest orderable code with 16 low zero bits whose float has ≥ cap maxima at or above it:
  // the K-th largest maximum to 8 significant bits, rounded down (still a bound; 16 counts, not 32).
  uint32_t bits = 0;
  for (int bit = 31; bit >= 16; --bit) {
    const uint32_t probe = bits | (1u << bit);
    bits = count_at_least(maxima, m, from_orderable_bits(probe)) >= cap ? probe : bits;
  }
  const float t = from_orderable_bits(bits);
  return count_at_least(maxima, m, t) >= cap ? t : kNegInf;  // fewer than cap real maxima: NaN bits
}

// A block's terms relative to the reference maxima (rz, ry) in f32 lanes, folded into f64 once per
// block: kSets independent accumulator sets, each lane summing 64 / kSets terms of a block (16 with
// AVX-512's 32 registers, 32 with AVX2's 16, where 4 sets would spill), so f32 rounding stays
// ≲ 1e-6 relative. The sets only break the add chains: the exp in between leaves ample latency.
constexpr int kSets = AD_VEC_BYTES == 64 ? 4 : 2;

struct BlockAcc {
  vf s[kSets], t[kSets], u[kSets], sy[kSets];
  BlockAcc() {
    for (int k = 0; k < kSets; ++k) s[k] = t[k] = u[k] = sy[k] = splat(0.0f);
  }
};

// Adds the terms of one vector: d = z − rz, s += e^d, t += e^d·d, and with a reference row
// dy = y − ry, u += e^d·dy, sy += e^dy.
template <bool kRef>
inline void accumulate(BlockAcc& a, int k, vf z, vf y, vf rz, vf ry) {
  const vf d = clamp_below_fast(z - rz, kFusedExpFloor);  // e^{floor} = 0; e·d stays finite (0·−inf = NaN)
  const vf e = vexp_fused(d);
  a.s[k] += e;
  a.t[k] = fmadd(e, d, a.t[k]);
  if (kRef) {
    const vf dy = y - ry;
    a.u[k] += e > 0.0f ? e * dy : splat(0.0f);  // p = 0 adds 0 even where q = 0; p > 0, q = 0 → −inf
    a.sy[k] += vexp_fused(clamp_below_fast(dy, kFusedExpFloor));
  }
}

inline double fold(const vf* acc) {
  vf sum = acc[0];
  for (int k = 1; k < kSets; ++k) sum += acc[k];
  return hsum_f64(sum);
}

struct BlockResult {
  double s = 0, t = 0, u = 0, sy = 0;  // the SoftmaxState sums relative to (rz, ry)
  float max_z = kNegInf, max_y = kNegInf;
};

// One pass over a block (kScan) or a second one over the same, L1-hot block (!kScan, the rare
// redo): the softmax sums relative to (rz, ry) and, when scanning, the block maxima and the top-K
// candidates. The top-K test is one compare per group of 4 vectors, of their lane-wise max against
// the bound at the block's start, kept as a bit and acted on after the exp loop (a NaN can hide a
// lane of that max, so a block whose sums are NaN is offered again: offer_again). With `defer`
// (the seed span) the groups' lane-wise maxima are stored instead; a last, partial group is
// offered right away either way.
template <bool kRef, bool kScan>
BlockResult block_pass(const float* z, const float* y, int64_t n, int64_t base, float rz, float ry, KeyHeap& top,
                       vf* defer) {
  // No finite value yet: sum relative to 0, where every e^{−inf} is 0.
  const vf vrz = splat(rz > kNegInf ? rz : 0.0f);
  const vf vry = splat(ry > kNegInf ? ry : 0.0f);
  const vf zero = splat(0.0f);
  BlockAcc a;
  vf mz = splat(kNegInf), my = splat(kNegInf);
  const float thr = top.threshold;  // the block's candidate test: the bound at its start
  uint32_t flagged = 0;             // bit q: group q (4 vectors) may hold a top-K candidate
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    vf v[4], w[4];
    for (int k = 0; k < 4; ++k) v[k] = load(z + i + k * kLanes);
    if (kRef) {
      for (int k = 0; k < 4; ++k) w[k] = load(y + i + k * kLanes);
    }
    if (kScan) {
      const vf g = vmax(vmax(v[0], v[1]), vmax(v[2], v[3]));
      mz = vmax(mz, g);
      if (defer) {
        defer[i / (4 * kLanes)] = g;  // tested once the seed bound is known
      } else {
        flagged |= static_cast<uint32_t>(mask_above<true>(g, thr) != 0) << (i / (4 * kLanes));
      }
      if (kRef) my = vmax(my, vmax(vmax(w[0], w[1]), vmax(w[2], w[3])));
    }
    for (int k = 0; k < 4; ++k) accumulate<kRef>(a, k % kSets, v[k], kRef ? w[k] : zero, vrz, vry);
  }
  // The flagged groups, out of the exp loop: their lanes against the current bound, then the heap.
  for (; kScan && flagged; flagged &= flagged - 1) {
    const int64_t o = static_cast<int64_t>(__builtin_ctz(flagged)) * 4 * kLanes;
    top.offer_bits(z + o, group_candidates(z + o, top.threshold), base + o);
  }
  for (; i < n; i += kLanes) {
    const int64_t m = std::min(kLanes, n - i);
    const vf v = m == kLanes ? load(z + i) : load_partial(z + i, m, kNegInf);
    const vf w = !kRef ? zero : (m == kLanes ? load(y + i) : load_partial(y + i, m, kNegInf));
    if (kScan) {
      mz = vmax(mz, v);
      if (uint32_t c = mask_above<true>(v, top.threshold) & first_lanes(m)) top.offer_bits(z + i, c, base + i);
      if (kRef) my = vmax(my, w);
    }
    accumulate<kRef>(a, 1, v, w, vrz, vry);
  }
  BlockResult r;
  r.s = fold(a.s);
  r.t = fold(a.t);
  if (kRef) {
    r.sy = fold(a.sy);
    r.u = fold(a.u);
  }
  if (kScan) {
    r.max_z = hmax_fast(mz);
    if (kRef) r.max_y = hmax_fast(my);
  }
  return r;
}

// A block's maxima may exceed the reference maxima by this much before the block is summed again
// against its own: a term e^{z−rz} > 1 carries a positive z − rz into t, which the final rescale
// to the true max cancels (t + (rz − m)·s), costing about slack × f32 rounding of the entropy.
constexpr float kMaxSlack = 4.0f;

// The seed span's top-K, once its groups are in: the bound from their maxima, then the keys of the
// elements at or above it, taken in at once (usually about K of them); past kCollect (ties at the
// bound, or no bound) the rest go in one by one. The heap may hold the span's last, partial group.
constexpr int kCollect = 128;  // take_best ranks by kCollect² compares at most

void settle_seed(const float* z, int64_t begin, const vf* groups, int64_t n_groups, int cap, KeyHeap& top) {
  const float bound = seed_bound(groups, n_groups, cap);
  if (bound > top.threshold) top.threshold = bound;
  uint64_t keys[kCollect];
  int count = 0;
  for (int j = 0; j < top.n; ++j) keys[count++] = top.h[j];
  int64_t g = bound > kNegInf ? 0 : n_groups;  // no bound (a short span): skip to one by one
  for (; g < n_groups; ++g) {
    if (!mask_above<true>(groups[g], bound)) continue;
    const int64_t o = begin + g * 4 * kLanes;
    uint64_t lanes = group_candidates(z + o, bound);
    if (count + __builtin_popcountll(lanes) > kCollect) break;
    for (; lanes; lanes &= lanes - 1) {
      const int j = __builtin_ctzll(lanes);
      keys[count++] = topk_key(z[o + j], o + j);  // ≥ bound: not NaN
    }
  }
  top.take_best(keys, count);
  for (g = bound > kNegInf ? g : 0; g < n_groups; ++g) {
    const float lo = top.entry_bound();  // these precede the partial group already offered
    if (mask_above<true>(groups[g], lo)) {
      const int64_t o = begin + g * 4 * kLanes;
      top.offer_bits(z + o, group_candidates(z + o, lo), o);
    }
  }
}

// The fused row scan (DESIGN.md, "One pass over the vocabulary"). The sums are kept relative to
// reference maxima (rz, ry): the first block's maxima, raised only when a block's maximum passes
// them by more than kMaxSlack (rare after the first blocks: that block is summed again while it is
// hot in L1). So each element is loaded once, exponentiated once against a fixed reference, and
// the running sums are rescaled once per raise instead of once per new maximum; the state is
// moved to the true maxima at the end. The top-K of the first elements waits for a seed bound
// (settle_seed); after it, a candidate test per 4 vectors.
template <bool kRef>
void scan_chunk(const float* z, const float* y, int64_t begin, int64_t end, int cap, Partial& p) {
  KeyHeap top(cap);
  const std::pair<float, float> first = first_block_maxima<kRef>(z + begin, kRef ? y + begin : nullptr, end - begin);
  SoftmaxState<double>& st = p.st;
  st.m = first.first;  // the reference maxima; st's sums are relative to them
  st.my = first.second;
  float max_z = kNegInf, max_y = kNegInf;  // the true maxima so far
  // The seed span: its groups' maxima wait in `groups` (group g at element begin + g·4·kLanes).
  const int64_t seed_end = std::min(end, begin + std::max(kBlock, kSeedPerK * cap));
  thread_local std::vector<vf> group_buffer(kSeedMaxGroups);  // 66 KiB: off the stack
  vf* const groups = group_buffer.data();
  bool seed_nan = false;
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t n = std::min(kBlock, end - b);
    const float* yb = kRef ? y + b : nullptr;
    const bool seeding = b < seed_end;
    if (!(st.m > kNegInf)) softmax_rescale_z(st, max_f32(z + b, n));  // no finite z yet (s = 0)
    if (kRef && !(st.my > kNegInf)) softmax_rescale_y(st, max_f32(yb, n));
    vf* const defer = seeding ? groups + (b - begin) / (4 * kLanes) : nullptr;
    BlockResult r = block_pass<kRef, true>(z + b, yb, n, b, st.m, st.my, top, defer);
    max_z = r.max_z > max_z ? r.max_z : max_z;
    max_y = r.max_y > max_y ? r.max_y : max_y;
    const bool raise_z = r.max_z > st.m + kMaxSlack, raise_y = kRef && r.max_y > st.my + kMaxSlack;
    if (raise_z || raise_y) {
      if (raise_z) softmax_rescale_z(st, r.max_z);
      if (raise_y) softmax_rescale_y(st, r.max_y);
      const BlockResult again = block_pass<kRef, false>(z + b, yb, n, b, st.m, st.my, top, nullptr);
      r.s = again.s;
      r.t = again.t;
      r.u = again.u;
      r.sy = again.sy;
    }
    if (r.s != r.s) {
      if (seeding) {
        seed_nan = true;
      } else {
        top.offer_again(z + b, n, b);
      }
    }
    st.s += r.s;
    st.t += r.t;
    if (kRef) {
      st.sy += r.sy;
      st.u += r.u;
    }
    if (seeding && (b + kBlock >= seed_end || b + kBlock >= end)) {  // the seed span is done
      const int64_t span = std::min(end, b + kBlock) - begin;
      settle_seed(z, begin, groups, span / (4 * kLanes), cap, top);
      if (seed_nan) top.offer_again(z + begin, span, begin);
    }
  }
  if (max_z > st.m) softmax_rescale_z(st, max_z);
  if (kRef && max_y > st.my) softmax_rescale_y(st, max_y);
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

// Σ term(x[i]) in f32 lanes, folded into double every kBlock elements.
template <class Term>
double blocked_sum(const float* x, int64_t n, const Term& term) {
  double total = 0;
  int64_t i = 0;
  while (i < n) {
    const int64_t end = std::min(n, i + kBlock);
    vf acc[2] = {splat(0.0f), splat(0.0f)};
    for (; i + 2 * kLanes <= end; i += 2 * kLanes) {
      acc[0] += term(load(x + i));
      acc[1] += term(load(x + i + kLanes));
    }
    for (; i < end; i += kLanes) acc[1] += term(load_partial(x + i, std::min(kLanes, end - i), 0.0f));
    total += hsum(acc[0] + acc[1]);
  }
  return total;
}

double sum_f32(const float* x, int64_t n) {
  return blocked_sum(x, n, [](vf v) { return v; });
}

double sum_squares_f32(const float* x, int64_t n) {
  return blocked_sum(x, n, [](vf v) { return v * v; });
}

void softmax_objective_gradient(float* z, int64_t n, double a, double b, int32_t target, float* e) {
  const float m = max_f32(z, n);
  const double s = exp_shifted(z, n, m, e);  // e_j = e^{z_j − m}
  const double lse = std::log(s);            // relative to m
  double entropy = 0;
  if (b != 0) {  // H = lse − Σ e_j (z_j − m) / s
    double ez = 0;
    for (int64_t i = 0; i < n;) {
      const int64_t end = std::min(n, i + kBlock);
      vf acc = splat(0.0f);
      for (; i + kLanes <= end; i += kLanes) acc += load(e + i) * (load(z + i) - m);
      for (; i < end; ++i) acc[0] += e[i] * (z[i] - m);
      ez += hsum(acc);
    }
    entropy = lse - ez / s;
  }
  // p_j = e_j / s, log p_j = (z_j − m) − lse
  const float inv_s = static_cast<float>(1.0 / s), shift = static_cast<float>(m + lse), fa = static_cast<float>(a),
              fb = static_cast<float>(b), fh = static_cast<float>(entropy);
  const auto gradient = [&](vf zj, vf ej) {
    const vf p = ej * inv_s;
    return -p * fa - p * fb * ((zj - shift) + fh);
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(z + i, gradient(load(z + i), load(e + i)));
  if (i < n) store_partial(z + i, gradient(load_partial(z + i, n - i, 0.0f), load_partial(e + i, n - i, 0.0f)), n - i);
  if (target >= 0 && target < n) z[target] += fa;
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
