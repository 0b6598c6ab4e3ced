// bf16 GEMM on tensor cores (ops.h): mma.sync.m16n8k16 with f32 accumulators, operands staged
// through a 4-deep cp.async pipeline in shared memory and read into fragments with ldmatrix
// (.trans for operands whose contiguous dimension is M or N). 128×128×32 block tiles, 8 warps of
// 64×32. Edge tiles are zero-filled on load and predicated on store. A second, skinny kernel
// serves NT products with M ≤ 8 (decode), where the weight read is the whole cost. On compute
// capability 9.0, builds that hold the sm_90a kernels (ops_gemm_sm90.cu) run aligned products
// with M, N ≥ 64 on warpgroup MMA + TMA instead (AUTODIDACT_GEMM_WGMMA=0 turns that off).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "cuda/cublaslt_loader.h"
#include "cuda/ops.h"
#include "cuda/ops_common.h"
#include "cuda/ops_gemm_sm90.h"

namespace ad::cuda {

// ---------------------------------------------------------------------------------------------
// Errors (shared by every ops_*.cu)

namespace detail {

namespace {
thread_local std::string t_last_error;
}

cudaError_t fail(cudaError_t err, const std::string& what) {
  t_last_error = what + " (" + cudaGetErrorName(err) + ")";
  return err;
}

cudaError_t launched(const char* kernel) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return fail(err, std::string("launch of ") + kernel + ": " + cudaGetErrorString(err));
  return cudaSuccess;
}

int sm_count() {
  static int counts[64] = {0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) {
    cudaGetLastError();
    return 108;
  }
  if (counts[dev] == 0) {
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
      cudaGetLastError();
      n = 108;
    }
    counts[dev] = n;
  }
  return counts[dev];
}

}  // namespace detail

const char* ops_last_error() { return detail::t_last_error.c_str(); }

using detail::ceil_div;
using detail::invalid;

namespace {

// ---------------------------------------------------------------------------------------------
// Tile geometry

constexpr int kBM = 128, kBN = 128, kBK = 32, kStages = 4, kThreads = 256;
constexpr int kPadK = kBK + 8;    // row length of a K-contiguous tile [rows][BK] (80 B: ldmatrix conflict-free)
constexpr int kPadMN = kBM + 8;   // row length of an M/N-contiguous tile [BK][rows] (272 B)
constexpr int kTileElems = (kBM * kPadK > kBK * kPadMN) ? kBM * kPadK : kBK * kPadMN;  // per operand per stage
constexpr size_t kSmemBytes = size_t(kStages) * 2 * kTileElems * sizeof(__nv_bfloat16);

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One operand tile of a stage: `rows` (BM or BN) × BK, from a matrix whose contiguous dimension
// is K (kKMajor: X[row][k], ld ≥ K) or the row dimension (X[k][row], ld ≥ rows).
// kAligned: contiguous extent, ld and base are multiples of 8 elements / 16 B, so every 8-element
// chunk is wholly in or wholly out of bounds and cp.async moves it.
template <bool kKMajor, bool kAligned>
__device__ __forceinline__ void load_tile(__nv_bfloat16* s, const __nv_bfloat16* X, int64_t ld, int64_t rows_total,
                                          int64_t K, int64_t row0, int64_t k0) {
  // 512 chunks of 8 elements per tile, 2 per thread.
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const int chunk = threadIdx.x + c * kThreads;
    int r, kk;  // tile coordinates of the chunk's first element
    __nv_bfloat16* dst;
    int64_t grow, gk;
    if (kKMajor) {
      r = chunk >> 2;
      kk = (chunk & 3) * 8;
      dst = s + r * kPadK + kk;
      grow = row0 + r;
      gk = k0 + kk;
    } else {
      kk = chunk >> 4;
      r = (chunk & 15) * 8;
      dst = s + kk * kPadMN + r;
      grow = row0 + r;
      gk = k0 + kk;
    }
    const __nv_bfloat16* src = kKMajor ? X + grow * ld + gk : X + gk * ld + grow;
    if (kAligned) {
      const bool valid = grow < rows_total && gk < K;
      cp_async16(dst, valid ? src : X, valid);
    } else {
      // Element by element, zero outside the matrix.
      __align__(16) __nv_bfloat16 v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int64_t er = kKMajor ? grow : grow + e;
        const int64_t ek = kKMajor ? gk + e : gk;
        const bool ok = er < rows_total && ek < K;
        v[e] = ok ? (kKMajor ? X[er * ld + ek] : X[ek * ld + er]) : __float2bfloat16_rn(0.0f);
      }
      *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(v);
    }
  }
}

