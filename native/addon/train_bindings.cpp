// train.*: the Engine's training verbs on a NativeModel — a taped forward that returns per-token
// statistics, a backward from per-token loss coefficients, AdamW with global-norm clipping, LoRA
// adapters, a score head, and tensor / gradient / optimizer-state export and import. Everything
// that touches the whole model runs on a worker behind a Promise; results leave without a copy
// on the JS thread, and imports read the caller's arrays from the worker (they must not be
// transferred while the promise is pending).
#include <memory>
#include <string>
#include <vector>

#include "addon/collective_handle.h"
#include "addon/guard.h"
#include "addon/marshal.h"
#include "addon/model_handle.h"
#include "addon/registry.h"

namespace ad::addon {
namespace {

using model::Engine;

template <typename State>
Napi::Promise run_verb(Napi::Env env, std::shared_ptr<Engine> engine, State state, typename HeldWorker<Engine, State>::Work work,
                       typename HeldWorker<Engine, State>::Answer answer = nullptr) {
  return HeldWorker<Engine, State>::Start(env, std::move(engine), std::move(state), work, answer);
}

// Float32Arrays a worker reads: the JS objects stay referenced (alive) until it is done.
struct Borrowed {
  std::vector<Napi::ObjectReference> keep;
  const float* hold(Napi::Env env, const Napi::Value& v, const std::string& what, int64_t* size) {
    auto arr = typed_arg<float, napi_float32_array>(env, v, what);
    keep.push_back(Napi::Persistent(arr.As<Napi::Object>()));
    *size = static_cast<int64_t>(arr.ElementLength());
    return arr.Data();
  }
};

Napi::Value tensor_list(Napi::Env env, std::vector<model::TensorCopy>& tensors, bool with_shape) {
  Napi::Array out = Napi::Array::New(env, tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    Napi::Object o = Napi::Object::New(env);
    o.Set("name", tensors[i].name);
    if (with_shape) o.Set("shape", shape_array(env, tensors[i].shape));
    o.Set("data", adopt_floats(env, std::move(tensors[i].data)));
    out.Set(static_cast<uint32_t>(i), o);
  }
  return out;
}

Napi::Object request_arg(const Napi::CallbackInfo& info) { return object_arg(info.Env(), info[1], "request"); }

// ---------------------------------------------------------------- forward and backward

struct ForwardState {
  std::shared_ptr<Engine> reference;  // kept alive while the forward runs
  model::TrainForwardRequest request;
  model::TrainForwardResult result;
};

// forward(model, { tokens, lengths, promptLengths, adapters?, reference?: 'lora-off' | NativeModel, checkpoint? })
// adapters: Int32Array, one adapter index per sequence (−1: the base alone).
Napi::Value TrainForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  Napi::Object req = request_arg(info);
  ForwardState st;
  model::TrainSequences& s = st.request.sequences;
  s.tokens = typed_vector<int32_t, napi_int32_array>(env, req.Get("tokens"), "tokens");
  s.lengths = typed_vector<int32_t, napi_int32_array>(env, req.Get("lengths"), "lengths");
  s.prompt_lengths = typed_vector<int32_t, napi_int32_array>(env, req.Get("promptLengths"), "promptLengths");
  s.adapters = typed_field<int32_t, napi_int32_array>(req, "adapters", s.lengths.size(), true);
  s.checkpoint = bool_field(req, "checkpoint", false);
  Napi::Value ref = field(req, "reference");
  if (ref.IsString()) {
    if (ref.As<Napi::String>().Utf8Value() != "lora-off") type_error(env, "reference must be 'lora-off' or a NativeModel");
    st.request.reference_lora_off = true;
  } else if (!absent(ref)) {
    st.reference = engine_of(env, ref, "reference");
    st.request.reference = st.reference.get();
  }
  engine->check(st.request);  // malformed sequences answer now
  return run_verb<ForwardState>(
      env, engine, std::move(st), [](Engine& e, ForwardState& s) { e.train_forward(s.request, s.result); },
      [](Napi::Env env, ForwardState& s) -> Napi::Value {
        Napi::Object o = Napi::Object::New(env);
        o.Set("logp", adopt_floats(env, std::move(s.result.logp)));
        o.Set("entropy", adopt_floats(env, std::move(s.result.entropy)));
        if (s.request.reference || s.request.reference_lora_off) o.Set("refLogp", adopt_floats(env, std::move(s.result.ref_logp)));
        return o;
      });
}

struct Coefficients {
  std::vector<float> a, b;
};

// backward(model, { a, b })
Napi::Value TrainBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  Napi::Object req = request_arg(info);
  Coefficients c{typed_vector<float, napi_float32_array>(env, req.Get("a"), "a"), typed_vector<float, napi_float32_array>(env, req.Get("b"), "b")};
  return run_verb<Coefficients>(env, engine, std::move(c), [](Engine& e, Coefficients& c) { e.train_backward(c.a, c.b); });
}

