// exports.gemm: the CPU GEMM (cpu/gemm.h) called directly, for its tests and bench/gemm.mjs.
// Synchronous on purpose: callers are test and bench scripts, not the engine's hot path.
//
//   multiply(variant, {x, ldx, w, ldw, bias?, y, ldy, rows, cols, depth, accumulate?, threads?})
//       Y[rows × cols] (=|+=) the product, in the engine's three layouts (depth = the summed index):
//       'nt'  X[rows × depth] · W[cols × depth]ᵀ (+ bias[cols])   gemm_nt, a Linear's forward
//       'nn'  X[rows × depth] · W[depth × cols]                   gemm_nn, dX = dY·W
//       'tn'  X[depth × rows]ᵀ · W[depth × cols]                  gemm_tn, dW = dYᵀ·X
//       weights (nt only): 'bf16' | 'f16' | 'int8': W converted to that type first (cpu/gemm_weights.h),
//       the product then read from the stored weights, as a model loaded with that `weights` runs.
//   stored(weights, w, rows, cols) → { values: Float32Array, scales?: Float32Array }: W [rows × cols]
//       as that type holds it (widened to f32), and for 'int8' each block's scale [rows × ⌈cols/32⌉].
//   time(variant, rows, cols, depth, threads, reps, weights?) → Float64Array: seconds of each of
//       `reps` runs after one warm-up, on operands of that shape allocated and filled here
//       (accumulate as the engine calls it: 'tn' adds into Y, the others overwrite).
//   fmaPeak(threads, iterations?) → Float64Array: FMA flops per second of each thread, all at once.
//   kernel: the micro-kernels this build runs, in words.
#include <napi.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "addon/guard.h"
#include "addon/registry.h"
#include "cpu/gemm.h"
#include "cpu/gemm_weights.h"
#include "cpu/threadpool.h"

