// CpuEngine: the Engine verbs over the f32 Transformer (see cpu_engine.h). Every verb takes the
// model's lock (two models: both, in a fixed order); whole-model copies run on the model's own
// thread pool.
#include "cpu/cpu_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <string>

#include "collective/collective.h"
#include "cpu/logit_stats_cpu.h"
#include "cpu/profiler.h"
#include "cpu/sampling_cpu.h"
#include "kernels/adamw.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace ad::cpu {
namespace {

using model::BatchEntry;
using model::KVCache;
using model::Transformer;
using model::Verb;

class CpuEngine;

class CpuCache final : public model::Cache {
 public:
  CpuCache(std::shared_ptr<CpuEngine> owner, const model::Config& cfg, int slots, int capacity, model::CacheLayout layout);
  const model::Engine* owner() const override;
  int slots() const override { return kv.slots(); }
  int capacity() const override { return kv.capacity(); }
  int length(int slot) override;
  void copy_prefix(int src, int dst, int len) override;
  void truncate(int slot, int len) override;
  int64_t bytes() override { return kv.bytes(); }
  model::CacheCounters counters() override {
    const model::CacheUsage u = kv.usage();
    return {u.page_size, u.pages, u.free_pages, u.page_bytes, u.shared_bytes, u.shared_bytes_total};
  }

  std::shared_ptr<CpuEngine> engine;  // a cache keeps its model alive
  KVCache kv;
};

struct Moments {
  model::Buffer m, v;
};

// Parallel copy of n floats on the model's threads.
void copy_floats(ThreadPool& pool, float* dst, const float* src, int64_t n) {
  pool.parallel_for(n, 1 << 16, [&](int64_t a, int64_t b, int) { std::memcpy(dst + a, src + a, sizeof(float) * (b - a)); });
}

class CpuEngine final : public model::Engine {
 public:
  CpuEngine(const model::Config& cfg, int threads) : model_(cfg, threads) {}

  Transformer& transformer() { return model_; }
  std::mutex& mutex() { return mutex_; }

  // Training, LoRA and the tensor verbs need f32 weights: a model loaded with weights bf16 / f16 /
  // int8 is frozen, for inference (generate, score, logit statistics, a reference or a judge).
  void require_f32_weights(const char* what) const {
    if (model_.weight_type() != WeightType::kF32)
      throw std::invalid_argument(std::string("this model keeps its weights as ") + weight_type_name(model_.weight_type()) +
                                  " in memory (loadModel's weights option), for inference only; " + what +
                                  " needs a model loaded with weights 'f32'");
  }

  const model::Backend& backend() const override { return cpu_backend(); }
  const model::Config& config() const override { return model_.config(); }
  model::EngineDescription describe() override {
    return {model_.parameter_bytes(), model_.pool().size(), -1, weight_type_name(model_.weight_type())};
  }

 protected:
  std::shared_ptr<model::Cache> do_create_cache(int slots, int capacity, model::CacheLayout layout) override {
    return std::make_shared<CpuCache>(std::static_pointer_cast<CpuEngine>(shared_from_this()), model_.config(), slots, capacity, layout);
  }

