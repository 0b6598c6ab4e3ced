// One engine, two backends: the verbs a model answers (load, step over a slot KV cache with
// logit statistics and sampling, teacher-forced training forward and backward, AdamW, tensor and
// optimizer-state export and import, LoRA adapters, a score head, profiling), written once here.
// CpuEngine (native/cpu/cpu_engine.h) and CudaEngine (native/addon/cuda_engine.h, over the CUDA
// plugin's C ABI) implement them; the addon binds each verb once and holds no math and no backend
// branches.
//
// Each public verb checks what it can without the backend (sizes, the capability matrix, which
// engine a cache or reference belongs to) and then calls the backend's do_*: a verb a backend
// lacks answers UnsupportedVerb — one typed error, with the reason its backend gives — and a
// request that would not fit answers std::invalid_argument / std::out_of_range / std::length_error
// before anything is written.
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/sampling.h"
#include "model/config.h"
#include "model/tensor_table.h"

namespace ad::collective {
class Collective;  // native/collective/collective.h
}

namespace ad::model {

// ---------------------------------------------------------------- the capability matrix

enum class Verb {
  kLoad,                   // read HF tensors, finalize the tensor table
  kStep,                   // prefill/decode over the slot KV cache: logits, statistics, sampling
  kStepReference,          // KL estimators against a reference model in the same step
  kPagedCache,             // a paged KV cache: pages from one pool, prefixes shared copy-on-write
  kTrainForward,           // taped forward of whole sequences: per-token logprob and entropy
  kTrainReference,         // the reference's logprobs beside the policy's in that forward
  kGradientCheckpointing,  // keep only each layer's input; recompute the rest in backward
  kTrainBackward,          // back-propagate per-token loss coefficients; zero / select gradients
  kOptimizerStep,          // AdamW with global-norm clipping, non-finite steps skipped
  kTensors,                // parameters by HF name: export (LoRA merged or not) and import
  kGradients,              // the accumulated gradients by name
  kOptimizerState,         // AdamW moments: export and import (checkpoint and resume)
  kLora,                   // LoRA adapters: attach (several, named, chosen per sequence), switch off (the 'lora-off' reference), merge
  kScoreHead,              // a score head: sequence-classification models, attach, forward, backward
  kProfile,                // profiling scopes (CPU kernels, device phases)
  kCount
};

const char* verb_name(Verb v);

struct VerbSupport {
  bool supported = false;
  std::string reason;  // why not, when unsupported
};

// The one error of a verb a backend lacks.
class UnsupportedVerb : public std::runtime_error {
 public:
  UnsupportedVerb(const std::string& backend, Verb verb, const std::string& reason);
  const std::string backend;
  const Verb verb;
};

// A backend that cannot run on this machine (no plugin, driver or device): `kind` says which.
class BackendUnavailable : public std::runtime_error {
 public:
  BackendUnavailable(const std::string& backend, const std::string& kind, const std::string& reason)
      : std::runtime_error(reason), backend(backend), kind(kind) {}
  const std::string backend, kind;
};

// ---------------------------------------------------------------- requests and results

// An entry's `adapter`: the index (in attach order) of the LoRA adapter its rows apply, or this:
constexpr int kBaseOnly = -1;  // the base weights alone

// One ragged-batch entry: `count` new tokens appended to cache slot `slot`.
struct BatchEntry {
  int slot;
  int count;
  int out_mode;  // 0: no logits, 1: logits of the last new token, 2: logits of every new token from out_from on
  int out_from = 0;
  int adapter = 0;  // the first adapter (the default one) unless a request names another, or kBaseOnly
};

// Consecutive token rows [begin, end) of a batch whose entries apply the same adapter: each run's
// low-rank product is one product on those rows, the base's stays one for the whole batch.
struct AdapterRun {
  int64_t begin, end;
  int adapter;
};

// The runs of a batch: consecutive entries with the same adapter share one (one adapter on the
// whole batch: one run, the products of a single-adapter model).
inline std::vector<AdapterRun> adapter_runs(const std::vector<BatchEntry>& batch) {
  std::vector<AdapterRun> runs;
  int64_t t = 0;
  for (const BatchEntry& e : batch) {
    if (!runs.empty() && runs.back().adapter == e.adapter)
      runs.back().end += e.count;
    else
      runs.push_back({t, t + e.count, e.adapter});
    t += e.count;
  }
  return runs;
}

// The batch as a model without these adapters sees it (a reference model): every entry adapter 0.
inline std::vector<BatchEntry> without_adapters(std::vector<BatchEntry> batch) {
  for (BatchEntry& e : batch) e.adapter = 0;
  return batch;
}

// Output rows an entry asks for.
inline int64_t output_rows(const BatchEntry& e) {
  return e.out_mode == 2 ? (e.count > e.out_from ? e.count - e.out_from : 0) : (e.out_mode == 1 ? 1 : 0);
}

// How a cache lays out its positions: page_size 0 = the slot layout (one fixed page of `capacity`
// positions per slot); otherwise `pages` pages of `page_size` positions that all slots draw from.
struct CacheLayout {
  int page_size = 0;
  int64_t pages = 0;
};

// What a cache holds now (paged caches; the slot layout reports its page size and page count).
struct CacheCounters {
  int page_size = 0;
  int64_t pages = 0, free_pages = 0, page_bytes = 0;
  int64_t shared_bytes = 0;        // memory prefix sharing saves now
  int64_t shared_bytes_total = 0;  // bytes shared instead of copied since the cache was created
};

// A Transformer's KV cache behind either backend: `slots` sequences of up to `capacity` positions.
class Engine;
class Cache {
 public:
  virtual ~Cache() = default;
  virtual const Engine* owner() const = 0;
  virtual int slots() const = 0;
  virtual int capacity() const = 0;
  // Throws std::out_of_range on a slot that does not exist.
  virtual int length(int slot) = 0;
  // Makes `dst` a copy of the first `len` positions of `src` (n samples share one prefill).
  virtual void copy_prefix(int src, int dst, int len) = 0;
  virtual void truncate(int slot, int len) = 0;
  virtual int64_t bytes() = 0;
  virtual CacheCounters counters() = 0;
};

struct SamplingRow {
  SamplingParams params;
  int32_t prompt_length;  // history[prompt_length:] are the generated tokens (presence/frequency penalties)
};

struct StepRequest {
  std::vector<BatchEntry> batch;
  std::vector<int32_t> tokens;       // Σ count
  std::vector<int32_t> targets;      // empty, or one per output row (chosen-token logprob)
  std::vector<SamplingRow> sampling; // empty, or one per batch entry: sample each out_mode-1 row
  int topk = 0;                      // 0 … kMaxLogitTopK
  bool return_logits = false;
  Engine* reference = nullptr;       // KL estimators against this model's rows …
  Cache* reference_cache = nullptr;  // … fed the same tokens through its own cache
};

// Per output row; every array is NaN- (ids: −1-) poisoned so a row a backend missed shows.
struct StepResult {
  int64_t rows = 0;
  int topk = 0;
  bool with_reference = false, with_logits = false;
  std::vector<int32_t> tokens, topk_ids;
  std::vector<float> chosen, lse, entropy, max_logit, margin, topk_logits, k1, k2, k3, kl, logits;
  void prepare(int64_t rows, int topk, int64_t vocab, bool reference, bool logits);
};

// A training forward's sequences: tokens (prompt then completion, concatenated), one length and
// prompt length per sequence; every sequence has ≥ 1 prompt and ≥ 1 completion token.
struct TrainSequences {
  std::vector<int32_t> tokens, lengths, prompt_lengths;
  std::vector<int32_t> adapters;  // empty (every sequence the first adapter), or one BatchEntry::adapter per sequence
  bool checkpoint = false;
  int64_t completion_rows() const;
};

struct TrainForwardRequest {
  TrainSequences sequences;
  Engine* reference = nullptr;      // a frozen model on the same backend, or …
  bool reference_lora_off = false;  // … this model with its LoRA adapters switched off
};

struct TrainForwardResult {
  std::vector<float> logp, entropy, ref_logp;  // one per completion row (ref_logp with a reference)
};

struct ScoreForwardRequest {
  std::vector<int32_t> tokens, lengths;
  std::vector<int32_t> adapters;  // empty, or one BatchEntry::adapter per sequence
  bool tape = true;  // keep the activations for score_backward
};

struct OptimizerRequest {
  float lr, beta1, beta2, eps, weight_decay;
  int step;  // 1-based: bias corrections 1 − β^step
  float clip_grad_norm;  // 0: off
};

struct OptimizerResult {
  double grad_norm = 0;
  bool skipped = false;  // a non-finite gradient norm: nothing was applied
  int64_t parameters = 0;
};

struct LoraRequest {
  int rank;
  float alpha;
  std::vector<Linear> targets;
  uint64_t seed;
  std::string name = default_adapter();  // [A-Za-z0-9_-], unique on the model
};

// A tensor copied out of the engine (f32, owned).
struct TensorCopy {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

// A tensor to write into the engine, borrowed from the caller for the length of the call.
struct TensorView {
  std::string name;
  const float* data;
  int64_t size;
};

struct MomentsCopy {
  std::string name;
  std::vector<float> m, v;
};

struct MomentsView {
  std::string name;
  const float *m, *v;
  int64_t m_size, v_size;
};

struct ParameterInfo {
  std::string name;
  int64_t size;
};

struct EngineDescription {
  int64_t parameter_bytes = 0;
  int threads = 0;        // CPU threads of its kernels (0: a device engine)
  int device_index = -1;  // −1: not a device engine
  std::string weights = "f32";  // the type its Linear weights are kept in (loadModel's weights)
};

// Largest values a request may carry (beyond them, memory runs out long before anything useful).
constexpr int kMaxLoraRank = 1 << 14;
constexpr int kMaxAdapters = 64;
constexpr size_t kMaxAdapterName = 64;
constexpr int kMaxScoreLabels = 1 << 16;

// ---------------------------------------------------------------- backends and engines

class Backend;

class Engine : public std::enable_shared_from_this<Engine> {
 public:
  virtual ~Engine() = default;
  virtual const Backend& backend() const = 0;
  virtual const Config& config() const = 0;
  virtual EngineDescription describe() = 0;

