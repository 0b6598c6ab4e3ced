// autodidact.info(): what this build contains and what the machine offers (for `doctor`).
#include <napi.h>

#include "addon/registry.h"
#include "cpu/simd.h"
#include "cpu/threadpool.h"
#include "cuda/device_info.h"

namespace ad::addon {

#ifndef AD_WITH_CUDA
namespace {
ad::cuda::Probe probe_without_cuda() {
  ad::cuda::Probe p{false, false, "this build has no CUDA backend (nvcc was not found or AUTODIDACT_CUDA=OFF at build time)", 0, 0, {}};
  return p;
}
}  // namespace
#endif

static Napi::Value Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("abiVersion", 1);
  Napi::Array backends = Napi::Array::New(env);
  backends.Set(0u, "cpu");
#ifdef AD_WITH_CUDA
  backends.Set(1u, "cuda");
  ad::cuda::Probe probe = ad::cuda::probe_devices();
#else
  ad::cuda::Probe probe = probe_without_cuda();
#endif
  out.Set("backends", backends);
  out.Set("cpuThreads", ad::cpu::hardware_threads());
  out.Set("simd", ad::cpu::simd_level_compiled());
  out.Set("compiler", ad::cpu::compiler_description());
  Napi::Object cuda = Napi::Object::New(env);
  cuda.Set("compiled", probe.compiled);
  cuda.Set("available", probe.available);
  cuda.Set("reason", probe.reason);
  cuda.Set("runtimeVersion", probe.runtime_version);
  cuda.Set("driverVersion", probe.driver_version);
  Napi::Array devices = Napi::Array::New(env);
  for (size_t i = 0; i < probe.devices.size(); ++i) {
    const auto& d = probe.devices[i];
    Napi::Object o = Napi::Object::New(env);
    o.Set("index", d.index);
    o.Set("name", d.name);
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
