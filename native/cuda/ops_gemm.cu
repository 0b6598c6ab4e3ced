// bf16 GEMM on tensor cores (ops.h): mma.sync.m16n8k16 with f32 accumulators, operands staged
// through a 4-deep cp.async pipeline in shared memory and read into fragments with ldmatrix
// (.trans for operands whose contiguous dimension is M or N). 128×128×32 block tiles, 8 warps of
// 64×32. Edge tiles are zero-filled on load and predicated on store. A second, skinny kernel
// serves NT products with M ≤ 16 (decode), where the weight read is the whole cost. On compute
// capability 9.0, builds that hold the sm_90a kernels (ops_gemm_sm90.cu) run aligned products
// with M, N ≥ 64 on warpgroup MMA + TMA instead (AUTODIDACT_GEMM_WGMMA=0 turns that off).
// Products with fewer output tiles than SMs and a long K run split-K: K slices into f32 partials
// in a per-stream workspace, then a deterministic reduce (AUTODIDACT_GEMM_SPLITK=0 turns it off).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

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
                                                             const float* __restrict__ bias, bool pair_store,
                                                             int64_t kt_slice, int64_t c_slice_stride) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* smem = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto tileA = [&](int stage) { return smem + (2 * stage) * kTileElems; };
  auto tileB = [&](int stage) { return smem + (2 * stage + 1) * kTileElems; };

  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kBM;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kBN;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int wm = warp >> 2, wn = warp & 3;  // 2 × 4 warps, each 64 × 32
  // Split-K: blockIdx.z is the slice; its k-tiles are kt0 … kt0 + KT − 1 (global K bounds still apply).
  const int64_t kt0 = static_cast<int64_t>(blockIdx.z) * kt_slice;
  const int64_t kt_left = (K + kBK - 1) / kBK - kt0;
  const int64_t KT = kt_left < kt_slice ? kt_left : kt_slice;
  C += static_cast<int64_t>(blockIdx.z) * c_slice_stride;

  float acc[4][4][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  auto load_stage = [&](int stage, int64_t kt) {
    load_tile<A_KMAJOR, ALIGNED>(tileA(stage), A, lda, M, K, m0, (kt0 + kt) * kBK);
    load_tile<B_KMAJOR, ALIGNED>(tileB(stage), B, ldb, N, K, n0, (kt0 + kt) * kBK);
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

// Skinny NT (decode): C[M×N] with M ≤ 16, bandwidth-bound on the weight B [N×K]. Tensor cores
// with the roles swapped: 16 weight rows are mma's A operand (m16), up to 8 tokens its B operand
// (n8; MT = 2 groups for M ≤ 16), so no FMA or conversion work competes with the loads.
// Block: 256 threads on one group of 16 weight rows; its K range (all of K, or one split-K slice
// blockIdx.y) goes out in chunks of 32 K values, chunk c to warp c % 8. Lane (g, t) loads 16 B of
// weight rows g and g+8 and of token g at k = 32c + 8t: k is permuted inside each chunk, the same
// way for both operands, so the dot products are unchanged. Aligned operands only (K, lda, ldb
// multiples of 8, 16-byte bases). Slices > 1: each block's partial goes to `part` [S×M×N] f32
// and the block that finishes a row group last (a counter per group) sums the slices in order.
constexpr int kSkWarps = 8, kSkUnroll = 4, kSkChunk = 32;

// Weight load that skips L1 (read once; L1 keeps the activations).
__device__ __forceinline__ uint4 ld_stream16(const __nv_bfloat16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Final value of one output element: alpha·acc + beta·C + bias.
template <class OutT>
__device__ __forceinline__ void store_out(OutT* c, float acc, float alpha, float beta, const float* bias, int64_t n) {
  float v = alpha * acc;
  if (beta != 0.0f) v += beta * detail::to_f32(*c);
  if (bias) v += bias[n];
  detail::store_as(c, v);
}

template <int MT, class OutT>
__global__ void __launch_bounds__(kSkWarps * 32) gemm_skinny_nt_kernel(
    const __nv_bfloat16* __restrict__ A, int64_t lda, const __nv_bfloat16* __restrict__ B, int64_t ldb,
    OutT* __restrict__ C, int64_t ldc, int M, int64_t N, int64_t K, float alpha, float beta,
    const float* __restrict__ bias, int64_t chunks_per_slice, float* __restrict__ part, unsigned* __restrict__ counters) {
  __shared__ float red[kSkWarps][MT * 4][32];
  __shared__ bool last_block;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t chunks = (K + kSkChunk - 1) / kSkChunk;
  const int64_t c_begin = static_cast<int64_t>(blockIdx.y) * chunks_per_slice;
  const int64_t c_end = c_begin + chunks_per_slice < chunks ? c_begin + chunks_per_slice : chunks;
  const bool row0_ok = n0 + g < N, row1_ok = n0 + g + 8 < N;
  const __nv_bfloat16* w0 = B + (row0_ok ? n0 + g : 0) * ldb + 8 * t;
  const __nv_bfloat16* w1 = B + (row1_ok ? n0 + g + 8 : 0) * ldb + 8 * t;
  const uint4 zero = make_uint4(0, 0, 0, 0);

  float acc[MT][4];
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[i][e] = 0.0f;

  for (int64_t c = c_begin + warp; c < c_end; c += kSkWarps * kSkUnroll) {
    uint4 wa[kSkUnroll], wb[kSkUnroll];
    bool in[kSkUnroll];
#pragma unroll
    for (int u = 0; u < kSkUnroll; ++u) {  // all weight loads first: kSkUnroll × 32 B in flight per lane
      const int64_t cc = c + u * kSkWarps, k = cc * kSkChunk + 8 * t;
      in[u] = cc < c_end && k < K;
      wa[u] = in[u] && row0_ok ? ld_stream16(w0 + cc * kSkChunk) : zero;
      wb[u] = in[u] && row1_ok ? ld_stream16(w1 + cc * kSkChunk) : zero;
    }
#pragma unroll
    for (int u = 0; u < kSkUnroll; ++u) {
      const int64_t k = (c + u * kSkWarps) * kSkChunk + 8 * t;
#pragma unroll
      for (int i = 0; i < MT; ++i) {
        const int m = 8 * i + g;
        const uint4 x = in[u] && m < M ? __ldg(reinterpret_cast<const uint4*>(A + m * lda + k)) : zero;
        // Register q of a 16-byte load holds k + 2q, +1: mma j takes pairs 2j (its k 2t, 2t+1)
        // and 2j + 1 (its k 2t+8, 2t+9) of weight rows g (a0, a2), g+8 (a1, a3) and token g (b).
        const uint32_t a_lo[4] = {wa[u].x, wb[u].x, wa[u].y, wb[u].y};
        const uint32_t a_hi[4] = {wa[u].z, wb[u].z, wa[u].w, wb[u].w};
        mma_bf16(acc[i], a_lo, x.x, x.y);
        mma_bf16(acc[i], a_hi, x.z, x.w);
      }
    }
  }

  // acc[i][e]: weight row g + 8·(e/2), token 8i + 2t + e%2. Sum the warps in a fixed order.
#pragma unroll
  for (int i = 0; i < MT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) red[warp][4 * i + e][lane] = acc[i][e];
  __syncthreads();
  float v = 0.0f;
  int64_t m = -1, n = -1;  // the element this thread owns (threads < 128·MT), or none
  if (threadIdx.x < MT * 4 * 32) {
    const int q = threadIdx.x >> 5, l = threadIdx.x & 31;
#pragma unroll
    for (int w = 0; w < kSkWarps; ++w) v += red[w][q][l];
    m = 8 * (q >> 2) + 2 * (l & 3) + (q & 1);
    n = n0 + (l >> 2) + 8 * ((q >> 1) & 1);
    if (m >= M || n >= N) m = -1;
  }
  if (gridDim.y == 1) {
    if (m >= 0) store_out(C + m * ldc + n, v, alpha, beta, bias, n);
    return;
  }
  // Split over blocks: publish this slice, and let the last block of the row group finish it.
  const int64_t MN = int64_t(M) * N;
  if (m >= 0) part[blockIdx.y * MN + m * N + n] = v;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned done = atomicAdd(&counters[blockIdx.x], 1u);
    last_block = done == gridDim.y - 1;
    if (last_block) counters[blockIdx.x] = 0;  // every slice has arrived: ready for the next call
  }
  __syncthreads();
  if (!last_block || m < 0) return;
  __threadfence();
  float sum = 0.0f;
  for (unsigned s = 0; s < gridDim.y; ++s) sum += __ldcg(part + s * MN + m * N + n);
  store_out(C + m * ldc + n, sum, alpha, beta, bias, n);
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

// Split-K epilogue: C = alpha·Σ_s part[s] + beta·C + bias, slices summed in order 0 … S−1
// (deterministic). part is [S×M×N] f32; VEC4 (N % 4 == 0): 4 columns per thread, float4 reads.
template <bool VEC4, class OutT>
__global__ void splitk_reduce_kernel(const float* __restrict__ part, int slices, int64_t M, int64_t N,
                                     OutT* __restrict__ C, int64_t ldc, float alpha, float beta,
                                     const float* __restrict__ bias) {
  constexpr int W = VEC4 ? 4 : 1;
  const int64_t groups = M * (N / W), MN = M * N;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < groups; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / (N / W), c = (i % (N / W)) * W;
    float v[W];
#pragma unroll
    for (int e = 0; e < W; ++e) v[e] = 0.0f;
    for (int sl = 0; sl < slices; ++sl) {
      const float* p = part + sl * MN + r * N + c;
      if constexpr (VEC4) {
        const float4 q = __ldcs(reinterpret_cast<const float4*>(p));  // read once: evict first
        v[0] += q.x;
        v[1] += q.y;
        v[2] += q.z;
        v[3] += q.w;
      } else {
        v[0] += __ldcs(p);
      }
    }
#pragma unroll
    for (int e = 0; e < W; ++e) store_out(C + r * ldc + c + e, v[e], alpha, beta, bias, c + e);
  }
}

int grid_for(int64_t n, int threads) {
  const int64_t blocks = ceil_div(n, threads);
  const int64_t cap = int64_t(detail::sm_count()) * 16;
  return static_cast<int>(blocks < cap ? (blocks > 0 ? blocks : 1) : cap);
}

// ---------------------------------------------------------------------------------------------
// Dispatch

template <bool AK, bool BK_, bool AL, class OutT>
cudaError_t launch_mma(const GemmArgs& a, cudaStream_t stream, bool pair_store, const detail::GemmSplit& split) {
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
  const bool splitting = split.slices > 1;
  const int64_t kt_slice = splitting ? split.k_len / kBK : ceil_div(a.K, kBK);
  dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(gy), static_cast<unsigned>(splitting ? split.slices : 1));
  kernel<<<grid, kThreads, kSmemBytes, stream>>>(a.A, a.lda, a.B, a.ldb, static_cast<OutT*>(a.C), a.ldc, a.M, a.N, a.K,
                                                 a.alpha, a.beta, a.bias, pair_store, kt_slice,
                                                 splitting ? split.c_stride : 0);
  return detail::launched("gemm_mma_kernel");
}

template <class OutT>
cudaError_t dispatch_layout(const GemmArgs& a, cudaStream_t stream, bool aligned, bool pair_store,
                            const detail::GemmSplit& split = detail::GemmSplit()) {
  switch (a.layout) {
    case GemmLayout::NT:
      return aligned ? launch_mma<true, true, true, OutT>(a, stream, pair_store, split)
                     : launch_mma<true, true, false, OutT>(a, stream, pair_store, split);
    case GemmLayout::NN:
      return aligned ? launch_mma<true, false, true, OutT>(a, stream, pair_store, split)
                     : launch_mma<true, false, false, OutT>(a, stream, pair_store, split);
    case GemmLayout::TN:
      return aligned ? launch_mma<false, false, true, OutT>(a, stream, pair_store, split)
                     : launch_mma<false, false, false, OutT>(a, stream, pair_store, split);
  }
  return invalid("gemm: unknown layout");
}

// ---------------------------------------------------------------------------------------------
// Split-K workspace: one f32 buffer per (device, stream), grown on demand (growth waits for the
// stream, whose earlier GEMMs may still read the old buffer). Its first kCounterBytes hold the
// skinny kernel's row-group counters (zero between calls). The lock is held from taking the
// buffer until the kernels using it are enqueued, so host threads sharing a stream cannot
// interleave two users.

constexpr size_t kCounterBytes = 64 * 1024;
constexpr int64_t kMaxCounters = kCounterBytes / sizeof(unsigned);
constexpr size_t kMaxWorkspaceBytes = size_t(256) << 20;

struct Workspace {
  int device = -1;
  cudaStream_t stream = nullptr;
  void* ptr = nullptr;
  size_t bytes = 0;
};

std::mutex g_ws_mutex;
std::vector<Workspace> g_workspaces;  // a handful: one per (device, stream) that ever split
std::atomic<uint64_t> g_ws_generation{0};  // bumped when a workspace moves (CUDA graphs hold its address)

// Returns (in `ws`) a buffer of ≥ kCounterBytes + partial_bytes for `stream`; call with
// g_ws_mutex held. On failure the stream is left without a buffer (or with its old one).
cudaError_t acquire_workspace(size_t partial_bytes, cudaStream_t stream, Workspace*& ws) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return detail::fail(cudaGetLastError(), "gemm split-K: no device");
  ws = nullptr;
  for (Workspace& w : g_workspaces)
    if (w.device == dev && w.stream == stream) ws = &w;
  if (!ws) {
    g_workspaces.push_back(Workspace{dev, stream, nullptr, 0});
    ws = &g_workspaces.back();
  }
  const size_t need = kCounterBytes + partial_bytes;
  if (ws->bytes >= need) return cudaSuccess;
  if (ws->ptr) {
    cudaError_t err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) return detail::fail(err, "gemm split-K: waiting to grow the workspace");
    cudaFree(ws->ptr);
    ws->ptr = nullptr;
    ws->bytes = 0;
  }
  const size_t grown = need + need / 4;  // headroom against many small growth steps
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, grown);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return detail::fail(err, "gemm split-K: cudaMalloc of the workspace");
  }
  err = cudaMemsetAsync(p, 0, kCounterBytes, stream);  // stream order: the stream may not sync with stream 0
  if (err != cudaSuccess) {
    cudaFree(p);
    return detail::fail(err, "gemm split-K: clearing the workspace counters");
  }
  ws->ptr = p;
  ws->bytes = grown;
  g_ws_generation.fetch_add(1, std::memory_order_relaxed);
  return cudaSuccess;
}

