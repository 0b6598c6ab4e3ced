// ad_check_attention: the tensor-core attention of native/cuda/ops_attention.h (forward,
// split-key forward, backward) and the warp kernels of ops_layers.h against a float64 CPU
// reference on fresh random bf16 inputs, over ragged layouts; then timings of both.
//
//   ad_check_attention [--seed N] [--json PATH] [--quick] [--no-bench] [--timeout SECONDS]
//
// Exit status: 0 all parity checks passed; 1 a check failed; 2 a CUDA error or no device;
// 3 the watchdog fired. Outputs are poisoned (NaN) before every call and cache positions no
// token may read are NaN, so a missed write or an out-of-range read fails the check.
//
// Tolerances (u = 2^-8, the worst-case relative rounding of bf16). Each output row vector
// (one token, one head) is compared elementwise against the reference, the error divided by the
// reference row's rms:
//   out      max(0, |x − ref| − u·|ref|) / rms ≤ 1.6e-2: the output's own bf16 rounding is taken
//            off; what is left is P rounded to bf16 before P·V (≤ u per weight, random signs).
//   dq dk dv max |x − ref| / max(rms, E) ≤ 3e-2. dS = P·(dP − delta) cancels (a row with one key
//            has dq = 0 exactly), so a gradient row is measured against E, the root-sum-square of
//            the magnitudes of its terms: for dq, E² = Σ_j (scale·P_j·(Σ|dout∘v_j| + Σ|dout∘out|))²·
//            mean(k_j²) (dk alike with q, over the queries that see the key; dv: Σ P²·mean(dout²)).
//            Rounding dout, P and dS to bf16 and delta's use of the bf16 output each move a term by
//            ≤ u of those magnitudes; the max over a row sits ~3σ above the typical ~u.
//   all      ‖x − ref‖ / ‖ref‖ over the whole tensor ≤ 8e-3 (≈ 2u).
//   lse      |x − ref| ≤ 1e-3 absolute (scores are exact bf16 products summed in f32; only the
//            f32 sums and ex2.approx round).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cuda/check/check_harness.h"
#include "cuda/ops_attention.h"
#include "cuda/ops_layers.h"

using namespace ad;
using bf16 = __nv_bfloat16;

namespace {

using harness::bf;
using harness::DBuf;
using harness::die;
using harness::g_failures;
using harness::g_json_path;
using harness::g_results;
using harness::g_rng;
using harness::g_section;
using harness::normal;
using harness::num;
using harness::start_watchdog;
using harness::to_bf16;
using harness::time_ms;
using harness::to_f32;
using harness::write_json;

// This program's results all belong to one section.
void check(const std::string& name, const std::string& metric, double value, double tol, const std::string& note = "") {
  harness::check("attention", name, metric, value, tol, note);
}
void timing(const std::string& name, const std::string& metric, double value, const std::string& note = "") {
  harness::timing("attention", name, metric, value, note);
}

// Runs a library call; a thrown error (a failed launch) is fatal.
void call(const char* what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    die(2, std::string(what) + ": " + e.what());
  }
}

// Runs fn(i) for i in [0, n) on all cores.
void parallel(int n, const std::function<void(int)>& fn) {
  const int workers = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 64u));
  std::atomic<int> next{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < workers; ++w)
    pool.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& t : pool) t.join();
}


// ---------------------------------------------------------------------------------------------
// A batch layout, its inputs on host and device, and the float64 reference

struct Layout {
  std::string name;
  int heads, kv_heads, hd, slots, capacity;
  std::vector<cuda::SlotSpan> spans;  // row0 filled in by build(): spans are laid out in order
  float q_sd = 1.f;                   // larger → peakier softmax
};

struct Problem {
  Layout L;
  int64_t T = 0;
  int q_dim = 0, kv_dim = 0, group = 0, max_keys = 0, tile_rows = 0;
  float scale = 0;
  std::vector<int32_t> slot, pos, row0s, pos0s, rowss;  // TokenMap and SlotRows (per slot)
  std::vector<float> q, k, v, dout;                     // bf16-rounded q, k, v; f32 dout
  // reference
  std::vector<double> out, lse, dq, dk, dv;
  std::vector<double> e2_dq, e2_dk, e2_dv;  // squared error scales per (row, head) / (row, kv head)
  // device
  DBuf<bf16> dq_in, dk_cache, dv_cache, d_out;
  DBuf<float> d_lse, d_dout, d_delta, d_dq, d_dk, d_dv, d_work;
  DBuf<int32_t> d_slot, d_pos, d_row0, d_pos0, d_rows;
  DBuf<cuda::AttentionTile> d_qt, d_kt;
  int n_qt = 0, n_kt = 0;