template <class OutT>
__device__ __forceinline__ float load_c(const OutT* C, int64_t i) {
  return detail::to_f32(C[i]);
}

// C[M×N] = alpha·op(A,B) + beta·C + bias.
//   A_KMAJOR: A is [M×K] (K contiguous) else [K×M];  B_KMAJOR: B is [N×K] else [K×N].
template <bool A_KMAJOR, bool B_KMAJOR, bool ALIGNED, class OutT>
__global__ void __launch_bounds__(kThreads) gemm_mma_kernel(const __nv_bfloat16* __restrict__ A, int64_t lda,
                                                             const __nv_bfloat16* __restrict__ B, int64_t ldb,
                                                             OutT* __restrict__ C, int64_t ldc, int64_t M, int64_t N,
                                                             int64_t K, float alpha, float beta,
                                                             const float* __restrict__ bias, bool pair_store) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto tileA = [&](int stage) { return smem + (2 * stage) * kTileElems; };
  auto tileB = [&](int stage) { return smem + (2 * stage + 1) * kTileElems; };

  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp >> 2, wn = warp & 3;  // 2 × 4 warps, each 64 × 32
  const int64_t KT = (K + kBK - 1) / kBK;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  auto load_stage = [&](int stage, int64_t kt) {
    load_tile<A_KMAJOR, ALIGNED>(tileA(stage), A, lda, M, K, m0, kt * kBK);
    load_tile<B_KMAJOR, ALIGNED>(tileB(stage), B, ldb, N, K, n0, kt * kBK);
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_async_commit();
  }

  for (int64_t kt = 0; kt < KT; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int64_t next = kt + kStages - 1;
    if (next < KT) load_stage(static_cast<int>(next % kStages), next);
    cp_async_commit();

    const __nv_bfloat16* As = tileA(static_cast<int>(kt % kStages));
    const __nv_bfloat16* Bs = tileB(static_cast<int>(kt % kStages));
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
      uint32_t af[4][4];
      uint32_t bf[4][2];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int mb = wm * 64 + i * 16;
        if (A_KMAJOR) {
          ldmatrix_x4(af[i], As + (mb + (lane & 15)) * kPadK + kk + (lane >> 4) * 8);
        } else {
          const int mat = lane >> 3, r = lane & 7;
          ldmatrix_x4_trans(af[i], As + (kk + r + (mat >> 1) * 8) * kPadMN + mb + (mat & 1) * 8);
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const int nb = wn * 32 + j * 16;
        uint32_t r4[4];
        if (B_KMAJOR) {
          ldmatrix_x4(r4, Bs + (nb + (lane & 7) + ((lane >> 4) << 3)) * kPadK + kk + ((lane >> 3) & 1) * 8);
        } else {
          const int mat = lane >> 3, r = lane & 7;
          ldmatrix_x4_trans(r4, Bs + (kk + r + (mat & 1) * 8) * kPadMN + nb + (mat >> 1) * 8);
        }
        bf[2 * j][0] = r4[0];
        bf[2 * j][1] = r4[1];
        bf[2 * j + 1][0] = r4[2];
        bf[2 * j + 1][1] = r4[3];
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_bf16(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  }
  cp_async_wait<0>();

  // Epilogue: acc[i][j] holds rows g and g+8 of the 16×8 tile, columns 2t and 2t+1.
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int64_t row = m0 + wm * 64 + i * 16 + g + h * 8;
      if (row >= M) continue;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int64_t col = n0 + wn * 32 + j * 8 + 2 * t;
        if (col >= N) continue;
        float v0 = alpha * acc[i][j][2 * h], v1 = alpha * acc[i][j][2 * h + 1];
        OutT* c = C + row * ldc + col;
        const bool both = col + 1 < N;
        if (beta != 0.0f) {
          v0 += beta * load_c(c, 0);
          if (both) v1 += beta * load_c(c, 1);
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
          detail::store_as(c, v0);
          if (both) detail::store_as(c + 1, v1);
        }
      }
    }
  }
}

