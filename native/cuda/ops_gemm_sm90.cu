// Hopper GEMM (see ops_gemm_sm90.h): C[M×N] = alpha·op(A,B) + beta·C + bias with wgmma.
//
// Block tile 128 (M) × 256 (N) × 64 (K), 384 threads: warpgroup 0 is the producer (one thread
// issues the TMA loads), warpgroups 1 and 2 are consumers, each computing 64 rows × 256 columns
// with wgmma.mma_async.m64n256k16 straight from shared memory (128 f32 accumulators a thread).
// Persistent: min(tiles, SMs) CTAs walk the tiles (M fastest) with one running k-tile counter,
// so the producer fills the next tile's stages while the consumers run the epilogue.
// kStages stages, each an A tile (16 KiB) and a B tile (32 KiB), guarded by two mbarriers:
// full[s] (the producer's expect_tx, completed by the TMA bytes) and empty[s] (one arrival per
// consumer warp once its wgmma reading the stage has retired).
//
// Shared-memory layout (what TMA writes and the wgmma descriptors describe), 128-byte swizzle:
//   K-major operand (A of NT/NN, B of NT): box {64 K, rows}: row r of the tile at r·128 B, its 64
//     K values contiguous; descriptor SBO = 1024 B (8 rows), LBO unused (16 B); k-step kk
//     (16 values) starts 32·kk bytes into the row.
//   MN-major operand (A of TN, B of NN/TN): boxes {64 M|N, 64 K}, one 8 KiB chunk per 64 M|N
//     values: K row k of a chunk at k·128 B; descriptor LBO = 8 KiB (next 64 M|N values), SBO =
//     1024 B (next 8 K rows); k-step kk starts 2048·kk bytes in.
// Physical address = logical ^ (((logical >> 7) & 7) << 4) for both TMA and wgmma, so every tile
// sits on a 1024-byte boundary. Out-of-bounds rows, columns and the K tail arrive as zeros (TMA),
// and the epilogue stores only inside M×N.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda/ops_common.h"
#include "cuda/ops_gemm_sm90.h"

#if defined(AD_GEMM_SM90A)
#include <cuda.h>          // CUtensorMap and its enums only: libcuda is reached through cudart's entry-point query
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled_v12000

#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error "ops_gemm_sm90.cu with AD_GEMM_SM90A must be compiled for sm_90a only (CUDA_ARCHITECTURES 90a-real)"
#endif
#endif

