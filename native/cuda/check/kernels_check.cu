// ad_check_kernels: every op of native/cuda/ops.h against the CPU backend or a float64
// reference on fresh random inputs, then timings against physical floors measured in the same run
// (a device-to-device copy) and against cuBLAS when it can be loaded. No Node-API.
//
//   ad_check_kernels [--seed N] [--json PATH] [--quick] [--no-bench] [--timeout SECONDS]
//                    [--only gemm|stats|sampling|loss|adamw|bench]
//
// Exit status: 0 all parity checks passed; 1 a parity check failed; 2 a CUDA error or no device;
// 3 the watchdog fired. Outputs are poisoned (NaN / 0xFF bytes) before every op, so an element an
// op forgets to write fails the check.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/logit_stats_cpu.h"
#include "cpu/sampling_cpu.h"
#include "cpu/threadpool.h"
#include "cuda/check/check_harness.h"
#include "cuda/ops.h"
#include "cuda/ops_gemm_sm90.h"
#include "kernels/adamw.h"

using namespace ad;
using ad::cuda::DType;
using bf16 = __nv_bfloat16;

namespace {

using harness::bf;
using harness::check;
using harness::DBuf;
using harness::g_failures;
using harness::g_json_path;
using harness::g_results;
using harness::g_rng;
using harness::g_section;
using harness::normal;
using harness::num;
using harness::start_watchdog;
using harness::timing;
using harness::to_bf16;
using harness::time_ms;
using harness::to_f32;
using harness::uniform;
using harness::write_json;
using harness::die;

// Runs fn(i) for i in [0, n) on all cores.
void parallel(int64_t n, const std::function<void(int64_t)>& fn) {
  static cpu::ThreadPool pool(cpu::hardware_threads());
  pool.parallel_for(n, 1, [&](int64_t a, int64_t b, int) {
    for (int64_t i = a; i < b; ++i) fn(i);
  });
}

cpu::ThreadPool& cpu_pool() {
  static cpu::ThreadPool pool(cpu::hardware_threads());
  return pool;
}


// ---------------------------------------------------------------------------------------------
// GEMM parity: C = alpha·op(A,B) + beta·C0 + bias against f64 on the bf16-rounded inputs.
// Error = max |C − C_ref| / (sqrt(K)·rms(A)·rms(B)), tolerance 2e-3 (f32 accumulation). For bf16
// output the output's own rounding is taken off first: round-to-nearest into 8 significant bits
// moves a value by at most 2^-8 of its magnitude (half an ulp at the bottom of a binade), so the
// error counted is max(0, |C − C_ref| − 2^-8·|C_ref|) and the tolerance is 2e-3·(1 + 2^-8). (A fixed
// tolerance on the normalized error cannot work for bf16: |C| reaches ~5σ, where half an ulp is
// up to 2^-8·5σ ≈ 0.02σ.) Small products are compared in full; large ones on 20,000 random
// elements plus the whole last row and last column (edge tiles). Every element is checked for NaN
// (the output is poisoned first).

struct GemmCase {
  cuda::GemmLayout layout;
  int64_t M, N, K;
  DType out;
  float alpha, beta;
  bool bias;
  int64_t pad;  // extra leading-dimension elements on A and B
  std::string label;
};

const char* layout_name(cuda::GemmLayout l) {
  return l == cuda::GemmLayout::NT ? "NT" : (l == cuda::GemmLayout::NN ? "NN" : "TN");
}

void gemm_parity(const GemmCase& c, cuda::GemmBackend backend, const char* backend_name) {
  const int64_t M = c.M, N = c.N, K = c.K;
  // Stored shapes: A is [M×K] (NT, NN) or [K×M] (TN); B is [N×K] (NT) or [K×N] (NN, TN).
  const bool a_kmaj = c.layout != cuda::GemmLayout::TN;
  const bool b_kmaj = c.layout == cuda::GemmLayout::NT;
  const int64_t a_rows = a_kmaj ? M : K, a_cols = a_kmaj ? K : M;
  const int64_t b_rows = b_kmaj ? N : K, b_cols = b_kmaj ? K : N;
  const int64_t lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = N;
  std::vector<float> A(static_cast<size_t>(a_rows * lda)), B(static_cast<size_t>(b_rows * ldb)), C0(static_cast<size_t>(M * ldc)), bias(static_cast<size_t>(N));
  for (auto& x : A) x = bf(uniform(-1, 1));
  for (auto& x : B) x = bf(uniform(-1, 1));
  for (auto& x : C0) x = c.out == DType::BF16 ? bf(uniform(-1, 1)) : uniform(-1, 1);
  for (auto& x : bias) x = uniform(-1, 1);
  auto a_at = [&](int64_t i, int64_t k) { return double(a_kmaj ? A[i * lda + k] : A[k * lda + i]); };
  auto b_at = [&](int64_t k, int64_t j) { return double(b_kmaj ? B[j * ldb + k] : B[k * ldb + j]); };

  DBuf<bf16> dA(A.size()), dB(B.size());
  dA.upload(to_bf16(A));
  dB.upload(to_bf16(B));
  DBuf<float> dC32(c.out == DType::F32 ? C0.size() : 0);
  DBuf<bf16> dC16(c.out == DType::BF16 ? C0.size() : 0);
  DBuf<float> dbias(N);
  dbias.upload(bias);
  if (c.beta != 0) {
    if (c.out == DType::F32) dC32.upload(C0);
    else dC16.upload(to_bf16(C0));
  } else {
    if (c.out == DType::F32) dC32.poison();
    else dC16.poison();
  }
  cuda::GemmArgs g;
  g.layout = c.layout;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = dA.p;
  g.lda = lda;
  g.B = dB.p;
  g.ldb = ldb;
  g.C = c.out == DType::F32 ? static_cast<void*>(dC32.p) : static_cast<void*>(dC16.p);
  g.ldc = ldc;
  g.c_type = c.out;
  g.alpha = c.alpha;
  g.beta = c.beta;
  g.bias = c.bias ? dbias.p : nullptr;
  CK(cuda::gemm(g, nullptr, backend));
  CK(cudaDeviceSynchronize());
  std::vector<float> C = c.out == DType::F32 ? dC32.download() : to_f32(dC16.download());

  double sa = 0, sb = 0;
  for (int64_t i = 0; i < a_rows; ++i)
    for (int64_t k = 0; k < a_cols; ++k) sa += double(A[i * lda + k]) * A[i * lda + k];
  for (int64_t i = 0; i < b_rows; ++i)
    for (int64_t k = 0; k < b_cols; ++k) sb += double(B[i * ldb + k]) * B[i * ldb + k];
  const double rms_a = std::sqrt(sa / double(std::max<int64_t>(1, a_rows * a_cols)));
  const double rms_b = std::sqrt(sb / double(std::max<int64_t>(1, b_rows * b_cols)));
  // The scale of every term of the sum: the product's √K·rms², plus β·C and the bias (with K = 0
  // they are all there is, and their f32 rounding alone would otherwise divide by ~0).
  double sc = 0, sbias = 0;
  for (float x : C0) sc += double(x) * x;
  for (float x : bias) sbias += double(x) * x;
  const double rms_c = std::sqrt(sc / double(std::max<size_t>(1, C0.size())));
  const double rms_bias = std::sqrt(sbias / double(std::max<size_t>(1, bias.size())));
  const double denom = std::max(std::sqrt(double(K)) * rms_a * rms_b * std::fabs(c.alpha) +
                                    (c.beta != 0 ? std::fabs(c.beta) * rms_c : 0.0) + (c.bias ? rms_bias : 0.0),
                                1e-30);

  int64_t nan_count = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      if (!std::isfinite(C[i * ldc + j])) ++nan_count;

  std::vector<std::pair<int64_t, int64_t>> idx;
  const bool full = double(M) * double(N) * double(K) <= 4e8;
  if (full) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) idx.emplace_back(i, j);
  } else {
    const int64_t n_rand = std::max<int64_t>(2000, std::min<int64_t>(20000, int64_t(3e8 / double(K))));  // long K: fewer
    for (int64_t s = 0; s < n_rand; ++s)
      idx.emplace_back(int64_t(g_rng() % uint64_t(M)), int64_t(g_rng() % uint64_t(N)));
    for (int64_t j = 0; j < N; ++j) idx.emplace_back(M - 1, j);
    for (int64_t i = 0; i < M; ++i) idx.emplace_back(i, N - 1);
  }
  std::vector<double> err(idx.size());
  parallel(int64_t(idx.size()), [&](int64_t s) {
    const auto [i, j] = idx[size_t(s)];
    double acc = 0;
    for (int64_t k = 0; k < K; ++k) acc += a_at(i, k) * b_at(k, j);
    double ref = double(c.alpha) * acc + (c.beta != 0 ? double(c.beta) * C0[i * ldc + j] : 0.0) +
                 (c.bias ? double(bias[j]) : 0.0);
    double e = std::fabs(double(C[i * ldc + j]) - ref);
    if (c.out == DType::BF16) e = std::max(0.0, e - std::ldexp(std::fabs(ref), -8));
    err[size_t(s)] = std::isnan(double(C[i * ldc + j])) ? INFINITY : e / denom;
  });
  double worst = 0;
  for (double e : err) worst = std::max(worst, std::isnan(e) ? INFINITY : e);
  if (nan_count) worst = INFINITY;
  const double tol = c.out == DType::F32 ? 2e-3 : 2e-3 * (1.0 + std::ldexp(1.0, -8));
  char name[200];
  std::snprintf(name, sizeof name, "%s %s M=%lld N=%lld K=%lld %s%s", backend_name, layout_name(c.layout),
                (long long)M, (long long)N, (long long)K, c.out == DType::F32 ? "f32" : "bf16", c.label.c_str());
  check("gemm", name, "err/(sqrtK·rms²)", worst, tol,
        (nan_count ? std::to_string(nan_count) + " non-finite; " : std::string()) + (full ? "full" : "sampled") +
            (c.out == DType::BF16 ? "; less 2^-8·|ref| (bf16 rounding)" : ""));
}