// Skinny NT: C[M×N] with M ≤ 8, one warp per output column, 16-byte loads along K (aligned path
// only: K, lda, ldb multiples of 8, 16-byte aligned A and B). Reads B (the weight) once.
template <int MR, class OutT>
__global__ void __launch_bounds__(256) gemm_skinny_nt_kernel(const __nv_bfloat16* __restrict__ A, int64_t lda,
                                                             const __nv_bfloat16* __restrict__ B, int64_t ldb,
                                                             OutT* __restrict__ C, int64_t ldc, int64_t N, int64_t K,
                                                             float alpha, float beta, const float* __restrict__ bias) {
  const int lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5);
  if (n >= N) return;
  float acc[MR];
#pragma unroll
  for (int m = 0; m < MR; ++m) acc[m] = 0.0f;
  const __nv_bfloat16* b = B + n * ldb;
#pragma unroll 4
  for (int64_t k = lane * 8; k < K; k += 256) {
    const uint4 bv = __ldg(reinterpret_cast<const uint4*>(b + k));
    const __nv_bfloat162* b2 = reinterpret_cast<const __nv_bfloat162*>(&bv);
    float2 bf[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) bf[e] = __bfloat1622float2(b2[e]);
#pragma unroll
    for (int m = 0; m < MR; ++m) {
      const uint4 av = __ldg(reinterpret_cast<const uint4*>(A + m * lda + k));
      const __nv_bfloat162* a2 = reinterpret_cast<const __nv_bfloat162*>(&av);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float2 af = __bfloat1622float2(a2[e]);
        acc[m] = fmaf(af.x, bf[e].x, acc[m]);
        acc[m] = fmaf(af.y, bf[e].y, acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < MR; ++m) acc[m] = detail::warp_sum(acc[m]);
  if (lane < MR) {
    float v = 0.0f;
#pragma unroll
    for (int m = 0; m < MR; ++m) v = lane == m ? acc[m] : v;
    OutT* c = C + static_cast<int64_t>(lane) * ldc + n;
    v *= alpha;
    if (beta != 0.0f) v += beta * detail::to_f32(*c);
    if (bias) v += bias[n];
    detail::store_as(c, v);
  }
}

template <class OutT>
__global__ void add_bias_kernel(OutT* C, int64_t ldc, int64_t M, int64_t N, const float* bias) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / N, c = i % N;
    OutT* p = C + r * ldc + c;
    detail::store_as(p, detail::to_f32(*p) + bias[c]);
  }
}

template <class OutT>
__global__ void scale_c_kernel(OutT* C, int64_t ldc, int64_t M, int64_t N, float beta, const float* bias) {
  const int64_t total = M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / N, c = i % N;
    OutT* p = C + r * ldc + c;
    float v = beta != 0.0f ? beta * detail::to_f32(*p) : 0.0f;
    if (bias) v += bias[c];
    detail::store_as(p, v);
  }
}

__global__ void f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* in, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

int grid_for(int64_t n, int threads) {
  const int64_t blocks = ceil_div(n, threads);
  const int64_t cap = int64_t(detail::sm_count()) * 16;
  return static_cast<int>(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

// ---------------------------------------------------------------------------------------------
// Dispatch

template <bool AK, bool BK_, bool AL, class OutT>
cudaError_t launch_mma(const GemmArgs& a, cudaStream_t stream, bool pair_store) {
  auto kernel = gemm_mma_kernel<AK, BK_, AL, OutT>;
  // Opt in to > 48 KiB of dynamic shared memory, once per kernel instance and device.
  static std::atomic<uint64_t> opted{0};
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) dev = 0;
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if (!(opted.load(std::memory_order_relaxed) & bit)) {
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes));
    if (err != cudaSuccess) return detail::fail(err, "cudaFuncSetAttribute(gemm smem)");
    opted.fetch_or(bit, std::memory_order_relaxed);
  }
  const int64_t gx = ceil_div(a.N, kBN), gy = ceil_div(a.M, kBM);
  if (gy > 65535 || gx > INT32_MAX) return invalid("gemm: M or N too large for one grid");
  dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(a.A, a.lda, a.B, a.ldb, static_cast<OutT*>(a.C), a.ldc, a.M, a.N, a.K,
                                                 a.alpha, a.beta, a.bias, pair_store);
  return detail::launched("gemm_mma_kernel");
}