float* partials_of(const Workspace& ws) {
  return reinterpret_cast<float*>(static_cast<char*>(ws.ptr) + kCounterBytes);
}
unsigned* counters_of(const Workspace& ws) { return static_cast<unsigned*>(ws.ptr); }

std::atomic<int> g_splitk{-1};  // -1: AUTODIDACT_GEMM_SPLITK not read yet

bool splitk_enabled() {
  int e = g_splitk.load(std::memory_order_relaxed);
  if (e < 0) {
    const char* env = std::getenv("AUTODIDACT_GEMM_SPLITK");
    e = (env && std::strcmp(env, "0") == 0) ? 0 : 1;
    int expected = -1;
    g_splitk.compare_exchange_strong(expected, e, std::memory_order_relaxed);
    e = g_splitk.load(std::memory_order_relaxed);
  }
  return e == 1;
}

// ---------------------------------------------------------------------------------------------
// Split-K planning for the tiled kernels: K in S slices of a multiple of 64 values (≥ 256 each,
// S ≤ 16) when the product has fewer output tiles than SMs. Cost model in units of one k-step
// (64 K values) of one tile on one SM: waves · (k-steps per slice + 3 for fill and epilogue),
// plus the partials' round trip (mostly L2, ~5 TB/s), the C traffic of the reduce (~2.5 TB/s)
// and its launch. Splitting must win by 15%.

