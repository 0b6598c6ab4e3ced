// CudaEngine: the Engine verbs translated to the plugin's C ABI, one call each; the work happens
// behind the ABI (native/cuda/cuda_plugin.cu over model_cuda.cu). The capability matrix row of
// the device backend lives here, in support().
#include "addon/cuda_engine.h"

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>

#include "addon/cuda_plugin.h"
#include "model/initial_values.h"
#include "model/loader.h"

namespace ad::addon {
namespace {

using model::Verb;

// Throws std::runtime_error with the plugin's message when rc != 0.
void plugin_check(const ad_cuda_api* api, int rc, const std::string& what) {
  if (rc != 0) throw std::runtime_error(what + ": " + api->last_error());
}

ad_cuda_config abi_config(const model::Config& c, int device) {
  ad_cuda_config a{};
  a.vocab = c.vocab;
  a.hidden = c.hidden;
  a.intermediate = c.intermediate;
  a.layers = c.layers;
  a.heads = c.heads;
  a.kv_heads = c.kv_heads;
  a.head_dim = c.head_dim;
  a.rms_eps = c.rms_eps;
  a.rope_theta = c.rope_theta;
  a.rope_scaling = c.rope_scaling.enabled ? 1 : 0;
  a.rope_factor = c.rope_scaling.factor;
  a.rope_low_freq_factor = c.rope_scaling.low_freq_factor;
  a.rope_high_freq_factor = c.rope_scaling.high_freq_factor;
  a.rope_original_max_position = c.rope_scaling.original_max_position;
  a.tie_embeddings = c.tie_embeddings;
  a.qkv_bias = c.qkv_bias;
  a.o_bias = c.o_bias;
  a.qk_norm = c.qk_norm;
  a.device = device;
  a.score_labels = c.score_labels;
  return a;
}

class CudaEngine;

class CudaCache final : public model::Cache {
 public:
  CudaCache(std::shared_ptr<CudaEngine> owner, ad_cuda_cache* c, int slots, int capacity)
      : engine(std::move(owner)), handle(c), slots_(slots), capacity_(capacity) {}
  ~CudaCache() override;
  const model::Engine* owner() const override;
  int slots() const override { return slots_; }
  int capacity() const override { return capacity_; }
  int length(int slot) override;
  void copy_prefix(int src, int dst, int len) override;
  void truncate(int slot, int len) override;
  int64_t bytes() override;
  model::CacheCounters counters() override { return {capacity_, slots_, 0, slots_ ? bytes() / slots_ : 0, 0, 0}; }  // the slot layout

  std::shared_ptr<CudaEngine> engine;  // a cache keeps its model alive
  ad_cuda_cache* handle;

 private:
  int slots_, capacity_;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;
  int64_t size = 1;
};

class CudaEngine final : public model::Engine {
 public:
  CudaEngine(const ad_cuda_api* api, const model::Config& cfg, int device) : api(api), cfg_(cfg), device_(device) {}
  ~CudaEngine() override {
    if (m) api->model_destroy(m);
  }

  const model::Backend& backend() const override { return cuda_backend(); }
  const model::Config& config() const override { return cfg_; }
  model::EngineDescription describe() override { return {api->model_parameter_bytes(m), 0, device_}; }
  void check(int rc, const std::string& what) const { plugin_check(api, rc, what); }

  const ad_cuda_api* api;
  ad_cuda_model* m = nullptr;

 protected:
  std::shared_ptr<model::Cache> do_create_cache(int slots, int capacity, model::CacheLayout) override {  // the slot layout (no kPagedCache)
    ad_cuda_cache* c = nullptr;
    check(api->cache_create(m, slots, capacity, &c),
          "cannot create a device KV cache of " + std::to_string(slots) + " × " + std::to_string(capacity));
    return std::make_shared<CudaCache>(std::static_pointer_cast<CudaEngine>(shared_from_this()), c, slots, capacity);
  }