struct OptimizerState {
  model::OptimizerRequest request;
  model::OptimizerResult result;
};

// optimizerStep(model, { step, lr, beta1, beta2, eps, weightDecay, clipGradNorm })
Napi::Value OptimizerStep(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  Napi::Object o = request_arg(info);
  OptimizerState st;
  st.request = {static_cast<float>(number_field(o, "lr")), static_cast<float>(number_field(o, "beta1")),
                static_cast<float>(number_field(o, "beta2")), static_cast<float>(number_field(o, "eps")),
                static_cast<float>(number_field(o, "weightDecay")), static_cast<int>(int_field(o, "step", 1, INT32_MAX)),
                static_cast<float>(number_field(o, "clipGradNorm"))};
  return run_verb<OptimizerState>(
      env, engine, std::move(st), [](Engine& e, OptimizerState& s) { s.result = e.optimizer_step(s.request); },
      [](Napi::Env env, OptimizerState& s) -> Napi::Value {
        Napi::Object r = Napi::Object::New(env);
        r.Set("gradNorm", s.result.grad_norm);
        r.Set("skipped", s.result.skipped);
        r.Set("parameters", static_cast<double>(s.result.parameters));
        return r;
      });
}

struct GradientReduce {
  std::shared_ptr<collective::Collective> collective;  // kept open while the reduce runs
};

// reduceGradients(model, collective): every gradient ← its sum over the ranks (data parallelism,
// between the last backward and optimizerStep)
Napi::Value ReduceGradients(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  engine->require(model::Verb::kGradients);
  return run_verb<GradientReduce>(env, engine, {collective_of(env, info[1])},
                                  [](Engine& e, GradientReduce& s) { e.reduce_gradients(*s.collective); });
}

// ---------------------------------------------------------------- score head

struct ScoreState {
  model::ScoreForwardRequest request;
  std::vector<float> scores;
};

// scoreForward(model, { tokens, lengths, adapters?, tape? }) → [sequences × labels]
Napi::Value ScoreForward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  Napi::Object req = request_arg(info);
  engine->require(model::Verb::kScoreHead);
  ScoreState st;
  st.request.tokens = typed_vector<int32_t, napi_int32_array>(env, req.Get("tokens"), "tokens");
  st.request.lengths = typed_vector<int32_t, napi_int32_array>(env, req.Get("lengths"), "lengths");
  st.request.adapters = typed_field<int32_t, napi_int32_array>(req, "adapters", st.request.lengths.size(), true);
  st.request.tape = bool_field(req, "tape", true);
  return run_verb<ScoreState>(
      env, engine, std::move(st), [](Engine& e, ScoreState& s) { e.score_forward(s.request, s.scores); },
      [](Napi::Env env, ScoreState& s) { return adopt_floats(env, std::move(s.scores)); });
}

// scoreBackward(model, { dScores })
Napi::Value ScoreBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  engine->require(model::Verb::kScoreHead);
  std::vector<float> d = typed_vector<float, napi_float32_array>(env, request_arg(info).Get("dScores"), "dScores");
  return run_verb<std::vector<float>>(env, engine, std::move(d), [](Engine& e, std::vector<float>& d) { e.score_backward(d); });
}

// attachScoreHead(model, { labels, std, seed })
Napi::Value AttachScoreHead(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  Napi::Object o = request_arg(info);
  engine->attach_score_head(static_cast<int>(int_field(o, "labels", INT32_MIN, INT32_MAX)), static_cast<float>(number_field(o, "std")),
                            u64_arg(env, required(o, "seed"), "seed"));
  return env.Undefined();
}

