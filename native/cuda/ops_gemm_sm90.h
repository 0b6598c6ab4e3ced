// The Hopper GEMM path of ops_gemm.cu (internal): warpgroup MMA (wgmma.mma_async m64n256k16,
// bf16 → f32) on operands that TMA (cp.async.bulk.tensor) brings into 128-byte-swizzled shared
// memory, 4-stage mbarrier pipeline, 128×256×64 block tiles, one producer warpgroup and two
// consumer warpgroups. NT, NN and TN. Compiled for sm_90a only (ops_gemm_sm90.cu is built in
// its own object library with AD_GEMM_SM90A=1); anywhere else the functions below report "not
// available" and gemm() keeps the mma.sync kernels.
#pragma once
#include <cuda_runtime.h>

#include "cuda/ops.h"

namespace ad::cuda::detail {

// Split-K (ops_gemm.cu): slice s of `slices` covers K values [s·k_len, min(K, (s+1)·k_len)) and
// writes its f32 partial at C + s·c_stride (k_len a multiple of 64; every slice non-empty).
struct GemmSplit {
  int slices = 1;
  int64_t k_len = 0;
  int64_t c_stride = 0;
};

// True when this build holds the sm_90a kernels, the current device is compute capability 9.0,
// the kernel image loads on it, the driver exports cuTensorMapEncodeTiled, and neither
// AUTODIDACT_GEMM_WGMMA=0 nor gemm_sm90_set_enabled(false) turned the path off.
bool gemm_sm90_available();
// Why gemm_sm90_available() is false ("" when it is true).
const char* gemm_sm90_reason();
// Whether gemm() with the own backend runs `a` on the wgmma kernel (available, and the shape
// and alignment fit: M, N ≥ 64, K ≥ 1, lda/ldb multiples of 8 elements, A and B 16-byte aligned).
bool gemm_sm90_takes(const GemmArgs& a);
// Runs `a` on the wgmma kernel (call only when gemm_sm90_takes(a)). pair_store: C and ldc allow
// 2-element vector stores. With split.slices > 1, a.C is f32 and each slice a product of its own.
cudaError_t gemm_sm90(const GemmArgs& a, cudaStream_t stream, bool pair_store, const GemmSplit& split = GemmSplit());
// Process-wide switch for benchmarks (the mma.sync kernels on the same shapes); starts as the
// environment says.
void gemm_sm90_set_enabled(bool on);

// Split-K of ops_gemm.cu (defined there): the number of K slices gemm() with the own backend
// runs `a` in now (1: not split), and a process-wide switch for benchmarks (starts as
// AUTODIDACT_GEMM_SPLITK says: "0" turns it off).
int gemm_splitk_slices(const GemmArgs& a);
void gemm_splitk_set_enabled(bool on);

}  // namespace ad::cuda::detail
