// exports.profiler: every backend's profiling scopes — the CPU backend's per-kernel counters (see
// cpu/profiler.h) and the device backend's launch sites when its plugin is loaded (rows named
// "<backend>:<site>": device time from CUDA events, bytes and FLOPs from the shapes) — and the two
// floors a profile is read against, measured on this machine in the same run: copy bandwidth
// through the thread pool and the FLOP rate of our own GEMM on a large square-ish product (on a
// device: measureDeviceFloors, a device copy and a bf16 GEMM).
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "addon/backends.h"
#include "addon/guard.h"
#include "addon/marshal.h"
#include "addon/registry.h"
#include "cpu/gemm.h"
#include "cpu/threadpool.h"

namespace ad::addon {
namespace {

// The floors' sizes: large enough to leave the caches, small enough for any machine and a
// few seconds on two cores.
constexpr double kMaxCopyBytes = double(1 << 30);
constexpr int64_t kMaxGemmElements = int64_t(1) << 26;  // per matrix (256 MiB of f32)
constexpr double kMaxGemmFlops = 1e11;

int threads_arg(const Napi::CallbackInfo& info, size_t i) {
  if (info.Length() <= i || absent(info[i])) return cpu::hardware_threads();
  return static_cast<int>(integer_arg(info.Env(), info[i], "threads", 1, cpu::kMaxThreads));
}

Napi::Value Enable(const Napi::CallbackInfo& info) {
  const bool on = info.Length() == 0 || info[0].ToBoolean().Value();
  for (const model::Backend* b : all_backends()) b->profiler_enable(on);
  return info.Env().Undefined();
}

Napi::Value Reset(const Napi::CallbackInfo& info) {
  for (const model::Backend* b : all_backends()) b->profiler_reset();
  return info.Env().Undefined();
}

Napi::Value Snapshot(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<model::ProfileRow> rows;
  for (const model::Backend* b : all_backends())
    for (auto& r : b->profiler_rows()) rows.push_back(std::move(r));
  Napi::Array out = Napi::Array::New(env, rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", rows[i].name);
    o.Set("calls", static_cast<double>(rows[i].calls));
    o.Set("seconds", rows[i].seconds);
    o.Set("bytes", rows[i].bytes);
    o.Set("flops", rows[i].flops);
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// measureCopy(bytes, threads?) → bytes moved per second (read + write) by a threaded memcpy, best of 5.
Napi::Value MeasureCopy(const Napi::CallbackInfo& info) {
  const double bytes = number_arg(info.Env(), info[0], "bytes");
  if (!(bytes >= 4096 && bytes <= kMaxCopyBytes)) range_error(info.Env(), "bytes must be in [4096, 2^30]");
  cpu::ThreadPool pool(threads_arg(info, 1));
  const int64_t n = static_cast<int64_t>(bytes);
  std::vector<char> src(n, 1), dst(n, 0);
  auto copy = [&] {
    pool.parallel_for(n, 1 << 16, [&](int64_t a, int64_t b, int) { std::memcpy(dst.data() + a, src.data() + a, b - a); });
  };
  copy();
  return Napi::Number::New(info.Env(), 2.0 * bytes / best_seconds(5, copy));
}

// measureGemm(m, n, k, threads?) → FLOP/s of our gemm_nt (Y = X·Wᵀ) on that shape, best of 3.
Napi::Value MeasureGemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int64_t m = integer_arg(env, info[0], "m", 1, kMaxGemmElements), n = integer_arg(env, info[1], "n", 1, kMaxGemmElements),
                k = integer_arg(env, info[2], "k", 1, kMaxGemmElements);
  if (m * k > kMaxGemmElements || n * k > kMaxGemmElements || m * n > kMaxGemmElements || 2.0 * m * n * k > kMaxGemmFlops)
    range_error(env, "gemm shape out of range: each matrix at most 2^26 elements, at most 1e11 FLOPs");
  cpu::ThreadPool pool(threads_arg(info, 3));
  std::vector<float> x(m * k, 0.5f), w(n * k, 0.25f), y(m * n);
  auto run = [&] { cpu::gemm_nt(pool, x.data(), k, w.data(), k, nullptr, y.data(), n, m, n, k, false); };
  run();
  return Napi::Number::New(env, 2.0 * m * n * k / best_seconds(3, run));
}

// measureDeviceFloors(backend, index) → { copyBytesPerSecond, gemmFlopsPerSecond } of that device,
// measured now (a 1 GiB device-to-device copy, a bf16 8192³ GEMM), or null for the CPU backend;
// a typed error (ERR_AD_DEVICE_UNAVAILABLE) where the device cannot run here.
Napi::Value MeasureDeviceFloors(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString()) throw std::invalid_argument("measureDeviceFloors(backend, index) takes a backend name and a device index");
  const model::Backend& b = backend_named(info[0].As<Napi::String>().Utf8Value());
  const int index = static_cast<int>(integer_arg(env, info[1], "index", 0, 1024));
  double copy = 0, gemm = 0;
  if (!b.profiler_floors(index, copy, gemm)) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("copyBytesPerSecond", copy);
  o.Set("gemmFlopsPerSecond", gemm);
  return o;
}

}  // namespace

void RegisterProfilerBindings(Napi::Env env, Napi::Object exports) {
  Napi::Object p = Napi::Object::New(env);
  p.Set("enable", function<Enable>(env, "enable"));
  p.Set("reset", function<Reset>(env, "reset"));
  p.Set("snapshot", function<Snapshot>(env, "snapshot"));
  p.Set("measureCopy", function<MeasureCopy>(env, "measureCopy"));
  p.Set("measureGemm", function<MeasureGemm>(env, "measureGemm"));
  p.Set("measureDeviceFloors", function<MeasureDeviceFloors>(env, "measureDeviceFloors"));
  exports.Set("profiler", p);
}

}  // namespace ad::addon
