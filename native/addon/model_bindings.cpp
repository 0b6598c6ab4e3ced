// NativeModel and NativeKVCache handles over model::Engine / model::Cache, and loadModel. Only
// argument marshalling, the engine's own checks (answered on the JS thread) and PromiseWorkers
// live here: the math is behind the Engine interface, on whichever backend loaded the model.
#include <memory>
#include <string>
#include <vector>

#include "addon/backends.h"
#include "addon/guard.h"
#include "addon/marshal.h"
#include "addon/model_handle.h"
#include "addon/registry.h"
#include "cpu/threadpool.h"
#include "kernels/logit_stats.h"

namespace ad::addon {
namespace {

using model::Engine;

class ModelHandle : public GuardedWrap<ModelHandle> {
 public:
  static Napi::FunctionReference constructor;
  static void Init(Napi::Env env, Napi::Object exports);
  explicit ModelHandle(const Napi::CallbackInfo& info) : GuardedWrap<ModelHandle>(info) {}
  std::shared_ptr<Engine> engine;

  Engine& live(Napi::Env env) {
    if (!engine) throw Napi::Error::New(env, "this model has been disposed");
    return *engine;
  }

 private:
  Napi::Value CreateCache(const Napi::CallbackInfo& info);
  Napi::Value Step(const Napi::CallbackInfo& info);
  Napi::Value Describe(const Napi::CallbackInfo& info);
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    engine.reset();  // in-flight work and caches hold their own references and finish first
    return info.Env().Undefined();
  }
};
Napi::FunctionReference ModelHandle::constructor;

class CacheHandle : public GuardedWrap<CacheHandle> {
 public:
  static Napi::FunctionReference constructor;
  static void Init(Napi::Env env, Napi::Object exports);
  explicit CacheHandle(const Napi::CallbackInfo& info) : GuardedWrap<CacheHandle>(info) {}
  std::shared_ptr<model::Cache> cache;

  model::Cache& live(Napi::Env env) {
    if (!cache) throw Napi::Error::New(env, "this KV cache has been disposed");
    return *cache;
  }

 private:
  Napi::Value CopyPrefix(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    live(env).copy_prefix(static_cast<int>(integer_arg(env, info[0], "src", 0, INT32_MAX)),
                          static_cast<int>(integer_arg(env, info[1], "dst", 0, INT32_MAX)),
                          static_cast<int>(integer_arg(env, info[2], "length", 0, INT32_MAX)));
    return env.Undefined();
  }
  Napi::Value Length(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    return Napi::Number::New(env, live(env).length(static_cast<int>(integer_arg(env, info[0], "slot", INT32_MIN, INT32_MAX))));
  }
  Napi::Value Truncate(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    live(env).truncate(static_cast<int>(integer_arg(env, info[0], "slot", INT32_MIN, INT32_MAX)),
                       static_cast<int>(integer_arg(env, info[1], "length", INT32_MIN, INT32_MAX)));
    return env.Undefined();
  }
  Napi::Value Describe(const Napi::CallbackInfo& info) {
    model::Cache& c = live(info.Env());
    Napi::Object o = Napi::Object::New(info.Env());
    o.Set("slots", c.slots());
    o.Set("capacity", c.capacity());
    o.Set("bytes", static_cast<double>(c.bytes()));
    const model::CacheCounters k = c.counters();
    o.Set("pageSize", k.page_size);
    o.Set("pages", static_cast<double>(k.pages));
    o.Set("freePages", static_cast<double>(k.free_pages));
    o.Set("pageBytes", static_cast<double>(k.page_bytes));
    o.Set("sharedBytes", static_cast<double>(k.shared_bytes));
    o.Set("sharedBytesTotal", static_cast<double>(k.shared_bytes_total));
    return o;
  }
  Napi::Value Dispose(const Napi::CallbackInfo& info) {
    cache.reset();
    return info.Env().Undefined();
  }
};
Napi::FunctionReference CacheHandle::constructor;

CacheHandle* cache_handle(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(CacheHandle::constructor.Value()))
    type_error(env, std::string(what) + " must be a KV cache created by a model");
  return CacheHandle::Unwrap(v.As<Napi::Object>());
}

// ---------------------------------------------------------------- loading

