// Typed-array marshalling shared by the binding files: JS typed array → std::vector (type
// checked), and C++ data → a new JS typed array.
#pragma once
#include <napi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ad::addon {

template <typename T, napi_typedarray_type Kind>
std::vector<T> typed_vector(Napi::Env env, Napi::Value v, const std::string& what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != Kind)
    throw Napi::TypeError::New(env, what + " must be a typed array of the right element type");
  auto arr = v.As<Napi::TypedArrayOf<T>>();
  return std::vector<T>(arr.Data(), arr.Data() + arr.ElementLength());
}

template <typename T>
Napi::Value typed_array(Napi::Env env, const T* data, size_t n) {
  auto arr = Napi::TypedArrayOf<T>::New(env, n);
  if (n) std::memcpy(arr.Data(), data, n * sizeof(T));
  return arr;
}

template <typename T>
Napi::Value typed_array(Napi::Env env, const std::vector<T>& v) {
  return typed_array(env, v.data(), v.size());
}


// A training forward's sequences, checked: tokens (prompt then completion, concatenated), one
// length and prompt length per sequence; every sequence needs ≥ 1 prompt and ≥ 1 completion token.
struct TrainSequences {
  std::vector<int32_t> tokens, lengths, prompt_lengths;
  bool checkpoint = false;
};

inline TrainSequences train_sequences(Napi::Env env, Napi::Object req) {
  TrainSequences s;
  s.tokens = typed_vector<int32_t, napi_int32_array>(env, req.Get("tokens"), "tokens");
  s.lengths = typed_vector<int32_t, napi_int32_array>(env, req.Get("lengths"), "lengths");
  s.prompt_lengths = typed_vector<int32_t, napi_int32_array>(env, req.Get("promptLengths"), "promptLengths");
  if (s.lengths.empty() || s.lengths.size() != s.prompt_lengths.size())
    throw Napi::TypeError::New(env, "lengths and promptLengths must be non-empty and of equal length");
  int64_t total = 0;
  for (size_t i = 0; i < s.lengths.size(); ++i) {
    if (s.prompt_lengths[i] < 1 || s.prompt_lengths[i] >= s.lengths[i])
      throw Napi::RangeError::New(env, "every sequence needs a prompt of ≥ 1 token and a completion of ≥ 1 token");
    total += s.lengths[i];
  }
  if (total != static_cast<int64_t>(s.tokens.size())) throw Napi::TypeError::New(env, "tokens.length must equal the sum of lengths");
  s.checkpoint = req.Get("checkpoint").IsBoolean() && req.Get("checkpoint").As<Napi::Boolean>().Value();
  return s;
}

}  // namespace ad::addon

namespace ad::addon {

// An AsyncWorker that settles a Promise: subclasses do the work in Execute() (SetError on
// failure) and build the resolved value in Result() on the JS thread.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}
  virtual Napi::Value Result() { return Env().Undefined(); }
  void OnOK() override { deferred_.Resolve(Result()); }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

  // Hands the worker to libuv's queue and returns its promise.
  template <typename W>
  static Napi::Promise Start(std::unique_ptr<W> worker) {
    Napi::Promise p = worker->deferred_.Promise();
    worker.release()->Queue();
    return p;
  }

 private:
  Napi::Promise::Deferred deferred_;
};

}  // namespace ad::addon
