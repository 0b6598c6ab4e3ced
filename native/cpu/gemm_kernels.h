// The register-blocked micro-kernels of the CPU GEMM; native/cpu/gemm.cpp packs the operands and
// blocks the loops for the caches around them. Two tile shapes, one for each way the operands lie
// in memory:
//
//  - dot_tile (Y = X·Wᵀ: both operands run along the depth; the forward, the LM head, decode).
//    kDotRows × kDotCols accumulators of kDepthLanes lanes each: lane l sums the depth indices
//    ≡ l (mod kDepthLanes) of one depth block in order, then the lanes meet in one fixed tree (lane_sums)
//    and the block's sum is added to Y. The order of every sum depends only on K (the blocks are
//    fixed by K), never on the tile, the batch or the thread, so a row's result does not depend
//    on which rows share its batch (generate's batch invariance).
//  - outer_tile (Y = X·W and Y = Xᵀ·W: B runs along the output columns; the backward).
//    kOuterRows × kOuterCols accumulators, one depth index per step: a broadcast of A times a row
//    of B (the BLIS shape), on panels packed with zero padding to the full tile.
//
// One source for two SIMD widths, chosen by the build's target: AVX-512 (16 lanes, 32 registers:
// 24 accumulators per tile) where the compiler targets it (-march=native on such a machine), else
// AVX2+FMA (8 lanes, 16 registers: 12 accumulators). The depth lanes, and so the order of the dot
// sums, are those of the build: a row's bits are the same whatever its batch within one build.
// Without AVX2 a scalar version of the AVX2 arithmetic, in the same order, keeps every target
// building and correct.
#pragma once
#include <cmath>
#include <cstdint>
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__FMA__)
#include <immintrin.h>
#define AD_GEMM_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AD_GEMM_AVX2 1
#elif defined(__F16C__)
#include <immintrin.h>
#endif

