// NativeModel / NativeKVCache / train.* on the CUDA plugin: argument marshalling and
// AsyncWorkers only; the work happens behind the plugin's C ABI (cuda/plugin_abi.h).
#include "addon/cuda_bindings.h"

#include <cmath>
#include <cstring>
#include <map>
#include <stdexcept>

#include "addon/cuda_plugin.h"
#include "addon/marshal.h"

namespace ad::addon {

CudaModelRef::~CudaModelRef() {
  if (api && m) api->model_destroy(m);
}

void CudaModelRef::check(int rc, const char* what) const {
  if (rc != 0) throw std::runtime_error(std::string(what) + ": " + api->last_error());
}

CudaCacheRef::~CudaCacheRef() {
  if (owner && c) owner->api->cache_destroy(c);
}

const ad_cuda_api* require_cuda(Napi::Env env) {
  const CudaStatus st = cuda_status();
  if (!st.plugin || !st.available)
    throw Napi::Error::New(env, "CUDA_UNAVAILABLE(" + st.kind + "): " + st.reason);
  return cuda_plugin().api;
}

namespace {

ad_cuda_config to_abi(const model::Config& c, int device) {
  ad_cuda_config a{};
  a.vocab = c.vocab;
  a.hidden = c.hidden;
  a.intermediate = c.intermediate;
  a.layers = c.layers;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.rms_eps = c.rms_eps;
  a.rope_theta = c.rope_theta;
  a.rope_scaling = c.rope_scaling.enabled ? 1 : 0;
  a.rope_factor = c.rope_scaling.factor;
  a.rope_low_freq_factor = c.rope_scaling.low_freq_factor;
  a.rope_high_freq_factor = c.rope_scaling.high_freq_factor;
  a.rope_original_max_position = c.rope_scaling.original_max_position;
  a.tie_embeddings = c.tie_embeddings;
  a.qkv_bias = c.qkv_bias;
  a.o_bias = c.o_bias;
  a.qk_norm = c.qk_norm;
  a.device = device;
  return a;
}

class CudaLoadWorker : public PromiseWorker {
 public:
  CudaLoadWorker(Napi::Env env, const ad_cuda_api* api, model::Config cfg, std::vector<model::TensorSource> sources, int device,
                 std::function<Napi::Value(Napi::Env, std::shared_ptr<CudaModelRef>)> wrap)
      : PromiseWorker(env), api_(api), cfg_(cfg), sources_(std::move(sources)), device_(device), wrap_(std::move(wrap)) {}