  void do_step(model::Cache& cache, const model::StepRequest& r, model::StepResult& out) override;
  void do_set_trainable(bool base, const std::vector<int>& adapters) override {
    require_f32_weights("training");
    std::lock_guard<std::mutex> lock(mutex_);
    model_.set_trainable(base, adapters);
    moments_.clear();
  }
  void do_zero_grad() override {
    std::lock_guard<std::mutex> lock(mutex_);
    model_.zero_grad();
  }
  void do_train_forward(const model::TrainForwardRequest& r, model::TrainForwardResult& out) override;
  void do_train_backward(const std::vector<float>& a, const std::vector<float>& b) override;
  model::OptimizerResult do_optimizer_step(const model::OptimizerRequest& r) override;
  void do_reduce_gradients(collective::Collective& c) override {
    std::lock_guard<std::mutex> lock(mutex_);
    // gradients() is sorted by name: every rank reduces the same tensors in the same order.
    const auto grads = model_.gradients();
    for (auto& [name, g] : grads) c.all_reduce(g->grad.data, g->grad.size, collective::ReduceOp::kSum);
    // A gradient written on any rank is written on all (the optimizer updates written ones only),
    // so every rank takes the same AdamW step.
    std::vector<float> written(grads.size());
    for (size_t i = 0; i < grads.size(); i++) written[i] = grads[i].second->written ? 1.f : 0.f;
    if (!written.empty()) c.all_reduce(written.data(), int64_t(written.size()), collective::ReduceOp::kSum);
    for (size_t i = 0; i < grads.size(); i++) grads[i].second->written = written[i] > 0;
  }
  std::vector<model::TensorCopy> do_export_tensors(bool merge_lora) override;
  std::vector<model::ParameterInfo> do_parameters() override;
  void do_import_tensors(const std::vector<model::TensorView>& tensors) override;
  std::vector<model::TensorCopy> do_export_gradients() override;
  std::vector<model::MomentsCopy> do_export_optimizer_state() override;
  void do_import_optimizer_state(const std::vector<model::MomentsView>& moments) override;
  void do_attach_lora(const model::LoraRequest& r, int) override {
    require_f32_weights("attaching LoRA adapters");
    std::lock_guard<std::mutex> lock(mutex_);
    model_.attach_lora(r.name, r.rank, r.alpha, r.targets, r.seed);
  }
  void do_set_lora_enabled(bool on) override {
    std::lock_guard<std::mutex> lock(mutex_);
    model_.set_lora_enabled(on);
  }
  void do_merge_lora() override {
    require_f32_weights("merging LoRA adapters");
    std::lock_guard<std::mutex> lock(mutex_);
    if (!model_.has_lora()) throw std::invalid_argument("this model has no LoRA adapters to merge");
    model_.merge_lora();
  }
  void do_attach_score_head(int labels, float std, uint64_t seed) override {
    std::lock_guard<std::mutex> lock(mutex_);
    model_.attach_score_head(labels, std, seed);
  }
  void do_score_forward(const model::ScoreForwardRequest& r, std::vector<float>& scores) override;
  void do_score_backward(const std::vector<float>& d_scores) override;

 private:
  // The parameter (base tensor or adapter matrix) of that name, or null.
  float* find_parameter(const std::string& name, int64_t* n);
  // fn(name of A, name of B, adapter) for every adapter matrix pair, by (adapter, layer, linear).
  template <typename Fn>
  void for_each_adapter(Fn fn);
  // Logits of hidden rows → chosen-token logprob and entropy, chunk by chunk; with `keep` (a
  // training forward) all rows at once into kept_logits_ when they fit kKeptLogitsBytes, so the
  // backward need not compute them again.
  void row_stats(const float* hidden, int64_t rows, const int32_t* targets, float* logp, float* entropy, bool keep = false);
  void release_tape() {
    cache_.reset();
    tape_ = model::Tape();
    hidden_.clear();
    kept_rows_ = 0;
    score_mode_ = false;
  }

