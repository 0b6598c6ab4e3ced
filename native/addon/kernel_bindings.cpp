// Direct bindings to single kernels, for tests and benchmarks (autodidact's `kernels` export).
// Synchronous on purpose: callers are test and bench scripts, not the engine's hot path.
//
//   logitStats(logits, rows, vocab, {targets?, topK?, ref?, threads?, scalar?}) → per-row stats
//   naiveLogitStats(...same)       the multi-pass baseline of bench/logit-stats.mjs
//   sampleToken(logits, params, position, history?, generated?) → token id
//   sampleTokens(logits, params, firstPosition, count, history?, generated?) → Int32Array
//   sampleTokensSplit(logits, params, firstPosition, count, chunks) → Int32Array  the split-row
//     sampler's chunked procedure (kernels/sampling_split.h) on the host
//   philox(counter[4], key[2]) → Uint32Array(4);  uniform01(seed, stream, position) → number
//   copyBytes(src, dst, threads?)  parallel memcpy, the bandwidth floor of the benchmark
//   readBytes(src, threads?)       parallel read of every byte (XOR of its 32-bit words), the floor of a step that only reads
//   expf(x: Float32Array) → Float32Array  the SIMD exp, for its ulp test
//   rmsnorm / rmsnormBackward, rope / ropeInverse, swiglu / swigluBackward, attentionRow /
//   attentionRowBackward: the layer kernel pairs of native/kernels/, row by row as the CPU
//   backend calls them (outputs NaN-poisoned; accumulated gradients start at 0)
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "addon/guard.h"
#include "addon/marshal.h"
#include "addon/registry.h"
#include "cpu/logit_stats_cpu.h"
#include "cpu/sampling_cpu.h"
#include "kernels/sampling_split.h"
#include "cpu/threadpool.h"
#include "cpu/vec.h"
#include "kernels/attention.h"
#include "kernels/lora.h"
#include "kernels/philox.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/swiglu.h"