  cuda::KVLayer cache() const { return {dk_cache.p, dv_cache.p, L.capacity, kv_dim}; }
  cuda::TokenMap map() const { return {d_slot.p, d_pos.p}; }
  cuda::SlotRows slot_rows() const { return {d_row0.p, d_pos0.p, d_rows.p}; }
};

void build(Problem& P, const Layout& L, bool with_ref, bool backward) {
  P.L = L;
  P.q_dim = L.heads * L.hd;
  P.kv_dim = L.kv_heads * L.hd;
  P.group = L.heads / L.kv_heads;
  P.scale = 1.f / std::sqrt(float(L.hd));
  P.row0s.assign(L.slots, -1);
  P.pos0s.assign(L.slots, 0);
  P.rowss.assign(L.slots, 0);
  int row = 0;
  for (cuda::SlotSpan& s : P.L.spans) {
    s.row0 = row;
    P.row0s[s.slot] = row;
    P.pos0s[s.slot] = s.pos0;
    P.rowss[s.slot] = s.rows;
    for (int i = 0; i < s.rows; ++i) {
      P.slot.push_back(s.slot);
      P.pos.push_back(s.pos0 + i);
    }
    row += s.rows;
    P.max_keys = std::max(P.max_keys, s.pos0 + s.rows);
  }
  P.T = row;
  P.q.resize(P.T * P.q_dim);
  for (float& x : P.q) x = bf(normal(L.q_sd));
  // positions a span may read are random; all others NaN (reading one poisons the result)
  const size_t cache_n = size_t(L.slots) * L.capacity * P.kv_dim;
  P.k.assign(cache_n, NAN);
  P.v.assign(cache_n, NAN);
  for (const cuda::SlotSpan& s : P.L.spans)
    for (int p = 0; p < s.pos0 + s.rows; ++p)
      for (int c = 0; c < P.kv_dim; ++c) {
        const size_t at = (size_t(s.slot) * L.capacity + p) * P.kv_dim + c;
        P.k[at] = bf(normal(1.f));
        P.v[at] = bf(normal(1.f));
      }
  P.dout.resize(P.T * P.q_dim);
  for (float& x : P.dout) x = normal(1.f);

  P.dq_in = DBuf<bf16>(P.q.size());
  P.dq_in.upload(to_bf16(P.q));
  P.dk_cache = DBuf<bf16>(cache_n);
  P.dk_cache.upload(to_bf16(P.k));
  P.dv_cache = DBuf<bf16>(cache_n);
  P.dv_cache.upload(to_bf16(P.v));
  P.d_out = DBuf<bf16>(P.T * P.q_dim);
  P.d_lse = DBuf<float>(P.T * L.heads);
  P.d_dout = DBuf<float>(P.dout.size());
  P.d_dout.upload(P.dout);
  P.d_delta = DBuf<float>(P.T * L.heads);
  P.d_dq = DBuf<float>(P.T * P.q_dim);
  P.d_dk = DBuf<float>(P.T * P.kv_dim);
  P.d_dv = DBuf<float>(P.T * P.kv_dim);
  P.d_work = DBuf<float>(cuda::attention_fwd_work_floats(P.T, L.heads, L.hd));
  P.d_slot = DBuf<int32_t>(P.T);
  P.d_slot.upload(P.slot);
  P.d_pos = DBuf<int32_t>(P.T);
  P.d_pos.upload(P.pos);
  P.d_row0 = DBuf<int32_t>(L.slots);
  P.d_row0.upload(P.row0s);
  P.d_pos0 = DBuf<int32_t>(L.slots);
  P.d_pos0.upload(P.pos0s);
  P.d_rows = DBuf<int32_t>(L.slots);
  P.d_rows.upload(P.rowss);

  if (cuda::attention_tc_supported(L.hd, L.heads, L.kv_heads)) {
    P.tile_rows = cuda::attention_q_tile_rows(L.heads, L.kv_heads);
    const auto qt = cuda::plan_attention_q_tiles(P.L.spans, P.tile_rows);
    const auto kt = cuda::plan_attention_key_tiles(P.L.spans);
    P.n_qt = int(qt.size());
    P.n_kt = int(kt.size());
    P.d_qt = DBuf<cuda::AttentionTile>(qt.size());
    P.d_qt.upload(qt);
    P.d_kt = DBuf<cuda::AttentionTile>(kt.size());
    P.d_kt.upload(kt);
  }
  if (!with_ref) return;

  // float64 reference: a task per (span, kv head) owns the dk/dv of its span's keys
  P.out.assign(P.T * P.q_dim, 0);
  P.lse.assign(P.T * L.heads, 0);
  P.dq.assign(P.T * P.q_dim, 0);
  P.dk.assign(P.T * P.kv_dim, 0);
  P.dv.assign(P.T * P.kv_dim, 0);
  P.e2_dq.assign(P.T * L.heads, 0);
  P.e2_dk.assign(P.T * L.kv_heads, 0);
  P.e2_dv.assign(P.T * L.kv_heads, 0);
  const int n_spans = int(P.L.spans.size());
  parallel(n_spans * L.kv_heads, [&](int task) {
    const cuda::SlotSpan& s = P.L.spans[task / L.kv_heads];
    const int kvh = task % L.kv_heads, hd = L.hd, n_all = s.pos0 + s.rows;
    std::vector<double> sc(n_all), gk(size_t(s.rows) * hd, 0), gv(size_t(s.rows) * hd, 0), ek(s.rows, 0), ev(s.rows, 0);
    auto mean_sq = [hd](const float* x) {
      double a = 0;
      for (int c = 0; c < hd; ++c) a += double(x[c]) * x[c];
      return a / hd;
    };
    auto kvp = [&](const std::vector<float>& c, int p) { return &c[(size_t(s.slot) * L.capacity + p) * P.kv_dim + kvh * hd]; };
    for (int i = 0; i < s.rows; ++i) {
      const int64_t t = s.row0 + i;
      const int n = s.pos0 + i + 1;
      for (int h = kvh * P.group; h < (kvh + 1) * P.group; ++h) {
        const float* qv = &P.q[t * P.q_dim + h * hd];
        const float* dov = &P.dout[t * P.q_dim + h * hd];
        double mx = -INFINITY;
        for (int j = 0; j < n; ++j) {
          const float* kv = kvp(P.k, j);
          double d = 0;
          for (int c = 0; c < hd; ++c) d += double(qv[c]) * kv[c];
          sc[j] = d * P.scale;
          mx = std::max(mx, sc[j]);
        }
        double l = 0;
        for (int j = 0; j < n; ++j) l += std::exp(sc[j] - mx);
        const double lse = mx + std::log(l);
        P.lse[t * L.heads + h] = lse;
        double* o = &P.out[t * P.q_dim + h * hd];
        for (int j = 0; j < n; ++j) {
          sc[j] = std::exp(sc[j] - lse);  // now P
          const float* vv = kvp(P.v, j);
          for (int c = 0; c < hd; ++c) o[c] += sc[j] * vv[c];
        }
        if (!backward) continue;
        double delta = 0, delta_mag = 0;
        for (int c = 0; c < hd; ++c) {
          delta += double(dov[c]) * o[c];
          delta_mag += std::fabs(double(dov[c]) * o[c]);
        }
        const double q2 = mean_sq(qv), do2 = mean_sq(dov);
        double* g = &P.dq[t * P.q_dim + h * hd];
        for (int j = 0; j < n; ++j) {
          const float* vv = kvp(P.v, j);
          const float* kv = kvp(P.k, j);
          double d = 0, d_mag = 0;
          for (int c = 0; c < hd; ++c) {
            d += double(dov[c]) * vv[c];
            d_mag += std::fabs(double(dov[c]) * vv[c]);
          }
          const double ds = sc[j] * (d - delta), ds_mag = P.scale * sc[j] * (d_mag + delta_mag);
          for (int c = 0; c < hd; ++c) g[c] += P.scale * ds * kv[c];
          P.e2_dq[t * L.heads + h] += ds_mag * ds_mag * mean_sq(kv);
          if (j >= s.pos0) {
            ek[j - s.pos0] += ds_mag * ds_mag * q2;
            ev[j - s.pos0] += sc[j] * sc[j] * do2;
            double* a = &gk[size_t(j - s.pos0) * hd];
            double* b = &gv[size_t(j - s.pos0) * hd];
            for (int c = 0; c < hd; ++c) {
              a[c] += P.scale * ds * qv[c];
              b[c] += sc[j] * dov[c];
            }
          }
        }
      }
    }
    for (int i = 0; i < s.rows && backward; ++i) {
      P.e2_dk[(s.row0 + i) * int64_t(L.kv_heads) + kvh] = ek[i];
      P.e2_dv[(s.row0 + i) * int64_t(L.kv_heads) + kvh] = ev[i];
      for (int c = 0; c < hd; ++c) {
        P.dk[(s.row0 + i) * int64_t(P.kv_dim) + kvh * hd + c] = gk[size_t(i) * hd + c];
        P.dv[(s.row0 + i) * int64_t(P.kv_dim) + kvh * hd + c] = gv[size_t(i) * hd + c];
      }
    }
  });
}