struct SplitPlan {
  int slices = 1;
  int64_t k_len = 0;
};

SplitPlan plan_tiled_split(const GemmArgs& a, bool wgmma) {
  SplitPlan best;
  if (!splitk_enabled() || a.K < 512) return best;
  const int64_t tiles = ceil_div(a.M, 128) * ceil_div(a.N, wgmma ? 256 : 128);
  const int64_t sms = detail::sm_count();
  if (tiles >= sms) return best;
  const double step_us = wgmma ? 1.0 : 0.8;  // one 64-deep k-step of a 128×256 (128×128) tile
  const int64_t steps = ceil_div(a.K, 64);
  const double c_bytes = double(a.M) * double(a.N) * (a.c_type == DType::F32 ? 4 : 2) * (a.beta != 0.0f ? 2 : 1);
  auto cost_us = [&](int64_t slices, int64_t per) {
    const double t = double(ceil_div(tiles * slices, sms)) * double(per + 3) * step_us;
    if (slices == 1) return t;
    const double part_bytes = double(slices) * double(a.M) * double(a.N) * 4.0;
    return t + 2.0 * part_bytes / 5e6 + c_bytes / 2.5e6 + 3.0;
  };
  const double base = cost_us(1, steps);
  double best_cost = 0.85 * base;
  for (int64_t s = 2; s <= 16 && steps / s >= 4; ++s) {
    const int64_t per = ceil_div(steps, s), slices = ceil_div(steps, per);  // every slice non-empty
    if (double(slices) * double(a.M) * double(a.N) * 4.0 > double(kMaxWorkspaceBytes)) break;
    const double c = cost_us(slices, per);
    if (c < best_cost) {
      best_cost = c;
      best.slices = static_cast<int>(slices);
      best.k_len = per * 64;
    }
  }
  return best;
}

