#include "cpu/profiler.h"

#include <mutex>
#include <unordered_map>

namespace ad::prof {

std::atomic<bool> g_enabled{false};

namespace {
std::mutex g_mutex;
std::vector<Counter> g_counters;
std::unordered_map<std::string, size_t> g_index;
}  // namespace

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

void reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_counters.clear();
  g_index.clear();
}

std::vector<Counter> snapshot() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_counters;
}

void record(const char* name, double seconds, double bytes, double flops) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto [it, inserted] = g_index.try_emplace(name, g_counters.size());
  if (inserted) g_counters.push_back(Counter{name});
  Counter& c = g_counters[it->second];
  ++c.calls;
  c.seconds += seconds;
  c.bytes += bytes;
  c.flops += flops;
}

}  // namespace ad::prof