void gemm_checks(bool quick) {
  g_section = "gemm parity";
  std::printf("\n== GEMM parity (path: %s)\n", cuda::gemm_path());
  using L = cuda::GemmLayout;
  std::vector<GemmCase> cases = {
      // Qwen3-0.6B shapes: hidden 1024, intermediate 3072, q 16×128, kv 8×128, vocab 151936; T = 256
      {L::NT, 256, 2048, 1024, DType::BF16, 1, 0, false, 0, " q_proj"},
      {L::NT, 256, 1024, 1024, DType::BF16, 1, 0, false, 0, " k_proj"},
      {L::NT, 256, 3072, 1024, DType::BF16, 1, 0, false, 0, " gate"},
      {L::NT, 256, 1024, 3072, DType::F32, 1, 0, false, 0, " down"},
      {L::NT, 64, 151936, 1024, DType::F32, 1, 0, false, 0, " lm_head"},
      {L::NN, 256, 1024, 3072, DType::F32, 1, 0, false, 0, " dx=dy·W (down)"},
      {L::NN, 256, 1024, 2048, DType::BF16, 1, 0, false, 0, " dx=dy·W (o)"},
      {L::TN, 3072, 1024, 256, DType::F32, 1, 1, false, 0, " dW+=dyᵀx (gate)"},
      {L::TN, 1024, 3072, 256, DType::F32, 1, 1, false, 0, " dW+=dyᵀx (down)"},
      // decode / skinny and awkward edges
      {L::NT, 1, 3072, 1024, DType::BF16, 1, 0, false, 0, " decode"},
      {L::NT, 7, 1000, 1024, DType::F32, 1, 0, true, 0, " skinny+bias"},
      {L::NT, 8, 151936, 1024, DType::BF16, 1, 0, false, 0, " decode lm_head"},
      {L::NT, 9, 1000, 1000, DType::F32, 0.5f, 0.25f, true, 0, " alpha,beta,bias"},
      {L::NT, 129, 131, 1001, DType::F32, 1, 0, false, 0, " unaligned K"},
      {L::NT, 7, 131, 1001, DType::BF16, 1, 0, false, 3, " unaligned skinny"},
      {L::NT, 127, 200, 64, DType::BF16, 1, 0, false, 8, " padded ld"},
      {L::NN, 1, 1024, 3072, DType::F32, 1, 0, false, 0, " M=1"},
      {L::NN, 7, 1000, 136, DType::BF16, 1, 0.5f, false, 0, " beta"},
      {L::NN, 33, 77, 99, DType::F32, 1, 0, true, 0, " unaligned N"},
      {L::TN, 1000, 1024, 7, DType::F32, 1, 1, false, 0, " K=7 accumulate"},
      {L::TN, 136, 104, 1, DType::F32, 1, 0, false, 0, " K=1"},
      {L::TN, 77, 33, 130, DType::BF16, 1, 0, false, 0, " unaligned M,N"},
      {L::TN, 16, 1024, 256, DType::F32, 1, 1, false, 0, " LoRA rank 16"},
      {L::NT, 300, 16, 1024, DType::F32, 1, 0, false, 0, " LoRA x·Aᵀ"},
      {L::NT, 5, 64, 0, DType::F32, 1, 0.5f, true, 0, " K=0"},
  };
  if (quick) cases.resize(std::min<size_t>(cases.size(), 12));
  // For the sm_90a wgmma kernel (M, N ≥ 64, lda/ldb multiples of 8): partial tiles at the M, N and
  // K edges, alpha/beta/bias, both outputs, padded and odd leading dimensions. Run even with
  // --quick; elsewhere they exercise the mma.sync kernels.
  const std::vector<GemmCase> wgmma_cases = {
      {L::NT, 300, 520, 200, DType::F32, 0.5f, 1, true, 8, " tile edges, alpha,beta,bias, padded ld"},
      {L::NT, 130, 257, 72, DType::F32, 1, 0, false, 0, " odd N and ldc"},
      {L::NT, 64, 64, 16, DType::BF16, 1, 0, true, 0, " one partial tile, K=16"},
      {L::NT, 1024, 3072, 1024, DType::BF16, 1, 0, false, 0, " gate (T=1024)"},
      {L::NN, 384, 1000, 264, DType::BF16, 1, 0, true, 0, " tile edges, bias"},
      {L::NN, 200, 136, 1000, DType::F32, 2, 0.5f, false, 8, " alpha,beta, padded ld"},
      {L::NN, 1024, 1024, 3072, DType::F32, 1, 0, false, 0, " dx (down, T=1024)"},
      {L::TN, 200, 136, 1000, DType::BF16, 1, 0.5f, true, 0, " tile edges, beta,bias"},
      {L::TN, 3072, 1024, 1024, DType::F32, 1, 1, false, 0, " dW+= (gate, T=1024)"},
      {L::TN, 72, 520, 63, DType::F32, 1, 1, false, 8, " K<64 accumulate, padded ld"},
  };
  // Split-K (few output tiles, long K; the skinny kernel's split over blocks for small N): K tails
  // off the 64 grid in the last slice, beta/bias/alpha in the reduce, both outputs, unaligned K.
  const std::vector<GemmCase> splitk_cases = {
      {L::TN, 1024, 1024, 4096, DType::F32, 1, 1, false, 0, " split-K dW+= (k_proj)"},
      {L::NN, 441, 1024, 151936, DType::F32, 1, 0, false, 0, " split-K dh=dz·W (lm_head chunk)"},
      {L::NN, 256, 1024, 8192, DType::BF16, 1, 0, true, 0, " split-K bf16+bias"},
      {L::TN, 1024, 1024, 4100, DType::F32, 0.5f, 1, true, 0, " split-K K%64=4 tail, alpha,beta,bias"},
      {L::NT, 256, 512, 3000, DType::BF16, 1, 0.5f, false, 8, " split-K K%64=56, beta, padded ld"},
      {L::NN, 200, 136, 5001, DType::F32, 1, 0, true, 0, " split-K unaligned K"},
      {L::NT, 8, 1024, 3072, DType::F32, 1, 0, false, 0, " skinny split (down, decode)"},
      {L::NT, 16, 1024, 3072, DType::BF16, 1, 0.5f, true, 0, " skinny M=16 split, beta,bias"},
      {L::NT, 3, 520, 4096, DType::F32, 2, 0, false, 8, " skinny split, N%16, padded ld"},
      {L::NT, 12, 3072, 1000, DType::BF16, 1, 0, true, 0, " skinny M=12, K%32"},
  };
  const bool wgmma = cuda::detail::gemm_sm90_available();
  std::printf("  wgmma sm_90a kernel: %s%s\n", wgmma ? "on" : "off — ", wgmma ? "" : cuda::detail::gemm_sm90_reason());
  for (const GemmCase& c : cases) gemm_parity(c, cuda::GemmBackend::Own, "own");
  for (const GemmCase& c : wgmma_cases) gemm_parity(c, cuda::GemmBackend::Own, wgmma ? "own-wgmma" : "own");
  for (const GemmCase& c : splitk_cases) {
    cuda::GemmArgs probe;
    probe.layout = c.layout;
    probe.M = c.M;
    probe.N = c.N;
    probe.K = c.K;
    probe.lda = (c.layout == L::TN ? c.M : c.K) + c.pad;
    probe.ldb = (c.layout == L::NT ? c.K : c.N) + c.pad;
    probe.A = probe.B = reinterpret_cast<const bf16*>(uintptr_t(256));  // alignment only
    const int slices = cuda::detail::gemm_splitk_slices(probe);
    gemm_parity(c, cuda::GemmBackend::Own, slices > 1 ? ("own-splitK" + std::to_string(slices)).c_str() : "own (no split)");
  }
  if (wgmma) {  // keep the mma.sync kernels covered where wgmma takes the large shapes
    cuda::detail::gemm_sm90_set_enabled(false);
    for (size_t i = 0; i < std::min<size_t>(cases.size(), 9); ++i) gemm_parity(cases[i], cuda::GemmBackend::Own, "own-mma.sync");
    for (size_t i = 0; i < wgmma_cases.size(); i += 3) gemm_parity(wgmma_cases[i], cuda::GemmBackend::Own, "own-mma.sync");
    for (size_t i = 0; i < 6; ++i)  // the tiled split-K cases
      if (i != 1) gemm_parity(splitk_cases[i], cuda::GemmBackend::Own, "own-mma.sync-splitK");
    cuda::detail::gemm_sm90_set_enabled(true);
  }
  if (cuda::gemm_cublas_available()) {
    for (size_t i = 0; i < cases.size(); i += 3) gemm_parity(cases[i], cuda::GemmBackend::Cublas, "cublas");
  } else {
    std::printf("  (cuBLAS not loaded: %s)\n", cuda::gemm_cublas_reason());
  }
}

// ---------------------------------------------------------------------------------------------
// Logit statistics parity against cpu::logit_stats_scalar (the f64 element-at-a-time reference of
// kernels/logit_stats.h). Tolerances: max_logit, margin, top-K ids and logits exact; logsumexp and
// chosen logprob |Δ| ≤ 2e-5·max(1,|x|); entropy and KL |Δ| ≤ 1e-4·max(1,|x|); k1..k3 |Δ| ≤
// 1e-4·max(1,|x|). NaN must match NaN.