namespace ad::cpu::gemm {

constexpr int kQ8Block = 32;  // weights per scale of the int8 format (Q8_0's block)

// Views of a weight matrix W [rows × depth] in the types the engine keeps it in, at (row n, depth
// k). dot_tile reads W only through them: `lanes(c, s)` is depth [L·s, L·s + L) of row c as f32
// lanes (L = kDepthLanes), `tail_lanes` the first `tail` of them (the rest zero, nothing past them read), `value`
// one element. Every stored value widens exactly to f32, so a product over bf16, f16 or int8
// weights has the bits of the f32 product over the widened weights.
inline float f32_value(float f) { return f; }

// bf16: the high half of an f32.
inline float bf16_value(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

// IEEE binary16.
inline float half_to_float(uint16_t h) {
#if defined(__F16C__)
  return _cvtsh_ss(h);
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal: mant·2⁻²⁴, exact
    return sign ? -f : f;
  }
  const uint32_t bits = sign | (exp == 31 ? 0x7f800000 | (mant << 13) : ((exp - 15 + 127) << 23) | (mant << 13));
  __builtin_memcpy(&f, &bits, 4);
  return f;
#endif
}

// One stored element per weight, widened by `Widen` (f32 as it is, bf16, f16).
template <class T, float (*Widen)(T)>
struct DenseWeights {
  const T* p;
  int64_t ld;
  static constexpr int kBytes = sizeof(T);
  DenseWeights at(int64_t n, int64_t k) const { return {p + n * ld + k, ld}; }
  const void* address(int64_t n, int64_t k) const { return p + n * ld + k; }
  float value(int c, int64_t k) const { return Widen(p[c * ld + k]); }
};
using F32Weights = DenseWeights<float, f32_value>;
using Bf16Weights = DenseWeights<uint16_t, bf16_value>;
using F16Weights = DenseWeights<uint16_t, half_to_float>;

// int8 (Q8_0-style): w = q · d, q ∈ [−127, 127], d the f16 scale of its block of kQ8Block along
// the depth; scales [rows × scales_ld]. q·d is exact in f32 (8 + 11 significant bits). A view's k
// is a multiple of kQ8Block (depth blocks are), so a step (8 or 16 lanes from a multiple of its width) lies in one block.
struct Q8Weights {
  const int8_t* q;
  const uint16_t* d;
  int64_t ld, scales_ld;
  static constexpr int kBytes = 1;
  Q8Weights at(int64_t n, int64_t k) const { return {q + n * ld + k, d + n * scales_ld + k / kQ8Block, ld, scales_ld}; }
  const void* address(int64_t n, int64_t k) const { return q + n * ld + k; }
  float scale(int c, int64_t k) const { return half_to_float(d[c * scales_ld + k / kQ8Block]); }
  float value(int c, int64_t k) const { return static_cast<float>(q[c * ld + k]) * scale(c, k); }
};

// int8 codes whose block scales were widened to f32 beforehand (the few-rows path widens a tile's
// scales once, where Q8Weights converts one f16 scale per step): the same values, so the same bits.
struct Q8WideScales {
  const int8_t* q;
  const float* d;
  int64_t ld, scales_ld;
  static constexpr int kBytes = 1;
  float scale(int c, int64_t k) const { return d[c * scales_ld + k / kQ8Block]; }
  float value(int c, int64_t k) const { return static_cast<float>(q[c * ld + k]) * scale(c, k); }
};

// A block of W already widened to f32 (rows from n0, depth from k0, rows ld apart): at() gives
// the f32 view the kernel reads.
struct WidenedBlock {
  const float* p;
  int64_t ld, n0, k0;
  F32Weights at(int64_t n, int64_t k) const { return {p + (n - n0) * ld + (k - k0), ld}; }
};

#if defined(AD_GEMM_AVX512)

// AVX-512 (32 zmm registers; a machine with a full 512-bit FMA path does twice the AVX2 work).
using Vec = __m512;
using LaneMask = __mmask16;
constexpr int kVecLanes = 16;
constexpr int kDotRows = 8, kDotCols = 3;       // dot tile: 24 accumulators + 3 of W + 1 of X
constexpr int kOuterRows = 12, kOuterCols = 32; // outer tile: 24 accumulators + 2 of B + 1 broadcast
inline const char* kernel_name() { return "avx512: dot 8x3x16, outer 12x32"; }

inline Vec vec_zero() { return _mm512_setzero_ps(); }
inline Vec vec_load(const float* p) { return _mm512_loadu_ps(p); }
inline Vec vec_load_aligned(const float* p) { return _mm512_load_ps(p); }
inline void vec_store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
inline Vec vec_broadcast(const float* p) { return _mm512_set1_ps(*p); }
inline Vec vec_fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
inline Vec vec_add(Vec a, Vec b) { return _mm512_add_ps(a, b); }
// Lanes [0, n) set (n in 0..16); masked loads read nothing past them, masked stores write nothing.
inline LaneMask first_lanes(int n) { return static_cast<LaneMask>((1u << n) - 1u); }
inline Vec vec_load_first(const float* p, LaneMask on) { return _mm512_maskz_loadu_ps(on, p); }
inline void vec_store_first(float* p, LaneMask on, Vec v) { _mm512_mask_storeu_ps(p, on, v); }

// GCC 12's unmasked forms of some conversions read an undefined register (a false -Wuninitialized);
// their zero-masked forms under an all-lanes mask are the same instructions.
constexpr LaneMask kAll = 0xffff;

// The 8-lane vector of lanes l + l+8: the first level of a 16-lane sum.
inline __m256 fold_halves(Vec v) {
  // (GCC 12's _mm512_castps512_ps256 trips the same warning; a vector shuffle is the same extract.)
  const __m256 low = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 high = __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm256_add_ps(low, high);
}

inline Vec widen_bf16(__m256i h) { return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16)); }
inline Vec widen_f16(__m256i h) { return _mm512_maskz_cvtph_ps(kAll, h); }
inline Vec widen_q8(__m128i q, float d) {
  return _mm512_mul_ps(_mm512_maskz_cvtepi32_ps(kAll, _mm512_maskz_cvtepi8_epi32(kAll, q)), _mm512_set1_ps(d));
}
inline __m256i load_halves(const uint16_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m256i load_first_halves(const uint16_t* p, int n) { return _mm256_maskz_loadu_epi16(first_lanes(n), p); }
inline __m128i load_codes(const int8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m128i load_first_codes(const int8_t* p, int n) { return _mm_maskz_loadu_epi8(first_lanes(n), p); }

#elif defined(AD_GEMM_AVX2)

// AVX2+FMA (16 ymm registers).
using Vec = __m256;
using LaneMask = __m256i;
constexpr int kVecLanes = 8;
constexpr int kDotRows = 4, kDotCols = 3;       // dot tile: 12 accumulators + 3 of W + 1 of X
constexpr int kOuterRows = 6, kOuterCols = 16;  // outer tile: the BLIS 6×16, 12 accumulators
inline const char* kernel_name() { return "avx2+fma: dot 4x3x8, outer 6x16"; }

inline Vec vec_zero() { return _mm256_setzero_ps(); }
inline Vec vec_load(const float* p) { return _mm256_loadu_ps(p); }
inline Vec vec_load_aligned(const float* p) { return _mm256_load_ps(p); }
inline void vec_store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
inline Vec vec_broadcast(const float* p) { return _mm256_broadcast_ss(p); }
inline Vec vec_fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
inline Vec vec_add(Vec a, Vec b) { return _mm256_add_ps(a, b); }
// Lanes [0, n) set (n in 0..8); masked loads read nothing past them, masked stores write nothing.
inline LaneMask first_lanes(int n) {
  alignas(32) static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + 8 - n));
}
inline Vec vec_load_first(const float* p, LaneMask on) { return _mm256_maskload_ps(p, on); }
inline void vec_store_first(float* p, LaneMask on, Vec v) { _mm256_maskstore_ps(p, on, v); }
inline __m256 fold_halves(Vec v) { return v; }  // already 8 lanes

