// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11), the
// counter-based generator behind every sample: a draw is a pure function of (seed, stream,
// position), so it does not depend on batch composition, thread count or backend.
#pragma once
#include "kernels/common.h"

namespace ad {

struct Philox4x32 {
  uint32_t v[4];
};

constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;  // golden ratio
constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;  // sqrt(3) - 1

AD_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

AD_HD Philox4x32 philox_round(Philox4x32 c, uint32_t k0, uint32_t k1) {
  uint32_t hi0, lo0, hi1, lo1;
  philox_mulhilo(kPhiloxM0, c.v[0], hi0, lo0);
  philox_mulhilo(kPhiloxM1, c.v[2], hi1, lo1);
  return Philox4x32{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
}

// Ten rounds, the key bumped by the Weyl constants between rounds (Random123's philox4x32_R(10)).
AD_HD Philox4x32 philox4x32_10(Philox4x32 counter, uint32_t key0, uint32_t key1) {
  Philox4x32 c = counter;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      key0 += kPhiloxW0;
      key1 += kPhiloxW1;
    }
    c = philox_round(c, key0, key1);
  }
  return c;
}

// Uniform float in [0, 1) with a 24-bit mantissa from the first output word; counter =
// {position lo, position hi, stream lo, stream hi}, key = {seed lo, seed hi}.
AD_HD float uniform01(uint64_t seed, uint64_t stream, uint64_t position) {
  Philox4x32 counter{{static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32),
                      static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)}};
  Philox4x32 out = philox4x32_10(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>(out.v[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace ad
