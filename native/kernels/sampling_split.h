// Split-row sampling: one row's vocabulary cut into C chunks, each read by its own block
// (cuda/ops_logits.cu, sample_split_*), for batches too small to fill the GPU with one block per
// row. It takes the rows of the single-block kernel's general path that need no per-row scratch:
// T > 0, no top-k, no penalties (top-p and/or min-p, or neither, at any temperature). It runs the
// same math in the same fixed point, so it draws the same token as the single-block kernel however
// the row is cut: every sum is an integer sum (order-free), every selection is defined by value.
//
//   1. w_i = z_i / T; the argmax (max w, lowest id on ties) from the chunks' best entries
//   2. mass m_i = e^(w_i − max w) ∈ (0, 1], weight g_i = round(m_i · 2^40) (0 for NaN, −∞, < 2^−41)
//   3. top-p (p < 1): need = ceil(p · Σ g); κ = the mass (as f32 bits) with S(> κ) < need ≤ S(≥ κ),
//      where S sums the weights of masses above / at κ, found by three radix passes (11 + 11 + 10
//      bits) over weighted histograms; tokens of mass exactly κ enter in ascending id order, the
//      first j = ceil((need − S(> κ)) / g(κ)) of them (sampling.h step 6: ties toward lower ids)
//   4. min-p (m > 0): keep m_i ≥ min_p (the largest mass is 1) (sampling.h step 7)
//   5. inverse CDF: target = floor(u · Σ kept g), the first id in ascending order whose running sum
//      of kept g exceeds it (sampling.h step 8)
//
// This header holds that math once: the kernels add the blocks, sample_split_host() below runs the
// same chunked procedure serially (split_select_host, split_draw_host) so CPU tests cover it (test/kernels/sampling-split.test.ts).
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/common.h"
#include "kernels/logit_stats.h"
#include "kernels/sampling.h"

namespace ad::split {

constexpr int kRadixPasses = 3;
constexpr int kMaxRadixBins = 2048;
constexpr double kWeightScale = 1099511627776.0;  // 2^40

AD_HD int radix_shift(int pass) { return pass == 0 ? 21 : pass == 1 ? 10 : 0; }
AD_HD int radix_bins(int pass) { return pass == 2 ? 1024 : 2048; }

// The rows the split path takes (the others go to the single-block kernel).
AD_HD bool splits(const SamplingParams& p, int64_t vocab) {
  const bool no_top_k = p.top_k <= 0 || p.top_k >= vocab;
  const bool no_penalty = p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f;
  return !sampling_is_greedy(p) && no_top_k && no_penalty && vocab > 1;
}

// Chunk c of C covers ids [begin, end): equal lengths but the last.
struct Chunk {
  int64_t begin, end;
};
AD_HD Chunk chunk_of(int64_t vocab, int chunks, int c) {
  const int64_t len = (vocab + chunks - 1) / chunks;
  const int64_t b = static_cast<int64_t>(c) * len;
  const int64_t e = b + len;
  return Chunk{b < vocab ? b : vocab, e < vocab ? e : vocab};
}

// Step 2.
AD_HD float mass_of(float w, float max_w) { return w == kNegInf ? 0.0f : expf(w - max_w); }

// m · 2^40 is exact in f32 (a power-of-two scaling of a mass in (2^−149, 1]), so rounding it to
// nearest (ties to even) is round(m · 2^40); NaN and masses below 2^−41 weigh 0.
AD_HD unsigned long long mass_weight(float m) {
#if defined(__CUDA_ARCH__)
  return m > 0.0f ? __float2ull_rn(m * static_cast<float>(kWeightScale)) : 0ull;
#else
  return m > 0.0f ? static_cast<unsigned long long>(std::nearbyint(static_cast<double>(m) * kWeightScale)) : 0ull;
#endif
}

AD_HD uint32_t mass_bits(float m) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(m);
#else
  uint32_t b;
  std::memcpy(&b, &m, sizeof b);
  return b;
#endif
}

AD_HD float mass_from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  float m;
  std::memcpy(&m, &b, sizeof m);
  return m;
#endif
}

