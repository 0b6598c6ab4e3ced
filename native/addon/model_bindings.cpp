// Model and KVCache handles. Only argument checks, marshalling and AsyncWorkers live here;
// the math is in native/model and native/kernels, the parallel structure in native/cpu.
#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "addon/cuda_bindings.h"
#include "addon/marshal.h"
#include "addon/model_handle.h"
#include "addon/registry.h"
#include "cpu/logit_stats_cpu.h"
#include "cpu/profiler.h"
#include "cpu/sampling_cpu.h"
#include "model/loader.h"
#include "model/transformer.h"

namespace ad::addon {
namespace {

using model::BatchEntry;
using model::KVCache;
using model::Transformer;

// ---------------------------------------------------------------- argument helpers

[[noreturn]] void throw_type(Napi::Env env, const std::string& msg) { throw Napi::TypeError::New(env, msg); }

Napi::Value required(const Napi::Object& o, const char* key) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) throw_type(o.Env(), std::string("missing required field '") + key + "'");
  return v;
}

double number_field(const Napi::Object& o, const char* key) {
  Napi::Value v = required(o, key);
  if (!v.IsNumber()) throw_type(o.Env(), std::string("field '") + key + "' must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

int int_field(const Napi::Object& o, const char* key) {
  double d = number_field(o, key);
  if (d != std::floor(d) || d < 0 || d > 2147483647.0) throw_type(o.Env(), std::string("field '") + key + "' must be a non-negative integer");
  return static_cast<int>(d);
}

bool bool_field(const Napi::Object& o, const char* key, bool fallback) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined() || v.IsNull()) return fallback;
  if (!v.IsBoolean()) throw_type(o.Env(), std::string("field '") + key + "' must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

template <typename T, napi_typedarray_type Kind>
std::vector<T> typed_field(const Napi::Object& o, const char* key, size_t expected, bool optional = false) {
  Napi::Value v = o.Get(key);
  if ((v.IsUndefined() || v.IsNull()) && optional) return {};
  auto out = typed_vector<T, Kind>(o.Env(), v, std::string("field '") + key + "'");
  if (expected != SIZE_MAX && out.size() != expected)
    throw_type(o.Env(), std::string("field '") + key + "' has " + std::to_string(out.size()) + " elements, expected " +
                            std::to_string(expected));
  return out;
}

// ---------------------------------------------------------------- handles

class CacheHandle;

class ModelHandle : public Napi::ObjectWrap<ModelHandle> {
 public:
  static Napi::FunctionReference constructor;
  static void Init(Napi::Env env, Napi::Object exports);
  explicit ModelHandle(const Napi::CallbackInfo& info);
  std::shared_ptr<Transformer> model;
  std::shared_ptr<CudaModelRef> cuda;  // set instead of `model` for a model on the CUDA plugin

 private:
  Napi::Value CreateCache(const Napi::CallbackInfo& info);
  Napi::Value Step(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info);
  Napi::Value Describe(const Napi::CallbackInfo& info);
  Napi::Value CudaStep(const Napi::CallbackInfo& info);
  Transformer& live(Napi::Env env) {
    if (!model) throw Napi::Error::New(env, "this model has been disposed");
    return *model;
  }
};
Napi::FunctionReference ModelHandle::constructor;

class CacheHandle : public Napi::ObjectWrap<CacheHandle> {
 public:
  static Napi::FunctionReference constructor;
  static void Init(Napi::Env env, Napi::Object exports);
  explicit CacheHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CacheHandle>(info) {}
  std::shared_ptr<KVCache> cache;
  std::shared_ptr<Transformer> owner;  // a cache belongs to the model that made it
  std::shared_ptr<CudaCacheRef> cuda;  // a cache on the CUDA plugin (owner is then null)

  KVCache& live(Napi::Env env) {
    if (!cache) throw Napi::Error::New(env, "this KV cache has been disposed");
    return *cache;
  }

 private:
  Napi::Value CopyPrefix(const Napi::CallbackInfo& info) {
    int src = info[0].As<Napi::Number>().Int32Value(), dst = info[1].As<Napi::Number>().Int32Value();
    int len = info[2].As<Napi::Number>().Int32Value();
    if (cuda) {
      if (cuda->owner->api->cache_copy_prefix(cuda->c, src, dst, len) != 0)
        throw Napi::RangeError::New(info.Env(), cuda->owner->api->last_error());
      return info.Env().Undefined();
    }
    KVCache& c = live(info.Env());
    try {
      c.copy_prefix(src, dst, len);
    } catch (const std::exception& e) {
      throw Napi::RangeError::New(info.Env(), e.what());
    }
    return info.Env().Undefined();
  }
  Napi::Value Length(const Napi::CallbackInfo& info) {
    int slot = info[0].As<Napi::Number>().Int32Value();
    if (cuda) {
      int32_t n = cuda->owner->api->cache_length(cuda->c, slot);
      if (n < 0) throw Napi::RangeError::New(info.Env(), "slot out of range");
      return Napi::Number::New(info.Env(), n);
    }
    KVCache& c = live(info.Env());
    if (slot < 0 || slot >= c.slots()) throw Napi::RangeError::New(info.Env(), "slot out of range");
    return Napi::Number::New(info.Env(), c.length(slot));
  }
  Napi::Value Truncate(const Napi::CallbackInfo& info) {
    int slot = info[0].As<Napi::Number>().Int32Value(), len = info[1].As<Napi::Number>().Int32Value();
    if (cuda) {
      if (cuda->owner->api->cache_truncate(cuda->c, slot, len) != 0) throw Napi::RangeError::New(info.Env(), "truncate out of range");
      return info.Env().Undefined();
    }
    KVCache& c = live(info.Env());
    if (slot < 0 || slot >= c.slots() || len < 0 || len > c.length(slot)) throw Napi::RangeError::New(info.Env(), "truncate out of range");
    c.truncate(slot, len);
    return info.Env().Undefined();
  }
  Napi::Value Describe(const Napi::CallbackInfo& info) {
    if (cuda) {
      Napi::Object o = Napi::Object::New(info.Env());
      o.Set("slots", cuda->slots);
      o.Set("capacity", cuda->capacity);
      o.Set("bytes", static_cast<double>(cuda->owner->api->cache_bytes(cuda->c)));
      return o;
    }
    KVCache& c = live(info.Env());
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("slots", c.slots());
    o.Set("capacity", c.capacity());
    o.Set("bytes", static_cast<double>(c.bytes()));
    return o;
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    cache.reset();
    owner.reset();
    cuda.reset();
    return info.Env().Undefined();
  }
};
Napi::FunctionReference CacheHandle::constructor;

// ---------------------------------------------------------------- loading

model::Config parse_config(const Napi::Object& o) {
  model::Config c;
  c.vocab = int_field(o, "vocabSize");
  c.hidden = int_field(o, "hiddenSize");
  c.intermediate = int_field(o, "intermediateSize");
  c.layers = int_field(o, "numLayers");
  c.heads = int_field(o, "numHeads");
  c.kv_heads = int_field(o, "numKvHeads");
  c.head_dim = int_field(o, "headDim");
  c.rms_eps = static_cast<float>(number_field(o, "rmsNormEps"));
  c.rope_theta = number_field(o, "ropeTheta");
  c.tie_embeddings = bool_field(o, "tieWordEmbeddings", false);
  c.qkv_bias = bool_field(o, "qkvBias", false);
  c.o_bias = bool_field(o, "oBias", false);
  c.qk_norm = bool_field(o, "qkNorm", false);
  Napi::Value labels = o.Get("scoreLabels");
  c.score_labels = labels.IsNumber() ? labels.As<Napi::Number>().Int32Value() : 0;
  Napi::Value rs = o.Get("ropeScaling");
  if (rs.IsObject()) {
    Napi::Object s = rs.As<Napi::Object>();
    c.rope_scaling = {true, static_cast<float>(number_field(s, "factor")), static_cast<float>(number_field(s, "lowFreqFactor")),
                      static_cast<float>(number_field(s, "highFreqFactor")),
                      static_cast<float>(number_field(s, "originalMaxPositionEmbeddings"))};
  }
  if (c.vocab <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.head_dim <= 0 || c.intermediate <= 0)
    throw Napi::RangeError::New(o.Env(), "model config sizes must be positive");
  return c;
}

std::vector<model::TensorSource> parse_sources(const Napi::Array& arr) {
  std::vector<model::TensorSource> out;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object t = arr.Get(i).As<Napi::Object>();
    model::TensorSource s;
    s.name = required(t, "name").As<Napi::String>().Utf8Value();
    std::string dt = required(t, "dtype").As<Napi::String>().Utf8Value();
    if (dt == "F32") s.dtype = model::DType::F32;
    else if (dt == "BF16") s.dtype = model::DType::BF16;
    else if (dt == "F16") s.dtype = model::DType::F16;
    else throw_type(arr.Env(), "tensor " + s.name + " has unsupported dtype " + dt);
    Napi::Array shape = required(t, "shape").As<Napi::Array>();
    for (uint32_t j = 0; j < shape.Length(); ++j) s.shape.push_back(shape.Get(j).As<Napi::Number>().Int64Value());
    s.file = required(t, "file").As<Napi::String>().Utf8Value();
    s.offset = static_cast<int64_t>(number_field(t, "offset"));
    s.nbytes = static_cast<int64_t>(number_field(t, "nbytes"));
    out.push_back(std::move(s));
  }
  return out;
}

class LoadWorker : public PromiseWorker {
 public:
  LoadWorker(Napi::Env env, model::Config cfg, std::vector<model::TensorSource> sources, int threads)
      : PromiseWorker(env), cfg_(cfg), sources_(std::move(sources)), threads_(threads) {}

  void Execute() override {
    try {
      auto m = std::make_shared<Transformer>(cfg_, threads_);
      std::vector<model::Tensor> tensors(sources_.size());
      std::vector<std::string> errors(sources_.size());
      m->pool().parallel_for(static_cast<int64_t>(sources_.size()), 1, [&](int64_t a, int64_t b, int) {
        for (int64_t i = a; i < b; ++i) {
          try {
            tensors[i] = model::read_tensor(sources_[i]);
          } catch (const std::exception& e) {
            errors[i] = e.what();
          }
        }
      });
      for (const auto& e : errors)
        if (!e.empty()) throw std::runtime_error(e);
      for (size_t i = 0; i < sources_.size(); ++i) m->set_tensor(sources_[i].name, std::move(tensors[i]));
      m->finalize();
      model_ = m;
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }
  Napi::Value Result() override {
    Napi::Object handle = ModelHandle::constructor.New({});
    ModelHandle::Unwrap(handle)->model = model_;
    return handle;
  }

 private:
  model::Config cfg_;
  std::vector<model::TensorSource> sources_;
  int threads_;
  std::shared_ptr<Transformer> model_;
};

Napi::Value LoadModel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 3 || !info[0].IsObject() || !info[1].IsArray() || !info[2].IsNumber())
    throw_type(env, "loadModel(config, tensors, threads, options?)");
  model::Config cfg = parse_config(info[0].As<Napi::Object>());
  auto sources = parse_sources(info[1].As<Napi::Array>());
  int threads = std::max(1, info[2].As<Napi::Number>().Int32Value());
  // options.device === 'cuda': the model lives on the CUDA plugin (options.deviceIndex, default 0).
  if (info.Length() >= 4 && info[3].IsObject()) {
    Napi::Object opts = info[3].As<Napi::Object>();
    Napi::Value dev = opts.Get("device");
    if (dev.IsString() && dev.As<Napi::String>().Utf8Value() == "cuda") {
      Napi::Value idx = opts.Get("deviceIndex");
      const int index = idx.IsNumber() ? idx.As<Napi::Number>().Int32Value() : 0;
      return cuda_load_model(env, cfg, std::move(sources), index, [](Napi::Env e, std::shared_ptr<CudaModelRef> m) -> Napi::Value {
        Napi::Object handle = ModelHandle::constructor.New({});
        ModelHandle::Unwrap(handle)->cuda = std::move(m);
        return handle;
      });
    }
  }
  return PromiseWorker::Start(std::make_unique<LoadWorker>(env, cfg, std::move(sources), threads));
}