// Row-wise error of x against ref (rows of `width` elements; see the file comment). rounding:
// the share of |ref| forgiven for x's own bf16 rounding; e2: squared error scale per row (null:
// the row's rms alone). Also the whole tensor's relative error.
struct Err {
  double row_max = 0, rel = 0;
};
Err compare(const std::vector<float>& x, const std::vector<double>& ref, int width, double rounding,
            const std::vector<double>* e2 = nullptr) {
  Err e;
  double num = 0, den = 0;
  for (size_t r0 = 0; r0 < ref.size(); r0 += width) {
    double ss = 0;
    for (int c = 0; c < width; ++c) ss += ref[r0 + c] * ref[r0 + c];
    double rms = std::sqrt(ss / width) + 1e-30;
    if (e2) rms = std::max(rms, std::sqrt((*e2)[r0 / width]));
    for (int c = 0; c < width; ++c) {
      const double d = std::fabs(double(x[r0 + c]) - ref[r0 + c]);
      if (!(d <= 1e300)) return {NAN, NAN};  // NaN or Inf never passes (std::max would drop a NaN)
      e.row_max = std::max(e.row_max, std::max(0.0, d - rounding * std::fabs(ref[r0 + c])) / rms);
      num += d * d;
    }
    den += ss;
  }
  e.rel = std::sqrt(num / (den + 1e-300));
  return e;
}