  Transformer model_;
  std::mutex mutex_;
  // One micro-batch between its forward and its backward.
  std::unique_ptr<KVCache> cache_;
  model::Tape tape_;
  std::vector<float> hidden_;
  std::vector<int32_t> targets_;
  int64_t rows_ = 0;
  // The training forward's logits (rows × vocab), kept for its backward; grow-only, so that a step
  // does not fault in fresh pages (at most kKeptLogitsBytes stay held between steps).
  model::Buffer kept_logits_;
  int64_t kept_rows_ = 0;
  bool score_mode_ = false;
  std::map<std::string, Moments> moments_;
};

CpuCache::CpuCache(std::shared_ptr<CpuEngine> owner, const model::Config& cfg, int slots, int capacity, model::CacheLayout layout)
    : engine(std::move(owner)), kv(cfg, slots, capacity, layout.page_size, layout.pages) {}

const model::Engine* CpuCache::owner() const { return engine.get(); }

// A cache is used by one caller at a time (the engine's steps on it are awaited); the model's
// lock guards the model's scratch, not the cache, so these do not take it.
int CpuCache::length(int slot) {
  if (slot < 0 || slot >= kv.slots()) throw std::out_of_range("slot out of range");
  return kv.length(slot);
}

void CpuCache::copy_prefix(int src, int dst, int len) {
  kv.copy_prefix(src, dst, len);
}

void CpuCache::truncate(int slot, int len) {
  if (slot < 0 || slot >= kv.slots() || len < 0 || len > kv.length(slot)) throw std::out_of_range("truncate out of range");
  kv.truncate(slot, len);
}

// Locks this engine and, when it is another one, the reference too (in address order: no deadlock).
class PairLock {
 public:
  PairLock(std::mutex& a, std::mutex* b) {
    if (b && b != &a) {
      std::mutex* first = std::less<std::mutex*>()(&a, b) ? &a : b;
      std::mutex* second = first == &a ? b : &a;
      l1_ = std::unique_lock<std::mutex>(*first);
      l2_ = std::unique_lock<std::mutex>(*second);
    } else {
      l1_ = std::unique_lock<std::mutex>(a);
    }
  }

