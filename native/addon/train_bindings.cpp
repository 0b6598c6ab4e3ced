// Training entry points on a NativeModel: a taped forward that returns per-token statistics,
// a backward from per-token loss coefficients, AdamW with global-norm clipping, LoRA adapters,
// and tensor / optimizer-state export and import for checkpoints.
#include <cmath>
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "addon/cuda_bindings.h"
#include "addon/marshal.h"
#include "addon/registry.h"
#include "addon/model_handle.h"
#include "cpu/logit_stats_cpu.h"
#include "cpu/profiler.h"
#include "kernels/adamw.h"

namespace ad::addon {
namespace {

using model::BatchEntry;
using model::KVCache;
using model::Transformer;

struct Moments {
  model::Buffer m, v;
};

// One micro-batch between its forward and its backward, plus the optimizer's moments.
struct TrainState {
  std::mutex mutex;
  std::unique_ptr<KVCache> cache;
  model::Tape tape;
  std::vector<float> hidden;
  std::vector<int32_t> targets;
  int64_t rows = 0;
  bool score_mode = false;
  std::unordered_map<std::string, Moments> moments;
};

std::shared_ptr<TrainState> state_of(const std::shared_ptr<Transformer>& m) {
  auto& slot = m->train_state();
  if (!slot) slot = std::make_shared<TrainState>();
  return std::static_pointer_cast<TrainState>(slot);
}

// Logits of the given hidden rows → chosen-token logprob and entropy, chunk by chunk.
void row_stats(Transformer& m, const float* hidden, int64_t rows, const int32_t* targets, float* logp, float* entropy) {
  const int64_t V = m.config().vocab, H = m.config().hidden;
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(rows, (16ll << 20) / V));
  std::vector<float> logits(chunk * V), mx(chunk), lse(chunk), ent(chunk), margin(chunk);
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    m.lm_head(hidden + r0 * H, n, logits.data());
    cpu::LogitStatsOut out{mx.data(), lse.data(), entropy ? entropy + r0 : ent.data(), margin.data(), logp + r0,
                           nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
    cpu::logit_stats(m.pool(), logits.data(), n, V, V, targets + r0, 0, nullptr, out);
  }
}

// ---------------------------------------------------------------- forward

class TrainForwardWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<Transformer> model, ref_model;
  bool ref_lora_off = false;
  std::shared_ptr<TrainState> state;
  std::vector<int32_t> tokens, lengths, prompt_lengths;
  bool checkpoint = false;
  std::vector<float> logp, entropy, ref_logp;

  void Execute() override {
    try {
      std::lock_guard<std::mutex> lock(model->mutex());
      std::lock_guard<std::mutex> slock(state->mutex);
      const int64_t B = static_cast<int64_t>(lengths.size());
      int capacity = 1;
      std::vector<BatchEntry> batch;
      std::vector<int32_t> fed, targets;
      int64_t offset = 0;
      for (int64_t i = 0; i < B; ++i) {
        const int len = lengths[i], plen = prompt_lengths[i];
        // Feed tokens[0 .. len−2]; rows from plen−1 on predict the completion tokens[plen .. len−1].
        batch.push_back({static_cast<int>(i), len - 1, 2, plen - 1});
        fed.insert(fed.end(), tokens.begin() + offset, tokens.begin() + offset + len - 1);
        targets.insert(targets.end(), tokens.begin() + offset + plen, tokens.begin() + offset + len);
        capacity = std::max(capacity, len);
        offset += len;
      }
      state->cache = std::make_unique<KVCache>(model->config(), static_cast<int>(B), capacity);
      state->tape.checkpointed = checkpoint;
      const int64_t R = model->forward(*state->cache, batch, fed.data(), &state->tape);
      const int64_t H = model->config().hidden;
      state->hidden.assign(model->hidden_out(), model->hidden_out() + R * H);
      state->targets = targets;
      state->rows = R;
      state->score_mode = false;
      logp.assign(R, NAN);
      entropy.assign(R, NAN);
      row_stats(*model, state->hidden.data(), R, targets.data(), logp.data(), entropy.data());
      if (ref_lora_off || ref_model) {
        Transformer& ref = ref_model ? *ref_model : *model;
        std::unique_lock<std::mutex> rlock;
        if (ref_model && ref_model != model) rlock = std::unique_lock<std::mutex>(ref_model->mutex());
        const bool was = ref.lora_enabled();
        if (ref_lora_off) ref.set_lora_enabled(false);
        try {
          KVCache rc(ref.config(), static_cast<int>(B), capacity);
          const int64_t rr = ref.forward(rc, batch, fed.data());
          std::vector<float> rh(ref.hidden_out(), ref.hidden_out() + rr * ref.config().hidden);
          ref_logp.assign(rr, NAN);
          row_stats(ref, rh.data(), rr, targets.data(), ref_logp.data(), nullptr);
        } catch (...) {
          ref.set_lora_enabled(was);
          throw;
        }
        ref.set_lora_enabled(was);
      }
    } catch (const std::exception& e) {
      state->cache.reset();
      SetError(e.what());
    }
  }
  Napi::Value Result() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("logp", typed_array(env, logp.data(), logp.size()));
    o.Set("entropy", typed_array(env, entropy.data(), entropy.size()));
    if (!ref_logp.empty()) o.Set("refLogp", typed_array(env, ref_logp.data(), ref_logp.size()));
    return o;
  }
};

