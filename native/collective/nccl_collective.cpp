// The GPU collective's library: libnccl.so.2 opened at run time (dlopen, never linked), found in
// the CUDA install or in PyTorch's `nvidia-nccl` wheel, as cuBLAS is (native/cuda/cublaslt_loader.cpp).
//
// Search order: $AUTODIDACT_NCCL (a library path), then libnccl.so.2 through the dynamic loader's
// path, $CUDA_HOME/lib64, /usr/local/cuda/lib64, /usr/lib/<arch>-linux-gnu, and the wheel's
// nvidia/nccl/lib under the usual Python site-packages folders.
//
// What is here: the loader and its probe (`doctor`'s "collectives" line). What is not yet: the
// communicator (rank 0's ncclGetUniqueId sent over the TCP rendezvous, ncclCommInitRank) and the
// bucketed, event-gated ncclAllReduce(ncclAvg) on a side stream, which need the gradients' device
// buffers from the CUDA plugin (plugin_abi.h): open_nccl says so with a typed error.
#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <mutex>

#include "collective/collective.h"

namespace ad::collective {
namespace {

typedef int ncclResult_t;  // ncclSuccess = 0
typedef ncclResult_t (*GetVersionFn)(int*);

LibraryStatus g_status;
std::once_flag g_once;

std::vector<std::string> candidates() {
  std::vector<std::string> c;
  if (const char* p = std::getenv("AUTODIDACT_NCCL"); p && *p) {
    c.emplace_back(p);
    return c;  // pointed at one: that one or nothing
  }
  c.emplace_back("libnccl.so.2");
  if (const char* h = std::getenv("CUDA_HOME"); h && *h) c.emplace_back(std::string(h) + "/lib64/libnccl.so.2");
  c.emplace_back("/usr/local/cuda/lib64/libnccl.so.2");
#if defined(__aarch64__)
  c.emplace_back("/usr/lib/aarch64-linux-gnu/libnccl.so.2");
#else
  c.emplace_back("/usr/lib/x86_64-linux-gnu/libnccl.so.2");
#endif
  // PyTorch's wheel: site-packages/nvidia/nccl/lib/libnccl.so.2
  const char* patterns[] = {"/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
                            "/usr/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
                            "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2"};
  for (const char* pattern : patterns) {
    glob_t g{};
    if (glob(pattern, 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) c.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return c;
}

void do_load() {
  std::vector<std::string> tried;
  for (const std::string& path : candidates()) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      tried.push_back(path + " (" + (e ? e : "?") + ")");
      continue;
    }
    // The entry points the GPU path needs; a library without one is not a usable NCCL.
    const char* needed[] = {"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce", "ncclBroadcast",
                            "ncclAllGather", "ncclCommDestroy", "ncclCommAbort", "ncclCommGetAsyncError", "ncclGetErrorString"};
    std::string missing;
    for (const char* name : needed)
      if (!dlsym(h, name)) missing += std::string(missing.empty() ? "" : ", ") + name;
    if (!missing.empty()) {
      tried.push_back(path + " (missing " + missing + ")");
      dlclose(h);
      continue;
    }
    g_status.found = true;
    g_status.path = path;
    int v = 0;
    if (reinterpret_cast<GetVersionFn>(dlsym(h, "ncclGetVersion"))(&v) == 0) {
      // NCCL ≥ 2.9: major·10000 + minor·100 + patch
      g_status.version = std::to_string(v / 10000) + "." + std::to_string((v / 100) % 100) + "." + std::to_string(v % 100);
    }
    return;  // kept open: the communicator will call into it
  }
  g_status.reason = not_found("no libnccl.so.2 found (install NCCL with the CUDA toolkit or PyTorch's nvidia-nccl wheel, or set AUTODIDACT_NCCL to the library)", tried);
}

}  // namespace

const LibraryStatus& nccl_library() {
  std::call_once(g_once, do_load);
  return g_status;
}

std::unique_ptr<Collective> open_nccl(const OpenOptions& o) {
  const LibraryStatus& lib = nccl_library();
  if (!lib.found) throw CollectiveUnavailable("nccl", "no-library", lib.reason);
  (void)o;
  throw CollectiveUnavailable("nccl", "not-built",
                              "NCCL " + lib.version + " was found at " + lib.path +
                                  ", but the NCCL communicator is not built yet (it needs the CUDA plugin's gradient buffers); use --ranks N on the CPU");
}

}  // namespace ad::collective