inline Vec widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
inline Vec widen_f16(__m128i h) {
#if defined(__F16C__)
  return _mm256_cvtph_ps(h);
#else
  alignas(16) uint16_t b[8];
  alignas(32) float f[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(b), h);
  for (int l = 0; l < 8; ++l) f[l] = half_to_float(b[l]);
  return _mm256_load_ps(f);
#endif
}
inline Vec widen_q8(__m128i q, float d) { return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(d)); }
// The first n elements at p (the rest zero) in a 16-byte register; nothing past them read.
template <class T>
inline __m128i first_elements(const T* p, int n) {
  alignas(16) T b[16 / sizeof(T)] = {};
  __builtin_memcpy(b, p, sizeof(T) * n);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
}
inline __m128i load_halves(const uint16_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m128i load_first_halves(const uint16_t* p, int n) { return first_elements(p, n); }
inline __m128i load_codes(const int8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); }
inline __m128i load_first_codes(const int8_t* p, int n) { return first_elements(p, n); }

#endif

#if defined(AD_GEMM_AVX512) || defined(AD_GEMM_AVX2)

constexpr int kDepthLanes = kVecLanes;  // f32 lanes of one depth step of the dot kernel
static_assert(kDotCols <= 3 && kOuterCols % kVecLanes == 0);

using Sums4 = __m128;  // four lane sums of a dot tile row

// [Σa, Σb, Σc, Σd]: each vector folded to 8 lanes (lane l + lane l+8 when it has 16), then the
// eight added in the tree ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline __m128 lane_sums(Vec va, Vec vb, Vec vc, Vec vd) {
  const __m256 a = fold_halves(va), b = fold_halves(vb), c = fold_halves(vc), d = fold_halves(vd);
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// An empty asm that claims to change v: the value must then live in a register at this point.
inline void keep_in_register(Vec& v) { __asm__("" : "+v"(v)); }