namespace ad::addon {
namespace {

enum class Variant { kNT, kNN, kTN };

[[noreturn]] void fail_range(Napi::Env env, const std::string& msg) { throw Napi::RangeError::New(env, msg); }
[[noreturn]] void fail_type(Napi::Env env, const std::string& msg) { throw Napi::TypeError::New(env, msg); }

Variant variant_arg(Napi::Env env, const Napi::Value& v) {
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "nt") return Variant::kNT;
  if (s == "nn") return Variant::kNN;
  if (s == "tn") return Variant::kTN;
  fail_type(env, "variant must be 'nt', 'nn' or 'tn'");
}

int64_t whole_number(Napi::Env env, const Napi::Value& v, const std::string& what, int64_t lo, int64_t hi) {
  if (!v.IsNumber()) fail_type(env, what + " must be a number");
  const double d = v.As<Napi::Number>().DoubleValue();
  if (d != std::floor(d) || d < static_cast<double>(lo) || d > static_cast<double>(hi))
    fail_range(env, what + " must be an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return static_cast<int64_t>(d);
}

constexpr int64_t kMaxDim = int64_t(1) << 24;
constexpr int64_t kMaxFloats = int64_t(1) << 28;  // per operand of time(): 1 GiB

// A row-major matrix view: `rows` rows of `width` floats, `ld` apart.
struct MatrixArg {
  Napi::Float32Array array;
  int64_t ld;
};

MatrixArg matrix_field(Napi::Env env, const Napi::Object& o, const char* name, const char* ld_name, int64_t rows, int64_t width) {
  const Napi::Value v = o.Get(name);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array)
    fail_type(env, std::string(name) + " must be a Float32Array");
  MatrixArg m{v.As<Napi::Float32Array>(), whole_number(env, o.Get(ld_name), ld_name, 0, kMaxDim)};
  if (m.ld < width) fail_range(env, std::string(ld_name) + " must be at least " + std::to_string(width));
  const int64_t needed = rows > 0 && width > 0 ? (rows - 1) * m.ld + width : 0;
  if (static_cast<int64_t>(m.array.ElementLength()) < needed)
    fail_range(env, std::string(name) + " needs at least " + std::to_string(needed) + " elements for " + std::to_string(rows) +
                        " rows of " + std::to_string(width) + " at " + ld_name + " " + std::to_string(m.ld));
  return m;
}

const char* bytes_of(const Napi::TypedArray& a) { return static_cast<const char*>(a.ArrayBuffer().Data()) + a.ByteOffset(); }

bool overlap(const Napi::TypedArray& a, const Napi::TypedArray& b) {
  const char *a0 = bytes_of(a), *b0 = bytes_of(b);
  return a0 < b0 + b.ByteLength() && b0 < a0 + a.ByteLength();
}

cpu::WeightType weight_type_arg(Napi::Env env, const Napi::Value& v) {
  const std::string s = v.IsString() ? v.As<Napi::String>().Utf8Value() : "";
  if (s == "f32") return cpu::WeightType::kF32;
  if (s == "bf16") return cpu::WeightType::kBF16;
  if (s == "f16") return cpu::WeightType::kF16;
  if (s == "int8") return cpu::WeightType::kQ8;
  fail_type(env, "weights must be 'f32', 'bf16', 'f16' or 'int8'");
}

// W [rows × cols] at leading dimension ld, densely copied, then stored as `type`.
cpu::StoredWeights stored_copy(const float* w, int64_t ld, int64_t rows, int64_t cols, cpu::WeightType type) {
  std::vector<float> dense(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) dense[static_cast<size_t>(r * cols + c)] = w[r * ld + c];
  return cpu::store_weights(dense.data(), rows, cols, type, "w");
}

void run_variant(cpu::ThreadPool& pool, Variant v, const float* x, int64_t ldx, const float* w, int64_t ldw, const float* bias,
                 float* y, int64_t ldy, int64_t rows, int64_t cols, int64_t depth, bool accumulate) {
  switch (v) {
    case Variant::kNT: cpu::gemm_nt(pool, x, ldx, w, ldw, bias, y, ldy, rows, cols, depth, accumulate); break;
    case Variant::kNN: cpu::gemm_nn(pool, x, ldx, w, ldw, y, ldy, rows, depth, cols, accumulate); break;
    case Variant::kTN: cpu::gemm_tn(pool, x, ldx, w, ldw, y, ldy, rows, cols, depth, accumulate); break;
  }
}

Napi::Value Multiply(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Variant v = variant_arg(env, info[0]);
  if (!info[1].IsObject()) fail_type(env, "the second argument must be an options object");
  const Napi::Object o = info[1].As<Napi::Object>();
  const int64_t rows = whole_number(env, o.Get("rows"), "rows", 0, kMaxDim), cols = whole_number(env, o.Get("cols"), "cols", 0, kMaxDim),
                depth = whole_number(env, o.Get("depth"), "depth", 0, kMaxDim);
  const MatrixArg x = v == Variant::kTN ? matrix_field(env, o, "x", "ldx", depth, rows) : matrix_field(env, o, "x", "ldx", rows, depth);
  const MatrixArg w = v == Variant::kNT ? matrix_field(env, o, "w", "ldw", cols, depth) : matrix_field(env, o, "w", "ldw", depth, cols);
  MatrixArg y = matrix_field(env, o, "y", "ldy", rows, cols);
  const float* bias = nullptr;
  const Napi::Value b = o.Get("bias");
  if (!b.IsUndefined() && !b.IsNull()) {
    if (v != Variant::kNT) fail_type(env, "only 'nt' takes a bias");
    if (!b.IsTypedArray() || b.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) fail_type(env, "bias must be a Float32Array");
    if (static_cast<int64_t>(b.As<Napi::Float32Array>().ElementLength()) < cols) fail_range(env, "bias needs one element per column");
    bias = b.As<Napi::Float32Array>().Data();
  }
  if (overlap(y.array, x.array) || overlap(y.array, w.array) || (bias && overlap(y.array, b.As<Napi::Float32Array>())))
    fail_range(env, "y must not share memory with x, w or bias");
  const bool accumulate = o.Get("accumulate").ToBoolean().Value();
  const Napi::Value t = o.Get("threads");
  const int threads = t.IsUndefined() ? 1 : static_cast<int>(whole_number(env, t, "threads", 1, 256));
  const Napi::Value wt = o.Get("weights");
  const cpu::WeightType type = wt.IsUndefined() ? cpu::WeightType::kF32 : weight_type_arg(env, wt);
  cpu::ThreadPool pool(threads);
  if (type == cpu::WeightType::kF32) {
    run_variant(pool, v, x.array.Data(), x.ld, w.array.Data(), w.ld, bias, y.array.Data(), y.ld, rows, cols, depth, accumulate);
    return env.Undefined();
  }
  if (v != Variant::kNT) fail_type(env, "only 'nt' reads weights below f32");
  const cpu::StoredWeights stored = stored_copy(w.array.Data(), w.ld, cols, depth, type);
  cpu::gemm_nt(pool, x.array.Data(), x.ld, stored.view(), bias, y.array.Data(), y.ld, rows, cols, depth, accumulate);
  return env.Undefined();
}

Napi::Value Stored(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const cpu::WeightType type = weight_type_arg(env, info[0]);
  if (type == cpu::WeightType::kF32) fail_type(env, "weights must be 'bf16', 'f16' or 'int8'");
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) fail_type(env, "w must be a Float32Array");
  const Napi::Float32Array w = info[1].As<Napi::Float32Array>();
  const int64_t rows = whole_number(env, info[2], "rows", 0, kMaxDim), cols = whole_number(env, info[3], "cols", 0, kMaxDim);
  if (static_cast<int64_t>(w.ElementLength()) != rows * cols) fail_range(env, "w must hold rows × cols elements");
  const cpu::StoredWeights s = cpu::store_weights(w.Data(), rows, cols, type, "w");
  Napi::Object out = Napi::Object::New(env);
  Napi::Float32Array values = Napi::Float32Array::New(env, static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) s.widen_row(r, values.Data() + r * cols);
  out.Set("values", values);
  if (type == cpu::WeightType::kQ8) {
    Napi::Float32Array scales = Napi::Float32Array::New(env, s.scales.size());
    for (size_t i = 0; i < s.scales.size(); ++i) scales[i] = cpu::f16_to_f32(s.scales[i]);
    out.Set("scales", scales);
  }
  return out;
}

