// Access to the model behind a NativeModel handle, for binding files other than model_bindings.cpp.
#pragma once
#include <napi.h>

#include <memory>

#include "model/transformer.h"

namespace ad::addon {
// Throws a JS TypeError unless `v` is a live NativeModel.
std::shared_ptr<model::Transformer> model_of(Napi::Env env, Napi::Value v);
}  // namespace ad::addon
