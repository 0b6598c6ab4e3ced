// JavaScript values ↔ C++ for the binding files: checked numbers and fields (a wrong type is a
// TypeError, a value out of range a RangeError, both naming the argument), typed arrays in and
// out. Results leave as Float32Arrays over the native buffer (no copy on the JS thread).
#pragma once
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace ad::addon {

[[noreturn]] inline void type_error(Napi::Env env, const std::string& msg) { throw Napi::TypeError::New(env, msg); }
[[noreturn]] inline void range_error(Napi::Env env, const std::string& msg) { throw Napi::RangeError::New(env, msg); }

inline bool absent(const Napi::Value& v) { return v.IsUndefined() || v.IsNull(); }

inline double number_arg(Napi::Env env, const Napi::Value& v, const std::string& what) {
  if (!v.IsNumber()) type_error(env, what + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

// An integer in [lo, hi]; NaN, fractions and values beyond the range are RangeErrors.
inline int64_t integer_arg(Napi::Env env, const Napi::Value& v, const std::string& what, int64_t lo, int64_t hi) {
  const double d = number_arg(env, v, what);
  if (!(d == std::floor(d)) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
    range_error(env, what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int64_t>(d);
}

// A u64 from a bigint (any value that fits) or a non-negative safe integer.
inline uint64_t u64_arg(Napi::Env env, const Napi::Value& v, const std::string& what) {
  if (v.IsBigInt()) {
    bool lossless = false;
    uint64_t x = v.As<Napi::BigInt>().Uint64Value(&lossless);
    if (!lossless) range_error(env, what + " must fit in 64 unsigned bits");
    return x;
  }
  return static_cast<uint64_t>(integer_arg(env, v, what, 0, (int64_t(1) << 53) - 1));
}

inline Napi::Object object_arg(Napi::Env env, const Napi::Value& v, const std::string& what) {
  if (!v.IsObject()) type_error(env, what + " must be an object");
  return v.As<Napi::Object>();
}

inline Napi::Value field(const Napi::Object& o, const char* key) { return o.Has(key) ? o.Get(key) : o.Env().Undefined(); }

inline Napi::Value required(const Napi::Object& o, const char* key) {
  Napi::Value v = field(o, key);
  if (absent(v)) type_error(o.Env(), std::string("missing required field '") + key + "'");
  return v;
}

inline double number_field(const Napi::Object& o, const char* key) {
  return number_arg(o.Env(), required(o, key), std::string("field '") + key + "'");
}

inline double number_field(const Napi::Object& o, const char* key, double fallback) {
  Napi::Value v = field(o, key);
  return absent(v) ? fallback : number_arg(o.Env(), v, std::string("field '") + key + "'");
}

inline int64_t int_field(const Napi::Object& o, const char* key, int64_t lo, int64_t hi) {
  return integer_arg(o.Env(), required(o, key), std::string("field '") + key + "'", lo, hi);
}

inline bool bool_field(const Napi::Object& o, const char* key, bool fallback) {
  Napi::Value v = field(o, key);
  if (absent(v)) return fallback;
  if (!v.IsBoolean()) type_error(o.Env(), std::string("field '") + key + "' must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

inline std::string string_field(const Napi::Object& o, const char* key) {
  Napi::Value v = required(o, key);
  if (!v.IsString()) type_error(o.Env(), std::string("field '") + key + "' must be a string");
  return v.As<Napi::String>().Utf8Value();
}

inline Napi::Array array_arg(Napi::Env env, const Napi::Value& v, const std::string& what) {
  if (!v.IsArray()) type_error(env, what + " must be an array");
  return v.As<Napi::Array>();
}

template <typename T, napi_typedarray_type Kind>
Napi::TypedArrayOf<T> typed_arg(Napi::Env env, const Napi::Value& v, const std::string& what) {
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != Kind)
    type_error(env, what + " must be a typed array of the right element type");
  return v.As<Napi::TypedArrayOf<T>>();
}

template <typename T, napi_typedarray_type Kind>
std::vector<T> typed_vector(Napi::Env env, Napi::Value v, const std::string& what) {
  auto arr = typed_arg<T, Kind>(env, v, what);
  return std::vector<T>(arr.Data(), arr.Data() + arr.ElementLength());
}

// A typed-array field, `expected` elements long (SIZE_MAX: any); absent and `optional`: empty.
template <typename T, napi_typedarray_type Kind>
std::vector<T> typed_field(const Napi::Object& o, const char* key, size_t expected, bool optional = false) {
  Napi::Value v = field(o, key);
  if (absent(v) && optional) return {};
  auto out = typed_vector<T, Kind>(o.Env(), v, std::string("field '") + key + "'");
  if (expected != SIZE_MAX && out.size() != expected)
    type_error(o.Env(), std::string("field '") + key + "' has " + std::to_string(out.size()) + " elements, expected " +
                            std::to_string(expected));
  return out;
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

// A Float32Array that takes over `v`'s buffer: the JS thread copies nothing.
inline Napi::Value adopt_floats(Napi::Env env, std::vector<float>&& v) {
  if (v.empty()) return Napi::Float32Array::New(env, 0);
  auto* owned = new std::vector<float>(std::move(v));
  auto buffer = Napi::ArrayBuffer::New(env, owned->data(), owned->size() * sizeof(float),
                                       [](Napi::Env, void*, std::vector<float>* p) { delete p; }, owned);
  return Napi::Float32Array::New(env, owned->size(), buffer, 0);
}

inline Napi::Array shape_array(Napi::Env env, const std::vector<int64_t>& shape) {
  Napi::Array s = Napi::Array::New(env, shape.size());
  for (size_t i = 0; i < shape.size(); ++i) s.Set(static_cast<uint32_t>(i), static_cast<double>(shape[i]));
  return s;
}

}  // namespace ad::addon
