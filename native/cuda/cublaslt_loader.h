// cuBLAS loaded at run time (dlopen), never linked: the plugin builds where the toolkit has no
// cuBLAS headers (this one) and loads where no cuBLAS is installed. The few prototypes and enum
// values we call are declared in the .cpp (values from cublas_api.h / library_types.h, stable
// across cuBLAS 11–13).
//
// Search order: $AUTODIDACT_CUBLAS_DIR, then the dynamic loader's path (LD_LIBRARY_PATH, ldconfig),
// then $CUDA_HOME/lib64, /usr/local/cuda/lib64 and /usr/local/cuda/targets/<arch>-linux/lib;
// sonames .so.13, .so.12, .so.11, .so. libcublasLt is loaded first (RTLD_GLOBAL) from the same
// place so that libcublas resolves it there.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "cuda/ops.h"

namespace ad::cuda::blas {

struct Library {
  bool ok = false;
  std::string reason;  // why not, when !ok
  std::string path;    // the libcublas that was loaded
  int version = 0;     // cublasGetVersion: major·10000 + minor·100 + patch (or major·1000 + … for 11.x)
};

// Loads once (thread-safe); later calls return the same record.
const Library& load();

// C (row-major, as ops.h's GemmArgs) through cublasGemmEx with f32 compute on a per-thread handle
// bound to `stream`. Bias is NOT applied here (ops_gemm.cu adds it). Returns cudaSuccess or
// cudaErrorNotSupported / cudaErrorUnknown with *err set.
cudaError_t gemm(const GemmArgs& a, cudaStream_t stream, std::string* err);

}  // namespace ad::cuda::blas
