#include <cuda_runtime.h>

#include "cuda/device_info.h"

namespace ad::cuda {

Probe probe_devices() {
  Probe p{true, false, "", 0, 0, {}};
  cudaRuntimeGetVersion(&p.runtime_version);
  cudaDriverGetVersion(&p.driver_version);
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // Without a driver this is error 35 (insufficient driver), not zero devices.
    p.reason = std::string("CUDA runtime reports ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
    cudaGetLastError();
    return p;
  }
  if (count == 0) {
    p.reason = "no CUDA devices are visible (check CUDA_VISIBLE_DEVICES)";
    return p;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) continue;
    p.devices.push_back({i, prop.name, prop.totalGlobalMem, prop.major, prop.minor, prop.multiProcessorCount});
  }
  p.available = !p.devices.empty();
  if (!p.available) p.reason = "device properties could not be read";
  return p;
}

}  // namespace ad::cuda
