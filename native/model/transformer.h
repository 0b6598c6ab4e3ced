// The decoder-only transformer of the Llama / Qwen2 / Qwen3 families on the CPU backend:
// weights in f32, a paged KV cache (model/kv_cache.h), ragged batched forward (prefill and decode in
// one call), and per-row logits for the positions a caller asks for.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "cpu/gemm_weights.h"
#include "cpu/threadpool.h"
#include "model/buffer.h"
#include "model/config.h"
#include "model/engine.h"
#include "model/kv_cache.h"
#include "model/tensor_table.h"

namespace ad::model {

// A named parameter: f32 in `buf`, or (a frozen model's Linear weights, LM head and embedding,
// loaded with weights bf16 / f16 / int8) in `stored`, `buf` then empty.
struct Tensor {
  std::vector<int64_t> shape;
  Buffer buf;
  cpu::StoredWeights stored;
  bool is_stored() const { return stored.type != cpu::WeightType::kF32; }
  int64_t numel() const { return is_stored() ? stored.rows * stored.cols : buf.size; }
  int64_t bytes() const { return is_stored() ? stored.bytes() : buf.size * int64_t(sizeof(float)); }
};

// Whether a tensor of the table is kept at the load's weight type (else always f32): the Linear
// weights, the LM head and the embedding; norms, biases and a score head stay f32.
bool kept_at_weight_type(TensorId id);

// A low-rank adapter on one linear map: y += scale · (x·Aᵀ)·Bᵀ, A [rank × in], B [out × rank].
struct LoraAdapter {
  int rank = 0, in = 0, out = 0;
  float scale = 1.f;
  Buffer A, B;
};

struct LayerWeights {
  float *attn_norm = nullptr, *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr;
  float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
  float *q_norm = nullptr, *k_norm = nullptr;
  float *mlp_norm = nullptr, *w_gate = nullptr, *w_up = nullptr, *w_down = nullptr;
  std::vector<std::array<std::unique_ptr<LoraAdapter>, kNumLinear>> lora;  // [adapter][linear]; null: not targeted
  cpu::WeightMatrix linear_w[kNumLinear];  // the Linear weights as gemm_nt reads them (f32: the pointers above)
};

// Activations a training forward keeps for the backward pass (one micro-batch).
struct LayerTape {
  Buffer x_in, xn1, q_raw, k_raw, q, att, x_mid, xn2, gate, up;
};
struct Tape {
  // Gradient checkpointing: keep only each layer's input; backward recomputes the rest.
  bool checkpointed = false;
  int64_t T = 0;
  std::vector<int32_t> tokens;
  std::vector<int> token_slot, token_pos;
  std::vector<int64_t> out_rows;
  std::vector<AdapterRun> adapter_runs;
  std::vector<LayerTape> layers;
  Buffer x_final, rope_cos, rope_sin;
};

void keep_copy(Buffer& dst, const float* src, int64_t n);

class Transformer {
 public:
  Transformer(Config cfg, int threads);

  const Config& config() const { return cfg_; }
  cpu::ThreadPool& pool() { return pool_; }

  // Takes ownership of a named tensor (HF name); finalize() checks its shape.
  void set_tensor(const std::string& name, Tensor t);
  // Resolves every tensor of the tensor table; throws std::invalid_argument naming the first
  // missing or misshapen one.
  void finalize();
  int64_t parameter_bytes() const;
  // The type the Linear weights are kept in (kF32 unless loaded with weights bf16 / f16 / int8).
  cpu::WeightType weight_type() const { return weight_type_; }

  // Runs the batch through the model, appending its tokens to the cache; returns the number
  // of output rows, whose final-norm hidden states land in hidden_out() [rows × hidden].
  // With a tape, also records what backward() needs (the cache must then stay untouched).
  int64_t forward(KVCache& cache, const std::vector<BatchEntry>& batch, const int32_t* tokens, Tape* tape = nullptr);
  const float* hidden_out() const { return out_hidden_.data; }

  // logits[rows × vocab] = hidden[rows × hidden] · lm_headᵀ
  void lm_head(const float* hidden, int64_t rows, float* logits);

  // ---- training
  float* lm_head_weight() { return lm_head_; }
  bool has_lm_head() const { return lm_head_w_.data != nullptr; }
  int score_labels() const { return score_labels_; }
  // Adds a score head (HF score.weight, N(0, std²) from `seed`) to a model that has none.
  void attach_score_head(int labels, float std, uint64_t seed);
  // scores[rows × labels] = hidden[rows × hidden] · scoreᵀ
  void score_head(const float* hidden, int64_t rows, float* scores);
  // d hidden = d scores · score; d score += d scoresᵀ · hidden (when training the base or the head).
  void score_head_backward(const float* hidden, int64_t rows, const float* d_scores, float* d_hidden);
  // Adds adapter `name` (A ~ U(±1/sqrt(in)) from `seed`, B = 0) to the listed linears of every
  // layer, as the next adapter index.
  void attach_lora(const std::string& name, int rank, float alpha, const std::vector<Linear>& targets, uint64_t seed);
  bool has_lora() const { return !adapter_names_.empty(); }
  int adapter_count() const { return static_cast<int>(adapter_names_.size()); }
  const std::string& adapter_name(int k) const { return adapter_names_[k]; }
  // Adapter k's matrices on (layer, which), or null where it does not target that linear.
  LoraAdapter* lora_adapter(int layer, Linear which, int k) { return layers_[layer].lora[k][which].get(); }
  // W += α/r·B·A of every adapter on (layer, which) into `W` (that weight or a copy of it).
  void add_lora_delta(int layer, Linear which, float* W);
  // Folds every adapter into its weight and zeroes B: the same function, adapters now no-ops.
  void merge_lora();
  void set_lora_enabled(bool on) { lora_enabled_ = on; }
  bool lora_enabled() const { return lora_enabled_; }
  LayerWeights& layer(int l) { return layers_[l]; }
  std::unordered_map<std::string, Tensor>& tensors() { return tensors_; }