// ---------------------------------------------------------------- step

struct SamplingColumns {
  std::vector<float> temperature, top_p, min_p, repetition, presence, frequency;
  std::vector<int32_t> top_k, prompt_length;
  std::vector<double> seed, stream;
};

struct StepResult {
  int64_t rows = 0;
  int topk = 0;
  bool with_ref = false, with_logits = false, sampled = false;
  std::vector<int32_t> tokens, topk_ids;
  std::vector<float> chosen, lse, entropy, max_logit, margin, topk_logits, k1, k2, k3, kl, logits;
};

class StepWorker : public PromiseWorker {
 public:
  using PromiseWorker::PromiseWorker;

  std::shared_ptr<Transformer> model, ref_model;
  std::shared_ptr<KVCache> cache, ref_cache;
  std::vector<BatchEntry> batch;
  std::vector<int32_t> tokens, targets;
  bool sampling = false;
  SamplingColumns sp;
  int topk = 0;
  bool return_logits = false;

  void Execute() override {
    try {
      run();
    } catch (const std::exception& e) {
      SetError(e.what());
    }
  }

  void run() {
    std::unique_lock<std::mutex> lock_a(model->mutex(), std::defer_lock);
    std::unique_lock<std::mutex> lock_b;
    if (ref_model && ref_model != model) {
      lock_b = std::unique_lock<std::mutex>(ref_model->mutex(), std::defer_lock);
      std::lock(lock_a, lock_b);
    } else {
      lock_a.lock();
    }
    const int64_t V = model->config().vocab, H = model->config().hidden;
    const int64_t R = model->forward(*cache, batch, tokens.data());
    std::vector<float> hidden(model->hidden_out(), model->hidden_out() + R * H);
    std::vector<float> ref_hidden;
    if (ref_model) {
      int64_t rr = ref_model->forward(*ref_cache, batch, tokens.data());
      if (rr != R) throw std::runtime_error("reference model produced a different number of rows");
      ref_hidden.assign(ref_model->hidden_out(), ref_model->hidden_out() + R * ref_model->config().hidden);
    }
    // Row r → batch entry, for sampling.
    std::vector<int> row_entry;
    for (size_t e = 0; e < batch.size(); ++e) {
      int n = batch[e].out_mode == 2 ? batch[e].count : (batch[e].out_mode == 1 ? 1 : 0);
      for (int i = 0; i < n; ++i) row_entry.push_back(static_cast<int>(e));
    }
    res_.rows = R;
    res_.topk = topk;
    res_.with_ref = static_cast<bool>(ref_model);
    res_.with_logits = return_logits;
    res_.sampled = sampling;
    res_.tokens.assign(R, -1);
    res_.chosen.assign(R, NAN);
    res_.lse.assign(R, NAN);
    res_.entropy.assign(R, NAN);
    res_.max_logit.assign(R, NAN);
    res_.margin.assign(R, NAN);
    res_.topk_ids.assign(R * topk, -1);
    res_.topk_logits.assign(R * topk, NAN);
    if (ref_model) {
      res_.k1.assign(R, NAN);
      res_.k2.assign(R, NAN);
      res_.k3.assign(R, NAN);
      res_.kl.assign(R, NAN);
    }
    if (return_logits) res_.logits.assign(R * V, NAN);

    // Vocabulary-wide work in row chunks: at most ~64 MB of logits alive at once.
    const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(R, (16ll << 20) / std::max<int64_t>(V, 1)));
    std::vector<float> logits(chunk * V), ref_logits(ref_model ? chunk * V : 0);
    const int workers = model->pool().size();
    std::vector<std::vector<char>> scratch(sampling ? workers : 0);
    for (auto& s : scratch) s.resize(cpu::sampling_scratch_bytes(V));
    std::vector<int32_t> row_targets(chunk);

