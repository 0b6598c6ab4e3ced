// The tensor table (tensor_table.def) expanded for one model configuration: every tensor a
// Llama / Qwen2 / Qwen3 checkpoint holds, with its HF name, shape, role and whether the model
// needs it. Header-only: the CPU engine, the CUDA plugin and the CUDA checks all include it.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"

namespace ad::model {

enum class TensorScope { MODEL, LAYER };
enum class TensorRole { EMBEDDING, NORM, LINEAR, BIAS, LM_HEAD, SCORE_HEAD };
enum class TensorDim { ONE, VOCAB, HIDDEN, INTERMEDIATE, Q_DIM, KV_DIM, HEAD_DIM, LABELS };
enum class TensorPresence { ALWAYS, QKV_BIAS, O_BIAS, QK_NORM, LM_HEAD, SCORE_HEAD };

enum class TensorId {
#define AD_TENSOR(id, scope, name, role, rows, cols, presence) id,
#include "model/tensor_table.def"
#undef AD_TENSOR
  kCount
};

struct TensorSpec {
  TensorId id;
  TensorScope scope;
  const char* name;  // full name (MODEL) or the part after "model.layers.<l>." (LAYER)
  TensorRole role;
  TensorDim rows, cols;
  TensorPresence presence;
};

inline const std::vector<TensorSpec>& tensor_table() {
  static const std::vector<TensorSpec> table = {
#define AD_TENSOR(id, scope, name, role, rows, cols, presence)                                                  \
  {TensorId::id, TensorScope::scope, name, TensorRole::role, TensorDim::rows, TensorDim::cols, TensorPresence::presence},
#include "model/tensor_table.def"
#undef AD_TENSOR
  };
  return table;
}

inline const TensorSpec& tensor_spec(TensorId id) { return tensor_table()[static_cast<size_t>(id)]; }

// What a configuration needs of a table entry.
enum class Need { ABSENT, OPTIONAL, REQUIRED };

// One tensor of a concrete model.
struct ModelTensor {
  const TensorSpec* spec;
  int layer;  // −1 for MODEL tensors
  std::string name;
  std::vector<int64_t> shape;
  Need need;
};

inline std::string layer_prefix(int layer) { return "model.layers." + std::to_string(layer) + "."; }

inline std::string tensor_name(const TensorSpec& s, int layer) {
  return s.scope == TensorScope::LAYER ? layer_prefix(layer) + s.name : std::string(s.name);
}

// The HF name of a table entry (of layer `layer` for a LAYER entry).
inline std::string tensor_name(TensorId id, int layer = -1) { return tensor_name(tensor_spec(id), layer); }

inline int64_t tensor_dim(TensorDim d, const Config& c) {
  switch (d) {
    case TensorDim::ONE: return 1;
    case TensorDim::VOCAB: return c.vocab;
    case TensorDim::HIDDEN: return c.hidden;
    case TensorDim::INTERMEDIATE: return c.intermediate;
    case TensorDim::Q_DIM: return c.q_dim();
    case TensorDim::KV_DIM: return c.kv_dim();
    case TensorDim::HEAD_DIM: return c.head_dim;
    case TensorDim::LABELS: return c.score_labels;
  }
  return 0;
}

inline std::vector<int64_t> tensor_shape(const TensorSpec& s, const Config& c) {
  if (s.cols == TensorDim::ONE) return {tensor_dim(s.rows, c)};
  return {tensor_dim(s.rows, c), tensor_dim(s.cols, c)};
}

inline Need tensor_need(const TensorSpec& s, const Config& c) {
  auto when = [](bool on) { return on ? Need::REQUIRED : Need::ABSENT; };
  switch (s.presence) {
    case TensorPresence::ALWAYS: return Need::REQUIRED;
    case TensorPresence::QKV_BIAS: return when(c.qkv_bias);
    case TensorPresence::O_BIAS: return when(c.o_bias);
    case TensorPresence::QK_NORM: return when(c.qk_norm);
    // A sequence-classification model has a score head and usually no LM head.
    case TensorPresence::LM_HEAD: return c.tie_embeddings ? Need::ABSENT : c.score_labels > 0 ? Need::OPTIONAL : Need::REQUIRED;
    case TensorPresence::SCORE_HEAD: return when(c.score_labels > 0);
  }
  return Need::ABSENT;
}

// Every tensor the configuration may hold, in table order with each layer's block expanded in
// place; ABSENT entries are left out.
inline std::vector<ModelTensor> model_tensors(const Config& c) {
  std::vector<ModelTensor> out;
  const auto& table = tensor_table();
  for (size_t i = 0; i < table.size(); ++i) {
    if (table[i].scope == TensorScope::LAYER) {
      if (i > 0 && table[i - 1].scope == TensorScope::LAYER) continue;  // the block starts here
      size_t end = i;
      while (end < table.size() && table[end].scope == TensorScope::LAYER) ++end;
      for (int l = 0; l < c.layers; ++l)
        for (size_t j = i; j < end; ++j) {
          const Need need = tensor_need(table[j], c);
          if (need != Need::ABSENT) out.push_back({&table[j], l, tensor_name(table[j], l), tensor_shape(table[j], c), need});
        }
      continue;
    }
    const Need need = tensor_need(table[i], c);
    if (need != Need::ABSENT) out.push_back({&table[i], -1, tensor_name(table[i], -1), tensor_shape(table[i], c), need});
  }
  return out;
}

// The role of a tensor by name (LoRA adapters and unknown names: LINEAR).
inline TensorRole tensor_role(const std::string& name) {
  std::string local = name;
  const std::string layers = "model.layers.";
  if (local.compare(0, layers.size(), layers) == 0) {
    const size_t dot = local.find('.', layers.size());
    local = dot == std::string::npos ? local : local.substr(dot + 1);
  }
  for (const TensorSpec& s : tensor_table())
    if (local == s.name) return s.role;
  return TensorRole::LINEAR;
}

// AdamW's decoupled weight decay skips norms and biases (1-D parameters), as is usual for transformers.
inline bool weight_decay_applies(const std::string& name) {
  const TensorRole r = tensor_role(name);
  return r != TensorRole::NORM && r != TensorRole::BIAS;
}

inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s;
  for (auto d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
  return "[" + s + "]";
}

}  // namespace ad::model

