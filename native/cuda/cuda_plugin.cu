// The plugin's one exported symbol, ad_cuda_plugin_api(): the C function table of plugin_abi.h
// over CudaModel / CudaCache. Every entry catches C++ exceptions and reports them through
// last_error(); nothing here aborts the host process.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/device_info.h"
#include "cuda/device_profiler.h"
#include "cuda/model_cuda.h"
#include "cuda/ops.h"
#include "cuda/plugin_abi.h"

struct ad_cuda_model {
  std::unique_ptr<ad::cuda::CudaModel> impl;
};
struct ad_cuda_cache {
  std::unique_ptr<ad::cuda::CudaCache> impl;
  ad_cuda_model* owner;
};

namespace {

thread_local std::string g_last_error;

template <class F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    g_last_error = e.what();
  } catch (...) {
    g_last_error = "unknown error in the CUDA plugin";
  }
  return -1;
}

void copy_str(char* dst, size_t cap, const std::string& s) {
  if (!dst || cap == 0) return;
  size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

const char* last_error() { return g_last_error.c_str(); }

int probe(ad_cuda_probe* out) {
  return guarded([&] {
    std::memset(out, 0, sizeof(*out));
    ad::cuda::Probe p = ad::cuda::probe_devices();
    out->available = p.available ? 1 : 0;
    copy_str(out->reason, sizeof(out->reason), p.reason);
    out->runtime_version = p.runtime_version;
    out->driver_version = p.driver_version;
    out->device_count = static_cast<int32_t>(std::min<size_t>(p.devices.size(), 16));
    for (int i = 0; i < out->device_count; ++i) {
      const auto& d = p.devices[i];
      copy_str(out->devices[i].name, sizeof(out->devices[i].name), d.name);
      out->devices[i].total_memory = d.total_memory;
      out->devices[i].major = d.major;
      out->devices[i].minor = d.minor;
      out->devices[i].multiprocessors = d.multiprocessors;
    }
    if (p.available && ad::cuda::gemm_init() == cudaSuccess) copy_str(out->gemm_path, sizeof(out->gemm_path), ad::cuda::gemm_path());
  });
}

ad::model::Config to_config(const ad_cuda_config& c) {
  ad::model::Config m;
  m.vocab = c.vocab;
  m.hidden = c.hidden;
  m.intermediate = c.intermediate;
  m.layers = c.layers;
  m.heads = c.heads;
  m.kv_heads = c.kv_heads;
  m.head_dim = c.head_dim;
  m.rms_eps = c.rms_eps;
  m.rope_theta = c.rope_theta;
  m.rope_scaling = {c.rope_scaling != 0, c.rope_factor, c.rope_low_freq_factor, c.rope_high_freq_factor, c.rope_original_max_position};
  m.tie_embeddings = c.tie_embeddings != 0;
  m.qkv_bias = c.qkv_bias != 0;
  m.o_bias = c.o_bias != 0;
  m.qk_norm = c.qk_norm != 0;
  m.score_labels = c.score_labels;
  return m;
}

int model_create(const ad_cuda_config* cfg, ad_cuda_model** out) {
  *out = nullptr;
  return guarded([&] {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(std::string("no usable CUDA device: ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
    }
    if (cfg->device < 0 || cfg->device >= count)
      throw std::invalid_argument("CUDA device " + std::to_string(cfg->device) + " does not exist (" + std::to_string(count) + " visible)");
    auto m = std::make_unique<ad_cuda_model>();
    m->impl = std::make_unique<ad::cuda::CudaModel>(to_config(*cfg), cfg->device);
    *out = m.release();
  });
}

int model_set_tensor(ad_cuda_model* m, const char* name, const int64_t* shape, int32_t ndim, const float* data) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->set_tensor(name, std::vector<int64_t>(shape, shape + ndim), data);
  });
}

int model_finalize(ad_cuda_model* m) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->finalize();
  });
}

void model_destroy(ad_cuda_model* m) {
  if (!m) return;
  try {
    delete m;
  } catch (...) {
  }
}

int64_t model_parameter_bytes(ad_cuda_model* m) {
  try {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    return m->impl->parameter_bytes();
  } catch (...) {
    return -1;
  }
}

int cache_create(ad_cuda_model* m, int32_t slots, int32_t capacity, ad_cuda_cache** out) {
  *out = nullptr;
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    auto c = std::make_unique<ad_cuda_cache>();
    c->impl = std::make_unique<ad::cuda::CudaCache>(*m->impl, slots, capacity);
    c->owner = m;
    *out = c.release();
  });
}