namespace ad::addon {
namespace {

Napi::Float32Array float_array(Napi::Env env, const Napi::Value& v, const char* what) {
  return typed_arg<float, napi_float32_array>(env, v, what);
}

Napi::Int32Array int_array(Napi::Env env, const Napi::Value& v, const char* what) {
  return typed_arg<int32_t, napi_int32_array>(env, v, what);
}

// ---------------------------------------------------------------------------------------------
// Thread pools, one per thread count, created on first use and kept for the process (never
// destroyed: joining workers from a static destructor at exit gains nothing).

cpu::ThreadPool& pool_for(int threads) {
  static std::mutex mutex;
  static std::map<int, cpu::ThreadPool*> pools;
  std::lock_guard<std::mutex> lock(mutex);
  cpu::ThreadPool*& p = pools[threads];
  if (!p) p = new cpu::ThreadPool(threads);
  return *p;
}

int threads_option(Napi::Env env, const Napi::Value& v) {
  if (absent(v)) return cpu::hardware_threads();
  return static_cast<int>(integer_arg(env, v, "threads", 1, cpu::kMaxThreads));
}

// ---------------------------------------------------------------------------------------------
// logitStats / naiveLogitStats

enum class StatsImpl { kFused, kScalar, kNaive };

// Outputs are pre-filled with NaN (ids with INT32_MIN) so a test sees any element a kernel missed.
Napi::Float32Array nan_floats(Napi::Env env, size_t n) {
  Napi::Float32Array a = Napi::Float32Array::New(env, n);
  std::fill(a.Data(), a.Data() + n, std::numeric_limits<float>::quiet_NaN());
  return a;
}

Napi::Int32Array sentinel_ints(Napi::Env env, size_t n) {
  Napi::Int32Array a = Napi::Int32Array::New(env, n);
  std::fill(a.Data(), a.Data() + n, std::numeric_limits<int32_t>::min());
  return a;
}

Napi::Value LogitStatsWith(const Napi::CallbackInfo& info, StatsImpl impl) {
  Napi::Env env = info.Env();
  Napi::Float32Array logits = float_array(env, info[0], "logits");
  const int64_t rows = integer_arg(env, info[1], "rows", 0, int64_t(1) << 40);
  const int64_t vocab = integer_arg(env, info[2], "vocab", 1, int64_t(1) << 31);
  if (static_cast<int64_t>(logits.ElementLength()) != rows * vocab) {
    range_error(env, "logits has " + std::to_string(logits.ElementLength()) + " elements, expected rows*vocab = " +
                         std::to_string(rows * vocab));
  }
  if (!absent(info[3]) && !info[3].IsObject()) type_error(env, "options must be an object");
  Napi::Object opts = absent(info[3]) ? Napi::Object::New(env) : info[3].As<Napi::Object>();
  const int K = static_cast<int>(absent(field(opts, "topK")) ? 0 : integer_arg(env, field(opts, "topK"), "topK", 0, kMaxLogitTopK));
  const int threads = threads_option(env, field(opts, "threads"));
  if (impl == StatsImpl::kFused && !absent(field(opts, "scalar")) && field(opts, "scalar").ToBoolean()) impl = StatsImpl::kScalar;

  const int32_t* targets = nullptr;
  if (!absent(field(opts, "targets"))) {
    Napi::Int32Array t = int_array(env, field(opts, "targets"), "targets");
    if (static_cast<int64_t>(t.ElementLength()) != rows) range_error(env, "targets must have one id per row");
    for (int64_t r = 0; r < rows; ++r) {
      const int32_t id = t.Data()[r];
      if (id < -1 || id >= vocab) range_error(env, "target " + std::to_string(id) + " out of range [-1, vocab)");
    }
    targets = t.Data();
  }
  const float* ref = nullptr;
  if (!absent(field(opts, "ref"))) {
    Napi::Float32Array y = float_array(env, field(opts, "ref"), "ref");
    if (y.ElementLength() != logits.ElementLength()) range_error(env, "ref must have the same shape as logits");
    ref = y.Data();
  }

  const size_t R = static_cast<size_t>(rows);
  Napi::Object result = Napi::Object::New(env);
  auto put = [&](const char* name, Napi::Value v) { result.Set(name, v); };
  Napi::Float32Array max_logit = nan_floats(env, R), lse = nan_floats(env, R), entropy = nan_floats(env, R),
                     margin = nan_floats(env, R), chosen = nan_floats(env, R);
  Napi::Int32Array topk_ids = sentinel_ints(env, R * K);
  Napi::Float32Array topk_logits = nan_floats(env, R * K);
  Napi::Float32Array k1 = nan_floats(env, ref ? R : 0), k2 = nan_floats(env, ref ? R : 0), k3 = nan_floats(env, ref ? R : 0),
                     kl = nan_floats(env, ref ? R : 0);
  cpu::LogitStatsOut out{max_logit.Data(), lse.Data(), entropy.Data(), margin.Data(), targets ? chosen.Data() : nullptr,
                         K ? topk_ids.Data() : nullptr, K ? topk_logits.Data() : nullptr,
                         ref ? k1.Data() : nullptr, ref ? k2.Data() : nullptr, ref ? k3.Data() : nullptr,
                         ref ? kl.Data() : nullptr};
  cpu::ThreadPool& pool = pool_for(threads);
  switch (impl) {
    case StatsImpl::kFused: cpu::logit_stats(pool, logits.Data(), rows, vocab, vocab, targets, K, ref, out); break;
    case StatsImpl::kScalar: cpu::logit_stats_scalar(pool, logits.Data(), rows, vocab, vocab, targets, K, ref, out); break;
    case StatsImpl::kNaive: cpu::logit_stats_naive(pool, logits.Data(), rows, vocab, vocab, targets, K, ref, out); break;
  }
  put("maxLogit", max_logit);
  put("logsumexp", lse);
  put("entropy", entropy);
  put("margin", margin);
  put("chosenLogprob", targets ? Napi::Value(chosen) : env.Null());
  put("topkIds", topk_ids);
  put("topkLogits", topk_logits);
  put("k1", ref ? Napi::Value(k1) : env.Null());
  put("k2", ref ? Napi::Value(k2) : env.Null());
  put("k3", ref ? Napi::Value(k3) : env.Null());
  put("klExact", ref ? Napi::Value(kl) : env.Null());
  return result;
}

Napi::Value LogitStats(const Napi::CallbackInfo& info) { return LogitStatsWith(info, StatsImpl::kFused); }
Napi::Value NaiveLogitStats(const Napi::CallbackInfo& info) { return LogitStatsWith(info, StatsImpl::kNaive); }

// ---------------------------------------------------------------------------------------------
// Sampling

cpu::SamplingParams sampling_params(Napi::Env env, const Napi::Value& v) {
  if (!v.IsObject()) type_error(env, "params must be an object");
  Napi::Object o = v.As<Napi::Object>();
  cpu::SamplingParams p;
  p.temperature = static_cast<float>(number_field(o, "temperature", 1));
  if (!(p.temperature >= 0)) range_error(env, "temperature must be >= 0");
  Napi::Value k = field(o, "topK");
  p.top_k = absent(k) ? 0 : static_cast<int32_t>(integer_arg(env, k, "topK", 0, 2147483647));
  p.top_p = static_cast<float>(number_field(o, "topP", 1));
  if (!(p.top_p >= 0 && p.top_p <= 1)) range_error(env, "topP must be in [0, 1]");
  p.min_p = static_cast<float>(number_field(o, "minP", 0));
  if (!(p.min_p >= 0 && p.min_p <= 1)) range_error(env, "minP must be in [0, 1]");
  p.repetition_penalty = static_cast<float>(number_field(o, "repetitionPenalty", 1));
  if (!(p.repetition_penalty > 0)) range_error(env, "repetitionPenalty must be > 0");
  p.presence_penalty = static_cast<float>(number_field(o, "presencePenalty", 0));
  p.frequency_penalty = static_cast<float>(number_field(o, "frequencyPenalty", 0));
  if (!std::isfinite(p.presence_penalty) || !std::isfinite(p.frequency_penalty)) range_error(env, "penalties must be finite");
  p.seed = absent(field(o, "seed")) ? 0 : u64_arg(env, field(o, "seed"), "seed");
  p.stream = absent(field(o, "stream")) ? 0 : u64_arg(env, field(o, "stream"), "stream");
  return p;
}

// Optional Int32Array of token ids, each in [0, vocab).
std::vector<int32_t> id_list(Napi::Env env, const Napi::Value& v, const char* what, int64_t vocab) {
  if (absent(v)) return {};
  Napi::Int32Array a = int_array(env, v, what);
  std::vector<int32_t> ids(a.Data(), a.Data() + a.ElementLength());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab) range_error(env, std::string(what) + " id " + std::to_string(id) + " out of range [0, vocab)");
  }
  return ids;
}

