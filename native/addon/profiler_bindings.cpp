// exports.profiler: per-kernel counters of the CPU backend (see cpu/profiler.h), the CUDA
// plugin's per-phase device times when the plugin is loaded (rows named "cuda:<phase>", no bytes
// or FLOPs counted), and the two
// floors a profile is read against, measured on this machine in the same run: copy bandwidth
// through the thread pool and the FLOP rate of our own GEMM on a large square-ish product.
#include <napi.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "addon/cuda_plugin.h"
#include "addon/registry.h"
#include "cpu/gemm.h"
#include "cpu/profiler.h"
#include "cpu/threadpool.h"

namespace ad::addon {
namespace {

int threads_arg(const Napi::CallbackInfo& info, size_t i) {
  if (info.Length() <= i || info[i].IsUndefined()) return static_cast<int>(std::thread::hardware_concurrency());
  const int n = info[i].As<Napi::Number>().Int32Value();
  if (n < 1 || n > 1024) throw Napi::RangeError::New(info.Env(), "threads must be in [1, 1024]");
  return n;
}

Napi::Value Enable(const Napi::CallbackInfo& info) {
  const bool on = info.Length() == 0 || info[0].ToBoolean().Value();
  prof::set_enabled(on);
  if (const ad_cuda_api* api = cuda_api_if_loaded()) api->profiler_enable(on ? 1 : 0);
  return info.Env().Undefined();
}

Napi::Value Reset(const Napi::CallbackInfo& info) {
  prof::reset();
  if (const ad_cuda_api* api = cuda_api_if_loaded()) api->profiler_reset();
  return info.Env().Undefined();
}

// The device rows: the plugin's phases, device time in seconds.
std::vector<prof::Counter> cuda_counters() {
  std::vector<prof::Counter> out;
  const ad_cuda_api* api = cuda_api_if_loaded();
  if (!api) return out;
  std::vector<ad_cuda_profile_row> rows(64);
  int32_t n = api->profiler_read(rows.data(), static_cast<int32_t>(rows.size()));
  if (n > static_cast<int32_t>(rows.size())) {
    rows.resize(n);
    n = api->profiler_read(rows.data(), n);
  }
  for (int32_t i = 0; i < n && i < static_cast<int32_t>(rows.size()); ++i) {
    prof::Counter c;
    c.name = std::string("cuda:") + rows[i].name;
    c.calls = rows[i].calls;
    c.seconds = rows[i].total_ms / 1e3;
    out.push_back(c);
  }
  return out;
}

Napi::Value Snapshot(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto counters = prof::snapshot();
  for (auto& c : cuda_counters()) counters.push_back(std::move(c));
  Napi::Array out = Napi::Array::New(env, counters.size());
  for (size_t i = 0; i < counters.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", counters[i].name);
    o.Set("calls", static_cast<double>(counters[i].calls));
    o.Set("seconds", counters[i].seconds);
    o.Set("bytes", counters[i].bytes);
    o.Set("flops", counters[i].flops);
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
  const double bytes = info[0].As<Napi::Number>().DoubleValue();
  if (!(bytes >= 4096 && bytes <= 8e9)) throw Napi::RangeError::New(info.Env(), "bytes must be in [4096, 8e9]");
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
  const int64_t m = info[0].As<Napi::Number>().Int64Value(), n = info[1].As<Napi::Number>().Int64Value(),
                k = info[2].As<Napi::Number>().Int64Value();
  if (m < 1 || n < 1 || k < 1 || m * k > (1ll << 28) || n * k > (1ll << 28) || m * n > (1ll << 28))
    throw Napi::RangeError::New(info.Env(), "gemm shape out of range");
  cpu::ThreadPool pool(threads_arg(info, 3));
  std::vector<float> x(m * k, 0.5f), w(n * k, 0.25f), y(m * n);
  auto run = [&] { cpu::gemm_nt(pool, x.data(), k, w.data(), k, nullptr, y.data(), n, m, n, k, false); };
  run();
  return Napi::Number::New(info.Env(), 2.0 * m * n * k / best_seconds(3, run));
}

}  // namespace

void RegisterProfilerBindings(Napi::Env env, Napi::Object exports) {
  Napi::Object p = Napi::Object::New(env);
  p.Set("enable", Napi::Function::New(env, Enable, "enable"));
  p.Set("reset", Napi::Function::New(env, Reset, "reset"));
  p.Set("snapshot", Napi::Function::New(env, Snapshot, "snapshot"));
  p.Set("measureCopy", Napi::Function::New(env, MeasureCopy, "measureCopy"));
  p.Set("measureGemm", Napi::Function::New(env, MeasureGemm, "measureGemm"));
  exports.Set("profiler", p);
}

}  // namespace ad::addon