model::Config parse_config(const Napi::Object& o) {
  model::Config c;
  c.vocab = static_cast<int>(int_field(o, "vocabSize", 1, INT32_MAX));
  c.hidden = static_cast<int>(int_field(o, "hiddenSize", 1, INT32_MAX));
  c.intermediate = static_cast<int>(int_field(o, "intermediateSize", 1, INT32_MAX));
  c.layers = static_cast<int>(int_field(o, "numLayers", 1, INT32_MAX));
  c.heads = static_cast<int>(int_field(o, "numHeads", 1, INT32_MAX));
  c.kv_heads = static_cast<int>(int_field(o, "numKvHeads", 1, INT32_MAX));
  c.head_dim = static_cast<int>(int_field(o, "headDim", 1, INT32_MAX));
  c.rms_eps = static_cast<float>(number_field(o, "rmsNormEps"));
  c.rope_theta = number_field(o, "ropeTheta");
  c.tie_embeddings = bool_field(o, "tieWordEmbeddings", false);
  c.qkv_bias = bool_field(o, "qkvBias", false);
  c.o_bias = bool_field(o, "oBias", false);
  c.qk_norm = bool_field(o, "qkNorm", false);
  c.score_labels = absent(field(o, "scoreLabels")) ? 0 : static_cast<int>(int_field(o, "scoreLabels", 0, model::kMaxScoreLabels));
  Napi::Value rs = field(o, "ropeScaling");
  if (rs.IsObject()) {
    Napi::Object s = rs.As<Napi::Object>();
    c.rope_scaling = {true, static_cast<float>(number_field(s, "factor")), static_cast<float>(number_field(s, "lowFreqFactor")),
                      static_cast<float>(number_field(s, "highFreqFactor")),
                      static_cast<float>(number_field(s, "originalMaxPositionEmbeddings"))};
  }
  return c;
}

model::DType parse_dtype(Napi::Env env, const std::string& name, const std::string& dt) {
  if (dt == "F32") return model::DType::F32;
  if (dt == "BF16") return model::DType::BF16;
  if (dt == "F16") return model::DType::F16;
  type_error(env, "tensor " + name + " has unsupported dtype " + dt);
}

std::vector<model::TensorSource> parse_sources(Napi::Env env, const Napi::Array& arr) {
  constexpr int64_t kMaxSafe = (int64_t(1) << 53) - 1;
  std::vector<model::TensorSource> out;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object t = object_arg(env, arr.Get(i), "tensors[" + std::to_string(i) + "]");
    model::TensorSource s;
    s.name = string_field(t, "name");
    s.dtype = parse_dtype(env, s.name, string_field(t, "dtype"));
    Napi::Array shape = array_arg(env, required(t, "shape"), "the shape of " + s.name);
    for (uint32_t j = 0; j < shape.Length(); ++j) s.shape.push_back(integer_arg(env, shape.Get(j), "the shape of " + s.name, 0, kMaxSafe));
    s.file = string_field(t, "file");
    s.offset = int_field(t, "offset", 0, kMaxSafe);
    s.nbytes = int_field(t, "nbytes", 0, kMaxSafe);
    out.push_back(std::move(s));
  }
  return out;
}

class LoadWorker : public PromiseWorker {
 public:
  LoadWorker(Napi::Env env, const model::Backend& backend, model::LoadRequest request)
      : PromiseWorker(env), backend_(backend), request_(std::move(request)) {}
  void Run() override { engine_ = backend_.load(request_); }
  Napi::Value Result() override {
    Napi::Object handle = ModelHandle::constructor.New({});
    ModelHandle::Unwrap(handle)->engine = std::move(engine_);
    return handle;
  }

 private:
  const model::Backend& backend_;
  model::LoadRequest request_;
  std::shared_ptr<Engine> engine_;
};

model::WeightFormat weight_format(Napi::Env env, const std::string& s) {
  if (s == "f32") return model::WeightFormat::kF32;
  if (s == "bf16") return model::WeightFormat::kBF16;
  if (s == "f16") return model::WeightFormat::kF16;
  if (s == "int8") return model::WeightFormat::kInt8;
  if (s == "checkpoint") return model::WeightFormat::kCheckpoint;
  throw Napi::TypeError::New(env, "weights must be 'f32', 'bf16', 'f16', 'int8' or 'checkpoint', got '" + s + "'");
}

// loadModel(config, tensors, threads, { device?, deviceIndex?, weights? }) → Promise<NativeModel>
Napi::Value LoadModel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  model::LoadRequest r;
  r.config = parse_config(object_arg(env, info[0], "config"));
  r.sources = parse_sources(env, array_arg(env, info[1], "tensors"));
  r.threads = static_cast<int>(integer_arg(env, info[2], "threads", 1, cpu::kMaxThreads));
  std::string device = "cpu";
  if (info.Length() >= 4 && !absent(info[3])) {
    Napi::Object opts = object_arg(env, info[3], "options");
    if (!absent(field(opts, "device"))) device = string_field(opts, "device");
    r.device_index = absent(field(opts, "deviceIndex")) ? 0 : static_cast<int>(int_field(opts, "deviceIndex", 0, 1023));
    if (!absent(field(opts, "weights"))) r.weights = weight_format(env, string_field(opts, "weights"));
  }
  if (r.weights != model::WeightFormat::kF32 && device != "cpu")
    throw Napi::TypeError::New(env, "weights other than 'f32' are kept in memory by the CPU backend only");
  const model::Backend& backend = backend_named(device);
  backend.require_available();  // answered now, not from the worker
  return PromiseWorker::Start(std::make_unique<LoadWorker>(env, backend, std::move(r)));
}

