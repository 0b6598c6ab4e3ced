#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cpu/gemm.h"
#include "cpu/vec.h"
#include "cpu/profiler.h"
#include "kernels/attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"

namespace ad::model {

Buffer::Buffer(int64_t n) : size(n) {
  if (n < 0 || n > (int64_t(1) << 40)) throw std::length_error("a buffer of " + std::to_string(n) + " floats is out of range");
  size_t bytes = ((static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float) + 63) / 64) * 64;
  data = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (!data) throw std::bad_alloc();
}
Buffer::~Buffer() { std::free(data); }
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    std::free(data);
    data = o.data;
    size = o.size;
    o.data = nullptr;
    o.size = 0;
  }
  return *this;
}

void keep_copy(Buffer& dst, const float* src, int64_t n) {
  dst = Buffer(n);
  std::memcpy(dst.data, src, sizeof(float) * n);
}

// ---------------------------------------------------------------- weights

Transformer::Transformer(Config cfg, int threads) : cfg_(cfg), pool_(threads) {
  if (cfg_.head_dim % 2 != 0) throw std::invalid_argument("head_dim must be even for RoPE");
  if (cfg_.heads % cfg_.kv_heads != 0) throw std::invalid_argument("num_attention_heads must be a multiple of num_key_value_heads");
  inv_freq_.resize(cfg_.head_dim / 2);
  for (int i = 0; i < cfg_.head_dim / 2; ++i)
    inv_freq_[i] = kernels::rope_inv_freq(i, cfg_.head_dim, cfg_.rope_theta, cfg_.rope_scaling);
}

void Transformer::set_tensor(const std::string& name, Tensor t) { tensors_[name] = std::move(t); }

float** Transformer::slot_of(TensorId id, int l) {
  switch (id) {
    case TensorId::kEmbed: return &embed_;
    case TensorId::kFinalNorm: return &final_norm_;
    case TensorId::kLmHead: return &lm_head_;
    case TensorId::kScore: return &score_;
    case TensorId::kAttnNorm: return &layers_[l].attn_norm;
    case TensorId::kWq: return &layers_[l].wq;
    case TensorId::kWk: return &layers_[l].wk;
    case TensorId::kWv: return &layers_[l].wv;
    case TensorId::kBq: return &layers_[l].bq;
    case TensorId::kBk: return &layers_[l].bk;
    case TensorId::kBv: return &layers_[l].bv;
    case TensorId::kWo: return &layers_[l].wo;
    case TensorId::kBo: return &layers_[l].bo;
    case TensorId::kQNorm: return &layers_[l].q_norm;
    case TensorId::kKNorm: return &layers_[l].k_norm;
    case TensorId::kMlpNorm: return &layers_[l].mlp_norm;
    case TensorId::kWGate: return &layers_[l].w_gate;
    case TensorId::kWUp: return &layers_[l].w_up;
    case TensorId::kWDown: return &layers_[l].w_down;
    case TensorId::kCount: break;
  }
  throw std::logic_error("no slot for a tensor table entry");
}

bool kept_at_weight_type(TensorId id) {
  switch (id) {
    case TensorId::kWq: case TensorId::kWk: case TensorId::kWv: case TensorId::kWo:
    case TensorId::kWGate: case TensorId::kWUp: case TensorId::kWDown:
    case TensorId::kLmHead: case TensorId::kEmbed: return true;
    default: return false;
  }
}

// W as gemm_nt reads it: the f32 rows (ld = `cols`), or the stored ones.
static cpu::WeightMatrix matrix_of(const Tensor& t, int64_t cols) {
  if (t.is_stored()) return t.stored.view();
  return {cpu::WeightType::kF32, t.buf.data, cols, nullptr, 0};
}

