// The one way into native code from JavaScript. Every exported function, every method of a
// handle and every asynchronous verb runs inside guard() (synchronous) or PromiseWorker
// (asynchronous), which turn any C++ exception — std::bad_alloc, std::length_error, a backend's
// error, anything — into a typed JavaScript error with a clear message; none reaches the Node-API
// boundary, so no input can abort the process.
//
// Errors carry `code`:
//   ERR_AD_INVALID_ARGUMENT  TypeError   std::invalid_argument, std::domain_error
//   ERR_AD_OUT_OF_RANGE      RangeError  std::out_of_range, std::length_error
//   ERR_AD_OUT_OF_MEMORY     RangeError  std::bad_alloc (the request is too large for this machine)
//   ERR_AD_UNSUPPORTED       Error       model::UnsupportedVerb (+ `backend`, `verb`)
//   ERR_AD_DEVICE_UNAVAILABLE Error      model::BackendUnavailable (+ `backend`, `kind`)
//   ERR_AD_COLLECTIVE_TIMEOUT Error      collective::CollectiveTimeout (+ `rank`, `operation`, `timeoutMs`)
//   ERR_AD_COLLECTIVE        Error       collective::CollectiveError (+ `rank`)
//   ERR_AD_COLLECTIVE_UNAVAILABLE Error  collective::CollectiveUnavailable (+ `backend`, `kind`)
//   ERR_AD_NON_FINITE        Error       model::NonFiniteTensor: a loaded tensor holds NaN/±Inf (+ `file`, `tensor`, `index`, `numel`, `value`)
//   ERR_AD_NATIVE            Error       anything else
// Errors raised on purpose by the binding code itself (Napi::TypeError, …) pass through as they are.
#pragma once
#include <napi.h>

#include <exception>
#include <memory>
#include <utility>

namespace ad::addon {

// The JavaScript error for a caught C++ exception.
Napi::Error js_error(Napi::Env env, std::exception_ptr e);

// Runs f on the JS thread; any exception becomes a thrown JS error (see above).
template <typename F>
Napi::Value guard(Napi::Env env, F&& f) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (...) {
    throw js_error(env, std::current_exception());
  }
}

using Entry = Napi::Value (*)(const Napi::CallbackInfo&);

// An exported function whose body runs inside guard().
template <Entry F>
Napi::Value guarded(const Napi::CallbackInfo& info) {
  return guard(info.Env(), [&] { return F(info); });
}

template <Entry F>
Napi::Function function(Napi::Env env, const char* name) {
  return Napi::Function::New(env, guarded<F>, name);
}

// An ObjectWrap whose methods run inside guard(): declare them with method<&T::Name>("name").
template <typename T>
class GuardedWrap : public Napi::ObjectWrap<T> {
 public:
  using Napi::ObjectWrap<T>::ObjectWrap;
  using Method = Napi::Value (T::*)(const Napi::CallbackInfo&);

  template <Method M>
  static typename Napi::ObjectWrap<T>::PropertyDescriptor method(const char* name) {
    return Napi::ObjectWrap<T>::InstanceMethod(name, static_cast<Method>(&GuardedWrap::template call<M>));
  }

 protected:
  template <Method M>
  Napi::Value call(const Napi::CallbackInfo& info) {
    return guard(info.Env(), [&] { return (static_cast<T*>(this)->*M)(info); });
  }
};

// An AsyncWorker that settles a Promise. Subclasses do the work in Run() (worker thread) and build
// the resolved value in Result() (JS thread); an exception from either rejects the promise with
// the typed error.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  explicit PromiseWorker(Napi::Env env) : Napi::AsyncWorker(env), deferred_(Napi::Promise::Deferred::New(env)) {}

  virtual void Run() = 0;
  virtual Napi::Value Result() { return Env().Undefined(); }

  // Hands the worker to libuv's queue and returns its promise.
  template <typename W>
  static Napi::Promise Start(std::unique_ptr<W> worker) {
    Napi::Promise p = worker->deferred_.Promise();
    worker.release()->Queue();
    return p;
  }

 private:
  void Execute() final {
    try {
      Run();
    } catch (...) {
      error_ = std::current_exception();
    }
  }
  void OnOK() final;
  void OnError(const Napi::Error& e) final { deferred_.Reject(e.Value()); }

  Napi::Promise::Deferred deferred_;
  std::exception_ptr error_;
};

// A PromiseWorker over one shared object (a model's engine, a collective), kept alive while it runs:
// `work(object, state)` on the worker thread, `answer(env, state)` (or undefined) on the JS thread.
template <typename Held, typename State>
class HeldWorker : public PromiseWorker {
 public:
  using Work = void (*)(Held&, State&);
  using Answer = Napi::Value (*)(Napi::Env, State&);
  HeldWorker(Napi::Env env, std::shared_ptr<Held> held, State state, Work work, Answer answer)
      : PromiseWorker(env), held_(std::move(held)), state_(std::move(state)), work_(work), answer_(answer) {}
  void Run() override { work_(*held_, state_); }
  Napi::Value Result() override { return answer_ ? answer_(Env(), state_) : Env().Undefined(); }

  static Napi::Promise Start(Napi::Env env, std::shared_ptr<Held> held, State state, Work work, Answer answer = nullptr) {
    return PromiseWorker::Start(std::make_unique<HeldWorker>(env, std::move(held), std::move(state), work, answer));
  }

 private:
  std::shared_ptr<Held> held_;
  State state_;
  Work work_;
  Answer answer_;
};

}  // namespace ad::addon