void cache_destroy(ad_cuda_cache* c) {
  if (!c) return;
  try {
    std::lock_guard<std::mutex> lock(c->owner->impl->mutex());
    c->owner->impl->activate();
    c->impl.reset();
  } catch (...) {
  }
  delete c;
}

int cache_copy_prefix(ad_cuda_cache* c, int32_t src, int32_t dst, int32_t len) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(c->owner->impl->mutex());
    c->impl->copy_prefix(src, dst, len);
  });
}

int cache_truncate(ad_cuda_cache* c, int32_t slot, int32_t len) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(c->owner->impl->mutex());
    c->impl->truncate(slot, len);
  });
}

int32_t cache_length(ad_cuda_cache* c, int32_t slot) {
  try {
    std::lock_guard<std::mutex> lock(c->owner->impl->mutex());  // a step may be appending
    if (slot < 0 || slot >= c->impl->slots()) return -1;
    return c->impl->length(slot);
  } catch (...) {
    return -1;
  }
}

int64_t cache_bytes(ad_cuda_cache* c) { return c->impl->bytes(); }

int step(ad_cuda_model* m, ad_cuda_cache* c, ad_cuda_step* s) {
  return guarded([&] {
    if (c->owner != m) throw std::invalid_argument("this KV cache belongs to another model");
    ad::cuda::CudaModel* ref = s->ref_model ? s->ref_model->impl.get() : nullptr;
    ad::cuda::CudaCache* rc = s->ref_cache ? s->ref_cache->impl.get() : nullptr;
    if (ref && s->ref_cache && s->ref_cache->owner != s->ref_model) throw std::invalid_argument("reference.cache belongs to another model");
    if (ref && rc == c->impl.get()) throw std::invalid_argument("the reference needs its own KV cache");
    if (ref && ref != m->impl.get()) {
      std::unique_lock<std::mutex> a(m->impl->mutex(), std::defer_lock), b(ref->mutex(), std::defer_lock);
      std::lock(a, b);
      m->impl->step(*c->impl, *s, ref, rc);
    } else {
      std::lock_guard<std::mutex> lock(m->impl->mutex());
      m->impl->step(*c->impl, *s, ref, rc);
    }
  });
}

int set_trainable_adapters(ad_cuda_model* m, int32_t base, const int32_t* adapters, int32_t n_adapters) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    if (n_adapters < 0 || (n_adapters > 0 && !adapters)) throw std::invalid_argument("set_trainable_adapters: bad adapter list");
    std::vector<int> list;
    for (int32_t i = 0; i < n_adapters; ++i) {
      if (adapters[i] < 0 || adapters[i] >= m->impl->adapter_count()) throw std::out_of_range("trainable adapter index out of range");
      list.push_back(adapters[i]);
    }
    m->impl->set_trainable(base != 0, list);
  });
}

// ABI 4: with `lora`, every adapter trains.
int set_trainable(ad_cuda_model* m, int32_t base, int32_t lora) {
  std::vector<int32_t> all;
  if (lora) {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    for (int k = 0; k < m->impl->adapter_count(); ++k) all.push_back(k);
  }
  return set_trainable_adapters(m, base, all.data(), static_cast<int32_t>(all.size()));
}

int train_forward(ad_cuda_model* m, ad_cuda_train_forward* f) {
  return guarded([&] {
    ad::cuda::CudaModel* ref = f->ref_model ? f->ref_model->impl.get() : nullptr;
    if (ref && ref != m->impl.get()) {
      std::unique_lock<std::mutex> a(m->impl->mutex(), std::defer_lock), b(ref->mutex(), std::defer_lock);
      std::lock(a, b);
      m->impl->train_forward(*f, ref);
    } else {
      std::lock_guard<std::mutex> lock(m->impl->mutex());
      m->impl->train_forward(*f, ref);
    }
  });
}

int train_backward(ad_cuda_model* m, const float* a, const float* b, int64_t rows) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->train_backward(a, b, rows);
  });
}

int optimizer_step(ad_cuda_model* m, ad_cuda_optimizer* o) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->optimizer_step(*o);
  });
}

int zero_grad(ad_cuda_model* m) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->zero_grad();
  });
}

// No exception may cross the C ABI: the counts answer −1 on failure (callers treat it as an error).
int32_t tensor_count(ad_cuda_model* m) {
  try {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    return static_cast<int32_t>(m->impl->tensor_names().size());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return -1;
  }
}