 private:
  std::unique_lock<std::mutex> l1_, l2_;
};

// Vocabulary-wide work in row chunks: at most ~64 MB of logits alive at once.
// The most logits a training forward keeps for its backward (e.g. 512 tokens × 151,936 = 311 MB).
constexpr double kKeptLogitsBytes = 512.0 * (1 << 20);

// AUTODIDACT_KEEP_LOGITS=0: no training forward keeps its logits; the backward computes them
// again chunk by chunk (less memory, one more LM-head GEMM). Read at every training forward.
bool keep_logits_allowed() {
  const char* env = std::getenv("AUTODIDACT_KEEP_LOGITS");
  return !(env && std::strcmp(env, "0") == 0);
}

// Σ x[i]² in double over fixed blocks, added in block order: the same bits whatever the threads.
double squared_norm(ThreadPool& pool, const float* x, int64_t n) {
  constexpr int64_t kNormBlock = 1 << 16;
  const int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<size_t>(blocks));
  pool.parallel_for(blocks, 1, [&](int64_t b0, int64_t b1, int) {
    for (int64_t b = b0; b < b1; ++b) partial[b] = sum_squares_f32(x + b * kNormBlock, std::min(kNormBlock, n - b * kNormBlock));
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

int64_t logits_chunk(int64_t rows, int64_t vocab) { return std::max<int64_t>(1, std::min<int64_t>(rows, (16ll << 20) / std::max<int64_t>(vocab, 1))); }

// ---------------------------------------------------------------- step

void CpuEngine::do_step(model::Cache& cache_base, const model::StepRequest& r, model::StepResult& res) {
  KVCache& cache = static_cast<CpuCache&>(cache_base).kv;
  auto* ref = static_cast<CpuEngine*>(r.reference);
  PairLock lock(mutex_, ref ? &ref->mutex_ : nullptr);
  const int64_t V = model_.config().vocab, H = model_.config().hidden;
  const int64_t R = model_.forward(cache, r.batch, r.tokens.data());
  std::vector<float> hidden(model_.hidden_out(), model_.hidden_out() + R * H);
  std::vector<float> ref_hidden;
  if (ref) {
    KVCache& rc = static_cast<CpuCache*>(r.reference_cache)->kv;
    const int64_t rr = ref->model_.forward(rc, model::without_adapters(r.batch), r.tokens.data());
    if (rr != R) throw std::runtime_error("reference model produced a different number of rows");
    ref_hidden.assign(ref->model_.hidden_out(), ref->model_.hidden_out() + R * ref->model_.config().hidden);
  }
  // Row r → batch entry, for sampling.
  std::vector<int> row_entry;
  for (size_t e = 0; e < r.batch.size(); ++e)
    for (int64_t i = 0; i < model::output_rows(r.batch[e]); ++i) row_entry.push_back(static_cast<int>(e));
  const bool sampling = !r.sampling.empty();
  const int topk = r.topk;
  res.prepare(R, topk, V, ref != nullptr, r.return_logits);

  const int64_t chunk = logits_chunk(R, V);
  std::vector<float> logits(chunk * V), ref_logits(ref ? chunk * V : 0);
  std::vector<std::vector<char>> scratch(sampling ? model_.pool().size() : 0);
  for (auto& s : scratch) s.resize(sampling_scratch_bytes(V));
  std::vector<int32_t> row_targets(chunk);

  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t n = std::min(chunk, R - r0);
    model_.lm_head(hidden.data() + r0 * H, n, logits.data());
    if (ref) ref->model_.lm_head(ref_hidden.data() + r0 * ref->model_.config().hidden, n, ref_logits.data());
    for (int64_t i = 0; i < n; ++i) row_targets[i] = r.targets.empty() ? -1 : r.targets[r0 + i];
    if (sampling) {
      AD_PROFILE("sampling", 4.0 * n * V, 4.0 * n * V);
      model_.pool().parallel_for(n, 1, [&](int64_t a, int64_t b, int worker) {
        for (int64_t i = a; i < b; ++i) {
          const int e = row_entry[r0 + i];
          if (r.batch[e].out_mode != 1) continue;
          const auto& hist = cache.tokens(r.batch[e].slot);
          const int64_t plen = std::min<int64_t>(r.sampling[e].prompt_length, static_cast<int64_t>(hist.size()));
          row_targets[i] = sample_token(logits.data() + i * V, V, r.sampling[e].params, static_cast<uint64_t>(hist.size()), hist.data(),
                                        static_cast<int64_t>(hist.size()), hist.data() + plen, static_cast<int64_t>(hist.size()) - plen,
                                        scratch[worker].data());
        }
      });
    }
    LogitStatsOut out{res.max_logit.data() + r0, res.lse.data() + r0, res.entropy.data() + r0, res.margin.data() + r0,
                      res.chosen.data() + r0, topk ? res.topk_ids.data() + r0 * topk : nullptr,
                      topk ? res.topk_logits.data() + r0 * topk : nullptr, ref ? res.k1.data() + r0 : nullptr,
                      ref ? res.k2.data() + r0 : nullptr, ref ? res.k3.data() + r0 : nullptr, ref ? res.kl.data() + r0 : nullptr};
    logit_stats(model_.pool(), logits.data(), n, V, V, row_targets.data(), topk, ref ? ref_logits.data() : nullptr, out);
    for (int64_t i = 0; i < n; ++i) res.tokens[r0 + i] = row_targets[i];
    if (r.return_logits) std::copy(logits.begin(), logits.begin() + n * V, res.logits.begin() + r0 * V);
  }
}

// ---------------------------------------------------------------- training

void CpuEngine::row_stats(const float* hidden, int64_t rows, const int32_t* targets, float* logp, float* entropy, bool keep) {
  const int64_t V = model_.config().vocab, H = model_.config().hidden;
  const bool keeping = keep && keep_logits_allowed() && static_cast<double>(rows) * V * sizeof(float) <= kKeptLogitsBytes;
  const int64_t chunk = keeping ? rows : logits_chunk(rows, V);
  if (keeping && kept_logits_.size < rows * V) kept_logits_ = model::Buffer(rows * V);
  std::vector<float> scratch(keeping ? 0 : chunk * V), mx(chunk), lse(chunk), ent(chunk), margin(chunk);
  float* logits = keeping ? kept_logits_.data : scratch.data();
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    model_.lm_head(hidden + r0 * H, n, logits);
    LogitStatsOut out{mx.data(), lse.data(), entropy ? entropy + r0 : ent.data(), margin.data(), logp + r0,
                      nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    logit_stats(model_.pool(), logits, n, V, V, targets + r0, 0, nullptr, out);
  }
  kept_rows_ = keeping ? rows : 0;
}

void CpuEngine::do_train_forward(const model::TrainForwardRequest& r, model::TrainForwardResult& out) {
  require_f32_weights("a training forward");
  auto* ref = static_cast<CpuEngine*>(r.reference);
  PairLock lock(mutex_, ref ? &ref->mutex_ : nullptr);
  if (r.reference_lora_off && !model_.has_lora()) throw std::invalid_argument("reference 'lora-off' needs LoRA adapters attached");
  const model::TrainSequences& s = r.sequences;
  const int64_t B = static_cast<int64_t>(s.lengths.size());
  int capacity = 1;
  std::vector<BatchEntry> batch;
  std::vector<int32_t> fed, targets;
  int64_t offset = 0;
  for (int64_t i = 0; i < B; ++i) {
    const int len = s.lengths[i], plen = s.prompt_lengths[i];
    // Feed tokens[0 .. len−2]; rows from plen−1 on predict the completion tokens[plen .. len−1].
    batch.push_back({static_cast<int>(i), len - 1, 2, plen - 1, s.adapters.empty() ? 0 : s.adapters[i]});
    fed.insert(fed.end(), s.tokens.begin() + offset, s.tokens.begin() + offset + len - 1);
    targets.insert(targets.end(), s.tokens.begin() + offset + plen, s.tokens.begin() + offset + len);
    capacity = std::max(capacity, len);
    offset += len;
  }
  try {
    cache_ = std::make_unique<KVCache>(model_.config(), static_cast<int>(B), capacity);
    tape_.checkpointed = s.checkpoint;
    const int64_t R = model_.forward(*cache_, batch, fed.data(), &tape_);
    const int64_t H = model_.config().hidden;
    hidden_.assign(model_.hidden_out(), model_.hidden_out() + R * H);
    targets_ = targets;
    rows_ = R;
    score_mode_ = false;
    out.logp.assign(R, NAN);
    out.entropy.assign(R, NAN);
    row_stats(hidden_.data(), R, targets.data(), out.logp.data(), out.entropy.data(), /*keep=*/true);
  } catch (...) {
    release_tape();
    throw;
  }
  if (r.reference_lora_off || ref) {
    CpuEngine& reference = ref ? *ref : *this;
    Transformer& rm = reference.model_;
    const bool was = rm.lora_enabled();
    if (r.reference_lora_off) rm.set_lora_enabled(false);
    try {
      KVCache rc(rm.config(), static_cast<int>(B), capacity);
      const int64_t rr = rm.forward(rc, ref ? model::without_adapters(batch) : batch, fed.data());
      std::vector<float> rh(rm.hidden_out(), rm.hidden_out() + rr * rm.config().hidden);
      out.ref_logp.assign(rr, NAN);
      reference.row_stats(rh.data(), rr, targets.data(), out.ref_logp.data(), nullptr);
    } catch (...) {
      rm.set_lora_enabled(was);
      throw;
    }
    rm.set_lora_enabled(was);
  }
}

void CpuEngine::do_train_backward(const std::vector<float>& a, const std::vector<float>& b) {
  require_f32_weights("training");
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    if (!cache_ || score_mode_) throw std::invalid_argument("trainBackward needs a trainForward first");
    if (static_cast<int64_t>(a.size()) != rows_)
      throw std::invalid_argument("a and b must have one coefficient per completion token (" + std::to_string(rows_) + ")");
    std::vector<float> dh(rows_ * model_.config().hidden);
    model_.lm_head_backward(hidden_.data(), rows_, targets_.data(), a.data(), b.data(), dh.data(),
                            kept_rows_ == rows_ ? kept_logits_.data : nullptr);
    model_.backward(*cache_, tape_, dh.data());
  } catch (...) {
    release_tape();
    throw;
  }
  release_tape();
}

void CpuEngine::do_score_forward(const model::ScoreForwardRequest& r, std::vector<float>& scores) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (model_.score_labels() == 0) throw std::invalid_argument("this model has no score head");
  std::vector<BatchEntry> batch;
  int capacity = 1;
  for (size_t i = 0; i < r.lengths.size(); ++i) {
    batch.push_back({static_cast<int>(i), r.lengths[i], 1, 0, r.adapters.empty() ? 0 : r.adapters[i]});
    capacity = std::max(capacity, r.lengths[i]);
  }
  auto cache = std::make_unique<KVCache>(model_.config(), static_cast<int>(r.lengths.size()), capacity);
  model::Tape local;
  const int64_t R = model_.forward(*cache, batch, r.tokens.data(), r.tape ? &local : nullptr);
  std::vector<float> hidden(model_.hidden_out(), model_.hidden_out() + R * model_.config().hidden);
  scores.assign(R * model_.score_labels(), NAN);
  model_.score_head(hidden.data(), R, scores.data());
  if (r.tape) {
    cache_ = std::move(cache);
    tape_ = std::move(local);
    hidden_ = std::move(hidden);
    rows_ = R;
    score_mode_ = true;
  }
}

