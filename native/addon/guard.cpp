#include "addon/guard.h"

#include <new>
#include <stdexcept>
#include <string>

#include "collective/collective.h"
#include "model/engine.h"
#include "model/loader.h"

namespace ad::addon {

Napi::Error js_error(Napi::Env env, std::exception_ptr e) {
  auto with_code = [](Napi::Error err, const char* code) {
    err.Set("code", code);
    return err;
  };
  try {
    std::rethrow_exception(e);
  } catch (const Napi::Error& err) {
    return err;
  } catch (const model::UnsupportedVerb& err) {
    Napi::Error out = with_code(Napi::Error::New(env, err.what()), "ERR_AD_UNSUPPORTED");
    out.Set("backend", err.backend);
    out.Set("verb", model::verb_name(err.verb));
    return out;
  } catch (const model::BackendUnavailable& err) {
    Napi::Error out = with_code(Napi::Error::New(env, err.what()), "ERR_AD_DEVICE_UNAVAILABLE");
    out.Set("backend", err.backend);
    out.Set("kind", err.kind);
    return out;
  } catch (const collective::CollectiveTimeout& err) {
    Napi::Error out = with_code(Napi::Error::New(env, err.what()), "ERR_AD_COLLECTIVE_TIMEOUT");
    out.Set("rank", Napi::Number::New(env, err.rank));
    out.Set("operation", err.operation);
    out.Set("timeoutMs", static_cast<double>(err.timeout_ms));
    return out;
  } catch (const collective::CollectiveError& err) {
    Napi::Error out = with_code(Napi::Error::New(env, err.what()), "ERR_AD_COLLECTIVE");
    out.Set("rank", Napi::Number::New(env, err.rank));
    return out;
  } catch (const collective::CollectiveUnavailable& err) {
    Napi::Error out = with_code(Napi::Error::New(env, err.what()), "ERR_AD_COLLECTIVE_UNAVAILABLE");
    out.Set("backend", err.backend);
    out.Set("kind", err.kind);
    return out;
  } catch (const model::NonFiniteTensor& err) {
    Napi::Error out = with_code(Napi::Error::New(env, err.what()), "ERR_AD_NON_FINITE");
    out.Set("file", err.file);
    out.Set("tensor", err.tensor);
    out.Set("index", static_cast<double>(err.index));
    out.Set("numel", static_cast<double>(err.numel));
    out.Set("value", static_cast<double>(err.value));
    return out;
  } catch (const std::bad_alloc&) {
    return with_code(Napi::RangeError::New(env, "out of memory: the request needs more memory than this machine can give"),
                     "ERR_AD_OUT_OF_MEMORY");
  } catch (const std::invalid_argument& err) {
    return with_code(Napi::TypeError::New(env, err.what()), "ERR_AD_INVALID_ARGUMENT");
  } catch (const std::domain_error& err) {
    return with_code(Napi::TypeError::New(env, err.what()), "ERR_AD_INVALID_ARGUMENT");
  } catch (const std::out_of_range& err) {
    return with_code(Napi::RangeError::New(env, err.what()), "ERR_AD_OUT_OF_RANGE");
  } catch (const std::length_error& err) {
    return with_code(Napi::RangeError::New(env, err.what()), "ERR_AD_OUT_OF_RANGE");
  } catch (const std::exception& err) {
    return with_code(Napi::Error::New(env, err.what()), "ERR_AD_NATIVE");
  } catch (...) {
    return with_code(Napi::Error::New(env, "an unknown native exception"), "ERR_AD_NATIVE");
  }
}

void PromiseWorker::OnOK() {
  Napi::Env env = Env();
  if (error_) {
    deferred_.Reject(js_error(env, error_).Value());
    return;
  }
  try {
    deferred_.Resolve(Result());
  } catch (...) {
    deferred_.Reject(js_error(env, std::current_exception()).Value());
  }
}

}  // namespace ad::addon