double max_abs_diff(const std::vector<float>& x, const std::vector<double>& ref) {
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::fabs(double(x[i]) - ref[i]);
    if (!(d <= m)) m = d;  // NaN sticks
    if (std::isnan(m)) return NAN;
  }
  return m;
}

constexpr double kU = 1.0 / 256;  // bf16 worst-case relative rounding
constexpr double kTolOut = 1.6e-2, kTolGrad = 3e-2, kTolRel = 8e-3, kTolLse = 1e-3;

void check_fwd(Problem& P, const std::string& tag) {
  const std::vector<float> out = to_f32(P.d_out.download());
  const Err e = compare(out, P.out, P.L.hd, kU);
  check(P.L.name + " " + tag + " out", "row max err", e.row_max, kTolOut);
  check(P.L.name + " " + tag + " out", "rel err", e.rel, kTolRel);
  check(P.L.name + " " + tag + " lse", "max abs err", max_abs_diff(P.d_lse.download(), P.lse), kTolLse);
}

void check_bwd(Problem& P, const std::string& tag) {
  const Err q = compare(P.d_dq.download(), P.dq, P.L.hd, 0, &P.e2_dq);
  const Err k = compare(P.d_dk.download(), P.dk, P.L.hd, 0, &P.e2_dk);
  const Err v = compare(P.d_dv.download(), P.dv, P.L.hd, 0, &P.e2_dv);
  check(P.L.name + " " + tag + " dq", "row max err", q.row_max, kTolGrad, "rel " + num(q.rel));
  check(P.L.name + " " + tag + " dk", "row max err", k.row_max, kTolGrad, "rel " + num(k.rel));
  check(P.L.name + " " + tag + " dv", "row max err", v.row_max, kTolGrad, "rel " + num(v.rel));
  check(P.L.name + " " + tag + " dq dk dv", "rel err", std::max({q.rel, k.rel, v.rel}), kTolRel);
}