void CpuEngine::do_score_backward(const std::vector<float>& d_scores) {
  require_f32_weights("training");
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    if (!cache_ || !score_mode_) throw std::invalid_argument("scoreBackward needs a taped scoreForward first");
    if (static_cast<int64_t>(d_scores.size()) != rows_ * model_.score_labels())
      throw std::invalid_argument("dScores needs one value per sequence and label");
    std::vector<float> dh(rows_ * model_.config().hidden);
    model_.score_head_backward(hidden_.data(), rows_, d_scores.data(), dh.data());
    model_.backward(*cache_, tape_, dh.data());
  } catch (...) {
    release_tape();
    throw;
  }
  release_tape();
}

model::OptimizerResult CpuEngine::do_optimizer_step(const model::OptimizerRequest& o) {
  require_f32_weights("training");
  std::lock_guard<std::mutex> lock(mutex_);
  model::OptimizerResult res;
  // Only what a backward wrote since the last step: an adapter no sequence of the step used keeps
  // its values and moments (as a parameter without a gradient in PyTorch's AdamW).
  auto grads = model_.gradients();
  grads.erase(std::remove_if(grads.begin(), grads.end(), [](const auto& g) { return !g.second->written; }), grads.end());
  // Every moment buffer (m and v on their own) matches its parameter before anything is written;
  // a parameter without moments starts from zeros.
  for (auto& [name, g] : grads) {
    auto it = moments_.find(name);
    if (it == moments_.end()) continue;
    if (it->second.m.size != g->grad.size || it->second.v.size != g->grad.size)
      throw std::length_error("optimizer state of " + name + " has m of " + std::to_string(it->second.m.size) + " and v of " +
                              std::to_string(it->second.v.size) + " elements, the parameter " + std::to_string(g->grad.size));
  }
  double total = 0;
  for (auto& [name, g] : grads) total += static_cast<double>(g->grad.size);
  double ss = 0;
  {
    AD_PROFILE("grad_norm", 4.0 * total, 2.0 * total);
    for (auto& [name, g] : grads) ss += squared_norm(model_.pool(), g->grad.data, g->grad.size);
  }
  res.grad_norm = std::sqrt(ss);
  res.skipped = !std::isfinite(res.grad_norm);
  if (!res.skipped) {
    const kernels::AdamWParams p{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                                 static_cast<float>(1 - std::pow(static_cast<double>(o.beta1), o.step)),
                                 static_cast<float>(1 - std::pow(static_cast<double>(o.beta2), o.step)),
                                 (o.clip_grad_norm > 0 && res.grad_norm > o.clip_grad_norm) ? static_cast<float>(o.clip_grad_norm / res.grad_norm)
                                                                                           : 1.f};
    // Reads parameter, gradient, m, v; writes parameter, m, v.
    AD_PROFILE("adamw", 4.0 * 7 * total, 16.0 * total);
    for (auto& [name, g] : grads) {
      auto [it, fresh] = moments_.try_emplace(name);
      Moments& mo = it->second;
      if (fresh) {
        mo.m = model::Buffer(g->grad.size);
        mo.v = model::Buffer(g->grad.size);
        std::memset(mo.m.data, 0, sizeof(float) * mo.m.size);
        std::memset(mo.v.data, 0, sizeof(float) * mo.v.size);
      }
      const bool decay = model::weight_decay_applies(name);
      model_.pool().parallel_for(g->grad.size, 1 << 14, [&](int64_t i0, int64_t i1, int) {
        kernels::adamw_update(g->param + i0, g->grad.data + i0, mo.m.data + i0, mo.v.data + i0, i1 - i0, p, decay);
      });
      res.parameters += g->grad.size;
    }
  }
  model_.zero_grad();
  return res;
}