  void Execute() override {
    try {
      if (cfg_.score_labels > 0) throw std::runtime_error("sequence-classification (score head) models run on the CPU backend only in this version");
      auto ref = std::make_shared<CudaModelRef>();
      ref->api = api_;
      ref->cfg = cfg_;
      ref->device = device_;
      ad_cuda_config c = to_abi(cfg_, device_);
      ref->check(api_->model_create(&c, &ref->m), "creating the CUDA model");
      // One tensor at a time: f32 on the host only transiently.
      for (const auto& src : sources_) {
        model::Tensor t = model::read_tensor(src);
        ref->check(api_->model_set_tensor(ref->m, src.name.c_str(), t.shape.data(), static_cast<int32_t>(t.shape.size()), t.buf.data),
                   ("uploading " + src.name).c_str());
      }
      ref->check(api_->model_finalize(ref->m), "finalizing the CUDA model");
      model_ = ref;
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  Napi::Value Result() override { return wrap_(Env(), model_); }

 private:
  const ad_cuda_api* api_;
  model::Config cfg_;
  std::vector<model::TensorSource> sources_;
  int device_;
  std::function<Napi::Value(Napi::Env, std::shared_ptr<CudaModelRef>)> wrap_;
  std::shared_ptr<CudaModelRef> model_;
};

class CudaStepWorker : public PromiseWorker {
 public:
  CudaStepWorker(Napi::Env env, CudaStepRequest req) : PromiseWorker(env), req_(std::move(req)) {}

  void Execute() override {
    try {
      const auto& e = req_.entries;
      for (const auto& en : e) rows_cap_ += en.out_mode == 2 ? std::max(0, en.count - en.out_from) : (en.out_mode == 1 ? 1 : 0);
      const int64_t R = rows_cap_, K = req_.topk, V = req_.model->cfg.vocab;
      tokens_.assign(R, -1);
      chosen_.assign(R, NAN);
      lse_.assign(R, NAN);
      entropy_.assign(R, NAN);
      max_logit_.assign(R, NAN);
      margin_.assign(R, NAN);
      topk_ids_.assign(R * K, -1);
      topk_logits_.assign(R * K, NAN);
      if (req_.ref_model) {
        k1_.assign(R, NAN);
        k2_.assign(R, NAN);
        k3_.assign(R, NAN);
        kl_.assign(R, NAN);
      }
      if (req_.return_logits) logits_.assign(R * V, NAN);
      ad_cuda_step s{};
      s.entries = e.data();
      s.n_entries = static_cast<int32_t>(e.size());
      s.tokens = req_.tokens.data();
      s.n_tokens = static_cast<int64_t>(req_.tokens.size());
      s.targets = req_.targets.empty() ? nullptr : req_.targets.data();
      s.sampling = req_.sampling.empty() ? nullptr : req_.sampling.data();
      s.topk = req_.topk;
      s.return_logits = req_.return_logits;
      s.ref_model = req_.ref_model ? req_.ref_model->m : nullptr;
      s.ref_cache = req_.ref_cache ? req_.ref_cache->c : nullptr;
      s.rows_capacity = R;
      s.out_tokens = tokens_.data();
      s.chosen_logprob = chosen_.data();
      s.logsumexp = lse_.data();
      s.entropy = entropy_.data();
      s.max_logit = max_logit_.data();
      s.margin = margin_.data();
      s.topk_ids = K ? topk_ids_.data() : nullptr;
      s.topk_logits = K ? topk_logits_.data() : nullptr;
      if (req_.ref_model) {
        s.k1 = k1_.data();
        s.k2 = k2_.data();
        s.k3 = k3_.data();
        s.kl_exact = kl_.data();
      }
      s.logits = req_.return_logits ? logits_.data() : nullptr;
      req_.model->check(req_.model->api->step(req_.model->m, req_.cache->c, &s), "CUDA step");
      rows_ = s.rows;
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }

  Napi::Value Result() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("rows", static_cast<double>(rows_));
    o.Set("tokens", typed_array(env, tokens_));
    o.Set("chosenLogprob", typed_array(env, chosen_));
    o.Set("logsumexp", typed_array(env, lse_));
    o.Set("entropy", typed_array(env, entropy_));
    o.Set("maxLogit", typed_array(env, max_logit_));
    o.Set("margin", typed_array(env, margin_));
    o.Set("topK", req_.topk);
    o.Set("topkIds", typed_array(env, topk_ids_));
    o.Set("topkLogits", typed_array(env, topk_logits_));
    if (req_.ref_model) {
      o.Set("k1", typed_array(env, k1_));
      o.Set("k2", typed_array(env, k2_));
      o.Set("k3", typed_array(env, k3_));
      o.Set("klExact", typed_array(env, kl_));
    }
    if (req_.return_logits) o.Set("logits", typed_array(env, logits_));
    return o;
  }

 private:
  CudaStepRequest req_;
  int64_t rows_cap_ = 0, rows_ = 0;
  std::vector<int32_t> tokens_, topk_ids_;
  std::vector<float> chosen_, lse_, entropy_, max_logit_, margin_, topk_logits_, k1_, k2_, k3_, kl_, logits_;
};

class CudaTrainForwardWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<CudaModelRef> model, ref;
  std::vector<int32_t> tokens, lengths, prompt_lengths;
  bool checkpoint = false;
  std::vector<float> logp, entropy, ref_logp;

  void Execute() override {
    try {
      int64_t rows = 0;
      for (size_t i = 0; i < lengths.size(); ++i) rows += lengths[i] - prompt_lengths[i];
      logp.assign(rows, NAN);
      entropy.assign(rows, NAN);
      if (ref) ref_logp.assign(rows, NAN);
      ad_cuda_train_forward f{};
      f.tokens = tokens.data();
      f.lengths = lengths.data();
      f.prompt_lengths = prompt_lengths.data();
      f.n_sequences = static_cast<int32_t>(lengths.size());
      f.checkpoint = checkpoint;
      f.ref_model = ref ? ref->m : nullptr;
      f.rows_capacity = rows;
      f.logp = logp.data();
      f.entropy = entropy.data();
      f.ref_logp = ref ? ref_logp.data() : nullptr;
      model->check(model->api->train_forward(model->m, &f), "CUDA train forward");
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  Napi::Value Result() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("logp", typed_array(env, logp));
    o.Set("entropy", typed_array(env, entropy));
    if (ref) o.Set("refLogp", typed_array(env, ref_logp));
    return o;
  }
};

class CudaTrainBackwardWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<CudaModelRef> model;
  std::vector<float> a, b;
  void Execute() override {
    try {
      if (a.size() != b.size()) throw std::runtime_error("a and b must have the same length");
      model->check(model->api->train_backward(model->m, a.data(), b.data(), static_cast<int64_t>(a.size())), "CUDA train backward");
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
};

class CudaOptimizerWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;
  std::shared_ptr<CudaModelRef> model;
  ad_cuda_optimizer o{};
  void Execute() override {
    try {
      model->check(model->api->optimizer_step(model->m, &o), "CUDA optimizer step");
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  Napi::Value Result() override {
    Napi::Object r = Napi::Object::New(Env());
    r.Set("gradNorm", o.grad_norm);
    r.Set("skipped", o.skipped != 0);
    r.Set("parameters", static_cast<double>(o.parameters));
    return r;
  }
};

double num(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (!v.IsNumber()) throw Napi::TypeError::New(o.Env(), std::string("optimizer field '") + key + "' must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

}  // namespace

Napi::Promise cuda_load_model(Napi::Env env, const model::Config& cfg, std::vector<model::TensorSource> sources, int device,
                              std::function<Napi::Value(Napi::Env, std::shared_ptr<CudaModelRef>)> wrap) {
  const ad_cuda_api* api = require_cuda(env);
  return PromiseWorker::Start(std::make_unique<CudaLoadWorker>(env, api, cfg, std::move(sources), device, std::move(wrap)));
}

std::shared_ptr<CudaCacheRef> cuda_create_cache(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, int slots, int capacity) {
  auto c = std::make_shared<CudaCacheRef>();
  if (m->api->cache_create(m->m, slots, capacity, &c->c) != 0)
    throw Napi::RangeError::New(env, std::string("cannot create a CUDA KV cache of ") + std::to_string(slots) + " × " +
                                         std::to_string(capacity) + ": " + m->api->last_error());
  c->owner = m;
  c->slots = slots;
  c->capacity = capacity;
  return c;
}

Napi::Promise cuda_step(Napi::Env env, CudaStepRequest req) {
  return PromiseWorker::Start(std::make_unique<CudaStepWorker>(env, std::move(req)));
}

Napi::Value cuda_train_forward(const Napi::CallbackInfo& info, std::shared_ptr<CudaModelRef> m, std::shared_ptr<CudaModelRef> ref) {
  Napi::Env env = info.Env();
  Napi::Object req = info[1].As<Napi::Object>();
  auto w = std::make_unique<CudaTrainForwardWorker>(env);
  w->model = m;
  w->ref = ref;
  TrainSequences seqs = train_sequences(env, req);
  w->tokens = std::move(seqs.tokens);
  w->lengths = std::move(seqs.lengths);
  w->prompt_lengths = std::move(seqs.prompt_lengths);
  w->checkpoint = seqs.checkpoint;
  return PromiseWorker::Start(std::move(w));
}

Napi::Value cuda_train_backward(const Napi::CallbackInfo& info, std::shared_ptr<CudaModelRef> m) {
  Napi::Env env = info.Env();
  Napi::Object req = info[1].As<Napi::Object>();
  auto w = std::make_unique<CudaTrainBackwardWorker>(env);
  w->model = m;
  w->a = typed_vector<float, napi_float32_array>(env, req.Get("a"), "a");
  w->b = typed_vector<float, napi_float32_array>(env, req.Get("b"), "b");
  return PromiseWorker::Start(std::move(w));
}

Napi::Value cuda_optimizer_step(const Napi::CallbackInfo& info, std::shared_ptr<CudaModelRef> m) {
  Napi::Env env = info.Env();
  Napi::Object o = info[1].As<Napi::Object>();
  auto w = std::make_unique<CudaOptimizerWorker>(env);
  w->model = m;
  w->o.lr = static_cast<float>(num(o, "lr"));
  w->o.beta1 = static_cast<float>(num(o, "beta1"));
  w->o.beta2 = static_cast<float>(num(o, "beta2"));
  w->o.eps = static_cast<float>(num(o, "eps"));
  w->o.weight_decay = static_cast<float>(num(o, "weightDecay"));
  w->o.step = static_cast<int32_t>(num(o, "step"));
  w->o.clip_grad_norm = static_cast<float>(num(o, "clipGradNorm"));
  return PromiseWorker::Start(std::move(w));
}

void cuda_set_trainable(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, bool base, bool lora) {
  if (m->api->set_trainable(m->m, base, lora) != 0) throw Napi::TypeError::New(env, m->api->last_error());
}

void cuda_zero_grad(Napi::Env env, const std::shared_ptr<CudaModelRef>& m) {
  if (m->api->zero_grad(m->m) != 0) throw Napi::Error::New(env, m->api->last_error());
}

namespace {

struct CudaTensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 1;
};

// The model's parameters: names, shapes, element counts.
std::vector<CudaTensorInfo> cuda_tensor_list(Napi::Env env, const std::shared_ptr<CudaModelRef>& m) {
  const int32_t n = m->api->tensor_count(m->m);
  if (n < 0) throw Napi::Error::New(env, std::string("listing the CUDA model's tensors failed: ") + m->api->last_error());
  std::vector<CudaTensorInfo> out(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) {
    char name[512];
    int64_t shape[4];
    int32_t ndim = 0;
    if (m->api->tensor_info(m->m, i, name, sizeof(name), shape, &ndim) != 0) throw Napi::Error::New(env, m->api->last_error());
    out[i].name = name;
    out[i].shape.assign(shape, shape + ndim);
    for (int d = 0; d < ndim; ++d) out[i].numel *= shape[d];
  }
  return out;
}

std::map<std::string, int64_t> cuda_tensor_sizes(Napi::Env env, const std::shared_ptr<CudaModelRef>& m) {
  std::map<std::string, int64_t> sizes;
  for (const CudaTensorInfo& t : cuda_tensor_list(env, m)) sizes[t.name] = t.numel;
  return sizes;
}

}  // namespace

Napi::Value cuda_export_tensors(Napi::Env env, const std::shared_ptr<CudaModelRef>& m) {
  Napi::Array out = Napi::Array::New(env);
  uint32_t k = 0;
  for (const CudaTensorInfo& t : cuda_tensor_list(env, m)) {
    auto data = Napi::Float32Array::New(env, static_cast<size_t>(t.numel));
    if (m->api->tensor_read(m->m, t.name.c_str(), data.Data(), t.numel) != 0) throw Napi::Error::New(env, m->api->last_error());
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", t.name);
    Napi::Array s = Napi::Array::New(env);
    for (size_t d = 0; d < t.shape.size(); ++d) s.Set(static_cast<uint32_t>(d), static_cast<double>(t.shape[d]));
    o.Set("shape", s);
    o.Set("data", data);
    out.Set(k++, o);
  }
  return out;
}

void cuda_import_tensors(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, Napi::Array arr) {
  // All names and sizes first (nothing half-written), then the uploads.
  std::vector<std::pair<std::string, std::vector<float>>> plan;
  const std::map<std::string, int64_t> sizes = cuda_tensor_sizes(env, m);
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object o = arr.Get(i).As<Napi::Object>();
    std::string name = o.Get("name").As<Napi::String>().Utf8Value();
    auto data = typed_vector<float, napi_float32_array>(env, o.Get("data"), "data");
    auto it = sizes.find(name);
    if (it == sizes.end()) throw Napi::TypeError::New(env, "the model has no parameter named " + name);
    if (it->second != static_cast<int64_t>(data.size()))
      throw Napi::RangeError::New(env, "parameter " + name + " has " + std::to_string(it->second) + " elements, got " +
                                           std::to_string(data.size()));
    plan.emplace_back(name, std::move(data));
  }
  for (auto& [name, data] : plan)
    if (m->api->tensor_write(m->m, name.c_str(), data.data(), static_cast<int64_t>(data.size())) != 0)
      throw Napi::Error::New(env, m->api->last_error());
}

Napi::Value cuda_export_gradients(Napi::Env env, const std::shared_ptr<CudaModelRef>& m) {
  Napi::Array out = Napi::Array::New(env);
  const int32_t n = m->api->gradient_count(m->m);
  if (n < 0) throw Napi::Error::New(env, std::string("listing the CUDA model's gradients failed: ") + m->api->last_error());
  for (int32_t i = 0; i < n; ++i) {
    char name[512];
    int64_t numel = 0;
    if (m->api->gradient_read(m->m, i, name, sizeof(name), nullptr, 0, &numel) != 0) throw Napi::Error::New(env, m->api->last_error());
    auto data = Napi::Float32Array::New(env, static_cast<size_t>(numel));
    if (m->api->gradient_read(m->m, i, name, sizeof(name), data.Data(), numel, &numel) != 0)
      throw Napi::Error::New(env, m->api->last_error());
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", std::string(name));
    o.Set("data", data);
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

Napi::Value cuda_export_moments(Napi::Env env, const std::shared_ptr<CudaModelRef>& m) {
  Napi::Array out = Napi::Array::New(env);
  const int32_t n = m->api->moment_count(m->m);
  if (n < 0) throw Napi::Error::New(env, std::string("listing the CUDA model's optimizer state failed: ") + m->api->last_error());
  for (int32_t i = 0; i < n; ++i) {
    char name[512];
    int64_t numel = 0;
    if (m->api->moment_read(m->m, i, name, sizeof(name), nullptr, nullptr, 0, &numel) != 0)
      throw Napi::Error::New(env, m->api->last_error());
    auto mv = Napi::Float32Array::New(env, static_cast<size_t>(numel));
    auto vv = Napi::Float32Array::New(env, static_cast<size_t>(numel));
    if (m->api->moment_read(m->m, i, name, sizeof(name), mv.Data(), vv.Data(), numel, &numel) != 0)
      throw Napi::Error::New(env, m->api->last_error());
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", std::string(name));
    o.Set("m", mv);
    o.Set("v", vv);
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

void cuda_import_moments(Napi::Env env, const std::shared_ptr<CudaModelRef>& m, Napi::Array arr) {
  // Every name and size checked against the model first: a bad entry leaves the state untouched.
  const std::map<std::string, int64_t> sizes = cuda_tensor_sizes(env, m);
  struct Entry {
    std::string name;
    std::vector<float> m, v;
  };
  std::vector<Entry> plan;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object o = arr.Get(i).As<Napi::Object>();
    Entry e{o.Get("name").As<Napi::String>().Utf8Value(), typed_vector<float, napi_float32_array>(env, o.Get("m"), "m"),
            typed_vector<float, napi_float32_array>(env, o.Get("v"), "v")};
    auto it = sizes.find(e.name);
    if (it == sizes.end()) throw Napi::TypeError::New(env, "the model has no parameter named " + e.name);
    if (static_cast<int64_t>(e.m.size()) != it->second || static_cast<int64_t>(e.v.size()) != it->second)
      throw Napi::RangeError::New(env, "optimizer state of " + e.name + " must have " + std::to_string(it->second) + " elements");
    plan.push_back(std::move(e));
  }
  if (m->api->moments_clear(m->m) != 0) throw Napi::Error::New(env, m->api->last_error());
  for (const Entry& e : plan)
    if (m->api->moment_write(m->m, e.name.c_str(), e.m.data(), e.v.data(), static_cast<int64_t>(e.m.size())) != 0)
      throw Napi::Error::New(env, m->api->last_error());
}

}  // namespace ad::addon
