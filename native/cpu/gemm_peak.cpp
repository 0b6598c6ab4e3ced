// The FMA roofline the GEMM is judged against, measured on this machine: every pool thread runs
// independent chains of fused multiply-adds on registers only (no memory traffic), enough of
// them to keep both FMA pipes of a core busy whatever the FMA latency.
#include <chrono>
#include <vector>

#include "cpu/gemm.h"
#include "cpu/gemm_kernels.h"

namespace ad::cpu {
namespace {

// Flops per second of one thread running `iterations` rounds of 12 independent FMAs.
double fma_chains_flops(int64_t iterations) {
  const auto t0 = std::chrono::steady_clock::now();
#if defined(AD_GEMM_AVX2)
  // Distinct starting values and an opaque asm after every round: the compiler can neither merge
  // the chains nor keep anything but the registers in the loop.
  __m256 a0 = _mm256_set1_ps(1.00f), a1 = _mm256_set1_ps(1.01f), a2 = _mm256_set1_ps(1.02f), a3 = _mm256_set1_ps(1.03f);
  __m256 a4 = _mm256_set1_ps(1.04f), a5 = _mm256_set1_ps(1.05f), a6 = _mm256_set1_ps(1.06f), a7 = _mm256_set1_ps(1.07f);
  __m256 a8 = _mm256_set1_ps(1.08f), a9 = _mm256_set1_ps(1.09f), a10 = _mm256_set1_ps(1.10f), a11 = _mm256_set1_ps(1.11f);
  __m256 scale = _mm256_set1_ps(0.999999f), shift = _mm256_set1_ps(1e-7f);
  __asm__("" : "+x"(scale), "+x"(shift));
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = _mm256_fmadd_ps(a0, scale, shift), a1 = _mm256_fmadd_ps(a1, scale, shift), a2 = _mm256_fmadd_ps(a2, scale, shift);
    a3 = _mm256_fmadd_ps(a3, scale, shift), a4 = _mm256_fmadd_ps(a4, scale, shift), a5 = _mm256_fmadd_ps(a5, scale, shift);
    a6 = _mm256_fmadd_ps(a6, scale, shift), a7 = _mm256_fmadd_ps(a7, scale, shift), a8 = _mm256_fmadd_ps(a8, scale, shift);
    a9 = _mm256_fmadd_ps(a9, scale, shift), a10 = _mm256_fmadd_ps(a10, scale, shift), a11 = _mm256_fmadd_ps(a11, scale, shift);
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9),
                     "+x"(a10), "+x"(a11));
  }
  constexpr double kFlopsPerRound = 12 * 8 * 2;
#else
  float a[12];
  for (int c = 0; c < 12; ++c) a[c] = 1.f + 0.01f * c;
  for (int64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < 12; ++c) a[c] = std::fma(a[c], 0.999999f, 1e-7f);
    __asm__ volatile("" : : "r"(a) : "memory");
  }
  constexpr double kFlopsPerRound = 12 * 2;
#endif
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return kFlopsPerRound * static_cast<double>(iterations) / seconds;
}

}  // namespace

std::vector<double> fma_peak_flops(ThreadPool& pool, int64_t iterations) {
  std::vector<double> per_thread(static_cast<size_t>(pool.size()));
  pool.run_on_all([&](int t) { per_thread[static_cast<size_t>(t)] = fma_chains_flops(iterations); });
  return per_thread;
}

}  // namespace ad::cpu
