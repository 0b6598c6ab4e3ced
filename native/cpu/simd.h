// The SIMD level the CPU kernels were compiled for, and small vector helpers.
#pragma once
#include <string>

namespace ad::cpu {

inline const char* simd_level_compiled() {
#if defined(__AVX512F__)
  return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  return "avx2+fma";
#elif defined(__AVX__)
  return "avx";
#elif defined(__SSE4_2__)
  return "sse4.2";
#elif defined(__ARM_NEON)
  return "neon";
#else
  return "scalar";
#endif
}

inline std::string compiler_description() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return "g++ " + std::to_string(__GNUC__) + "." + std::to_string(__GNUC_MINOR__) + "." + std::to_string(__GNUC_PATCHLEVEL__);
#else
  return "unknown";
#endif
}

}  // namespace ad::cpu