// The lanes at depth kDepthLanes·s of row c of W, widened to f32 in registers; and the first `tail`.
inline Vec lanes(const F32Weights& w, int c, int64_t s) { return vec_load(w.p + c * w.ld + kDepthLanes * s); }
inline Vec tail_lanes(const F32Weights& w, int c, int64_t s, int tail) {
  return vec_load_first(w.p + c * w.ld + kDepthLanes * s, first_lanes(tail));
}
inline Vec lanes(const Bf16Weights& w, int c, int64_t s) { return widen_bf16(load_halves(w.p + c * w.ld + kDepthLanes * s)); }
inline Vec tail_lanes(const Bf16Weights& w, int c, int64_t s, int tail) {
  return widen_bf16(load_first_halves(w.p + c * w.ld + kDepthLanes * s, tail));
}
inline Vec lanes(const F16Weights& w, int c, int64_t s) { return widen_f16(load_halves(w.p + c * w.ld + kDepthLanes * s)); }
inline Vec tail_lanes(const F16Weights& w, int c, int64_t s, int tail) {
  return widen_f16(load_first_halves(w.p + c * w.ld + kDepthLanes * s, tail));
}
inline Vec lanes(const Q8Weights& w, int c, int64_t s) {
  return widen_q8(load_codes(w.q + c * w.ld + kDepthLanes * s), w.scale(c, kDepthLanes * s));
}
inline Vec tail_lanes(const Q8Weights& w, int c, int64_t s, int tail) {
  return widen_q8(load_first_codes(w.q + c * w.ld + kDepthLanes * s, tail), w.scale(c, kDepthLanes * s));
}
inline Vec lanes(const Q8WideScales& w, int c, int64_t s) {
  return widen_q8(load_codes(w.q + c * w.ld + kDepthLanes * s), w.scale(c, kDepthLanes * s));
}
inline Vec tail_lanes(const Q8WideScales& w, int c, int64_t s, int tail) {
  return widen_q8(load_first_codes(w.q + c * w.ld + kDepthLanes * s, tail), w.scale(c, kDepthLanes * s));
}

// Rows [0, rows) × depth [0, depth) of a weight view widened into dst (rows `ld` apart): the
// values lanes() gives, so the f32 kernel over dst has the bits of the kernel over the view.
template <class W>
inline void widen_rows(const W& w, int rows, int64_t depth, float* dst, int64_t ld) {
  const int64_t steps = depth / kDepthLanes;
  const int tail = static_cast<int>(depth % kDepthLanes);
  for (int c = 0; c < rows; ++c) {
    float* d = dst + c * ld;
    for (int64_t s = 0; s < steps; ++s) vec_store(d + s * kDepthLanes, lanes(w, c, s));
    if (tail > 0) vec_store_first(d + steps * kDepthLanes, first_lanes(tail), tail_lanes(w, c, steps, tail));
  }
}

// One depth step of an R × C dot tile: acc[r][c] += A(r, ·)·W(c, ·) lane by lane. `load_a`
// reads the lanes of A (all of them, or the first few with the rest zero), `load_w(c)` those of W.
template <int R, int C, class LoadA, class LoadW>
inline void dot_step(const float* a, int64_t a_row, const LoadA& load_a, const LoadW& load_w, Vec (&acc)[R][C]) {
  Vec w[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    w[c] = load_w(c);
    keep_in_register(w[c]);  // else GCC folds the loads into the FMAs: one load per FMA
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    Vec x = load_a(a + r * a_row);
    keep_in_register(x);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = vec_fmadd(x, w[c], acc[r][c]);
  }
}