void run_tc_fwd(Problem& P, bool split) {
  call("attention_tc_fwd", [&] {
    cuda::attention_tc_fwd(P.dq_in.p, P.cache(), P.d_qt.p, P.n_qt, P.tile_rows, P.T, P.max_keys, P.L.heads, P.L.kv_heads,
                           P.L.hd, P.scale, P.d_out.p, P.d_lse.p, split ? P.d_work.p : nullptr, split ? P.d_work.n : 0, nullptr);
  });
}
void run_tc_bwd(Problem& P) {
  call("attention_tc_bwd", [&] {
    cuda::attention_tc_bwd(P.dq_in.p, P.d_out.p, P.d_dout.p, P.d_lse.p, P.cache(), P.d_qt.p, P.n_qt, P.tile_rows, P.d_kt.p,
                           P.n_kt, P.T, P.L.heads, P.L.kv_heads, P.L.hd, P.scale, P.d_delta.p, P.d_dq.p, P.d_dk.p, P.d_dv.p,
                           nullptr);
  });
}
void run_naive_fwd(Problem& P) {
  call("attention_fwd", [&] {
    cuda::attention_fwd(P.dq_in.p, P.cache(), P.map(), P.T, P.L.heads, P.L.kv_heads, P.L.hd, P.scale, P.d_out.p, P.d_lse.p,
                        nullptr);
  });
}
void run_naive_bwd(Problem& P) {
  call("attention_bwd", [&] {
    cuda::attention_bwd(P.dq_in.p, P.d_out.p, P.d_dout.p, P.d_lse.p, P.cache(), P.map(), P.slot_rows(), P.T, P.L.heads,
                        P.L.kv_heads, P.L.hd, P.scale, P.d_delta.p, P.d_dq.p, P.d_dk.p, P.d_dv.p, nullptr);
  });
}
void poison_outputs(Problem& P) {
  P.d_out.poison();
  P.d_lse.poison();
  P.d_delta.poison();
  P.d_dq.poison();
  P.d_dk.poison();
  P.d_dv.poison();
  P.d_work.poison();
}

// Forward (plain and split-key), backward on the forward's own out/lse; the warp kernels too.
void parity(const Layout& L, bool naive) {
  g_section = L.name.c_str();
  Problem P;
  build(P, L, true, true);
  std::printf("%s: T %lld, heads %d/%d, hd %d, %d q tiles (%d rows), %d key tiles, max keys %d\n", L.name.c_str(),
              (long long)P.T, L.heads, L.kv_heads, L.hd, P.n_qt, P.tile_rows, P.n_kt, P.max_keys);
  for (int split = 0; split < 2; ++split) {
    poison_outputs(P);
    run_tc_fwd(P, split == 1);
    CK(cudaDeviceSynchronize());
    check_fwd(P, split ? "tc fwd split" : "tc fwd");
  }
  run_tc_bwd(P);  // on the split forward's out and lse
  CK(cudaDeviceSynchronize());
  check_bwd(P, "tc bwd");
  if (!naive) return;
  poison_outputs(P);
  run_naive_fwd(P);
  run_naive_bwd(P);
  CK(cudaDeviceSynchronize());
  check_fwd(P, "naive fwd");
  check_bwd(P, "naive bwd");
}

