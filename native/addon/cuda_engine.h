// The CUDA backend of the Engine interface: an adapter over the CUDA plugin's C ABI
// (cuda/plugin_abi.h), which addon/cuda_plugin.h loads at run time. The addon never links CUDA;
// without the plugin, a driver or a GPU, status() says why and load() is refused.
#pragma once
#include "model/engine.h"

namespace ad::addon {

const model::Backend& cuda_backend();

}  // namespace ad::addon
