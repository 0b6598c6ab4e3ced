// What the CUDA runtime says about this machine, or why there is nothing to say.
#pragma once
#include <string>
#include <vector>

namespace ad::cuda {

struct DeviceInfo {
  int index;
  std::string name;
  size_t total_memory;
  int major;
  int minor;
  int multiprocessors;
};

struct Probe {
  bool compiled;        // built with nvcc
  bool available;       // at least one usable device
  std::string reason;   // why not, when !available
  int runtime_version;  // cudart version linked
  int driver_version;   // 0 when no driver
  std::vector<DeviceInfo> devices;
};

Probe probe_devices();

}  // namespace ad::cuda
