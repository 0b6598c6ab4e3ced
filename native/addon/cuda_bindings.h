// Models on the CUDA plugin behind the same NativeModel / NativeKVCache handles and train.*
// functions as CPU models: model_bindings.cpp and train_bindings.cpp hand CUDA handles here.
#pragma once
#include <napi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda/plugin_abi.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace ad::addon {

// Owns a plugin model; destroyed when the last handle, cache or in-flight worker lets go.
struct CudaModelRef {
  const ad_cuda_api* api = nullptr;
  ad_cuda_model* m = nullptr;
  model::Config cfg;
  int device = 0;
  ~CudaModelRef();
  // Throws std::runtime_error with the plugin's message when rc != 0.
  void check(int rc, const char* what) const;
};

struct CudaCacheRef {
  std::shared_ptr<CudaModelRef> owner;  // keeps the model alive while the cache lives
  ad_cuda_cache* c = nullptr;
  int slots = 0, capacity = 0;
  ~CudaCacheRef();
};

// The plugin's table, or a JS Error naming why CUDA is unavailable (message starts with
// "CUDA_UNAVAILABLE(<kind>): " so TypeScript can raise its typed error).
const ad_cuda_api* require_cuda(Napi::Env env);

// loadModel on the device: reads each tensor as f32 on a worker thread and uploads it.
Napi::Promise cuda_load_model(Napi::Env env, const model::Config& cfg, std::vector<model::TensorSource> sources, int device,
                              std::function<Napi::Value(Napi::Env, std::shared_ptr<CudaModelRef>)> wrap);

std::shared_ptr<CudaCacheRef> cuda_create_cache(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, int slots, int capacity);

// One step, parsed by model_bindings.cpp exactly as for the CPU.
struct CudaStepRequest {
  std::shared_ptr<CudaModelRef> model, ref_model;
  std::shared_ptr<CudaCacheRef> cache, ref_cache;
  std::vector<ad_cuda_entry> entries;
  std::vector<int32_t> tokens, targets;
  std::vector<ad_cuda_sampling> sampling;  // empty: no sampling
  int topk = 0;
  bool return_logits = false;
};
Napi::Promise cuda_step(Napi::Env env, CudaStepRequest req);

// train.* on a CUDA model (info[0] is the model handle, already resolved to `m`).
Napi::Value cuda_train_forward(const Napi::CallbackInfo& info, std::shared_ptr<CudaModelRef> m,
                               std::shared_ptr<CudaModelRef> ref);
Napi::Value cuda_train_backward(const Napi::CallbackInfo& info, std::shared_ptr<CudaModelRef> m);
Napi::Value cuda_optimizer_step(const Napi::CallbackInfo& info, std::shared_ptr<CudaModelRef> m);
void cuda_set_trainable(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, bool base, bool lora);
void cuda_zero_grad(Napi::Env env, const std::shared_ptr<CudaModelRef>& m);
Napi::Value cuda_export_tensors(Napi::Env env, const std::shared_ptr<CudaModelRef>& m);
void cuda_import_tensors(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, Napi::Array arr);
Napi::Value cuda_export_gradients(Napi::Env env, const std::shared_ptr<CudaModelRef>& m);
// [{ name, m, v }] of the AdamW moments, sorted by name; import validates every entry first.
Napi::Value cuda_export_moments(Napi::Env env, const std::shared_ptr<CudaModelRef>& m);
void cuda_import_moments(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, Napi::Array arr);

// The CUDA model behind a NativeModel handle, or null for a CPU model (defined in model_bindings.cpp).
std::shared_ptr<CudaModelRef> cuda_model_of(Napi::Env env, Napi::Value v);

}  // namespace ad::addon
