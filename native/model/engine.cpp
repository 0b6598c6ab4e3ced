// The engine's verbs as every backend answers them: the checks that need no backend, then the
// backend's do_*. See engine.h.
#include "model/engine.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <new>

#include "collective/collective.h"
#include "kernels/logit_stats.h"

namespace ad::model {

const char* verb_name(Verb v) {
  switch (v) {
    case Verb::kLoad: return "load";
    case Verb::kStep: return "step";
    case Verb::kStepReference: return "step.reference";
    case Verb::kPagedCache: return "step.pagedCache";
    case Verb::kTrainForward: return "trainForward";
    case Verb::kTrainReference: return "trainForward.reference";
    case Verb::kGradientCheckpointing: return "gradientCheckpointing";
    case Verb::kTrainBackward: return "trainBackward";
    case Verb::kOptimizerStep: return "optimizerStep";
    case Verb::kTensors: return "tensors";
    case Verb::kGradients: return "gradients";
    case Verb::kOptimizerState: return "optimizerState";
    case Verb::kLora: return "lora";
    case Verb::kScoreHead: return "scoreHead";
    case Verb::kProfile: return "profile";
    case Verb::kCount: break;
  }
  return "?";
}

UnsupportedVerb::UnsupportedVerb(const std::string& backend_name, Verb v, const std::string& reason)
    : std::runtime_error(std::string(verb_name(v)) + " is not supported on the " + backend_name + " backend" +
                         (reason.empty() ? std::string() : ": " + reason)),
      backend(backend_name),
      verb(v) {}

void Backend::require(Verb v) const {
  const VerbSupport s = support(v);
  if (!s.supported) throw UnsupportedVerb(name(), v, s.reason);
}

void Backend::require_available() const {
  const BackendStatus s = status();
  if (!s.available) throw BackendUnavailable(name(), s.kind, s.reason);
}

void Engine::require(Verb v) const { backend().require(v); }

void StepResult::prepare(int64_t R, int K, int64_t V, bool reference, bool with_logits_) {
  rows = R;
  topk = K;
  with_reference = reference;
  with_logits = with_logits_;
  tokens.assign(R, -1);
  chosen.assign(R, NAN);
  lse.assign(R, NAN);
  entropy.assign(R, NAN);
  max_logit.assign(R, NAN);
  margin.assign(R, NAN);
  topk_ids.assign(R * K, -1);
  topk_logits.assign(R * K, NAN);
  for (auto* a : {&k1, &k2, &k3, &kl}) a->assign(reference ? R : 0, NAN);
  logits.assign(with_logits_ ? R * V : 0, NAN);
}

int64_t TrainSequences::completion_rows() const {
  int64_t rows = 0;
  for (size_t i = 0; i < lengths.size(); ++i) rows += lengths[i] - prompt_lengths[i];
  return rows;
}

// ---------------------------------------------------------------- checks shared by the verbs

namespace {

void check_same_backend(const Engine& self, const Engine& other, const char* what) {
  if (&other.backend() != &self.backend())
    throw std::invalid_argument(std::string(what) + " of a model on the " + self.backend().name() + " backend must be on the " +
                                self.backend().name() + " backend too (it is on " + other.backend().name() + ")");
  if (other.config().vocab != self.config().vocab) throw std::invalid_argument(std::string(what) + " has another vocabulary size");
}

}  // namespace

void Engine::check(const Cache& cache, const StepRequest& r) const {
  const Engine& self = *this;
  if (cache.owner() != &self) throw std::invalid_argument("this KV cache belongs to another model");
  int64_t total = 0, rows = 0;
  for (const BatchEntry& e : r.batch) {
    if (e.out_mode < 0 || e.out_mode > 2) throw std::invalid_argument("outModes entries must be 0, 1 or 2");
    check_adapter(e.adapter);
    if (e.count < 0) throw std::invalid_argument("counts must be non-negative");
    total += e.count;
    rows += output_rows(e);
  }
  if (total != static_cast<int64_t>(r.tokens.size())) throw std::invalid_argument("tokens.length must equal the sum of counts");
  if (!r.targets.empty() && static_cast<int64_t>(r.targets.size()) != rows)
    throw std::invalid_argument("targets has " + std::to_string(r.targets.size()) + " elements, expected one per output row (" +
                                std::to_string(rows) + ")");
  if (!r.sampling.empty() && r.sampling.size() != r.batch.size())
    throw std::invalid_argument("sampling needs one row per batch entry");
  if (r.topk < 0 || r.topk > kMaxLogitTopK) throw std::out_of_range("topK statistics must be between 0 and 64");
  if (r.reference) {
    self.require(Verb::kStepReference);
    check_same_backend(self, *r.reference, "the reference");
    if (!r.reference_cache) throw std::invalid_argument("a reference needs its own KV cache");
    if (r.reference_cache->owner() != r.reference) throw std::invalid_argument("reference.cache belongs to another model");
    if (r.reference_cache == &cache) throw std::invalid_argument("the reference needs its own KV cache");
  }
}

void Engine::check(const TrainForwardRequest& request) const {
  require(Verb::kTrainForward);
  const TrainSequences& s = request.sequences;
  if (s.lengths.empty() || s.lengths.size() != s.prompt_lengths.size())
    throw std::invalid_argument("lengths and promptLengths must be non-empty and of equal length");
  int64_t total = 0;
  for (size_t i = 0; i < s.lengths.size(); ++i) {
    if (s.prompt_lengths[i] < 1 || s.prompt_lengths[i] >= s.lengths[i])
      throw std::out_of_range("every sequence needs a prompt of ≥ 1 token and a completion of ≥ 1 token");
    total += s.lengths[i];
  }
  if (total != static_cast<int64_t>(s.tokens.size())) throw std::invalid_argument("tokens.length must equal the sum of lengths");
  check_adapters(s.adapters, s.lengths.size());
  if (s.checkpoint) require(Verb::kGradientCheckpointing);
  if (request.reference_lora_off) require(Verb::kLora);
  if (request.reference) {
    require(Verb::kTrainReference);
    check_same_backend(*this, *request.reference, "the reference");
  }
}

namespace {

void check_finite(const std::string& name, const char* which, const float* x, int64_t n, bool non_negative) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]) || (non_negative && x[i] < 0))
      throw std::invalid_argument("optimizer state of " + name + ": " + which + "[" + std::to_string(i) + "] = " + std::to_string(x[i]) +
                                  (non_negative ? " (the second moment must be finite and ≥ 0)" : " (must be finite)"));
}