  void do_step(model::Cache& cache, const model::StepRequest& r, model::StepResult& res) override {
    std::vector<ad_cuda_entry> entries;
    int64_t R = 0;
    for (const auto& e : r.batch) {
      entries.push_back({e.slot, e.count, e.out_mode, e.out_from, e.adapter});
      R += model::output_rows(e);
    }
    std::vector<ad_cuda_sampling> sampling;
    for (const auto& s : r.sampling) {
      const SamplingParams& p = s.params;
      sampling.push_back({p.temperature, p.top_p, p.min_p, p.repetition_penalty, p.presence_penalty, p.frequency_penalty, p.top_k,
                          s.prompt_length, p.seed, p.stream});
    }
    const bool ref = r.reference != nullptr;
    res.prepare(R, r.topk, cfg_.vocab, ref, r.return_logits);
    ad_cuda_step s{};
    s.entries = entries.data();
    s.n_entries = static_cast<int32_t>(entries.size());
    s.tokens = r.tokens.data();
    s.n_tokens = static_cast<int64_t>(r.tokens.size());
    s.targets = r.targets.empty() ? nullptr : r.targets.data();
    s.sampling = sampling.empty() ? nullptr : sampling.data();
    s.topk = r.topk;
    s.return_logits = r.return_logits;
    s.ref_model = ref ? static_cast<CudaEngine*>(r.reference)->m : nullptr;
    s.ref_cache = ref ? static_cast<CudaCache*>(r.reference_cache)->handle : nullptr;
    s.rows_capacity = R;
    s.out_tokens = res.tokens.data();
    s.chosen_logprob = res.chosen.data();
    s.logsumexp = res.lse.data();
    s.entropy = res.entropy.data();
    s.max_logit = res.max_logit.data();
    s.margin = res.margin.data();
    s.topk_ids = r.topk ? res.topk_ids.data() : nullptr;
    s.topk_logits = r.topk ? res.topk_logits.data() : nullptr;
    s.k1 = ref ? res.k1.data() : nullptr;
    s.k2 = ref ? res.k2.data() : nullptr;
    s.k3 = ref ? res.k3.data() : nullptr;
    s.kl_exact = ref ? res.kl.data() : nullptr;
    s.logits = r.return_logits ? res.logits.data() : nullptr;
    check(api->step(m, static_cast<CudaCache&>(cache).handle, &s), "device step");
    res.rows = s.rows;
  }

  void do_set_trainable(bool base, const std::vector<int>& adapters) override {
    const std::vector<int32_t> list(adapters.begin(), adapters.end());
    check(api->set_trainable_adapters(m, base, list.data(), static_cast<int32_t>(list.size())), "selecting the trainable tensors");
  }
  void do_zero_grad() override { check(api->zero_grad(m), "zeroing the gradients"); }

  void do_train_forward(const model::TrainForwardRequest& r, model::TrainForwardResult& out) override {
    const model::TrainSequences& q = r.sequences;
    const int64_t rows = q.completion_rows();
    const bool ref = r.reference || r.reference_lora_off;
    out.logp.assign(rows, NAN);
    out.entropy.assign(rows, NAN);
    if (ref) out.ref_logp.assign(rows, NAN);
    ad_cuda_train_forward f{};
    f.tokens = q.tokens.data();
    f.lengths = q.lengths.data();
    f.prompt_lengths = q.prompt_lengths.data();
    f.n_sequences = static_cast<int32_t>(q.lengths.size());
    f.checkpoint = q.checkpoint;
    f.ref_model = r.reference ? static_cast<CudaEngine*>(r.reference)->m : nullptr;
    f.ref_lora_off = r.reference_lora_off ? 1 : 0;
    f.rows_capacity = rows;
    f.logp = out.logp.data();
    f.entropy = out.entropy.data();
    f.ref_logp = ref ? out.ref_logp.data() : nullptr;
    f.adapters = q.adapters.empty() ? nullptr : q.adapters.data();
    check(api->train_forward(m, &f), "device training forward");
  }

  void do_train_backward(const std::vector<float>& a, const std::vector<float>& b) override {
    check(api->train_backward(m, a.data(), b.data(), static_cast<int64_t>(a.size())), "device training backward");
  }

  model::OptimizerResult do_optimizer_step(const model::OptimizerRequest& r) override {
    ad_cuda_optimizer o{};
    o.lr = r.lr;
    o.beta1 = r.beta1;
    o.beta2 = r.beta2;
    o.eps = r.eps;
    o.weight_decay = r.weight_decay;
    o.step = r.step;
    o.clip_grad_norm = r.clip_grad_norm;
    check(api->optimizer_step(m, &o), "device optimizer step");
    return {o.grad_norm, o.skipped != 0, o.parameters};
  }