namespace ad::cuda::detail {

namespace {

std::atomic<int> g_enabled{-1};  // -1: not read from the environment yet

bool enabled() {
  int e = g_enabled.load(std::memory_order_relaxed);
  if (e < 0) {
    const char* env = std::getenv("AUTODIDACT_GEMM_WGMMA");
    e = (env && std::strcmp(env, "0") == 0) ? 0 : 1;
    int expected = -1;
    g_enabled.compare_exchange_strong(expected, e, std::memory_order_relaxed);
    e = g_enabled.load(std::memory_order_relaxed);
  }
  return e == 1;
}

thread_local std::string t_reason;

}  // namespace

void gemm_sm90_set_enabled(bool on) {
  enabled();  // read the environment first so it cannot overwrite this later
  g_enabled.store(on ? 1 : 0, std::memory_order_relaxed);
}

#if !defined(AD_GEMM_SM90A)

// This translation unit was built without sm_90a code (e.g. inside a target whose architectures
// are sm_80/sm_90 only): the path does not exist.
bool gemm_sm90_available() {
  t_reason = "not compiled for sm_90a";
  return false;
}
const char* gemm_sm90_reason() {
  gemm_sm90_available();
  return t_reason.c_str();
}
bool gemm_sm90_takes(const GemmArgs&) { return false; }
cudaError_t gemm_sm90(const GemmArgs&, cudaStream_t, bool, const GemmSplit&) {
  return invalid("gemm: the wgmma path is not compiled in");
}

#else  // AD_GEMM_SM90A

namespace {

constexpr int kBM = 128, kBN = 256, kBK = 64, kStages = 4, kThreads = 384;
constexpr int kChunkBytes = 64 * kBK * 2;   // one 64 (rows) × 64 (K) bf16 box: 8 KiB
constexpr int kABytes = kBM * kBK * 2;      // 16 KiB
constexpr int kBBytes = kBN * kBK * 2;      // 32 KiB
constexpr int kStageBytes = kABytes + kBBytes;
constexpr int kConsumerWarps = 8;
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 2 * kStages * 8 + 1024;  // + barriers + alignment slack
static_assert(kSmemBytes <= 232448, "over the sm_90 shared-memory opt-in limit");

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_90a)

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

// Makes the initialized barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void mbar_fence_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Returns once the phase with parity `parity` of the barrier has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// TMA: box at element coordinates (c0 innermost, c1) of the tensor map into shared memory; its
// byte count completes on `bar`. Out-of-bounds elements are written as zeros.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, int32_t c0, int32_t c1,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

// wgmma shared-memory matrix descriptor: start address, LBO and SBO in 16-byte units (bits 0-13,
// 16-29, 32-45), base offset 0 (tiles are 1024-byte aligned), swizzle mode 1 = 128 B (bits 62-63).
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  return uint64_t((addr & 0x3FFFF) >> 4) | (uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16) |
         (uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32) | (uint64_t(1) << 62);
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// Pins the accumulators after wgmma_wait: the compiler does not know the async MMA writes them,
// so reads must not move above the wait.
__device__ __forceinline__ void fence_accumulators(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// D[64×256] += A[64×16] · B[16×256], both from shared memory. TRANS_A / TRANS_B: the operand is
// MN-major (M or N contiguous) instead of K-major.
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n256k16(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
      "%128, %129, p, 1, 1, %131, %132;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
        "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
        "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
        "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
        "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(1), "n"(TRANS_A), "n"(TRANS_B));
}

// Epilogue of one consumer thread. Accumulator layout of m64nNk16 (as mma.sync's m16n8 per
// 8-column block): warp w of the warpgroup holds rows 16w + lane/4 and +8; register 4j + 2h + e
// is row +8h, column 8j + 2·(lane%4) + e. row0/col0: this thread's first row and column.
template <class OutT>
__device__ __forceinline__ void store_tile(const float (&acc)[128], OutT* __restrict__ C, int64_t ldc, int M, int N,
                                           int row0, int col0, float alpha, float beta, const float* __restrict__ bias,
                                           bool pair_store) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= M) continue;
    OutT* crow = C + int64_t(row) * ldc;
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j) {
      const int col = col0 + 8 * j;
      if (col >= N) continue;
      float v0 = alpha * acc[4 * j + 2 * h], v1 = alpha * acc[4 * j + 2 * h + 1];
      OutT* c = crow + col;
      const bool both = col + 1 < N;
      if (beta != 0.0f) {
        v0 += beta * to_f32(c[0]);
        if (both) v1 += beta * to_f32(c[1]);
      }
      if (bias) {
        v0 += bias[col];
        if (both) v1 += bias[col + 1];
      }
      if (both && pair_store) {
        if constexpr (sizeof(OutT) == 4) {
          *reinterpret_cast<float2*>(c) = make_float2(v0, v1);
        } else {
          *reinterpret_cast<__nv_bfloat162*>(c) = __floats2bfloat162_rn(v0, v1);
        }
      } else {
        store_as(c, v0);
        if (both) store_as(c + 1, v1);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The kernel. A_MN: A is [K×M] (TN) else [M×K]; B_MN: B is [K×N] (NN, TN) else [N×K] (NT).

template <bool A_MN, bool B_MN, class OutT>
__global__ void __launch_bounds__(kThreads, 1)
    gemm_wgmma_kernel(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                      OutT* __restrict__ C, int64_t ldc, int M, int N, int K, int m_tiles, int mn_tiles, int tiles,
                      int kt_slice, int64_t c_slice_stride, float alpha, float beta, const float* __restrict__ bias,
                      bool pair_store) {
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // 128-byte swizzle repeats every 1024 B and both TMA and wgmma key it on address bits 7-9.
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const uint32_t bars = base + kStages * kStageBytes;
  auto a_tile = [&](int s) { return base + uint32_t(s * kStageBytes); };
  auto b_tile = [&](int s) { return base + uint32_t(s * kStageBytes + kABytes); };
  auto full_bar = [&](int s) { return bars + uint32_t(8 * s); };
  auto empty_bar = [&](int s) { return bars + uint32_t(8 * (kStages + s)); };

  const int KT = (K + kBK - 1) / kBK;
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_bar(s), 1);
      mbar_init(empty_bar(s), kConsumerWarps);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (wg == 0) {
    // Producer: one thread. k-tile number `it` (counted across this CTA's tiles) goes to stage
    // it % kStages once the consumers released use it − kStages of that stage: the
    // (it/kStages − 1)-th completion of empty[s].
    if (threadIdx.x == 0) {
      int it = 0;
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const int mn = tile % mn_tiles, kt0 = (tile / mn_tiles) * kt_slice;
        const int m0 = (mn % m_tiles) * kBM, n0 = (mn / m_tiles) * kBN;
        const int kt1 = min(KT, kt0 + kt_slice);
        for (int kt = kt0; kt < kt1; ++kt, ++it) {
          const int s = it % kStages;
          if (it >= kStages) mbar_wait(empty_bar(s), uint32_t((it / kStages - 1) & 1));
          mbar_arrive_expect_tx(full_bar(s), kStageBytes);  // full boxes count, zero-filled parts included
          const int k0 = kt * kBK;
          if (A_MN) {
#pragma unroll
            for (int i = 0; i < kBM / 64; ++i)
              tma_load_2d(a_tile(s) + i * kChunkBytes, &tmap_a, m0 + 64 * i, k0, full_bar(s));
          } else {
            tma_load_2d(a_tile(s), &tmap_a, k0, m0, full_bar(s));
          }
          if (B_MN) {
#pragma unroll
            for (int j = 0; j < kBN / 64; ++j)
              tma_load_2d(b_tile(s) + j * kChunkBytes, &tmap_b, n0 + 64 * j, k0, full_bar(s));
          } else {
            tma_load_2d(b_tile(s), &tmap_b, k0, n0, full_bar(s));
          }
        }
      }
    }
    return;
  }

  // Consumers: warpgroup cw computes tile rows 64·cw … 64·cw + 63.
  const int cw = wg - 1;
  const int t = threadIdx.x & 127, warp = t >> 5, lane = t & 31;
  float acc[128];
  int it = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int mn = tile % mn_tiles, slice = tile / mn_tiles, kt0 = slice * kt_slice;
    const int m0 = (mn % m_tiles) * kBM, n0 = (mn / m_tiles) * kBN;
    const int kt1 = min(KT, kt0 + kt_slice);
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;

    for (int kt = kt0; kt < kt1; ++kt, ++it) {
      const int s = it % kStages;
      mbar_wait(full_bar(s), uint32_t((it / kStages) & 1));
      __syncwarp();   // lanes may leave the spin apart; the .aligned wgmma instructions need the whole warp
      wgmma_fence();  // the accumulator writes above (zeroing) are ordered before the MMAs
#pragma unroll
      for (int kk = 0; kk < kBK / 16; ++kk) {
        // 64 rows of A at 128 B each = 8 KiB per consumer, as one MN-major chunk is.
        const uint64_t da = A_MN ? smem_desc(a_tile(s) + cw * kChunkBytes + kk * 2048, kChunkBytes, 1024)
                                 : smem_desc(a_tile(s) + cw * kChunkBytes + kk * 32, 16, 1024);
        const uint64_t db = B_MN ? smem_desc(b_tile(s) + kk * 2048, kChunkBytes, 1024)
                                 : smem_desc(b_tile(s) + kk * 32, 16, 1024);
        wgmma_m64n256k16<A_MN ? 1 : 0, B_MN ? 1 : 0>(acc, da, db);
      }
      wgmma_commit();
      wgmma_wait<1>();  // k-tile it − 1's MMAs have retired: its stage may be refilled
      if (kt > kt0 && lane == 0) mbar_arrive(empty_bar((it - 1) % kStages));
    }
    wgmma_wait<0>();
    if (lane == 0) mbar_arrive(empty_bar((it - 1) % kStages));  // the tile's last k-tile
    fence_accumulators(acc);
    store_tile(acc, C + slice * c_slice_stride, ldc, M, N, m0 + 64 * cw + 16 * warp + (lane >> 2), n0 + 2 * (lane & 3),
               alpha, beta, bias, pair_store);
  }
}

