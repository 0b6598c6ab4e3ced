#include "addon/cuda_plugin.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sys/stat.h>

namespace ad::addon {
namespace {

// The directory of this shared object (the .node file), from the address of a local symbol.
std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&own_directory), &info) == 0 || !info.dli_fname) return ".";
  std::string p = info.dli_fname;
  size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? "." : p.substr(0, slash);
}

CudaPlugin load_plugin() {
  CudaPlugin p;
  const char* env = std::getenv("AUTODIDACT_CUDA_PLUGIN");
  p.path = (env && *env) ? std::string(env) : own_directory() + "/autodidact_cuda.so";
  struct stat st {};
  if (stat(p.path.c_str(), &st) != 0) {
    p.kind = "not-built";
    p.reason = "the CUDA plugin is not built (no " + p.path +
               "); rebuild with nvcc on PATH: npx autodidact rebuild --cuda on";
    return p;
  }
  // RTLD_LOCAL: the plugin's static cudart stays private to it.
  void* handle = dlopen(p.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    p.kind = "load-failed";
    p.reason = "the CUDA plugin " + p.path + " failed to load: " + (e ? e : "unknown dlopen error");
    return p;
  }
  auto fn = reinterpret_cast<ad_cuda_plugin_api_fn>(dlsym(handle, AD_CUDA_PLUGIN_SYMBOL));
  const ad_cuda_api* api = fn ? fn() : nullptr;
  if (!api || api->abi_version != AD_CUDA_ABI_VERSION || api->struct_size != sizeof(ad_cuda_api)) {
    p.kind = "abi-mismatch";
    p.reason = "the CUDA plugin " + p.path + " was built from other sources (ABI version " +
               std::to_string(api ? api->abi_version : 0) + ", expected " + std::to_string(AD_CUDA_ABI_VERSION) +
               "); rebuild: npx autodidact rebuild --cuda on";
    dlclose(handle);
    return p;
  }
  p.api = api;  // never unloaded: cudart's atexit handlers live in it
  p.kind = "ok";
  return p;
}

}  // namespace

std::atomic<const ad_cuda_api*> g_loaded_api{nullptr};

const CudaPlugin& loaded_plugin() {
  static std::once_flag once;
  static CudaPlugin plugin;
  std::call_once(once, [] {
    plugin = load_plugin();
    g_loaded_api.store(plugin.api);
  });
  return plugin;
}

const ad_cuda_api* plugin_api_if_loaded() { return g_loaded_api.load(); }

PluginStatus plugin_status() {
  PluginStatus s;
  const CudaPlugin& p = loaded_plugin();
  if (!p.api) {
    s.kind = p.kind;
    s.reason = p.reason;
    return s;
  }
  s.plugin = true;
  if (p.api->probe(&s.probe) != 0) {
    s.kind = "probe-failed";
    s.reason = std::string("the CUDA plugin's device probe failed: ") + p.api->last_error();
    return s;
  }
  s.available = s.probe.available != 0;
  if (s.available) {
    s.kind = "ok";
  } else {
    s.reason = s.probe.reason;
    s.kind = s.probe.driver_version == 0 ? "no-driver" : "no-device";
  }
  return s;
}

}  // namespace ad::addon
