// ad_check_model: the CUDA transformer (native/cuda/model_cuda) against the CPU engine
// (native/model) on tiny random models of each family, then timings of a Qwen3-0.6B-shaped model.
// Standalone (no Node-API). Environment: AD_CHECK_JSON=path (write results), AD_CHECK_TIMEOUT=s
// (watchdog; default 140), AD_CHECK_SKIP_BENCH=1, AD_CHECK_SKIP_PARITY=1.
// Exit: 0 all parity within tolerance, 1 a parity failure, 2 no device / CUDA error, 3 watchdog.
//
// Weights of the matrices are rounded to bf16 before both engines see them, so the differences
// measured are those of the device's bf16 activations and f32 accumulation, not of weight rounding.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/logit_stats_cpu.h"
#include "cpu/sampling_cpu.h"
#include "cuda/device_profiler.h"
#include "cuda/model_cuda.h"
#include "cuda/ops_layers.h"
#include "kernels/adamw.h"
#include "model/tensor_table.h"
#include "model/transformer.h"

using ad::cuda::CudaCache;
using ad::cuda::CudaModel;
using ad::model::BatchEntry;
using ad::model::Config;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string g_json = "{";
bool g_fail = false;
void json_num(const std::string& key, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", std::isfinite(v) ? v : -1.0);
  g_json += (g_json.size() > 1 ? "," : "") + std::string("\"") + key + "\":" + buf;
}
std::vector<std::string> g_table;
void row(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void row(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::printf("%s\n", buf);
  std::fflush(stdout);
  g_table.push_back(buf);
}
void check(bool ok, const std::string& what) {
  if (!ok) {
    g_fail = true;
    std::printf("  FAIL %s\n", what.c_str());
  }
}

float round_bf16(float x) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  b += 0x7fffu + ((b >> 16) & 1u);  // round to nearest even
  b &= 0xffff0000u;
  float y;
  std::memcpy(&y, &b, 4);
  return y;
}

struct Weights {
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  std::vector<std::vector<float>> data;
};

// Random weights of an HF checkpoint: linears N(0, 1/in), norms 1 + N(0, 0.1²), biases N(0, 0.1²),
// embeddings N(0, 1); matrices rounded to bf16. Threads fill big tensors in parallel.
Weights random_weights(const Config& c, uint64_t seed, float head_gain) {
  Weights w;
  for (const ad::model::ModelTensor& t : ad::model::model_tensors(c)) w.shapes.push_back({t.name, t.shape});  // the one tensor table
  w.data.resize(w.shapes.size());
  std::vector<std::thread> pool;
  std::atomic<size_t> next{0};
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  for (unsigned k = 0; k < threads; ++k)
    pool.emplace_back([&] {
      for (size_t i = next++; i < w.shapes.size(); i = next++) {
        const auto& [name, shape] = w.shapes[i];
        int64_t n = 1;
        for (auto d : shape) n *= d;
        std::vector<float>& v = w.data[i];
        v.resize(n);
        std::mt19937_64 rng(seed * 1315423911ull + i);
        std::normal_distribution<float> nd(0.f, 1.f);
        const bool is_norm = name.find("norm") != std::string::npos, is_bias = name.find(".bias") != std::string::npos;
        const bool is_head = name == "lm_head.weight" || (c.tie_embeddings && name == "model.embed_tokens.weight");
        float stdev = shape.size() == 2 ? 1.f / std::sqrt(static_cast<float>(shape[1])) : 0.1f;
        if (name == "model.embed_tokens.weight") stdev = is_head ? head_gain / std::sqrt(static_cast<float>(shape[1])) : 1.f;
        if (is_head && name == "lm_head.weight") stdev = head_gain / std::sqrt(static_cast<float>(shape[1]));
        for (int64_t j = 0; j < n; ++j) {
          float x = nd(rng) * stdev;
          if (is_norm) x = 1.f + x;
          v[j] = (is_norm || is_bias) ? x : round_bf16(x);
        }
      }
    });
  for (auto& t : pool) t.join();
  return w;
}

std::unique_ptr<ad::model::Transformer> cpu_model(const Config& c, const Weights& w) {
  auto m = std::make_unique<ad::model::Transformer>(c, static_cast<int>(std::max(1u, std::min(8u, std::thread::hardware_concurrency()))));
  for (size_t i = 0; i < w.shapes.size(); ++i) {
    ad::model::Tensor t;
    t.shape = w.shapes[i].second;
    t.buf = ad::model::Buffer(static_cast<int64_t>(w.data[i].size()));
    std::memcpy(t.buf.data, w.data[i].data(), w.data[i].size() * 4);
    m->set_tensor(w.shapes[i].first, std::move(t));
  }
  m->finalize();
  return m;
}

std::unique_ptr<CudaModel> cuda_model(const Config& c, const Weights& w) {
  auto m = std::make_unique<CudaModel>(c, 0);
  for (size_t i = 0; i < w.shapes.size(); ++i) m->set_tensor(w.shapes[i].first, w.shapes[i].second, w.data[i].data());
  m->finalize();
  return m;
}