// Host-only: plans cover every row once, tiles in bounds; unsupported shapes are refused.
void plan_checks() {
  g_section = "plan";
  const std::vector<cuda::SlotSpan> spans = {{3, 0, 37, 1}, {0, 1, 0, 100}, {1, 101, 200, 130}, {2, 231, 5, 64}};
  int bad = 0;
  for (int tile_rows : {1, 9, 32, 64}) {
    for (int pass = 0; pass < 2; ++pass) {
      const auto tiles = pass ? cuda::plan_attention_key_tiles(spans) : cuda::plan_attention_q_tiles(spans, tile_rows);
      const int limit = pass ? cuda::kAttentionKeyTile : tile_rows;
      std::vector<int> seen(295, 0);
      for (const auto& t : tiles) {
        if (t.rows < 1 || t.rows > limit) ++bad;
        for (int r = 0; r < t.rows; ++r) ++seen[t.row0 + r];
        bool found = false;
        for (const auto& s : spans)
          found |= s.slot == t.slot && t.row0 >= s.row0 && t.row0 + t.rows <= s.row0 + s.rows &&
                   t.pos0 == s.pos0 + (t.row0 - s.row0) && t.row_end == s.row0 + s.rows;
        if (!found) ++bad;
      }
      for (int c : seen) bad += c != 1;
    }
  }
  check("plan: tiles cover each row once, within its span", "bad tiles", bad, 0);
  int accepted = 0;
  for (int hd : {8, 16, 48, 80, 96, 256}) accepted += cuda::attention_tc_supported(hd, 16, 8);
  accepted += cuda::attention_tc_supported(128, 16, 3) + cuda::attention_tc_supported(64, 130, 1);
  check("unsupported head dims / groups reported", "accepted", accepted, 0);
  int threw = 0;
  try {
    cuda::KVLayer c{nullptr, nullptr, 16, 80};
    cuda::attention_tc_fwd(nullptr, c, nullptr, 1, 1, 1, 1, 1, 1, 80, 1.f, nullptr, nullptr, nullptr, 0, nullptr);
  } catch (const std::runtime_error&) {
    threw = 1;
  }
  check("attention_tc_fwd(hd 80) throws", "threw", 1 - threw, 0);
}

// ---------------------------------------------------------------------------------------------
// Timings: TFLOP/s with causal FLOPs (forward 4·keys·hd per row and head, backward 2.5×)

constexpr double kPeakTflops = 989.0;  // H200 dense bf16

double causal_flops(const Problem& P) {
  double keys = 0;
  for (int32_t p : P.pos) keys += p + 1;
  return 4.0 * keys * P.L.hd * P.L.heads;
}

std::string tflops_note(double flops, double ms) {
  const double tf = flops / (ms * 1e-3) / 1e12;
  char b[96];
  std::snprintf(b, sizeof b, "%.1f TFLOP/s, %.2f%% of %.0f", tf, 100.0 * tf / kPeakTflops, kPeakTflops);
  return b;
}