void Transformer::finalize() {
  layers_.clear();
  layers_.resize(cfg_.layers);
  embed_ = final_norm_ = lm_head_ = score_ = nullptr;
  lm_head_w_ = {};
  embed_stored_ = nullptr;
  weight_type_ = cpu::WeightType::kF32;
  const Tensor* head = nullptr;
  for (const ModelTensor& t : model_tensors(cfg_)) {
    auto it = tensors_.find(t.name);
    if (it == tensors_.end()) {
      if (t.need == Need::REQUIRED) throw std::invalid_argument("missing tensor " + t.name);
      continue;
    }
    const Tensor& tensor = it->second;
    if (tensor.shape != t.shape)
      throw std::invalid_argument("tensor " + t.name + " has the wrong shape; expected " + shape_string(t.shape));
    if (tensor.is_stored()) {
      if (!kept_at_weight_type(t.spec->id) || (weight_type_ != cpu::WeightType::kF32 && weight_type_ != tensor.stored.type))
        throw std::invalid_argument("tensor " + t.name + " is kept as " + cpu::weight_type_name(tensor.stored.type) +
                                    ": only the Linear weights, LM head and embedding may be, all in one type");
      weight_type_ = tensor.stored.type;
    }
    *slot_of(t.spec->id, t.layer) = tensor.is_stored() ? nullptr : tensor.buf.data;
    if (t.spec->id == TensorId::kLmHead || (t.spec->id == TensorId::kEmbed && cfg_.tie_embeddings)) head = &tensor;
    if (t.spec->id == TensorId::kEmbed && tensor.is_stored()) embed_stored_ = &tensor.stored;
  }
  for (int l = 0; l < cfg_.layers; ++l)
    for (int w = 0; w < kNumLinear; ++w) {
      const Linear which = static_cast<Linear>(w);
      layers_[l].linear_w[w] = matrix_of(tensors_.at(tensor_name(linear_weight(which), l)), linear_dims(which).first);
    }
  if (cfg_.tie_embeddings) lm_head_ = embed_;
  if (head) lm_head_w_ = matrix_of(*head, cfg_.hidden);
  score_labels_ = score_ ? cfg_.score_labels : 0;
}

int64_t Transformer::parameter_bytes() const {
  int64_t n = 0;
  for (const auto& kv : tensors_) n += kv.second.bytes();
  return n;
}

void Transformer::embed_rows(const int32_t* tokens, int64_t T, float* x) {
  const int64_t H = cfg_.hidden;
  for (int64_t t = 0; t < T; ++t) {
    if (embed_stored_)
      embed_stored_->widen_row(tokens[t], x + t * H);
    else
      std::memcpy(x + t * H, embed_ + static_cast<int64_t>(tokens[t]) * H, sizeof(float) * H);
  }
}

// ---------------------------------------------------------------- forward

void Transformer::ensure_scratch(int64_t T, int64_t R, int max_keys) {
  const Config& c = cfg_;
  if (T > scratch_tokens_) {
    x_ = Buffer(T * c.hidden);
    xn_ = Buffer(T * c.hidden);
    q_ = Buffer(T * c.q_dim());
    k_ = Buffer(T * c.kv_dim());
    v_ = Buffer(T * c.kv_dim());
    att_ = Buffer(T * c.q_dim());
    gate_ = Buffer(T * c.intermediate);
    up_ = Buffer(T * c.intermediate);
    rope_cos_ = Buffer(T * c.head_dim / 2);
    rope_sin_ = Buffer(T * c.head_dim / 2);
    scratch_tokens_ = T;
  }
  if (R > scratch_out_) {
    out_hidden_ = Buffer(R * c.hidden);
    scratch_out_ = R;
  }
  if (max_keys > scratch_keys_) {
    probs_ = Buffer(static_cast<int64_t>(pool_.size()) * max_keys);
    scratch_keys_ = max_keys;
  }
}