// ---------------------------------------------------------------- step

class StepWorker : public PromiseWorker {
 public:
  StepWorker(Napi::Env env, std::shared_ptr<Engine> engine, std::shared_ptr<model::Cache> cache, std::shared_ptr<Engine> ref,
             std::shared_ptr<model::Cache> ref_cache, model::StepRequest request)
      : PromiseWorker(env), engine_(std::move(engine)), cache_(std::move(cache)), ref_(std::move(ref)), ref_cache_(std::move(ref_cache)),
        request_(std::move(request)) {}

  void Run() override { engine_->step(*cache_, request_, res_); }

  Napi::Value Result() override {
    Napi::Env env = Env();
    Napi::Object o = Napi::Object::New(env);
    o.Set("rows", static_cast<double>(res_.rows));
    o.Set("tokens", typed_array(env, res_.tokens));
    o.Set("chosenLogprob", adopt_floats(env, std::move(res_.chosen)));
    o.Set("logsumexp", adopt_floats(env, std::move(res_.lse)));
    o.Set("entropy", adopt_floats(env, std::move(res_.entropy)));
    o.Set("maxLogit", adopt_floats(env, std::move(res_.max_logit)));
    o.Set("margin", adopt_floats(env, std::move(res_.margin)));
    o.Set("topK", res_.topk);
    o.Set("topkIds", typed_array(env, res_.topk_ids));
    o.Set("topkLogits", adopt_floats(env, std::move(res_.topk_logits)));
    if (res_.with_reference) {
      o.Set("k1", adopt_floats(env, std::move(res_.k1)));
      o.Set("k2", adopt_floats(env, std::move(res_.k2)));
      o.Set("k3", adopt_floats(env, std::move(res_.k3)));
      o.Set("klExact", adopt_floats(env, std::move(res_.kl)));
    }
    if (res_.with_logits) o.Set("logits", adopt_floats(env, std::move(res_.logits)));
    return o;
  }

 private:
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<model::Cache> cache_;
  std::shared_ptr<Engine> ref_;  // kept alive while the step runs
  std::shared_ptr<model::Cache> ref_cache_;
  model::StepRequest request_;
  model::StepResult res_;
};

std::vector<model::SamplingRow> parse_sampling(const Napi::Object& so, size_t B) {
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
  std::vector<model::SamplingRow> rows(B);
  for (size_t e = 0; e < B; ++e) {
    SamplingParams& p = rows[e].params;
    p.temperature = temperature[e];
    p.top_k = top_k[e];
    p.top_p = top_p[e];
    p.min_p = min_p[e];
    p.repetition_penalty = rep[e];
    p.presence_penalty = pres[e];
    p.frequency_penalty = freq[e];
    p.seed = static_cast<uint64_t>(seed[e]);
    p.stream = static_cast<uint64_t>(stream[e]);
    rows[e].prompt_length = plen[e];
  }
  return rows;
}