// Step 3's need: the kept weight top-p must reach (at least 1, at most the total).
AD_HD unsigned long long top_p_need(float top_p, unsigned long long total) {
  const double need_d = static_cast<double>(top_p) * static_cast<double>(total);
  unsigned long long need = need_d > 0 ? static_cast<unsigned long long>(ceil(need_d)) : 1ull;
  return need > total ? total : need;
}

// Step 3's tie count: how many tokens of mass κ (weight `each`) top-p keeps.
AD_HD unsigned long long ties_kept(unsigned long long need, unsigned long long above, unsigned long long each) {
  const unsigned long long j = each > 0 ? (need - above + each - 1) / each : 1;
  return j < 1 ? 1 : j;
}

// Step 5's target.
AD_HD unsigned long long cdf_target(float u, unsigned long long total) {
  const unsigned long long t = static_cast<unsigned long long>(floor(static_cast<double>(u) * static_cast<double>(total)));
  return t >= total ? total - 1 : t;
}

// One radix step over hist[lo, hi), scanned from the top with `cum` the weight above hi: the bin b
// with cum + S(bins > b) < need ≤ cum + S(bins ≥ b), or lo when even all of them fall short.
// *above receives cum + S(bins > b).
AD_HD int walk_bins_desc(const unsigned long long* hist, int lo, int hi, unsigned long long cum, unsigned long long need,
                         unsigned long long* above) {
  int b = hi - 1;
  for (; b > lo; --b) {
    if (cum + hist[b] >= need) break;
    cum += hist[b];
  }
  *above = cum;
  return b;
}

// Where the radix select stands: keys k with (k & mask) == prefix are still in play; `above` is
// the weight of the keys above them.
struct RadixState {
  uint32_t prefix = 0, mask = 0;
  unsigned long long above = 0, need = 0;
};

AD_HD void radix_advance(RadixState& s, int pass, int bin, unsigned long long above) {
  s.prefix |= static_cast<uint32_t>(bin) << radix_shift(pass);
  s.mask |= static_cast<uint32_t>(radix_bins(pass) - 1) << radix_shift(pass);
  s.above = above;
}

// The histogram bin of mass bits `key` in `pass`, or −1 when it is out of play.
AD_HD int radix_bin(const RadixState& s, int pass, uint32_t key) {
  if ((key & s.mask) != s.prefix) return -1;
  return static_cast<int>((key >> radix_shift(pass)) & static_cast<uint32_t>(radix_bins(pass) - 1));
}

// Which tokens the draw keeps, once κ and the last kept tie are known (steps 3–4).
struct Kept {
  bool use_p = false;
  uint32_t p_bits = 0;  // kept: mass bits > p_bits, or == p_bits with id ≤ p_id
  int64_t p_id = -1;
  float min_p = 0;

  AD_HD unsigned long long weight(int64_t i, float m) const {
    if (!(m > 0.0f)) return 0;
    if (use_p) {
      const uint32_t b = mass_bits(m);
      if (!(b > p_bits || (b == p_bits && i <= p_id))) return 0;
    }
    if (min_p > 0.0f && !min_p_keeps(m, 1.0f, min_p)) return 0;
    return mass_weight(m);
  }
  // The weight of a kept token of mass κ (p_bits).
  AD_HD unsigned long long tie_weight() const {
    const float m = mass_from_bits(p_bits);
    return min_p > 0.0f && !min_p_keeps(m, 1.0f, min_p) ? 0 : mass_weight(m);
  }
};

// ---------------------------------------------------------------------------------------------
// The chunked procedure, serially (host only): what the kernels compute, chunk by chunk.

// One row's selection (steps 1–4), chunk by chunk, and the weights the draw walks.
struct SplitSelection {
  int32_t argmax = 0;
  bool draws = false;  // false: the token is the argmax (greedy, or no finite value)
  float max_w = kNegInf;
  Kept kept;
  std::vector<unsigned long long> chunk_weight;
  unsigned long long total = 0;
};

