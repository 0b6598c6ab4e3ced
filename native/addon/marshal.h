// Typed-array marshalling shared by the binding files: JS typed array → std::vector (type
// checked), and C++ data → a new JS typed array.
#pragma once
#include <napi.h>

#include <cstring>
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

}  // namespace ad::addon