template <class OutT>
cudaError_t dispatch_layout(const GemmArgs& a, cudaStream_t stream, bool aligned, bool pair_store) {
  switch (a.layout) {
    case GemmLayout::NT:
      return aligned ? launch_mma<true, true, true, OutT>(a, stream, pair_store)
                     : launch_mma<true, true, false, OutT>(a, stream, pair_store);
    case GemmLayout::NN:
      return aligned ? launch_mma<true, false, true, OutT>(a, stream, pair_store)
                     : launch_mma<true, false, false, OutT>(a, stream, pair_store);
    case GemmLayout::TN:
      return aligned ? launch_mma<false, false, true, OutT>(a, stream, pair_store)
                     : launch_mma<false, false, false, OutT>(a, stream, pair_store);
  }
  return invalid("gemm: unknown layout");
}

template <int MR, class OutT>
cudaError_t launch_skinny(const GemmArgs& a, cudaStream_t stream) {
  const int64_t blocks = ceil_div(a.N, 8);
  if (blocks > INT32_MAX) return invalid("gemm: N too large");
  gemm_skinny_nt_kernel<MR, OutT><<<static_cast<unsigned>(blocks), 256, 0, stream>>>(
      a.A, a.lda, a.B, a.ldb, static_cast<OutT*>(a.C), a.ldc, a.N, a.K, a.alpha, a.beta, a.bias);
  return detail::launched("gemm_skinny_nt_kernel");
}

template <class OutT>
cudaError_t dispatch_skinny(const GemmArgs& a, cudaStream_t stream) {
  switch (a.M) {
    case 1: return launch_skinny<1, OutT>(a, stream);
    case 2: return launch_skinny<2, OutT>(a, stream);
    case 3: return launch_skinny<3, OutT>(a, stream);
    case 4: return launch_skinny<4, OutT>(a, stream);
    case 5: return launch_skinny<5, OutT>(a, stream);
    case 6: return launch_skinny<6, OutT>(a, stream);
    case 7: return launch_skinny<7, OutT>(a, stream);
    default: return launch_skinny<8, OutT>(a, stream);
  }
}

// The contiguous extents of the operands, per layout (A's, B's).
void contiguous_extents(const GemmArgs& a, int64_t& ea, int64_t& eb) {
  switch (a.layout) {
    case GemmLayout::NT: ea = a.K; eb = a.K; break;
    case GemmLayout::NN: ea = a.K; eb = a.N; break;
    case GemmLayout::TN: ea = a.M; eb = a.N; break;
  }
}

cudaError_t check_args(const GemmArgs& a) {
  if (a.M < 0 || a.N < 0 || a.K < 0) return invalid("gemm: negative dimension");
  if (!a.C) return invalid("gemm: C is null");
  if (a.K > 0 && (!a.A || !a.B)) return invalid("gemm: A or B is null");
  int64_t ea = 0, eb = 0;
  contiguous_extents(a, ea, eb);
  if (a.lda < ea || a.ldb < eb || a.ldc < a.N) return invalid("gemm: a leading dimension is smaller than its row");
  if (a.layout != GemmLayout::NT && a.layout != GemmLayout::NN && a.layout != GemmLayout::TN)
    return invalid("gemm: unknown layout");
  return cudaSuccess;
}

struct GemmConfig {
  bool use_cublas = false;
  std::string path;
};

GemmConfig g_config;
std::once_flag g_config_once;
cudaError_t g_init_status = cudaSuccess;
std::string g_init_message;

// Our kernels on the current device: "own wgmma sm_90a + mma.sync" or "own mma.sync (...)".
std::string own_path(const char* note) {
  if (detail::gemm_sm90_available())
    return std::string("own wgmma+TMA sm_90a, mma.sync fallback") + (*note ? std::string(" (") + note + ")" : "");
  return std::string("own mma.sync (sm_80+; ") + (*note ? std::string(note) + "; " : "") + "no wgmma: " +
         detail::gemm_sm90_reason() + ")";
}