// ---------------------------------------------------------------- tensors

template <typename Fn>
void CpuEngine::for_each_adapter(Fn fn) {
  for (int k = 0; k < model_.adapter_count(); ++k)
    for (int l = 0; l < model_.config().layers; ++l)
      for (int w = 0; w < model::kNumLinear; ++w) {
        const auto which = static_cast<model::Linear>(w);
        if (model::LoraAdapter* a = model_.lora_adapter(l, which, k))
          fn(model::lora_a_name(l, which, model_.adapter_name(k)), model::lora_b_name(l, which, model_.adapter_name(k)), *a);
      }
}

float* CpuEngine::find_parameter(const std::string& name, int64_t* n) {
  auto it = model_.tensors().find(name);
  if (it != model_.tensors().end()) {
    *n = it->second.numel();
    return it->second.buf.data;
  }
  float* found = nullptr;
  for_each_adapter([&](const std::string& a_name, const std::string& b_name, model::LoraAdapter& a) {
    if (name == a_name) found = a.A.data, *n = a.A.size;
    if (name == b_name) found = a.B.data, *n = a.B.size;
  });
  return found;
}

std::vector<model::ParameterInfo> CpuEngine::do_parameters() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<model::ParameterInfo> out;
  for (auto& kv : model_.tensors()) out.push_back({kv.first, kv.second.numel()});
  for_each_adapter([&](const std::string& a_name, const std::string& b_name, model::LoraAdapter& a) {
    out.push_back({a_name, a.A.size});
    out.push_back({b_name, a.B.size});
  });
  return out;
}

