// The collective behind a NativeCollective handle, for binding files other than collective_bindings.cpp.
#pragma once
#include <napi.h>

#include <memory>

#include "collective/collective.h"

namespace ad::addon {

// Throws a JS TypeError unless `v` is an open NativeCollective.
std::shared_ptr<collective::Collective> collective_of(Napi::Env env, Napi::Value v, const char* what = "collective");

}  // namespace ad::addon