  // Throws UnsupportedVerb unless this engine's backend has the verb.
  void require(Verb v) const;
  // The checks step() and train_forward() make before any work, for a caller that wants them
  // answered before it queues the work (the addon, on the JS thread).
  void check(const Cache& cache, const StepRequest& request) const;
  void check(const TrainForwardRequest& request) const;

  // A paged layout needs Verb::kPagedCache.
  std::shared_ptr<Cache> create_cache(int slots, int capacity, CacheLayout layout = {});
  void step(Cache& cache, const StepRequest& request, StepResult& out);

  // lora: the adapters listed in `adapters` train (empty: every attached adapter); the others,
  // though applied to their sequences, get no gradient.
  void set_trainable(bool base, bool lora, const std::vector<int>& adapters = {});
  void zero_grad();
  void train_forward(const TrainForwardRequest& request, TrainForwardResult& out);
  // dz = a·(onehot − p) + b·(−p(log p + H)) per completion row of the last train_forward.
  void train_backward(const std::vector<float>& a, const std::vector<float>& b);
  OptimizerResult optimizer_step(const OptimizerRequest& request);
  // Data parallelism: every gradient ← its sum over the ranks of `c`, before optimizer_step. Each
  // rank's gradients are of its shard's share of the global loss (normalized by the global batch),
  // so the sum is the whole batch's gradient. A 1-rank world leaves them as they are.
  void reduce_gradients(collective::Collective& c);