// sums[r][c] = Σ_k A(r, k)·W(c, k) over one depth block of `steps` full steps of kDepthLanes and
// a last step of `tail` (0 .. kDepthLanes − 1) lanes, for an R × C tile (R ≤ kDotRows, C ≤ 3).
// Element (i, L·s + l) of A lies at a[i·a_row + s·a_step + l] (packed: a_row = L, a_step = L·rows);
// W is a view (see above). Lanes past the tail are zero, so nothing past the block is read.
template <int R, int C, class W>
inline void dot_tile(const float* a, int64_t a_row, int64_t a_step, const W& b, int64_t steps, int tail, Sums4 sums[R]) {
  Vec acc[R][C];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = vec_zero();
  const auto full = [](const float* p) { return vec_load(p); };
#pragma GCC unroll 2
  for (int64_t s = 0; s < steps; ++s, a += a_step) {
    dot_step<R, C>(a, a_row, full, [&](int c) { return lanes(b, c, s); }, acc);
  }
  if (tail > 0) {
    const LaneMask on = first_lanes(tail);
    dot_step<R, C>(a, a_row, [on](const float* p) { return vec_load_first(p, on); },
                   [&](int c) { return tail_lanes(b, c, steps, tail); }, acc);
  }
  const Vec z = vec_zero();
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    sums[r] = lane_sums(acc[r][0], C > 1 ? acc[r][1] : z, C > 2 ? acc[r][2] : z, z);
}

// The first C ≤ 3 floats at p, the rest zero; and the first C lanes of v stored to p.
template <int C>
inline __m128 load_first(const float* p) {
  if (C == 1) return _mm_load_ss(p);
  const __m128 two = _mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p)));
  return C == 2 ? two : _mm_movelh_ps(two, _mm_load_ss(p + 2));
}
template <int C>
inline void store_first(float* p, __m128 v) {
  if (C == 1) {
    _mm_store_ss(p, v);
    return;
  }
  _mm_store_sd(reinterpret_cast<double*>(p), _mm_castps_pd(v));
  if (C == 3) _mm_store_ss(p + 2, _mm_movehl_ps(v, v));
}

// Lane c of a tile row's sums.
inline float sum_of(Sums4 sums, int c) {
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, sums);
  return lanes[c];
}

// Y[0..C) = base + sums, base = the row as it is, or (when the block is the first) 0 or the row
// (accumulate), plus the bias. Only the C ≤ 3 columns of the tile are read or written.
template <int C>
inline void dot_store(float* y, __m128 sums, const float* bias, bool first, bool accumulate) {
  __m128 base = !first || accumulate ? load_first<C>(y) : _mm_setzero_ps();
  if (first && bias) base = _mm_add_ps(base, load_first<C>(bias));
  store_first<C>(y, _mm_add_ps(base, sums));
}

// acc[r][·] = Σ_k a[k·kOuterRows + r] · b[k·kOuterCols + ·] over `depth` steps of packed panels
// (zero-padded): one broadcast of A times a row of B per step.
constexpr int kOuterVecs = kOuterCols / kVecLanes;
struct OuterAcc {
  Vec v[kOuterRows][kOuterVecs];
};

inline void outer_tile(const float* a, const float* b, int64_t depth, OuterAcc& out) {
  Vec acc[kOuterRows][kOuterVecs];
#pragma GCC unroll 16
  for (int r = 0; r < kOuterRows; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kOuterVecs; ++j) acc[r][j] = vec_zero();
#pragma GCC unroll 2
  for (int64_t k = 0; k < depth; ++k) {
    Vec row[kOuterVecs];
#pragma GCC unroll 4
    for (int j = 0; j < kOuterVecs; ++j) row[j] = vec_load_aligned(b + j * kVecLanes);
#pragma GCC unroll 16
    for (int r = 0; r < kOuterRows; ++r) {
      const Vec x = vec_broadcast(a + r);
#pragma GCC unroll 4
      for (int j = 0; j < kOuterVecs; ++j) acc[r][j] = vec_fmadd(x, row[j], acc[r][j]);
    }
    a += kOuterRows;
    b += kOuterCols;
  }
#pragma GCC unroll 16
  for (int r = 0; r < kOuterRows; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < kOuterVecs; ++j) out.v[r][j] = acc[r][j];
}