void configure() {
  const char* env = std::getenv("AUTODIDACT_GEMM");
  const std::string mode = env ? env : "auto";
  if (mode == "own") {
    g_config.path = own_path("AUTODIDACT_GEMM=own");
    return;
  }
  const blas::Library& lib = blas::load();
  if (lib.ok) {
    g_config.use_cublas = true;
    g_config.path = "cuBLAS " + std::to_string(lib.version) + " (runtime-loaded from " + lib.path + "); " +
                    (detail::gemm_sm90_available() ? "own: wgmma sm_90a" : "own: mma.sync");
    return;
  }
  g_config.path = own_path("");
  if (mode == "cublas") {
    g_init_status = cudaErrorNotSupported;
    g_init_message = "AUTODIDACT_GEMM=cublas but " + lib.reason;
  }
}

}  // namespace

cudaError_t gemm_init() {
  std::call_once(g_config_once, configure);
  if (g_init_status != cudaSuccess) return detail::fail(g_init_status, g_init_message);
  return cudaSuccess;
}

const char* gemm_path() {
  std::call_once(g_config_once, configure);
  return g_config.path.c_str();
}

bool gemm_cublas_available() { return blas::load().ok; }

const char* gemm_cublas_reason() { return blas::load().reason.c_str(); }

cudaError_t gemm(const GemmArgs& a, cudaStream_t stream, GemmBackend backend) {
  std::call_once(g_config_once, configure);
  AD_CUDA_TRY(check_args(a));
  if (a.M == 0 || a.N == 0) return cudaSuccess;
  const bool out_f32 = a.c_type == DType::F32;
  if (a.K == 0) {  // C = beta·C + bias
    const int grid = grid_for(a.M * a.N, 256);
    if (out_f32) {
      scale_c_kernel<float><<<grid, 256, 0, stream>>>(static_cast<float*>(a.C), a.ldc, a.M, a.N, a.beta, a.bias);
    } else {
      scale_c_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(a.C), a.ldc, a.M, a.N, a.beta,
                                                               a.bias);
    }
    return detail::launched("scale_c_kernel");
  }

  const bool cublas = backend == GemmBackend::Cublas || (backend == GemmBackend::Auto && g_config.use_cublas);
  if (cublas) {
    std::string err;
    cudaError_t e = blas::gemm(a, stream, &err);
    if (e != cudaSuccess) return detail::fail(e, err);
    if (!a.bias) return cudaSuccess;
    const int grid = grid_for(a.M * a.N, 256);
    if (out_f32) {
      add_bias_kernel<float><<<grid, 256, 0, stream>>>(static_cast<float*>(a.C), a.ldc, a.M, a.N, a.bias);
    } else {
      add_bias_kernel<__nv_bfloat16><<<grid, 256, 0, stream>>>(static_cast<__nv_bfloat16*>(a.C), a.ldc, a.M, a.N, a.bias);
    }
    return detail::launched("add_bias_kernel");
  }

  int64_t ea = 0, eb = 0;
  contiguous_extents(a, ea, eb);
  const bool aligned = ea % 8 == 0 && eb % 8 == 0 && a.lda % 8 == 0 && a.ldb % 8 == 0 && detail::aligned16(a.A) &&
                       detail::aligned16(a.B);
  if (a.layout == GemmLayout::NT && a.M <= 8 && aligned) {
    return out_f32 ? dispatch_skinny<float>(a, stream) : dispatch_skinny<__nv_bfloat16>(a, stream);
  }
  const size_t out_bytes = out_f32 ? 4 : 2;
  const bool pair_store = a.ldc % 2 == 0 && (reinterpret_cast<uintptr_t>(a.C) % (2 * out_bytes)) == 0;
  if (detail::gemm_sm90_takes(a)) return detail::gemm_sm90(a, stream, pair_store);
  return out_f32 ? dispatch_layout<float>(a, stream, aligned, pair_store)
                 : dispatch_layout<__nv_bfloat16>(a, stream, aligned, pair_store);
}

cudaError_t convert_f32_to_bf16(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (!in || !out))) return invalid("convert_f32_to_bf16: bad arguments");
  if (n == 0) return cudaSuccess;
  f32_to_bf16_kernel<<<grid_for(n, 256), 256, 0, stream>>>(in, out, n);
  return detail::launched("f32_to_bf16_kernel");
}

cudaError_t convert_bf16_to_f32(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (!in || !out))) return invalid("convert_bf16_to_f32: bad arguments");
  if (n == 0) return cudaSuccess;
  bf16_to_f32_kernel<<<grid_for(n, 256), 256, 0, stream>>>(in, out, n);
  return detail::launched("bf16_to_f32_kernel");
}

}  // namespace ad::cuda