// Step outputs of either engine, host side, NaN-poisoned.
struct StepOut {
  int64_t rows = 0;
  std::vector<int32_t> tokens, topk_ids;
  std::vector<float> logits, lse, entropy, max_logit, margin, chosen, topk_logits;
  void reset(int64_t R, int64_t V, int K) {
    rows = R;
    tokens.assign(R, -1);
    topk_ids.assign(R * K, -1);
    logits.assign(R * V, NAN);
    lse.assign(R, NAN);
    entropy.assign(R, NAN);
    max_logit.assign(R, NAN);
    margin.assign(R, NAN);
    chosen.assign(R, NAN);
    topk_logits.assign(R * K, NAN);
  }
};

int64_t rows_of(const std::vector<BatchEntry>& batch) {
  int64_t r = 0;
  for (const auto& e : batch) r += e.out_mode == 2 ? e.count - e.out_from : (e.out_mode == 1 ? 1 : 0);
  return r;
}

// CPU step: forward, LM head, optional sampling (per entry), statistics; as the addon's StepWorker.
StepOut cpu_step(ad::model::Transformer& m, ad::model::KVCache& cache, const std::vector<BatchEntry>& batch,
                 const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, const ad::SamplingParams* sp, int K) {
  const int64_t V = m.config().vocab, H = m.config().hidden;
  StepOut o;
  const int64_t R = m.forward(cache, batch, tokens.data());
  o.reset(R, V, K);
  std::vector<float> hidden(m.hidden_out(), m.hidden_out() + R * H);
  m.lm_head(hidden.data(), R, o.logits.data());
  std::vector<int32_t> tg(R, -1);
  if (!targets.empty()) tg = targets;
  if (sp) {
    std::vector<char> scratch(ad::cpu::sampling_scratch_bytes(V));
    int64_t r = 0;
    for (size_t e = 0; e < batch.size(); ++e) {
      const int n = batch[e].out_mode == 2 ? batch[e].count - batch[e].out_from : (batch[e].out_mode == 1 ? 1 : 0);
      for (int i = 0; i < n; ++i, ++r) {
        if (batch[e].out_mode != 1) continue;
        const auto& hist = cache.tokens(batch[e].slot);
        tg[r] = ad::cpu::sample_token(o.logits.data() + r * V, V, sp[e], hist.size(), hist.data(), static_cast<int64_t>(hist.size()),
                                      hist.data(), 0, scratch.data());
      }
    }
  }
  ad::cpu::LogitStatsOut so{o.max_logit.data(), o.lse.data(), o.entropy.data(), o.margin.data(), o.chosen.data(),
                            K ? o.topk_ids.data() : nullptr, K ? o.topk_logits.data() : nullptr, nullptr, nullptr, nullptr, nullptr};
  ad::cpu::logit_stats(m.pool(), o.logits.data(), R, V, V, tg.data(), K, nullptr, so);
  o.tokens = tg;
  return o;
}

StepOut gpu_step(CudaModel& m, CudaCache& cache, const std::vector<BatchEntry>& batch, const std::vector<int32_t>& tokens,
                 const std::vector<int32_t>& targets, const ad::SamplingParams* sp, int K, bool logits) {
  const int64_t V = m.config().vocab, R = rows_of(batch);
  StepOut o;
  o.reset(R, V, K);
  std::vector<ad_cuda_entry> entries;
  std::vector<ad_cuda_sampling> samp;
  for (size_t e = 0; e < batch.size(); ++e) {
    entries.push_back({batch[e].slot, batch[e].count, batch[e].out_mode, batch[e].out_from});
    if (sp)
      samp.push_back({sp[e].temperature, sp[e].top_p, sp[e].min_p, sp[e].repetition_penalty, sp[e].presence_penalty,
                      sp[e].frequency_penalty, sp[e].top_k, 1 << 30, sp[e].seed, sp[e].stream});
  }
  ad_cuda_step s{};
  s.entries = entries.data();
  s.n_entries = static_cast<int32_t>(entries.size());
  s.tokens = tokens.data();
  s.n_tokens = static_cast<int64_t>(tokens.size());
  s.targets = targets.empty() ? nullptr : targets.data();
  s.sampling = sp ? samp.data() : nullptr;
  s.topk = K;
  s.return_logits = logits ? 1 : 0;
  s.rows_capacity = R;
  s.out_tokens = o.tokens.data();
  s.chosen_logprob = o.chosen.data();
  s.logsumexp = o.lse.data();
  s.entropy = o.entropy.data();
  s.max_logit = o.max_logit.data();
  s.margin = o.margin.data();
  s.topk_ids = K ? o.topk_ids.data() : nullptr;
  s.topk_logits = K ? o.topk_logits.data() : nullptr;
  s.logits = logits ? o.logits.data() : nullptr;
  m.step(cache, s, nullptr, nullptr);
  o.rows = s.rows;  // what the device reports (checked against the CPU's count)
  return o;
}