struct SampleArgs {
  Napi::Float32Array logits;
  cpu::SamplingParams params;
  std::vector<int32_t> history, generated;
  std::vector<char> scratch;
  int32_t draw(uint64_t position) {
    return cpu::sample_token(logits.Data(), static_cast<int64_t>(logits.ElementLength()), params, position, history.data(),
                             static_cast<int64_t>(history.size()), generated.data(),
                             static_cast<int64_t>(generated.size()), scratch.data());
  }
};

SampleArgs sample_args(const Napi::CallbackInfo& info, int history_arg) {
  Napi::Env env = info.Env();
  SampleArgs a{float_array(env, info[0], "logits"), sampling_params(env, info[1]), {}, {}, {}};
  const int64_t vocab = static_cast<int64_t>(a.logits.ElementLength());
  if (vocab == 0) range_error(env, "logits must not be empty");
  a.history = id_list(env, info[history_arg], "history", vocab);
  a.generated = id_list(env, info[history_arg + 1], "generated", vocab);
  a.scratch.resize(cpu::sampling_scratch_bytes(vocab));
  return a;
}

Napi::Value SampleToken(const Napi::CallbackInfo& info) {
  SampleArgs a = sample_args(info, 3);
  uint64_t position = u64_arg(info.Env(), info[2], "position");
  return Napi::Number::New(info.Env(), a.draw(position));
}

Napi::Value SampleTokens(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  SampleArgs a = sample_args(info, 4);
  uint64_t first = u64_arg(env, info[2], "firstPosition");
  int64_t count = integer_arg(env, info[3], "count", 0, int64_t(1) << 31);
  Napi::Int32Array out = Napi::Int32Array::New(env, static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) out.Data()[i] = a.draw(first + static_cast<uint64_t>(i));
  return out;
}

