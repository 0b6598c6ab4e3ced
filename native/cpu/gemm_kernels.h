// The register-blocked micro-kernels of the CPU GEMM; native/cpu/gemm.cpp packs the operands and
// blocks the loops for the caches around them. Two tile shapes, one for each way the operands lie
// in memory:
//
//  - dot_tile (Y = X·Wᵀ: both operands run along the depth; the forward, the LM head, decode).
//    kDotRows × kDotCols accumulators of kDepthLanes lanes each: lane l sums the depth indices
//    ≡ l (mod 8) of one depth block in order, then the lanes meet in one fixed tree (lane_sums)
//    and the block's sum is added to Y. The order of every sum depends only on K (the blocks are
//    fixed by K), never on the tile, the batch or the thread, so a row's result does not depend
//    on which rows share its batch (generate's batch invariance).
//  - outer_tile (Y = X·W and Y = Xᵀ·W: B runs along the output columns; the backward).
//    kOuterRows × kOuterCols accumulators, one depth index per step: a broadcast of A times a row
//    of B (the BLIS 6×16 shape), on panels packed with zero padding to the full tile.
//
// AVX2+FMA is the kernel this machine class runs (16 ymm registers: 12 accumulators + operands).
// Without AVX2 a scalar version of the same arithmetic, in the same order, keeps every target
// building and correct.
#pragma once
#include <cmath>
#include <cstdint>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define AD_GEMM_AVX2 1
#elif defined(__F16C__)
#include <immintrin.h>
#endif

namespace ad::cpu::gemm {

constexpr int kQ8Block = 32;  // weights per scale of the int8 format (Q8_0's block)

// Views of a weight matrix W [rows × depth] in the types the engine keeps it in, at (row n, depth
// k). dot_tile reads W only through them: `lanes(c, s)` is depth [8s, 8s + 8) of row c as f32
// lanes, `tail_lanes` the first `tail` of them (the rest zero, nothing past them read), `value`
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
// is a multiple of kQ8Block (depth blocks are), so step s lies in block k/32 + s/4.
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

// A block of W already widened to f32 (rows from n0, depth from k0, rows ld apart): at() gives
// the f32 view the kernel reads.
struct WidenedBlock {
  const float* p;
  int64_t ld, n0, k0;
  F32Weights at(int64_t n, int64_t k) const { return {p + (n - n0) * ld + (k - k0), ld}; }
};

constexpr int kDepthLanes = 8;                 // f32 lanes of one depth step of the dot kernel
constexpr int kDotRows = 4, kDotCols = 3;      // dot tile: rows of X × rows of W
constexpr int kOuterRows = 6, kOuterCols = 16; // outer tile: rows × columns of Y

inline const char* kernel_name() {
#if defined(AD_GEMM_AVX2)
  return "avx2+fma: dot 4x3x8, outer 6x16";
#else
  return "scalar: dot 4x3x8, outer 6x16";
#endif
}

#if defined(AD_GEMM_AVX2)

using Sums4 = __m128;  // four lane sums of a dot tile row

// Lanes [0, n) set, for the last, partial depth step (n in 1..7).
inline __m256i first_lanes(int n) {
  alignas(32) static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + 8 - n));
}

