// Finds and loads the CUDA plugin (build/Release/autodidact_cuda.so, beside this addon) at run
// time, so the CPU addon never links CUDA: a machine without the plugin, a driver or a GPU loads
// the addon cleanly and learns why CUDA is off.
#pragma once
#include <string>

#include "cuda/plugin_abi.h"

namespace ad::addon {

struct CudaPlugin {
  const ad_cuda_api* api = nullptr;  // null: not usable, see kind / reason
  std::string path;                  // where it was looked for
  // "ok", "not-built" (no plugin file), "load-failed" (dlopen refused it), "abi-mismatch"
  std::string kind;
  std::string reason;
};

// Loads once per process (thread-safe); AUTODIDACT_CUDA_PLUGIN overrides the path.
const CudaPlugin& loaded_plugin();
// The plugin's table when it was already loaded and usable, else null (never loads it).
const ad_cuda_api* plugin_api_if_loaded();

// The plugin's device probe, or a Probe-like answer naming why there is none.
struct PluginStatus {
  bool plugin = false, available = false;
  std::string kind;  // plugin kind, or "no-driver" / "no-device" / "ok"
  std::string reason;
  ad_cuda_probe probe{};
};
PluginStatus plugin_status();

}  // namespace ad::addon
