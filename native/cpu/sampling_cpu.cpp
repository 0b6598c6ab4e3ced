#include "cpu/sampling_cpu.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "cpu/logit_stats_cpu.h"

namespace ad::cpu {
namespace {

constexpr int kHeapTopK = 256;              // top-k up to this: a bounded heap; beyond: nth_element
constexpr int64_t kCdfBlock = 256;          // inverse CDF: block sums first, then one block's elements
constexpr int64_t kSortedPickMax = 2048;    // kept sets up to this are sorted by id, larger are scattered
constexpr float kNucleusCutoff = 1.0f / 1024;  // top-p's first candidates: mass ≥ max/1024

// Regions of the caller's scratch.
struct Scratch {
  float* w;         // [V] penalized, scaled logits; later masses
  float* km;        // [V] masses of the kept tokens, aligned with ids
  int32_t* ids;     // [V] penalty marks, then kept ids
  double* block;    // [V/kCdfBlock + 1] inverse-CDF block sums
  TopKEntry* heap;  // [kHeapTopK]
  uint64_t* pairs;  // [kSortedPickMax] (id << 32 | mass bits), sorted for the pick
};

size_t align64(size_t n) { return (n + 63) & ~size_t(63); }

// Lays the regions out from `base` rounded up to 64 bytes (nullptr: only measures); returns the
// bytes used, slack for that rounding included.
size_t layout(char* base, int64_t vocab, Scratch* s) {
  const size_t V = static_cast<size_t>(std::max<int64_t>(vocab, 1));
  if (base) base += align64(reinterpret_cast<uintptr_t>(base)) - reinterpret_cast<uintptr_t>(base);
  size_t off = 64;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off - 64 : nullptr;
    off += align64(bytes);
    return p;
  };
  char* w = take(V * sizeof(float));
  char* km = take(V * sizeof(float));
  char* ids = take(V * sizeof(int32_t));
  char* block = take((V / kCdfBlock + 1) * sizeof(double));
  char* heap = take(kHeapTopK * sizeof(TopKEntry));
  char* pairs = take(kSortedPickMax * sizeof(uint64_t));
  if (s) {
    *s = Scratch{reinterpret_cast<float*>(w), reinterpret_cast<float*>(km), reinterpret_cast<int32_t*>(ids),
                 reinterpret_cast<double*>(block), reinterpret_cast<TopKEntry*>(heap),
                 reinterpret_cast<uint64_t*>(pairs)};
  }
  return off;
}

// ---------------------------------------------------------------------------------------------
// Steps 1–3

void scale_row(const float* z, int64_t V, const SamplingParams& p, float* w) {
  if (sampling_is_greedy(p)) {
    std::memcpy(w, z, static_cast<size_t>(V) * sizeof(float));
    return;
  }
  const float T = p.temperature;
  for (int64_t i = 0; i < V; ++i) w[i] = z[i] / T;
}

// w = z / T, then each penalized id rewritten once from z. marks[id] (only at touched ids): bit 0
// = in history, bits 1.. = count among generated ids, −1 once rewritten; penalties then apply once
// per distinct id in O(n_history + n_generated), without clearing a vocabulary-sized table.
void penalized_logits(const float* z, int64_t V, const SamplingParams& p, const int32_t* history, int64_t nh,
                      const int32_t* generated, int64_t ng, float* w, int32_t* marks) {
  scale_row(z, V, p, w);
  if (p.repetition_penalty == 1.0f) nh = 0;
  if (p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f) ng = 0;
  auto valid = [V](int32_t id) { return id >= 0 && id < V; };
  for (int64_t i = 0; i < nh; ++i) if (valid(history[i])) marks[history[i]] = 0;
  for (int64_t i = 0; i < ng; ++i) if (valid(generated[i])) marks[generated[i]] = 0;
  for (int64_t i = 0; i < nh; ++i) if (valid(history[i])) marks[history[i]] |= 1;
  for (int64_t i = 0; i < ng; ++i) if (valid(generated[i])) marks[generated[i]] += 2;
  auto rewrite = [&](int32_t id) {
    if (!valid(id) || marks[id] < 0) return;
    w[id] = penalized_logit(z[id], p, (marks[id] & 1) != 0, marks[id] >> 1);
    marks[id] = -1;
  };
  for (int64_t i = 0; i < nh; ++i) rewrite(history[i]);
  for (int64_t i = 0; i < ng; ++i) rewrite(generated[i]);
}

// Lowest id holding the maximum.
int32_t argmax_lowest(const float* w, int64_t V) {
  const float m = max_f32(w, V);
  for (int64_t i = 0; i < V; ++i) {
    if (w[i] == m) return static_cast<int32_t>(i);
  }
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Steps 4–7: the kept set as parallel lists ids[j], km[j] (unnormalized mass e^{w − max})

// Step 4: ids[0..k) = the k largest w, boundary ties toward lower ids (in no particular order).
int64_t select_top_k(const float* w, int64_t V, int64_t k, Scratch& s) {
  if (k <= kHeapTopK) {
    int n = 0;
    topk_scan(w, V, 0, s.heap, n, static_cast<int>(k));
    for (int j = 0; j < n; ++j) s.ids[j] = s.heap[j].id;
    return n;
  }
  std::iota(s.ids, s.ids + V, 0);
  std::nth_element(s.ids, s.ids + (k - 1), s.ids + V,
                   [w](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
  return k;
}

// km[j] = mass[ids[j]]; returns their sum.
double gather(const float* mass, const int32_t* ids, int64_t n, float* km) {
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += (km[j] = mass[ids[j]]);
  return sum;
}

// Top-p without top-k: the tokens with mass ≥ max/1024 when they already hold `need`
// (almost always), else every token.
int64_t nucleus_candidates(const float* mass, int64_t V, double need, Scratch& s) {
  int64_t n = indices_at_least(mass, V, kNucleusCutoff, s.ids);
  if (gather(mass, s.ids, n, s.km) >= need) return n;
  std::iota(s.ids, s.ids + V, 0);
  std::memcpy(s.km, mass, static_cast<size_t>(V) * sizeof(float));
  return V;
}

struct KeptList {
  int32_t* ids;
  float* km;
  bool before(int64_t a, int64_t b) const { return mass_before(km[a], ids[a], km[b], ids[b]); }
  void swap(int64_t a, int64_t b) const {
    std::swap(ids[a], ids[b]);
    std::swap(km[a], km[b]);
  }
};

// Moves the best of [lo, hi) (mass desc, id asc) to lo.
void move_best_first(const KeptList& l, int64_t lo, int64_t hi) {
  int64_t best = lo;
  for (int64_t j = lo + 1; j < hi; ++j) if (l.before(j, best)) best = j;
  l.swap(lo, best);
}

// Median of three as the pivot, placed at hi − 1.
void place_pivot(const KeptList& l, int64_t lo, int64_t hi) {
  int64_t a = lo, b = lo + (hi - lo) / 2, c = hi - 1;
  if (l.before(b, a)) std::swap(a, b);
  if (l.before(c, b)) std::swap(b, c);
  if (l.before(b, a)) std::swap(a, b);
  l.swap(b, hi - 1);
}

// Step 6 by weighted quickselect, O(n) expected: reorders the list so that its first `count`
// entries are the shortest prefix, in (mass desc, id asc) order, whose mass reaches `need`.
int64_t nucleus_prefix(const KeptList& l, int64_t n, double need) {
  if (!(need > 0)) {  // p ≤ 0 keeps the single most probable token
    move_best_first(l, 0, n);
    return n > 0 ? 1 : 0;
  }
  int64_t lo = 0, hi = n;
  double above = 0;  // mass of [0, lo): kept, and still < need
  while (hi - lo > 1) {
    place_pivot(l, lo, hi);
    int64_t store = lo;
    double before_mass = 0;
    for (int64_t j = lo; j < hi - 1; ++j) {
      if (l.before(j, hi - 1)) {
        l.swap(j, store);
        before_mass += l.km[store++];
      }
    }
    l.swap(store, hi - 1);  // pivot at `store`, everything ranked before it on its left
    if (above + before_mass >= need) {
      hi = store;
    } else if (above + before_mass + l.km[store] >= need) {
      return store + 1;
    } else {
      above += before_mass + l.km[store];
      lo = store + 1;
    }
  }
  return hi == lo ? lo : lo + 1;  // one left: it completes the prefix (or rounding fell short)
}

// Step 7: keeps entries with mass ≥ min_p · max mass, compacting the list; returns the count.
int64_t apply_min_p(const KeptList& l, int64_t n, float min_p) {
  float max_mass = 0;
  for (int64_t j = 0; j < n; ++j) max_mass = std::max(max_mass, l.km[j]);
  int64_t kept = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (min_p_keeps(l.km[j], max_mass, min_p)) {
      l.ids[kept] = l.ids[j];
      l.km[kept++] = l.km[j];
    }
  }
  return kept;
}

// ---------------------------------------------------------------------------------------------
// Step 8: inverse CDF in ascending id order

int32_t last_positive(const float* mass, int64_t begin, int64_t end) {
  for (int64_t i = end - 1; i >= begin; --i) if (mass[i] > 0) return static_cast<int32_t>(i);
  return static_cast<int32_t>(begin);
}

// mass: a dense [V] row (0 = removed). Block sums locate the block, then its elements the token.
int32_t pick_dense(const float* mass, int64_t V, float u, double* block) {
  const int64_t nb = (V + kCdfBlock - 1) / kCdfBlock;
  double total = 0;
  for (int64_t b = 0; b < nb; ++b) total += (block[b] = sum_f32(mass + b * kCdfBlock, std::min(kCdfBlock, V - b * kCdfBlock)));
  const double target = static_cast<double>(u) * total;
  double cum = 0;
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t begin = b * kCdfBlock, end = std::min(V, begin + kCdfBlock);
    if (cum + block[b] > target) {
      double c = cum;
      for (int64_t i = begin; i < end; ++i) {
        c += mass[i];
        if (c > target) return static_cast<int32_t>(i);
      }
      return last_positive(mass, begin, end);  // the block's f32 sum rounded above its elements'
    }
    cum += block[b];
  }
  return last_positive(mass, 0, V);
}

// The kept list, sorted by id when small, else scattered into the dense row w.
int32_t pick_from_list(const KeptList& l, int64_t n, int64_t V, float u, Scratch& s) {
  if (n > kSortedPickMax) {
    std::fill(s.w, s.w + V, 0.0f);
    for (int64_t j = 0; j < n; ++j) s.w[l.ids[j]] = l.km[j];
    return pick_dense(s.w, V, u, s.block);
  }
  for (int64_t j = 0; j < n; ++j) {
    uint32_t bits;
    std::memcpy(&bits, &l.km[j], sizeof bits);
    s.pairs[j] = (static_cast<uint64_t>(static_cast<uint32_t>(l.ids[j])) << 32) | bits;
  }
  std::sort(s.pairs, s.pairs + n);
  auto id_of = [](uint64_t pair) { return static_cast<int32_t>(pair >> 32); };
  auto mass_of = [](uint64_t pair) {
    uint32_t bits = static_cast<uint32_t>(pair);
    float m;
    std::memcpy(&m, &bits, sizeof m);
    return m;
  };
  double total = 0;
  for (int64_t j = 0; j < n; ++j) total += mass_of(s.pairs[j]);
  const double target = static_cast<double>(u) * total;
  double cum = 0;
  int32_t last = id_of(s.pairs[0]);
  for (int64_t j = 0; j < n; ++j) {
    float m = mass_of(s.pairs[j]);
    if (!(m > 0)) continue;
    cum += m;
    last = id_of(s.pairs[j]);
    if (cum > target) return last;
  }
  return last;
}

// No top-k, no top-p: every token, min-p as a floor on the mass.
int32_t sample_dense(float* w, int64_t V, float max_w, float min_p, float u, Scratch& s) {
  exp_shifted(w, V, max_w, w, min_p > 0 ? min_p : 0.0f);  // the max's mass is exactly e^0 = 1
  return pick_dense(w, V, u, s.block);
}

}  // namespace

size_t sampling_scratch_bytes(int64_t vocab) { return layout(nullptr, vocab, nullptr); }

int32_t sample_token(const float* logits, int64_t vocab, const SamplingParams& p, uint64_t position,
                     const int32_t* history, int64_t n_history, const int32_t* generated, int64_t n_generated,
                     void* scratch) {
  if (vocab <= 1) return 0;
  Scratch s;
  layout(static_cast<char*>(scratch), vocab, &s);
  penalized_logits(logits, vocab, p, history, n_history, generated, n_generated, s.w, s.ids);
  const float max_w = max_f32(s.w, vocab);
  if (sampling_is_greedy(p) || !(max_w > kNegInf)) return argmax_lowest(s.w, vocab);

  const float u = sampling_uniform(p, position);
  const bool use_top_k = p.top_k > 0 && p.top_k < vocab;
  const bool use_top_p = p.top_p < 1.0f;
  if (!use_top_k && !use_top_p) return sample_dense(s.w, vocab, max_w, p.min_p, u, s);

  KeptList kept{s.ids, s.km};
  int64_t n;
  double total;
  if (use_top_k) {
    n = select_top_k(s.w, vocab, p.top_k, s);
    gather(s.w, s.ids, n, s.km);
    total = exp_shifted(s.km, n, max_w, s.km);  // the max is always among the top k
  } else {
    total = exp_shifted(s.w, vocab, max_w, s.w);
    n = nucleus_candidates(s.w, vocab, static_cast<double>(p.top_p) * total, s);
  }
  if (use_top_p) n = nucleus_prefix(kept, n, static_cast<double>(p.top_p) * total);
  if (p.min_p > 0) n = apply_min_p(kept, n, p.min_p);
  return pick_from_list(kept, n, vocab, u, s);
}

}  // namespace ad::cpu