// The split-row sampler's chunked procedure, run serially on the host (kernels/sampling_split.h):
// rows the split path takes only (T > 0, no top-k, no penalties).
Napi::Value SampleTokensSplit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Float32Array logits = float_array(env, info[0], "logits");
  const cpu::SamplingParams p = sampling_params(env, info[1]);
  uint64_t first = u64_arg(env, info[2], "firstPosition");
  int64_t count = integer_arg(env, info[3], "count", 0, int64_t(1) << 31);
  const int64_t vocab = static_cast<int64_t>(logits.ElementLength());
  const int chunks = static_cast<int>(integer_arg(env, info[4], "chunks", 1, std::max<int64_t>(vocab, 1)));
  if (!split::splits(p, vocab)) range_error(env, "the split sampler takes T > 0, no top-k, no penalties and vocab > 1");
  const float* z = logits.Data();
  auto w = [&](int64_t i) { return z[i] / p.temperature; };
  const split::SplitSelection sel = split::split_select_host(w, vocab, p, chunks);
  Napi::Int32Array out = Napi::Int32Array::New(env, static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    out.Data()[i] = split::split_draw_host(sel, w, vocab, chunks, sampling_uniform(p, first + static_cast<uint64_t>(i)));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Philox

uint32_t u32_element(Napi::Env env, const Napi::Value& arr, uint32_t i, const char* what) {
  Napi::Value v = arr.As<Napi::Object>().Get(i);
  return static_cast<uint32_t>(integer_arg(env, v, what, 0, 0xFFFFFFFFll));
}

void require_length(Napi::Env env, const Napi::Value& v, uint32_t n, const char* what) {
  if (!v.IsObject() || !v.As<Napi::Object>().Has("length") ||
      v.As<Napi::Object>().Get("length").ToNumber().Uint32Value() != n) {
    type_error(env, std::string(what) + " must be an array of " + std::to_string(n) + " u32 words");
  }
}

Napi::Value Philox(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  require_length(env, info[0], 4, "counter");
  require_length(env, info[1], 2, "key");
  Philox4x32 c{{u32_element(env, info[0], 0, "counter"), u32_element(env, info[0], 1, "counter"),
                u32_element(env, info[0], 2, "counter"), u32_element(env, info[0], 3, "counter")}};
  Philox4x32 r = philox4x32_10(c, u32_element(env, info[1], 0, "key"), u32_element(env, info[1], 1, "key"));
  Napi::Uint32Array out = Napi::Uint32Array::New(env, 4);
  for (uint32_t i = 0; i < 4; ++i) out[i] = r.v[i];
  return out;
}

Napi::Value Uniform01(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return Napi::Number::New(env, uniform01(u64_arg(env, info[0], "seed"), u64_arg(env, info[1], "stream"),
                                          u64_arg(env, info[2], "position")));
}

// ---------------------------------------------------------------------------------------------
// copyBytes, expf

Napi::TypedArray any_typed_array(Napi::Env env, const Napi::Value& v, const char* what) {
  if (!v.IsTypedArray()) type_error(env, std::string(what) + " must be a typed array");
  return v.As<Napi::TypedArray>();
}

char* typed_bytes(Napi::TypedArray a) { return static_cast<char*>(a.ArrayBuffer().Data()) + a.ByteOffset(); }

Napi::Value CopyBytes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::TypedArray src = any_typed_array(env, info[0], "src"), dst = any_typed_array(env, info[1], "dst");
  if (dst.ByteLength() < src.ByteLength()) range_error(env, "dst is smaller than src");
  const int threads = threads_option(env, info[2]);
  const char* s = typed_bytes(src);
  char* d = typed_bytes(dst);
  const int64_t bytes = static_cast<int64_t>(src.ByteLength());
  constexpr int64_t kChunk = 1 << 18;  // 256 KiB per task
  pool_for(threads).parallel_for((bytes + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1, int) {
    const int64_t begin = c0 * kChunk, end = std::min(bytes, c1 * kChunk);
    std::memcpy(d + begin, s + begin, static_cast<size_t>(end - begin));
  });
  return env.Undefined();
}