// The skinny kernel's split over blocks when the row groups do not cover the SMs: ~2 blocks per
// SM, each warp ≥ 2 chunks.
SplitPlan plan_skinny_split(const GemmArgs& a) {
  SplitPlan plan;
  const int64_t groups = ceil_div(a.N, 16), chunks = ceil_div(a.K, kSkChunk), sms = detail::sm_count();
  if (!splitk_enabled() || groups >= sms || groups > kMaxCounters) return plan;  // enough blocks already
  const int64_t want = ceil_div(2 * sms, groups);
  int64_t s = want < 16 ? want : 16;
  const int64_t most = chunks / (2 * kSkWarps);
  if (s > most) s = most;
  if (s <= 1) return plan;
  const int64_t per = ceil_div(chunks, s);
  plan.slices = static_cast<int>(ceil_div(chunks, per));
  plan.k_len = per * kSkChunk;
  return plan;
}

template <int MT, class OutT>
cudaError_t launch_skinny(const GemmArgs& a, cudaStream_t stream, const SplitPlan& plan, float* part,
                          unsigned* counters) {
  const int64_t groups = ceil_div(a.N, 16);
  if (groups > INT32_MAX) return invalid("gemm: N too large");
  const int64_t chunks = ceil_div(a.K, kSkChunk);
  const int64_t per = plan.slices > 1 ? plan.k_len / kSkChunk : chunks;
  dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>(plan.slices > 1 ? plan.slices : 1));
  gemm_skinny_nt_kernel<MT, OutT><<<grid, kSkWarps * 32, 0, stream>>>(
      a.A, a.lda, a.B, a.ldb, static_cast<OutT*>(a.C), a.ldc, static_cast<int>(a.M), a.N, a.K, a.alpha, a.beta,
      a.bias, per, part, counters);
  return detail::launched("gemm_skinny_nt_kernel");
}

