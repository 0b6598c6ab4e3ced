// The GPU collective on NCCL: libnccl.so.2 opened at run time (dlopen, never linked), found in the
// CUDA install or in PyTorch's `nvidia-nccl` wheel, as cuBLAS is (native/cuda/cublaslt_loader.cpp).
// The slice of nccl.h and of the CUDA driver API (cuda.h, libcuda.so.1) we call is declared here,
// so this file builds where neither header is installed and sits in the CPU-only addon too: it
// only dlopens, and the driver API needs no CUDA toolkit at build time.
//
// Search order: $AUTODIDACT_NCCL (a library path: that one or nothing), then the CUDA install
// ($CUDA_HOME/lib64, /usr/local/cuda/lib64), then the wheel's nvidia/nccl/lib under the Python
// site-packages folders ($VIRTUAL_ENV, ~/.local, /usr/local, /usr), then libnccl.so.2 through the
// dynamic loader's default path.
//
// The communicator follows llm.c's multi-GPU sequence: rank 0's ncclGetUniqueId (nccl_unique_id),
// its 128 bytes handed to the other ranks by the caller (src/parallel/rendezvous.ts, over TCP),
// then ncclCommInitRank on every rank. Each process sees one GPU (the launcher sets
// CUDA_VISIBLE_DEVICES), so the device is ordinal 0 and the context its primary context — the one
// the CUDA runtime (and so the CUDA plugin) uses.
//
// Buffers are host memory, as on "mpi" and "single" (the interface's contract): each operation
// copies into a device staging buffer this collective owns, runs on its own non-blocking stream and
// copies back. The gradients of the CUDA plugin stay where they are for now: its C ABI does not
// hand out device buffers, so CudaEngine::reduce_gradients is refused past one rank.
//
// Every operation is bounded by the timeout: it is enqueued, then the stream is polled together
// with ncclCommGetAsyncError; past the deadline the communicator is aborted (ncclCommAbort) and
// CollectiveTimeout thrown; the collective is then broken. ncclCommInitRank blocks inside NCCL, so
// it runs on a thread of its own, waited on with the timeout; the first all-reduce (which sets up
// NCCL's connections to the peers) runs there too.
#include <dlfcn.h>
#include <glob.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "collective/collective.h"

namespace ad::collective {
namespace {

// ---- the slice of nccl.h we use (NCCL 2.x; ncclAvg since 2.10)
typedef int ncclResult_t;
constexpr ncclResult_t kNcclSuccess = 0;
constexpr ncclResult_t kNcclInProgress = 7;
typedef struct ncclComm* ncclComm_t;
constexpr size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
struct ncclUniqueId {
  char internal[kUniqueIdBytes];
};
typedef int ncclDataType_t;
constexpr ncclDataType_t kNcclUint8 = 1, kNcclFloat32 = 7;
typedef int ncclRedOp_t;
constexpr ncclRedOp_t kNcclSum = 0, kNcclAvg = 4;
constexpr int kNcclAvgVersion = 21000;  // NCCL 2.10.0
typedef void* cudaStream_t;             // a CUstream is a cudaStream_t

struct NcclApi {
  ncclResult_t (*get_version)(int*) = nullptr;
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  int version = 0;  // major·10000 + minor·100 + patch (NCCL ≥ 2.9)
};

// ---- the slice of cuda.h (the driver API) we use
typedef int CUresult;
constexpr CUresult kCudaSuccess = 0;
constexpr CUresult kCudaNotReady = 600;  // CUDA_ERROR_NOT_READY
typedef int CUdevice;
typedef struct CUctx_st* CUcontext;
typedef struct CUstream_st* CUstream;
typedef unsigned long long CUdeviceptr;
constexpr unsigned kStreamNonBlocking = 1;  // CU_STREAM_NON_BLOCKING

struct CudaApi {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_ctx_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_ctx_release)(CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*memcpy_htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned) = nullptr;
  CUresult (*stream_query)(CUstream) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*get_error_string)(CUresult, const char**) = nullptr;
};

LibraryStatus g_status;
NcclApi g_nccl;
std::once_flag g_once;

template <typename F>
bool bind(void* h, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(h, name));
  return *fn != nullptr;
}

void add_glob(std::vector<std::string>& c, const std::string& pattern) {
  glob_t g{};
  if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) c.emplace_back(g.gl_pathv[i]);
  globfree(&g);
}