// [Σa, Σb, Σc, Σd], each lane set added in the tree ((l0+l1)+(l2+l3)) + ((l4+l5)+(l6+l7)).
inline __m128 lane_sums(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 abcd = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// An empty asm that claims to change v: the value must then live in a register at this point.
inline void keep_in_register(__m256& v) { __asm__("" : "+x"(v)); }

// The 8 lanes at depth 8s of row c of W, widened to f32 in registers; and the first `tail`.
inline __m256 lanes(const F32Weights& w, int c, int64_t s) { return _mm256_loadu_ps(w.p + c * w.ld + 8 * s); }
inline __m256 tail_lanes(const F32Weights& w, int c, int64_t s, int tail) {
  return _mm256_maskload_ps(w.p + c * w.ld + 8 * s, first_lanes(tail));
}
inline __m256 widen_bf16(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }
inline __m256 widen_f16(__m128i h) {
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
// The first `tail` elements at p (the rest zero) in an 8-element register's worth of bytes.
template <class T>
inline __m128i first_elements(const T* p, int tail) {
  alignas(16) T b[16 / sizeof(T)] = {};
  __builtin_memcpy(b, p, sizeof(T) * tail);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
}
inline __m256 lanes(const Bf16Weights& w, int c, int64_t s) {
  return widen_bf16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.p + c * w.ld + 8 * s)));
}
inline __m256 tail_lanes(const Bf16Weights& w, int c, int64_t s, int tail) { return widen_bf16(first_elements(w.p + c * w.ld + 8 * s, tail)); }
inline __m256 lanes(const F16Weights& w, int c, int64_t s) {
  return widen_f16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.p + c * w.ld + 8 * s)));
}
inline __m256 tail_lanes(const F16Weights& w, int c, int64_t s, int tail) { return widen_f16(first_elements(w.p + c * w.ld + 8 * s, tail)); }
inline __m256 widen_q8(__m128i q, float d) { return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(d)); }
inline __m256 lanes(const Q8Weights& w, int c, int64_t s) {
  return widen_q8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w.q + c * w.ld + 8 * s)), w.scale(c, 8 * s));
}
inline __m256 tail_lanes(const Q8Weights& w, int c, int64_t s, int tail) {
  return widen_q8(first_elements(w.q + c * w.ld + 8 * s, tail), w.scale(c, 8 * s));
}

// Rows [0, rows) × depth [0, depth) of a weight view widened into dst (rows `ld` apart): the
// values lanes() gives, so the f32 kernel over dst has the bits of the kernel over the view.
template <class W>
inline void widen_rows(const W& w, int rows, int64_t depth, float* dst, int64_t ld) {
  const int64_t steps = depth / kDepthLanes;
  const int tail = static_cast<int>(depth % kDepthLanes);
  for (int c = 0; c < rows; ++c) {
    float* d = dst + c * ld;
    for (int64_t s = 0; s < steps; ++s) _mm256_storeu_ps(d + s * kDepthLanes, lanes(w, c, s));
    if (tail > 0) _mm256_maskstore_ps(d + steps * kDepthLanes, first_lanes(tail), tail_lanes(w, c, steps, tail));
  }
}

// One depth step of an R × C dot tile: acc[r][c] += A(r, ·)·W(c, ·) lane by lane. `load_a`
// reads 8 lanes of A (all of them, or the first few with the rest zero), `load_w(c)` those of W.
template <int R, int C, class LoadA, class LoadW>
inline void dot_step(const float* a, int64_t a_row, const LoadA& load_a, const LoadW& load_w, __m256 (&acc)[R][C]) {
  __m256 w[C];
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
    w[c] = load_w(c);
    keep_in_register(w[c]);  // else GCC folds the loads into the FMAs: one load per FMA
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r) {
    __m256 x = load_a(a + r * a_row);
    keep_in_register(x);
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(x, w[c], acc[r][c]);
  }
}