// Striped4/8: the best values all sit in the ids one thread reads (16-byte loads of 4 f32 / 8 bf16
// values, 256 threads), which forces the stats kernel's exact-prefix rescans.
enum class RowKind { Normal, Ties, Ascending, Descending, NegInf, Huge, Peaked, NaNRow, Striped4, Striped8 };

std::vector<float> make_rows(int64_t rows, int64_t V, const std::vector<RowKind>& kinds, bool bf16_values) {
  std::vector<float> z(static_cast<size_t>(rows * V));
  for (int64_t r = 0; r < rows; ++r) {
    const RowKind k = kinds[size_t(r) % kinds.size()];
    float* row = z.data() + r * V;
    for (int64_t i = 0; i < V; ++i) {
      float x = normal(3.0f);
      switch (k) {
        case RowKind::Normal: break;
        case RowKind::Ties: x = float(int(uniform(0, 4))); break;  // four distinct values
        case RowKind::Ascending: x = float(i) * 1e-3f; break;
        case RowKind::Descending: x = -float(i) * 1e-3f; break;
        case RowKind::NegInf: x = (i % 3 == 0) ? -INFINITY : x; break;
        case RowKind::Huge: x = 1e4f + x; break;
        case RowKind::Peaked: x = (i == V / 3) ? 40.0f : x; break;
        case RowKind::NaNRow: x = (i == V / 2) ? NAN : x; break;
        case RowKind::Striped4: x = ((i / 4) % 256 == 0) ? 100.0f + x : x; break;
        case RowKind::Striped8: x = ((i / 8) % 256 == 0) ? 100.0f + x : x; break;
      }
      row[i] = bf16_values ? bf(x) : x;
    }
  }
  return z;
}

double rel(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return (std::isnan(a) && std::isnan(b)) ? 0 : INFINITY;
  if (std::isinf(a) || std::isinf(b)) return a == b ? 0 : INFINITY;
  return std::fabs(a - b) / std::max(1.0, std::fabs(b));
}

void stats_parity(int64_t rows, int64_t V, int K, DType dt, bool with_ref, const std::vector<RowKind>& kinds,
                  const std::string& label) {
  const bool b16 = dt == DType::BF16;
  std::vector<float> z = make_rows(rows, V, kinds, b16);
  std::vector<float> y;
  if (with_ref) {
    y = z;
    for (auto& v : y) v = b16 ? bf(v + normal(0.5f)) : v + normal(0.5f);
  }
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) targets[size_t(r)] = (r % 5 == 4) ? -1 : int32_t(g_rng() % uint64_t(V));

  // CPU reference
  std::vector<float> c_max(rows), c_lse(rows), c_ent(rows), c_mar(rows), c_lp(rows), c_k1(rows), c_k2(rows),
      c_k3(rows), c_kl(rows), c_tl(static_cast<size_t>(rows * K));
  std::vector<int32_t> c_ti(static_cast<size_t>(rows * K));
  cpu::LogitStatsOut co{c_max.data(), c_lse.data(), c_ent.data(), c_mar.data(), c_lp.data(),
                        K ? c_ti.data() : nullptr, K ? c_tl.data() : nullptr, c_k1.data(), c_k2.data(), c_k3.data(),
                        c_kl.data()};
  cpu::logit_stats_scalar(cpu_pool(), z.data(), rows, V, V, targets.data(), K, with_ref ? y.data() : nullptr, co);

  // GPU
  DBuf<float> dz32(b16 ? 0 : z.size()), dy32(b16 || !with_ref ? 0 : y.size());
  DBuf<bf16> dz16(b16 ? z.size() : 0), dy16(b16 && with_ref ? y.size() : 0);
  if (b16) {
    dz16.upload(to_bf16(z));
    if (with_ref) dy16.upload(to_bf16(y));
  } else {
    dz32.upload(z);
    if (with_ref) dy32.upload(y);
  }
  DBuf<int32_t> dt_(static_cast<size_t>(rows));
  dt_.upload(targets);
  DBuf<float> g_max(rows), g_lse(rows), g_ent(rows), g_mar(rows), g_lp(rows), g_k1(rows), g_k2(rows), g_k3(rows),
      g_kl(rows), g_tl(size_t(std::max<int64_t>(1, rows * K)));
  DBuf<int32_t> g_ti(size_t(std::max<int64_t>(1, rows * K)));
  for (auto* b : {&g_max, &g_lse, &g_ent, &g_mar, &g_lp, &g_k1, &g_k2, &g_k3, &g_kl, &g_tl}) b->poison();
  g_ti.poison();
  cuda::LogitStatsArgs a;
  a.logits = b16 ? static_cast<const void*>(dz16.p) : static_cast<const void*>(dz32.p);
  a.ref = with_ref ? (b16 ? static_cast<const void*>(dy16.p) : static_cast<const void*>(dy32.p)) : nullptr;
  a.dtype = dt;
  a.rows = rows;
  a.vocab = V;
  a.row_stride = V;
  a.targets = dt_.p;
  a.K = K;
  cuda::LogitStatsDeviceOut o{g_max.p, g_lse.p, g_ent.p, g_mar.p, g_lp.p, K ? g_ti.p : nullptr, K ? g_tl.p : nullptr,
                              g_k1.p, g_k2.p, g_k3.p, g_kl.p};
  DBuf<char> ws(cuda::logit_stats_workspace_bytes(rows, V, K));
  CK(cuda::logit_stats(a, o, ws.p, ws.n, nullptr));
  CK(cudaDeviceSynchronize());

  auto G = [](DBuf<float>& b) { return b.download(); };
  const auto h_max = G(g_max), h_lse = G(g_lse), h_ent = G(g_ent), h_mar = G(g_mar), h_lp = G(g_lp), h_k1 = G(g_k1),
             h_k2 = G(g_k2), h_k3 = G(g_k3), h_kl = G(g_kl), h_tl = G(g_tl);
  const auto h_ti = g_ti.download();
  double e_max = 0, e_lse = 0, e_ent = 0, e_mar = 0, e_lp = 0, e_k = 0, e_kl = 0;
  int64_t topk_bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const bool nan_row = kinds[size_t(r) % kinds.size()] == RowKind::NaNRow;
    e_lse = std::max(e_lse, rel(h_lse[r], c_lse[r]));
    e_ent = std::max(e_ent, rel(h_ent[r], c_ent[r]));
    if (nan_row) continue;  // NaN rows: the sums must be NaN on both (above); the rest is unspecified
    e_max = std::max(e_max, h_max[r] == c_max[r] ? 0.0 : INFINITY);
    e_mar = std::max(e_mar, rel(h_mar[r], c_mar[r]));
    e_lp = std::max(e_lp, rel(h_lp[r], c_lp[r]));
    if (with_ref) {
      e_k = std::max({e_k, rel(h_k1[r], c_k1[r]), rel(h_k2[r], c_k2[r]), rel(h_k3[r], c_k3[r])});
      e_kl = std::max(e_kl, rel(h_kl[r], c_kl[r]));
    }
    for (int j = 0; j < K; ++j) {
      const size_t q = size_t(r * K + j);
      const bool same_val = (h_tl[q] == c_tl[q]) || (std::isinf(h_tl[q]) && std::isinf(c_tl[q]) && h_tl[q] == c_tl[q]);
      if (h_ti[q] != c_ti[q] || !same_val) ++topk_bad;
    }
  }
  char name[200];
  std::snprintf(name, sizeof name, "%s rows=%lld V=%lld K=%d%s%s", b16 ? "bf16" : "f32", (long long)rows,
                (long long)V, K, with_ref ? " ref" : "", label.c_str());
  const std::string s = "logit stats";
  check(s, name, "logsumexp rel", e_lse, 2e-5);
  check(s, name, "entropy rel", e_ent, 1e-4);
  check(s, name, "chosen logprob rel", e_lp, 2e-5);
  check(s, name, "max+margin exact", std::max(e_max, e_mar), 1e-6);
  if (K) check(s, name, "top-K mismatches", double(topk_bad), 0);
  if (with_ref) {
    check(s, name, "k1..k3 rel", e_k, 1e-4);
    check(s, name, "KL exact rel", e_kl, 1e-4);
  }
}

void stats_checks(bool quick) {
  g_section = "logit stats parity";
  std::printf("\n== Logit statistics parity (vs cpu::logit_stats_scalar, f64)\n");
  const std::vector<RowKind> normal_rows = {RowKind::Normal, RowKind::Peaked, RowKind::Huge};
  const std::vector<RowKind> hard_rows = {RowKind::Ties,   RowKind::Ascending, RowKind::Descending, RowKind::NegInf,
                                          RowKind::NaNRow, RowKind::Normal,    RowKind::Striped4,   RowKind::Striped8};
  stats_parity(64, 151936, 64, DType::F32, false, normal_rows, " qwen3");
  stats_parity(64, 151936, 20, DType::BF16, true, normal_rows, " qwen3");
  stats_parity(3, 151936, 0, DType::F32, true, normal_rows, " decode");
  stats_parity(16, 151936, 64, DType::BF16, false, hard_rows, " ties/sorted/-inf/NaN/striped");
  if (!quick) {
    stats_parity(16, 151936, 64, DType::F32, true, hard_rows, " ties/sorted/-inf/NaN/striped");
    stats_parity(600, 368, 64, DType::F32, true, normal_rows, " toy vocab");
    stats_parity(5, 50, 64, DType::F32, false, normal_rows, " K>V");
    stats_parity(4, 1, 2, DType::F32, false, normal_rows, " V=1");
    stats_parity(7, 4099, 3, DType::BF16, true, hard_rows, " odd V");
  }
}

