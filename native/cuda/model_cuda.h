// The decoder-only transformer on the CUDA backend, mirroring native/model/transformer.cpp
// (forward: prefill + decode in one ragged batch over a slot KV cache) and backward.cpp (taped
// backward, chunked LM head, full fine-tuning with AdamW).
//
// Numerics: bf16 weights for the matrix products (tensor cores, ops.h GEMM) with f32 master
// copies; f32 norm weights and biases; f32 residual stream, gradients and optimizer state;
// bf16 KV cache. LoRA adapters (PEFT names, y += α/r·(x·Aᵀ)·Bᵀ on the listed linears, base
// frozen) and a score head (score.weight on each sequence's last hidden row) are parameters like
// the others: f32 masters, bf16 copies for the GEMMs, gradients and AdamW moments when they train.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/graphs.h"
#include "cuda/ops.h"
#include "cuda/ops_attention.h"
#include "cuda/plugin_abi.h"
#include "model/tensor_table.h"
#include "model/transformer.h"

namespace ad::cuda {

using bf16 = __nv_bfloat16;

// An owned device allocation that only grows.
template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray();
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  // Ensures room for n elements (contents are lost when it grows).
  T* ensure(int64_t n);
  T* get() const { return p_; }
  int64_t size() const { return n_; }
  void release();

 private:
  T* p_ = nullptr;
  int64_t n_ = 0;
};

// Bytes held by this process's DeviceArrays (every model), now and at most since the last reset.
int64_t device_arrays_allocated();
int64_t device_arrays_peak();
void device_arrays_reset_peak();

class CudaModel;

// `slots` sequences of up to `capacity` positions each: bf16 K and V per layer on the device,
// token history on the host (for repetition penalties and bookkeeping).
class CudaCache {
 public:
  CudaCache(CudaModel& model, int slots, int capacity);
  int slots() const { return slots_; }
  int capacity() const { return capacity_; }
  int length(int slot) const { return length_.at(slot); }
  const std::vector<int32_t>& tokens(int slot) const { return tokens_.at(slot); }
  void append_tokens(int slot, const int32_t* toks, int n);
  void copy_prefix(int src, int dst, int len);
  void truncate(int slot, int len);
  // Empties every slot (the memory stays).
  void clear();
  int64_t bytes() const;
  bf16* keys(int layer) const { return k_.get() + static_cast<int64_t>(layer) * layer_elems_; }
  bf16* values(int layer) const { return v_.get() + static_cast<int64_t>(layer) * layer_elems_; }
  CudaModel* owner() const { return owner_; }

 private:
  CudaModel* owner_;
  int slots_, capacity_, kv_dim_, layers_;
  int64_t layer_elems_;
  DeviceArray<bf16> k_, v_;
  std::vector<int> length_;
  std::vector<std::vector<int32_t>> tokens_;
};

class CudaModel {
 public:
  CudaModel(const model::Config& cfg, int device);
  ~CudaModel();
  CudaModel(const CudaModel&) = delete;
  CudaModel& operator=(const CudaModel&) = delete;

  const model::Config& config() const { return cfg_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  std::mutex& mutex() { return mutex_; }
  // Makes this model's device current on the calling thread.
  void activate() const;

  // ---- weights (HF names, f32 host data; shapes checked in finalize)
  void set_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* host);
  void finalize();
  int64_t parameter_bytes() const;
  std::vector<std::string> tensor_names() const;
  const std::vector<int64_t>& tensor_shape(const std::string& name) const;
  void read_tensor(const std::string& name, float* host, int64_t n);
  void write_tensor(const std::string& name, const float* host, int64_t n);

  // ---- inference: forward + LM head + optional sampling + statistics (the addon's step)
  void step(CudaCache& cache, ad_cuda_step& s, CudaModel* ref, CudaCache* ref_cache);

  // Forward of one ragged batch; the final-norm hidden rows land in hidden_out() (bf16 [R × H]).
  int64_t forward(CudaCache& cache, const std::vector<model::BatchEntry>& batch, const int32_t* tokens, bool tape);
  const bf16* hidden_out() const { return hid_b_.get(); }
  // logits [rows × vocab] f32 (device) of bf16 hidden rows (device).
  void lm_head(const bf16* hidden, int64_t rows, float* logits);

  // ---- training
  // The base trains when `base`; of the adapters, those listed (indices). Drops gradients and moments.
  void set_trainable(bool base, const std::vector<int>& adapters);
  void train_forward(ad_cuda_train_forward& f, CudaModel* ref);
  void train_backward(const float* a, const float* b, int64_t rows);
  void optimizer_step(ad_cuda_optimizer& o);
  void zero_grad();
  // Gradients by name (sorted), copied to the host.
  std::vector<std::string> gradient_names() const;
  int64_t read_gradient(const std::string& name, float* host, int64_t n);
  // AdamW moments by name (sorted): what a checkpoint saves and a resume restores.
  std::vector<std::string> moment_names() const;
  int64_t read_moments(const std::string& name, float* m_host, float* v_host, int64_t n);
  // Drops every moment (a parameter without moments starts from zero at its next step).
  void clear_moments();
  void write_moments(const std::string& name, const float* m_host, const float* v_host, int64_t n);

