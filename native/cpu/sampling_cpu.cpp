#include "cpu/sampling_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "cpu/logit_stats_cpu.h"

namespace ad::cpu {
namespace {

constexpr int kHeapTopK = 256;              // top-k up to this: a bounded heap; beyond: nth_element
constexpr int64_t kCdfBlock = 256;          // inverse CDF: block sums first, then one block's elements
constexpr int64_t kSortedPickMax = 2048;    // kept sets up to this are sorted by id, larger are scattered
constexpr int64_t kBracketMax = 1024;        // top-p bisection stops when this few tokens are undecided

// Regions of the caller's scratch.
struct Scratch {
  float* w;         // [V] penalized, scaled logits; later masses
  float* km;        // [V] masses of the kept tokens, aligned with ids
  int32_t* ids;     // [V] penalty marks, then kept ids
  int32_t* tmp;     // [V] indices while compacting the kept list
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
  char* tmp = take(V * sizeof(int32_t));
  char* block = take((V / kCdfBlock + 1) * sizeof(double));
  char* heap = take(kHeapTopK * sizeof(TopKEntry));
  char* pairs = take(kSortedPickMax * sizeof(uint64_t));
  if (s) {
    *s = Scratch{reinterpret_cast<float*>(w), reinterpret_cast<float*>(km), reinterpret_cast<int32_t*>(ids),
                 reinterpret_cast<int32_t*>(tmp), reinterpret_cast<double*>(block), reinterpret_cast<TopKEntry*>(heap),
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

// Step 6 without top-k, over the dense masses w of the whole row (max mass 1), in O(V): bisect a
// mass threshold until at most kBracketMax tokens are undecided. Tokens above `cut` hold less
// than `need` and are all kept; the undecided ones (cut_lo, cut] go to weighted quickselect.
struct DenseNucleus {
  float cut;         // every token with mass > cut is kept
  int64_t n_above;   // how many
  int64_t n_edge;    // plus s.ids/s.km[0, n_edge): the nucleus's last tokens, at or below cut
};

float float_of_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

uint32_t bits_of_float(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Keeps the list entries with lo < km <= hi (order preserved); returns how many.
int64_t compact_between(const KeptList& l, int64_t n, float lo, float hi, int32_t* tmp) {
  const int64_t kept = indices_between(l.km, n, lo, hi, tmp);
  for (int64_t t = 0; t < kept; ++t) {  // tmp ascends and tmp[t] >= t: in place is safe
    l.ids[t] = l.ids[tmp[t]];
    l.km[t] = l.km[tmp[t]];
  }
  return kept;
}

DenseNucleus dense_nucleus(const float* w, int64_t V, double need, Scratch& s) {
  // Masses are ≥ 0, so their bit patterns order like their values: bisect on the bits.
  uint32_t lo = 0, hi = bits_of_float(1.0f);  // the mass above lo reaches need, above hi it does not
  int64_t n_lo = 0, n_hi = 0;
  double s_hi = 0;
  if (sum_above(w, V, 0.0f, &n_lo) < need) return {0.0f, n_lo, 0};  // rounding: all of it
  auto step = [&](double s_mid, int64_t n_mid, uint32_t mid) {
    if (s_mid >= need) {
      lo = mid, n_lo = n_mid;
    } else {
      hi = mid, s_hi = s_mid, n_hi = n_mid;
    }
  };
  // Over the whole row while many tokens are undecided, ...
  while (n_lo - n_hi > std::max<int64_t>(kBracketMax, V / 8) && hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    int64_t n_mid = 0;
    const double s_mid = sum_above(w, V, float_of_bits(mid), &n_mid);
    step(s_mid, n_mid, mid);
  }
  // ... then over the undecided tokens only, compacted after each step.
  KeptList edge{s.ids, s.km};
  int64_t n = indices_between(w, V, float_of_bits(lo), float_of_bits(hi), s.ids);
  gather(w, s.ids, n, s.km);
  while (n > kBracketMax && hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    int64_t n_in = 0;
    const double s_in = sum_above(s.km, n, float_of_bits(mid), &n_in);
    step(s_hi + s_in, n_hi + n_in, mid);
    n = compact_between(edge, n, float_of_bits(lo), float_of_bits(hi), s.tmp);
  }
  return {float_of_bits(hi), n_hi, nucleus_prefix(edge, n, need - s_hi)};
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

// Step 7–8 for a dense nucleus: as a sorted list when small, else as the dense row with the
// tokens outside the nucleus (and below min-p) zeroed.
int32_t pick_dense_nucleus(float* w, int64_t V, const DenseNucleus& nu, float min_p, float u, Scratch& s) {
  KeptList kept{s.ids, s.km};
  if (nu.n_above + nu.n_edge <= kSortedPickMax) {
    const float above = std::nextafter(nu.cut, INFINITY);
    const int64_t n_above = indices_at_least(w, V, above, s.ids + nu.n_edge);
    gather(w, s.ids + nu.n_edge, n_above, s.km + nu.n_edge);
    const int64_t n = nu.n_edge + n_above;
    return pick_from_list(kept, min_p > 0 ? apply_min_p(kept, n, min_p) : n, V, u, s);
  }
  const float floor = min_p > 0 ? min_p : 0.0f;  // max mass is 1
  zero_unless_above(w, V, nu.cut, floor);
  for (int64_t j = 0; j < nu.n_edge; ++j) {
    if (s.km[j] >= floor) w[s.ids[j]] = s.km[j];
  }
  return pick_dense(w, V, u, s.block);
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
  if (sampling_is_greedy(p) || !(max_w > kNegInf)) return static_cast<int32_t>(argmax_first(s.w, vocab));

  const float u = sampling_uniform(p, position);
  const bool use_top_k = p.top_k > 0 && p.top_k < vocab;
  const bool use_top_p = p.top_p < 1.0f;
  if (!use_top_k && !use_top_p) return sample_dense(s.w, vocab, max_w, p.min_p, u, s);

  if (!use_top_k) {  // top-p over the whole row
    const double total = exp_shifted(s.w, vocab, max_w, s.w);
    const DenseNucleus nu = dense_nucleus(s.w, vocab, static_cast<double>(p.top_p) * total, s);
    return pick_dense_nucleus(s.w, vocab, nu, p.min_p, u, s);
  }
  KeptList kept{s.ids, s.km};
  int64_t n = select_top_k(s.w, vocab, p.top_k, s);
  gather(s.w, s.ids, n, s.km);
  const double total = exp_shifted(s.km, n, max_w, s.km);  // the max is always among the top k
  if (use_top_p) n = nucleus_prefix(kept, n, static_cast<double>(p.top_p) * total);
  if (p.min_p > 0) n = apply_min_p(kept, n, p.min_p);
  return pick_from_list(kept, n, vocab, u, s);
}

}  // namespace ad::cpu