  std::vector<TensorCopy> export_tensors(bool merge_lora);
  // Every name and size checked before the first write.
  void import_tensors(const std::vector<TensorView>& tensors);
  std::vector<TensorCopy> export_gradients();
  std::vector<MomentsCopy> export_optimizer_state();
  // Every name, size and value (finite; v ≥ 0) checked before the state is touched.
  void import_optimizer_state(const std::vector<MomentsView>& moments);

  // Adds the adapter `request.name` to every targeted linear; returns its index (BatchEntry::adapter).
  int attach_lora(const LoraRequest& request);
  // The attached adapters' names, by index.
  const std::vector<std::string>& adapter_names() const { return adapter_names_; }
  void set_lora_enabled(bool on);
  // W += α/r·B·A, then B = 0 (the model computes the same function): a model with one adapter.
  void merge_lora();

  void attach_score_head(int labels, float std, uint64_t seed);
  void score_forward(const ScoreForwardRequest& request, std::vector<float>& scores);
  void score_backward(const std::vector<float>& d_scores);

 protected:
  virtual std::shared_ptr<Cache> do_create_cache(int slots, int capacity, CacheLayout layout) = 0;
  virtual void do_step(Cache& cache, const StepRequest& request, StepResult& out) = 0;
  // `adapters`: the indices of the adapters that train (empty: none).
  virtual void do_set_trainable(bool base, const std::vector<int>& adapters) = 0;
  virtual void do_zero_grad() = 0;
  virtual void do_train_forward(const TrainForwardRequest& request, TrainForwardResult& out) = 0;
  virtual void do_train_backward(const std::vector<float>& a, const std::vector<float>& b) = 0;
  virtual OptimizerResult do_optimizer_step(const OptimizerRequest& request) = 0;
  // The default answers UnsupportedVerb (Verb::kGradients) for a backend that cannot hand its
  // gradient buffers to a collective.
  virtual void do_reduce_gradients(collective::Collective& c);
  virtual std::vector<TensorCopy> do_export_tensors(bool merge_lora) = 0;
  virtual std::vector<ParameterInfo> do_parameters() = 0;  // every parameter (base and adapters)
  virtual void do_import_tensors(const std::vector<TensorView>& tensors) = 0;
  virtual std::vector<TensorCopy> do_export_gradients() = 0;
  virtual std::vector<MomentsCopy> do_export_optimizer_state() = 0;
  virtual void do_import_optimizer_state(const std::vector<MomentsView>& moments) = 0;
  // The verbs below run only where the backend's matrix says so; a backend without them keeps these.
  // Attaches adapter number `index` (= adapter_names().size() at the call).
  virtual void do_attach_lora(const LoraRequest& request, int index);
  virtual void do_set_lora_enabled(bool on);
  virtual void do_merge_lora();
  virtual void do_attach_score_head(int labels, float std, uint64_t seed);
  virtual void do_score_forward(const ScoreForwardRequest& request, std::vector<float>& scores);
  virtual void do_score_backward(const std::vector<float>& d_scores);