// step(cache, { slots, counts, outModes, adapters?, tokens, targets?, sampling?, topK?, returnLogits?, reference? })
// adapters: Int32Array, one adapter index per entry (−1: the base alone; absent: the first adapter).
Napi::Value ModelHandle::Step(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::shared_ptr<Engine> self = engine;
  live(env);
  CacheHandle* ch = cache_handle(env, info[0], "step's cache");
  std::shared_ptr<model::Cache> cache = ch->cache;
  if (!cache) throw Napi::Error::New(env, "this KV cache has been disposed");
  Napi::Object req = object_arg(env, info[1], "step's request");
  model::StepRequest r;
  auto slots = typed_field<int32_t, napi_int32_array>(req, "slots", SIZE_MAX);
  const size_t B = slots.size();
  auto counts = typed_field<int32_t, napi_int32_array>(req, "counts", B);
  auto modes = typed_field<uint8_t, napi_uint8_array>(req, "outModes", B);
  auto adapters = typed_field<int32_t, napi_int32_array>(req, "adapters", B, true);
  for (size_t e = 0; e < B; ++e) r.batch.push_back({slots[e], counts[e], modes[e], 0, adapters.empty() ? 0 : adapters[e]});
  r.tokens = typed_field<int32_t, napi_int32_array>(req, "tokens", SIZE_MAX);
  r.targets = typed_field<int32_t, napi_int32_array>(req, "targets", SIZE_MAX, true);
  Napi::Value s = field(req, "sampling");
  if (s.IsObject()) r.sampling = parse_sampling(s.As<Napi::Object>(), B);
  r.topk = absent(field(req, "topK")) ? 0 : static_cast<int>(integer_arg(env, field(req, "topK"), "topK", INT32_MIN, INT32_MAX));
  r.return_logits = bool_field(req, "returnLogits", false);
  std::shared_ptr<Engine> ref;
  std::shared_ptr<model::Cache> ref_cache;
  Napi::Value rv = field(req, "reference");
  if (rv.IsObject()) {
    Napi::Object ro = rv.As<Napi::Object>();
    ref = engine_of(env, field(ro, "model"), "reference.model");
    ref_cache = cache_handle(env, field(ro, "cache"), "reference.cache")->cache;
    if (!ref_cache) throw Napi::Error::New(env, "the reference's KV cache has been disposed");
    r.reference = ref.get();
    r.reference_cache = ref_cache.get();
  }
  self->check(*cache, r);  // malformed requests answer now, before anything is queued
  return PromiseWorker::Start(std::make_unique<StepWorker>(env, self, cache, ref, ref_cache, std::move(r)));
}

Napi::Value ModelHandle::CreateCache(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Engine& e = live(env);
  const int slots = static_cast<int>(integer_arg(env, info[0], "slots", INT32_MIN, INT32_MAX));
  const int capacity = static_cast<int>(integer_arg(env, info[1], "capacity", INT32_MIN, INT32_MAX));
  model::CacheLayout layout;
  if (info.Length() > 2 && !absent(info[2])) {  // { pageSize, pages }: a paged cache
    Napi::Object o = object_arg(env, info[2], "layout");
    layout.page_size = static_cast<int>(int_field(o, "pageSize", 1, INT32_MAX));
    layout.pages = int_field(o, "pages", 1, INT32_MAX);
  }
  std::shared_ptr<model::Cache> cache = e.create_cache(slots, capacity, layout);
  Napi::Object handle = CacheHandle::constructor.New({});
  CacheHandle::Unwrap(handle)->cache = std::move(cache);
  return handle;
}

Napi::Value ModelHandle::Describe(const Napi::CallbackInfo& info) {
  Engine& e = live(info.Env());
  const model::EngineDescription d = e.describe();
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("parameterBytes", static_cast<double>(d.parameter_bytes));
  o.Set("threads", d.threads);
  o.Set("weights", d.weights);
  o.Set("backend", e.backend().name());
  if (d.device_index >= 0) o.Set("deviceIndex", d.device_index);
  return o;
}

void ModelHandle::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeModel",
                                 {method<&ModelHandle::CreateCache>("createCache"), method<&ModelHandle::Step>("step"),
                                  method<&ModelHandle::Dispose>("dispose"), method<&ModelHandle::Describe>("describe")});
  constructor = Napi::Persistent(f);
  constructor.SuppressDestruct();
  exports.Set("NativeModel", f);
}

void CacheHandle::Init(Napi::Env env, Napi::Object exports) {
  Napi::Function f = DefineClass(env, "NativeKVCache",
                                 {method<&CacheHandle::CopyPrefix>("copyPrefix"), method<&CacheHandle::Length>("length"),
                                  method<&CacheHandle::Truncate>("truncate"), method<&CacheHandle::Describe>("describe"),
                                  method<&CacheHandle::Dispose>("dispose")});
  constructor = Napi::Persistent(f);
  constructor.SuppressDestruct();
  exports.Set("NativeKVCache", f);
}

}  // namespace

std::shared_ptr<model::Engine> engine_of(Napi::Env env, Napi::Value v, const char* what) {
  if (!v.IsObject() || !v.As<Napi::Object>().InstanceOf(ModelHandle::constructor.Value()))
    throw Napi::TypeError::New(env, std::string(what) + " must be a NativeModel");
  auto e = ModelHandle::Unwrap(v.As<Napi::Object>())->engine;
  if (!e) throw Napi::Error::New(env, "this model has been disposed");
  return e;
}

void RegisterModelBindings(Napi::Env env, Napi::Object exports) {
  ModelHandle::Init(env, exports);
  CacheHandle::Init(env, exports);
  exports.Set("loadModel", function<LoadModel>(env, "loadModel"));
}

}  // namespace ad::addon