template <class OutT>
cudaError_t dispatch_skinny(const GemmArgs& a, cudaStream_t stream, const SplitPlan& plan, float* part,
                            unsigned* counters) {
  return a.M <= 8 ? launch_skinny<1, OutT>(a, stream, plan, part, counters)
                  : launch_skinny<2, OutT>(a, stream, plan, part, counters);
}

// NT with M ≤ 16 on aligned operands: the skinny kernel, split over blocks when N is small.
cudaError_t run_skinny(const GemmArgs& a, cudaStream_t stream) {
  const bool out_f32 = a.c_type == DType::F32;
  SplitPlan plan = plan_skinny_split(a);
  if (plan.slices > 1) {
    std::lock_guard<std::mutex> lock(g_ws_mutex);
    Workspace* ws = nullptr;
    if (acquire_workspace(size_t(plan.slices) * size_t(a.M * a.N) * 4, stream, ws) == cudaSuccess) {
      return out_f32 ? dispatch_skinny<float>(a, stream, plan, partials_of(*ws), counters_of(*ws))
                     : dispatch_skinny<__nv_bfloat16>(a, stream, plan, partials_of(*ws), counters_of(*ws));
    }
    plan = SplitPlan();  // no workspace: one block per row group
  }
  return out_f32 ? dispatch_skinny<float>(a, stream, plan, nullptr, nullptr)
                 : dispatch_skinny<__nv_bfloat16>(a, stream, plan, nullptr, nullptr);
}

template <class OutT>
cudaError_t launch_reduce(const GemmArgs& a, const float* part, int slices, cudaStream_t stream) {
  OutT* C = static_cast<OutT*>(a.C);
  if (a.N % 4 == 0) {
    splitk_reduce_kernel<true, OutT><<<grid_for(a.M * a.N / 4, 256), 256, 0, stream>>>(part, slices, a.M, a.N, C, a.ldc,
                                                                                         a.alpha, a.beta, a.bias);
  } else {
    splitk_reduce_kernel<false, OutT><<<grid_for(a.M * a.N, 256), 256, 0, stream>>>(part, slices, a.M, a.N, C, a.ldc,
                                                                                      a.alpha, a.beta, a.bias);
  }
  return detail::launched("splitk_reduce_kernel");
}