// Uniform values in [-1, 1) from a 32-bit LCG: fast enough to fill a vocabulary-sized matrix.
void fill_uniform(std::vector<float>& v, uint32_t seed) {
  for (float& f : v) {
    seed = seed * 1664525u + 1013904223u;
    f = static_cast<float>(seed >> 8) * (2.f / 16777216.f) - 1.f;
  }
}

Napi::Value Time(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const Variant v = variant_arg(env, info[0]);
  const int64_t rows = whole_number(env, info[1], "rows", 1, kMaxDim), cols = whole_number(env, info[2], "cols", 1, kMaxDim),
                depth = whole_number(env, info[3], "depth", 1, kMaxDim);
  const int threads = static_cast<int>(whole_number(env, info[4], "threads", 1, 256));
  const int reps = static_cast<int>(whole_number(env, info[5], "reps", 1, 1000));
  if (rows * depth > kMaxFloats || cols * depth > kMaxFloats || rows * cols > kMaxFloats)
    fail_range(env, "every operand must hold at most 2^28 floats");
  std::vector<float> x(static_cast<size_t>(rows * depth)), w(static_cast<size_t>(cols * depth)), y(static_cast<size_t>(rows * cols), 0.f);
  fill_uniform(x, 1);
  fill_uniform(w, 2);
  // Leading dimensions of the densely packed operands in each layout.
  const int64_t ldx = v == Variant::kTN ? rows : depth, ldw = v == Variant::kNT ? depth : cols;
  const bool accumulate = v == Variant::kTN;
  const cpu::WeightType type = info.Length() > 6 && !info[6].IsUndefined() ? weight_type_arg(env, info[6]) : cpu::WeightType::kF32;
  if (type != cpu::WeightType::kF32 && v != Variant::kNT) fail_type(env, "only 'nt' reads weights below f32");
  const cpu::StoredWeights stored = type == cpu::WeightType::kF32 ? cpu::StoredWeights{} : cpu::store_weights(w.data(), cols, depth, type, "w");
  cpu::ThreadPool pool(threads);
  auto once = [&] {
    if (type == cpu::WeightType::kF32)
      run_variant(pool, v, x.data(), ldx, w.data(), ldw, nullptr, y.data(), cols, rows, cols, depth, accumulate);
    else
      cpu::gemm_nt(pool, x.data(), ldx, stored.view(), nullptr, y.data(), cols, rows, cols, depth, accumulate);
  };
  once();
  Napi::Float64Array out = Napi::Float64Array::New(env, static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    once();
    out[static_cast<size_t>(r)] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return out;
}

Napi::Value FmaPeak(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int threads = static_cast<int>(whole_number(env, info[0], "threads", 1, 256));
  const int64_t iterations = info.Length() > 1 && !info[1].IsUndefined() ? whole_number(env, info[1], "iterations", 1, int64_t(1) << 40)
                                                                          : int64_t(20) << 20;
  cpu::ThreadPool pool(threads);
  const std::vector<double> flops = cpu::fma_peak_flops(pool, iterations);
  Napi::Float64Array out = Napi::Float64Array::New(env, flops.size());
  for (size_t i = 0; i < flops.size(); ++i) out[i] = flops[i];
  return out;
}

}  // namespace

void RegisterGemmBindings(Napi::Env env, Napi::Object exports) {
  Napi::Object g = Napi::Object::New(env);
  g.Set("multiply", function<Multiply>(env, "multiply"));
  g.Set("time", function<Time>(env, "time"));
  g.Set("stored", function<Stored>(env, "stored"));
  g.Set("fmaPeak", function<FmaPeak>(env, "fmaPeak"));
  g.Set("kernel", Napi::String::New(env, cpu::gemm_kernel()));
  exports.Set("gemm", g);
}

}  // namespace ad::addon