Napi::Value TrainForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) {
    Napi::Value ref = info[1].As<Napi::Object>().Get("reference");
    std::shared_ptr<CudaModelRef> cref;
    if (ref.IsObject()) {
      cref = cuda_model_of(env, ref);
      if (!cref) throw Napi::TypeError::New(env, "the reference of a CUDA model must be a CUDA model");
    } else if (ref.IsString()) {
      throw Napi::TypeError::New(env, "reference 'lora-off' needs LoRA adapters, which the CUDA backend does not support yet");
    }
    return cuda_train_forward(info, cm, cref);
  }
  auto m = model_of(env, info[0]);
  Napi::Object req = info[1].As<Napi::Object>();
  auto w = std::make_unique<TrainForwardWorker>(env);
  w->model = m;
  w->state = state_of(m);
  TrainSequences seqs = train_sequences(env, req);
  w->tokens = std::move(seqs.tokens);
  w->lengths = std::move(seqs.lengths);
  w->prompt_lengths = std::move(seqs.prompt_lengths);
  w->checkpoint = seqs.checkpoint;
  Napi::Value ref = req.Get("reference");
  if (ref.IsString() && ref.As<Napi::String>().Utf8Value() == "lora-off") {
    if (!m->has_lora()) throw Napi::TypeError::New(env, "reference 'lora-off' needs LoRA adapters attached");
    w->ref_lora_off = true;
  } else if (ref.IsObject()) {
    w->ref_model = model_of(env, ref);
    if (w->ref_model->config().vocab != m->config().vocab) throw Napi::TypeError::New(env, "the reference model has another vocabulary");
  }
  return PromiseWorker::Start(std::move(w));
}

double num(const Napi::Object& o, const char* key);

// ---------------------------------------------------------------- score head (reward models)

// Taped forward of whole sequences; the score head reads each sequence's last token.
class ScoreForwardWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<Transformer> model;
  std::shared_ptr<TrainState> state;
  std::vector<int32_t> tokens, lengths;
  bool tape = true;
  std::vector<float> scores;

  void Execute() override {
    try {
      std::lock_guard<std::mutex> lock(model->mutex());
      std::lock_guard<std::mutex> slock(state->mutex);
      if (model->score_labels() == 0) throw std::runtime_error("this model has no score head");
      std::vector<BatchEntry> batch;
      int capacity = 1;
      for (size_t i = 0; i < lengths.size(); ++i) {
        batch.push_back({static_cast<int>(i), lengths[i], 1});
        capacity = std::max(capacity, lengths[i]);
      }
      auto cache = std::make_unique<KVCache>(model->config(), static_cast<int>(lengths.size()), capacity);
      model::Tape local;
      const int64_t R = model->forward(*cache, batch, tokens.data(), tape ? &local : nullptr);
      std::vector<float> hidden(model->hidden_out(), model->hidden_out() + R * model->config().hidden);
      scores.assign(R * model->score_labels(), NAN);
      model->score_head(hidden.data(), R, scores.data());
      if (tape) {
        state->cache = std::move(cache);
        state->tape = std::move(local);
        state->hidden = std::move(hidden);
        state->rows = R;
        state->score_mode = true;
      }
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  Napi::Value Result() override { return typed_array(Env(), scores); }
};

Napi::Value ScoreForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto m = model_of(env, info[0]);
  Napi::Object req = info[1].As<Napi::Object>();
  auto w = std::make_unique<ScoreForwardWorker>(env);
  w->model = m;
  w->state = state_of(m);
  w->tokens = typed_vector<int32_t, napi_int32_array>(env, req.Get("tokens"), "tokens");
  w->lengths = typed_vector<int32_t, napi_int32_array>(env, req.Get("lengths"), "lengths");
  w->tape = !req.Get("tape").IsBoolean() || req.Get("tape").As<Napi::Boolean>().Value();
  int64_t total = 0;
  for (int32_t n : w->lengths) {
    if (n < 1) throw Napi::RangeError::New(env, "every sequence needs at least one token");
    total += n;
  }
  if (w->lengths.empty() || total != static_cast<int64_t>(w->tokens.size()))
    throw Napi::TypeError::New(env, "tokens.length must equal the sum of lengths (and lengths be non-empty)");
  return PromiseWorker::Start(std::move(w));
}

class ScoreBackwardWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<Transformer> model;
  std::shared_ptr<TrainState> state;
  std::vector<float> d_scores;

  void Execute() override {
    try {
      std::lock_guard<std::mutex> lock(model->mutex());
      std::lock_guard<std::mutex> slock(state->mutex);
      if (!state->cache || !state->score_mode) throw std::runtime_error("scoreBackward needs a taped scoreForward first");
      if (static_cast<int64_t>(d_scores.size()) != state->rows * model->score_labels())
        throw std::runtime_error("dScores needs one value per sequence and label");
      std::vector<float> dh(state->rows * model->config().hidden);
      model->score_head_backward(state->hidden.data(), state->rows, d_scores.data(), dh.data());
      model->backward(*state->cache, state->tape, dh.data());
    } catch (const std::exception& e) {
      SetError(e.what());
    }
    state->cache.reset();
    state->tape = model::Tape();
    state->hidden.clear();
    state->score_mode = false;
  }
};

Napi::Value ScoreBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto m = model_of(env, info[0]);
  auto w = std::make_unique<ScoreBackwardWorker>(env);
  w->model = m;
  w->state = state_of(m);
  w->d_scores = typed_vector<float, napi_float32_array>(env, info[1].As<Napi::Object>().Get("dScores"), "dScores");
  return PromiseWorker::Start(std::move(w));
}

Napi::Value AttachScoreHead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto m = model_of(env, info[0]);
  Napi::Object o = info[1].As<Napi::Object>();
  std::lock_guard<std::mutex> lock(m->mutex());
  try {
    m->attach_score_head(static_cast<int>(num(o, "labels")), static_cast<float>(num(o, "std")), static_cast<uint64_t>(num(o, "seed")));
  } catch (const std::invalid_argument& e) {
    throw Napi::TypeError::New(env, e.what());
  }
  return env.Undefined();
}

// ---------------------------------------------------------------- backward

class TrainBackwardWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<Transformer> model;
  std::shared_ptr<TrainState> state;
  std::vector<float> a, b;

  void Execute() override {
    try {
      std::lock_guard<std::mutex> lock(model->mutex());
      std::lock_guard<std::mutex> slock(state->mutex);
      if (!state->cache || state->score_mode) throw std::runtime_error("trainBackward needs a trainForward first");
      if (static_cast<int64_t>(a.size()) != state->rows || static_cast<int64_t>(b.size()) != state->rows)
        throw std::runtime_error("a and b must have one coefficient per completion token (" + std::to_string(state->rows) + ")");
      std::vector<float> dh(state->rows * model->config().hidden);
      model->lm_head_backward(state->hidden.data(), state->rows, state->targets.data(), a.data(), b.data(), dh.data());
      model->backward(*state->cache, state->tape, dh.data());
    } catch (const std::exception& e) {
      SetError(e.what());
    }
    state->cache.reset();
    state->tape = model::Tape();
    state->hidden.clear();
  }
};

Napi::Value TrainBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) return cuda_train_backward(info, cm);
  auto m = model_of(env, info[0]);
  Napi::Object req = info[1].As<Napi::Object>();
  auto w = std::make_unique<TrainBackwardWorker>(env);
  w->model = m;
  w->state = state_of(m);
  w->a = typed_vector<float, napi_float32_array>(env, req.Get("a"), "a");
  w->b = typed_vector<float, napi_float32_array>(env, req.Get("b"), "b");
  return PromiseWorker::Start(std::move(w));
}

// ---------------------------------------------------------------- optimizer

class OptimizerStepWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<Transformer> model;
  std::shared_ptr<TrainState> state;
  kernels::AdamWParams p{};
  double clip = 0, norm = 0;
  bool skipped = false;
  int64_t parameters = 0;

  void Execute() override {
    try {
      std::lock_guard<std::mutex> lock(model->mutex());
      std::lock_guard<std::mutex> slock(state->mutex);
      auto grads = model->gradients();
      double total = 0;
      for (auto& [name, g] : grads) total += static_cast<double>(g->grad.size);
      double ss = 0;
      {
        AD_PROFILE("grad_norm", 4.0 * total, 2.0 * total);
        for (auto& [name, g] : grads)
          for (int64_t i = 0; i < g->grad.size; ++i) ss += static_cast<double>(g->grad.data[i]) * g->grad.data[i];
      }
      norm = std::sqrt(ss);
      skipped = !std::isfinite(norm);
      if (!skipped) {
        p.grad_scale = (clip > 0 && norm > clip) ? static_cast<float>(clip / norm) : 1.f;
        // Reads parameter, gradient, m, v; writes parameter, m, v.
        AD_PROFILE("adamw", 4.0 * 7 * total, 16.0 * total);
        for (auto& [name, g] : grads) {
          Moments& mo = state->moments[name];
          if (mo.m.size != g->grad.size) {
            mo.m = model::Buffer(g->grad.size);
            mo.v = model::Buffer(g->grad.size);
            std::memset(mo.m.data, 0, sizeof(float) * mo.m.size);
            std::memset(mo.v.data, 0, sizeof(float) * mo.v.size);
          }
          // No decay on norms and biases (1-D parameters), as is usual for transformers.
          const bool decay = name.find("norm") == std::string::npos && name.find(".bias") == std::string::npos;
          model->pool().parallel_for(g->grad.size, 1 << 14, [&](int64_t i0, int64_t i1, int) {
            kernels::adamw_update(g->param + i0, g->grad.data + i0, mo.m.data + i0, mo.v.data + i0, i1 - i0, p, decay);
          });
          parameters += g->grad.size;
        }
      }
      model->zero_grad();
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  Napi::Value Result() override {
    Napi::Object o = Napi::Object::New(Env());
    o.Set("gradNorm", norm);
    o.Set("skipped", skipped);
    o.Set("parameters", static_cast<double>(parameters));
    return o;
  }
};

double num(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string("optimizer field '") + key + "' must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

Napi::Value OptimizerStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) return cuda_optimizer_step(info, cm);
  auto m = model_of(env, info[0]);
  Napi::Object o = info[1].As<Napi::Object>();
  auto w = std::make_unique<OptimizerStepWorker>(env);
  w->model = m;
  w->state = state_of(m);
  const double step = num(o, "step");
  const double b1 = num(o, "beta1"), b2 = num(o, "beta2");
  w->p = {static_cast<float>(num(o, "lr")), static_cast<float>(b1), static_cast<float>(b2), static_cast<float>(num(o, "eps")),
          static_cast<float>(num(o, "weightDecay")), static_cast<float>(1 - std::pow(b1, step)),
          static_cast<float>(1 - std::pow(b2, step)), 1.f};
  w->clip = num(o, "clipGradNorm");
  return PromiseWorker::Start(std::move(w));
}

// ---------------------------------------------------------------- set-up, export, import

Napi::Value AttachLora(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto m = model_of(env, info[0]);
  Napi::Object o = info[1].As<Napi::Object>();
  std::vector<model::Linear> targets;
  Napi::Array t = o.Get("targets").As<Napi::Array>();
  for (uint32_t i = 0; i < t.Length(); ++i) {
    std::string name = t.Get(i).As<Napi::String>().Utf8Value();
    bool found = false;
    for (int k = 0; k < model::kNumLinear; ++k)
      if (name == model::linear_name(static_cast<model::Linear>(k))) {
        targets.push_back(static_cast<model::Linear>(k));
        found = true;
      }
    if (!found) throw Napi::TypeError::New(env, "unknown LoRA target module '" + name + "'");
  }
  std::lock_guard<std::mutex> lock(m->mutex());
  m->attach_lora(static_cast<int>(num(o, "rank")), static_cast<float>(num(o, "alpha")), targets, static_cast<uint64_t>(num(o, "seed")));
  return env.Undefined();
}