// ---------------------------------------------------------------------------------------------
// Host side

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

// cuTensorMapEncodeTiled from the driver, through cudart (cudart is static; libcuda is not linked).
EncodeTiled encoder() {
  static EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      p = nullptr;
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

// 2-D bf16 tensor map: `inner` contiguous elements per line, `outer` lines `ld` elements apart;
// boxes of 64 (inner, = the 128-byte swizzle span) × box_outer, zero fill outside.
bool encode_map(CUtensorMap* map, const __nv_bfloat16* ptr, int64_t inner, int64_t outer, int64_t ld, int box_outer) {
  const cuuint64_t dims[2] = {cuuint64_t(inner), cuuint64_t(outer)};
  const cuuint64_t strides[1] = {cuuint64_t(ld) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_outer)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encoder()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16*>(ptr), dims, strides,
                               box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

// Per device: 0 unknown, 1 usable, 2 not; with the reason.
std::mutex g_dev_mutex;
std::atomic<int> g_dev_state[64];  // zero-initialized (static storage)
std::string g_dev_reason[64];      // written under g_dev_mutex before g_dev_state leaves 0

int probe_device(int dev, std::string& reason) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    cudaGetLastError();
    reason = "cannot query the compute capability";
    return 2;
  }
  if (major != 9 || minor != 0) {  // sm_90a code runs on compute capability 9.0 only
    reason = "device is sm_" + std::to_string(major * 10 + minor) + ", not sm_90";
    return 2;
  }
  cudaFuncAttributes fa{};
  if (cudaFuncGetAttributes(&fa, gemm_wgmma_kernel<false, false, float>) != cudaSuccess) {
    reason = std::string("the sm_90a kernel image does not load: ") + cudaGetErrorString(cudaGetLastError());
    return 2;
  }
  if (!encoder()) {
    reason = "the driver does not export cuTensorMapEncodeTiled";
    return 2;
  }
  return 1;
}

