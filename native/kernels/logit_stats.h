// One pass over a raw (pre-temperature) logits row z[V] (DESIGN.md, "One pass over the
// vocabulary"): max logit, logsumexp, entropy, margin, chosen-token logprob, top-K and, given a
// reference row y, the KL estimators k1/k2/k3 and exact KL(p‖q).
//
// The row is summarized by a mergeable state (online softmax with rescaling): a backend splits a
// row into chunks (SIMD blocks, threads, CUDA blocks), builds one state per chunk and combines
// them in any order. With m = max z and my = max y over the chunk:
//   s = Σ e^{z−m}      t = Σ e^{z−m}·(z−m)      sy = Σ e^{y−my}      u = Σ e^{z−m}·(y−my)
// Sums are kept relative to the running maxima so that nothing cancels for |z| ~ 1e4. Then
//   lse = m + log s,  H = log s − t/s,  KL(p‖q) = (t − u)/s − log s + log sy.
// Top-K lives in a bounded min-heap whose root is the worst kept entry: most elements are
// rejected by one compare against it.
#pragma once
#include "kernels/common.h"

namespace ad {

constexpr int kMaxLogitTopK = 64;

// ---------------------------------------------------------------------------------------------
// Top-K: order is value descending, ties toward the lower id.

struct TopKEntry {
  float value;
  int32_t id;
};

// True when a ranks before b (larger value, or equal value and lower id).
AD_HD bool topk_before(TopKEntry a, TopKEntry b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

AD_HD void topk_swap(TopKEntry& a, TopKEntry& b) {
  TopKEntry t = a;
  a = b;
  b = t;
}

// heap[0] is the entry every other entry ranks before (the current K-th best).
AD_HD void topk_sift_up(TopKEntry* heap, int i) {
  while (i > 0) {
    int parent = (i - 1) / 2;
    if (!topk_before(heap[parent], heap[i])) break;
    topk_swap(heap[parent], heap[i]);
    i = parent;
  }
}

AD_HD void topk_sift_down(TopKEntry* heap, int n, int i) {
  for (;;) {
    int worst = i, l = 2 * i + 1, r = l + 1;
    if (l < n && topk_before(heap[worst], heap[l])) worst = l;
    if (r < n && topk_before(heap[worst], heap[r])) worst = r;
    if (worst == i) return;
    topk_swap(heap[i], heap[worst]);
    i = worst;
  }
}

// Offers x to a heap of at most cap entries; returns true when x was kept. NaN never ranks.
AD_HD bool topk_offer(TopKEntry* heap, int& n, int cap, TopKEntry x) {
  if (x.value != x.value) return false;
  if (n < cap) {
    heap[n] = x;
    topk_sift_up(heap, n++);
    return true;
  }
  if (cap == 0 || !topk_before(x, heap[0])) return false;
  heap[0] = x;
  topk_sift_down(heap, n, 0);
  return true;
}

// Sorts n ≤ a few hundred entries best-first (insertion sort: small n, no allocation, device-safe).
AD_HD void topk_sort(TopKEntry* e, int n) {
  for (int i = 1; i < n; ++i) {
    TopKEntry x = e[i];
    int j = i - 1;
    while (j >= 0 && topk_before(x, e[j])) {
      e[j + 1] = e[j];
      --j;
    }
    e[j + 1] = x;
  }
}

// Merges two best-first lists into out (best-first, at most cap entries); returns the count.
// out must not alias a or b.
AD_HD int topk_merge(const TopKEntry* a, int na, const TopKEntry* b, int nb, TopKEntry* out, int cap) {
  int i = 0, j = 0, n = 0;
  while (n < cap && (i < na || j < nb)) {
    bool take_a = j >= nb || (i < na && topk_before(a[i], b[j]));
    out[n++] = take_a ? a[i++] : b[j++];
  }
  return n;
}

// ---------------------------------------------------------------------------------------------
// Mergeable softmax state. A is the accumulator type: double on the CPU, float where a backend
// keeps enough partial sums (CUDA).

AD_HD float acc_exp(float x) { return expf(x); }
AD_HD double acc_exp(double x) { return exp(x); }
AD_HD float acc_log(float x) { return logf(x); }
AD_HD double acc_log(double x) { return log(x); }
AD_HD float acc_expm1(float x) { return expm1f(x); }
AD_HD double acc_expm1(double x) { return expm1(x); }

template <class A>
struct SoftmaxState {
  float m = kNegInf;   // max z (−inf: no finite z yet)
  A s = 0;             // Σ e^{z−m}
  A t = 0;             // Σ e^{z−m}·(z−m)
  float my = kNegInf;  // max y of the reference row
  A sy = 0;            // Σ e^{y−my}
  A u = 0;             // Σ e^{z−m}·(y−my); −inf when some p > 0 meets q = 0
};

// The state of one element (z, y); pass y = −inf when there is no reference row.
template <class A>
AD_HD SoftmaxState<A> softmax_state_of(float z, float y) {
  SoftmaxState<A> st;
  st.m = z;
  st.s = z == kNegInf ? A(0) : A(1);
  st.my = y;
  st.sy = y == kNegInf ? A(0) : A(1);
  st.u = (st.s > 0 && y == kNegInf) ? A(kNegInf) : A(0);
  return st;
}

// Re-expresses the z sums of a state relative to a larger max m (e^{z−m} = e^{z−a.m}·e^{a.m−m}).
template <class A>
AD_HD void softmax_rescale_z(SoftmaxState<A>& st, float m) {
  if (st.s == A(0) || st.m == m) {
    st.m = m;
    return;
  }
  A shift = A(st.m) - A(m);
  A scale = acc_exp(shift);
  st.t = (st.t + shift * st.s) * scale;
  st.u = scale == A(0) ? A(0) : st.u * scale;  // an underflowed chunk adds nothing, not −inf·0
  st.s = st.s * scale;
  st.m = m;
}

// Re-expresses the y sums relative to a larger reference max my (y−my = (y−a.my) + (a.my−my)).
template <class A>
AD_HD void softmax_rescale_y(SoftmaxState<A>& st, float my) {
  if (st.my == my) return;
  if (st.sy != A(0)) st.sy = st.sy * acc_exp(A(st.my) - A(my));
  if (st.s != A(0)) st.u = st.u + st.s * (A(st.my) - A(my));
  st.my = my;
}

// Merges two partial states of disjoint parts of the same row (order-independent).
template <class A>
AD_HD SoftmaxState<A> softmax_combine(SoftmaxState<A> a, SoftmaxState<A> b) {
  float m = a.m > b.m ? a.m : b.m;
  float my = a.my > b.my ? a.my : b.my;
  softmax_rescale_z(a, m);
  softmax_rescale_z(b, m);
  softmax_rescale_y(a, my);
  softmax_rescale_y(b, my);
  SoftmaxState<A> r;
  r.m = m;
  r.s = a.s + b.s;
  r.t = a.t + b.t;
  r.my = my;
  r.sy = a.sy + b.sy;
  r.u = a.u + b.u;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Finalization

struct LogitRowStats {
  float max_logit, logsumexp, entropy, margin, chosen_logprob;
  float k1, k2, k3, kl_exact;
};

template <class A>
AD_HD A softmax_lse(const SoftmaxState<A>& st) {
  return st.s == A(0) ? A(kNegInf) : A(st.m) + acc_log(st.s);
}

template <class A>
AD_HD A softmax_lse_ref(const SoftmaxState<A>& st) {
  return st.sy == A(0) ? A(kNegInf) : A(st.my) + acc_log(st.sy);
}

// H = log s − t/s in nats; 0 for a row with no finite logit, NaN for a row holding a NaN.
// Rounding can dip below 0: clamp.
template <class A>
AD_HD A softmax_entropy(const SoftmaxState<A>& st) {
  if (st.s == A(0)) return A(0);
  A h = acc_log(st.s) - st.t / st.s;
  return h < A(0) ? A(0) : h;
}

// KL(p‖q) = Σ p (log p − log q) = (t − u)/s − log s + log sy; clamped at 0 against rounding.
template <class A>
AD_HD A softmax_kl_exact(const SoftmaxState<A>& st) {
  if (st.s == A(0)) return A(0);
  if (st.sy == A(0)) return A(INFINITY);
  A kl = (st.t - st.u) / st.s - acc_log(st.s) + acc_log(st.sy);
  return kl < A(0) ? A(0) : kl;
}

AD_HD float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// Per-token estimators of KL(π‖π_ref) from logp (policy) and logq (reference) of one token:
// k1 = logp − logq, k2 = ½(logp − logq)², k3 = verl low_var_kl (clamped as verl does).
template <class A>
AD_HD void kl_estimators(A logp, A logq, float& k1, float& k2, float& k3) {
  A d = logp - logq;
  k1 = float(d);
  k2 = float(A(0.5) * d * d);
  A kl = logq - logp;
  kl = kl < A(-20) ? A(-20) : (kl > A(20) ? A(20) : kl);
  A k = acc_expm1(kl) - kl;  // e^kl − kl − 1 without cancelling for small kl
  k3 = clampf(float(k), -10.0f, 10.0f);
}

// top1 − top2 from a best-first list; +inf for a single-token row.
AD_HD float margin_of(const TopKEntry* sorted, int n) {
  return n >= 2 ? sorted[0].value - sorted[1].value : INFINITY;
}

// All per-row scalars from a finished state and a best-first top list (≥ 2 entries when V ≥ 2).
// z_target/y_target are z[target] and y[target]; has_target/has_ref say which outputs mean anything.
template <class A>
AD_HD LogitRowStats logit_stats_finalize(const SoftmaxState<A>& st, const TopKEntry* sorted, int n_sorted,
                                         bool has_target, float z_target, bool has_ref, float y_target) {
  LogitRowStats r;
  A lse = softmax_lse(st);
  r.max_logit = st.m;
  r.logsumexp = float(lse);
  r.entropy = float(softmax_entropy(st));
  r.margin = margin_of(sorted, n_sorted);
  A logp = has_target ? A(z_target) - lse : A(0);
  r.chosen_logprob = has_target ? float(logp) : NAN;  // no target: NaN, never a plausible logprob
  r.k1 = r.k2 = r.k3 = NAN;
  r.kl_exact = 0.0f;
  if (has_ref) {
    r.kl_exact = float(softmax_kl_exact(st));
    if (has_target) kl_estimators<A>(logp, A(y_target) - softmax_lse_ref(st), r.k1, r.k2, r.k3);
  }
  return r;
}

// The whole computation for one row, one element at a time: the reference every backend matches
// (and the CUDA backend's per-thread loop). heap must hold max(K, 2) entries; on return it is
// sorted best-first and *n_top says how many it holds.
template <class A>
AD_HD LogitRowStats logit_stats_row(const float* z, const float* y, int64_t vocab, int32_t target, int K,
                                    TopKEntry* heap, int* n_top) {
  SoftmaxState<A> st;
  int cap = K > 2 ? K : 2, n = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    st = softmax_combine(st, softmax_state_of<A>(z[i], y ? y[i] : kNegInf));
    topk_offer(heap, n, cap, TopKEntry{z[i], static_cast<int32_t>(i)});
  }
  topk_sort(heap, n);
  *n_top = n;
  bool has_target = target >= 0 && target < vocab;
  return logit_stats_finalize(st, heap, n, has_target, has_target ? z[target] : 0.0f, y != nullptr,
                              (has_target && y) ? y[target] : 0.0f);
}

}  // namespace ad