  // ---- LoRA adapters (LoRA Eq. 3: h = W·x + α/r·B·A·x), as Transformer's on the CPU: several,
  // named, each batch entry's rows through the adapter it names (model::BatchEntry::adapter).
  // Adds adapter `name`'s zero A [rank × in] and B [out × rank] on `targets` of every layer (A's
  // values are written next by the caller: model::lora_initial_a, the CPU's stream); returns its index.
  int attach_lora(const std::string& name, int rank, float alpha, const std::vector<model::Linear>& targets);
  bool has_lora() const { return !adapter_sets_.empty(); }
  int adapter_count() const { return static_cast<int>(adapter_sets_.size()); }
  void set_lora_enabled(bool on) { lora_enabled_ = on; }
  // W += α/r·B·A for every adapter, then B = 0: the same function, the adapters now no-ops.
  void merge_lora();
  // `name`'s f32 master with its adapter folded in (the model is not changed).
  void read_tensor_merged(const std::string& name, float* host, int64_t n);

  // ---- score head (a *ForSequenceClassification model's score.weight [labels × hidden])
  void attach_score_head(int labels);
  // scores [n × labels] from each sequence's last hidden row; taped for score_backward when `tape`.
  // `adapters`: one adapter index per sequence, or null (adapter 0).
  void score_forward(const int32_t* tokens, const int32_t* lengths, int n, const int32_t* adapters, bool tape, float* scores,
                     int64_t capacity);
  void score_backward(const float* d_scores, int64_t n);

 private:
  // Who a parameter is: a base weight, a LoRA factor, or the score head (trained with the base,
  // or beside the adapters: a new head must learn).
  enum class Role { kBase, kLora, kScore };
  struct Param {
    std::vector<int64_t> shape;
    int64_t n = 0;
    Role role = Role::kBase;
    int adapter = -1;      // kLora: the adapter it belongs to
    bool written = false;  // its gradient, by a backward since the last step or zero_grad
    DeviceArray<float> w32, grad, m, v;
    DeviceArray<bf16> w16;  // matrices only
  };
  // One linear's adapter: the PEFT names of its factors (empty: no adapter), its sizes and α/r.
  struct Adapter {
    std::string a_name, b_name;
    int rank = 0;
    int64_t in = 0, out = 0;
    float scale = 0.f;
  };
  // One named adapter: its matrices on each layer's linears, and whether it trains.
  struct AdapterSet {
    std::string name;
    std::vector<std::array<Adapter, model::kNumLinear>> layers;
    bool trains = false;
  };
  struct Layer {
    const float *attn_norm = nullptr, *mlp_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
    const float *bq = nullptr, *bk = nullptr, *bv = nullptr, *bo = nullptr;
    const bf16 *wq = nullptr, *wk = nullptr, *wv = nullptr, *wo = nullptr, *wg = nullptr, *wu = nullptr, *wd = nullptr;
  };
  // What a taped forward keeps per layer (device), reused across calls.
  struct LayerTape {
    DeviceArray<float> x_in, q_raw, k_raw, lse, x_mid, gate, up;
    DeviceArray<bf16> xn1, q, att, xn2;
  };
  // How a batch's attention runs: the tensor-core kernels over planned row tiles, or (for head
  // sizes they do not take, or AUTODIDACT_ATTENTION=warp) the warp-per-row kernels.
  struct AttentionPlan {
    bool tensor_cores = false;
    int tile_rows = 0, n_q_tiles = 0, n_k_tiles = 0, max_keys = 0;
    std::vector<SlotSpan> spans;
    DeviceArray<AttentionTile> q_tiles, k_tiles;
  };
  struct Tape {
    bool valid = false;
    // Gradient checkpointing: layers[l] keeps only x_in; backward recomputes each layer into `work`.
    bool checkpointed = false;
    LayerTape work;
    AttentionPlan attention;
    int64_t T = 0, R = 0;
    std::vector<int32_t> token_slot, token_pos, out_rows, tokens;
    std::vector<model::AdapterRun> adapter_runs;
    std::vector<LayerTape> layers;
    DeviceArray<float> x_final;
    DeviceArray<bf16> hidden;  // final-norm output rows, bf16 [R × H]
    DeviceArray<int32_t> targets, d_tokens, d_slot, d_pos, d_out_rows, d_row0, d_pos0, d_rows;
    DeviceArray<float2> rope_cs;  // the forward's rotations, for the backward
    std::unique_ptr<CudaCache> cache;
  };