std::vector<std::string> candidates() {
  std::vector<std::string> c;
  if (const char* p = std::getenv("AUTODIDACT_NCCL"); p && *p) {
    c.emplace_back(p);
    return c;  // pointed at one: that one or nothing
  }
  if (const char* h = std::getenv("CUDA_HOME"); h && *h) c.emplace_back(std::string(h) + "/lib64/libnccl.so.2");
  c.emplace_back("/usr/local/cuda/lib64/libnccl.so.2");
  // PyTorch's wheel: site-packages/nvidia/nccl/lib/libnccl.so.2
  const std::string wheel = "/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2";
  if (const char* v = std::getenv("VIRTUAL_ENV"); v && *v) add_glob(c, std::string(v) + "/lib" + wheel);
  if (const char* home = std::getenv("HOME"); home && *home) add_glob(c, std::string(home) + "/.local/lib" + wheel);
  add_glob(c, "/usr/local/lib" + wheel);
  add_glob(c, "/usr/lib" + wheel);
  c.emplace_back("libnccl.so.2");  // the loader's default path (LD_LIBRARY_PATH, ld.so.cache: Debian's libnccl2)
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
    NcclApi a;
    const bool ok = bind(h, "ncclGetVersion", &a.get_version) && bind(h, "ncclGetUniqueId", &a.get_unique_id) &&
                    bind(h, "ncclCommInitRank", &a.comm_init_rank) && bind(h, "ncclAllReduce", &a.all_reduce) &&
                    bind(h, "ncclBroadcast", &a.broadcast) && bind(h, "ncclAllGather", &a.all_gather) &&
                    bind(h, "ncclCommDestroy", &a.comm_destroy) && bind(h, "ncclCommAbort", &a.comm_abort) &&
                    bind(h, "ncclCommGetAsyncError", &a.comm_get_async_error) && bind(h, "ncclGetErrorString", &a.get_error_string);
    if (!ok) {
      tried.push_back(path + " (not NCCL 2: an entry point is missing)");
      dlclose(h);
      continue;
    }
    if (a.get_version(&a.version) != kNcclSuccess) a.version = 0;
    g_nccl = a;
    g_status.found = true;
    g_status.path = path;
    g_status.version = std::to_string(a.version / 10000) + "." + std::to_string((a.version / 100) % 100) + "." + std::to_string(a.version % 100);
    return;  // kept open: the communicator calls into it
  }
  g_status.reason = not_found("no libnccl.so.2 found (install NCCL with the CUDA toolkit or PyTorch's nvidia-nccl wheel, or set AUTODIDACT_NCCL to the library)", tried);
}

// The CUDA driver (libcuda.so.1, installed with the GPU driver), or why not.
const CudaApi& cuda_driver() {
  static CudaApi api;
  static std::string reason;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = dlerror();
      reason = std::string("the NCCL collective needs the CUDA driver: libcuda.so.1 did not load (") + (e ? e : "?") + ")";
      return;
    }
    CudaApi a;
    const bool ok = bind(h, "cuInit", &a.init) && bind(h, "cuDeviceGet", &a.device_get) &&
                    bind(h, "cuDevicePrimaryCtxRetain", &a.primary_ctx_retain) && bind(h, "cuDevicePrimaryCtxRelease_v2", &a.primary_ctx_release) &&
                    bind(h, "cuCtxSetCurrent", &a.ctx_set_current) && bind(h, "cuMemAlloc_v2", &a.mem_alloc) &&
                    bind(h, "cuMemFree_v2", &a.mem_free) && bind(h, "cuMemcpyHtoDAsync_v2", &a.memcpy_htod_async) &&
                    bind(h, "cuMemcpyDtoH_v2", &a.memcpy_dtoh) && bind(h, "cuStreamCreate", &a.stream_create) &&
                    bind(h, "cuStreamQuery", &a.stream_query) && bind(h, "cuStreamDestroy_v2", &a.stream_destroy) &&
                    bind(h, "cuGetErrorString", &a.get_error_string);
    if (!ok) {
      reason = "libcuda.so.1 lacks a driver API entry point the NCCL collective needs (a driver older than CUDA 11?)";
      dlclose(h);
      return;
    }
    api = a;
  });
  if (!api.init) throw CollectiveUnavailable("nccl", "no-driver", reason);
  return api;
}

std::string cuda_error(const CudaApi& cu, CUresult r) {
  const char* s = nullptr;
  if (cu.get_error_string && cu.get_error_string(r, &s) == kCudaSuccess && s) return std::string(s) + " (CUDA error " + std::to_string(r) + ")";
  return "CUDA error " + std::to_string(r);
}