// attention_row (kernels/attention.h) over a paged slot: the same three passes in the same order
// (scores, exp and a double sum, normalize and P·V), each key found through the page table, so a
// paged row equals the slot layout's bit for bit.
static void paged_attention_row(const float* q, KVCache& cache, int layer, int slot, int head_offset, int n_keys, int head_dim, float scale,
                         float* probs, float* out) {
  const int P = cache.page_size();
  const int64_t kvd = cache.kv_dim();
  float m = kNegInf;
  for (int j0 = 0, p = 0; j0 < n_keys; j0 += P, ++p) {
    const float* keys = cache.page_keys(layer, slot, p) + head_offset;
    for (int j = j0; j < std::min(n_keys, j0 + P); ++j) {
      const float s = cpu::dot(q, keys + (j - j0) * kvd, head_dim) * scale;
      probs[j] = s;
      m = s > m ? s : m;
    }
  }
  double sum = 0.0;
  for (int j = 0; j < n_keys; ++j) {
    const float e = ad_expf(probs[j] - m);
    probs[j] = e;
    sum += e;
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int i = 0; i < head_dim; ++i) out[i] = 0.f;
  for (int j0 = 0, p = 0; j0 < n_keys; j0 += P, ++p) {
    const float* vals = cache.page_values(layer, slot, p) + head_offset;
    for (int j = j0; j < std::min(n_keys, j0 + P); ++j) {
      probs[j] *= inv;
      cpu::axpy(probs[j], vals + (j - j0) * kvd, out, head_dim);
    }
  }
}

void Transformer::attention_layer(KVCache& cache, int layer, const std::vector<int>& token_slot, const std::vector<int>& token_pos,
                                  int64_t T) {
  const Config& c = cfg_;
  const int group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  const int64_t kvd = c.kv_dim();
  double keys = 0;
  for (int64_t t = 0; t < T; ++t) keys += token_pos[t] + 1;
  // Q·K and P·V per head; each kv head's keys and values are read once per token.
  AD_PROFILE("fwd.attention", 4.0 * (keys * 2 * kvd + 2.0 * T * c.q_dim()), 4.0 * c.heads * c.head_dim * keys);
  pool_.parallel_for(T * c.heads, 1, [&](int64_t i0, int64_t i1, int worker) {
    float* probs = probs_.data + static_cast<int64_t>(worker) * scratch_keys_;
    for (int64_t i = i0; i < i1; ++i) {
      int64_t t = i / c.heads;
      int h = static_cast<int>(i % c.heads);
      int kvh = h / group;
      const float* q = q_.data + t * c.q_dim() + h * c.head_dim;
      float* out = att_.data + t * c.q_dim() + h * c.head_dim;
      if (cache.paged()) {
        paged_attention_row(q, cache, layer, token_slot[t], kvh * c.head_dim, token_pos[t] + 1, c.head_dim, scale, probs, out);
        continue;
      }
      const float* keys = cache.keys(layer, token_slot[t]) + kvh * c.head_dim;
      const float* vals = cache.values(layer, token_slot[t]) + kvh * c.head_dim;
      kernels::attention_row(q, keys, vals, kvd, token_pos[t] + 1, c.head_dim, scale, probs, out, cpu::dot, cpu::axpy);
    }
  });
}

float* Transformer::weight_of(int l, Linear which) {
  LayerWeights& w = layers_[l];
  float* ws[] = {w.wq, w.wk, w.wv, w.wo, w.w_gate, w.w_up, w.w_down};
  return ws[which];
}

const float* Transformer::bias_of(int l, Linear which) {
  LayerWeights& w = layers_[l];
  const float* bs[] = {w.bq, w.bk, w.bv, w.bo, nullptr, nullptr, nullptr};
  return bs[which];
}

// y (=|+=) x·Wᵀ + b, plus the LoRA delta scale·(x·Aᵀ)·Bᵀ when an adapter is attached and on.
std::pair<int64_t, int64_t> Transformer::linear_dims(Linear which) const {
  switch (which) {
    case kQ: return {cfg_.hidden, cfg_.q_dim()};
    case kK: case kV: return {cfg_.hidden, cfg_.kv_dim()};
    case kO: return {cfg_.q_dim(), cfg_.hidden};
    case kGate: case kUp: return {cfg_.hidden, cfg_.intermediate};
    default: return {cfg_.intermediate, cfg_.hidden};
  }
}