  // Gradient buffers keyed like the parameters ("model.layers.0.mlp.up_proj.weight",
  // "model.layers.0.self_attn.q_proj.lora_A.weight", …), filled by backward().
  struct Grad {
    float* param;
    Buffer grad;
    bool written = false;  // by a backward since the last zero_grad (an adapter no sequence used: not)
  };
  // Which parameters receive gradients: every base tensor (full fine-tuning) and/or the listed
  // adapters' (by index); an adapter not listed is applied to its rows but gets no gradient.
  void set_trainable(bool base, const std::vector<int>& adapters);
  std::vector<std::pair<std::string, Grad*>> gradients();
  void zero_grad();

  // Back-propagates d loss / d hidden_out rows (from the LM head or a score head) through the
  // taped forward; accumulates into the gradients. `d_hidden` is [out rows × hidden].
  void backward(KVCache& cache, const Tape& tape, const float* d_hidden);
  // d hidden and d lm_head for logits rows given per-row coefficients: dz = a·(onehot − p) +
  // b·(−p ⊙ (log p + H)). `logits` (rows × vocab, or null): the forward's logits of these rows,
  // overwritten by dz; without them the logits are recomputed chunk by chunk.
  void lm_head_backward(const float* hidden, int64_t rows, const int32_t* targets, const float* a, const float* b,
                        float* d_hidden, float* logits = nullptr);

 private:
  // Where finalize() keeps the pointer of a table entry.
  float** slot_of(TensorId id, int layer);
  void ensure_scratch(int64_t tokens, int64_t out_rows, int max_keys);
  void attention_layer(KVCache& cache, int layer, const std::vector<int>& token_slot, const std::vector<int>& token_pos, int64_t T);
  void forward_layer(int layer, KVCache& cache, const std::vector<int>& token_slot, const std::vector<int>& token_pos, int64_t T,
                     LayerTape* lt);
  // Recomputes a checkpointed layer's activations from its taped input.
  void recompute_layer(int layer, KVCache& cache, const Tape& tape, LayerTape& out);

  // (in, out) features of a layer's linear map.
  std::pair<int64_t, int64_t> linear_dims(Linear which) const;
  void linear(int layer, Linear which, const float* x, int64_t T, float* y, bool accumulate);
  // The adapters' flops of a linear over the current runs (profiling).
  double lora_flops(int layer, Linear which, double per_row_factor) const;
  void linear_backward(int layer, Linear which, const float* x, int64_t T, const float* dy, float* dx, bool accumulate_dx);
  float* weight_of(int layer, Linear which);
  // x's embedding rows: tokens[t]'s row into x[t·hidden, (t + 1)·hidden).
  void embed_rows(const int32_t* tokens, int64_t T, float* x);
  const float* bias_of(int layer, Linear which);
  Grad* grad_for(const std::string& name, float* param, int64_t n);
  void rmsnorm_backward_rows(const float* x, const float* w, const float* dy, float* dx, int64_t T, int64_t n,
                             const std::string& weight_name, bool accumulate_dx);

  Config cfg_;
  cpu::ThreadPool pool_;
  bool lora_enabled_ = true, train_base_ = false;
  std::vector<std::string> adapter_names_;
  std::vector<char> adapter_trains_;  // per adapter: gets gradients
  std::vector<AdapterRun> runs_;      // the current forward's (or backward's tape's)
  std::unordered_map<std::string, Grad> grads_;
  std::unordered_map<std::string, Tensor> tensors_;
  std::vector<LayerWeights> layers_;
  float *embed_ = nullptr, *final_norm_ = nullptr, *lm_head_ = nullptr, *score_ = nullptr;
  cpu::WeightMatrix lm_head_w_;
  const cpu::StoredWeights* embed_stored_ = nullptr;  // the embedding when kept below f32 (its rows widened on lookup)
  cpu::WeightType weight_type_ = cpu::WeightType::kF32;
  int score_labels_ = 0;
  std::vector<double> inv_freq_;
  // scratch, grown on demand
  Buffer x_, xn_, q_, k_, v_, att_, gate_, up_, rope_cos_, rope_sin_, probs_, out_hidden_;
  int64_t scratch_tokens_ = 0, scratch_out_ = 0, scratch_keys_ = 0;
};

}  // namespace ad::model