// Tolerances. The device rounds its activations (the normed input of every GEMM, q, the KV cache,
// the attention output, the SwiGLU output, the final hidden rows) to bf16 where the CPU keeps f32.
// A float64 emulation of exactly those roundings on these tiny models (logit RMS ≈ 4, 2 layers;
// 6 seeds × 4 families) gives: logits relative RMS error ≤ 6e-3 and max error ≤ 3e-2 × RMS;
// logsumexp / max logit / chosen logprob ≤ 7.5e-3 relative; entropy ≤ 2.9e-2 (a small number,
// ≈ 1–3 nats, so its error is near-absolute). The bounds leave ~3× room; the errors a bug makes
// (a wrong position, head, mask, bias) are O(RMS).
constexpr double kLogitRelRms = 2e-2;
constexpr double kLogitMaxOverRms = 0.1;
constexpr double kStatTol = 3e-2;
constexpr double kEntropyTol = 8e-2;

// a: device, b: CPU reference. Non-finite values fail unless both are the same infinity; an
// empty comparison fails too (nothing compared is not a pass).
struct Diff {
  double max_rel = 0;  // max |a − b| / max(1, |b|)
  double max_abs = 0;  // max |a − b|
  double ss_diff = 0, ss_ref = 0;
  int64_t n = 0;
  bool finite = true;
  void add(float a, float b) {
    if (!std::isfinite(a) || !std::isfinite(b)) {
      if (!(std::isinf(a) && std::isinf(b) && (a > 0) == (b > 0))) finite = false;
      return;
    }
    const double d = std::fabs(static_cast<double>(a) - b);
    max_rel = std::max(max_rel, d / std::max(1.0, std::fabs(static_cast<double>(b))));
    max_abs = std::max(max_abs, d);
    ss_diff += d * d;
    ss_ref += static_cast<double>(b) * b;
    ++n;
  }
  double rms_ref() const { return n ? std::sqrt(ss_ref / n) : 0.0; }
  // ‖a − b‖ / ‖b‖
  double rel_rms() const { return ss_ref > 0 ? std::sqrt(ss_diff / ss_ref) : (ss_diff > 0 ? INFINITY : 0.0); }
  // max |a − b| in units of the reference's RMS
  double max_over_rms() const { return rms_ref() > 0 ? max_abs / rms_ref() : (max_abs > 0 ? INFINITY : 0.0); }
  bool logits_ok() const { return n > 0 && finite && rel_rms() <= kLogitRelRms && max_over_rms() <= kLogitMaxOverRms; }
  // Statistics (logsumexp, max logit, chosen logprob, entropy): |Δ| ≤ tol · max(1, |ref|).
  bool stats_ok(double tol) const { return n > 0 && finite && max_rel <= tol; }
};


struct Family {
  const char* name;
  Config cfg;
};

Config tiny(const char* family, bool tied) {
  Config c;
  c.vocab = 997;  // prime: exercises the GEMM's predicated edges
  c.layers = 2;
  c.rms_eps = 1e-6f;
  c.rope_theta = 10000.0;
  c.tie_embeddings = tied;
  const std::string f = family;
  if (f == "qwen3") {
    c.hidden = 128; c.intermediate = 352; c.heads = 4; c.kv_heads = 2; c.head_dim = 64; c.qk_norm = true; c.rope_theta = 1e6;
  } else if (f == "qwen2") {
    c.hidden = 96; c.intermediate = 256; c.heads = 6; c.kv_heads = 2; c.head_dim = 16; c.qkv_bias = true;
  } else {  // llama3 with rope scaling that reaches all three bands within a few dozen positions
    c.hidden = 128; c.intermediate = 384; c.heads = 4; c.kv_heads = 1; c.head_dim = 32; c.rope_theta = 500000.0;
    c.rope_scaling = {true, 8.f, 1.f, 4.f, 64.f};
    // llama3-bias: attention_bias = true, which biases q, k, v and o_proj
    if (f == "llama3-bias") c.qkv_bias = c.o_bias = true;
  }
  return c;
}

// ---------------------------------------------------------------- parity on one family

