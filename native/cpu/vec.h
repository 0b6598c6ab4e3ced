// Minimal SIMD layer for the CPU kernels: one vector type of the widest width compiled for,
// with load, fused multiply-add and horizontal sum. Scalar fallback keeps every target building.
#pragma once
#include <cstddef>
#include <cstdint>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

namespace ad::cpu {

#if defined(__AVX512F__)
constexpr int kLanes = 16;
using vfloat = __m512;
inline vfloat vzero() { return _mm512_setzero_ps(); }
inline vfloat vload(const float* p) { return _mm512_loadu_ps(p); }
inline void vstore(float* p, vfloat v) { _mm512_storeu_ps(p, v); }
inline vfloat vset1(float x) { return _mm512_set1_ps(x); }
inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return _mm512_fmadd_ps(a, b, c); }
inline vfloat vadd(vfloat a, vfloat b) { return _mm512_add_ps(a, b); }
inline vfloat vmul(vfloat a, vfloat b) { return _mm512_mul_ps(a, b); }
inline float vsum(vfloat v) {
  // through memory: GCC 12's 512-bit extract intrinsics trip -Wmaybe-uninitialized
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  __m256 s = _mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(t + 8));
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
  return _mm_cvtss_f32(q);
}
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int kLanes = 8;
using vfloat = __m256;
inline vfloat vzero() { return _mm256_setzero_ps(); }
inline vfloat vload(const float* p) { return _mm256_loadu_ps(p); }
inline void vstore(float* p, vfloat v) { _mm256_storeu_ps(p, v); }
inline vfloat vset1(float x) { return _mm256_set1_ps(x); }
inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return _mm256_fmadd_ps(a, b, c); }
inline vfloat vadd(vfloat a, vfloat b) { return _mm256_add_ps(a, b); }
inline vfloat vmul(vfloat a, vfloat b) { return _mm256_mul_ps(a, b); }
inline float vsum(vfloat v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}
#else
constexpr int kLanes = 1;
using vfloat = float;
inline vfloat vzero() { return 0.f; }
inline vfloat vload(const float* p) { return *p; }
inline void vstore(float* p, vfloat v) { *p = v; }
inline vfloat vset1(float x) { return x; }
inline vfloat vfma(vfloat a, vfloat b, vfloat c) { return a * b + c; }
inline vfloat vadd(vfloat a, vfloat b) { return a + b; }
inline vfloat vmul(vfloat a, vfloat b) { return a * b; }
inline float vsum(vfloat v) { return v; }
#endif

// Σ a[i]·b[i] with four independent accumulators (hides FMA latency).
inline float dot(const float* a, const float* b, int64_t n) {
  vfloat s0 = vzero(), s1 = vzero(), s2 = vzero(), s3 = vzero();
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    s0 = vfma(vload(a + i), vload(b + i), s0);
    s1 = vfma(vload(a + i + kLanes), vload(b + i + kLanes), s1);
    s2 = vfma(vload(a + i + 2 * kLanes), vload(b + i + 2 * kLanes), s2);
    s3 = vfma(vload(a + i + 3 * kLanes), vload(b + i + 3 * kLanes), s3);
  }
  for (; i + kLanes <= n; i += kLanes) s0 = vfma(vload(a + i), vload(b + i), s0);
  float s = vsum(vadd(vadd(s0, s1), vadd(s2, s3)));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[i] += alpha·x[i]
inline void axpy(float alpha, const float* x, float* y, int64_t n) {
  vfloat va = vset1(alpha);
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) vstore(y + i, vfma(va, vload(x + i), vload(y + i)));
  for (; i < n; ++i) y[i] += alpha * x[i];
}

}  // namespace ad::cpu