Napi::Value SetTrainable(const Napi::CallbackInfo& info) {
  if (auto cm = cuda_model_of(info.Env(), info[0])) {
    cuda_set_trainable(info.Env(), cm, info[1].As<Napi::Boolean>().Value(), info[2].As<Napi::Boolean>().Value());
    return info.Env().Undefined();
  }
  auto m = model_of(info.Env(), info[0]);
  std::lock_guard<std::mutex> lock(m->mutex());
  m->set_trainable(info[1].As<Napi::Boolean>().Value(), info[2].As<Napi::Boolean>().Value());
  state_of(m)->moments.clear();
  return info.Env().Undefined();
}

Napi::Value ZeroGrad(const Napi::CallbackInfo& info) {
  if (auto cm = cuda_model_of(info.Env(), info[0])) {
    cuda_zero_grad(info.Env(), cm);
    return info.Env().Undefined();
  }
  auto m = model_of(info.Env(), info[0]);
  std::lock_guard<std::mutex> lock(m->mutex());
  m->zero_grad();
  return info.Env().Undefined();
}

Napi::Value SetLoraEnabled(const Napi::CallbackInfo& info) {
  auto m = model_of(info.Env(), info[0]);
  std::lock_guard<std::mutex> lock(m->mutex());
  m->set_lora_enabled(info[1].As<Napi::Boolean>().Value());
  return info.Env().Undefined();
}

// Every parameter tensor by HF / PEFT name (base tensors, then LoRA A and B), as f32 copies.
Napi::Value ExportTensors(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) return cuda_export_tensors(env, cm);
  auto m = model_of(env, info[0]);
  std::lock_guard<std::mutex> lock(m->mutex());
  Napi::Array out = Napi::Array::New(env);
  uint32_t k = 0;
  auto push = [&](const std::string& name, const float* data, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", name);
    Napi::Array s = Napi::Array::New(env);
    for (size_t i = 0; i < shape.size(); ++i) s.Set(static_cast<uint32_t>(i), static_cast<double>(shape[i]));
    o.Set("shape", s);
    o.Set("data", typed_array(env, data, static_cast<size_t>(n)));
    out.Set(k++, o);
  };
  std::vector<std::string> names;
  for (auto& kv : m->tensors()) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  for (auto& name : names) push(name, m->tensors()[name].buf.data, m->tensors()[name].shape);
  for (int l = 0; l < m->config().layers; ++l)
    for (int w = 0; w < model::kNumLinear; ++w)
      if (auto* a = m->layer(l).lora[w].get()) {
        std::string p = "model.layers." + std::to_string(l) + "." + model::linear_prefix(static_cast<model::Linear>(w));
        push(p + ".lora_A.weight", a->A.data, {a->rank, a->in});
        push(p + ".lora_B.weight", a->B.data, {a->out, a->rank});
      }
  return out;
}

float* find_param(Transformer& m, const std::string& name, int64_t* n) {
  auto it = m.tensors().find(name);
  if (it != m.tensors().end()) {
    *n = it->second.numel();
    return it->second.buf.data;
  }
  for (int l = 0; l < m.config().layers; ++l)
    for (int w = 0; w < model::kNumLinear; ++w)
      if (auto* a = m.layer(l).lora[w].get()) {
        std::string p = "model.layers." + std::to_string(l) + "." + model::linear_prefix(static_cast<model::Linear>(w));
        if (name == p + ".lora_A.weight") return *n = a->A.size, a->A.data;
        if (name == p + ".lora_B.weight") return *n = a->B.size, a->B.data;
      }
  return nullptr;
}

// importTensors(model, [{name, data}]): overwrite parameters in place (all sizes checked first).
Napi::Value ImportTensors(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) {
    cuda_import_tensors(env, cm, info[1].As<Napi::Array>());
    return env.Undefined();
  }
  auto m = model_of(env, info[0]);
  Napi::Array arr = info[1].As<Napi::Array>();
  std::lock_guard<std::mutex> lock(m->mutex());
  std::vector<std::pair<float*, std::vector<float>>> plan;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object o = arr.Get(i).As<Napi::Object>();
    std::string name = o.Get("name").As<Napi::String>().Utf8Value();
    auto data = typed_vector<float, napi_float32_array>(env, o.Get("data"), "data");
    int64_t n = 0;
    float* dst = find_param(*m, name, &n);
    if (!dst) throw Napi::TypeError::New(env, "the model has no parameter named " + name);
    if (n != static_cast<int64_t>(data.size()))
      throw Napi::RangeError::New(env, "parameter " + name + " has " + std::to_string(n) + " elements, got " + std::to_string(data.size()));
    plan.emplace_back(dst, std::move(data));
  }
  for (auto& [dst, data] : plan) std::memcpy(dst, data.data(), data.size() * sizeof(float));
  return env.Undefined();
}

