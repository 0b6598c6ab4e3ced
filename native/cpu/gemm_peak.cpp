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
#if defined(AD_GEMM_AVX512) || defined(AD_GEMM_AVX2)
  // The kernels' own vector width (AVX-512 where the build targets it): distinct starting values
  // and an opaque asm after every round, so the compiler can neither merge the chains nor keep
  // anything but the registers in the loop.
  using gemm::Vec;
  const auto splat = [](float x) { return gemm::vec_broadcast(&x); };
  Vec a0 = splat(1.00f), a1 = splat(1.01f), a2 = splat(1.02f), a3 = splat(1.03f), a4 = splat(1.04f), a5 = splat(1.05f);
  Vec a6 = splat(1.06f), a7 = splat(1.07f), a8 = splat(1.08f), a9 = splat(1.09f), a10 = splat(1.10f), a11 = splat(1.11f);
  Vec scale = splat(0.999999f), shift = splat(1e-7f);
  __asm__("" : "+v"(scale), "+v"(shift));
  for (int64_t i = 0; i < iterations; ++i) {
    a0 = gemm::vec_fmadd(a0, scale, shift), a1 = gemm::vec_fmadd(a1, scale, shift), a2 = gemm::vec_fmadd(a2, scale, shift);
    a3 = gemm::vec_fmadd(a3, scale, shift), a4 = gemm::vec_fmadd(a4, scale, shift), a5 = gemm::vec_fmadd(a5, scale, shift);
    a6 = gemm::vec_fmadd(a6, scale, shift), a7 = gemm::vec_fmadd(a7, scale, shift), a8 = gemm::vec_fmadd(a8, scale, shift);
    a9 = gemm::vec_fmadd(a9, scale, shift), a10 = gemm::vec_fmadd(a10, scale, shift), a11 = gemm::vec_fmadd(a11, scale, shift);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9),
                     "+v"(a10), "+v"(a11));
  }
  constexpr double kFlopsPerRound = 12 * gemm::kVecLanes * 2;
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