int tensor_info(ad_cuda_model* m, int32_t index, char* name, int32_t cap, int64_t* shape4, int32_t* ndim) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    auto names = m->impl->tensor_names();
    if (index < 0 || index >= static_cast<int32_t>(names.size())) throw std::out_of_range("tensor index out of range");
    copy_str(name, static_cast<size_t>(cap), names[index]);
    const auto& s = m->impl->tensor_shape(names[index]);
    if (s.size() > 4) throw std::runtime_error("tensor of more than 4 dimensions");
    *ndim = static_cast<int32_t>(s.size());
    for (size_t i = 0; i < s.size(); ++i) shape4[i] = s[i];
  });
}

int tensor_read(ad_cuda_model* m, const char* name, float* out, int64_t n) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->read_tensor(name, out, n);
  });
}

int tensor_write(ad_cuda_model* m, const char* name, const float* data, int64_t n) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->write_tensor(name, data, n);
  });
}

int32_t gradient_count(ad_cuda_model* m) {
  try {
    std::lock_guard<std::mutex> lock(m->impl->mutex());  // a backward may be creating gradients
    return static_cast<int32_t>(m->impl->gradient_names().size());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return -1;
  }
}

int gradient_read(ad_cuda_model* m, int32_t index, char* name, int32_t cap, float* out, int64_t n, int64_t* numel) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    auto names = m->impl->gradient_names();
    if (index < 0 || index >= static_cast<int32_t>(names.size())) throw std::out_of_range("gradient index out of range");
    copy_str(name, static_cast<size_t>(cap), names[index]);
    *numel = m->impl->read_gradient(names[index], out, n);
  });
}

int32_t moment_count(ad_cuda_model* m) {
  try {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    return static_cast<int32_t>(m->impl->moment_names().size());
  } catch (const std::exception& e) {
    g_last_error = e.what();
    return -1;
  }
}

int moment_read(ad_cuda_model* m, int32_t index, char* name, int32_t cap, float* m_out, float* v_out, int64_t n, int64_t* numel) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    auto names = m->impl->moment_names();
    if (index < 0 || index >= static_cast<int32_t>(names.size())) throw std::out_of_range("optimizer state index out of range");
    copy_str(name, static_cast<size_t>(cap), names[index]);
    *numel = m->impl->read_moments(names[index], m_out, v_out, n);
  });
}

int moments_clear(ad_cuda_model* m) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->clear_moments();
  });
}

int moment_write(ad_cuda_model* m, const char* name, const float* m_in, const float* v_in, int64_t n) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    m->impl->write_moments(name, m_in, v_in, n);
  });
}

void profiler_enable(int32_t on) { ad::cuda::device_profiler_enable(on != 0); }
void profiler_reset() { ad::cuda::device_profiler_reset(); }
// The profile's rows into the caller's array (up to `capacity`, `more` filling a row's other
// fields); returns how many rows there are.
template <class Row, class More>
int32_t read_profile(Row* rows, int32_t capacity, More&& more) {
  const auto all = ad::cuda::device_profiler_snapshot();
  for (int32_t i = 0; i < capacity && i < static_cast<int32_t>(all.size()); ++i) {
    copy_str(rows[i].name, sizeof rows[i].name, all[i].name);
    rows[i].calls = all[i].calls;
    rows[i].total_ms = all[i].total_ms;
    more(rows[i], all[i]);
  }
  return static_cast<int32_t>(all.size());
}

int32_t profiler_read(ad_cuda_profile_row* rows, int32_t capacity) {
  return read_profile(rows, capacity, [](ad_cuda_profile_row&, const ad::cuda::DeviceProfileRow&) {});
}

int32_t profiler_read_work(ad_cuda_profile_work_row* rows, int32_t capacity) {
  return read_profile(rows, capacity, [](ad_cuda_profile_work_row& r, const ad::cuda::DeviceProfileRow& d) {
    r.bytes = d.bytes;
    r.flops = d.flops;
  });
}

int profiler_floors(int32_t device, double* copy_bytes_per_second, double* gemm_flops_per_second) {
  return guarded([&] {
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
      const cudaError_t e = cudaGetLastError();
      throw std::runtime_error("device " + std::to_string(device) + ": " + cudaGetErrorString(e));
    }
    try {
      const ad::cuda::DeviceFloors f = ad::cuda::measure_device_floors();
      *copy_bytes_per_second = f.copy_bytes_per_second;
      *gemm_flops_per_second = f.gemm_flops_per_second;
    } catch (...) {
      cudaSetDevice(current);
      throw;
    }
    cudaSetDevice(current);
  });
}