    for (int64_t r0 = 0; r0 < R; r0 += chunk) {
      const int64_t n = std::min(chunk, R - r0);
      model->lm_head(hidden.data() + r0 * H, n, logits.data());
      if (ref_model) ref_model->lm_head(ref_hidden.data() + r0 * ref_model->config().hidden, n, ref_logits.data());
      for (int64_t i = 0; i < n; ++i) row_targets[i] = targets.empty() ? -1 : targets[r0 + i];
      if (sampling) {
        AD_PROFILE("sampling", 4.0 * n * V, 4.0 * n * V);
        model->pool().parallel_for(n, 1, [&](int64_t a, int64_t b, int worker) {
          for (int64_t i = a; i < b; ++i) {
            const int e = row_entry[r0 + i];
            if (batch[e].out_mode != 1) continue;
            const int slot = batch[e].slot;
            const auto& hist = cache->tokens(slot);
            const int64_t plen = std::min<int64_t>(sp.prompt_length[e], static_cast<int64_t>(hist.size()));
            cpu::SamplingParams p;
            p.temperature = sp.temperature[e];
            p.top_k = sp.top_k[e];
            p.top_p = sp.top_p[e];
            p.min_p = sp.min_p[e];
            p.repetition_penalty = sp.repetition[e];
            p.presence_penalty = sp.presence[e];
            p.frequency_penalty = sp.frequency[e];
            p.seed = static_cast<uint64_t>(sp.seed[e]);
            p.stream = static_cast<uint64_t>(sp.stream[e]);
            row_targets[i] = cpu::sample_token(logits.data() + i * V, V, p, static_cast<uint64_t>(hist.size()), hist.data(),
                                               static_cast<int64_t>(hist.size()), hist.data() + plen,
                                               static_cast<int64_t>(hist.size()) - plen, scratch[worker].data());
          }
        });
      }
      cpu::LogitStatsOut out{res_.max_logit.data() + r0, res_.lse.data() + r0, res_.entropy.data() + r0,
                             res_.margin.data() + r0, res_.chosen.data() + r0,
                             topk ? res_.topk_ids.data() + r0 * topk : nullptr,
                             topk ? res_.topk_logits.data() + r0 * topk : nullptr,
                             ref_model ? res_.k1.data() + r0 : nullptr, ref_model ? res_.k2.data() + r0 : nullptr,
                             ref_model ? res_.k3.data() + r0 : nullptr, ref_model ? res_.kl.data() + r0 : nullptr};
      cpu::logit_stats(model->pool(), logits.data(), n, V, V, row_targets.data(), topk,
                       ref_model ? ref_logits.data() : nullptr, out);
      for (int64_t i = 0; i < n; ++i) res_.tokens[r0 + i] = row_targets[i];
      if (return_logits) std::copy(logits.begin(), logits.begin() + n * V, res_.logits.begin() + r0 * V);
    }
  }

  Napi::Value Result() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("rows", static_cast<double>(res_.rows));
    o.Set("tokens", typed_array(env, res_.tokens));
    o.Set("chosenLogprob", typed_array(env, res_.chosen));
    o.Set("logsumexp", typed_array(env, res_.lse));
    o.Set("entropy", typed_array(env, res_.entropy));
    o.Set("maxLogit", typed_array(env, res_.max_logit));
    o.Set("margin", typed_array(env, res_.margin));
    o.Set("topK", res_.topk);
    o.Set("topkIds", typed_array(env, res_.topk_ids));
    o.Set("topkLogits", typed_array(env, res_.topk_logits));
    if (res_.with_ref) {
      o.Set("k1", typed_array(env, res_.k1));
      o.Set("k2", typed_array(env, res_.k2));
      o.Set("k3", typed_array(env, res_.k3));
      o.Set("klExact", typed_array(env, res_.kl));
    }
    if (res_.with_logits) o.Set("logits", typed_array(env, res_.logits));
    return o;
  }

 private:
  StepResult res_;
};