template <bool AM, bool BM, class OutT>
cudaError_t launch(const GemmArgs& a, const CUtensorMap& ma, const CUtensorMap& mb, cudaStream_t stream,
                   bool pair_store, const GemmSplit& split) {
  auto kernel = gemm_wgmma_kernel<AM, BM, OutT>;
  static std::atomic<uint64_t> opted{0};  // > 48 KiB of dynamic shared memory: once per instance and device
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(opted.load(std::memory_order_relaxed) & bit)) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
    if (err != cudaSuccess) return fail(err, "cudaFuncSetAttribute(gemm wgmma smem)");
    opted.fetch_or(bit, std::memory_order_relaxed);
  }
  const int64_t m_tiles = ceil_div(a.M, kBM), mn_tiles = m_tiles * ceil_div(a.N, kBN);
  const int64_t kt_all = ceil_div(a.K, kBK);
  const bool splitting = split.slices > 1;
  const int64_t kt_slice = splitting ? split.k_len / kBK : kt_all;
  if (splitting && (split.k_len % kBK != 0 || (split.slices - 1) * kt_slice >= kt_all))
    return invalid("gemm: bad split-K slices for the wgmma kernel");
  const int64_t tiles = mn_tiles * (splitting ? split.slices : 1);
  if (tiles > INT32_MAX) return invalid("gemm: too many tiles");
  const int64_t ctas = tiles < sm_count() ? tiles : sm_count();  // persistent: one CTA per SM (197 KiB smem each)
  kernel<<<static_cast<unsigned>(ctas), kThreads, kSmemBytes, stream>>>(
      ma, mb, static_cast<OutT*>(a.C), a.ldc, int(a.M), int(a.N), int(a.K), int(m_tiles), int(mn_tiles), int(tiles),
      int(kt_slice), splitting ? split.c_stride : 0, a.alpha, a.beta, a.bias, pair_store);
  return launched("gemm_wgmma_kernel");
}

