// autodidact.info(): what this build contains and what the machine offers (for `doctor`): the
// CPU's facts, each backend's status (the device backend's comes from its runtime-loaded plugin;
// without it, the answer says why) and the capability matrix, verb × backend, with the reason
// where a backend lacks a verb.
#include <napi.h>

#include "addon/backends.h"
#include "addon/guard.h"
#include "addon/registry.h"
#include "cpu/simd.h"
#include "cpu/threadpool.h"

namespace ad::addon {
namespace {

Napi::Object describe_status(Napi::Env env, const model::BackendStatus& status) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("compiled", status.compiled);
  o.Set("available", status.available);
  o.Set("kind", status.kind);
  o.Set("reason", status.reason);
  o.Set("pluginPath", status.location);
  o.Set("runtimeVersion", status.runtime_version);
  o.Set("driverVersion", status.driver_version);
  o.Set("gemmPath", status.kernel_path);
  Napi::Array devices = Napi::Array::New(env, status.devices.size());
  for (size_t i = 0; i < status.devices.size(); ++i) {
    const auto& d = status.devices[i];
    Napi::Object dev = Napi::Object::New(env);
    dev.Set("index", static_cast<double>(i));
    dev.Set("name", d.name);
    dev.Set("totalMemory", static_cast<double>(d.total_memory));
    dev.Set("computeCapability", d.compute_capability);
    dev.Set("multiprocessors", d.multiprocessors);
    devices.Set(static_cast<uint32_t>(i), dev);
  }
  o.Set("devices", devices);
  return o;
}

// [{ verb, backends: { <backend>: { supported, reason } } }]
Napi::Array capability_matrix(Napi::Env env) {
  Napi::Array rows = Napi::Array::New(env);
  for (int v = 0; v < static_cast<int>(model::Verb::kCount); ++v) {
    const auto verb = static_cast<model::Verb>(v);
    Napi::Object row = Napi::Object::New(env), per = Napi::Object::New(env);
    row.Set("verb", model::verb_name(verb));
    for (const model::Backend* b : all_backends()) {
      const model::VerbSupport s = b->support(verb);
      Napi::Object cell = Napi::Object::New(env);
      cell.Set("supported", s.supported);
      cell.Set("reason", s.reason);
      per.Set(b->name(), cell);
    }
    row.Set("backends", per);
    rows.Set(static_cast<uint32_t>(v), row);
  }
  return rows;
}

Napi::Value Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("abiVersion", 1);
  Napi::Array compiled = Napi::Array::New(env);
  for (const model::Backend* b : all_backends()) {
    const model::BackendStatus status = b->status();
    if (status.compiled) compiled.Set(compiled.Length(), b->name());
    if (b != &backend_named("cpu")) out.Set(b->name(), describe_status(env, status));
  }
  out.Set("backends", compiled);
  out.Set("cpuThreads", cpu::hardware_threads());
  out.Set("simd", cpu::simd_level_compiled());
  out.Set("compiler", cpu::compiler_description());
  out.Set("capabilities", capability_matrix(env));
  return out;
}

// deviceMemory(backend, index): { free, total, allocated, peakAllocated } bytes, or null where the
// backend has no device memory (the CPU) or cannot run here.
Napi::Value DeviceMemory(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsString() || !info[1].IsNumber())
    throw std::invalid_argument("deviceMemory(backend, index) takes a backend name and a device index");
  const model::Backend& b = backend_named(info[0].As<Napi::String>().Utf8Value());
  const double index = info[1].As<Napi::Number>().DoubleValue();
  if (!(index >= 0 && index <= 1024) || index != static_cast<int>(index)) throw std::out_of_range("device index must be an integer in [0, 1024]");
  model::DeviceMemory m;
  if (!b.device_memory(static_cast<int>(index), m)) return env.Null();
  Napi::Object o = Napi::Object::New(env);
  o.Set("free", static_cast<double>(m.free_bytes));
  o.Set("total", static_cast<double>(m.total_bytes));
  o.Set("allocated", static_cast<double>(m.allocated_bytes));
  o.Set("peakAllocated", static_cast<double>(m.peak_allocated_bytes));
  return o;
}

// resetDevicePeak(backend): the peak of allocated bytes starts again from what is held now.
Napi::Value ResetDevicePeak(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsString()) throw std::invalid_argument("resetDevicePeak(backend) takes a backend name");
  backend_named(info[0].As<Napi::String>().Utf8Value()).reset_memory_peak();
  return info.Env().Undefined();
}

}  // namespace

void RegisterInfo(Napi::Env env, Napi::Object exports) {
  exports.Set("info", function<Info>(env, "info"));
  exports.Set("deviceMemory", function<DeviceMemory>(env, "deviceMemory"));
  exports.Set("resetDevicePeak", function<ResetDevicePeak>(env, "resetDevicePeak"));
}

}  // namespace ad::addon