// Every parameter by HF / PEFT name (base tensors sorted, then LoRA A and B), as f32 copies.
std::vector<model::TensorCopy> CpuEngine::do_export_tensors(bool merge_lora) {
  require_f32_weights("exporting tensors");
  std::lock_guard<std::mutex> lock(mutex_);
  if (merge_lora && !model_.has_lora()) throw std::invalid_argument("this model has no LoRA adapters to merge");
  std::vector<std::string> names;
  for (auto& kv : model_.tensors()) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  std::vector<model::TensorCopy> out;
  auto copy_of = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    model::TensorCopy t{name, std::move(shape), std::vector<float>(static_cast<size_t>(n))};
    copy_floats(model_.pool(), t.data.data(), data, n);
    out.push_back(std::move(t));
  };
  for (auto& name : names) copy_of(name, model_.tensors()[name].buf.data, model_.tensors()[name].shape);
  if (merge_lora) {
    std::map<std::string, model::TensorCopy*> by_name;
    for (auto& t : out) by_name[t.name] = &t;
    for (int l = 0; l < model_.config().layers; ++l)
      for (int w = 0; w < model::kNumLinear; ++w) {
        const auto which = static_cast<model::Linear>(w);
        model_.add_lora_delta(l, which, by_name.at(model::tensor_name(model::linear_weight(which), l))->data.data());
      }
    return out;
  }
  for_each_adapter([&](const std::string& a_name, const std::string& b_name, model::LoraAdapter& a) {
    copy_of(a_name, a.A.data, {a.rank, a.in});
    copy_of(b_name, a.B.data, {a.out, a.rank});
  });
  return out;
}

void CpuEngine::do_import_tensors(const std::vector<model::TensorView>& tensors) {
  require_f32_weights("importing tensors");
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& t : tensors) {  // names and sizes were checked against do_parameters() first
    int64_t n = 0;
    float* dst = find_parameter(t.name, &n);
    copy_floats(model_.pool(), dst, t.data, n);
  }
}