namespace ad::model {

// The seven linear maps of a layer; their PEFT target-module names ("q_proj", …) come from the table.
enum Linear { kQ, kK, kV, kO, kGate, kUp, kDown, kNumLinear };

inline TensorId linear_weight(Linear which) {
  static const TensorId ids[] = {TensorId::kWq, TensorId::kWk, TensorId::kWv, TensorId::kWo,
                                 TensorId::kWGate, TensorId::kWUp, TensorId::kWDown};
  return ids[which];
}

// The bias of a linear map, where the table has one (the attention projections).
inline bool linear_has_bias_entry(Linear which) { return which <= kO; }
inline TensorId linear_bias(Linear which) {
  static const TensorId ids[] = {TensorId::kBq, TensorId::kBk, TensorId::kBv, TensorId::kBo};
  if (!linear_has_bias_entry(which)) throw std::logic_error("the MLP's linear maps have no bias");
  return ids[which];
}

// "self_attn.q_proj", …, "mlp.down_proj": the weight's name without ".weight".
inline std::string linear_prefix(Linear which) {
  const std::string n = tensor_spec(linear_weight(which)).name;
  return n.substr(0, n.size() - std::string(".weight").size());
}

// "q_proj", …, "down_proj"
inline std::string linear_name(Linear which) {
  const std::string p = linear_prefix(which);
  return p.substr(p.find_last_of('.') + 1);
}

// The adapter the single-adapter calls attach (PEFT's default adapter name).
inline const std::string& default_adapter() {
  static const std::string name = "default";
  return name;
}

// PEFT's names of a LoRA adapter's two matrices on a layer's linear map: "….lora_A.weight" for
// the default adapter (as a saved PEFT file names it), "….lora_A.<adapter>.weight" for another
// (as PEFT names it in memory), so several adapters' parameters, gradients and moments never collide.
inline std::string lora_matrix_name(int layer, Linear which, const char* matrix, const std::string& adapter) {
  const std::string infix = adapter == default_adapter() ? "" : "." + adapter;
  return layer_prefix(layer) + linear_prefix(which) + "." + matrix + infix + ".weight";
}
inline std::string lora_a_name(int layer, Linear which, const std::string& adapter = default_adapter()) {
  return lora_matrix_name(layer, which, "lora_A", adapter);
}
inline std::string lora_b_name(int layer, Linear which, const std::string& adapter = default_adapter()) {
  return lora_matrix_name(layer, which, "lora_B", adapter);
}

inline bool linear_from_name(const std::string& name, Linear* out) {
  for (int k = 0; k < kNumLinear; ++k)
    if (name == linear_name(static_cast<Linear>(k))) {
      *out = static_cast<Linear>(k);
      return true;
    }
  return false;
}

}  // namespace ad::model
