// The engine behind a NativeModel handle, for binding files other than model_bindings.cpp.
#pragma once
#include <napi.h>

#include <memory>

#include "model/engine.h"

namespace ad::addon {

// Throws a JS TypeError unless `v` is a live NativeModel.
std::shared_ptr<model::Engine> engine_of(Napi::Env env, Napi::Value v, const char* what = "model");

}  // namespace ad::addon