template <class OutT>
cudaError_t launch_layout(const GemmArgs& a, const CUtensorMap& ma, const CUtensorMap& mb, cudaStream_t stream,
                          bool pair_store, const GemmSplit& split) {
  switch (a.layout) {
    case GemmLayout::NT: return launch<false, false, OutT>(a, ma, mb, stream, pair_store, split);
    case GemmLayout::NN: return launch<false, true, OutT>(a, ma, mb, stream, pair_store, split);
    case GemmLayout::TN: return launch<true, true, OutT>(a, ma, mb, stream, pair_store, split);
  }
  return invalid("gemm: unknown layout");
}

}  // namespace

bool gemm_sm90_available() {
  if (!enabled()) {
    t_reason = "turned off (AUTODIDACT_GEMM_WGMMA=0)";
    return false;
  }
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError();
    t_reason = "no current device";
    return false;
  }
  int state = g_dev_state[dev].load(std::memory_order_acquire);
  if (state == 0) {
    std::lock_guard<std::mutex> lock(g_dev_mutex);
    state = g_dev_state[dev].load(std::memory_order_relaxed);
    if (state == 0) {
      state = probe_device(dev, g_dev_reason[dev]);
      g_dev_state[dev].store(state, std::memory_order_release);
    }
  }
  if (state == 1) return true;
  t_reason = g_dev_reason[dev];
  return false;
}

const char* gemm_sm90_reason() {
  if (gemm_sm90_available()) t_reason.clear();
  return t_reason.c_str();
}

bool gemm_sm90_takes(const GemmArgs& a) {
  // TMA needs 16-byte aligned bases and 16-byte multiple strides; M, N ≥ 64 keeps at least a
  // quarter of a 128 × 256 tile useful (smaller products stay on the mma.sync kernels).
  if (a.M < 64 || a.N < 64 || a.K < 1) return false;
  if (a.M > INT32_MAX || a.N > INT32_MAX || a.K > INT32_MAX) return false;
  if (a.lda % 8 != 0 || a.ldb % 8 != 0 || !aligned16(a.A) || !aligned16(a.B)) return false;
  if (ceil_div(a.M, kBM) * ceil_div(a.N, kBN) > INT32_MAX) return false;
  return gemm_sm90_available();
}

cudaError_t gemm_sm90(const GemmArgs& a, cudaStream_t stream, bool pair_store, const GemmSplit& split) {
  CUtensorMap ma, mb;  // the type carries the 64-byte alignment the encoder needs
  const bool a_mn = a.layout == GemmLayout::TN, b_mn = a.layout != GemmLayout::NT;
  const bool ok_a = a_mn ? encode_map(&ma, a.A, a.M, a.K, a.lda, 64) : encode_map(&ma, a.A, a.K, a.M, a.lda, kBM);
  const bool ok_b = b_mn ? encode_map(&mb, a.B, a.N, a.K, a.ldb, 64) : encode_map(&mb, a.B, a.K, a.N, a.ldb, kBN);
  if (!ok_a || !ok_b) return invalid("gemm: cuTensorMapEncodeTiled rejected an operand");
  if (split.slices > 1 && a.c_type != DType::F32) return invalid("gemm: split-K partials must be f32");
  return a.c_type == DType::F32 ? launch_layout<float>(a, ma, mb, stream, pair_store, split)
                                : launch_layout<__nv_bfloat16>(a, ma, mb, stream, pair_store, split);
}

#endif  // AD_GEMM_SM90A

}  // namespace ad::cuda::detail