// Every entry names a parameter of the model exactly once, with its size.
template <typename Entry, typename SizeOf>
void check_against_parameters(const std::vector<ParameterInfo>& params, const std::vector<Entry>& entries, const char* what,
                              SizeOf sizes) {
  std::map<std::string, int64_t> known;
  for (const ParameterInfo& p : params) known[p.name] = p.size;
  std::map<std::string, int> seen;
  for (const Entry& e : entries) {
    auto it = known.find(e.name);
    if (it == known.end()) throw std::invalid_argument("the model has no parameter named " + e.name);
    if (seen[e.name]++) throw std::invalid_argument(std::string(what) + " names " + e.name + " twice");
    for (int64_t n : sizes(e))
      if (n != it->second)
        throw std::length_error(std::string(what) + " " + e.name + " has " + std::to_string(n) + " elements, the parameter " +
                                std::to_string(it->second));
  }
}

}  // namespace

// ---------------------------------------------------------------- verbs

// Folding several adapters into one base would apply each to every sequence: one at a time only.
static void require_one_adapter(const std::vector<std::string>& names, const char* what) {
  if (names.size() > 1)
    throw std::invalid_argument(std::string(what) + " needs exactly one adapter attached; this model has " + std::to_string(names.size()) +
                                " (save them as PEFT adapters instead)");
}


std::shared_ptr<Cache> Engine::create_cache(int slots, int capacity, CacheLayout layout) {
  require(Verb::kStep);
  if (slots <= 0 || capacity <= 0) throw std::out_of_range("createCache needs slots ≥ 1 and capacity ≥ 1");
  if (layout.page_size != 0) {
    require(Verb::kPagedCache);
    if (layout.page_size < 0 || layout.page_size > capacity) throw std::out_of_range("createCache: pageSize must be 1 … capacity");
    if (layout.pages <= 0 || layout.pages > INT32_MAX) throw std::out_of_range("createCache: pages must be 1 … 2³¹−1");
  }
  try {
    return do_create_cache(slots, capacity, layout);
  } catch (const std::bad_alloc&) {
    if (layout.page_size != 0)
      throw std::length_error("not enough memory for a KV cache of " + std::to_string(layout.pages) + " pages × " +
                              std::to_string(layout.page_size) + " positions");
    throw std::length_error("not enough memory for a KV cache of " + std::to_string(slots) + " × " + std::to_string(capacity) +
                            " positions");
  }
}

void Engine::step(Cache& cache, const StepRequest& request, StepResult& out) {
  require(Verb::kStep);
  check(cache, request);
  do_step(cache, request, out);
}