// w(i): the scaled logit of id i (step 1's z_i / T, done by the caller).
template <class W>
SplitSelection split_select_host(W w, int64_t vocab, const SamplingParams& p, int chunks) {
  SplitSelection sel;
  if (vocab <= 1) return sel;
  // Step 1: each chunk's best entry, then the row's.
  bool any = false;
  TopKEntry best{kNegInf, 0};
  for (int c = 0; c < chunks; ++c) {
    const Chunk ch = chunk_of(vocab, chunks, c);
    for (int64_t i = ch.begin; i < ch.end; ++i) {
      const TopKEntry e{w(i), static_cast<int32_t>(i)};
      if (e.value != e.value) continue;
      if (!any || topk_before(e, best)) best = e;
      any = true;
    }
  }
  sel.argmax = any ? best.id : 0;
  if (sampling_is_greedy(p) || !any || !(best.value > kNegInf)) return sel;
  sel.max_w = best.value;
  auto mass = [&](int64_t i) { return mass_of(w(i), sel.max_w); };
  sel.kept.min_p = p.min_p;
  if (p.top_p < 1.0f) {
    // Step 3: three weighted radix passes, each histogram the sum of the chunks' histograms.
    RadixState s;
    std::vector<unsigned long long> hist(kMaxRadixBins);
    for (int pass = 0; pass < kRadixPasses; ++pass) {
      std::fill(hist.begin(), hist.end(), 0ull);
      for (int c = 0; c < chunks; ++c) {
        const Chunk ch = chunk_of(vocab, chunks, c);
        for (int64_t i = ch.begin; i < ch.end; ++i) {
          const float m = mass(i);
          const unsigned long long g = mass_weight(m);
          const int b = g ? radix_bin(s, pass, mass_bits(m)) : -1;
          if (b >= 0) hist[b] += g;
        }
      }
      if (pass == 0) {
        unsigned long long total = 0;
        for (int b = 0; b < radix_bins(0); ++b) total += hist[b];
        s.need = top_p_need(p.top_p, total);
      }
      unsigned long long above = 0;
      const int bin = walk_bins_desc(hist.data(), 0, radix_bins(pass), s.above, s.need, &above);
      radix_advance(s, pass, bin, above);
    }
    if (s.need >= 1) {
      // The j-th token of mass κ: the chunk whose tie count reaches j, then the id inside it.
      const unsigned long long j = ties_kept(s.need, s.above, mass_weight(mass_from_bits(s.prefix)));
      unsigned long long cum = 0;
      int64_t p_id = vocab;
      for (int c = 0; c < chunks && p_id == vocab; ++c) {
        const Chunk ch = chunk_of(vocab, chunks, c);
        for (int64_t i = ch.begin; i < ch.end; ++i)
          if (mass_bits(mass(i)) == s.prefix && ++cum == j) {
            p_id = i;
            break;
          }
      }
      sel.kept.use_p = true;
      sel.kept.p_bits = s.prefix;
      sel.kept.p_id = p_id;
    }
  }
  // Step 4 is in kept.weight(); the chunks' kept weights for the draw.
  sel.chunk_weight.assign(chunks, 0);
  for (int c = 0; c < chunks; ++c) {
    const Chunk ch = chunk_of(vocab, chunks, c);
    for (int64_t i = ch.begin; i < ch.end; ++i) sel.chunk_weight[c] += sel.kept.weight(i, mass(i));
    sel.total += sel.chunk_weight[c];
  }
  sel.draws = sel.total > 0;
  return sel;
}

// Step 5 at uniform u: the chunk the target falls in, then the id inside it.
template <class W>
int32_t split_draw_host(const SplitSelection& sel, W w, int64_t vocab, int chunks, float u) {
  if (!sel.draws) return sel.argmax;
  const unsigned long long target = cdf_target(u, sel.total);
  unsigned long long cum = 0;
  for (int c = 0; c < chunks; ++c) {
    if (cum + sel.chunk_weight[c] <= target) {
      cum += sel.chunk_weight[c];
      continue;
    }
    const Chunk ch = chunk_of(vocab, chunks, c);
    for (int64_t i = ch.begin; i < ch.end; ++i) {
      cum += sel.kept.weight(i, mass_of(w(i), sel.max_w));
      if (cum > target) return static_cast<int32_t>(i);
    }
  }
  return 0;
}

}  // namespace ad::split