// ---------------------------------------------------------------- set-up

// attachLora(model, { rank, alpha, targets, seed, name? }) → the adapter's index (name: 'default' when absent)
Napi::Value AttachLora(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  Napi::Object o = request_arg(info);
  model::LoraRequest r;
  Napi::Array t = array_arg(env, required(o, "targets"), "targets");
  for (uint32_t i = 0; i < t.Length(); ++i) {
    if (!t.Get(i).IsString()) type_error(env, "LoRA targets must be module names");
    const std::string name = t.Get(i).As<Napi::String>().Utf8Value();
    model::Linear which;
    if (!model::linear_from_name(name, &which)) type_error(env, "unknown LoRA target module '" + name + "'");
    r.targets.push_back(which);
  }
  r.rank = static_cast<int>(int_field(o, "rank", INT32_MIN, INT32_MAX));
  r.alpha = static_cast<float>(number_field(o, "alpha"));
  r.seed = u64_arg(env, required(o, "seed"), "seed");
  Napi::Value name = field(o, "name");
  if (!absent(name)) {
    if (!name.IsString()) type_error(env, "the adapter name must be a string");
    r.name = name.As<Napi::String>().Utf8Value();
  }
  return Napi::Number::New(env, engine->attach_lora(r));
}

bool bool_arg(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsBoolean()) type_error(env, std::string(what) + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

// setTrainable(model, base, lora, adapters?: Int32Array): with lora, the listed adapters train (absent: all)
Napi::Value SetTrainable(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::vector<int> adapters;
  if (info.Length() > 3 && !absent(info[3]))
    for (int32_t a : typed_vector<int32_t, napi_int32_array>(env, info[3], "adapters")) adapters.push_back(a);
  engine_of(env, info[0])->set_trainable(bool_arg(env, info[1], "base"), bool_arg(env, info[2], "lora"), adapters);
  return env.Undefined();
}

Napi::Value ZeroGrad(const Napi::CallbackInfo& info) {
  engine_of(info.Env(), info[0])->zero_grad();
  return info.Env().Undefined();
}

Napi::Value SetLoraEnabled(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  engine_of(env, info[0])->set_lora_enabled(bool_arg(env, info[1], "on"));
  return env.Undefined();
}

struct Nothing {};

// mergeLora(model): W += α/r·B·A, B = 0
Napi::Value MergeLora(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  engine->require(model::Verb::kLora);
  return run_verb<Nothing>(env, engine, {}, [](Engine& e, Nothing&) { e.merge_lora(); });
}

// ---------------------------------------------------------------- export and import

struct TensorsOut {
  bool merge = false;
  std::vector<model::TensorCopy> tensors;
};

// exportTensors(model, { mergeLora? }) → [{ name, shape, data }]: base tensors sorted by name, then LoRA A and B
Napi::Value ExportTensors(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  TensorsOut st;
  if (info.Length() > 1 && !absent(info[1])) st.merge = bool_field(object_arg(env, info[1], "options"), "mergeLora", false);
  engine->require(model::Verb::kTensors);
  if (st.merge) engine->require(model::Verb::kLora);
  return run_verb<TensorsOut>(
      env, engine, std::move(st), [](Engine& e, TensorsOut& s) { s.tensors = e.export_tensors(s.merge); },
      [](Napi::Env env, TensorsOut& s) { return tensor_list(env, s.tensors, true); });
}

struct TensorsIn {
  Borrowed arrays;
  std::vector<model::TensorView> tensors;
};

// importTensors(model, [{ name, data }]): every name and size checked before the first write
Napi::Value ImportTensors(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  engine->require(model::Verb::kTensors);
  Napi::Array arr = array_arg(env, info[1], "tensors");
  TensorsIn st;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object o = object_arg(env, arr.Get(i), "tensors[" + std::to_string(i) + "]");
    model::TensorView t{string_field(o, "name"), nullptr, 0};
    t.data = st.arrays.hold(env, o.Get("data"), "the data of " + t.name, &t.size);
    st.tensors.push_back(std::move(t));
  }
  return run_verb<TensorsIn>(env, engine, std::move(st), [](Engine& e, TensorsIn& s) { e.import_tensors(s.tensors); });
}

