// The backends this addon can run a model on, by name ("cpu", "cuda"): what loadModel's
// `device`, info() and the profiler go through, so no binding names a backend.
#pragma once
#include <string>
#include <vector>

#include "model/engine.h"

namespace ad::addon {

const std::vector<const model::Backend*>& all_backends();
// Throws std::invalid_argument for a name no backend has.
const model::Backend& backend_named(const std::string& name);

}  // namespace ad::addon