// ---------------------------------------------------------------------------------------------
// Sampling parity: the same (seed, stream, position) must give the CPU's token. Mismatches are
// allowed only where masses differ in the last bits (expf vs the CPU's polynomial, f32 vs 2^-40
// fixed point) and a draw falls on the boundary: tolerance 0.2% of draws (expected ≈ 0).

void sampling_checks(bool quick) {
  g_section = "sampling parity";
  std::printf("\n== Sampling parity (vs cpu::sample_token)\n");
  struct PCase {
    std::string label;
    SamplingParams p;
  };
  auto P = [](float T, int k, float tp, float mp, float rep = 1, float pres = 0, float freq = 0) {
    SamplingParams p;
    p.temperature = T;
    p.top_k = k;
    p.top_p = tp;
    p.min_p = mp;
    p.repetition_penalty = rep;
    p.presence_penalty = pres;
    p.frequency_penalty = freq;
    return p;
  };
  std::vector<PCase> cases = {
      {"greedy", P(0, 0, 1, 0)},
      {"T=1", P(1, 0, 1, 0)},
      {"T=0.7", P(0.7f, 0, 1, 0)},
      {"top_k=50", P(1, 50, 1, 0)},
      {"top_k=1", P(1, 1, 1, 0)},
      {"top_k=3000", P(1.2f, 3000, 1, 0)},
      {"top_p=0.9", P(1, 0, 0.9f, 0)},
      {"top_p=0.5 T=0.6", P(0.6f, 0, 0.5f, 0)},
      {"top_k=40 top_p=0.95", P(0.8f, 40, 0.95f, 0)},
      {"min_p=0.05", P(1, 0, 1, 0.05f)},
      {"top_p=0.9 min_p=0.1", P(1, 0, 0.9f, 0.1f)},
      {"top_p=0", P(1, 0, 0, 0)},
      {"penalties", P(0.9f, 0, 1, 0, 1.3f, 0.5f, 0.2f)},
      {"penalties greedy", P(0, 0, 1, 0, 1.5f, 0.4f, 0.3f)},
      {"penalties top_k top_p", P(1, 30, 0.9f, 0.02f, 1.2f, 0.1f, 0.1f)},
  };
  struct VCase {
    int64_t V, rows;
    DType dt;
  };
  std::vector<VCase> vcases = {{151936, quick ? 6 : 16, DType::BF16}, {151936, 4, DType::F32}, {368, 32, DType::F32}};
  int64_t draws = 0, mismatches = 0;
  std::string first_mismatch;
  for (const VCase& vc : vcases) {
    const int64_t V = vc.V, rows = vc.rows;
    const bool b16 = vc.dt == DType::BF16;
    std::vector<float> z(static_cast<size_t>(rows * V));
    for (int64_t r = 0; r < rows; ++r) {
      const float scale = 1.0f + float(r % 4);  // flatter and sharper rows
      for (int64_t i = 0; i < V; ++i) {
        const float x = normal(scale);
        z[size_t(r * V + i)] = b16 ? bf(x) : x;
      }
    }
    // Penalty ids: history (prompt + generated) and generated, with repeats and out-of-range ids.
    std::vector<int32_t> hist, gen;
    std::vector<int64_t> hoff{0}, goff{0};
    for (int64_t r = 0; r < rows; ++r) {
      const int nh = 20 + int(r % 7) * 13, ng = 5 + int(r % 5) * 4;
      for (int j = 0; j < nh; ++j) hist.push_back(j == 3 ? int32_t(V + 5) : int32_t(g_rng() % uint64_t(std::min<int64_t>(V, 400))));
      for (int j = 0; j < ng; ++j) {
        const int32_t id = (j % 3 == 0 && !hist.empty()) ? hist[hist.size() - 1 - size_t(j)] : int32_t(g_rng() % uint64_t(V));
        gen.push_back(id);
        hist.push_back(id);
      }
      hoff.push_back(int64_t(hist.size()));
      goff.push_back(int64_t(gen.size()));
    }
    DBuf<float> dz32(b16 ? 0 : z.size());
    DBuf<bf16> dz16(b16 ? z.size() : 0);
    if (b16) dz16.upload(to_bf16(z));
    else dz32.upload(z);
    DBuf<int32_t> dh(hist.size()), dg(gen.size()), dout(static_cast<size_t>(rows));
    DBuf<int64_t> dho(hoff.size()), dgo(goff.size());
    dh.upload(hist);
    dg.upload(gen);
    dho.upload(hoff);
    dgo.upload(goff);
    DBuf<SamplingParams> dp(static_cast<size_t>(rows));
    DBuf<uint64_t> dpos(static_cast<size_t>(rows));
    DBuf<char> ws(cuda::sample_workspace_bytes(rows, V));
    std::vector<char> scratch(cpu::sampling_scratch_bytes(V));
    for (const PCase& pc : cases) {
      for (int pos_round = 0; pos_round < (quick ? 2 : 4); ++pos_round) {
        std::vector<SamplingParams> ps(size_t(rows), pc.p);
        std::vector<uint64_t> pos(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
          ps[size_t(r)].seed = 0x5eed0000ull + uint64_t(pos_round);
          ps[size_t(r)].stream = uint64_t(r);
          pos[size_t(r)] = uint64_t(1000 * pos_round + r);
        }
        dp.upload(ps);
        dpos.upload(pos);
        dout.poison();
        cuda::SampleArgs a;
        a.logits = b16 ? static_cast<const void*>(dz16.p) : static_cast<const void*>(dz32.p);
        a.dtype = vc.dt;
        a.rows = rows;
        a.vocab = V;
        a.row_stride = V;
        a.params = dp.p;
        a.positions = dpos.p;
        a.history = dh.p;
        a.history_offsets = dho.p;
        a.generated = dg.p;
        a.generated_offsets = dgo.p;
        a.out_tokens = dout.p;
        CK(cuda::sample_tokens(a, ws.p, ws.n, nullptr));
        CK(cudaDeviceSynchronize());
        const std::vector<int32_t> got = dout.download();
        for (int64_t r = 0; r < rows; ++r) {
          const int32_t want = cpu::sample_token(z.data() + r * V, V, ps[size_t(r)], pos[size_t(r)], hist.data() + hoff[size_t(r)],
                                                 hoff[size_t(r + 1)] - hoff[size_t(r)], gen.data() + goff[size_t(r)],
                                                 goff[size_t(r + 1)] - goff[size_t(r)], scratch.data());
          ++draws;
          if (got[size_t(r)] != want) {
            ++mismatches;
            if (first_mismatch.empty())
              first_mismatch = pc.label + " V=" + std::to_string(V) + " row " + std::to_string(r) + ": gpu " +
                               std::to_string(got[size_t(r)]) + " cpu " + std::to_string(want);
          }
        }
      }
    }
  }
  check("sampling", "same token as the CPU (" + std::to_string(draws) + " draws, 15 settings)", "mismatch fraction",
        double(mismatches) / double(std::max<int64_t>(draws, 1)), 0.002, first_mismatch);
}