double Transformer::lora_flops(int l, Linear which, double per_row_factor) const {
  if (!lora_enabled_) return 0.0;
  const auto [in_dim, out_dim] = linear_dims(which);
  double flops = 0.0;
  for (const AdapterRun& run : runs_)
    if (run.adapter != kBaseOnly && run.adapter < adapter_count())
      if (const LoraAdapter* a = layers_[l].lora[run.adapter][which].get())
        flops += per_row_factor * static_cast<double>(run.end - run.begin) * a->rank * (in_dim + out_dim);
  return flops;
}

void Transformer::linear(int l, Linear which, const float* x, int64_t T, float* y, bool accumulate) {
  const auto [in_dim, out_dim] = linear_dims(which);
  static const char* names[] = {"fwd.q_proj", "fwd.k_proj", "fwd.v_proj", "fwd.o_proj", "fwd.gate_proj", "fwd.up_proj", "fwd.down_proj"};
  const double w_bytes = cpu::bytes_per_weight(layers_[l].linear_w[which].type) * in_dim * out_dim;
  AD_PROFILE(names[which], w_bytes + 4.0 * T * (in_dim + out_dim), 2.0 * T * in_dim * out_dim + lora_flops(l, which, 2.0));
  cpu::gemm_nt(pool_, x, in_dim, layers_[l].linear_w[which], bias_of(l, which), y, out_dim, T, out_dim, in_dim, accumulate);
  if (!lora_enabled_) return;
  // LoRA Eq. 3 per run of rows: y += s·(x·Aᵀ)·Bᵀ with the adapter of those rows' sequences.
  for (const AdapterRun& run : runs_) {
    if (run.adapter == kBaseOnly || run.adapter >= adapter_count()) continue;
    const LoraAdapter* lora = layers_[l].lora[run.adapter][which].get();
    if (!lora) continue;
    const int64_t n = run.end - run.begin;
    std::vector<float> xa(static_cast<size_t>(n * lora->rank));
    cpu::gemm_nt(pool_, x + run.begin * in_dim, in_dim, lora->A.data, in_dim, nullptr, xa.data(), lora->rank, n, lora->rank, in_dim, false);
    for (auto& v : xa) v *= lora->scale;
    cpu::gemm_nt(pool_, xa.data(), lora->rank, lora->B.data, lora->rank, nullptr, y + run.begin * out_dim, out_dim, n, out_dim, lora->rank,
                 true);
  }
}