// exportGradients(model) → [{ name, data }]
Napi::Value ExportGradients(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  engine->require(model::Verb::kGradients);
  return run_verb<TensorsOut>(
      env, engine, {}, [](Engine& e, TensorsOut& s) { s.tensors = e.export_gradients(); },
      [](Napi::Env env, TensorsOut& s) { return tensor_list(env, s.tensors, false); });
}

struct MomentsOut {
  std::vector<model::MomentsCopy> moments;
};

// exportOptimizerState(model) → [{ name, m, v }] sorted by name
Napi::Value ExportOptimizerState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  engine->require(model::Verb::kOptimizerState);
  return run_verb<MomentsOut>(
      env, engine, {}, [](Engine& e, MomentsOut& s) { s.moments = e.export_optimizer_state(); },
      [](Napi::Env env, MomentsOut& s) -> Napi::Value {
        Napi::Array out = Napi::Array::New(env, s.moments.size());
        for (size_t i = 0; i < s.moments.size(); ++i) {
          Napi::Object o = Napi::Object::New(env);
          o.Set("name", s.moments[i].name);
          o.Set("m", adopt_floats(env, std::move(s.moments[i].m)));
          o.Set("v", adopt_floats(env, std::move(s.moments[i].v)));
          out.Set(static_cast<uint32_t>(i), o);
        }
        return out;
      });
}

struct MomentsIn {
  Borrowed arrays;
  std::vector<model::MomentsView> moments;
};

// importOptimizerState(model, [{ name, m, v }]): names, sizes and values checked before the state changes
Napi::Value ImportOptimizerState(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto engine = engine_of(env, info[0]);
  engine->require(model::Verb::kOptimizerState);
  Napi::Array arr = array_arg(env, info[1], "state");
  MomentsIn st;
  for (uint32_t i = 0; i < arr.Length(); ++i) {
    Napi::Object o = object_arg(env, arr.Get(i), "state[" + std::to_string(i) + "]");
    model::MomentsView e{string_field(o, "name"), nullptr, nullptr, 0, 0};
    e.m = st.arrays.hold(env, o.Get("m"), "m of " + e.name, &e.m_size);
    e.v = st.arrays.hold(env, o.Get("v"), "v of " + e.name, &e.v_size);
    st.moments.push_back(std::move(e));
  }
  return run_verb<MomentsIn>(env, engine, std::move(st), [](Engine& e, MomentsIn& s) { e.import_optimizer_state(s.moments); });
}

}  // namespace

void RegisterTrainBindings(Napi::Env env, Napi::Object exports) {
  Napi::Object t = Napi::Object::New(env);
  t.Set("forward", function<TrainForward>(env, "forward"));
  t.Set("backward", function<TrainBackward>(env, "backward"));
  t.Set("optimizerStep", function<OptimizerStep>(env, "optimizerStep"));
  t.Set("reduceGradients", function<ReduceGradients>(env, "reduceGradients"));
  t.Set("scoreForward", function<ScoreForward>(env, "scoreForward"));
  t.Set("scoreBackward", function<ScoreBackward>(env, "scoreBackward"));
  t.Set("attachScoreHead", function<AttachScoreHead>(env, "attachScoreHead"));
  t.Set("attachLora", function<AttachLora>(env, "attachLora"));
  t.Set("setTrainable", function<SetTrainable>(env, "setTrainable"));
  t.Set("zeroGrad", function<ZeroGrad>(env, "zeroGrad"));
  t.Set("setLoraEnabled", function<SetLoraEnabled>(env, "setLoraEnabled"));
  t.Set("mergeLora", function<MergeLora>(env, "mergeLora"));
  t.Set("exportTensors", function<ExportTensors>(env, "exportTensors"));
  t.Set("importTensors", function<ImportTensors>(env, "importTensors"));
  t.Set("exportGradients", function<ExportGradients>(env, "exportGradients"));
  t.Set("exportOptimizerState", function<ExportOptimizerState>(env, "exportOptimizerState"));
  t.Set("importOptimizerState", function<ImportOptimizerState>(env, "importOptimizerState"));
  exports.Set("train", t);
}

}  // namespace ad::addon