// Reads every byte of src once on `threads` threads (the floor of a step that only reads, such as
// decode's weight stream) and returns the XOR of its 32-bit little-endian words, so no read can
// be left out.
Napi::Value ReadBytes(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::TypedArray src = any_typed_array(env, info[0], "src");
  const int64_t bytes = static_cast<int64_t>(src.ByteLength());
  if (bytes % 8 != 0) range_error(env, "src must hold a whole number of 8-byte words, got " + std::to_string(bytes) + " bytes");
  const int threads = threads_option(env, info[1]);
  const char* s = typed_bytes(src);
  constexpr int64_t kChunk = 1 << 18;  // 256 KiB per task
  std::vector<uint64_t> folds(static_cast<size_t>(pool_for(threads).size()), 0);
  pool_for(threads).parallel_for((bytes + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1, int worker) {
    const int64_t begin = c0 * kChunk, end = std::min(bytes, c1 * kChunk);
    uint64_t lanes[8] = {};  // eight independent folds: one 64-byte line per round, vectorized
    int64_t i = begin;
    for (; i + 64 <= end; i += 64)
      for (int l = 0; l < 8; ++l) {
        uint64_t word;
        std::memcpy(&word, s + i + 8 * l, 8);
        lanes[l] ^= word;
      }
    uint64_t fold = 0;
    for (; i < end; i += 8) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      fold ^= word;
    }
    for (uint64_t lane : lanes) fold ^= lane;
    folds[static_cast<size_t>(worker)] ^= fold;
  });
  uint64_t fold = 0;
  for (uint64_t f : folds) fold ^= f;
  return Napi::Number::New(env, static_cast<double>(static_cast<uint32_t>(fold) ^ static_cast<uint32_t>(fold >> 32)));
}

Napi::Value Expf(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Float32Array x = float_array(env, info[0], "x");
  Napi::Float32Array y = Napi::Float32Array::New(env, x.ElementLength());
  cpu::exp_f32(x.Data(), y.Data(), static_cast<int64_t>(x.ElementLength()));
  return y;
}

// ---------------------------------------------------------------------------------------------
// Layer kernel pairs

Napi::Float32Array sized(Napi::Env env, const Napi::Value& v, const char* what, int64_t n) {
  Napi::Float32Array a = float_array(env, v, what);
  if (static_cast<int64_t>(a.ElementLength()) != n)
    range_error(env, std::string(what) + " has " + std::to_string(a.ElementLength()) + " elements, expected " + std::to_string(n));
  return a;
}

Napi::Float32Array zeros(Napi::Env env, size_t n) { return Napi::Float32Array::New(env, n); }

bool f32_accumulator(Napi::Env env, const Napi::Value& opts) {
  if (absent(opts)) return false;
  Napi::Value a = field(object_arg(env, opts, "options"), "accumulator");
  if (absent(a)) return false;
  const std::string s = a.ToString().Utf8Value();
  if (s != "f32" && s != "f64") range_error(env, "accumulator must be 'f32' or 'f64'");
  return s == "f32";
}

// rmsnorm(x, w, rows, n, eps, { accumulator? }) → y
Napi::Value Rmsnorm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int64_t rows = integer_arg(env, info[2], "rows", 1, 1 << 24), n = integer_arg(env, info[3], "n", 1, 1 << 24);
  auto x = sized(env, info[0], "x", rows * n);
  auto w = sized(env, info[1], "w", n);
  const float eps = static_cast<float>(number_arg(env, info[4], "eps"));
  const bool f32 = f32_accumulator(env, info[5]);
  Napi::Float32Array y = nan_floats(env, static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    if (f32) kernels::rmsnorm_row<float>(x.Data() + r * n, w.Data(), y.Data() + r * n, static_cast<int>(n), eps);
    else kernels::rmsnorm_row<double>(x.Data() + r * n, w.Data(), y.Data() + r * n, static_cast<int>(n), eps);
  }
  return y;
}

// rmsnormBackward(x, w, dy, rows, n, eps, { accumulator? }) → { dx, dw }
Napi::Value RmsnormBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int64_t rows = integer_arg(env, info[3], "rows", 1, 1 << 24), n = integer_arg(env, info[4], "n", 1, 1 << 24);
  auto x = sized(env, info[0], "x", rows * n);
  auto w = sized(env, info[1], "w", n);
  auto dy = sized(env, info[2], "dy", rows * n);
  const float eps = static_cast<float>(number_arg(env, info[5], "eps"));
  const bool f32 = f32_accumulator(env, info[6]);
  Napi::Float32Array dx = nan_floats(env, static_cast<size_t>(rows * n)), dw = zeros(env, static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * n;
    if (f32) kernels::rmsnorm_row_backward<float>(x.Data() + o, w.Data(), dy.Data() + o, dx.Data() + o, dw.Data(), static_cast<int>(n), eps, false);
    else kernels::rmsnorm_row_backward<double>(x.Data() + o, w.Data(), dy.Data() + o, dx.Data() + o, dw.Data(), static_cast<int>(n), eps, false);
  }
  Napi::Object out = Napi::Object::New(env);
  out.Set("dx", dx);
  out.Set("dw", dw);
  return out;
}