  // The gradients live in the plugin's device buffers, which its C ABI does not hand out yet:
  // NCCL's all-reduce (nccl_collective.cpp) cannot reach them, so data parallelism past one rank
  // runs on the CPU for now (`evolve --gpus N` refuses N > 1 before starting).
  void do_reduce_gradients(collective::Collective&) override {
    throw model::UnsupportedVerb(backend().name(), model::Verb::kGradients, "reducing gradients across ranks needs the CUDA plugin's gradient buffers, which its C ABI does not hand out to the NCCL collective yet; use --ranks N on the CPU");
  }

  // As the CPU backend: base tensors sorted, then LoRA A and B by (adapter, layer, linear); with
  // merge_lora, the base tensors with their adapter folded in and no adapters.
  std::vector<model::TensorCopy> do_export_tensors(bool merge_lora) override {
    if (merge_lora && !has_lora_) throw std::invalid_argument("this model has no LoRA adapters to merge");
    std::vector<model::TensorCopy> out;
    std::map<std::string, const TensorInfo*> adapters;
    const std::vector<TensorInfo> all = tensor_list();
    for (const TensorInfo& t : all) {
      if (is_adapter(t.name)) {
        adapters[t.name] = &t;
        continue;
      }
      model::TensorCopy c{t.name, t.shape, std::vector<float>(static_cast<size_t>(t.size))};
      if (merge_lora)
        check(api->tensor_read_merged(m, t.name.c_str(), c.data.data(), t.size), "reading " + t.name + " with its adapter merged");
      else
        check(api->tensor_read(m, t.name.c_str(), c.data.data(), t.size), "reading " + t.name);
      out.push_back(std::move(c));
    }
    if (merge_lora) return out;
    for (const std::string& adapter : adapter_names())
      for (int l = 0; l < cfg_.layers; ++l)
        for (int w = 0; w < model::kNumLinear; ++w)
          for (const std::string& name : {model::lora_a_name(l, static_cast<model::Linear>(w), adapter),
                                           model::lora_b_name(l, static_cast<model::Linear>(w), adapter)}) {
            auto it = adapters.find(name);
            if (it == adapters.end()) continue;
            model::TensorCopy c{name, it->second->shape, std::vector<float>(static_cast<size_t>(it->second->size))};
            check(api->tensor_read(m, name.c_str(), c.data.data(), it->second->size), "reading " + name);
            out.push_back(std::move(c));
          }
    return out;
  }

  std::vector<model::ParameterInfo> do_parameters() override {
    std::vector<model::ParameterInfo> out;
    for (const TensorInfo& t : tensor_list()) out.push_back({t.name, t.size});
    return out;
  }

  void do_import_tensors(const std::vector<model::TensorView>& tensors) override {
    for (const auto& t : tensors) check(api->tensor_write(m, t.name.c_str(), t.data, t.size), "writing " + t.name);
  }

  std::vector<model::TensorCopy> do_export_gradients() override {
    std::vector<model::TensorCopy> out;
    const int32_t n = api->gradient_count(m);
    if (n < 0) check(-1, "listing the gradients");
    for (int32_t i = 0; i < n; ++i) {
      char name[512];
      int64_t numel = 0;
      check(api->gradient_read(m, i, name, sizeof(name), nullptr, 0, &numel), "listing the gradients");
      model::TensorCopy c{name, {numel}, std::vector<float>(static_cast<size_t>(numel))};
      check(api->gradient_read(m, i, name, sizeof(name), c.data.data(), numel, &numel), std::string("reading the gradient of ") + name);
      out.push_back(std::move(c));
    }
    return out;
  }

  std::vector<model::MomentsCopy> do_export_optimizer_state() override {
    std::vector<model::MomentsCopy> out;
    const int32_t n = api->moment_count(m);
    if (n < 0) check(-1, "listing the optimizer state");
    for (int32_t i = 0; i < n; ++i) {
      char name[512];
      int64_t numel = 0;
      check(api->moment_read(m, i, name, sizeof(name), nullptr, nullptr, 0, &numel), "listing the optimizer state");
      model::MomentsCopy c{name, std::vector<float>(static_cast<size_t>(numel)), std::vector<float>(static_cast<size_t>(numel))};
      check(api->moment_read(m, i, name, sizeof(name), c.m.data(), c.v.data(), numel, &numel),
            std::string("reading the optimizer state of ") + name);
      out.push_back(std::move(c));
    }
    return out;
  }

  void do_import_optimizer_state(const std::vector<model::MomentsView>& moments) override {
    check(api->moments_clear(m), "clearing the optimizer state");
    for (const auto& e : moments)  // sizes checked equal (m, v, parameter) by Engine first
      check(api->moment_write(m, e.name.c_str(), e.m, e.v, e.m_size), "writing the optimizer state of " + e.name);
  }