void parity_family(const char* family, bool tied) {
  const Config c = tiny(family, tied);
  const std::string tag = std::string(family) + (tied ? "-tied" : "");
  const Weights w = random_weights(c, 7, 4.f);
  auto cpu = cpu_model(c, w);
  auto gpu = cuda_model(c, w);
  const int64_t V = c.vocab;
  const int K = 8, S = 4, cap = 64;
  ad::model::KVCache cc(c, S, cap);
  CudaCache gc(*gpu, S, cap);
  std::mt19937 rng(11);
  auto rand_tokens = [&](int n) {
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng() % V);
    return t;
  };

  // 1. ragged prefill, every row out, next-token targets
  const int lens[3] = {7, 13, 1};
  std::vector<BatchEntry> batch;
  std::vector<int32_t> toks, targets;
  for (int s = 0; s < 3; ++s) {
    auto t = rand_tokens(lens[s] + 1);
    batch.push_back({s, lens[s], 2, 0});
    toks.insert(toks.end(), t.begin(), t.end() - 1);
    targets.insert(targets.end(), t.begin() + 1, t.end());
  }
  StepOut a = cpu_step(*cpu, cc, batch, toks, targets, nullptr, K);
  StepOut b = gpu_step(*gpu, gc, batch, toks, targets, nullptr, K, true);
  Diff dl, ds, de;
  check(a.rows == b.rows && a.rows == rows_of(batch), tag + " prefill row count");
  for (size_t i = 0; i < a.logits.size(); ++i) dl.add(b.logits[i], a.logits[i]);
  int topk_overlap = 0;
  for (int64_t r = 0; r < a.rows; ++r) {
    ds.add(b.lse[r], a.lse[r]);
    de.add(b.entropy[r], a.entropy[r]);
    ds.add(b.max_logit[r], a.max_logit[r]);
    ds.add(b.chosen[r], a.chosen[r]);
    for (int i = 0; i < K; ++i)
      for (int j = 0; j < K; ++j) topk_overlap += a.topk_ids[r * K + i] == b.topk_ids[r * K + j];
  }
  row("model  %-12s prefill logits rel-RMS %.3e (tol %.0e), max|Δ| %.3e = %.3f × RMS %.2f (tol %.2f); stats max|Δ|/max(1,|ref|) "
      "%.3e (tol %.0e), entropy %.3e (tol %.0e); top-%d overlap %.1f%%",
      tag.c_str(), dl.rel_rms(), kLogitRelRms, dl.max_abs, dl.max_over_rms(), dl.rms_ref(), kLogitMaxOverRms, ds.max_rel, kStatTol, de.max_rel,
      kEntropyTol, K, 100.0 * topk_overlap / std::max<int64_t>(1, a.rows * K));
  check(dl.logits_ok(), tag + " prefill logits");
  check(ds.stats_ok(kStatTol), tag + " prefill statistics");
  check(de.stats_ok(kEntropyTol), tag + " prefill entropy");
  json_num(tag + ".prefill_logits_relrms", dl.rel_rms());
  json_num(tag + ".prefill_logits_max_over_rms", dl.max_over_rms());
  json_num(tag + ".prefill_stats_maxrel", ds.max_rel);
  json_num(tag + ".prefill_entropy_maxrel", de.max_rel);

  // 2. greedy decode, 16 steps, each engine on its own tokens; copy_prefix(0 → 3) first
  cc.copy_prefix(0, 3, cc.length(0));
  gc.copy_prefix(0, 3, gc.length(0));
  std::vector<int> slots = {0, 1, 2, 3};
  std::vector<int32_t> last_c = {targets[lens[0] - 1], targets[lens[0] + lens[1] - 1], targets.back(), targets[lens[0] - 1]};
  std::vector<int32_t> last_g = last_c;
  // Where the sampling phase restarts (both engines then hold identical histories).
  const std::vector<int32_t> last0 = last_c;
  std::vector<int> len0;
  for (int s : slots) {
    len0.push_back(cc.length(s));
    check(cc.length(s) == gc.length(s), tag + " cache lengths after prefill");
  }
  ad::SamplingParams greedy[4];
  for (auto& p : greedy) p.temperature = 0;
  int equal = 0, total = 0, near_ties = 0;
  bool diverged[4] = {false, false, false, false};
  Diff dd;
  for (int step = 0; step < 16; ++step) {
    std::vector<BatchEntry> bb;
    for (int s : slots) bb.push_back({s, 1, 1, 0});
    StepOut x = cpu_step(*cpu, cc, bb, last_c, {}, greedy, 2);
    StepOut y = gpu_step(*gpu, gc, bb, last_g, {}, greedy, 2, true);
    for (int i = 0; i < 4; ++i) {
      if (!diverged[i]) {
        ++total;
        for (int64_t v = 0; v < V; ++v) dd.add(y.logits[i * V + v], x.logits[i * V + v]);
        if (x.tokens[i] == y.tokens[i]) {
          ++equal;
        } else {
          diverged[i] = true;  // later steps see different prefixes
          // A flip needs the two top logits to move towards each other by the CPU's margin, so it is
          // explained by this row's measured errors only when margin ≤ 2 · max|Δ| of the row.
          double row_err = 0;
          for (int64_t v = 0; v < V; ++v)
            row_err = std::max(row_err, std::fabs(static_cast<double>(y.logits[i * V + v]) - x.logits[i * V + v]));
          const bool tie = std::isfinite(row_err) && x.margin[i] <= 2 * row_err + 1e-6;
          near_ties += tie;
          if (!tie) check(false, tag + " greedy token differs at a non-tie (CPU margin " + std::to_string(x.margin[i]) + ")");
        }
      }
      last_c[i] = x.tokens[i];
      last_g[i] = y.tokens[i];
    }
  }
  row("model  %-12s greedy decode: %d/%d tokens equal before divergence, %d divergence(s) at near-ties; decode logits rel-RMS "
      "%.3e, max|Δ| %.3f × RMS",
      tag.c_str(), equal, total, near_ties, dd.rel_rms(), dd.max_over_rms());
  check(dd.logits_ok(), tag + " decode logits (rel-RMS " + std::to_string(dd.rel_rms()) + ", max/RMS " +
                            std::to_string(dd.max_over_rms()) + ")");
  json_num(tag + ".greedy_equal", equal);
  json_num(tag + ".greedy_total", total);
  json_num(tag + ".decode_logits_relrms", dd.rel_rms());
  json_num(tag + ".decode_logits_max_over_rms", dd.max_over_rms());

  // Back to the state after the prefill: greedy decoding may have diverged at a near-tie, and the
  // sampling comparison needs both engines on the same history. Truncation also exercises the
  // overwrite of cached positions.
  for (size_t i = 0; i < slots.size(); ++i) {
    cc.truncate(slots[i], len0[i]);
    gc.truncate(slots[i], len0[i]);
  }
  last_c = last0;

  // 3. sampling with the same seed, teacher-forced on the CPU's tokens (no cascade)
  ad::SamplingParams sp[4];
  for (int i = 0; i < 4; ++i) {
    sp[i].temperature = 0.9f;
    sp[i].top_k = 40;
    sp[i].top_p = 0.95f;
    sp[i].seed = 1234;
    sp[i].stream = 100 + i;
  }
  int s_equal = 0, s_total = 0;
  for (int step = 0; step < 12; ++step) {
    std::vector<BatchEntry> bb;
    for (int s : slots) bb.push_back({s, 1, 1, 0});
    StepOut x = cpu_step(*cpu, cc, bb, last_c, {}, sp, 0);
    // the device continues from the same tokens as the CPU
    StepOut y = gpu_step(*gpu, gc, bb, last_c, {}, sp, 0, false);
    for (int i = 0; i < 4; ++i) {
      ++s_total;
      s_equal += x.tokens[i] == y.tokens[i];
      last_c[i] = x.tokens[i];
    }
  }
  row("model  %-12s sampled tokens (seed 1234, T 0.9, top-k 40, top-p 0.95): %d/%d equal", tag.c_str(), s_equal, s_total);
  check(s_equal * 10 >= s_total * 9, tag + " sampled tokens agree on fewer than 90% of draws");
  json_num(tag + ".sampled_equal", s_equal);
  json_num(tag + ".sampled_total", s_total);
}