std::vector<model::TensorCopy> CpuEngine::do_export_gradients() {
  require_f32_weights("training");
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<model::TensorCopy> out;
  for (auto& [name, g] : model_.gradients()) {
    model::TensorCopy t{name, {g->grad.size}, std::vector<float>(static_cast<size_t>(g->grad.size))};
    copy_floats(model_.pool(), t.data.data(), g->grad.data, g->grad.size);
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<model::MomentsCopy> CpuEngine::do_export_optimizer_state() {
  require_f32_weights("training");
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<model::MomentsCopy> out;
  for (auto& [name, mo] : moments_) {  // a std::map: sorted by name
    model::MomentsCopy c{name, std::vector<float>(static_cast<size_t>(mo.m.size)), std::vector<float>(static_cast<size_t>(mo.v.size))};
    copy_floats(model_.pool(), c.m.data(), mo.m.data, mo.m.size);
    copy_floats(model_.pool(), c.v.data(), mo.v.data, mo.v.size);
    out.push_back(std::move(c));
  }
  return out;
}

void CpuEngine::do_import_optimizer_state(const std::vector<model::MomentsView>& moments) {
  require_f32_weights("training");
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<std::string, Moments> fresh;  // built whole, then swapped in
  for (const auto& e : moments) {
    Moments mo{model::Buffer(e.m_size), model::Buffer(e.v_size)};
    copy_floats(model_.pool(), mo.m.data, e.m, e.m_size);
    copy_floats(model_.pool(), mo.v.data, e.v, e.v_size);
    fresh[e.name] = std::move(mo);
  }
  moments_.swap(fresh);
}

// ---------------------------------------------------------------- the backend

class CpuBackend final : public model::Backend {
 public:
  const char* name() const override { return "cpu"; }
  model::BackendStatus status() const override {
    model::BackendStatus s;
    s.compiled = s.available = true;
    s.kind = "ok";
    return s;
  }
  model::VerbSupport support(Verb) const override { return {true, ""}; }  // every verb
  void profiler_enable(bool on) const override { prof::set_enabled(on); }
  void profiler_reset() const override { prof::reset(); }
  std::vector<model::ProfileRow> profiler_rows() const override {
    std::vector<model::ProfileRow> out;
    for (const auto& c : prof::snapshot()) out.push_back({c.name, c.calls, c.seconds, c.bytes, c.flops});
    return out;
  }

 protected:
  std::unique_ptr<model::Engine> do_load(const model::LoadRequest& r) const override {
    auto engine = std::make_unique<CpuEngine>(r.config, r.threads);
    Transformer& m = engine->transformer();
    std::vector<model::Tensor> tensors(r.sources.size());
    std::vector<std::exception_ptr> errors(r.sources.size());  // each tensor's, rethrown as it is (a NonFiniteTensor stays one)
    std::map<std::string, model::TensorId> table_ids;
    for (const model::ModelTensor& t : model::model_tensors(r.config)) table_ids[t.name] = t.spec->id;
    // Each tensor's type under r.weights: Linear weights, LM head and embedding (tensor_table) only.
    const auto type_of = [&](const model::TensorSource& src) {
      const auto it = table_ids.find(src.name);
      return it == table_ids.end() ? WeightType::kF32 : model::weight_type_for(r.weights, it->second, src.dtype);
    };
    m.pool().parallel_for(static_cast<int64_t>(r.sources.size()), 1, [&](int64_t a, int64_t b, int) {
      for (int64_t i = a; i < b; ++i) {
        try {
          tensors[i] = model::read_tensor_as(r.sources[i], type_of(r.sources[i]));
        } catch (...) {
          errors[i] = std::current_exception();
        }
      }
    });
    for (const auto& e : errors)
      if (e) std::rethrow_exception(e);  // the first tensor's error, in the order the sources came
    for (size_t i = 0; i < r.sources.size(); ++i) m.set_tensor(r.sources[i].name, std::move(tensors[i]));
    m.finalize();
    return engine;
  }
};

}  // namespace

const model::Backend& cpu_backend() {
  static const CpuBackend backend;
  return backend;
}

}  // namespace ad::cpu