void Engine::check_adapter(int adapter) const {
  const int n = static_cast<int>(adapter_names_.size());
  if (adapter == kBaseOnly || (adapter >= 0 && adapter < std::max(n, 1))) return;
  throw std::out_of_range("adapter index " + std::to_string(adapter) + " names no attached adapter (" + std::to_string(n) +
                          " attached; " + std::to_string(kBaseOnly) + " = the base alone)");
}

void Engine::check_adapters(const std::vector<int32_t>& adapters, size_t sequences) const {
  if (!adapters.empty() && adapters.size() != sequences)
    throw std::invalid_argument("adapters has " + std::to_string(adapters.size()) + " elements, expected one per sequence (" +
                                std::to_string(sequences) + ")");
  for (int32_t a : adapters) check_adapter(a);
}

void Engine::set_trainable(bool base, bool lora, const std::vector<int>& adapters) {
  require(Verb::kTrainBackward);
  if (lora) require(Verb::kLora);
  if (!lora && !adapters.empty()) throw std::invalid_argument("trainable adapters are listed, but lora is off");
  std::vector<int> trained;
  std::vector<char> seen(adapter_names_.size(), 0);
  for (int a : adapters) {
    if (a < 0 || a >= static_cast<int>(adapter_names_.size()))
      throw std::out_of_range("trainable adapter index " + std::to_string(a) + " names no attached adapter");
    if (seen[a]++) throw std::invalid_argument("adapter " + adapter_names_[a] + " is listed twice as trainable");
    trained.push_back(a);
  }
  if (lora && adapters.empty())
    for (int a = 0; a < static_cast<int>(adapter_names_.size()); ++a) trained.push_back(a);
  do_set_trainable(base, trained);
}

void Engine::zero_grad() {
  require(Verb::kTrainBackward);
  do_zero_grad();
}

void Engine::train_forward(const TrainForwardRequest& request, TrainForwardResult& out) {
  check(request);
  do_train_forward(request, out);
}

void Engine::train_backward(const std::vector<float>& a, const std::vector<float>& b) {
  require(Verb::kTrainBackward);
  if (a.size() != b.size()) throw std::invalid_argument("a and b must have the same length");
  do_train_backward(a, b);
}

OptimizerResult Engine::optimizer_step(const OptimizerRequest& r) {
  require(Verb::kOptimizerStep);
  for (float x : {r.lr, r.beta1, r.beta2, r.eps, r.weight_decay, r.clip_grad_norm})
    if (!std::isfinite(x)) throw std::invalid_argument("optimizer settings must be finite numbers");
  if (r.step < 1) throw std::out_of_range("the optimizer step is 1-based");
  if (!(r.beta1 >= 0 && r.beta1 < 1 && r.beta2 >= 0 && r.beta2 < 1)) throw std::out_of_range("AdamW betas must be in [0, 1)");
  return do_optimizer_step(r);
}

std::vector<TensorCopy> Engine::export_tensors(bool merge_lora) {
  require(Verb::kTensors);
  if (merge_lora) {
    require(Verb::kLora);
    require_one_adapter(adapter_names_, "exporting merged tensors");
  }
  return do_export_tensors(merge_lora);
}

void Engine::import_tensors(const std::vector<TensorView>& tensors) {
  require(Verb::kTensors);
  check_against_parameters(do_parameters(), tensors, "parameter", [](const TensorView& t) { return std::vector<int64_t>{t.size}; });
  do_import_tensors(tensors);
}

void Engine::reduce_gradients(collective::Collective& c) {
  require(Verb::kGradients);
  if (c.world_size() > 1) do_reduce_gradients(c);
}

void Engine::do_reduce_gradients(collective::Collective&) {
  throw UnsupportedVerb(backend().name(), Verb::kGradients, "reducing gradients across ranks is not available on this backend");
}

std::vector<TensorCopy> Engine::export_gradients() {
  require(Verb::kGradients);
  return do_export_gradients();
}

std::vector<MomentsCopy> Engine::export_optimizer_state() {
  require(Verb::kOptimizerState);
  return do_export_optimizer_state();
}

void Engine::import_optimizer_state(const std::vector<MomentsView>& moments) {
  require(Verb::kOptimizerState);
  check_against_parameters(do_parameters(), moments, "optimizer state of",
                           [](const MomentsView& e) { return std::vector<int64_t>{e.m_size, e.v_size}; });
  for (const MomentsView& e : moments) {
    check_finite(e.name, "m", e.m, e.m_size, false);
    check_finite(e.name, "v", e.v, e.v_size, true);
  }
  do_import_optimizer_state(moments);
}

