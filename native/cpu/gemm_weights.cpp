#include "cpu/gemm_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "cpu/gemm_kernels.h"

namespace ad::cpu {

float bf16_to_f32(uint16_t h) { return gemm::bf16_value(h); }
float f16_to_f32(uint16_t h) { return gemm::half_to_float(h); }

uint16_t f32_to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7f800000) == 0x7f800000 && (b & 0x007fffff) != 0) return static_cast<uint16_t>((b >> 16) | 0x0040);  // quiet NaN
  return static_cast<uint16_t>((b + 0x7fff + ((b >> 16) & 1)) >> 16);
}

uint16_t f32_to_f16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((b >> 16) & 0x8000);
  const uint32_t a = b & 0x7fffffff;
  if (a > 0x7f800000) return sign | 0x7e00;    // NaN
  if (a >= 0x477ff000) return sign | 0x7c00;   // ≥ 65520 rounds past 65504: ±inf
  if (a < 0x38800000) {                        // below 2⁻¹⁴: a multiple of 2⁻²⁴ (1024 is the first normal)
    const float scaled = std::fabs(f) * 16777216.f;  // exact: a power-of-two scaling into the normal range
    return sign | static_cast<uint16_t>(std::nearbyint(scaled));
  }
  const uint32_t mant = a & 0x7fffff, rest = mant & 0x1fff;
  uint32_t h = ((((a >> 23) - 127 + 15)) << 10) | (mant >> 13);
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // a carry into the exponent is right
  return sign | static_cast<uint16_t>(h);
}

uint16_t q8_scale_for(float amax) {
  if (!std::isfinite(amax)) throw std::domain_error("a weight is not finite");
  if (amax == 0.f) return 0;
  const double wanted = static_cast<double>(amax) / 127.0;
  uint16_t d = f32_to_f16(static_cast<float>(wanted));
  if (static_cast<double>(f16_to_f32(d)) * 127.0 < amax) ++d;  // the next f16 up (d > 0)
  if ((d & 0x7c00) == 0x7c00) throw std::domain_error("a weight of magnitude " + std::to_string(amax) + " is beyond the int8 format's f16 scale");
  return d;
}

const char* weight_type_name(WeightType t) {
  switch (t) {
    case WeightType::kF32: return "f32";
    case WeightType::kBF16: return "bf16";
    case WeightType::kF16: return "f16";
    case WeightType::kQ8: return "int8";
  }
  return "?";
}

double bytes_per_weight(WeightType t) {
  switch (t) {
    case WeightType::kF32: return 4.0;
    case WeightType::kBF16: case WeightType::kF16: return 2.0;
    case WeightType::kQ8: return 1.0 + 2.0 / gemm::kQ8Block;
  }
  return 4.0;
}

WeightMatrix StoredWeights::view() const {
  if (type == WeightType::kQ8) return {type, codes.data(), cols, scales.data(), scale_blocks()};
  return {type, halves.data(), cols, nullptr, 0};
}

int64_t StoredWeights::bytes() const {
  return static_cast<int64_t>(halves.size() * sizeof(uint16_t) + codes.size() + scales.size() * sizeof(uint16_t));
}

float StoredWeights::value(int64_t r, int64_t c) const {
  switch (type) {
    case WeightType::kBF16: return gemm::Bf16Weights{halves.data(), cols}.at(r, 0).value(0, c);
    case WeightType::kF16: return gemm::F16Weights{halves.data(), cols}.at(r, 0).value(0, c);
    case WeightType::kQ8: return gemm::Q8Weights{codes.data(), scales.data(), cols, scale_blocks()}.at(r, 0).value(0, c);
    case WeightType::kF32: break;
  }
  throw std::logic_error("StoredWeights holds no f32 weights");
}

void StoredWeights::widen_row(int64_t r, float* dst) const {
  for (int64_t c = 0; c < cols; ++c) dst[c] = value(r, c);
}

StoredWeights store_weights(const float* w, int64_t rows, int64_t cols, WeightType type, const std::string& name) {
  StoredWeights s;
  s.type = type;
  s.rows = rows;
  s.cols = cols;
  const size_t n = static_cast<size_t>(rows * cols);
  if (type == WeightType::kBF16 || type == WeightType::kF16) {
    s.halves.resize(n);
    for (size_t i = 0; i < n; ++i) {
      s.halves[i] = type == WeightType::kBF16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
      if (type == WeightType::kF16 && std::isfinite(w[i]) && (s.halves[i] & 0x7c00) == 0x7c00)
        throw std::domain_error("tensor " + name + " holds " + std::to_string(w[i]) + ", beyond f16's range: load it with weights 'bf16' or 'f32'");
    }
    return s;
  }
  if (type != WeightType::kQ8) throw std::logic_error("store_weights: f32 weights are kept as they are");
  s.codes.resize(n);
  s.scales.resize(static_cast<size_t>(rows * s.scale_blocks()));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < s.scale_blocks(); ++b) {
      const int64_t k0 = b * gemm::kQ8Block, k1 = std::min(cols, k0 + gemm::kQ8Block);
      const float* row = w + r * cols;
      float amax = 0.f;
      for (int64_t k = k0; k < k1; ++k) {
        if (!std::isfinite(row[k])) throw std::domain_error("tensor " + name + " holds a weight that is not finite; int8 needs finite weights");
        amax = std::max(amax, std::fabs(row[k]));
      }
      uint16_t d;
      try {
        d = q8_scale_for(amax);
      } catch (const std::domain_error& e) {
        throw std::domain_error("tensor " + name + ": " + e.what());
      }
      s.scales[static_cast<size_t>(r * s.scale_blocks() + b)] = d;
      const double scale = f16_to_f32(d);
      // w/d in double rounds to the right integer: a quotient of a 24-bit and an 11-bit value is
      // never within 2⁻²⁶ of a half-integer unless it is one, far beyond double's error.
      for (int64_t k = k0; k < k1; ++k)
        s.codes[static_cast<size_t>(r * cols + k)] = scale == 0 ? 0 : static_cast<int8_t>(std::nearbyint(row[k] / scale));
    }
  return s;
}

}  // namespace ad::cpu
