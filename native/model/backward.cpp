// The backward pass of the transformer (CPU backend), layer by layer in reverse, beside the
// forward it mirrors: RMSNorm, q/k-norm, RoPE, GQA attention, SwiGLU, the linears with their
// LoRA adapters, the embedding and the LM head (tied or not). Logit gradients are formed chunk
// by chunk from recomputed logits: no [tokens × vocab] probabilities are kept.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

#include "cpu/gemm.h"
#include "cpu/logit_stats_cpu.h"
#include "cpu/profiler.h"
#include "cpu/vec.h"
#include "kernels/attention.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"
#include "model/initial_values.h"
#include "model/transformer.h"

namespace ad::model {

namespace {
void zero(Buffer& b) { std::memset(b.data, 0, sizeof(float) * b.size); }
}  // namespace

void Transformer::attach_lora(const std::string& name, int rank, float alpha, const std::vector<Linear>& targets, uint64_t seed) {
  if (rank <= 0) throw std::invalid_argument("LoRA rank must be positive");
  std::mt19937_64 rng(seed);
  std::vector<std::array<std::unique_ptr<LoraAdapter>, kNumLinear>> made(cfg_.layers);  // whole, then kept
  for (int l = 0; l < cfg_.layers; ++l) {
    for (Linear which : targets) {
      auto a = std::make_unique<LoraAdapter>();
      const auto [in, out] = linear_dims(which);
      a->rank = rank;
      a->in = static_cast<int>(in);
      a->out = static_cast<int>(out);
      a->scale = alpha / rank;
      a->A = Buffer(rank * in);
      a->B = Buffer(out * rank);
      lora_initial_a(rng, rank, in, a->A.data);  // B = 0: the adapter starts as a no-op
      zero(a->B);
      made[l][which] = std::move(a);
    }
  }
  for (int l = 0; l < cfg_.layers; ++l) layers_[l].lora.push_back(std::move(made[l]));
  adapter_names_.push_back(name);
  adapter_trains_.push_back(0);
}

void Transformer::add_lora_delta(int l, Linear which, float* W) {
  for (int k = 0; k < adapter_count(); ++k) {
    const LoraAdapter* a = layers_[l].lora[k][which].get();
    if (!a) continue;
    std::vector<float> scaled_b(static_cast<size_t>(a->B.size));
    for (int64_t i = 0; i < a->B.size; ++i) scaled_b[i] = a->scale * a->B.data[i];
    // W[out × in] += (s·B)[out × r] · A[r × in] (gemm_nn's arguments as its callers use them: M, reduction, output width)
    cpu::gemm_nn(pool_, scaled_b.data(), a->rank, a->A.data, a->in, W, a->in, a->out, a->rank, a->in, true);
  }
}

void Transformer::merge_lora() {
  for (int l = 0; l < cfg_.layers; ++l)
    for (int w = 0; w < kNumLinear; ++w) {
      add_lora_delta(l, static_cast<Linear>(w), weight_of(l, static_cast<Linear>(w)));
      for (int k = 0; k < adapter_count(); ++k)
        if (LoraAdapter* a = layers_[l].lora[k][w].get()) zero(a->B);
    }
}

void Transformer::attach_score_head(int labels, float std, uint64_t seed) {
  if (score_) throw std::invalid_argument("this model already has a score head");
  if (labels <= 0) throw std::invalid_argument("a score head needs at least one label");
  Tensor t;
  t.shape = {labels, cfg_.hidden};
  t.buf = Buffer(static_cast<int64_t>(labels) * cfg_.hidden);
  const std::vector<float> init = score_head_initial(seed, std, t.buf.size);
  std::copy(init.begin(), init.end(), t.buf.data);
  const std::string name = tensor_name(TensorId::kScore);
  tensors_[name] = std::move(t);
  score_ = tensors_[name].buf.data;
  score_labels_ = labels;
  cfg_.score_labels = labels;
}

void Transformer::score_head_backward(const float* hidden, int64_t rows, const float* d_scores, float* d_hidden) {
  const int64_t H = cfg_.hidden, L = score_labels_;
  cpu::gemm_nn(pool_, d_scores, L, score_, H, d_hidden, H, rows, L, H, false);  // dh = ds·W
  // The head is trained with the base, or alone when only adapters train (a fresh head must learn).
  Grad* g = grad_for(tensor_name(TensorId::kScore), score_, L * H);
  cpu::gemm_tn(pool_, d_scores, L, hidden, H, g->grad.data, H, L, H, rows, true);  // dW += dsᵀ·h
}

void Transformer::set_trainable(bool base, const std::vector<int>& adapters) {
  train_base_ = base;
  adapter_trains_.assign(adapter_names_.size(), 0);
  for (int k : adapters) adapter_trains_.at(k) = 1;
  grads_.clear();
}

Transformer::Grad* Transformer::grad_for(const std::string& name, float* param, int64_t n) {
  auto it = grads_.find(name);
  if (it == grads_.end()) {
    Grad g{param, Buffer(n)};
    zero(g.grad);
    it = grads_.emplace(name, std::move(g)).first;
  }
  it->second.written = true;
  return &it->second;
}

std::vector<std::pair<std::string, Transformer::Grad*>> Transformer::gradients() {
  std::vector<std::pair<std::string, Grad*>> out;
  for (auto& kv : grads_) out.emplace_back(kv.first, &kv.second);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void Transformer::zero_grad() {
  for (auto& kv : grads_) {
    zero(kv.second.grad);
    kv.second.written = false;
  }
}

void Transformer::rmsnorm_backward_rows(const float* x, const float* w, const float* dy, float* dx, int64_t T, int64_t n,
                                        const std::string& weight_name, bool accumulate_dx) {
  AD_PROFILE("bwd.rmsnorm", 4.0 * (3 * T * n + (train_base_ ? 2 * n : n)), 10.0 * T * n);
  // Per-thread weight-gradient partials, summed after: no two threads write the same dw.
  const int threads = pool_.size();
  std::vector<float> partial(train_base_ ? static_cast<size_t>(threads * n) : 0, 0.f);
  pool_.parallel_for(T, 8, [&](int64_t t0, int64_t t1, int worker) {
    float* dw = train_base_ ? partial.data() + worker * n : nullptr;
    for (int64_t t = t0; t < t1; ++t)
      kernels::rmsnorm_row_backward<double>(x + t * n, w, dy + t * n, dx + t * n, dw, static_cast<int>(n), cfg_.rms_eps, accumulate_dx);
  });
  if (train_base_) {
    Grad* g = grad_for(weight_name, const_cast<float*>(w), n);
    for (int k = 0; k < threads; ++k)
      for (int64_t i = 0; i < n; ++i) g->grad.data[i] += partial[k * n + i];
  }
}

void Transformer::linear_backward(int l, Linear which, const float* x, int64_t T, const float* dy, float* dx, bool accumulate_dx) {
  float* W = weight_of(l, which);
  const auto [in, out] = linear_dims(which);
  static const char* names[] = {"bwd.q_proj", "bwd.k_proj", "bwd.v_proj", "bwd.o_proj", "bwd.gate_proj", "bwd.up_proj", "bwd.down_proj"};
  // dx = dy·W always; dW += dyᵀ·x when the base trains (read W, read and write its gradient).
  const double passes = train_base_ ? 2.0 : 1.0;
  AD_PROFILE(names[which], 4.0 * (in * out * (train_base_ ? 3.0 : 1.0) + T * (out + in) * passes),
             passes * 2.0 * T * in * out + lora_flops(l, which, 8.0));
  cpu::gemm_nn(pool_, dy, out, W, in, dx, in, T, out, in, accumulate_dx);  // dx = dy·W
  if (train_base_) {
    Grad* g = grad_for(tensor_name(linear_weight(which), l), W, out * in);
    cpu::gemm_tn(pool_, dy, out, x, in, g->grad.data, in, out, in, T, true);  // dW += dyᵀ·x
    if (const float* b = bias_of(l, which)) {
      Grad* gb = grad_for(tensor_name(linear_bias(which), l), const_cast<float*>(b), out);
      for (int64_t t = 0; t < T; ++t) cpu::axpy(1.f, dy + t * out, gb->grad.data, out);
    }
  }
  if (!lora_enabled_) return;
  // Each run of rows back-propagates through its own adapter; only a trained adapter's rows add to its gradients.
  for (const AdapterRun& run : runs_) {
    if (run.adapter == kBaseOnly || run.adapter >= adapter_count()) continue;
    LoraAdapter* lora = layers_[l].lora[run.adapter][which].get();
    if (!lora) continue;
    const int64_t r = lora->rank, n = run.end - run.begin;
    const float *xr = x + run.begin * in, *dyr = dy + run.begin * out;
    std::vector<float> xa(static_cast<size_t>(n * r)), dxa(static_cast<size_t>(n * r));
    cpu::gemm_nt(pool_, xr, in, lora->A.data, in, nullptr, xa.data(), r, n, r, in, false);  // x·Aᵀ
    for (auto& v : xa) v *= lora->scale;
    cpu::gemm_nn(pool_, dyr, out, lora->B.data, r, dxa.data(), r, n, out, r, false);  // dy·B
    for (auto& v : dxa) v *= lora->scale;
    if (adapter_trains_[run.adapter]) {
      const std::string& name = adapter_names_[run.adapter];
      Grad* gB = grad_for(lora_b_name(l, which, name), lora->B.data, out * r);
      cpu::gemm_tn(pool_, dyr, out, xa.data(), r, gB->grad.data, r, out, r, n, true);  // dB += dyᵀ·(s·x·Aᵀ)
      Grad* gA = grad_for(lora_a_name(l, which, name), lora->A.data, r * in);
      cpu::gemm_tn(pool_, dxa.data(), r, xr, in, gA->grad.data, in, r, in, n, true);  // dA += (s·dy·B)ᵀ·x
    }
    cpu::gemm_nn(pool_, dxa.data(), r, lora->A.data, in, dx + run.begin * in, in, n, r, in, true);  // dx += (s·dy·B)·A
  }
}

void Transformer::lm_head_backward(const float* hidden, int64_t rows, const int32_t* targets, const float* a, const float* b,
                                   float* d_hidden, float* logits) {
  const int64_t V = cfg_.vocab, H = cfg_.hidden;
  const int64_t chunk = logits ? rows : std::max<int64_t>(1, std::min<int64_t>(rows, (16ll << 20) / V));
  // The logits (kept, or recomputed), their gradient, dh = dz·W and dW += dzᵀ·h: two or three GEMMs over the vocabulary.
  const double logit_passes = logits ? 0.0 : 2.0;
  AD_PROFILE("bwd.lm_head", 4.0 * (static_cast<double>(V) * H * (train_base_ ? 4 : 2) + rows * (3.0 * V + 2 * H)),
             ((train_base_ ? 4.0 : 2.0) + logit_passes) * rows * V * H + 12.0 * rows * V);
  std::vector<float> recomputed(logits ? 0 : static_cast<size_t>(chunk * V));
  Grad* g = train_base_ ? grad_for(tensor_name(cfg_.tie_embeddings ? TensorId::kEmbed : TensorId::kLmHead), lm_head_, V * H) : nullptr;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    float* dz = logits ? logits + r0 * V : recomputed.data();
    if (!logits) lm_head(hidden + r0 * H, n, dz);
    pool_.parallel_for(n, 1, [&](int64_t i0, int64_t i1, int) {
      std::vector<float> scratch(static_cast<size_t>(V));
      for (int64_t i = i0; i < i1; ++i)
        cpu::softmax_objective_gradient(dz + i * V, V, a[r0 + i], b ? b[r0 + i] : 0.0, targets[r0 + i], scratch.data());
    });
    cpu::gemm_nn(pool_, dz, V, lm_head_, H, d_hidden + r0 * H, H, n, V, H, false);  // dh = dz·W
    if (g) cpu::gemm_tn(pool_, dz, V, hidden + r0 * H, H, g->grad.data, H, V, H, n, true);  // dW += dzᵀ·h
  }
}

void Transformer::recompute_layer(int l, KVCache& cache, const Tape& tape, LayerTape& out) {
  const int64_t T = tape.T, H = cfg_.hidden, half = cfg_.head_dim / 2;
  int max_keys = 1;
  for (int p : tape.token_pos) max_keys = std::max(max_keys, p + 1);
  ensure_scratch(T, 1, max_keys);
  std::memcpy(x_.data, tape.layers[l].x_in.data, sizeof(float) * T * H);
  std::memcpy(rope_cos_.data, tape.rope_cos.data, sizeof(float) * T * half);
  std::memcpy(rope_sin_.data, tape.rope_sin.data, sizeof(float) * T * half);
  // Rewrites this layer's K/V in the cache with the same values; records every activation.
  forward_layer(l, cache, tape.token_slot, tape.token_pos, T, &out);
}

void Transformer::backward(KVCache& cache, const Tape& tape, const float* d_hidden) {
  const Config& c = cfg_;
  const int64_t T = tape.T, H = c.hidden, I = c.intermediate, qd = c.q_dim(), kvd = c.kv_dim(), half = c.head_dim / 2;
  const int group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (static_cast<int64_t>(tape.layers.size()) != c.layers || T <= 0) throw std::logic_error("backward needs a taped forward");
  runs_ = tape.adapter_runs;  // each row back through the adapter its forward applied

  Buffer dx(T * H), dxn(T * H), dq(T * qd), dk(T * kvd), dv(T * kvd), datt(T * qd), dh(T * I), hbuf(T * I), dup(T * I);
  zero(dx);
  // Final norm: only the output rows carry gradient.
  {
    Buffer dfinal(T * H);
    zero(dfinal);
    for (size_t r = 0; r < tape.out_rows.size(); ++r)
      std::memcpy(dfinal.data + tape.out_rows[r] * H, d_hidden + r * H, sizeof(float) * H);
    rmsnorm_backward_rows(tape.x_final.data, final_norm_, dfinal.data, dx.data, T, H, tensor_name(TensorId::kFinalNorm), false);
  }

  // Tape rows of each slot are contiguous; position p of slot s is row first_row[s] + p − first_pos[s].
  std::vector<int> first_row(cache.slots(), -1), first_pos(cache.slots(), 0), rows_of(cache.slots(), 0);
  for (int64_t t = 0; t < T; ++t) {
    int s = tape.token_slot[t];
    if (first_row[s] < 0) {
      first_row[s] = static_cast<int>(t);
      first_pos[s] = tape.token_pos[t];
    }
    ++rows_of[s];
  }
  std::vector<int> slots_in_batch;
  for (int s = 0; s < cache.slots(); ++s)
    if (first_row[s] >= 0) slots_in_batch.push_back(s);

  for (int l = c.layers - 1; l >= 0; --l) {
    LayerTape recomputed;
    if (tape.checkpointed) recompute_layer(l, cache, tape, recomputed);
    const LayerTape& lt = tape.checkpointed ? recomputed : tape.layers[l];
    const LayerWeights& w = layers_[l];

    // ---- MLP: x_out = x_mid + down(silu(gate)·up)
    {
      AD_PROFILE("bwd.swiglu_recompute", 4.0 * 3 * T * I, 6.0 * T * I);
      pool_.parallel_for(T * I, 4096, [&](int64_t i0, int64_t i1, int) {
        kernels::swiglu_row(lt.gate.data + i0, lt.up.data + i0, hbuf.data + i0, i1 - i0);
      });
    }
    linear_backward(l, kDown, hbuf.data, T, dx.data, dh.data, false);
    {
    AD_PROFILE("bwd.swiglu", 4.0 * 5 * T * I, 12.0 * T * I);
    pool_.parallel_for(T * I, 4096, [&](int64_t i0, int64_t i1, int) {
      // dh becomes d gate
      kernels::swiglu_row_backward(lt.gate.data + i0, lt.up.data + i0, dh.data + i0, dh.data + i0, dup.data + i0, i1 - i0);
    });
    }
    linear_backward(l, kGate, lt.xn2.data, T, dh.data, dxn.data, false);
    linear_backward(l, kUp, lt.xn2.data, T, dup.data, dxn.data, true);
    rmsnorm_backward_rows(lt.x_mid.data, w.mlp_norm, dxn.data, dx.data, T, H, tensor_name(TensorId::kMlpNorm, l), true);

    // ---- attention: x_mid = x_in + o(attention(q, k, v))
    linear_backward(l, kO, lt.att.data, T, dx.data, datt.data, false);
    zero(dk);
    zero(dv);
    {
    double keys = 0;
    for (int64_t t = 0; t < T; ++t) keys += tape.token_pos[t] + 1;
    // Scores recomputed (Q·K), dP = dO·V, then dQ, dK, dV: four products of head_dim per (head, key).
    AD_PROFILE("bwd.attention", 4.0 * (keys * 4.0 * kvd + 3.0 * T * qd), 8.0 * c.heads * c.head_dim * keys);
    // One task per (slot, kv head): it alone writes that head's dk/dv rows.
    const int64_t tasks = static_cast<int64_t>(slots_in_batch.size()) * c.kv_heads;
    int max_keys = 1;
    for (int s : slots_in_batch) max_keys = std::max(max_keys, first_pos[s] + rows_of[s]);
    std::vector<float> scratch(static_cast<size_t>(pool_.size()) * 2 * max_keys);
    pool_.parallel_for(tasks, 1, [&](int64_t k0, int64_t k1, int worker) {
      float* probs = scratch.data() + static_cast<int64_t>(worker) * 2 * max_keys;
      float* dprobs = probs + max_keys;
      for (int64_t task = k0; task < k1; ++task) {
        const int s = slots_in_batch[task / c.kv_heads];
        const int kvh = static_cast<int>(task % c.kv_heads);
        const float* K = cache.keys(l, s) + kvh * c.head_dim;
        const float* Vv = cache.values(l, s) + kvh * c.head_dim;
        for (int64_t t = first_row[s]; t < first_row[s] + rows_of[s]; ++t) {
          const int n_keys = tape.token_pos[t] + 1;
          const int64_t first_grad_row = first_row[s];  // the row of key first_pos[s]
          for (int h = kvh * group; h < (kvh + 1) * group; ++h)
            kernels::attention_row_backward(lt.q.data + t * qd + h * c.head_dim, K, Vv, kvd, n_keys, c.head_dim, scale,
                                            datt.data + t * qd + h * c.head_dim, probs, dprobs, dq.data + t * qd + h * c.head_dim,
                                            dk.data + first_grad_row * kvd + kvh * c.head_dim,
                                            dv.data + first_grad_row * kvd + kvh * c.head_dim, first_pos[s], cpu::dot, cpu::axpy);
        }
      }
    });
    }
    {
    // RoPE and q/k-norm backward, per head; norm weight gradients summed per thread.
    AD_PROFILE("bwd.qk_norm_rope", 4.0 * T * 3 * (qd + kvd), (w.q_norm ? 14.0 : 4.0) * T * (qd + kvd));
    const int threads = pool_.size();
    std::vector<float> dqn(w.q_norm && train_base_ ? threads * c.head_dim : 0, 0.f), dkn(dqn.size(), 0.f);
    pool_.parallel_for(T, 4, [&](int64_t t0, int64_t t1, int worker) {
      std::vector<float> tmp(c.head_dim), normed(c.head_dim);
      for (int64_t t = t0; t < t1; ++t) {
        const float* cs = tape.rope_cos.data + t * half;
        const float* sn = tape.rope_sin.data + t * half;
        auto head_backward = [&](float* g, const float* raw, const float* norm_w, float* dnorm) {
          kernels::rope_apply_inverse(g, cs, sn, c.head_dim);
          if (!norm_w) return;
          std::memcpy(tmp.data(), g, sizeof(float) * c.head_dim);
          kernels::rmsnorm_row_backward<double>(raw, norm_w, tmp.data(), g, dnorm, c.head_dim, c.rms_eps, false);
        };
        for (int h = 0; h < c.heads; ++h)
          head_backward(dq.data + t * qd + h * c.head_dim, lt.q_raw.data + t * qd + h * c.head_dim, w.q_norm,
                        dqn.empty() ? nullptr : dqn.data() + worker * c.head_dim);
        for (int h = 0; h < c.kv_heads; ++h)
          head_backward(dk.data + t * kvd + h * c.head_dim, lt.k_raw.data + t * kvd + h * c.head_dim, w.k_norm,
                        dkn.empty() ? nullptr : dkn.data() + worker * c.head_dim);
      }
    });
    if (!dqn.empty()) {
      Grad* gq = grad_for(tensor_name(TensorId::kQNorm, l), w.q_norm, c.head_dim);
      Grad* gk = grad_for(tensor_name(TensorId::kKNorm, l), w.k_norm, c.head_dim);
      for (int k = 0; k < threads; ++k)
        for (int i = 0; i < c.head_dim; ++i) {
          gq->grad.data[i] += dqn[k * c.head_dim + i];
          gk->grad.data[i] += dkn[k * c.head_dim + i];
        }
    }
    }
    linear_backward(l, kQ, lt.xn1.data, T, dq.data, dxn.data, false);
    linear_backward(l, kK, lt.xn1.data, T, dk.data, dxn.data, true);
    linear_backward(l, kV, lt.xn1.data, T, dv.data, dxn.data, true);
    rmsnorm_backward_rows(lt.x_in.data, w.attn_norm, dxn.data, dx.data, T, H, tensor_name(TensorId::kAttnNorm, l), true);
  }

  if (train_base_) {
    AD_PROFILE("bwd.embedding", 4.0 * 3 * T * H, 1.0 * T * H);
    Grad* ge = grad_for(tensor_name(TensorId::kEmbed), embed_, static_cast<int64_t>(c.vocab) * H);
    for (int64_t t = 0; t < T; ++t) cpu::axpy(1.f, dx.data + t * H, ge->grad.data + static_cast<int64_t>(tape.tokens[t]) * H, H);
  }
}

}  // namespace ad::model
