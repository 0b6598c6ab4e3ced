#include "addon/backends.h"

#include <stdexcept>

#include "addon/cuda_engine.h"
#include "cpu/cpu_engine.h"

namespace ad::addon {

const std::vector<const model::Backend*>& all_backends() {
  static const std::vector<const model::Backend*> list = {&cpu::cpu_backend(), &cuda_backend()};
  return list;
}

const model::Backend& backend_named(const std::string& name) {
  for (const model::Backend* b : all_backends())
    if (name == b->name()) return *b;
  std::string known;
  for (const model::Backend* b : all_backends()) known += (known.empty() ? "" : ", ") + std::string(b->name());
  throw std::invalid_argument("no backend named '" + name + "' (available: " + known + ")");
}

}  // namespace ad::addon