// PEFT adapter names as folder names and parameter-name parts: letters, digits, '_' and '-'.
static bool valid_adapter_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxAdapterName) return false;
  for (char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

int Engine::attach_lora(const LoraRequest& r) {
  require(Verb::kLora);
  if (!valid_adapter_name(r.name))
    throw std::invalid_argument("adapter name '" + r.name + "' must be 1 to " + std::to_string(kMaxAdapterName) +
                                " letters, digits, '_' or '-'");
  for (const std::string& n : adapter_names_)
    if (n == r.name) throw std::invalid_argument("this model already has an adapter named '" + r.name + "'");
  if (adapter_names_.size() >= static_cast<size_t>(kMaxAdapters))
    throw std::length_error("a model holds at most " + std::to_string(kMaxAdapters) + " adapters");
  if (r.rank < 1 || r.rank > kMaxLoraRank)
    throw std::out_of_range("LoRA rank must be an integer in [1, " + std::to_string(kMaxLoraRank) + "], got " + std::to_string(r.rank));
  if (!(r.alpha > 0) || !std::isfinite(r.alpha)) throw std::invalid_argument("LoRA alpha must be a positive number");
  if (r.targets.empty()) throw std::invalid_argument("LoRA needs at least one target module");
  const int index = static_cast<int>(adapter_names_.size());
  do_attach_lora(r, index);
  adapter_names_.push_back(r.name);
  return index;
}

void Engine::set_lora_enabled(bool on) {
  require(Verb::kLora);
  do_set_lora_enabled(on);
}

void Engine::merge_lora() {
  require(Verb::kLora);
  require_one_adapter(adapter_names_, "merging LoRA adapters");
  do_merge_lora();
}

void Engine::attach_score_head(int labels, float std, uint64_t seed) {
  require(Verb::kScoreHead);
  if (labels < 1 || labels > kMaxScoreLabels)
    throw std::out_of_range("a score head needs between 1 and " + std::to_string(kMaxScoreLabels) + " labels, got " + std::to_string(labels));
  if (!(std >= 0) || !std::isfinite(std)) throw std::invalid_argument("the score head's init std must be a finite number ≥ 0");
  do_attach_score_head(labels, std, seed);
}

void Engine::score_forward(const ScoreForwardRequest& r, std::vector<float>& scores) {
  require(Verb::kScoreHead);
  int64_t total = 0;
  for (int32_t n : r.lengths) {
    if (n < 1) throw std::out_of_range("every sequence needs at least one token");
    total += n;
  }
  if (r.lengths.empty() || total != static_cast<int64_t>(r.tokens.size()))
    throw std::invalid_argument("tokens.length must equal the sum of lengths (and lengths be non-empty)");
  check_adapters(r.adapters, r.lengths.size());
  do_score_forward(r, scores);
}

void Engine::score_backward(const std::vector<float>& d_scores) {
  require(Verb::kScoreHead);
  do_score_backward(d_scores);
}

// A backend whose matrix lists these verbs overrides them; reaching one of these is a bug.
void Engine::do_attach_lora(const LoraRequest&, int) { throw std::logic_error("attach_lora is listed but not implemented"); }
void Engine::do_set_lora_enabled(bool) { throw std::logic_error("set_lora_enabled is listed but not implemented"); }
void Engine::do_merge_lora() { throw std::logic_error("merge_lora is listed but not implemented"); }
void Engine::do_attach_score_head(int, float, uint64_t) { throw std::logic_error("attach_score_head is listed but not implemented"); }
void Engine::do_score_forward(const ScoreForwardRequest&, std::vector<float>&) {
  throw std::logic_error("score_forward is listed but not implemented");
}
void Engine::do_score_backward(const std::vector<float>&) { throw std::logic_error("score_backward is listed but not implemented"); }

std::unique_ptr<Engine> Backend::load(const LoadRequest& r) const {
  require(Verb::kLoad);
  require_available();
  const Config& c = r.config;
  if (c.vocab <= 0 || c.hidden <= 0 || c.layers <= 0 || c.heads <= 0 || c.kv_heads <= 0 || c.head_dim <= 0 || c.intermediate <= 0)
    throw std::out_of_range("model config sizes must be positive");
  if (c.score_labels > 0) require(Verb::kScoreHead);
  if (r.threads < 1) throw std::out_of_range("threads must be ≥ 1");
  return do_load(r);
}

}  // namespace ad::model
