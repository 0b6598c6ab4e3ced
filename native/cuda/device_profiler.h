// Per-phase device timing for the CUDA backend: named scopes record a CUDA event pair on the
// model's stream when profiling is on (off by default: then a scope is one branch). Events are
// resolved lazily (at snapshot, or when many are pending), so a profiled step keeps the GPU
// queue full; the times are device time between the scope's first and last launch, launch gaps
// included. Scopes may nest (a parent's time then includes its children's); the model's scopes
// do not, so their sum is the device time the phases account for.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ad::cuda {

struct DeviceProfileRow {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
};

void device_profiler_enable(bool on);
bool device_profiler_enabled();
void device_profiler_reset();
// Waits for the pending scopes and returns every name's totals, in first-seen order.
std::vector<DeviceProfileRow> device_profiler_snapshot();

class DeviceScope {
 public:
  DeviceScope(const char* name, cudaStream_t stream);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int slot_ = -1;
  cudaStream_t stream_ = nullptr;
};

#define ADC_CAT2(a, b) a##b
#define ADC_CAT(a, b) ADC_CAT2(a, b)
#define ADC_PROFILE(name, stream) ::ad::cuda::DeviceScope ADC_CAT(adc_scope_, __LINE__)(name, stream)

}  // namespace ad::cuda
