// The CPU backend of the Engine interface (model/engine.h): the f32 Transformer of native/model
// on this process's threads, with the inference pipeline around it (forward → LM head in row
// chunks → sampling → one-pass logit statistics), the training state (the taped micro-batch and
// the AdamW moments) and every verb of the capability matrix.
#pragma once
#include "model/engine.h"

namespace ad::cpu {

// The CPU backend (a process-wide singleton).
const model::Backend& cpu_backend();

}  // namespace ad::cpu