// The tiled kernels over K slices into f32 partials (beta 0, no bias), then the reduce into C.
// Returns cudaErrorMemoryAllocation (nothing enqueued) when no workspace could be had.
cudaError_t run_split(const GemmArgs& a, cudaStream_t stream, const SplitPlan& plan, bool wgmma, bool aligned) {
  std::lock_guard<std::mutex> lock(g_ws_mutex);
  Workspace* ws = nullptr;
  if (acquire_workspace(size_t(plan.slices) * size_t(a.M * a.N) * 4, stream, ws) != cudaSuccess)
    return cudaErrorMemoryAllocation;
  float* part = partials_of(*ws);
  GemmArgs p = a;
  p.C = part;
  p.ldc = a.N;
  p.c_type = DType::F32;
  p.alpha = 1.0f;
  p.beta = 0.0f;
  p.bias = nullptr;
  detail::GemmSplit split;
  split.slices = plan.slices;
  split.k_len = plan.k_len;
  split.c_stride = a.M * a.N;
  const bool pair = a.N % 2 == 0;  // partial rows start 8-byte aligned
  AD_CUDA_TRY(wgmma ? detail::gemm_sm90(p, stream, pair, split) : dispatch_layout<float>(p, stream, aligned, pair, split));
  return a.c_type == DType::F32 ? launch_reduce<float>(a, part, plan.slices, stream)
                                : launch_reduce<__nv_bfloat16>(a, part, plan.slices, stream);
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

const char* splitk_note() {
  return splitk_enabled() ? "split-K on" : "split-K off (AUTODIDACT_GEMM_SPLITK=0)";
}

// Our kernels on the current device: "own wgmma sm_90a + mma.sync" or "own mma.sync (...)".
std::string own_path(const char* note) {
  if (detail::gemm_sm90_available())
    return std::string("own wgmma+TMA sm_90a, mma.sync fallback, ") + splitk_note() +
           (*note ? std::string(" (") + note + ")" : "");
  return std::string("own mma.sync (sm_80+; ") + splitk_note() + "; " + (*note ? std::string(note) + "; " : "") +
         "no wgmma: " + detail::gemm_sm90_reason() + ")";
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
                    (detail::gemm_sm90_available() ? "own: wgmma sm_90a, " : "own: mma.sync, ") + splitk_note();
    return;
  }
  g_config.path = own_path("");
  if (mode == "cublas") {
    g_init_status = cudaErrorNotSupported;
    g_init_message = "AUTODIDACT_GEMM=cublas but " + lib.reason;
  }
}

}  // namespace

uint64_t gemm_workspace_generation() { return g_ws_generation.load(std::memory_order_relaxed); }

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
  if (a.layout == GemmLayout::NT && a.M <= 16 && aligned) return run_skinny(a, stream);
  const bool wgmma = detail::gemm_sm90_takes(a);
  const SplitPlan plan = plan_tiled_split(a, wgmma);
  if (plan.slices > 1) {
    const cudaError_t err = run_split(a, stream, plan, wgmma, aligned);
    if (err != cudaErrorMemoryAllocation) return err;  // else: no workspace, run it whole
  }
  const size_t out_bytes = out_f32 ? 4 : 2;
  const bool pair_store = a.ldc % 2 == 0 && (reinterpret_cast<uintptr_t>(a.C) % (2 * out_bytes)) == 0;
  if (wgmma) return detail::gemm_sm90(a, stream, pair_store);
  return out_f32 ? dispatch_layout<float>(a, stream, aligned, pair_store)
                 : dispatch_layout<__nv_bfloat16>(a, stream, aligned, pair_store);
}

namespace detail {

int gemm_splitk_slices(const GemmArgs& a) {
  if (a.M <= 0 || a.N <= 0 || a.K <= 0) return 1;
  int64_t ea = 0, eb = 0;
  contiguous_extents(a, ea, eb);
  const bool aligned = ea % 8 == 0 && eb % 8 == 0 && a.lda % 8 == 0 && a.ldb % 8 == 0 && aligned16(a.A) && aligned16(a.B);
  if (a.layout == GemmLayout::NT && a.M <= 16 && aligned) return plan_skinny_split(a).slices;
  return plan_tiled_split(a, gemm_sm90_takes(a)).slices;
}

void gemm_splitk_set_enabled(bool on) {
  splitk_enabled();  // read the environment first so it cannot overwrite this later
  g_splitk.store(on ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace detail

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
