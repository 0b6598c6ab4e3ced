// Each binding file registers its exports here; addon.cpp calls them all at module init.
#pragma once
#include <napi.h>

namespace ad::addon {
void RegisterInfo(Napi::Env env, Napi::Object exports);
void RegisterKernelBindings(Napi::Env env, Napi::Object exports);
void RegisterModelBindings(Napi::Env env, Napi::Object exports);
void RegisterTrainBindings(Napi::Env env, Napi::Object exports);
void RegisterProfilerBindings(Napi::Env env, Napi::Object exports);
void RegisterGemmBindings(Napi::Env env, Napi::Object exports);
void RegisterCollectiveBindings(Napi::Env env, Napi::Object exports);
}  // namespace ad::addon
