#include "cuda/cublaslt_loader.h"

#include <dlfcn.h>
#include <library_types.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace ad::cuda::blas {
namespace {

// ---- the slice of cublas_api.h we use (no header on this toolkit)
typedef int cublasStatus_t;  // CUBLAS_STATUS_SUCCESS = 0
typedef struct cublasContext* cublasHandle_t;
constexpr int kOpN = 0, kOpT = 1;          // cublasOperation_t
constexpr int kComputeF32 = 68;            // CUBLAS_COMPUTE_32F
constexpr int kGemmDefault = -1;           // CUBLAS_GEMM_DEFAULT

typedef cublasStatus_t (*CreateFn)(cublasHandle_t*);
typedef cublasStatus_t (*SetStreamFn)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*GetVersionFn)(cublasHandle_t, int*);
typedef cublasStatus_t (*GemmExFn)(cublasHandle_t, int transa, int transb, int m, int n, int k, const void* alpha,
                                   const void* A, cudaDataType Atype, int lda, const void* B, cudaDataType Btype, int ldb,
                                   const void* beta, void* C, cudaDataType Ctype, int ldc, int computeType, int algo);

struct Api {
  CreateFn create = nullptr;
  SetStreamFn set_stream = nullptr;
  GetVersionFn get_version = nullptr;
  GemmExFn gemm_ex = nullptr;
};

Library g_lib;
Api g_api;
std::once_flag g_once;

std::vector<std::string> candidate_dirs() {
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("AUTODIDACT_CUBLAS_DIR"); d && *d) dirs.emplace_back(d);
  dirs.emplace_back("");  // the dynamic loader's own search path
  if (const char* h = std::getenv("CUDA_HOME"); h && *h) dirs.emplace_back(std::string(h) + "/lib64");
  dirs.emplace_back("/usr/local/cuda/lib64");
#if defined(__aarch64__)
  dirs.emplace_back("/usr/local/cuda/targets/sbsa-linux/lib");
#else
  dirs.emplace_back("/usr/local/cuda/targets/x86_64-linux/lib");
#endif
  return dirs;
}

std::string join(const std::string& dir, const std::string& name) { return dir.empty() ? name : dir + "/" + name; }

void do_load() {
  const char* sonames[] = {".so.13", ".so.12", ".so.11", ".so"};
  std::string tried;
  for (const std::string& dir : candidate_dirs()) {
    for (const char* so : sonames) {
      const std::string lt = join(dir, std::string("libcublasLt") + so);
      const std::string bl = join(dir, std::string("libcublas") + so);
      void* hlt = dlopen(lt.c_str(), RTLD_NOW | RTLD_GLOBAL);
      if (!hlt) continue;
      void* h = dlopen(bl.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        const char* e = dlerror();
        tried += " " + bl + " (" + (e ? e : "?") + ");";
        dlclose(hlt);
        continue;
      }
      Api api;
      api.create = reinterpret_cast<CreateFn>(dlsym(h, "cublasCreate_v2"));
      api.set_stream = reinterpret_cast<SetStreamFn>(dlsym(h, "cublasSetStream_v2"));
      api.get_version = reinterpret_cast<GetVersionFn>(dlsym(h, "cublasGetVersion_v2"));
      api.gemm_ex = reinterpret_cast<GemmExFn>(dlsym(h, "cublasGemmEx"));
      if (!api.create || !api.set_stream || !api.gemm_ex) {
        tried += " " + bl + " (missing cublasCreate_v2/cublasSetStream_v2/cublasGemmEx);";
        dlclose(h);
        dlclose(hlt);
        continue;
      }
      g_api = api;
      g_lib.ok = true;
      g_lib.path = bl;
      // The version needs a handle, which needs a device; a failure here is not fatal.
      cublasHandle_t handle = nullptr;
      if (api.get_version && api.create(&handle) == 0 && handle) {
        api.get_version(handle, &g_lib.version);
        // The handle is kept (not destroyed): it becomes this thread's handle below if needed.
      }
      cudaGetLastError();
      return;
    }
  }
  g_lib.reason = "no libcublasLt/libcublas found (set AUTODIDACT_CUBLAS_DIR to the folder holding libcublas.so.*)";
  if (!tried.empty()) g_lib.reason += ";" + tried;
}

cublasHandle_t thread_handle(std::string* err) {
  thread_local cublasHandle_t handle = nullptr;  // leaked on purpose: destroying at exit races the driver
  if (!handle) {
    cublasStatus_t st = g_api.create(&handle);
    if (st != 0 || !handle) {
      handle = nullptr;
      *err = "cublasCreate failed with status " + std::to_string(st);
    }
  }
  return handle;
}

}  // namespace

const Library& load() {
  std::call_once(g_once, do_load);
  return g_lib;
}

cudaError_t gemm(const GemmArgs& a, cudaStream_t stream, std::string* err) {
  if (!load().ok) {
    *err = "cuBLAS is not loaded: " + g_lib.reason;
    return cudaErrorNotSupported;
  }
  const int64_t dims[] = {a.M, a.N, a.K, a.lda, a.ldb, a.ldc};
  for (int64_t d : dims) {
    if (d > INT_MAX) {
      *err = "cuBLAS path: a dimension exceeds INT_MAX";
      return cudaErrorNotSupported;
    }
  }
  cublasHandle_t h = thread_handle(err);
  if (!h) return cudaErrorUnknown;
  if (cublasStatus_t st = g_api.set_stream(h, stream); st != 0) {
    *err = "cublasSetStream failed with status " + std::to_string(st);
    return cudaErrorUnknown;
  }
  // Row-major C[M×N] is column-major Cᵀ[N×M]: compute Cᵀ = op(B)·op(A) with the operands swapped.
  int opB = kOpN, opA = kOpN;
  switch (a.layout) {
    case GemmLayout::NT: opB = kOpT; opA = kOpN; break;  // Cᵀ = B·Aᵀ
    case GemmLayout::NN: opB = kOpN; opA = kOpN; break;  // Cᵀ = Bᵀ·Aᵀ
    case GemmLayout::TN: opB = kOpN; opA = kOpT; break;  // Cᵀ = Bᵀ·A
  }
  const cudaDataType ct = a.c_type == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  const float alpha = a.alpha, beta = a.beta;
  cublasStatus_t st = g_api.gemm_ex(h, opB, opA, static_cast<int>(a.N), static_cast<int>(a.M), static_cast<int>(a.K),
                                    &alpha, a.B, CUDA_R_16BF, static_cast<int>(a.ldb), a.A, CUDA_R_16BF,
                                    static_cast<int>(a.lda), &beta, a.C, ct, static_cast<int>(a.ldc), kComputeF32,
                                    kGemmDefault);
  if (st != 0) {
    *err = "cublasGemmEx failed with status " + std::to_string(st);
    return cudaErrorUnknown;
  }
  return cudaSuccess;
}

}  // namespace ad::cuda::blas