void bench(bool quick) {
  const int reps = quick ? 5 : 10;
  {
    g_section = "bench training";
    Layout L{"train 8x512 h16/8 hd128", 16, 8, 128, 8, 512, {}};
    for (int s = 0; s < 8; ++s) L.spans.push_back({s, 0, 0, 512});
    Problem P;
    build(P, L, false, false);
    const double f = causal_flops(P);
    const double tf = time_ms([&] { run_tc_fwd(P, true); }, reps);
    const double nf = time_ms([&] { run_naive_fwd(P); }, quick ? 3 : reps);
    const double tb = time_ms([&] { run_tc_bwd(P); }, reps);
    const double nb = time_ms([&] { run_naive_bwd(P); }, quick ? 3 : reps);
    timing(L.name + " fwd tc", "us", tf * 1e3, tflops_note(f, tf));
    timing(L.name + " fwd naive", "us", nf * 1e3, tflops_note(f, nf) + ", tc speedup " + num(nf / tf));
    timing(L.name + " bwd tc", "us", tb * 1e3, tflops_note(2.5 * f, tb));
    timing(L.name + " bwd naive", "us", nb * 1e3, tflops_note(2.5 * f, nb) + ", tc speedup " + num(nb / tb));
  }
  for (int ctx : {512, 4096}) {
    g_section = "bench decode";
    Layout L{"decode 8 rows ctx " + std::to_string(ctx) + " h16/8 hd128", 16, 8, 128, 8, ctx, {}};
    for (int s = 0; s < 8; ++s) L.spans.push_back({s, 0, ctx - 1, 1});
    Problem P;
    build(P, L, false, false);
    const double f = causal_flops(P);
    const double kv_bytes = 2.0 * 8 * ctx * P.kv_dim * sizeof(bf16);
    auto note = [&](double ms) {
      char b[64];
      std::snprintf(b, sizeof b, ", K/V read %.0f GB/s", kv_bytes / (ms * 1e-3) / 1e9);
      return tflops_note(f, ms) + b;
    };
    const double ts = time_ms([&] { run_tc_fwd(P, true); }, reps);
    const double tu = time_ms([&] { run_tc_fwd(P, false); }, reps);
    const double tn = time_ms([&] { run_naive_fwd(P); }, reps);
    timing(L.name + " tc split", "us", ts * 1e3, note(ts));
    timing(L.name + " tc no split", "us", tu * 1e3, note(tu));
    timing(L.name + " naive", "us", tn * 1e3, note(tn) + ", split speedup " + num(tn / ts));
  }
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  bool quick = false, do_bench = true;
  double timeout = 120;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seed" && i + 1 < argc) seed = std::strtoull(argv[++i], nullptr, 10);
    else if (a == "--json" && i + 1 < argc) g_json_path = argv[++i];
    else if (a == "--quick") quick = true;
    else if (a == "--no-bench") do_bench = false;
    else if (a == "--timeout" && i + 1 < argc) timeout = std::atof(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--seed N] [--json PATH] [--quick] [--no-bench] [--timeout SECONDS]\n", argv[0]);
      return 2;
    }
  }
  start_watchdog(timeout);
  g_rng.seed(seed);
  std::printf("ad_check_attention: seed %llu%s\n", (unsigned long long)seed, quick ? " (quick)" : "");
  plan_checks();
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("no CUDA device: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    write_json("no-device");
    return 2;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  if (prop.major < 8) {
    std::printf("needs sm_80 or newer\n");
    write_json("unsupported-device");
    return 2;
  }

  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::pair<Layout, bool>> layouts;  // (layout, also run the warp kernels)
  layouts.push_back({{"prefill ragged+prefix h16/8 hd128", 16, 8, 128, 6, 1024,
                      {{3, 0, 37, 1}, {0, 0, 0, 100}, {1, 0, 200, 130}, {5, 0, 0, 64}, {2, 0, 513, 65}, {4, 0, 63, 2}}},
                     true});
  layouts.push_back({{"decode 1 row/slot long ctx h16/8 hd128", 16, 8, 128, 8, 4096,
                      {{0, 0, 0, 1}, {1, 0, 63, 1}, {2, 0, 64, 1}, {3, 0, 511, 1}, {4, 0, 1000, 1}, {5, 0, 2047, 1},
                       {6, 0, 3071, 1}, {7, 0, 4095, 1}}},
                     true});
  layouts.push_back({{"hd64 group 4 h16/4 ragged+prefix peaky", 16, 4, 64, 3, 512, {{2, 0, 10, 33}, {0, 0, 0, 17}, {1, 0, 100, 150}},
                      3.f},
                     true});
  layouts.push_back({{"hd64 group 7 h14/2 ragged", 14, 2, 64, 3, 512, {{0, 0, 0, 70}, {1, 0, 5, 9}, {2, 0, 300, 40}}}, true});
  layouts.push_back({{"hd32 group 4 h4/1", 4, 1, 32, 2, 512, {{0, 0, 0, 200}, {1, 0, 64, 64}}}, true});
  layouts.push_back({{"hd128 MHA h4/4 decode+prefill mix", 4, 4, 128, 3, 2048, {{0, 0, 700, 1}, {1, 0, 0, 300}, {2, 0, 1500, 1}}},
                     true});
  {
    const int n = quick ? 4 : 8, len = quick ? 256 : 512;
    Layout tr{"train " + std::to_string(n) + "x" + std::to_string(len) + " h16/8 hd128", 16, 8, 128, n, len, {}};
    for (int s = 0; s < n; ++s) tr.spans.push_back({s, 0, 0, len});
    layouts.push_back({tr, false});
  }
  for (const auto& [L, naive] : layouts) parity(L, naive);
  const double parity_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\nparity: %d failure(s) in %.1f s\n", g_failures, parity_s);
  if (do_bench) bench(quick);
  write_json(g_failures ? "parity-failed" : "ok");
  std::printf("\nad_check_attention: %s (%d failure(s))\n", g_failures ? "FAILED" : "PASSED", g_failures);
  return g_failures ? 1 : 0;
}