// ---------------------------------------------------------------- one training step

void parity_train(const char* family, bool tied) {
  const Config c = tiny(family, tied);
  const std::string tag = std::string(family) + (tied ? "-tied" : "");
  const Weights w = random_weights(c, 9, 4.f);
  auto cpu = cpu_model(c, w);
  auto gpu = cuda_model(c, w);
  const int64_t V = c.vocab;
  std::mt19937 rng(5);
  const int B = 3;
  const int lengths[B] = {12, 9, 17}, prompts[B] = {4, 3, 8};
  std::vector<int32_t> tokens;
  for (int i = 0; i < B; ++i)
    for (int j = 0; j < lengths[i]; ++j) tokens.push_back(static_cast<int32_t>(rng() % V));
  int64_t R = 0;
  for (int i = 0; i < B; ++i) R += lengths[i] - prompts[i];
  // loss = −mean logp + 0.01·mean H: a = 1/R, b = −0.01/R (dz = a(onehot − p) + b(−p(log p + H)))
  std::vector<float> a(R, 1.f / R), bcoef(R, -0.01f / R);

  // CPU: taped forward, LM-head backward, backward, AdamW (as train_bindings.cpp)
  cpu->set_trainable(true, false);
  std::vector<BatchEntry> batch;
  std::vector<int32_t> fed, targets;
  int64_t off = 0;
  int cap = 1;
  for (int i = 0; i < B; ++i) {
    batch.push_back({i, lengths[i] - 1, 2, prompts[i] - 1});
    fed.insert(fed.end(), tokens.begin() + off, tokens.begin() + off + lengths[i] - 1);
    targets.insert(targets.end(), tokens.begin() + off + prompts[i], tokens.begin() + off + lengths[i]);
    cap = std::max(cap, lengths[i]);
    off += lengths[i];
  }
  ad::model::KVCache cache(c, B, cap);
  ad::model::Tape tape;
  const int64_t Rc = cpu->forward(cache, batch, fed.data(), &tape);
  std::vector<float> hidden(cpu->hidden_out(), cpu->hidden_out() + Rc * c.hidden);
  std::vector<float> logits(Rc * V), lse(Rc), ent(Rc), mx(Rc), mg(Rc), logp_c(Rc);
  cpu->lm_head(hidden.data(), Rc, logits.data());
  ad::cpu::LogitStatsOut so{mx.data(), lse.data(), ent.data(), mg.data(), logp_c.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
  ad::cpu::logit_stats(cpu->pool(), logits.data(), Rc, V, V, targets.data(), 0, nullptr, so);
  std::vector<float> dh(Rc * c.hidden);
  cpu->lm_head_backward(hidden.data(), Rc, targets.data(), a.data(), bcoef.data(), dh.data());
  cpu->backward(cache, tape, dh.data());
  std::vector<std::pair<std::string, std::vector<float>>> grads_c;
  double ss = 0;
  for (auto& [name, g] : cpu->gradients()) {
    grads_c.push_back({name, std::vector<float>(g->grad.data, g->grad.data + g->grad.size)});
    for (int64_t i = 0; i < g->grad.size; ++i) ss += static_cast<double>(g->grad.data[i]) * g->grad.data[i];
  }
  const double norm_c = std::sqrt(ss);
  const float lr = 1e-3f, clip = 1.0f;
  ad::kernels::AdamWParams p{lr, 0.9f, 0.95f, 1e-8f, 0.1f, 1 - 0.9f, 1 - 0.95f,
                             (clip > 0 && norm_c > clip) ? static_cast<float>(clip / norm_c) : 1.f};
  std::vector<std::pair<std::string, std::vector<float>>> before;
  for (auto& [name, g] : cpu->gradients()) {
    before.push_back({name, std::vector<float>(g->param, g->param + g->grad.size)});
    std::vector<float> m(g->grad.size, 0.f), v(g->grad.size, 0.f);
    ad::kernels::adamw_update(g->param, g->grad.data, m.data(), v.data(), g->grad.size, p, ad::model::weight_decay_applies(name));
  }

  // GPU: the same through the plugin-level API
  gpu->set_trainable(true, false);
  std::vector<float> logp_g(R, NAN), ent_g(R, NAN);
  ad_cuda_train_forward f{};
  f.tokens = tokens.data();
  f.lengths = lengths;
  f.prompt_lengths = prompts;
  f.n_sequences = B;
  f.rows_capacity = R;
  f.logp = logp_g.data();
  f.entropy = ent_g.data();
  gpu->train_forward(f, nullptr);
  gpu->train_backward(a.data(), bcoef.data(), R);
  check(f.rows == R && Rc == R, tag + " train rows");
  Diff dlogp, dent;
  for (int64_t r = 0; r < R; ++r) {
    dlogp.add(logp_g[r], logp_c[r]);
    dent.add(ent_g[r], ent[r]);
  }
  double loss_c = 0, loss_g = 0;
  for (int64_t r = 0; r < R; ++r) {
    loss_c += -logp_c[r] / R;
    loss_g += -logp_g[r] / R;
  }
  // gradients: relative L2 error per tensor, worst reported
  double worst = 0;
  std::string worst_name;
  for (auto& [name, gc] : grads_c) {
    std::vector<float> gg(gc.size(), NAN);
    gpu->read_gradient(name, gg.data(), static_cast<int64_t>(gg.size()));
    double num = 0, den = 0;
    bool finite = true;
    for (size_t i = 0; i < gc.size(); ++i) {
      if (!std::isfinite(gg[i])) finite = false;
      num += (static_cast<double>(gg[i]) - gc[i]) * (static_cast<double>(gg[i]) - gc[i]);
      den += static_cast<double>(gc[i]) * gc[i];
    }
    const double rel = finite ? std::sqrt(num / std::max(den, 1e-30)) : INFINITY;
    if (rel > worst) {
      worst = rel;
      worst_name = name;
    }
  }
  ad_cuda_optimizer o{lr, 0.9f, 0.95f, 1e-8f, 0.1f, 1, clip, 0, 0, 0};
  gpu->optimizer_step(o);
  // updated weights: the Adam step is ±lr-sized, so compare the update in units of lr
  double upd_max = 0;
  int64_t upd_far = 0, upd_n = 0;
  for (auto& [name, w0] : before) {
    std::vector<float> wg(w0.size(), NAN);
    gpu->read_tensor(name, wg.data(), static_cast<int64_t>(wg.size()));
    const float* wc = nullptr;
    for (auto& [n2, g] : cpu->gradients())
      if (n2 == name) wc = g->param;
    for (size_t i = 0; i < w0.size(); ++i) {
      const double d = std::fabs((static_cast<double>(wg[i]) - w0[i]) - (static_cast<double>(wc[i]) - w0[i])) / lr;
      upd_max = std::max(upd_max, std::isfinite(d) ? d : INFINITY);
      upd_far += !(d <= 0.5);  // NaN counts as far
      ++upd_n;
    }
  }
  row("model  %-12s train step: loss cpu %.5f gpu %.5f, logp/entropy max|Δ| %.3e, grad norm cpu %.4f gpu %.4f, "
      "worst grad rel-L2 %.3e (%s), update |Δ|/lr max %.2f, %.3f%% of weights off by > lr/2; entropy max|Δ| %.3e",
      tag.c_str(), loss_c, loss_g, dlogp.max_rel, norm_c, o.grad_norm, worst, worst_name.c_str(), upd_max,
      100.0 * upd_far / std::max<int64_t>(1, upd_n), dent.max_rel);
  check(dlogp.stats_ok(kStatTol), tag + " train logp");
  check(dent.stats_ok(kEntropyTol), tag + " train entropy");
  check(!grads_c.empty() && upd_n > 0, tag + " the CPU step produced gradients to compare");
  check(std::fabs(loss_c - loss_g) <= 1e-2 * std::max(1.0, std::fabs(loss_c)), tag + " train loss");
  check(worst <= 5e-2, tag + " gradient rel-L2 error " + std::to_string(worst) + " on " + worst_name);
  check(std::fabs(norm_c - o.grad_norm) <= 3e-2 * norm_c, tag + " gradient norm");
  check(upd_far * 100 <= upd_n, tag + " more than 1% of updated weights differ by more than lr/2");
  json_num(tag + ".train_loss_cpu", loss_c);
  json_num(tag + ".train_loss_gpu", loss_g);
  json_num(tag + ".train_grad_worst_rel", worst);
  json_num(tag + ".train_update_far_fraction", static_cast<double>(upd_far) / upd_n);
}

// ---------------------------------------------------------------- timings

// Runs `work` with the device profiler on and prints where the device time went, per scope,
// next to the wall time (their difference is host time: launches, uploads, synchronization).
template <class F>
void profiled(const char* what, int repeats, F&& work) {
  ad::cuda::device_profiler_reset();
  ad::cuda::device_profiler_enable(true);
  const double t0 = now_s();
  for (int i = 0; i < repeats; ++i) work();
  const double wall_ms = 1e3 * (now_s() - t0) / repeats;
  ad::cuda::device_profiler_enable(false);
  const auto rows = ad::cuda::device_profiler_snapshot();
  double sum_ms = 0;
  for (const auto& r : rows) sum_ms += r.total_ms / repeats;
  row("profile  %s: %.2f ms wall per call, %.2f ms in the scopes below (%d calls profiled; device ms per call)", what, wall_ms,
      sum_ms, repeats);
  for (const auto& r : rows)
    row("profile    %-22s %9.3f ms  %5.1f%%  (%lld launches of the scope)", r.name.c_str(), r.total_ms / repeats,
        100.0 * r.total_ms / repeats / wall_ms, static_cast<long long>(r.calls));
}

void bench_qwen3_06b(double deadline) {
  Config c;
  c.vocab = 151936;
  c.hidden = 1024;
  c.intermediate = 3072;
  c.layers = 28;
  c.heads = 16;
  c.kv_heads = 8;
  c.head_dim = 128;
  c.qk_norm = true;
  c.tie_embeddings = true;
  c.rope_theta = 1e6;
  double t0 = now_s();
  const Weights w = random_weights(c, 3, 4.f);
  int64_t params = 0;
  for (auto& d : w.data) params += static_cast<int64_t>(d.size());
  auto gpu = cuda_model(c, w);
  row("bench  Qwen3-0.6B shape: %.3f B parameters, random weights built and uploaded in %.1f s", params / 1e9, now_s() - t0);
  json_num("bench.params", static_cast<double>(params));
  const double peak = 989e12;  // H200/H100 SXM dense bf16

  // prefill 8 × 512, then decode 8 slots for 64 steps (greedy on device)
  const int B = 8, P = 512, D = 64;
  CudaCache cache(*gpu, B, P + D + 16);  // room for the profiled decode steps too
  std::mt19937 rng(1);
  std::vector<int32_t> toks(B * P);
  for (auto& t : toks) t = static_cast<int32_t>(rng() % c.vocab);
  std::vector<BatchEntry> batch;
  for (int s = 0; s < B; ++s) batch.push_back({s, P, 1, 0});
  ad::SamplingParams greedy[B];
  for (auto& p : greedy) p.temperature = 0;
  {
    CudaCache warm(*gpu, B, P);  // warm-up: scratch allocation and first launches
    gpu_step(*gpu, warm, batch, toks, {}, greedy, 0, false);
  }
  ADL_CHECK(cudaDeviceSynchronize());
  t0 = now_s();
  StepOut pre = gpu_step(*gpu, cache, batch, toks, {}, greedy, 0, false);
  const double t_prefill = now_s() - t0;
  row("bench  prefill %d × %d tokens: %.3f s, %.0f tokens/s", B, P, t_prefill, B * P / t_prefill);
  json_num("bench.prefill_tokens_per_s", B * P / t_prefill);
  std::vector<int32_t> last = pre.tokens;
  std::vector<BatchEntry> dec;
  for (int s = 0; s < B; ++s) dec.push_back({s, 1, 1, 0});
  gpu_step(*gpu, cache, dec, last, {}, greedy, 0, false);  // warm-up
  t0 = now_s();
  int steps = 0;
  for (; steps < D - 1 && now_s() < deadline - 60; ++steps) {
    StepOut o = gpu_step(*gpu, cache, dec, last, {}, greedy, 0, false);
    last = o.tokens;
  }
  const double t_dec = now_s() - t0;
  row("bench  decode batch %d, context %d..%d: %.2f ms/step, %.0f tokens/s", B, P, P + steps, 1e3 * t_dec / std::max(steps, 1),
      B * steps / t_dec);
  json_num("bench.decode_tokens_per_s", B * steps / t_dec);
  if (now_s() < deadline - 50)
    profiled("decode step (batch 8)", 4, [&] {
      StepOut o = gpu_step(*gpu, cache, dec, last, {}, greedy, 0, false);
      last = o.tokens;
    });

  // training: 8 × 512 tokens (prompt 32), forward + backward + AdamW
  if (now_s() > deadline - 45) {
    row("bench  training: skipped (time budget)");
    return;
  }
  gpu->set_trainable(true, false);
  std::vector<int32_t> lengths(B, P), prompts(B, 32);
  int64_t R = 0;
  for (int i = 0; i < B; ++i) R += lengths[i] - prompts[i];
  std::vector<float> a(R, 1.f / R), b(R, 0.f), lp(R), en(R);
  auto train_step = [&] {
    ad_cuda_train_forward f{};
    f.tokens = toks.data();
    f.lengths = lengths.data();
    f.prompt_lengths = prompts.data();
    f.n_sequences = B;
    f.rows_capacity = R;
    f.logp = lp.data();
    f.entropy = en.data();
    gpu->train_forward(f, nullptr);
    gpu->train_backward(a.data(), b.data(), R);
    ad_cuda_optimizer o{1e-5f, 0.9f, 0.95f, 1e-8f, 0.0f, 1, 1.0f, 0, 0, 0};
    gpu->optimizer_step(o);
    return o;
  };
  train_step();  // warm-up (allocations)
  int iters = 0;
  t0 = now_s();
  ad_cuda_optimizer last_o{};
  for (; iters < 3 && now_s() < deadline - 20; ++iters) last_o = train_step();
  const double t_train = (now_s() - t0) / std::max(iters, 1);
  const double tokens = static_cast<double>(B) * (P - 1);
  const double mfu = 6.0 * params * tokens / t_train / peak;
  row("bench  training %d × %d tokens (fwd + bwd + AdamW): %.3f s/step, %.0f tokens/s, MFU %.1f%% of %.0f TFLOP/s (6·N·tokens), "
      "grad norm %.3g",
      B, P, t_train, tokens / t_train, 100 * mfu, peak / 1e12, last_o.grad_norm);
  check(std::isfinite(last_o.grad_norm), "0.6B training produced a non-finite gradient norm");
  if (now_s() < deadline - 15) profiled("training step (8 × 512)", 1, [&] { train_step(); });
  json_num("bench.train_tokens_per_s", tokens / t_train);
  json_num("bench.train_mfu", mfu);
}

}  // namespace

