// autodidact.info(): what this build contains and what the machine offers (for `doctor`).
// The CUDA part comes from the runtime-loaded plugin (addon/cuda_plugin.h); without it, the
// answer says why.
#include <napi.h>

#include "addon/cuda_plugin.h"
#include "addon/registry.h"
#include "cpu/simd.h"
#include "cpu/threadpool.h"

namespace ad::addon {

static Napi::Value Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("abiVersion", 1);
  const CudaStatus status = cuda_status();
  Napi::Array backends = Napi::Array::New(env);
  backends.Set(0u, "cpu");
  if (status.plugin) backends.Set(1u, "cuda");
  out.Set("backends", backends);
  out.Set("cpuThreads", ad::cpu::hardware_threads());
  out.Set("simd", ad::cpu::simd_level_compiled());
  out.Set("compiler", ad::cpu::compiler_description());
  Napi::Object cuda = Napi::Object::New(env);
  cuda.Set("compiled", status.plugin);
  cuda.Set("available", status.available);
  cuda.Set("kind", status.kind);
  cuda.Set("reason", status.reason);
  cuda.Set("pluginPath", cuda_plugin().path);
  cuda.Set("runtimeVersion", status.probe.runtime_version);
  cuda.Set("driverVersion", status.probe.driver_version);
  cuda.Set("gemmPath", std::string(status.probe.gemm_path));
  Napi::Array devices = Napi::Array::New(env);
  for (int i = 0; i < status.probe.device_count && i < 16; ++i) {
    const auto& d = status.probe.devices[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", i);
    o.Set("name", std::string(d.name));
    o.Set("totalMemory", static_cast<double>(d.total_memory));
    o.Set("computeCapability", std::to_string(d.major) + "." + std::to_string(d.minor));
    o.Set("multiprocessors", d.multiprocessors);
    devices.Set(static_cast<uint32_t>(i), o);
  }
  cuda.Set("devices", devices);
  out.Set("cuda", cuda);
  return out;
}

void RegisterInfo(Napi::Env env, Napi::Object exports) {
  exports.Set("info", Napi::Function::New(env, Info, "info"));
}

}  // namespace ad::addon