// One decoder layer on the T rows of x_ (residual in, residual out): attention with K/V written
// to the cache at each row's (slot, position), then the MLP. With `lt`, records its activations.
void Transformer::forward_layer(int l, KVCache& cache, const std::vector<int>& token_slot, const std::vector<int>& token_pos,
                                int64_t T, LayerTape* lt) {
  const Config& c = cfg_;
  const int64_t H = c.hidden, half = c.head_dim / 2, I = c.intermediate;
  auto rmsnorm_rows = [&](const float* in, const float* w, float* out) {
    AD_PROFILE("fwd.rmsnorm", 4.0 * (2 * T * H + H), 4.0 * T * H);
    pool_.parallel_for(T, 8, [&](int64_t t0, int64_t t1, int) {
      for (int64_t t = t0; t < t1; ++t) kernels::rmsnorm_row(in + t * H, w, out + t * H, static_cast<int>(H), c.rms_eps);
    });
  };

  const LayerWeights& w = layers_[l];
  if (lt) keep_copy(lt->x_in, x_.data, T * H);
  rmsnorm_rows(x_.data, w.attn_norm, xn_.data);
  linear(l, kQ, xn_.data, T, q_.data, false);
  linear(l, kK, xn_.data, T, k_.data, false);
  linear(l, kV, xn_.data, T, v_.data, false);
  if (lt) {
    keep_copy(lt->xn1, xn_.data, T * H);
    keep_copy(lt->q_raw, q_.data, T * c.q_dim());
    keep_copy(lt->k_raw, k_.data, T * c.kv_dim());
  }
  {
  AD_PROFILE("fwd.qk_norm_rope_kv_write", 4.0 * T * (2 * (c.q_dim() + c.kv_dim()) + 2 * c.kv_dim() + c.head_dim),
             (w.q_norm ? 7.0 : 3.0) * T * (c.q_dim() + c.kv_dim()));
  pool_.parallel_for(T, 4, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      const float* cs = rope_cos_.data + t * half;
      const float* sn = rope_sin_.data + t * half;
      for (int h = 0; h < c.heads; ++h) {
        float* qh = q_.data + t * c.q_dim() + h * c.head_dim;
        if (w.q_norm) kernels::rmsnorm_row(qh, w.q_norm, qh, c.head_dim, c.rms_eps);
        kernels::rope_apply(qh, cs, sn, c.head_dim);
      }
      for (int h = 0; h < c.kv_heads; ++h) {
        float* kh = k_.data + t * c.kv_dim() + h * c.head_dim;
        if (w.k_norm) kernels::rmsnorm_row(kh, w.k_norm, kh, c.head_dim, c.rms_eps);
        kernels::rope_apply(kh, cs, sn, c.head_dim);
      }
      std::memcpy(cache.key_at(l, token_slot[t], token_pos[t]), k_.data + t * c.kv_dim(), sizeof(float) * c.kv_dim());
      std::memcpy(cache.value_at(l, token_slot[t], token_pos[t]), v_.data + t * c.kv_dim(), sizeof(float) * c.kv_dim());
    }
  });
  }
  if (lt) keep_copy(lt->q, q_.data, T * c.q_dim());
  attention_layer(cache, l, token_slot, token_pos, T);
  if (lt) keep_copy(lt->att, att_.data, T * c.q_dim());
  linear(l, kO, att_.data, T, x_.data, true);
  if (lt) keep_copy(lt->x_mid, x_.data, T * H);

  rmsnorm_rows(x_.data, w.mlp_norm, xn_.data);
  linear(l, kGate, xn_.data, T, gate_.data, false);
  linear(l, kUp, xn_.data, T, up_.data, false);
  if (lt) {
    keep_copy(lt->xn2, xn_.data, T * H);
    keep_copy(lt->gate, gate_.data, T * I);
    keep_copy(lt->up, up_.data, T * I);
  }
  {
  AD_PROFILE("fwd.swiglu", 4.0 * 3 * T * I, 6.0 * T * I);
  pool_.parallel_for(T, 4, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) kernels::swiglu_row(gate_.data + t * I, up_.data + t * I, gate_.data + t * I, static_cast<int>(I));
  });
  }
  linear(l, kDown, gate_.data, T, x_.data, true);
}

