#include <napi.h>

#include "addon/registry.h"

namespace {
Napi::Object Init(Napi::Env env, Napi::Object exports) {
  ad::addon::RegisterInfo(env, exports);
  ad::addon::RegisterKernelBindings(env, exports);
  ad::addon::RegisterModelBindings(env, exports);
  ad::addon::RegisterTrainBindings(env, exports);
  ad::addon::RegisterProfilerBindings(env, exports);
  ad::addon::RegisterGemmBindings(env, exports);
  ad::addon::RegisterCollectiveBindings(env, exports);
  return exports;
}
}  // namespace

NODE_API_MODULE(autodidact, Init)