// Split-row sampling (cuda::sample_tokens_split, kernels/sampling_split.h) against the one-block-
// per-row kernel on the rows it takes (T > 0, no top-k, no penalties): the same token, bit for bit
// (the same math in the same fixed point), whatever the rows' count cuts them into.
void split_sampling_checks(bool quick) {
  std::printf("\n== Split-row sampling (vs sample_tokens, bit for bit)\n");
  auto P = [](float T, float tp, float mp) {
    SamplingParams p;
    p.temperature = T;
    p.top_p = tp;
    p.min_p = mp;
    return p;
  };
  const std::vector<std::pair<std::string, SamplingParams>> cases = {
      {"T=1", P(1, 1, 0)},           {"T=0.7", P(0.7f, 1, 0)},        {"top_p=0.9", P(1, 0.9f, 0)},
      {"top_p=0.5 T=0.6", P(0.6f, 0.5f, 0)}, {"min_p=0.05", P(1, 1, 0.05f)}, {"top_p=0.9 min_p=0.1", P(1, 0.9f, 0.1f)},
      {"top_p=0", P(1, 0, 0)},       {"top_p=0.95 T=1.3", P(1.3f, 0.95f, 0)},
  };
  const std::vector<RowKind> kinds = {RowKind::Normal, RowKind::Peaked, RowKind::Ties, RowKind::NaNRow, RowKind::NegInf,
                                      RowKind::Striped4, RowKind::Huge, RowKind::Ascending};
  struct Shape {
    int64_t rows, V;
    DType dt;
  };
  const std::vector<Shape> shapes = {{1, 151936, DType::BF16}, {3, 151936, DType::F32}, {8, 151936, DType::BF16},
                                     {64, 151936, DType::F32}, {8, 32000, DType::BF16},  {5, 4099, DType::F32}};
  int64_t draws = 0, mismatches = 0, split_calls = 0;
  std::string first_mismatch;
  for (const Shape& sh : shapes) {
    const bool b16 = sh.dt == DType::BF16;
    const int chunks = cuda::sample_split_chunks(sh.rows, sh.V);
    if (chunks < 2) continue;  // the device fills one block per row: nothing to split
    const std::vector<float> z = make_rows(sh.rows, sh.V, kinds, b16);
    DBuf<float> dz32(b16 ? 0 : z.size());
    DBuf<bf16> dz16(b16 ? z.size() : 0);
    if (b16) dz16.upload(to_bf16(z));
    else dz32.upload(z);
    DBuf<SamplingParams> dp(static_cast<size_t>(sh.rows));
    DBuf<uint64_t> dpos(static_cast<size_t>(sh.rows));
    DBuf<int32_t> d_one(static_cast<size_t>(sh.rows)), d_split(static_cast<size_t>(sh.rows));
    DBuf<char> ws(cuda::sample_workspace_bytes(sh.rows, sh.V)), wss(cuda::sample_split_workspace_bytes(sh.rows, sh.V));
    for (const auto& [label, base] : cases) {
      for (int round = 0; round < (quick ? 2 : 6); ++round) {
        std::vector<SamplingParams> ps(size_t(sh.rows), base);
        std::vector<uint64_t> pos(static_cast<size_t>(sh.rows));
        for (int64_t r = 0; r < sh.rows; ++r) {
          ps[size_t(r)].seed = 0x5b1700ull + uint64_t(round);
          ps[size_t(r)].stream = uint64_t(r);
          pos[size_t(r)] = uint64_t(777 * round + r);
        }
        dp.upload(ps);
        dpos.upload(pos);
        d_one.poison();
        d_split.poison();
        cuda::SampleArgs a;
        a.logits = b16 ? static_cast<const void*>(dz16.p) : static_cast<const void*>(dz32.p);
        a.dtype = sh.dt;
        a.rows = sh.rows;
        a.vocab = sh.V;
        a.row_stride = sh.V;
        a.params = dp.p;
        a.positions = dpos.p;
        a.out_tokens = d_one.p;
        CK(cuda::sample_tokens(a, ws.p, ws.n, nullptr));
        a.out_tokens = d_split.p;
        CK(cuda::sample_tokens_split(a, wss.p, wss.n, nullptr));
        ++split_calls;
        CK(cudaDeviceSynchronize());
        const std::vector<int32_t> one = d_one.download(), split = d_split.download();
        for (int64_t r = 0; r < sh.rows; ++r) {
          ++draws;
          if (one[size_t(r)] != split[size_t(r)]) {
            ++mismatches;
            if (first_mismatch.empty())
              first_mismatch = label + " V=" + std::to_string(sh.V) + " rows=" + std::to_string(sh.rows) + " chunks=" +
                               std::to_string(chunks) + " row " + std::to_string(r) + ": one-block " +
                               std::to_string(one[size_t(r)]) + " split " + std::to_string(split[size_t(r)]);
          }
        }
      }
    }
  }
  check("sampling", "split-row == one block per row (" + std::to_string(draws) + " draws, " + std::to_string(split_calls) + " calls)",
        "mismatch fraction", draws ? double(mismatches) / double(draws) : NAN, 0.0, first_mismatch);
}

// ---------------------------------------------------------------------------------------------
// LM-head loss backward parity against the f64 per-row math of Transformer::lm_head_backward
// (native/model/backward.cpp): dz = a·(onehot − p) + b·(−p(log p + H)).
// Tolerance per element: |Δ| ≤ 1e-4·|ref| + 1e-7·(|a|+|b|) for f32 output, (2^-8 + 1e-4)·|ref| +
// 1e-7·(|a|+|b|) for bf16 output (the bf16 rounding bound, 2^-8 of the magnitude, on top of the f32
// tolerance: 2^-8 alone is reached by values just above a power of two); lse, entropy, target
// logprob rel ≤ 2e-5, 1e-4, 2e-5.

