#include "cuda/device_profiler.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "cuda/ops.h"

namespace ad::cuda {
namespace {

struct Pending {
  int name;  // index into names
  cudaEvent_t start, stop;
  DeviceWork work;
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
      r.bytes += p.work.bytes;
      r.flops += p.work.flops;
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
    r.bytes = 0;
    r.flops = 0;
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

DeviceScope::DeviceScope(const char* name, cudaStream_t stream, DeviceWork work) {
  if (!device_profiler_enabled()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  Pending p{name_index(s, name), take_event(s), take_event(s), work};
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

namespace ad::cuda {
namespace {

void floor_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error(std::string("measuring the device floors: ") + what + ": " + cudaGetErrorString(e));
  }
}

// Device memory for the floors, freed on every path out.
struct FloorBuffers {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~FloorBuffers() {
    if (stream) cudaStreamSynchronize(stream);
    cudaFree(a), cudaFree(b), cudaFree(c);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
    cudaGetLastError();
  }
};

// The best of `reps` timings of `launch` on the stream, in seconds (one untimed run first).
template <class F>
double best_seconds(FloorBuffers& f, int reps, F&& launch) {
  launch();
  floor_check(cudaStreamSynchronize(f.stream), "warm-up");
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    floor_check(cudaEventRecord(f.start, f.stream), "event");
    launch();
    floor_check(cudaEventRecord(f.stop, f.stream), "event");
    floor_check(cudaEventSynchronize(f.stop), "synchronize");
    float ms = 0;
    floor_check(cudaEventElapsedTime(&ms, f.start, f.stop), "elapsed time");
    best = std::min(best, ms / 1e3);
  }
  return best;
}

}  // namespace

DeviceFloors measure_device_floors() {
  constexpr size_t kCopyBytes = size_t(1) << 30;  // well past any L2
  constexpr int64_t kGemm = 8192;                 // 8192³: 1.1 TFLOP, every SM busy on any part
  floor_check(gemm_init(), "loading the GEMM");
  FloorBuffers f;
  floor_check(cudaStreamCreateWithFlags(&f.stream, cudaStreamNonBlocking), "stream");
  floor_check(cudaEventCreate(&f.start), "event");
  floor_check(cudaEventCreate(&f.stop), "event");
  floor_check(cudaMalloc(&f.a, kCopyBytes), "cudaMalloc");
  floor_check(cudaMalloc(&f.b, kCopyBytes), "cudaMalloc");
  floor_check(cudaMemsetAsync(f.a, 0, kCopyBytes, f.stream), "memset");
  DeviceFloors out;
  out.copy_bytes_per_second = 2.0 * kCopyBytes / best_seconds(f, 5, [&] {
    floor_check(cudaMemcpyAsync(f.b, f.a, kCopyBytes, cudaMemcpyDeviceToDevice, f.stream), "copy");
  });
  // bf16 A, B (zeros: the time of an mma does not depend on the values) and an f32 C, from the same buffers
  static_assert(kGemm * kGemm * 2 * 2 <= int64_t(kCopyBytes), "A and B fit the first buffer");
  floor_check(cudaMalloc(&f.c, sizeof(float) * kGemm * kGemm), "cudaMalloc");
  GemmArgs g;
  g.layout = GemmLayout::NT;
  g.M = g.N = g.K = kGemm;
  g.A = static_cast<const __nv_bfloat16*>(f.a);
  g.lda = kGemm;
  g.B = static_cast<const __nv_bfloat16*>(f.a) + kGemm * kGemm;
  g.ldb = kGemm;
  g.C = f.c;
  g.ldc = kGemm;
  g.c_type = DType::F32;
  out.gemm_flops_per_second = 2.0 * kGemm * kGemm * kGemm / best_seconds(f, 3, [&] { floor_check(gemm(g, f.stream), "GEMM"); });
  return out;
}

}  // namespace ad::cuda