int memory_info(int32_t device, ad_cuda_memory* out) {
  return guarded([&] {
    std::memset(out, 0, sizeof(*out));
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) throw std::runtime_error(cudaGetErrorString(cudaGetLastError()));
    cudaError_t err = cudaSetDevice(device);
    size_t free_bytes = 0, total_bytes = 0;
    if (err == cudaSuccess) err = cudaMemGetInfo(&free_bytes, &total_bytes);
    cudaSetDevice(current);
    if (err != cudaSuccess) {
      cudaGetLastError();
      throw std::runtime_error(std::string("cudaMemGetInfo on device ") + std::to_string(device) + ": " + cudaGetErrorString(err));
    }
    out->free_bytes = free_bytes;
    out->total_bytes = total_bytes;
    out->allocated_bytes = ad::cuda::device_arrays_allocated();
    out->peak_allocated_bytes = ad::cuda::device_arrays_peak();
  });
}

void memory_reset_peak() { ad::cuda::device_arrays_reset_peak(); }

// One locked call on the model (the LoRA and score-head entries).
template <class F>
int locked(ad_cuda_model* m, F&& f) {
  return guarded([&] {
    std::lock_guard<std::mutex> lock(m->impl->mutex());
    f(*m->impl);
  });
}

int lora_attach_named(ad_cuda_model* m, const char* name, int32_t rank, float alpha, const int32_t* targets, int32_t n_targets) {
  return locked(m, [&](ad::cuda::CudaModel& model) {
    if (!name || !*name) throw std::invalid_argument("an adapter needs a name");
    std::vector<ad::model::Linear> which;
    for (int32_t i = 0; i < n_targets; ++i) {
      if (targets[i] < 0 || targets[i] >= ad::model::kNumLinear) throw std::out_of_range("LoRA target out of range");
      which.push_back(static_cast<ad::model::Linear>(targets[i]));
    }
    model.attach_lora(name, rank, alpha, which);
  });
}

int lora_attach(ad_cuda_model* m, int32_t rank, float alpha, const int32_t* targets, int32_t n_targets) {
  return lora_attach_named(m, ad::model::default_adapter().c_str(), rank, alpha, targets, n_targets);
}

int lora_enable(ad_cuda_model* m, int32_t on) {
  return locked(m, [&](ad::cuda::CudaModel& model) { model.set_lora_enabled(on != 0); });
}

int lora_merge(ad_cuda_model* m) {
  return locked(m, [&](ad::cuda::CudaModel& model) { model.merge_lora(); });
}

int tensor_read_merged(ad_cuda_model* m, const char* name, float* out, int64_t n) {
  return locked(m, [&](ad::cuda::CudaModel& model) { model.read_tensor_merged(name, out, n); });
}

int score_head_attach(ad_cuda_model* m, int32_t labels) {
  return locked(m, [&](ad::cuda::CudaModel& model) { model.attach_score_head(labels); });
}

int score_forward_adapters(ad_cuda_model* m, const int32_t* tokens, const int32_t* lengths, int32_t n, const int32_t* adapters,
                           int32_t tape, float* scores, int64_t capacity) {
  return locked(m, [&](ad::cuda::CudaModel& model) { model.score_forward(tokens, lengths, n, adapters, tape != 0, scores, capacity); });
}

int score_forward(ad_cuda_model* m, const int32_t* tokens, const int32_t* lengths, int32_t n, int32_t tape, float* scores,
                  int64_t capacity) {
  return score_forward_adapters(m, tokens, lengths, n, nullptr, tape, scores, capacity);
}

int score_backward(ad_cuda_model* m, const float* d_scores, int64_t n) {
  return locked(m, [&](ad::cuda::CudaModel& model) { model.score_backward(d_scores, n); });
}

const ad_cuda_api kApi = {
    AD_CUDA_ABI_VERSION, sizeof(ad_cuda_api), last_error, probe, model_create, model_set_tensor, model_finalize,
    model_destroy, model_parameter_bytes, cache_create, cache_destroy, cache_copy_prefix, cache_truncate, cache_length,
    cache_bytes, step, set_trainable, train_forward, train_backward, optimizer_step, zero_grad, tensor_count, tensor_info,
    tensor_read, tensor_write, gradient_count, gradient_read, profiler_enable, profiler_reset, profiler_read,
    moment_count, moment_read, moments_clear, moment_write, memory_info, memory_reset_peak, lora_attach, lora_enable,
    lora_merge, tensor_read_merged, score_head_attach, score_forward, score_backward, lora_attach_named,
    set_trainable_adapters, score_forward_adapters, profiler_read_work, profiler_floors,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ad_cuda_api* ad_cuda_plugin_api(void) { return &kApi; }