std::string nccl_error(ncclResult_t r) {
  const char* s = g_nccl.get_error_string ? g_nccl.get_error_string(r) : nullptr;
  return (s ? std::string(s) : std::string("NCCL error")) + " (ncclResult " + std::to_string(r) + ")";
}

// The device, its primary context, a stream and a staging buffer: what one communicator works with.
struct Device {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr stage = 0;
  size_t stage_bytes = 0;
};

class NcclCollective : public Collective {
 public:
  NcclCollective(int64_t timeout_ms, int rank, int size, ncclComm_t comm, Device device)
      : Collective(timeout_ms), rank_(rank), size_(size), comm_(comm), dev_(device), cu_(cuda_driver()) {}

  ~NcclCollective() override {
    std::lock_guard<std::mutex> lock(mutex_);
    // After an abort a peer is gone and the stream's last operation may not have ended: the
    // communicator is already freed by the abort, the device memory is left to the process's exit.
    if (broken_) return;
    cu_.ctx_set_current(dev_.context);
    g_nccl.comm_destroy(comm_);
    if (dev_.stage) cu_.mem_free(dev_.stage);
    cu_.stream_destroy(dev_.stream);
    cu_.primary_ctx_release(dev_.device);
  }

  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  void all_reduce(float* data, int64_t n, ReduceOp op) override {
    if (n < 0) throw std::invalid_argument("a collective's element count must be ≥ 0");
    std::lock_guard<std::mutex> lock(mutex_);
    begin("all-reduce");
    if (n == 0) return;
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    const CUdeviceptr stage = staging(bytes, "all-reduce");
    cuda(cu_.memcpy_htod_async(stage, data, bytes, dev_.stream), "all-reduce: copy to the device");
    const void* p = reinterpret_cast<const void*>(stage);
    const bool avg = op == ReduceOp::kAverage;
    // ncclAvg where NCCL has it (2.10+); before, the sum scaled on the host as the MPI collective does
    const ncclRedOp_t nccl_op = avg && g_nccl.version >= kNcclAvgVersion ? kNcclAvg : kNcclSum;
    nccl(g_nccl.all_reduce(p, const_cast<void*>(p), static_cast<size_t>(n), kNcclFloat32, nccl_op, comm_, dev_.stream), "all-reduce");
    wait("all-reduce");
    cuda(cu_.memcpy_dtoh(data, stage, bytes), "all-reduce: copy from the device");
    if (avg && nccl_op == kNcclSum)
      for (int64_t i = 0; i < n; ++i) data[i] *= 1.0f / static_cast<float>(size_);
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    if (root < 0 || root >= size_) throw std::out_of_range("broadcast root " + std::to_string(root) + " is not a rank of this " + std::to_string(size_) + "-rank world");
    if (bytes < 0) throw std::invalid_argument("a collective's byte count must be ≥ 0");
    std::lock_guard<std::mutex> lock(mutex_);
    begin("broadcast");
    if (bytes == 0) return;
    const CUdeviceptr stage = staging(static_cast<size_t>(bytes), "broadcast");
    cuda(cu_.memcpy_htod_async(stage, data, static_cast<size_t>(bytes), dev_.stream), "broadcast: copy to the device");
    const void* p = reinterpret_cast<const void*>(stage);
    nccl(g_nccl.broadcast(p, const_cast<void*>(p), static_cast<size_t>(bytes), kNcclUint8, root, comm_, dev_.stream), "broadcast");
    wait("broadcast");
    cuda(cu_.memcpy_dtoh(data, stage, static_cast<size_t>(bytes)), "broadcast: copy from the device");
  }

  void all_gather(const void* in, int64_t bytes, void* out) override {
    if (bytes < 0) throw std::invalid_argument("a collective's byte count must be ≥ 0");
    std::lock_guard<std::mutex> lock(mutex_);
    begin("all-gather");
    if (bytes == 0) return;
    const size_t b = static_cast<size_t>(bytes);
    // [0, b): this rank's bytes; [b, b + size·b): everyone's
    const CUdeviceptr stage = staging(b * static_cast<size_t>(size_ + 1), "all-gather");
    cuda(cu_.memcpy_htod_async(stage, in, b, dev_.stream), "all-gather: copy to the device");
    nccl(g_nccl.all_gather(reinterpret_cast<const void*>(stage), reinterpret_cast<void*>(stage + b), b, kNcclUint8, comm_, dev_.stream), "all-gather");
    wait("all-gather");
    cuda(cu_.memcpy_dtoh(out, stage + b, b * static_cast<size_t>(size_)), "all-gather: copy from the device");
  }