CacheHandle* unwrap_cache(Napi::Env env, Napi::Value v) {
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(CacheHandle::constructor.Value()))
    throw_type(env, "expected a KV cache created by this model");
  return CacheHandle::Unwrap(v.As<Napi::Object>());
}

// ---------------------------------------------------------------- ModelHandle methods

void ModelHandle::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeModel",
                                 {InstanceMethod("createCache", &ModelHandle::CreateCache), InstanceMethod("step", &ModelHandle::Step),
                                  InstanceMethod("dispose", &ModelHandle::Dispose), InstanceMethod("describe", &ModelHandle::Describe)});
  constructor = Napi::Persistent(f);
  constructor.SuppressDestruct();
  exports.Set("NativeModel", f);
}

ModelHandle::ModelHandle(const Napi::CallbackInfo& info) : Napi::ObjectWrap<ModelHandle>(info) {}

Napi::Value ModelHandle::CreateCache(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsNumber() || !info[1].IsNumber()) throw_type(env, "createCache(slots, capacity)");
  int slots = info[0].As<Napi::Number>().Int32Value(), capacity = info[1].As<Napi::Number>().Int32Value();
  if (slots <= 0 || capacity <= 0) throw Napi::RangeError::New(env, "createCache needs slots ≥ 1 and capacity ≥ 1");
  Napi::Object handle = CacheHandle::constructor.New({});
  CacheHandle* c = CacheHandle::Unwrap(handle);
  if (cuda) {
    c->cuda = cuda_create_cache(env, cuda, slots, capacity);
    return handle;
  }
  Transformer& m = live(env);
  try {
    c->cache = std::make_shared<KVCache>(m.config(), slots, capacity);
  } catch (const std::bad_alloc&) {
    throw Napi::RangeError::New(env, "not enough memory for a KV cache of " + std::to_string(slots) + " × " + std::to_string(capacity));
  }
  c->owner = model;
  return handle;
}