int main() {
  const char* to = std::getenv("AD_CHECK_TIMEOUT");
  const double limit = to ? std::max(20.0, std::atof(to)) : 140.0;
  const double start = now_s(), deadline = start + limit;
  std::thread([limit] {
    std::this_thread::sleep_for(std::chrono::duration<double>(limit + 5));
    std::fprintf(stderr, "ad_check_model: watchdog: %.0f s passed, exiting\n", limit + 5);
    std::_Exit(3);
  }).detach();
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("ad_check_model: no CUDA device (%s)\n", err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const cudaError_t gemm_err = ad::cuda::gemm_init();
  std::printf("ad_check_model: %s (sm_%d%d, %d SMs, %.1f GiB); GEMM path: %s%s\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, ad::cuda::gemm_path(),
              gemm_err == cudaSuccess ? "" : " (cuBLAS was demanded but did not load)");
  try {
    if (!std::getenv("AD_CHECK_SKIP_PARITY")) {
      const char* fams[] = {"qwen3", "qwen2", "llama3", "llama3-bias"};
      for (const char* f : fams) parity_family(f, false);
      parity_family("qwen3", true);
      for (const char* f : fams) parity_train(f, false);
      parity_train("qwen3", true);
    }
    if (!std::getenv("AD_CHECK_SKIP_BENCH")) bench_qwen3_06b(deadline);
  } catch (const std::exception& e) {
    std::printf("ad_check_model: ERROR %s\n", e.what());
    g_fail = true;
    json_num("error", 1);
    g_json += "}";
    if (const char* path = std::getenv("AD_CHECK_JSON"))
      if (FILE* fp = std::fopen(path, "w")) {
        std::fputs(g_json.c_str(), fp);
        std::fclose(fp);
      }
    return 2;
  }
  json_num("seconds", now_s() - start);
  g_json += "}";
  if (const char* path = std::getenv("AD_CHECK_JSON"))
    if (FILE* fp = std::fopen(path, "w")) {
      std::fputs(g_json.c_str(), fp);
      std::fclose(fp);
    }
  std::printf("\nmodel-summary (%s, %.0f s)\n", g_fail ? "FAIL" : "PASS", now_s() - start);
  for (const auto& r : g_table) std::printf("%s\n", r.c_str());
  return g_fail ? 1 : 0;
}
