#include "cuda/device_profiler.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace ad::cuda {
namespace {

struct Pending {
  int name;  // index into names
  cudaEvent_t start, stop;
};

struct State {
  std::mutex mu;
  std::vector<std::string> names;
  std::unordered_map<std::string, int> index;
  std::vector<DeviceProfileRow> rows;
  std::vector<Pending> open;     // by slot, until the scope ends
  std::vector<int> free_slots;
  std::vector<Pending> pending;  // ended, not yet read
  std::vector<cudaEvent_t> pool;
};

std::atomic<bool> g_on{false};
State& state() {
  static State* s = new State();  // never destroyed: scopes may end during static teardown
  return *s;
}

cudaEvent_t take_event(State& s) {
  if (!s.pool.empty()) {
    cudaEvent_t e = s.pool.back();
    s.pool.pop_back();
    return e;
  }
  cudaEvent_t e = nullptr;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return e;
}

// Reads every pending pair (waits for the last one first); called with the lock held.
void resolve(State& s) {
  if (s.pending.empty()) return;
  cudaEventSynchronize(s.pending.back().stop);
  for (const Pending& p : s.pending) {
    float ms = 0;
    if (cudaEventSynchronize(p.stop) == cudaSuccess && cudaEventElapsedTime(&ms, p.start, p.stop) == cudaSuccess) {
      DeviceProfileRow& r = s.rows[p.name];
      r.calls += 1;
      r.total_ms += ms;
    } else {
      cudaGetLastError();
    }
    s.pool.push_back(p.start);
    s.pool.push_back(p.stop);
  }
  s.pending.clear();
}

int name_index(State& s, const char* name) {
  auto it = s.index.find(name);
  if (it != s.index.end()) return it->second;
  const int i = static_cast<int>(s.names.size());
  s.names.emplace_back(name);
  s.index.emplace(name, i);
  DeviceProfileRow row;
  row.name = name;
  s.rows.push_back(row);
  return i;
}

}  // namespace

void device_profiler_enable(bool on) { g_on.store(on); }
bool device_profiler_enabled() { return g_on.load(std::memory_order_relaxed); }

void device_profiler_reset() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  resolve(s);
  for (auto& r : s.rows) {
    r.calls = 0;
    r.total_ms = 0;
  }
}

std::vector<DeviceProfileRow> device_profiler_snapshot() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  resolve(s);
  std::vector<DeviceProfileRow> out;
  for (const auto& r : s.rows)
    if (r.calls > 0) out.push_back(r);
  return out;
}

DeviceScope::DeviceScope(const char* name, cudaStream_t stream) {
  if (!device_profiler_enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Pending p{name_index(s, name), take_event(s), take_event(s)};
  if (!p.start || !p.stop || cudaEventRecord(p.start, stream) != cudaSuccess) {
    cudaGetLastError();
    if (p.start) s.pool.push_back(p.start);
    if (p.stop) s.pool.push_back(p.stop);
    return;
  }
  if (s.free_slots.empty()) {
    s.free_slots.push_back(static_cast<int>(s.open.size()));
    s.open.push_back({});
  }
  slot_ = s.free_slots.back();
  s.free_slots.pop_back();
  s.open[slot_] = p;
  stream_ = stream;
}

DeviceScope::~DeviceScope() {
  if (slot_ < 0) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Pending p = s.open[slot_];
  s.free_slots.push_back(slot_);
  if (cudaEventRecord(p.stop, stream_) != cudaSuccess) {
    cudaGetLastError();
    s.pool.push_back(p.start);
    s.pool.push_back(p.stop);
    return;
  }
  s.pending.push_back(p);
  if (s.pending.size() >= 8192) resolve(s);  // bounds the events alive at once
}

}  // namespace ad::cuda
