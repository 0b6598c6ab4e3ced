// A per-kernel profiler for the CPU backend: each instrumented call site adds its wall time, the
// bytes it must move and the FLOPs it performs to a named counter. Off by default; when off a
// scope costs one relaxed atomic load. Scopes wrap whole (thread-pool parallel) operations and
// are opened from the calling thread only, so counters see each operation once.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace ad::prof {

struct Counter {
  std::string name;
  int64_t calls = 0;
  double seconds = 0, bytes = 0, flops = 0;
};

extern std::atomic<bool> g_enabled;

void set_enabled(bool on);
void reset();
// Counters in first-seen order.
std::vector<Counter> snapshot();
void record(const char* name, double seconds, double bytes, double flops);

class Scope {
 public:
  Scope(const char* name, double bytes, double flops)
      : name_(g_enabled.load(std::memory_order_relaxed) ? name : nullptr), bytes_(bytes), flops_(flops) {
    if (name_) start_ = std::chrono::steady_clock::now();
  }
  ~Scope() {
    if (name_) record(name_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(), bytes_, flops_);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  double bytes_, flops_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ad::prof

#define AD_PROF_CAT2(a, b) a##b
#define AD_PROF_CAT(a, b) AD_PROF_CAT2(a, b)
// AD_PROFILE("name", bytes, flops): times the rest of the enclosing block under "name".
#define AD_PROFILE(name, bytes, flops) ::ad::prof::Scope AD_PROF_CAT(ad_prof_scope_, __LINE__)(name, bytes, flops)