// sums[r][c] = Σ_k A(r, k)·W(c, k) over one depth block of `steps` full steps of 8 and a last
// step of `tail` (0..7) lanes, for an R × C tile (R ≤ 4, C ≤ 3). Element (i, 8s + l) of A lies
// at a[i·a_row + s·a_step + l] (packed: a_row = 8, a_step = 8·rows); W is a view (see above).
// Lanes past the tail are zero, so nothing past the block is read.
template <int R, int C, class W>
inline void dot_tile(const float* a, int64_t a_row, int64_t a_step, const W& b, int64_t steps, int tail, Sums4 sums[R]) {
  __m256 acc[R][C];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  const auto full = [](const float* p) { return _mm256_loadu_ps(p); };
#pragma GCC unroll 2
  for (int64_t s = 0; s < steps; ++s, a += a_step) dot_step<R, C>(a, a_row, full, [&](int c) { return lanes(b, c, s); }, acc);
  if (tail > 0) {
    const __m256i on = first_lanes(tail);
    dot_step<R, C>(a, a_row, [on](const float* p) { return _mm256_maskload_ps(p, on); },
                   [&](int c) { return tail_lanes(b, c, steps, tail); }, acc);
  }
  const __m256 z = _mm256_setzero_ps();
#pragma GCC unroll 4
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

// Y[0..C) = base + sums, base = the row as it is, or (when the block is the first) 0 or the row
// (accumulate), plus the bias. Only the C ≤ 3 columns of the tile are read or written.
template <int C>
inline void dot_store(float* y, __m128 sums, const float* bias, bool first, bool accumulate) {
  __m128 base = !first || accumulate ? load_first<C>(y) : _mm_setzero_ps();
  if (first && bias) base = _mm_add_ps(base, load_first<C>(bias));
  store_first<C>(y, _mm_add_ps(base, sums));
}

// acc[r][·] = Σ_k a[k·6 + r] · b[k·16 + ·] over `depth` steps of packed panels (zero-padded).
struct OuterAcc {
  __m256 v[kOuterRows][2];
};

inline void outer_tile(const float* a, const float* b, int64_t depth, OuterAcc& out) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00, c31 = c00,
         c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
  for (int64_t k = 0; k < depth; ++k) {
    const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
    __m256 x = _mm256_broadcast_ss(a + 0);
    c00 = _mm256_fmadd_ps(x, b0, c00);
    c01 = _mm256_fmadd_ps(x, b1, c01);
    x = _mm256_broadcast_ss(a + 1);
    c10 = _mm256_fmadd_ps(x, b0, c10);
    c11 = _mm256_fmadd_ps(x, b1, c11);
    x = _mm256_broadcast_ss(a + 2);
    c20 = _mm256_fmadd_ps(x, b0, c20);
    c21 = _mm256_fmadd_ps(x, b1, c21);
    x = _mm256_broadcast_ss(a + 3);
    c30 = _mm256_fmadd_ps(x, b0, c30);
    c31 = _mm256_fmadd_ps(x, b1, c31);
    x = _mm256_broadcast_ss(a + 4);
    c40 = _mm256_fmadd_ps(x, b0, c40);
    c41 = _mm256_fmadd_ps(x, b1, c41);
    x = _mm256_broadcast_ss(a + 5);
    c50 = _mm256_fmadd_ps(x, b0, c50);
    c51 = _mm256_fmadd_ps(x, b1, c51);
    a += kOuterRows;
    b += kOuterCols;
  }
  out.v[0][0] = c00, out.v[0][1] = c01, out.v[1][0] = c10, out.v[1][1] = c11, out.v[2][0] = c20, out.v[2][1] = c21;
  out.v[3][0] = c30, out.v[3][1] = c31, out.v[4][0] = c40, out.v[4][1] = c41, out.v[5][0] = c50, out.v[5][1] = c51;
}

// Row r of an outer tile into Y[0..cols): Y = (first ? (accumulate ? Y : 0) : Y) + acc.
inline void outer_store_row(float* y, const __m256 acc[2], int cols, bool first, bool accumulate) {
  const bool load = !first || accumulate;
  if (cols == kOuterCols) {
    __m256 y0 = load ? _mm256_loadu_ps(y) : _mm256_setzero_ps(), y1 = load ? _mm256_loadu_ps(y + 8) : _mm256_setzero_ps();
    _mm256_storeu_ps(y, _mm256_add_ps(y0, acc[0]));
    _mm256_storeu_ps(y + 8, _mm256_add_ps(y1, acc[1]));
    return;
  }
  for (int half = 0; half < 2; ++half) {
    const int n = cols - 8 * half;
    if (n <= 0) break;
    float* p = y + 8 * half;
    const __m256i on = n >= 8 ? _mm256_set1_epi32(-1) : first_lanes(n);
    const __m256 base = load ? _mm256_maskload_ps(p, on) : _mm256_setzero_ps();
    _mm256_maskstore_ps(p, on, _mm256_add_ps(base, acc[half]));
  }
}

#else  // scalar: the same arithmetic, lane by lane, in the same order

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

}  // namespace ad::cpu::gemm
