// A decoder-only transformer's configuration (Llama / Qwen2 / Qwen3), as both backends read it.
#pragma once
#include "kernels/rope.h"

namespace ad::model {

struct Config {
  int vocab = 0, hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float rms_eps = 1e-6f;
  double rope_theta = 10000.0;
  kernels::Llama3RopeScaling rope_scaling{false, 1, 1, 1, 1};
  bool tie_embeddings = false, qkv_bias = false, o_bias = false, qk_norm = false;
  // > 0: a *ForSequenceClassification model, score.weight [score_labels × hidden] on the last token.
  int score_labels = 0;

  int q_dim() const { return heads * head_dim; }
  int kv_dim() const { return kv_heads * head_dim; }
};

}  // namespace ad::model