void loss_parity(int64_t rows, int64_t V, DType in, DType out, bool with_b, bool in_place) {
  const bool b16 = in == DType::BF16;
  std::vector<float> z = make_rows(rows, V, {RowKind::Normal, RowKind::Peaked, RowKind::Huge}, b16);
  std::vector<int32_t> targets(static_cast<size_t>(rows));
  std::vector<float> av(static_cast<size_t>(rows)), bv(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    targets[size_t(r)] = r % 4 == 3 ? -1 : int32_t(g_rng() % uint64_t(V));
    av[size_t(r)] = uniform(-2, 2);
    bv[size_t(r)] = with_b ? uniform(-0.5f, 0.5f) : 0.0f;
  }
  // f64 reference (backward.cpp's loop)
  std::vector<double> ref(z.size()), r_lse(static_cast<size_t>(rows)), r_h(static_cast<size_t>(rows)), r_lp(static_cast<size_t>(rows));
  parallel(rows, [&](int64_t i) {
    const float* zr = z.data() + i * V;
    float m = -INFINITY;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, zr[j]);
    double s = 0, sz = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double e = std::exp(double(zr[j] - m));
      s += e;
      sz += e * (zr[j] - m);
    }
    const double lse = std::log(s), H = lse - sz / s;
    const double ai = av[size_t(i)], bi = bv[size_t(i)];
    for (int64_t j = 0; j < V; ++j) {
      const double logp = (zr[j] - m) - lse, p = std::exp(logp);
      ref[size_t(i * V + j)] = -ai * p - bi * p * (logp + H);
    }
    const int32_t t = targets[size_t(i)];
    if (t >= 0 && t < V) ref[size_t(i * V + t)] += ai;
    r_lse[size_t(i)] = m + lse;
    r_h[size_t(i)] = H;
    r_lp[size_t(i)] = (t >= 0 && t < V) ? double(zr[t]) - (m + lse) : NAN;
  });
  DBuf<float> dz32(in == DType::F32 ? z.size() : 0), do32(out == DType::F32 && !in_place ? z.size() : 0);
  DBuf<bf16> dz16(in == DType::BF16 ? z.size() : 0), do16(out == DType::BF16 && !in_place ? z.size() : 0);
  if (b16) dz16.upload(to_bf16(z));
  else dz32.upload(z);
  if (!in_place) {
    if (out == DType::F32) do32.poison();
    else do16.poison();
  }
  DBuf<int32_t> dt(static_cast<size_t>(rows));
  DBuf<float> da(static_cast<size_t>(rows)), db(static_cast<size_t>(rows)), dl(static_cast<size_t>(rows)), dh(static_cast<size_t>(rows)), dlp(static_cast<size_t>(rows));
  dt.upload(targets);
  da.upload(av);
  db.upload(bv);
  dl.poison();
  dh.poison();
  dlp.poison();
  cuda::LossBackwardArgs a;
  a.logits = b16 ? static_cast<const void*>(dz16.p) : static_cast<const void*>(dz32.p);
  a.logits_dtype = in;
  a.dlogits = in_place ? const_cast<void*>(a.logits) : (out == DType::F32 ? static_cast<void*>(do32.p) : static_cast<void*>(do16.p));
  a.dlogits_dtype = out;
  a.rows = rows;
  a.vocab = V;
  a.row_stride = V;
  a.targets = dt.p;
  a.a = da.p;
  a.b = with_b ? db.p : nullptr;
  a.lse = dl.p;
  a.entropy = dh.p;
  a.target_logprob = dlp.p;
  CK(cuda::lm_head_loss_backward(a, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<float> got;
  if (out == DType::F32) got = in_place ? dz32.download() : do32.download();
  else got = to_f32(in_place ? dz16.download() : do16.download());
  const double relt = out == DType::F32 ? 1e-4 : 1.0 / 256 + 1e-4;
  double worst = 0;
  for (int64_t i = 0; i < rows; ++i) {
    const double scale = 1e-7 * (std::fabs(av[size_t(i)]) + std::fabs(bv[size_t(i)]));
    for (int64_t j = 0; j < V; ++j) {
      const double r = ref[size_t(i * V + j)], g = got[size_t(i * V + j)];
      const double e = std::fabs(g - r) / (relt * std::fabs(r) + scale + 1e-30);
      worst = std::max(worst, std::isnan(e) || std::isnan(g) ? INFINITY : e);
    }
  }
  const auto hl = dl.download(), hh = dh.download(), hlp = dlp.download();
  double e_l = 0, e_h = 0, e_lp = 0;
  for (int64_t i = 0; i < rows; ++i) {
    e_l = std::max(e_l, rel(hl[size_t(i)], r_lse[size_t(i)]));
    e_h = std::max(e_h, rel(hh[size_t(i)], r_h[size_t(i)]));
    e_lp = std::max(e_lp, rel(hlp[size_t(i)], r_lp[size_t(i)]));
  }
  char name[200];
  std::snprintf(name, sizeof name, "%s→%s rows=%lld V=%lld%s%s", in == DType::F32 ? "f32" : "bf16",
                out == DType::F32 ? "f32" : "bf16", (long long)rows, (long long)V, with_b ? " a,b" : " a",
                in_place ? " in place" : "");
  check("loss backward", name, "err/tol (≤1)", worst, 1.0);
  check("loss backward", name, "lse/H/logp rel", std::max({e_l / 2e-5, e_h / 1e-4, e_lp / 2e-5}), 1.0,
        "normalized by 2e-5, 1e-4, 2e-5");
}

void loss_checks(bool quick) {
  g_section = "loss backward parity";
  std::printf("\n== LM-head loss backward parity (vs f64 lm_head_backward math)\n");
  loss_parity(8, 151936, DType::F32, DType::F32, true, false);
  loss_parity(8, 151936, DType::BF16, DType::BF16, true, true);
  if (!quick) {
    loss_parity(5, 151936, DType::F32, DType::BF16, false, false);
    loss_parity(300, 368, DType::BF16, DType::F32, true, false);
  }
}

// ---------------------------------------------------------------------------------------------
// AdamW parity against kernels::adamw_update on the CPU, clipping factor from an f64 norm.
// Tolerance: |Δw| ≤ 1e-6·|w| + 1e-3·lr; m, v: |Δ| ≤ 1e-6 of the magnitudes of the two terms
// summed (β·m₀ and (1−β)·g, β₂·v₀ and (1−β₂)·g²): nvcc contracts them into an FMA and this host
// code does not, and when β₁·m₀ ≈ −(1−β₁)·g the result is far smaller than either term, so a
// tolerance relative to the result alone fails on ~1% of a million elements. The bf16 copy equals
// bf16(w_gpu) exactly; a NaN gradient leaves everything bit-identical.

void adamw_checks() {
  g_section = "adamw parity";
  std::printf("\n== AdamW parity (vs kernels::adamw_update on the CPU)\n");
  const int64_t sizes[3] = {1000003, 1024, 37};
  std::vector<std::vector<float>> w(3), g(3), m(3), v(3);
  double ss = 0;
  for (int t = 0; t < 3; ++t) {
    const size_t n = size_t(sizes[t]);
    w[t].resize(n);
    g[t].resize(n);
    m[t].resize(n);
    v[t].resize(n);
    for (size_t i = 0; i < n; ++i) {
      w[t][i] = normal(0.05f);
      g[t][i] = normal(0.01f);
      m[t][i] = normal(0.001f);
      v[t][i] = std::fabs(normal(1e-5f));
      ss += double(g[t][i]) * g[t][i];
    }
  }
  const float max_norm = 0.5f * float(std::sqrt(ss));  // clipping active: scale ≈ 0.5
  kernels::AdamWParams p{};
  p.lr = 1e-3f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-8f;
  p.weight_decay = 0.1f;
  const int step = 3;
  p.bias_correction1 = 1.f - std::pow(p.beta1, float(step));
  p.bias_correction2 = 1.f - std::pow(p.beta2, float(step));
  p.grad_scale = 1.f;
  const double norm = std::sqrt(ss);
  kernels::AdamWParams pc = p;
  pc.grad_scale = (max_norm > 0 && norm > max_norm) ? float(max_norm / norm) : 1.f;

  std::vector<std::unique_ptr<DBuf<float>>> own;
  auto up = [&](const std::vector<float>& h) {
    own.emplace_back(new DBuf<float>(h.size()));
    own.back()->upload(h);
    return own.back()->p;
  };
  std::vector<cuda::AdamWTensor> desc(3);
  std::vector<std::unique_ptr<DBuf<bf16>>> wb(3);
  for (int t = 0; t < 3; ++t) {
    wb[t].reset(new DBuf<bf16>(w[t].size()));
    wb[t]->poison();
    desc[t] = {up(w[t]), wb[t]->p, up(g[t]), up(m[t]), up(v[t]), sizes[t], t == 2 ? 0 : 1};
  }
  DBuf<cuda::GradClip> clip(1);
  CK(cuda::grad_clip_reset(clip.p, nullptr));
  for (int t = 0; t < 3; ++t) CK(cuda::grad_sumsq(desc[t].g, desc[t].n, clip.p, nullptr));
  CK(cuda::grad_clip_finalize(clip.p, max_norm, nullptr));
  // tensor 0 through adamw_step, tensors 1–2 through adamw_step_multi
  CK(cuda::adamw_step(desc[0].w, desc[0].w_bf16, desc[0].g, desc[0].m, desc[0].v, desc[0].n, p, true, clip.p, nullptr));
  DBuf<cuda::AdamWTensor> ddesc(2);
  CK(cudaMemcpy(ddesc.p, desc.data() + 1, 2 * sizeof(cuda::AdamWTensor), cudaMemcpyHostToDevice));
  CK(cuda::adamw_step_multi(ddesc.p, 2, 1024, p, clip.p, nullptr));
  CK(cudaDeviceSynchronize());
  const cuda::GradClip hc = clip.download()[0];
  check("adamw", "global grad norm", "rel", std::fabs(hc.norm - norm) / norm, 1e-6);

  double ew = 0, em = 0;
  bool bf_ok = true;
  for (int t = 0; t < 3; ++t) {
    const int64_t n = sizes[t];
    std::vector<float> W = w[t], M = m[t], Vv = v[t];
    kernels::adamw_update(W.data(), g[t].data(), M.data(), Vv.data(), n, pc, t != 2);
    std::vector<float> gw(static_cast<size_t>(n)), gm(static_cast<size_t>(n)), gv(static_cast<size_t>(n));
    CK(cudaMemcpy(gw.data(), desc[t].w, size_t(n) * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gm.data(), desc[t].m, size_t(n) * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(gv.data(), desc[t].v, size_t(n) * 4, cudaMemcpyDeviceToHost));
    const std::vector<bf16> gb = wb[t]->download();
    for (int64_t i = 0; i < n; ++i) {
      ew = std::max(ew, std::fabs(double(gw[i]) - W[i]) / (1e-6 * std::fabs(W[i]) + 1e-3 * p.lr));
      const double gs = double(g[t][i]) * pc.grad_scale;
      const double mag_m = std::fabs(M[i]) + p.beta1 * std::fabs(m[t][i]) + (1.0 - p.beta1) * std::fabs(gs);
      const double mag_v = std::fabs(Vv[i]) + p.beta2 * std::fabs(v[t][i]) + (1.0 - p.beta2) * gs * gs;
      em = std::max({em, std::fabs(double(gm[i]) - M[i]) / (1e-6 * mag_m + 1e-30),
                     std::fabs(double(gv[i]) - Vv[i]) / (1e-6 * mag_v + 1e-30)});
      if (__bfloat162float(gb[i]) != bf(gw[i])) bf_ok = false;
    }
  }
  check("adamw", "w (f32 master), 3 tensors, clip on", "err/tol (≤1)", ew, 1.0);
  check("adamw", "m, v", "err/tol (≤1)", em, 1.0);
  check("adamw", "bf16 copy == bf16(w)", "mismatch", bf_ok ? 0 : 1, 0);

  // A NaN gradient: the step is skipped, nothing changes.
  std::vector<float> g_nan = g[1];
  g_nan[17] = NAN;
  CK(cudaMemcpy(const_cast<float*>(desc[1].g), g_nan.data(), g_nan.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float> before(static_cast<size_t>(sizes[1]));
  CK(cudaMemcpy(before.data(), desc[1].w, before.size() * 4, cudaMemcpyDeviceToHost));
  CK(cuda::grad_clip_reset(clip.p, nullptr));
  CK(cuda::grad_sumsq(desc[1].g, desc[1].n, clip.p, nullptr));
  CK(cuda::grad_clip_finalize(clip.p, 1.0f, nullptr));
  CK(cuda::adamw_step(desc[1].w, desc[1].w_bf16, desc[1].g, desc[1].m, desc[1].v, desc[1].n, p, true, clip.p, nullptr));
  CK(cudaDeviceSynchronize());
  std::vector<float> after(before.size());
  CK(cudaMemcpy(after.data(), desc[1].w, after.size() * 4, cudaMemcpyDeviceToHost));
  const cuda::GradClip hc2 = clip.download()[0];
  check("adamw", "NaN gradient skips the step", "changed/finite flag",
        double(std::memcmp(before.data(), after.data(), before.size() * 4) != 0) + double(hc2.finite), 0);
}

// ---------------------------------------------------------------------------------------------
// Benchmarks

struct Row {
  std::string what, value, floor, ratio;
};
std::vector<Row> g_table;

double copy_gbps(size_t bytes, void* dst, const void* src) {
  const double ms = time_ms([&] { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); }, 20);
  return 2.0 * double(bytes) / (ms * 1e6);  // read + write
}

// Logits for the statistics rows, generated once: f32 and bf16, each with an identical reference.
struct StatsBenchData {
  int64_t rows, V;
  DBuf<float> z32, y32;
  DBuf<bf16> z16, y16;
  StatsBenchData(int64_t r, int64_t v)
      : rows(r), V(v), z32(size_t(r * v)), y32(size_t(r * v)), z16(size_t(r * v)), y16(size_t(r * v)) {
    std::vector<float> h(static_cast<size_t>(r * v));
    const uint64_t seed = g_rng();
    parallel(r, [&](int64_t row) {
      std::mt19937_64 rng(seed + uint64_t(row));  // one generator per row (g_rng is not thread-safe)
      std::normal_distribution<float> nd(0.f, 3.f);
      for (int64_t i = 0; i < v; ++i) h[size_t(row * v + i)] = nd(rng);
    });
    z32.upload(h);
    CK(cudaMemcpy(y32.p, z32.p, h.size() * 4, cudaMemcpyDeviceToDevice));
    z16.upload(to_bf16(h));
    CK(cudaMemcpy(y16.p, z16.p, h.size() * 2, cudaMemcpyDeviceToDevice));
  }
};

// GB/s of logit_stats over the first `rows` rows: bytes read once (logits, plus the reference) per
// call, calls back to back (several per timed run, so small batches are not launch-bound).
void bench_stats(const StatsBenchData& d, int64_t rows, int K, DType dt, bool with_ref, double copy_bw,
                 const char* label) {
  const int64_t V = d.V;
  const size_t esz = dt == DType::F32 ? 4 : 2;
  const size_t bytes = size_t(rows * V) * esz * (with_ref ? 2 : 1);
  DBuf<float> o(size_t(rows) * 9 + 16);
  DBuf<float> tl(size_t(std::max<int64_t>(1, rows * K)));
  DBuf<int32_t> ti(size_t(std::max<int64_t>(1, rows * K)));
  DBuf<int32_t> tg(static_cast<size_t>(rows));
  CK(cudaMemset(tg.p, 0, size_t(rows) * 4));
  cuda::LogitStatsArgs a;
  a.logits = dt == DType::F32 ? static_cast<const void*>(d.z32.p) : static_cast<const void*>(d.z16.p);
  a.ref = !with_ref ? nullptr : dt == DType::F32 ? static_cast<const void*>(d.y32.p) : static_cast<const void*>(d.y16.p);
  a.dtype = dt;
  a.rows = rows;
  a.vocab = V;
  a.row_stride = V;
  a.targets = tg.p;
  a.K = K;
  float* b = o.p;
  cuda::LogitStatsDeviceOut out{b, b + rows, b + 2 * rows, b + 3 * rows, b + 4 * rows, K ? ti.p : nullptr,
                                K ? tl.p : nullptr, b + 5 * rows, b + 6 * rows, b + 7 * rows, b + 8 * rows};
  DBuf<char> ws(cuda::logit_stats_workspace_bytes(rows, V, K));
  const int inner = rows <= 64 ? 20 : 4;
  const double ms = time_ms([&] {
    for (int i = 0; i < inner; ++i) CK(cuda::logit_stats(a, out, ws.p, ws.n, nullptr));
  }, 15) / inner;
  const double gbps = double(bytes) / (ms * 1e6);
  char name[160];
  std::snprintf(name, sizeof name, "logit stats %s %lld×%lld K=%d%s%s", dt == DType::F32 ? "f32" : "bf16",
                (long long)rows, (long long)V, K, with_ref ? " +ref" : "", label);
  timing("bench", name, "GB/s", gbps,
         "copy " + num(copy_bw) + " GB/s; " + num(ms * 1e3) + " us; " + num(100.0 * gbps / copy_bw) + "% of copy");
  char v[64], f[64], r[64];
  std::snprintf(v, sizeof v, "%.0f GB/s (%.1f us)", gbps, ms * 1e3);
  std::snprintf(f, sizeof f, "%.0f GB/s copy", copy_bw);
  std::snprintf(r, sizeof r, "%.0f%%", 100.0 * gbps / copy_bw);
  g_table.push_back({name, v, f, r});
}

// Microseconds per sample_tokens (split: sample_tokens_split) call over `rows` rows of V bf16
// logits (calls back to back).
void bench_sampling(int64_t rows, const SamplingParams& sp, const std::string& setting, bool split = false) {
  const int64_t V = 151936;
  DBuf<bf16> z(static_cast<size_t>(rows * V));
  std::vector<float> h(static_cast<size_t>(rows * V));
  for (auto& x : h) x = normal(3);
  z.upload(to_bf16(h));
  std::vector<SamplingParams> ps(size_t(rows), sp);
  DBuf<SamplingParams> dp(static_cast<size_t>(rows));
  dp.upload(ps);
  DBuf<uint64_t> pos(static_cast<size_t>(rows));
  CK(cudaMemset(pos.p, 0, size_t(rows) * 8));
  DBuf<int32_t> out(static_cast<size_t>(rows));
  DBuf<char> ws(split ? cuda::sample_split_workspace_bytes(rows, V) : cuda::sample_workspace_bytes(rows, V));
  cuda::SampleArgs a;
  a.logits = z.p;
  a.dtype = DType::BF16;
  a.rows = rows;
  a.vocab = V;
  a.row_stride = V;
  a.params = dp.p;
  a.positions = pos.p;
  a.out_tokens = out.p;
  const int inner = 10;
  const double ms = time_ms([&] {
    for (int i = 0; i < inner; ++i) CK(split ? cuda::sample_tokens_split(a, ws.p, ws.n, nullptr) : cuda::sample_tokens(a, ws.p, ws.n, nullptr));
  }, 10) / inner;
  const std::string name = std::string(split ? "sample split-row " : "sample ") + setting + ", " + std::to_string(rows) + " rows × 151936";
  timing("bench", name, "us", ms * 1e3);
  g_table.push_back({name, num(ms * 1e3) + " us", "", ""});
}

void bench_gemm(cuda::GemmLayout l, int64_t M, int64_t N, int64_t K, DType out, const char* label) {
  const bool a_k = l != cuda::GemmLayout::TN, b_k = l == cuda::GemmLayout::NT;
  (void)a_k;
  (void)b_k;
  DBuf<bf16> A(static_cast<size_t>(M * K)), B(static_cast<size_t>(N * K));
  DBuf<char> C(size_t(M * N) * (out == DType::F32 ? 4 : 2));
  {
    std::vector<float> h(size_t(std::max(M, N) * K));
    for (auto& x : h) x = uniform(-1, 1);
    auto hb = to_bf16(h);
    CK(cudaMemcpy(A.p, hb.data(), size_t(M * K) * 2, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(B.p, hb.data(), size_t(N * K) * 2, cudaMemcpyHostToDevice));
  }
  CK(cudaMemset(C.p, 0, C.n));
  cuda::GemmArgs g;
  g.layout = l;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A.p;
  g.lda = l == cuda::GemmLayout::TN ? M : K;
  g.B = B.p;
  g.ldb = l == cuda::GemmLayout::NT ? K : N;
  g.C = C.p;
  g.ldc = N;
  g.c_type = out;
  g.beta = l == cuda::GemmLayout::TN ? 1.0f : 0.0f;
  const double flops = 2.0 * double(M) * double(N) * double(K);
  const double ms_own = time_ms([&] { CK(cuda::gemm(g, nullptr, cuda::GemmBackend::Own)); }, 10);
  const bool wgmma = cuda::detail::gemm_sm90_takes(g);
  double ms_mma = NAN;  // the mma.sync kernels on the same shape, when wgmma took it
  if (wgmma) {
    cuda::detail::gemm_sm90_set_enabled(false);
    ms_mma = time_ms([&] { CK(cuda::gemm(g, nullptr, cuda::GemmBackend::Own)); }, 10);
    cuda::detail::gemm_sm90_set_enabled(true);
  }
  const int slices = cuda::detail::gemm_splitk_slices(g);
  double ms_whole = NAN;  // split-K off, when the product splits
  if (slices > 1) {
    cuda::detail::gemm_splitk_set_enabled(false);
    ms_whole = time_ms([&] { CK(cuda::gemm(g, nullptr, cuda::GemmBackend::Own)); }, 10);
    cuda::detail::gemm_splitk_set_enabled(true);
  }
  double ms_blas = NAN;
  if (cuda::gemm_cublas_available()) ms_blas = time_ms([&] { CK(cuda::gemm(g, nullptr, cuda::GemmBackend::Cublas)); }, 10);
  const double tf_own = flops / (ms_own * 1e9), tf_blas = flops / (ms_blas * 1e9);
  char name[160];
  std::snprintf(name, sizeof name, "gemm %s %lldx%lldx%lld %s%s", layout_name(l), (long long)M, (long long)N,
                (long long)K, out == DType::F32 ? "f32" : "bf16", label);
  timing("bench", name, "TFLOP/s own", tf_own,
         std::string(wgmma ? "wgmma; " : "") + (slices > 1 ? "split-K " + std::to_string(slices) + "; " : "") +
             (std::isnan(tf_blas) ? "no cuBLAS" : "cuBLAS " + num(tf_blas)));
  if (slices > 1)
    timing("bench", std::string(name) + " whole K", "TFLOP/s own", flops / (ms_whole * 1e9), "AUTODIDACT_GEMM_SPLITK=0 path");
  if (wgmma) timing("bench", std::string(name) + " mma.sync", "TFLOP/s own", flops / (ms_mma * 1e9), "AUTODIDACT_GEMM_WGMMA=0 path");
  char v[64], f[64], r[64];
  std::snprintf(v, sizeof v, "%.1f TFLOP/s%s%s", tf_own, wgmma ? " wgmma" : "", slices > 1 ? " splitK" : "");
  if (std::isnan(tf_blas)) {
    std::snprintf(f, sizeof f, "(no cuBLAS)");
    std::snprintf(r, sizeof r, "-");
  } else {
    std::snprintf(f, sizeof f, "%.1f cuBLAS", tf_blas);
    std::snprintf(r, sizeof r, "%.0f%%", 100.0 * tf_own / tf_blas);
  }
  g_table.push_back({name, v, f, r});
  if (wgmma) {
    const double tf_mma = flops / (ms_mma * 1e9);
    std::snprintf(v, sizeof v, "%.1f TFLOP/s mma.sync", tf_mma);
    if (!std::isnan(tf_blas)) std::snprintf(r, sizeof r, "%.0f%%", 100.0 * tf_mma / tf_blas);
    g_table.push_back({std::string(name) + " (wgmma off)", v, f, r});
  }
  if (slices > 1) {
    std::snprintf(v, sizeof v, "%.1f TFLOP/s", flops / (ms_whole * 1e9));
    if (!std::isnan(tf_blas)) std::snprintf(r, sizeof r, "%.0f%%", 100.0 * flops / (ms_whole * 1e9) / tf_blas);
    g_table.push_back({std::string(name) + " (split-K off)", v, f, r});
  }
  if (M <= 8) {  // decode: weight bandwidth
    const double gbps = double(N * K * 2) / (ms_own * 1e6);
    char w[64];
    std::snprintf(w, sizeof w, "%.0f GB/s weights", gbps);
    g_table.push_back({std::string(name) + " (bandwidth)", w, "", ""});
    timing("bench", std::string(name) + " weights", "GB/s", gbps);
  }
}

// Decode linears (NT, M ≤ 16 tokens): weight bytes per second against the copy floor, calls back
// to back (as in a decode step) over enough weight copies (≥ 256 MB) that L2 holds none of them.
void bench_decode(int64_t M, int64_t N, int64_t K, DType out, double copy_bw) {
  const size_t w_elems = size_t(N * K);
  const size_t copies = std::max<size_t>(1, (size_t(256) << 20) / (w_elems * 2));
  DBuf<bf16> W(w_elems * copies), X(size_t(M * K));
  DBuf<char> C(size_t(M * N) * (out == DType::F32 ? 4 : 2));
  CK(cudaMemset(W.p, 0x3F, W.n * sizeof(bf16)));  // bf16 0x3F3F ≈ 0.75
  CK(cudaMemset(X.p, 0x3F, X.n * sizeof(bf16)));
  cuda::GemmArgs g;
  g.layout = cuda::GemmLayout::NT;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = X.p;
  g.lda = K;
  g.ldb = K;
  g.C = C.p;
  g.ldc = N;
  g.c_type = out;
  const double ms = time_ms([&] {
    for (size_t i = 0; i < copies; ++i) {
      g.B = W.p + i * w_elems;
      CK(cuda::gemm(g, nullptr, cuda::GemmBackend::Own));
    }
  }, 10) / double(copies);
  const double gbps = double(w_elems * 2) / (ms * 1e6);
  const int slices = cuda::detail::gemm_splitk_slices(g);
  char name[160];
  std::snprintf(name, sizeof name, "decode NT %lldx%lldx%lld %s weights%s", (long long)M, (long long)N, (long long)K,
                out == DType::F32 ? "f32" : "bf16", slices > 1 ? (" split " + std::to_string(slices)).c_str() : "");
  timing("bench", name, "GB/s", gbps,
         num(ms * 1e3) + " us/call; " + num(100.0 * gbps / copy_bw) + "% of copy " + num(copy_bw) + " GB/s");
  char v[64], f[64], r[64];
  std::snprintf(v, sizeof v, "%.0f GB/s (%.1f us)", gbps, ms * 1e3);
  std::snprintf(f, sizeof f, "%.0f GB/s copy", copy_bw);
  std::snprintf(r, sizeof r, "%.0f%%", 100.0 * gbps / copy_bw);
  g_table.push_back({name, v, f, r});
}

void benchmarks(bool quick) {
  g_section = "benchmarks";
  std::printf("\n== Timings (median of cudaEvent runs)\n");
  const size_t big = size_t(256) * 151936 * 4;
  DBuf<char> s(big), d(big);
  CK(cudaMemset(s.p, 1, big));
  const double copy_bw = copy_gbps(big, d.p, s.p);
  timing("bench", "device-to-device copy 155.6 MB", "GB/s", copy_bw, "read+write bytes / time");
  g_table.push_back({"cudaMemcpy D2D 155.6 MB (read+write)", num(copy_bw) + " GB/s", "", "floor"});

  {  // logit statistics: f32/bf16 × K ∈ {0, 20, 64} × rows ∈ {8, 64, 256}, and with a reference row
    const StatsBenchData data(256, 151936);
    for (DType dt : {DType::F32, DType::BF16})
      for (int K : {0, 20, 64})
        for (int64_t rows : {int64_t(8), int64_t(64), int64_t(256)}) {
          if (quick && rows == 64) continue;
          bench_stats(data, rows, K, dt, false, copy_bw, rows == 8 ? " (decode batch)" : "");
        }
    bench_stats(data, 256, 0, DType::F32, true, copy_bw, "");
    bench_stats(data, 128, 20, DType::BF16, true, copy_bw, "");
    bench_stats(data, 256, 64, DType::BF16, true, copy_bw, "");
    bench_stats(data, 16, 20, DType::BF16, true, copy_bw, " (decode batch)");
  }

  using L = cuda::GemmLayout;
  bench_gemm(L::NT, 4096, 3072, 1024, DType::BF16, " gate/up fwd");
  bench_gemm(L::NT, 4096, 1024, 3072, DType::BF16, " down fwd");
  bench_gemm(L::NN, 4096, 1024, 3072, DType::BF16, " dx");
  bench_gemm(L::TN, 3072, 1024, 4096, DType::F32, " dW (+=)");
  bench_gemm(L::TN, 1024, 1024, 4096, DType::F32, " dW k_proj (+=)");
  bench_gemm(L::NN, 2048, 1024, 151936, DType::F32, " dh=dz·W lm_head");
  bench_gemm(L::NT, 2048, 151936, 1024, DType::BF16, " lm_head");
  bench_gemm(L::NT, 1, 3072, 1024, DType::BF16, " decode");
  bench_gemm(L::NT, 8, 151936, 1024, DType::F32, " decode lm_head");
  bench_decode(1, 3072, 1024, DType::BF16, copy_bw);
  bench_decode(8, 3072, 1024, DType::BF16, copy_bw);
  bench_decode(8, 1024, 3072, DType::F32, copy_bw);
  bench_decode(8, 1024, 1024, DType::BF16, copy_bw);
  bench_decode(16, 3072, 1024, DType::BF16, copy_bw);
  bench_decode(8, 151936, 1024, DType::F32, copy_bw);

  {  // AdamW: bytes = read w,g,m,v + write w,m,v (f32) + write bf16
    const int64_t n = 64ll << 20;
    DBuf<float> w(static_cast<size_t>(n)), g(static_cast<size_t>(n)), m(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    DBuf<bf16> wb(static_cast<size_t>(n));
    for (auto* b : {&w, &g, &m, &v}) CK(cudaMemset(b->p, 0, size_t(n) * 4));
    kernels::AdamWParams p{1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 0.1f, 0.001f, 1.0f};
    const double ms = time_ms([&] { CK(cuda::adamw_step(w.p, wb.p, g.p, m.p, v.p, n, p, true, nullptr, nullptr)); }, 10);
    const double gbps = double(n) * 30.0 / (ms * 1e6);
    timing("bench", "adamw 64M params (30 B/param)", "GB/s", gbps);
    char val[64], r[64];
    std::snprintf(val, sizeof val, "%.0f GB/s", gbps);
    std::snprintf(r, sizeof r, "%.0f%%", 100.0 * gbps / copy_bw);
    g_table.push_back({"adamw 64M params (30 B/param)", val, num(copy_bw) + " GB/s copy", r});
  }
  {  // sampling latency: the candidate path (top-k), the general one (top-p alone), and plain T
    SamplingParams kp;
    kp.temperature = 0.8f;
    kp.top_k = 50;
    kp.top_p = 0.95f;
    SamplingParams pp;
    pp.temperature = 0.8f;
    pp.top_p = 0.9f;
    SamplingParams tp;
    tp.temperature = 1.0f;
    for (int64_t rows : {int64_t(1), int64_t(64)}) {
      bench_sampling(rows, kp, "top_k=50 top_p=0.95");
      bench_sampling(rows, pp, "top_p=0.9");
      bench_sampling(rows, tp, "T=1");
    }
    // the split-row sampler on the rows it takes, against the one-block kernel at the same sizes
    for (int64_t rows : {int64_t(1), int64_t(8)}) {
      if (rows == 8) {
        bench_sampling(rows, pp, "top_p=0.9");
        bench_sampling(rows, tp, "T=1");
      }
      bench_sampling(rows, pp, "top_p=0.9", true);
      bench_sampling(rows, tp, "T=1", true);
    }
  }
}

void print_table() {
  std::printf("\n%-58s %-18s %-22s %s\n", "kernel", "value", "peer / floor", "ratio");
  std::printf("%s\n", std::string(108, '-').c_str());
  for (const Row& r : g_table) std::printf("%-58s %-18s %-22s %s\n", r.what.c_str(), r.value.c_str(), r.floor.c_str(), r.ratio.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  harness::g_error_detail = cuda::ops_last_error;  // a failed op's own message joins the CUDA error
  uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  bool quick = false, bench = true;
  std::string only;
  double timeout = 300;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--json" && i + 1 < argc) g_json_path = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--no-bench") bench = false;
    else if (a == "--timeout" && i + 1 < argc) timeout = std::atof(argv[++i]);
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--seed N] [--json PATH] [--quick] [--no-bench] [--timeout SECONDS]\n"
                   "          [--only gemm|stats|sampling|loss|adamw|bench]\n", argv[0]);
      return 2;
    }
  }
  start_watchdog(timeout);
  g_rng.seed(seed);
  std::printf("ad_check_kernels: seed %llu%s\n", (unsigned long long)seed, quick ? " (quick)" : "");
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("no CUDA device: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    write_json("no-device");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs, %.1f GiB)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              double(prop.totalGlobalMem) / (1 << 30));
  if (prop.major < 8) {
    std::printf("needs sm_80 or newer\n");
    write_json("unsupported-device");
    return 2;
  }
  const cudaError_t ge = cuda::gemm_init();
  std::printf("gemm path: %s%s%s\n", cuda::gemm_path(), ge != cudaSuccess ? " — " : "",
              ge != cudaSuccess ? cuda::ops_last_error() : "");
  if (!cuda::gemm_cublas_available()) std::printf("cuBLAS: %s\n", cuda::gemm_cublas_reason());

  const auto t0 = std::chrono::steady_clock::now();
  auto want = [&](const char* s) { return only.empty() || only == s; };
  if (want("gemm")) gemm_checks(quick);
  if (want("stats")) stats_checks(quick);
  if (want("sampling")) {
    sampling_checks(quick);
    split_sampling_checks(quick);
  }
  if (want("loss")) loss_checks(quick);
  if (want("adamw")) adamw_checks();
  const double parity_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nparity: %d failure(s) in %.1f s\n", g_failures, parity_s);
  bench = bench && want("bench");
  if (bench) benchmarks(quick);
  write_json(g_failures ? "parity-failed" : "ok");
  if (bench) print_table();
  std::printf("\nad_check_kernels: %s (%d failure(s)); gemm path: %s\n", g_failures ? "FAILED" : "PASSED", g_failures,
              cuda::gemm_path());
  return g_failures ? 1 : 0;
}