  Param& param(const std::string& name);
  Param* find(const std::string& name);
  const float* f32_of(const std::string& name, const std::vector<int64_t>& shape);
  const bf16* bf16_of(const std::string& name, const std::vector<int64_t>& shape);
  void bind(const model::ModelTensor& t);
  void forward_layer(int l, CudaCache& cache, int64_t T, LayerTape* lt);
  // Plans `plan` for the batch's spans (key tiles too when `with_keys`, for a backward).
  void plan_attention(AttentionPlan& plan, std::vector<SlotSpan> spans, bool with_keys);
  void attention_forward(const bf16* q, const KVLayer& kv, int64_t T, bf16* out, float* lse);
  DecodeGraphKey decode_graph_key(const CudaCache& cache, int64_t T, int64_t R) const;
  void backward(const float* d_hidden);
  // A checkpointed layer's activations again, from its taped input, into tape_.work (bit for
  // bit those of the forward: the same kernels on the same inputs).
  void recompute_layer(int l);
  // Whether the next taped forward keeps only each layer's input.
  void set_checkpointing(bool on);
  void linear_nt(const bf16* x, int64_t T, const bf16* W, int64_t in, int64_t out, const float* bias, float* y, bool accumulate);
  // dx (=|+=) dy·W; dW += dyᵀ·x when a gradient exists (and db += Σ dy).
  // (and the adapter of layer l's `which`: dx += s·(dy·B)·A; dA, dB when the adapters train).
  void linear_bwd(int l, model::Linear which, const bf16* dy_b, const float* dy32, int64_t T, const bf16* W, int64_t in,
                  int64_t out, const bf16* x, float* dx, bool accumulate_dx);
  // y += α/r·(x·Aᵀ)·Bᵀ on each run of rows (runs_) with its adapter on layer l's `which`, when
  // adapters are on.
  void lora_forward(int l, model::Linear which, const bf16* x, int64_t T, float* y);
  void lora_backward(int l, model::Linear which, const bf16* x, int64_t T, const bf16* dy_b, float* dx);
  // Adapter k's matrices on layer l's `which`, or null (not targeted, kBaseOnly, adapters off).
  const Adapter* adapter(int l, model::Linear which, int k) const;
  // The gradient of `name`, allocated at zero on first use; null when it does not train.
  float* grad_of(const std::string& name);
  bool trains(const Param& p) const;
  Param& new_param(const std::string& name, std::vector<int64_t> shape, Role role);
  // Uploads what a backward needs of the forward just taped (B sequences).
  void finish_tape(int B);
  // `c` emptied, or (re)allocated when it has fewer slots or positions than asked: a training
  // step's cache is hundreds of MiB, and freeing device memory synchronizes the device.
  CudaCache& reusable_cache(std::unique_ptr<CudaCache>& c, int slots, int capacity);
  void sync();

  model::Config cfg_;
  int device_;
  cudaStream_t stream_ = nullptr;
  std::mutex mutex_;
  std::map<std::string, Param> params_;
  std::vector<Layer> layers_;
  const bf16 *embed_ = nullptr, *lm_head_ = nullptr;
  const float* final_norm_ = nullptr;
  std::string lm_head_name_;
  DeviceArray<double> inv_freq_;
  bool finalized_ = false, train_base_ = false, lora_enabled_ = true;
  std::vector<AdapterSet> adapter_sets_;  // by index (attach order)
  std::vector<model::AdapterRun> runs_;   // the current forward's (or the backward's tape's)
  const bf16* score_ = nullptr;
  int score_labels_ = 0;
  bool score_tape_ = false;  // the tape is a score forward's (score_backward), not a train forward's
  Tape tape_;
  AttentionPlan attention_;  // the current forward's
  DecodeGraphs graphs_;  // decode forwards, captured and replayed (graphs.h)
  DeviceArray<float2> rope_cs_;
  const float2* rope_now_ = nullptr;  // the current forward's rotation table (rope_cs_ or the tape's)
  DeviceArray<float> attention_work_;
  std::unique_ptr<CudaCache> scoring_cache_;  // this model's cache when it scores as a reference

  // scratch (grown on demand)
  DeviceArray<float> x_, q32_, k32_, v32_, g32_, u32_, lse_, logits_, ref_logits_, stat_f_, hid32_;
  DeviceArray<bf16> xn_b_, q_b_, att_b_, h_b_, hid_b_, hid_keep_b_, dlogits_b_;
  DeviceArray<int32_t> d_tokens_, d_slot_, d_pos_, d_out_rows_, d_targets_, d_sampled_, stat_i_;
  DeviceArray<unsigned char> workspace_;
  DeviceArray<SamplingParams> d_params_;
  DeviceArray<uint64_t> d_positions_;
  DeviceArray<int32_t> d_hist_, d_gen_;
  DeviceArray<int64_t> d_hist_off_, d_gen_off_;
  // backward scratch
  DeviceArray<float> dx_, dxn_, dq_, dk_, dv_, datt_, dh_, delta_, coef_a_, coef_b_;
  DeviceArray<bf16> dyb_, dqb_, dkb_, dvb_, dhb_, dupb_;
  DeviceArray<double> norm_acc_;
  DeviceArray<bf16> lora_u_, lora_du_, d_scores_b_;  // s·x·Aᵀ and s·dy·B [T × rank]; d scores
  DeviceArray<float> scores_, merged_;
  DeviceArray<GradClip> clip_;
  DeviceArray<AdamWTensor> small_params_;  // the optimizer's one-launch group

  friend class CudaCache;
};

}  // namespace ad::cuda