  // NCCL has no barrier: a one-element all-reduce completes on no rank before every rank joined it.
  void barrier() override {
    std::lock_guard<std::mutex> lock(mutex_);
    begin("barrier");
    const CUdeviceptr stage = staging(sizeof(float), "barrier");
    void* p = reinterpret_cast<void*>(stage);
    nccl(g_nccl.all_reduce(p, p, 1, kNcclFloat32, kNcclSum, comm_, dev_.stream), "barrier");
    wait("barrier");
  }

  // Polls the stream (and NCCL's asynchronous error) until the last enqueued operation completes;
  // past the deadline, or on NCCL's error, the communicator is aborted and the collective broken.
  void wait(const char* op) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms_);
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      const CUresult q = cu_.stream_query(dev_.stream);
      if (q == kCudaSuccess) return;
      if (q != kCudaNotReady) fail(std::string(op) + ": " + cuda_error(cu_, q));
      ncclResult_t async = kNcclSuccess;
      if (g_nccl.comm_get_async_error(comm_, &async) == kNcclSuccess && async != kNcclSuccess && async != kNcclInProgress)
        fail(std::string(op) + ": " + nccl_error(async));
      if (std::chrono::steady_clock::now() >= deadline) {
        abort(std::string(op) + " timed out");
        throw CollectiveTimeout(std::string(op) + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " did not complete within " +
                                    std::to_string(timeout_ms_) + " ms: another rank stopped, died or is stuck",
                                rank_, op, timeout_ms_);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }

 private:
  // Every operation starts here: on a usable collective, with the device's context current on
  // this thread (operations run on whichever worker thread the addon gives them).
  void begin(const char* op) {
    if (broken_) throw CollectiveError(std::string(op) + " on rank " + std::to_string(rank_) + ": the collective is broken by an earlier failure (" + broken_reason_ + ")", rank_);
    cuda(cu_.ctx_set_current(dev_.context), op);
  }

  // The staging buffer, at least `bytes` long (grown by reallocation; the stream is idle here).
  CUdeviceptr staging(size_t bytes, const char* op) {
    if (dev_.stage_bytes >= bytes) return dev_.stage;
    if (dev_.stage) cuda(cu_.mem_free(dev_.stage), op);
    dev_.stage = 0;
    dev_.stage_bytes = 0;
    CUdeviceptr p = 0;
    if (const CUresult r = cu_.mem_alloc(&p, bytes); r != kCudaSuccess)
      throw CollectiveError(std::string(op) + ": cannot allocate " + std::to_string(bytes) + " bytes of device memory for the staging buffer: " + cuda_error(cu_, r), rank_);
    dev_.stage = p;
    dev_.stage_bytes = bytes;
    return p;
  }

  void cuda(CUresult r, const std::string& what) {
    if (r != kCudaSuccess) fail(what + ": " + cuda_error(cu_, r));
  }
  void nccl(ncclResult_t r, const char* op) {
    if (r != kNcclSuccess && r != kNcclInProgress) fail(std::string(op) + ": " + nccl_error(r));
  }

  [[noreturn]] void fail(const std::string& why) {
    abort(why);
    throw CollectiveError(why + " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ")", rank_);
  }

  void abort(const std::string& reason) {
    if (broken_) return;
    broken_ = true;
    broken_reason_ = reason;
    g_nccl.comm_abort(comm_);  // ends what is in flight; the peers' operations then fail or time out
  }

  const int rank_, size_;
  ncclComm_t comm_;
  Device dev_;
  const CudaApi& cu_;
  std::mutex mutex_;
  bool broken_ = false;
  std::string broken_reason_;
};

// ncclCommInitRank and the first all-reduce on a thread of their own (both block inside NCCL until
// every rank arrives); shared with that thread, which aborts the communicator itself if the opener
// gave up waiting.
struct InitState {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false, abandoned = false;
  ncclResult_t result = kNcclSuccess;
  std::string failed_call;
  ncclComm_t comm = nullptr;
};

void init_communicator(std::shared_ptr<InitState> s, const CudaApi& cu, Device dev, ncclUniqueId id, int world_size, int rank) {
  cu.ctx_set_current(dev.context);
  ncclComm_t comm = nullptr;
  ncclResult_t r = g_nccl.comm_init_rank(&comm, world_size, id, rank);
  std::string call = "ncclCommInitRank";
  if (r == kNcclSuccess) {
    void* p = reinterpret_cast<void*>(dev.stage);
    r = g_nccl.all_reduce(p, p, 1, kNcclFloat32, kNcclSum, comm, dev.stream);
    call = "the first all-reduce";
  }
  std::lock_guard<std::mutex> lock(s->mutex);
  s->done = true;
  s->result = r;
  s->failed_call = call;
  s->comm = comm;
  if (s->abandoned && comm) g_nccl.comm_abort(comm);
  s->done_cv.notify_all();
}

}  // namespace