// The accumulated gradients by parameter name (for tests and diagnostics).
Napi::Value ExportGradients(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) return cuda_export_gradients(env, cm);
  auto m = model_of(env, info[0]);
  std::lock_guard<std::mutex> lock(m->mutex());
  Napi::Array out = Napi::Array::New(env);
  uint32_t k = 0;
  for (auto& [name, g] : m->gradients()) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", name);
    o.Set("data", typed_array(env, g->grad.data, static_cast<size_t>(g->grad.size)));
    out.Set(k++, o);
  }
  return out;
}

Napi::Value ExportOptimizerState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) return cuda_export_moments(env, cm);
  auto m = model_of(env, info[0]);
  auto st = state_of(m);
  std::lock_guard<std::mutex> lock(st->mutex);
  std::vector<std::string> names;
  for (auto& kv : st->moments) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  Napi::Array out = Napi::Array::New(env);
  uint32_t k = 0;
  for (auto& name : names) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", name);
    o.Set("m", typed_array(env, st->moments[name].m.data, st->moments[name].m.size));
    o.Set("v", typed_array(env, st->moments[name].v.data, st->moments[name].v.size));
    out.Set(k++, o);
  }
  return out;
}

Napi::Value ImportOptimizerState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (auto cm = cuda_model_of(env, info[0])) {
    cuda_import_moments(env, cm, info[1].As<Napi::Array>());
    return env.Undefined();
  }
  auto m = model_of(env, info[0]);
  auto st = state_of(m);
  Napi::Array arr = info[1].As<Napi::Array>();
  std::lock_guard<std::mutex> lock(st->mutex);
  st->moments.clear();
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object o = arr.Get(i).As<Napi::Object>();
    auto mv = typed_vector<float, napi_float32_array>(env, o.Get("m"), "m");
    auto vv = typed_vector<float, napi_float32_array>(env, o.Get("v"), "v");
    Moments mo{model::Buffer(static_cast<int64_t>(mv.size())), model::Buffer(static_cast<int64_t>(vv.size()))};
    std::memcpy(mo.m.data, mv.data(), mv.size() * 4);
    std::memcpy(mo.v.data, vv.data(), vv.size() * 4);
    st->moments[o.Get("name").As<Napi::String>().Utf8Value()] = std::move(mo);
  }
  return env.Undefined();
}

}  // namespace

void RegisterTrainBindings(Napi::Env env, Napi::Object exports) {
  Napi::Object t = Napi::Object::New(env);
  t.Set("forward", Napi::Function::New(env, TrainForward, "forward"));
  t.Set("backward", Napi::Function::New(env, TrainBackward, "backward"));
  t.Set("optimizerStep", Napi::Function::New(env, OptimizerStep, "optimizerStep"));
  t.Set("scoreForward", Napi::Function::New(env, ScoreForward, "scoreForward"));
  t.Set("scoreBackward", Napi::Function::New(env, ScoreBackward, "scoreBackward"));
  t.Set("attachScoreHead", Napi::Function::New(env, AttachScoreHead, "attachScoreHead"));
  t.Set("attachLora", Napi::Function::New(env, AttachLora, "attachLora"));
  t.Set("setTrainable", Napi::Function::New(env, SetTrainable, "setTrainable"));
  t.Set("zeroGrad", Napi::Function::New(env, ZeroGrad, "zeroGrad"));
  t.Set("setLoraEnabled", Napi::Function::New(env, SetLoraEnabled, "setLoraEnabled"));
  t.Set("exportTensors", Napi::Function::New(env, ExportTensors, "exportTensors"));
  t.Set("importTensors", Napi::Function::New(env, ImportTensors, "importTensors"));
  t.Set("exportGradients", Napi::Function::New(env, ExportGradients, "exportGradients"));
  t.Set("exportOptimizerState", Napi::Function::New(env, ExportOptimizerState, "exportOptimizerState"));
  t.Set("importOptimizerState", Napi::Function::New(env, ImportOptimizerState, "importOptimizerState"));
  exports.Set("train", t);
}

}  // namespace ad::addon