Napi::Value ModelHandle::Step(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (cuda) return CudaStep(info);
  live(env);
  if (info.Length() < 2 || !info[1].IsObject()) throw_type(env, "step(cache, request)");
  CacheHandle* ch = unwrap_cache(env, info[0]);
  if (ch->cuda || ch->owner != model) throw_type(env, "this KV cache belongs to another model");
  Napi::Object req = info[1].As<Napi::Object>();
  auto w = std::make_unique<StepWorker>(env);
  w->model = model;
  w->cache = ch->cache;
  if (!w->cache) throw Napi::Error::New(env, "this KV cache has been disposed");
  auto slots = typed_field<int32_t, napi_int32_array>(req, "slots", SIZE_MAX);
  const size_t B = slots.size();
  auto counts = typed_field<int32_t, napi_int32_array>(req, "counts", B);
  auto modes = typed_field<uint8_t, napi_uint8_array>(req, "outModes", B);
  w->tokens = typed_field<int32_t, napi_int32_array>(req, "tokens", SIZE_MAX);
  int64_t total = 0, rows = 0;
  for (size_t e = 0; e < B; ++e) {
    if (modes[e] > 2) throw_type(env, "outModes entries must be 0, 1 or 2");
    w->batch.push_back({slots[e], counts[e], modes[e]});
    total += counts[e];
    rows += modes[e] == 2 ? counts[e] : modes[e];
  }
  if (total != static_cast<int64_t>(w->tokens.size())) throw_type(env, "tokens.length must equal the sum of counts");
  w->targets = typed_field<int32_t, napi_int32_array>(req, "targets", static_cast<size_t>(rows), true);
  Napi::Value s = req.Get("sampling");
  if (s.IsObject()) {
    Napi::Object so = s.As<Napi::Object>();
    w->sampling = true;
    w->sp.temperature = typed_field<float, napi_float32_array>(so, "temperature", B);
    w->sp.top_k = typed_field<int32_t, napi_int32_array>(so, "topK", B);
    w->sp.top_p = typed_field<float, napi_float32_array>(so, "topP", B);
    w->sp.min_p = typed_field<float, napi_float32_array>(so, "minP", B);
    w->sp.repetition = typed_field<float, napi_float32_array>(so, "repetitionPenalty", B);
    w->sp.presence = typed_field<float, napi_float32_array>(so, "presencePenalty", B);
    w->sp.frequency = typed_field<float, napi_float32_array>(so, "frequencyPenalty", B);
    w->sp.seed = typed_field<double, napi_float64_array>(so, "seed", B);
    w->sp.stream = typed_field<double, napi_float64_array>(so, "stream", B);
    w->sp.prompt_length = typed_field<int32_t, napi_int32_array>(so, "promptLength", B);
  }
  Napi::Value k = req.Get("topK");
  w->topk = k.IsNumber() ? k.As<Napi::Number>().Int32Value() : 0;
  if (w->topk < 0 || w->topk > 64) throw Napi::RangeError::New(env, "topK statistics must be between 0 and 64");
  w->return_logits = bool_field(req, "returnLogits", false);
  Napi::Value ref = req.Get("reference");
  if (ref.IsObject()) {
    Napi::Object ro = ref.As<Napi::Object>();
    Napi::Value rm = ro.Get("model");
    if (!rm.IsObject() || !rm.As<Napi::Object>().InstanceOf(constructor.Value())) throw_type(env, "reference.model must be a NativeModel");
    ModelHandle* mh = ModelHandle::Unwrap(rm.As<Napi::Object>());
    CacheHandle* rc = unwrap_cache(env, ro.Get("cache"));
    if (mh->cuda) throw_type(env, "a CUDA reference model needs a CUDA policy model");
    if (!mh->model || !rc->cache) throw Napi::Error::New(env, "the reference model or its cache has been disposed");
    if (rc->owner != mh->model) throw_type(env, "reference.cache belongs to another model");
    if (mh->model->config().vocab != model->config().vocab) throw_type(env, "the reference model has another vocabulary size");
    if (rc->cache == w->cache) throw_type(env, "the reference needs its own KV cache");
    w->ref_model = mh->model;
    w->ref_cache = rc->cache;
  }
  return PromiseWorker::Start(std::move(w));
}