// rope(x, cos, sin, rows, headDim) / ropeInverse(...): each row of x rotated by its cos/sin row.
Napi::Value RopeWith(const Napi::CallbackInfo& info, bool inverse) {
  Napi::Env env = info.Env();
  const int64_t rows = integer_arg(env, info[3], "rows", 1, 1 << 24), d = integer_arg(env, info[4], "headDim", 1, 1 << 16);
  if (d % 2) range_error(env, "RoPE needs an even head size");
  auto x = sized(env, info[0], "x", rows * d);
  auto c = sized(env, info[1], "cos", rows * d / 2);
  auto sn = sized(env, info[2], "sin", rows * d / 2);
  Napi::Float32Array y = nan_floats(env, static_cast<size_t>(rows * d));
  std::memcpy(y.Data(), x.Data(), sizeof(float) * rows * d);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = y.Data() + r * d;
    if (inverse) kernels::rope_apply_inverse(row, c.Data() + r * d / 2, sn.Data() + r * d / 2, static_cast<int>(d));
    else kernels::rope_apply(row, c.Data() + r * d / 2, sn.Data() + r * d / 2, static_cast<int>(d));
  }
  return y;
}
Napi::Value Rope(const Napi::CallbackInfo& info) { return RopeWith(info, false); }
Napi::Value RopeInverse(const Napi::CallbackInfo& info) { return RopeWith(info, true); }

// swiglu(gate, up) → h
Napi::Value Swiglu(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto g = float_array(env, info[0], "gate");
  auto u = sized(env, info[1], "up", static_cast<int64_t>(g.ElementLength()));
  Napi::Float32Array h = nan_floats(env, g.ElementLength());
  kernels::swiglu_row(g.Data(), u.Data(), h.Data(), static_cast<int64_t>(g.ElementLength()));
  return h;
}

// loraMerge(W [out × in], A [rank × in], B [out × rank], out, in, rank, scale) → W + scale·B·A
// (kernels/lora.h, the arithmetic of the CUDA backend's merge, one element at a time)
Napi::Value LoraMerge(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const double out_d = number_arg(env, info[3], "out"), in_d = number_arg(env, info[4], "in"), rank_d = number_arg(env, info[5], "rank");
  for (double d : {out_d, in_d, rank_d})
    if (!(d >= 1 && d <= (1 << 20)) || d != static_cast<int64_t>(d)) throw std::out_of_range("out, in and rank must be integers in [1, 2^20]");
  const int64_t out = static_cast<int64_t>(out_d), in = static_cast<int64_t>(in_d);
  const int rank = static_cast<int>(rank_d);
  auto W = sized(env, info[0], "W", out * in);
  auto A = sized(env, info[1], "A", static_cast<int64_t>(rank) * in);
  auto B = sized(env, info[2], "B", out * rank);
  const float scale = static_cast<float>(number_arg(env, info[6], "scale"));
  Napi::Float32Array merged = nan_floats(env, static_cast<size_t>(out * in));
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i)
      merged.Data()[o * in + i] = kernels::lora_merged_element(W.Data()[o * in + i], B.Data() + o * rank, A.Data(), rank, in, i, scale);
  return merged;
}

// swigluBackward(gate, up, dh) → { dgate, dup }
Napi::Value SwigluBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto g = float_array(env, info[0], "gate");
  const int64_t n = static_cast<int64_t>(g.ElementLength());
  auto u = sized(env, info[1], "up", n);
  auto dh = sized(env, info[2], "dh", n);
  Napi::Float32Array dg = nan_floats(env, n), du = nan_floats(env, n);
  kernels::swiglu_row_backward(g.Data(), u.Data(), dh.Data(), dg.Data(), du.Data(), n);
  Napi::Object out = Napi::Object::New(env);
  out.Set("dgate", dg);
  out.Set("dup", du);
  return out;
}

struct AttentionArgs {
  Napi::Float32Array q, keys, values;
  int64_t stride;
  int n_keys, head_dim;
  float scale;
};