const LibraryStatus& nccl_library() {
  std::call_once(g_once, do_load);
  return g_status;
}


std::string nccl_unique_id() {
  require_library("nccl");
  ncclUniqueId id{};
  if (ncclResult_t r = g_nccl.get_unique_id(&id); r != kNcclSuccess)
    throw CollectiveUnavailable("nccl", "init-failed", "ncclGetUniqueId failed: " + nccl_error(r));
  return std::string(id.internal, kUniqueIdBytes);
}

std::unique_ptr<Collective> open_nccl(const OpenOptions& o) {
  require_library("nccl");
  if (o.world_size < 1) throw std::invalid_argument("the NCCL collective's world size must be ≥ 1, got " + std::to_string(o.world_size));
  if (o.rank < 0 || o.rank >= o.world_size) throw std::out_of_range("rank " + std::to_string(o.rank) + " is not a rank of a " + std::to_string(o.world_size) + "-rank world");
  if (o.unique_id.size() != kUniqueIdBytes)
    throw std::invalid_argument("the NCCL unique id is " + std::to_string(kUniqueIdBytes) + " bytes (rank 0's, from the rendezvous), got " + std::to_string(o.unique_id.size()));
  const CudaApi& cu = cuda_driver();
  Device dev;
  auto unavailable = [&](const std::string& what, CUresult r) { return CollectiveUnavailable("nccl", "no-device", what + ": " + cuda_error(cu, r)); };
  if (CUresult r = cu.init(0); r != kCudaSuccess) throw unavailable("cuInit", r);
  if (CUresult r = cu.device_get(&dev.device, 0); r != kCudaSuccess) throw unavailable("no CUDA device 0 (CUDA_VISIBLE_DEVICES=" + std::string(std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "") + ")", r);
  if (CUresult r = cu.primary_ctx_retain(&dev.context, dev.device); r != kCudaSuccess) throw unavailable("cuDevicePrimaryCtxRetain", r);
  auto release = [&] { cu.primary_ctx_release(dev.device); };
  if (CUresult r = cu.ctx_set_current(dev.context); r != kCudaSuccess) {
    release();
    throw unavailable("cuCtxSetCurrent", r);
  }
  if (CUresult r = cu.stream_create(&dev.stream, kStreamNonBlocking); r != kCudaSuccess) {
    release();
    throw unavailable("cuStreamCreate", r);
  }
  if (CUresult r = cu.mem_alloc(&dev.stage, sizeof(float)); r != kCudaSuccess) {
    cu.stream_destroy(dev.stream);
    release();
    throw unavailable("cuMemAlloc", r);
  }
  dev.stage_bytes = sizeof(float);

  ncclUniqueId id{};
  std::memcpy(id.internal, o.unique_id.data(), kUniqueIdBytes);
  auto state = std::make_shared<InitState>();
  std::thread(init_communicator, state, std::cref(cu), dev, id, o.world_size, o.rank).detach();
  {
    std::unique_lock<std::mutex> lock(state->mutex);
    if (!state->done_cv.wait_for(lock, std::chrono::milliseconds(o.timeout_ms), [&] { return state->done; })) {
      state->abandoned = true;  // the thread aborts the communicator if NCCL ever returns; its stream and buffer stay
      throw CollectiveTimeout("NCCL init on rank " + std::to_string(o.rank) + " of " + std::to_string(o.world_size) + " did not complete within " +
                                  std::to_string(o.timeout_ms) + " ms: another rank did not join",
                              o.rank, "init", o.timeout_ms);
    }
  }
  if (state->result != kNcclSuccess && state->result != kNcclInProgress) {
    if (state->comm) g_nccl.comm_abort(state->comm);
    cu.mem_free(dev.stage);  // nothing of this rank's is in flight
    cu.stream_destroy(dev.stream);
    release();
    throw CollectiveUnavailable("nccl", "init-failed", state->failed_call + " failed on rank " + std::to_string(o.rank) + ": " + nccl_error(state->result));
  }
  auto c = std::make_unique<NcclCollective>(o.timeout_ms, o.rank, o.world_size, state->comm, dev);
  c->wait("init");  // the first all-reduce: every rank joined
  return c;
}

}  // namespace ad::collective