// The same request as Step, for a model on the CUDA plugin.
Napi::Value ModelHandle::CudaStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[1].IsObject()) throw_type(env, "step(cache, request)");
  CacheHandle* ch = unwrap_cache(env, info[0]);
  if (!ch->cuda) throw_type(env, ch->cache ? "this KV cache belongs to another model" : "this KV cache has been disposed");
  if (ch->cuda->owner != cuda) throw_type(env, "this KV cache belongs to another model");
  Napi::Object req = info[1].As<Napi::Object>();
  CudaStepRequest r;
  r.model = cuda;
  r.cache = ch->cuda;
  auto slots = typed_field<int32_t, napi_int32_array>(req, "slots", SIZE_MAX);
  const size_t B = slots.size();
  auto counts = typed_field<int32_t, napi_int32_array>(req, "counts", B);
  auto modes = typed_field<uint8_t, napi_uint8_array>(req, "outModes", B);
  r.tokens = typed_field<int32_t, napi_int32_array>(req, "tokens", SIZE_MAX);
  int64_t total = 0, rows = 0;
  for (size_t e = 0; e < B; ++e) {
    if (modes[e] > 2) throw_type(env, "outModes entries must be 0, 1 or 2");
    r.entries.push_back({slots[e], counts[e], modes[e], 0});
    total += counts[e];
    rows += modes[e] == 2 ? counts[e] : modes[e];
  }
  if (total != static_cast<int64_t>(r.tokens.size())) throw_type(env, "tokens.length must equal the sum of counts");
  r.targets = typed_field<int32_t, napi_int32_array>(req, "targets", static_cast<size_t>(rows), true);
  Napi::Value s = req.Get("sampling");
  if (s.IsObject()) {
    Napi::Object so = s.As<Napi::Object>();
    auto temperature = typed_field<float, napi_float32_array>(so, "temperature", B);
    auto top_k = typed_field<int32_t, napi_int32_array>(so, "topK", B);
    auto top_p = typed_field<float, napi_float32_array>(so, "topP", B);
    auto min_p = typed_field<float, napi_float32_array>(so, "minP", B);
    auto rep = typed_field<float, napi_float32_array>(so, "repetitionPenalty", B);
    auto pres = typed_field<float, napi_float32_array>(so, "presencePenalty", B);
    auto freq = typed_field<float, napi_float32_array>(so, "frequencyPenalty", B);
    auto seed = typed_field<double, napi_float64_array>(so, "seed", B);
    auto stream = typed_field<double, napi_float64_array>(so, "stream", B);
    auto plen = typed_field<int32_t, napi_int32_array>(so, "promptLength", B);
    for (size_t e = 0; e < B; ++e)
      r.sampling.push_back({temperature[e], top_p[e], min_p[e], rep[e], pres[e], freq[e], top_k[e], plen[e],
                            static_cast<uint64_t>(seed[e]), static_cast<uint64_t>(stream[e])});
  }
  Napi::Value k = req.Get("topK");
  r.topk = k.IsNumber() ? k.As<Napi::Number>().Int32Value() : 0;
  if (r.topk < 0 || r.topk > 64) throw Napi::RangeError::New(env, "topK statistics must be between 0 and 64");
  r.return_logits = bool_field(req, "returnLogits", false);
  Napi::Value ref = req.Get("reference");
  if (ref.IsObject()) {
    Napi::Object ro = ref.As<Napi::Object>();
    Napi::Value rm = ro.Get("model");
    if (!rm.IsObject() || !rm.As<Napi::Object>().InstanceOf(constructor.Value())) throw_type(env, "reference.model must be a NativeModel");
    ModelHandle* mh = ModelHandle::Unwrap(rm.As<Napi::Object>());
    CacheHandle* rc = unwrap_cache(env, ro.Get("cache"));
    if (!mh->cuda || !rc->cuda) throw_type(env, "the reference of a CUDA model must be a CUDA model with its own CUDA cache");
    if (rc->cuda->owner != mh->cuda) throw_type(env, "reference.cache belongs to another model");
    if (rc->cuda == ch->cuda) throw_type(env, "the reference needs its own KV cache");
    if (mh->cuda->cfg.vocab != cuda->cfg.vocab) throw_type(env, "the reference model has another vocabulary size");
    r.ref_model = mh->cuda;
    r.ref_cache = rc->cuda;
  }
  return cuda_step(env, std::move(r));
}