int64_t Transformer::forward(KVCache& cache, const std::vector<BatchEntry>& batch, const int32_t* tokens, Tape* tape) {
  const Config& c = cfg_;
  int64_t T = 0, R = 0;
  int max_keys = 1;
  std::vector<int> seen(cache.slots(), 0);
  for (const auto& e : batch) {
    if (e.slot < 0 || e.slot >= cache.slots()) throw std::out_of_range("batch names a KV cache slot that does not exist");
    if (seen[e.slot]++) throw std::invalid_argument("a KV cache slot appears twice in one batch");
    if (e.count <= 0) throw std::invalid_argument("every batch entry needs at least one token");
    if (e.adapter != kBaseOnly && (e.adapter < 0 || e.adapter >= std::max(adapter_count(), 1)))
      throw std::out_of_range("batch entry names adapter " + std::to_string(e.adapter) + ", which is not attached");
    if (cache.length(e.slot) + e.count > cache.capacity())
      throw std::out_of_range("sequence would exceed the KV cache capacity (" + std::to_string(cache.capacity()) + " positions)");
    T += e.count;
    R += e.out_mode == 2 ? std::max(0, e.count - e.out_from) : (e.out_mode == 1 ? 1 : 0);
    max_keys = std::max(max_keys, cache.length(e.slot) + e.count);
  }
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab)
      throw std::out_of_range("token id " + std::to_string(tokens[t]) + " is outside the vocabulary (" + std::to_string(c.vocab) + ")");
  if (tape && cache.paged()) throw std::logic_error("a taped forward needs the slot layout of the KV cache");
  {
    std::vector<std::pair<int, int>> writes;
    for (const auto& e : batch) writes.emplace_back(e.slot, e.count);
    cache.reserve(writes);  // pages for every write, or a length_error before anything is written
  }
  ensure_scratch(T, std::max<int64_t>(R, 1), max_keys);
  runs_ = adapter_runs(batch);

  std::vector<int> token_slot(T), token_pos(T);
  std::vector<int64_t> out_rows;
  {
    int64_t t = 0;
    for (const auto& e : batch) {
      for (int i = 0; i < e.count; ++i, ++t) {
        token_slot[t] = e.slot;
        token_pos[t] = cache.length(e.slot) + i;
        if ((e.out_mode == 2 && i >= e.out_from) || (e.out_mode == 1 && i == e.count - 1)) out_rows.push_back(t);
      }
    }
  }

  const int64_t H = c.hidden, half = c.head_dim / 2;
  {
  AD_PROFILE("fwd.embedding_rope_tables", 4.0 * T * (2 * H + 2 * half), 0.0);
  embed_rows(tokens, T, x_.data);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      double angle = static_cast<double>(token_pos[t]) * inv_freq_[i];  // double: exact angles at long positions
      rope_cos_.data[t * half + i] = static_cast<float>(std::cos(angle));
      rope_sin_.data[t * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  if (tape) {
    tape->T = T;
    tape->tokens.assign(tokens, tokens + T);
    tape->token_slot = token_slot;
    tape->token_pos = token_pos;
    tape->out_rows = out_rows;
    tape->adapter_runs = runs_;
    tape->layers.clear();
    tape->layers.resize(c.layers);
    keep_copy(tape->rope_cos, rope_cos_.data, T * half);
    keep_copy(tape->rope_sin, rope_sin_.data, T * half);
  }
  for (int l = 0; l < c.layers; ++l) {
    LayerTape* lt = tape ? &tape->layers[l] : nullptr;
    if (lt && tape->checkpointed) {
      keep_copy(lt->x_in, x_.data, T * H);  // the rest is recomputed in backward
      forward_layer(l, cache, token_slot, token_pos, T, nullptr);
    } else {
      forward_layer(l, cache, token_slot, token_pos, T, lt);
    }
  }
  if (tape) keep_copy(tape->x_final, x_.data, T * H);

  AD_PROFILE("fwd.final_norm", 4.0 * (2.0 * out_rows.size() * H + H), 4.0 * out_rows.size() * H);
  for (size_t r = 0; r < out_rows.size(); ++r)
    kernels::rmsnorm_row(x_.data + out_rows[r] * H, final_norm_, out_hidden_.data + r * H, static_cast<int>(H), c.rms_eps);

  int64_t t = 0;
  for (const auto& e : batch) {
    cache.append_tokens(e.slot, tokens + t, e.count);
    t += e.count;
  }
  return static_cast<int64_t>(out_rows.size());
}

void Transformer::score_head(const float* hidden, int64_t rows, float* scores) {
  if (!score_) throw std::runtime_error("this model has no score head");
  cpu::gemm_nt(pool_, hidden, cfg_.hidden, score_, cfg_.hidden, nullptr, scores, score_labels_, rows, score_labels_, cfg_.hidden, false);
}

void Transformer::lm_head(const float* hidden, int64_t rows, float* logits) {
  if (!has_lm_head()) throw std::runtime_error("this model has no LM head (a sequence-classification model scores, it does not generate)");
  AD_PROFILE("lm_head", cpu::bytes_per_weight(lm_head_w_.type) * cfg_.vocab * cfg_.hidden + 4.0 * rows * (cfg_.hidden + cfg_.vocab),
             2.0 * rows * cfg_.vocab * cfg_.hidden);
  cpu::gemm_nt(pool_, hidden, cfg_.hidden, lm_head_w_, nullptr, logits, cfg_.vocab, rows, cfg_.vocab, cfg_.hidden, false);
}

}  // namespace ad::model