  // Zero adapters on the device, then A's initial values from the CPU backend's stream
  // (model::lora_initial_a, in (layer, target) order), so both backends start alike.
  void do_attach_lora(const model::LoraRequest& r, int) override {
    std::vector<int32_t> targets(r.targets.begin(), r.targets.end());
    check(api->lora_attach_named(m, r.name.c_str(), r.rank, r.alpha, targets.data(), static_cast<int32_t>(targets.size())),
          "attaching LoRA adapter " + r.name);
    has_lora_ = true;
    std::map<std::string, TensorInfo> shapes;
    for (TensorInfo& t : tensor_list()) shapes[t.name] = t;
    std::mt19937_64 rng(r.seed);
    std::vector<float> a;
    for (int l = 0; l < cfg_.layers; ++l)
      for (model::Linear which : r.targets) {
        const std::string name = model::lora_a_name(l, which, r.name);
        const TensorInfo& t = shapes.at(name);  // [rank × in]
        a.resize(static_cast<size_t>(t.size));
        model::lora_initial_a(rng, t.shape[0], t.shape[1], a.data());
        check(api->tensor_write(m, name.c_str(), a.data(), t.size), "writing " + name);
      }
  }
  void do_set_lora_enabled(bool on) override { check(api->lora_enable(m, on ? 1 : 0), "switching the LoRA adapters"); }
  void do_merge_lora() override { check(api->lora_merge(m), "merging the LoRA adapters"); }

  void do_attach_score_head(int labels, float std, uint64_t seed) override {
    check(api->score_head_attach(m, labels), "attaching a score head");
    cfg_.score_labels = labels;
    const std::string name = model::tensor_name(model::TensorId::kScore);
    const std::vector<float> init = model::score_head_initial(seed, std, static_cast<int64_t>(labels) * cfg_.hidden);
    check(api->tensor_write(m, name.c_str(), init.data(), static_cast<int64_t>(init.size())), "writing " + name);
  }

  void do_score_forward(const model::ScoreForwardRequest& r, std::vector<float>& scores) override {
    const int64_t n = static_cast<int64_t>(r.lengths.size());
    scores.assign(static_cast<size_t>(n * std::max(cfg_.score_labels, 1)), NAN);
    check(api->score_forward_adapters(m, r.tokens.data(), r.lengths.data(), static_cast<int32_t>(n),
                                      r.adapters.empty() ? nullptr : r.adapters.data(), r.tape ? 1 : 0, scores.data(),
                                      static_cast<int64_t>(scores.size())),
          "device score forward");
  }

  void do_score_backward(const std::vector<float>& d_scores) override {
    check(api->score_backward(m, d_scores.data(), static_cast<int64_t>(d_scores.size())), "device score backward");
  }

 private:
  // The model's parameters: names, shapes, element counts.
  std::vector<TensorInfo> tensor_list() {
    const int32_t n = api->tensor_count(m);
    if (n < 0) check(-1, "listing the tensors");
    std::vector<TensorInfo> out(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) {
      char name[512];
      int64_t shape[4];
      int32_t ndim = 0;
      check(api->tensor_info(m, i, name, sizeof(name), shape, &ndim), "listing the tensors");
      out[i].name = name;
      out[i].shape.assign(shape, shape + ndim);
      for (int d = 0; d < ndim; ++d) out[i].size *= shape[d];
    }
    return out;
  }

  static bool is_adapter(const std::string& name) {
    return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
  }

  model::Config cfg_;
  int device_;
  bool has_lora_ = false;
};

CudaCache::~CudaCache() {
  if (handle) engine->api->cache_destroy(handle);
}

const model::Engine* CudaCache::owner() const { return engine.get(); }

int CudaCache::length(int slot) {
  const int32_t n = engine->api->cache_length(handle, slot);
  if (n < 0) throw std::out_of_range("slot out of range");
  return n;
}

void CudaCache::copy_prefix(int src, int dst, int len) {
  if (engine->api->cache_copy_prefix(handle, src, dst, len) != 0) throw std::out_of_range(engine->api->last_error());
}

void CudaCache::truncate(int slot, int len) {
  if (engine->api->cache_truncate(handle, slot, len) != 0) throw std::out_of_range("truncate out of range");
}

int64_t CudaCache::bytes() { return engine->api->cache_bytes(handle); }

class CudaBackend final : public model::Backend {
 public:
  const char* name() const override { return "cuda"; }

