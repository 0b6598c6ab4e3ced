// Per-phase device timing for the CUDA backend: named scopes record a CUDA event pair on the
// model's stream when profiling is on (off by default: then a scope is one branch). Events are
// resolved lazily (at snapshot, or when many are pending), so a profiled step keeps the GPU
// queue full; the times are device time between the scope's first and last launch, launch gaps
// included. Scopes may nest (a parent's time then includes its children's); the model's scopes
// do not, so their sum is the device time the phases account for. A scope may carry the work of
// its launch site (DeviceWork: bytes and FLOPs from the shapes), summed per name beside the time.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ad::cuda {

// What a launch site moves and computes, counted from its shapes: bytes read plus written (each
// operand once: the compulsory traffic, what an ideal kernel moves) and FLOPs (a multiply-add is two).
struct DeviceWork {
  double bytes = 0, flops = 0;
  DeviceWork operator+(const DeviceWork& o) const { return {bytes + o.bytes, flops + o.flops}; }
};

// C[M × N] (+)= A[M × K]·B[K × N], elements of a_bytes, b_bytes and c_bytes; C is read too when accumulated.
inline DeviceWork gemm_work(double M, double N, double K, int a_bytes, int b_bytes, int c_bytes, bool accumulate = false) {
  return {M * K * a_bytes + K * N * b_bytes + M * N * c_bytes * (accumulate ? 2.0 : 1.0), 2.0 * M * N * K};
}

// An elementwise or row-wise pass over `elements`, moving bytes_per_element and doing flops_per_element each.
inline DeviceWork stream_work(double elements, double bytes_per_element, double flops_per_element) {
  return {elements * bytes_per_element, elements * flops_per_element};
}

struct DeviceProfileRow {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
  double bytes = 0, flops = 0;  // summed over the calls (DeviceWork of each)
};

// The floors a device profile is read against, measured on the current device now: a
// device-to-device copy's bytes (read + written) per second and the bf16 GEMM's FLOP/s on a large
// square product (the path gemm() takes: ours or cuBLAS). Throws std::runtime_error on a CUDA error.
struct DeviceFloors {
  double copy_bytes_per_second = 0, gemm_flops_per_second = 0;
};
DeviceFloors measure_device_floors();

void device_profiler_enable(bool on);
bool device_profiler_enabled();
void device_profiler_reset();
// Waits for the pending scopes and returns every name's totals, in first-seen order.
std::vector<DeviceProfileRow> device_profiler_snapshot();

class DeviceScope {
 public:
  DeviceScope(const char* name, cudaStream_t stream, DeviceWork work = {});
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
// A launch site with the work of its shapes (a DeviceWork; evaluated only while profiling).
#define ADC_PROFILE_WORK(name, stream, work)                                                          \
  ::ad::cuda::DeviceScope ADC_CAT(adc_scope_, __LINE__)(name, stream,                                 \
                                                        ::ad::cuda::device_profiler_enabled() ? (work) \
                                                                                              : ::ad::cuda::DeviceWork{})

}  // namespace ad::cuda