AttentionArgs attention_args(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const int64_t stride = integer_arg(env, info[3], "stride", 1, 1 << 20);
  const int n = static_cast<int>(integer_arg(env, info[4], "nKeys", 1, 1 << 20));
  const int d = static_cast<int>(integer_arg(env, info[5], "headDim", 1, stride));
  return {sized(env, info[0], "q", d), sized(env, info[1], "keys", n * stride), sized(env, info[2], "values", n * stride), stride, n, d,
          static_cast<float>(number_arg(env, info[6], "scale"))};
}

// attentionRow(q, keys, values, stride, nKeys, headDim, scale, { online? }) → out
Napi::Value AttentionRow(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  AttentionArgs a = attention_args(info);
  const bool online = !absent(info[7]) && bool_field(object_arg(env, info[7], "options"), "online", false);
  Napi::Float32Array out = nan_floats(env, static_cast<size_t>(a.head_dim));
  if (online) {
    kernels::attention_row_online(a.q.Data(), a.keys.Data(), a.values.Data(), a.stride, a.n_keys, a.head_dim, a.scale, out.Data(), cpu::dot);
  } else {
    std::vector<float> probs(static_cast<size_t>(a.n_keys));
    kernels::attention_row(a.q.Data(), a.keys.Data(), a.values.Data(), a.stride, a.n_keys, a.head_dim, a.scale, probs.data(), out.Data(),
                           cpu::dot, cpu::axpy);
  }
  return out;
}

// attentionRowBackward(q, keys, values, stride, nKeys, headDim, scale, dout) → { dq, dk, dv } (dk, dv [nKeys × stride])
Napi::Value AttentionRowBackward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  AttentionArgs a = attention_args(info);
  auto dout = sized(env, info[7], "dout", a.head_dim);
  Napi::Float32Array dq = nan_floats(env, static_cast<size_t>(a.head_dim));
  Napi::Float32Array dk = zeros(env, static_cast<size_t>(a.n_keys * a.stride)), dv = zeros(env, static_cast<size_t>(a.n_keys * a.stride));
  std::vector<float> probs(static_cast<size_t>(a.n_keys)), dprobs(static_cast<size_t>(a.n_keys));
  kernels::attention_row_backward(a.q.Data(), a.keys.Data(), a.values.Data(), a.stride, a.n_keys, a.head_dim, a.scale, dout.Data(),
                                  probs.data(), dprobs.data(), dq.Data(), dk.Data(), dv.Data(), 0, cpu::dot, cpu::axpy);
  Napi::Object out = Napi::Object::New(env);
  out.Set("dq", dq);
  out.Set("dk", dk);
  out.Set("dv", dv);
  return out;
}

}  // namespace

void RegisterKernelBindings(Napi::Env env, Napi::Object exports) {
  Napi::Object k = Napi::Object::New(env);
  k.Set("logitStats", function<LogitStats>(env, "logitStats"));
  k.Set("naiveLogitStats", function<NaiveLogitStats>(env, "naiveLogitStats"));
  k.Set("sampleToken", function<SampleToken>(env, "sampleToken"));
  k.Set("sampleTokens", function<SampleTokens>(env, "sampleTokens"));
  k.Set("sampleTokensSplit", function<SampleTokensSplit>(env, "sampleTokensSplit"));
  k.Set("philox", function<Philox>(env, "philox"));
  k.Set("uniform01", function<Uniform01>(env, "uniform01"));
  k.Set("copyBytes", function<CopyBytes>(env, "copyBytes"));
  k.Set("readBytes", function<ReadBytes>(env, "readBytes"));
  k.Set("expf", function<Expf>(env, "expf"));
  k.Set("rmsnorm", function<Rmsnorm>(env, "rmsnorm"));
  k.Set("rmsnormBackward", function<RmsnormBackward>(env, "rmsnormBackward"));
  k.Set("rope", function<Rope>(env, "rope"));
  k.Set("ropeInverse", function<RopeInverse>(env, "ropeInverse"));
  k.Set("swiglu", function<Swiglu>(env, "swiglu"));
  k.Set("swigluBackward", function<SwigluBackward>(env, "swigluBackward"));
  k.Set("loraMerge", function<LoraMerge>(env, "loraMerge"));
  k.Set("attentionRow", function<AttentionRow>(env, "attentionRow"));
  k.Set("attentionRowBackward", function<AttentionRowBackward>(env, "attentionRowBackward"));
  k.Set("maxTopK", kMaxLogitTopK);
  exports.Set("kernels", k);
}

}  // namespace ad::addon
