// The CUDA check programs' shared harness: results (parity checks count toward the exit status,
// timings do not), the JSON report, the watchdog, fatal CUDA errors, device buffers, bf16
// rounding and the random source. Header-only: each program is one translation unit.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ad::harness {

using bf16 = __nv_bfloat16;

struct Result {
  std::string section, name, metric;
  double value, tol;
  bool pass;
  bool is_check;  // parity (counts toward the exit status) vs a timing
  std::string note;
};

inline std::vector<Result> g_results;
inline std::string g_json_path;
inline std::atomic<const char*> g_section{"start"};
inline int g_failures = 0;
// Appended to a fatal CUDA error's message when set (kernels_check: the ops' last error).
inline const char* (*g_error_detail)() = nullptr;

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      o += ' ';
    } else {
      o += c;
    }
  }
  return o;
}

inline std::string num(double v) {
  if (std::isnan(v)) return "null";
  if (std::isinf(v)) return v > 0 ? "1e308" : "-1e308";
  char b[64];
  std::snprintf(b, sizeof b, "%.6g", v);
  return b;
}

inline void write_json(const char* status) {
  if (g_json_path.empty()) return;
  FILE* f = std::fopen(g_json_path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "{\"status\":\"%s\",\"failures\":%d,\"results\":[\n", status, g_failures);
  for (size_t i = 0; i < g_results.size(); ++i) {
    const Result& r = g_results[i];
    std::fprintf(f, "  {\"section\":\"%s\",\"name\":\"%s\",\"metric\":\"%s\",\"value\":%s,\"tol\":%s,\"pass\":%s,"
                    "\"check\":%s,\"note\":\"%s\"}%s\n",
                 json_escape(r.section).c_str(), json_escape(r.name).c_str(), json_escape(r.metric).c_str(),
                 num(r.value).c_str(), num(r.tol).c_str(), r.pass ? "true" : "false", r.is_check ? "true" : "false",
                 json_escape(r.note).c_str(), i + 1 < g_results.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  std::fclose(f);
}

// Exit codes: 2 a CUDA error (sticky for the process), 3 the watchdog.
[[noreturn]] inline void die(int code, const std::string& why) {
  std::fprintf(stderr, "FATAL [%s]: %s\n", g_section.load(), why.c_str());
  std::fflush(stderr);
  write_json(code == 3 ? "watchdog" : "cuda-error");
  std::_Exit(code);
}

inline void fail_cuda(const char* expr, cudaError_t e) {
  die(2, std::string(expr) + " -> " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e) +
             (g_error_detail ? std::string(" | ") + g_error_detail() : std::string()));
}

#define CK(expr)                                                       \
  do {                                                                 \
    cudaError_t e_ = (expr);                                           \
    if (e_ != cudaSuccess) ::ad::harness::fail_cuda(#expr, e_);          \
  } while (0)

// A parity result: passes when value ≤ tol (NaN never passes).
inline void check(const std::string& section, const std::string& name, const std::string& metric, double value, double tol,
                  const std::string& note = "") {
  const bool pass = value <= tol && !std::isnan(value);
  if (!pass) ++g_failures;
  g_results.push_back({section, name, metric, value, tol, pass, true, note});
  std::printf("  %-4s %-58s %-18s %.3g (tol %.3g)%s%s\n", pass ? "ok" : "FAIL", name.c_str(), metric.c_str(), value, tol,
              note.empty() ? "" : "  ", note.c_str());
  std::fflush(stdout);
}

inline void timing(const std::string& section, const std::string& name, const std::string& metric, double value,
                   const std::string& note = "") {
  g_results.push_back({section, name, metric, value, 0, true, false, note});
  std::printf("  time %-58s %-18s %.4g%s%s\n", name.c_str(), metric.c_str(), value, note.empty() ? "" : "  ", note.c_str());
  std::fflush(stdout);
}

inline void start_watchdog(double seconds) {
  std::thread([seconds] {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    die(3, "watchdog: still running after " + std::to_string(int(seconds)) + " s");
  }).detach();
}

template <class T>
struct DBuf {
  T* p = nullptr;
  size_t n = 0;
  DBuf() = default;
  explicit DBuf(size_t count) : n(count) {
    if (count) CK(cudaMalloc(&p, count * sizeof(T)));
  }
  ~DBuf() {
    if (p) cudaFree(p);
  }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
  DBuf& operator=(DBuf&& o) noexcept {
    std::swap(p, o.p);
    std::swap(n, o.n);
    return *this;
  }
  void upload(const std::vector<T>& h) { CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice)); }
  std::vector<T> download() const {
    std::vector<T> h(n);
    if (n) CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { CK(cudaMemset(p, 0xFF, n * sizeof(T))); }  // NaN for floats, −1 for ints
};

inline float bf(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }
inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __float2bfloat16_rn(v[i]);
  return o;
}
inline std::vector<float> to_f32(const std::vector<bf16>& v) {
  std::vector<float> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = __bfloat162float(v[i]);
  return o;
}

// Median time (ms) of `reps` runs of fn on the default stream, after 2 warm-ups.
inline double time_ms(const std::function<void()>& fn, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 2; ++i) fn();
  CK(cudaDeviceSynchronize());
  std::vector<float> ts;
  for (int r = 0; r < reps; ++r) {
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

inline std::mt19937_64 g_rng;
inline float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(g_rng); }
inline float normal(float sd) { return std::normal_distribution<float>(0.f, sd)(g_rng); }

}  // namespace ad::harness