// Row r of an outer tile into Y[0..cols): Y = (first ? (accumulate ? Y : 0) : Y) + acc.
inline void outer_store_row(float* y, const Vec acc[kOuterVecs], int cols, bool first, bool accumulate) {
  const bool load = !first || accumulate;
  for (int j = 0; j < kOuterVecs; ++j) {
    const int n = cols - kVecLanes * j;
    if (n <= 0) break;
    float* p = y + kVecLanes * j;
    if (n >= kVecLanes) {
      vec_store(p, load ? vec_add(vec_load(p), acc[j]) : acc[j]);
    } else {
      const LaneMask on = first_lanes(n);
      vec_store_first(p, on, load ? vec_add(vec_load_first(p, on), acc[j]) : acc[j]);
    }
  }
}

#else  // scalar: the AVX2 arithmetic, lane by lane, in the same order

constexpr int kDepthLanes = 8;
constexpr int kDotRows = 4, kDotCols = 3;
constexpr int kOuterRows = 6, kOuterCols = 16;
inline const char* kernel_name() { return "scalar: dot 4x3x8, outer 6x16"; }

struct Sums4 {
  float v[4];
};

inline float lane_sum(const float l[kDepthLanes]) { return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7])); }

template <int R, int C, class W>
inline void dot_tile(const float* a, int64_t a_row, int64_t a_step, const W& b, int64_t steps, int tail, Sums4 sums[R]) {
  float acc[R][C][kDepthLanes] = {};
  for (int64_t s = 0; s <= steps; ++s) {
    const int lanes = s < steps ? kDepthLanes : tail;
    for (int r = 0; r < R; ++r)
      for (int c = 0; c < C; ++c)
        for (int l = 0; l < lanes; ++l) acc[r][c][l] = std::fma(a[r * a_row + l], b.value(c, s * kDepthLanes + l), acc[r][c][l]);
    a += a_step;
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < 4; ++c) sums[r].v[c] = c < C ? lane_sum(acc[r][c]) : 0.f;
}

template <class W>
inline void widen_rows(const W& w, int rows, int64_t depth, float* dst, int64_t ld) {
  for (int c = 0; c < rows; ++c)
    for (int64_t k = 0; k < depth; ++k) dst[c * ld + k] = w.value(c, k);
}

inline float sum_of(Sums4 sums, int c) { return sums.v[c]; }

template <int C>
inline void dot_store(float* y, Sums4 sums, const float* bias, bool first, bool accumulate) {
  for (int c = 0; c < C; ++c) {
    float base = !first || accumulate ? y[c] : 0.f;
    if (first && bias) base += bias[c];
    y[c] = base + sums.v[c];
  }
}

struct OuterAcc {
  float v[kOuterRows][kOuterCols];
};

inline void outer_tile(const float* a, const float* b, int64_t depth, OuterAcc& out) {
  for (int r = 0; r < kOuterRows; ++r)
    for (int c = 0; c < kOuterCols; ++c) out.v[r][c] = 0.f;
  for (int64_t k = 0; k < depth; ++k, a += kOuterRows, b += kOuterCols)
    for (int r = 0; r < kOuterRows; ++r)
      for (int c = 0; c < kOuterCols; ++c) out.v[r][c] = std::fma(a[r], b[c], out.v[r][c]);
}

inline void outer_store_row(float* y, const float acc[kOuterCols], int cols, bool first, bool accumulate) {
  for (int c = 0; c < cols; ++c) y[c] = (!first || accumulate ? y[c] : 0.f) + acc[c];
}

#endif

// dot_store for a tile whose C columns lie `apart` columns from each other in Y: the same
// operations per element, so the same bits.
template <int C>
inline void dot_store_apart(float* y, int64_t apart, Sums4 sums, const float* bias, bool first, bool accumulate) {
  for (int c = 0; c < C; ++c) {
    float base = !first || accumulate ? y[c * apart] : 0.f;
    if (first && bias) base += bias[c * apart];
    y[c * apart] = base + sum_of(sums, c);
  }
}

}  // namespace ad::cpu::gemm