 private:
  // An adapter index names an attached adapter, or is kBaseOnly (or 0 on a model without adapters).
  void check_adapter(int adapter) const;
  // One adapter index per sequence, or none.
  void check_adapters(const std::vector<int32_t>& adapters, size_t sequences) const;
  std::vector<std::string> adapter_names_;
};

// One tensor's bytes inside a safetensors file (TypeScript has validated the headers).
enum class DType { F32, BF16, F16 };
struct TensorSource {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string file;
  int64_t offset;
  int64_t nbytes;
};

// How a CPU model keeps its Linear weights, LM head and embedding in memory (loadModel's
// `weights`): f32, bf16, f16, int8 (Q8_0-style), or the type the checkpoint stores them in.
enum class WeightFormat { kF32, kBF16, kF16, kInt8, kCheckpoint };

struct LoadRequest {
  Config config;
  std::vector<TensorSource> sources;
  WeightFormat weights = WeightFormat::kF32;
  int threads = 1;       // CPU threads
  int device_index = 0;  // device ordinal
};

struct DeviceInfo {
  std::string name, compute_capability;
  uint64_t total_memory = 0;
  int multiprocessors = 0;
};

// Whether a backend can run here, and why not.
struct BackendStatus {
  bool compiled = false;   // its code is present (the CPU always; CUDA: the plugin loaded)
  bool available = false;  // and a model can load
  std::string kind;        // "ok", or why not ("not-built", "load-failed", "abi-mismatch", "no-driver", …)
  std::string reason;
  std::string location;    // where its code was looked for
  std::string kernel_path; // which matrix-product path runs
  int runtime_version = 0, driver_version = 0;
  std::vector<DeviceInfo> devices;
};

// A device's memory now: free and total (the driver's count) and what this process's engines hold
// (now, and at most since the last reset_memory_peak).
struct DeviceMemory {
  uint64_t free_bytes = 0, total_bytes = 0;
  int64_t allocated_bytes = 0, peak_allocated_bytes = 0;
};

struct ProfileRow {
  std::string name;
  int64_t calls = 0;
  double seconds = 0, bytes = 0, flops = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual BackendStatus status() const = 0;
  virtual VerbSupport support(Verb v) const = 0;
  void require(Verb v) const;
  // Throws BackendUnavailable unless status().available.
  void require_available() const;

  // Reads the tensors and finalizes them against the tensor table (runs on a worker thread).
  std::unique_ptr<Engine> load(const LoadRequest& request) const;

  // The memory of device `index`; false for a backend without device memory (the CPU).
  virtual bool device_memory(int index, DeviceMemory& out) const {
    (void)index;
    (void)out;
    return false;
  }
  virtual void reset_memory_peak() const {}

  // Profiling scopes of this backend's engines (process-wide).
  virtual void profiler_enable(bool on) const = 0;
  virtual void profiler_reset() const = 0;
  virtual std::vector<ProfileRow> profiler_rows() const = 0;
  // The floors a profile of device `index` is read against, measured now (a device backend:
  // copy bytes per second, bf16 GEMM FLOP/s); false for a backend without a device (the CPU).
  // Throws BackendUnavailable where the backend cannot run here.
  virtual bool profiler_floors(int index, double& copy_bytes_per_second, double& gemm_flops_per_second) const {
    (void)index;
    (void)copy_bytes_per_second;
    (void)gemm_flops_per_second;
    return false;
  }

 protected:
  virtual std::unique_ptr<Engine> do_load(const LoadRequest& request) const = 0;
};

}  // namespace ad::model