Napi::Value ModelHandle::Dispose(const Napi::CallbackInfo& info) {
  model.reset();  // in-flight work holds its own reference and finishes first
  cuda.reset();
  return info.Env().Undefined();
}

Napi::Value ModelHandle::Describe(const Napi::CallbackInfo& info) {
  if (cuda) {
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("parameterBytes", static_cast<double>(cuda->api->model_parameter_bytes(cuda->m)));
    o.Set("threads", 0);
    o.Set("backend", "cuda");
    o.Set("deviceIndex", cuda->device);
    return o;
  }
  Transformer& m = live(info.Env());
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("parameterBytes", static_cast<double>(m.parameter_bytes()));
  o.Set("threads", m.pool().size());
  o.Set("backend", "cpu");
  return o;
}

void CacheHandle::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeKVCache",
                                 {InstanceMethod("copyPrefix", &CacheHandle::CopyPrefix), InstanceMethod("length", &CacheHandle::Length),
                                  InstanceMethod("truncate", &CacheHandle::Truncate), InstanceMethod("describe", &CacheHandle::Describe),
                                  InstanceMethod("dispose", &CacheHandle::Dispose)});
  constructor = Napi::Persistent(f);
  constructor.SuppressDestruct();
  exports.Set("NativeKVCache", f);
}

}  // namespace

std::shared_ptr<model::Transformer> model_of(Napi::Env env, Napi::Value v) {
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(ModelHandle::constructor.Value()))
    throw Napi::TypeError::New(env, "expected a NativeModel");
  if (ModelHandle::Unwrap(v.As<Napi::Object>())->cuda)
    throw Napi::TypeError::New(env, "this operation is not supported for models on the CUDA backend in this version (load with device 'cpu')");
  auto m = ModelHandle::Unwrap(v.As<Napi::Object>())->model;
  if (!m) throw Napi::Error::New(env, "this model has been disposed");
  return m;
}

std::shared_ptr<CudaModelRef> cuda_model_of(Napi::Env env, Napi::Value v) {
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(ModelHandle::constructor.Value()))
    throw Napi::TypeError::New(env, "expected a NativeModel");
  ModelHandle* h = ModelHandle::Unwrap(v.As<Napi::Object>());
  return h->cuda;
}

void RegisterModelBindings(Napi::Env env, Napi::Object exports) {
  ModelHandle::Init(env, exports);
  CacheHandle::Init(env, exports);
  exports.Set("loadModel", Napi::Function::New(env, LoadModel, "loadModel"));
}

}  // namespace ad::addon