  model::BackendStatus status() const override {
    const PluginStatus st = plugin_status();
    model::BackendStatus s;
    s.compiled = st.plugin;
    s.available = st.available;
    s.kind = st.kind;
    s.reason = st.reason;
    s.location = loaded_plugin().path;
    s.kernel_path = st.probe.gemm_path;
    s.runtime_version = st.probe.runtime_version;
    s.driver_version = st.probe.driver_version;
    for (int i = 0; i < st.probe.device_count && i < 16; ++i) {
      const auto& d = st.probe.devices[i];
      s.devices.push_back({d.name, std::to_string(d.major) + "." + std::to_string(d.minor), d.total_memory, d.multiprocessors});
    }
    return s;
  }

  model::VerbSupport support(Verb v) const override {
    // LoRA, score heads and gradient checkpointing included (issue 19); paged caches not yet.
    if (v == Verb::kPagedCache)
      return {false, "paged KV caches (shared prompt prefixes) are on the CPU backend only in this version; the device cache has fixed slots, reused as sequences finish"};
    return {true, ""};
  }

  bool device_memory(int index, model::DeviceMemory& out) const override {
    const ad_cuda_api* api = plugin_api_if_loaded();
    if (!api || !plugin_status().available) return false;
    ad_cuda_memory m{};
    plugin_check(api, api->memory_info(index, &m), "reading the memory of device " + std::to_string(index));
    out = {m.free_bytes, m.total_bytes, m.allocated_bytes, m.peak_allocated_bytes};
    return true;
  }
  void reset_memory_peak() const override {
    if (const ad_cuda_api* api = plugin_api_if_loaded()) api->memory_reset_peak();
  }

  void profiler_enable(bool on) const override {
    if (const ad_cuda_api* api = plugin_api_if_loaded()) api->profiler_enable(on ? 1 : 0);
  }
  void profiler_reset() const override {
    if (const ad_cuda_api* api = plugin_api_if_loaded()) api->profiler_reset();
  }
  // The device's launch sites: device time in seconds, bytes and FLOPs counted from the shapes, named "cuda:<site>".
  std::vector<model::ProfileRow> profiler_rows() const override {
    std::vector<model::ProfileRow> out;
    const ad_cuda_api* api = plugin_api_if_loaded();
    if (!api) return out;
    std::vector<ad_cuda_profile_work_row> rows(64);
    int32_t n = api->profiler_read_work(rows.data(), static_cast<int32_t>(rows.size()));
    if (n > static_cast<int32_t>(rows.size())) {
      rows.resize(n);
      n = api->profiler_read_work(rows.data(), n);
    }
    for (int32_t i = 0; i < n && i < static_cast<int32_t>(rows.size()); ++i)
      out.push_back({std::string(name()) + ":" + rows[i].name, rows[i].calls, rows[i].total_ms / 1e3, rows[i].bytes, rows[i].flops});
    return out;
  }
  bool profiler_floors(int index, double& copy_bytes_per_second, double& gemm_flops_per_second) const override {
    require_available();
    plugin_check(loaded_plugin().api, loaded_plugin().api->profiler_floors(index, &copy_bytes_per_second, &gemm_flops_per_second),
                 "measuring the floors of device " + std::to_string(index));
    return true;
  }

 protected:
  std::unique_ptr<model::Engine> do_load(const model::LoadRequest& r) const override {
    const ad_cuda_api* api = loaded_plugin().api;
    if (!api) throw std::runtime_error(loaded_plugin().reason);
    auto engine = std::make_unique<CudaEngine>(api, r.config, r.device_index);
    const ad_cuda_config c = abi_config(r.config, r.device_index);
    engine->check(api->model_create(&c, &engine->m), "creating the device model");
    // One tensor at a time: f32 on the host only transiently.
    for (const auto& src : r.sources) {
      model::Tensor t = model::read_tensor(src);
      engine->check(api->model_set_tensor(engine->m, src.name.c_str(), t.shape.data(), static_cast<int32_t>(t.shape.size()), t.buf.data),
                    "uploading " + src.name);
    }
    engine->check(api->model_finalize(engine->m), "finalizing the device model");
    return engine;
  }
};

}  // namespace

const model::Backend& cuda_backend() {
  static const CudaBackend backend;
  return backend;
}

}  // namespace ad::addon
