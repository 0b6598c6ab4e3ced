// The CPU collective on OpenMPI, opened at run time (dlopen, never linked): the addon builds where
// no MPI is installed and loads where none is. The slice of mpi.h we call is declared here
// (OpenMPI's ABI, stable across 4.x: handles are pointers to the library's predefined objects,
// found by name with dlsym). libmpi is opened RTLD_GLOBAL: OpenMPI's own plugins (mca_*) resolve
// its symbols from the global scope.
//
// Search order: $AUTODIDACT_MPI (a library path), then libmpi.so.40 and libmpi.so through the
// dynamic loader's path, then /usr/lib/<arch>-linux-gnu/openmpi/lib.
//
// Every operation is non-blocking (MPI_I*) and polled with MPI_Test until it completes or its
// timeout passes: MPI's blocking collectives cannot time out. The data goes through buffers this
// file owns, so a timed-out operation still in flight inside MPI writes into memory that stays
// valid (kept until the process exits), never into a caller's freed buffer.
#include <dlfcn.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "collective/collective.h"

namespace ad::collective {
namespace {

// ---- the slice of OpenMPI's mpi.h we use
typedef void* MPI_Comm;
typedef void* MPI_Datatype;
typedef void* MPI_Op;
typedef void* MPI_Errhandler;
typedef void* MPI_Request;
constexpr int kSuccess = 0;                // MPI_SUCCESS
constexpr int kThreadSerialized = 2;       // MPI_THREAD_SERIALIZED
constexpr int kMaxErrorString = 256;       // MPI_MAX_ERROR_STRING
constexpr int kMaxLibraryVersion = 256;    // MPI_MAX_LIBRARY_VERSION_STRING
void* const kInPlace = reinterpret_cast<void*>(1);  // MPI_IN_PLACE

struct Api {
  int (*initialized)(int*) = nullptr;
  int (*init_thread)(int*, char***, int, int*) = nullptr;
  int (*finalized)(int*) = nullptr;
  int (*finalize)() = nullptr;
  int (*comm_rank)(MPI_Comm, int*) = nullptr;
  int (*comm_size)(MPI_Comm, int*) = nullptr;
  int (*comm_set_errhandler)(MPI_Comm, MPI_Errhandler) = nullptr;
  int (*error_string)(int, char*, int*) = nullptr;
  int (*get_library_version)(char*, int*) = nullptr;
  int (*iallreduce)(const void*, void*, int, MPI_Datatype, MPI_Op, MPI_Comm, MPI_Request*) = nullptr;
  int (*ibcast)(void*, int, MPI_Datatype, int, MPI_Comm, MPI_Request*) = nullptr;
  int (*iallgather)(const void*, int, MPI_Datatype, void*, int, MPI_Datatype, MPI_Comm, MPI_Request*) = nullptr;
  int (*ibarrier)(MPI_Comm, MPI_Request*) = nullptr;
  int (*test)(MPI_Request*, int*, void*) = nullptr;
  // predefined handles (addresses of the library's objects)
  MPI_Comm comm_world = nullptr;
  MPI_Datatype f32 = nullptr, byte = nullptr;
  MPI_Op sum = nullptr;
  MPI_Errhandler errors_return = nullptr;
};

LibraryStatus g_status;
Api g_api;
std::once_flag g_once;

std::vector<std::string> candidates() {
  std::vector<std::string> c;
  if (const char* p = std::getenv("AUTODIDACT_MPI"); p && *p) {
    c.emplace_back(p);
    return c;  // pointed at one: that one or nothing
  }
  c.emplace_back("libmpi.so.40");
  c.emplace_back("libmpi.so");
#if defined(__aarch64__)
  c.emplace_back("/usr/lib/aarch64-linux-gnu/openmpi/lib/libmpi.so.40");
#else
  c.emplace_back("/usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so.40");
#endif
  return c;
}

template <typename F>
bool bind(void* h, const char* name, F* fn) {
  *fn = reinterpret_cast<F>(dlsym(h, name));
  return *fn != nullptr;
}

void do_load() {
  std::vector<std::string> tried;
  for (const std::string& path : candidates()) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
      const char* e = dlerror();
      tried.push_back(path + " (" + (e ? e : "?") + ")");
      continue;
    }
    Api a;
    bool ok = bind(h, "MPI_Initialized", &a.initialized) && bind(h, "MPI_Init_thread", &a.init_thread) &&
              bind(h, "MPI_Finalized", &a.finalized) && bind(h, "MPI_Finalize", &a.finalize) &&
              bind(h, "MPI_Comm_rank", &a.comm_rank) && bind(h, "MPI_Comm_size", &a.comm_size) &&
              bind(h, "MPI_Comm_set_errhandler", &a.comm_set_errhandler) && bind(h, "MPI_Error_string", &a.error_string) &&
              bind(h, "MPI_Get_library_version", &a.get_library_version) && bind(h, "MPI_Iallreduce", &a.iallreduce) &&
              bind(h, "MPI_Ibcast", &a.ibcast) && bind(h, "MPI_Iallgather", &a.iallgather) &&
              bind(h, "MPI_Ibarrier", &a.ibarrier) && bind(h, "MPI_Test", &a.test);
    a.comm_world = dlsym(h, "ompi_mpi_comm_world");
    a.f32 = dlsym(h, "ompi_mpi_float");
    a.byte = dlsym(h, "ompi_mpi_byte");
    a.sum = dlsym(h, "ompi_mpi_op_sum");
    a.errors_return = dlsym(h, "ompi_mpi_errors_return");
    ok = ok && a.comm_world && a.f32 && a.byte && a.sum && a.errors_return;
    if (!ok) {
      tried.push_back(path + " (not OpenMPI 4: an MPI function or ompi_mpi_* handle is missing)");
      dlclose(h);
      continue;
    }
    g_api = a;
    g_status.found = true;
    g_status.path = path;
    char version[kMaxLibraryVersion] = {0};
    int len = 0;
    if (a.get_library_version(version, &len) == kSuccess) {
      g_status.version.assign(version, static_cast<size_t>(std::max(0, std::min(len, kMaxLibraryVersion))));
      if (size_t nl = g_status.version.find_first_of(",\n"); nl != std::string::npos) g_status.version.resize(nl);
    }
    return;
  }
  g_status.reason = not_found("no OpenMPI library found (install openmpi-bin libopenmpi3, or set AUTODIDACT_MPI to a libmpi.so.40)", tried);
}

std::string mpi_error(int code) {
  char text[kMaxErrorString] = {0};
  int len = 0;
  if (g_api.error_string && g_api.error_string(code, text, &len) == kSuccess) return std::string(text, static_cast<size_t>(std::max(0, len)));
  return "MPI error " + std::to_string(code);
}

// Elements per MPI call: counts are ints.
constexpr int64_t kChunk = int64_t(1) << 30;

class MpiCollective : public Collective {
 public:
  MpiCollective(int64_t timeout_ms, int rank, int size) : Collective(timeout_ms), rank_(rank), size_(size) {}
  ~MpiCollective() override { finalize(); }

  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }

  void all_reduce(float* data, int64_t n, ReduceOp op) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<float>& stage = float_stage(n, "all-reduce");
    if (n) std::memcpy(stage.data(), data, static_cast<size_t>(n) * sizeof(float));
    for (int64_t i = 0; i < n; i += kChunk) {
      MPI_Request req = nullptr;
      const int count = static_cast<int>(std::min(kChunk, n - i));
      check(g_api.iallreduce(kInPlace, stage.data() + i, count, g_api.f32, g_api.sum, g_api.comm_world, &req), "all-reduce");
      wait(&req, "all-reduce");
    }
    const float scale = op == ReduceOp::kAverage ? 1.0f / static_cast<float>(size_) : 1.0f;
    for (int64_t i = 0; i < n; ++i) data[i] = stage[static_cast<size_t>(i)] * scale;
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    if (root < 0 || root >= size_) throw std::out_of_range("broadcast root " + std::to_string(root) + " is not a rank of this " + std::to_string(size_) + "-rank world");
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<char>& stage = byte_stage(bytes, "broadcast");
    if (bytes) std::memcpy(stage.data(), data, static_cast<size_t>(bytes));
    for (int64_t i = 0; i < bytes; i += kChunk) {
      MPI_Request req = nullptr;
      check(g_api.ibcast(stage.data() + i, static_cast<int>(std::min(kChunk, bytes - i)), g_api.byte, root, g_api.comm_world, &req), "broadcast");
      wait(&req, "broadcast");
    }
    if (bytes) std::memcpy(data, stage.data(), static_cast<size_t>(bytes));
  }

  void all_gather(const void* in, int64_t bytes, void* out) override {
    if (bytes > INT_MAX) throw std::length_error("all-gather of " + std::to_string(bytes) + " bytes per rank: at most " + std::to_string(INT_MAX));
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<char>& stage = byte_stage(bytes * (size_ + 1), "all-gather");
    if (bytes) std::memcpy(stage.data(), in, static_cast<size_t>(bytes));
    MPI_Request req = nullptr;
    check(g_api.iallgather(stage.data(), static_cast<int>(bytes), g_api.byte, stage.data() + bytes, static_cast<int>(bytes), g_api.byte, g_api.comm_world, &req), "all-gather");
    wait(&req, "all-gather");
    if (bytes) std::memcpy(out, stage.data() + bytes, static_cast<size_t>(bytes) * static_cast<size_t>(size_));
  }

  void barrier() override {
    std::lock_guard<std::mutex> lock(mutex_);
    check_usable("barrier");
    MPI_Request req = nullptr;
    check(g_api.ibarrier(g_api.comm_world, &req), "barrier");
    wait(&req, "barrier");
  }

  void finalize() {
    std::lock_guard<std::mutex> lock(mutex_);
    // After a timeout a peer is gone: MPI_Finalize would wait for it. The process exits without it.
    if (finalized_ || broken_) return;
    finalized_ = true;
    int done = 0;
    if (g_api.finalized(&done) == kSuccess && !done) g_api.finalize();
  }

 private:
  void check_usable(const char* op) const {
    if (broken_) throw CollectiveError(std::string(op) + " on rank " + std::to_string(rank_) + ": the collective is broken by an earlier failure (" + broken_reason_ + ")", rank_);
    if (finalized_) throw CollectiveError(std::string(op) + " on rank " + std::to_string(rank_) + ": the collective was closed", rank_);
  }

  // A buffer of `n` elements owned by this collective (a fresh one after a timeout abandoned the last).
  template <typename T>
  static std::vector<T>& grown(std::vector<T>& v, int64_t n) {
    if (n < 0) throw std::invalid_argument("a collective's element count must be ≥ 0");
    if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
    return v;
  }
  std::vector<float>& float_stage(int64_t n, const char* op) {
    check_usable(op);
    return grown(floats_, n);
  }
  std::vector<char>& byte_stage(int64_t n, const char* op) {
    check_usable(op);
    return grown(bytes_, n);
  }

  void check(int code, const char* op) {
    if (code == kSuccess) return;
    broken_ = true;
    broken_reason_ = std::string(op) + ": " + mpi_error(code);
    throw CollectiveError(std::string(op) + " failed on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + mpi_error(code), rank_);
  }

  // Polls the request until it completes; past the deadline the collective is broken and the
  // staging buffers the request may still write are kept alive (moved aside, never freed).
  void wait(MPI_Request* req, const char* op) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::milliseconds(timeout_ms_);
    auto pause = std::chrono::microseconds(1);
    for (;;) {
      int flag = 0;
      check(g_api.test(req, &flag, nullptr), op);
      if (flag) return;
      if (std::chrono::steady_clock::now() >= deadline) {
        broken_ = true;
        broken_reason_ = std::string(op) + " timed out";
        abandoned_.emplace_back(std::move(floats_), std::move(bytes_));
        floats_ = {};
        bytes_ = {};
        throw CollectiveTimeout(std::string(op) + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " did not complete within " +
                                    std::to_string(timeout_ms_) + " ms: another rank stopped, died or is stuck",
                                rank_, op, timeout_ms_);
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }

  const int rank_, size_;
  std::mutex mutex_;
  std::vector<float> floats_;
  std::vector<char> bytes_;
  std::vector<std::pair<std::vector<float>, std::vector<char>>> abandoned_;
  bool broken_ = false, finalized_ = false;
  std::string broken_reason_;
};

}  // namespace

const LibraryStatus& mpi_library() {
  std::call_once(g_once, do_load);
  return g_status;
}

std::unique_ptr<Collective> open_mpi(int64_t timeout_ms) {
  const LibraryStatus& lib = mpi_library();
  if (!lib.found) throw CollectiveUnavailable("mpi", "no-library", lib.reason);
  // Outside mpirun, MPI_Init would start a singleton and its own daemon: refuse instead.
  if (!std::getenv("OMPI_COMM_WORLD_SIZE"))
    throw CollectiveUnavailable("mpi", "not-launched", "the MPI collective runs under mpirun (autodidact evolve --ranks N starts it); OMPI_COMM_WORLD_SIZE is not set");
  static std::mutex init_mutex;
  std::lock_guard<std::mutex> lock(init_mutex);
  int initialized = 0, finalized = 0;
  g_api.initialized(&initialized);
  g_api.finalized(&finalized);
  if (finalized) throw CollectiveUnavailable("mpi", "finalized", "MPI was finalized in this process: it cannot be opened again");
  if (initialized) throw CollectiveUnavailable("mpi", "already-open", "MPI is already open in this process: open the collective once and share it");
  int provided = 0;
  if (int rc = g_api.init_thread(nullptr, nullptr, kThreadSerialized, &provided); rc != kSuccess)
    throw CollectiveUnavailable("mpi", "init-failed", "MPI_Init_thread failed: " + mpi_error(rc));
  if (provided < kThreadSerialized) throw CollectiveUnavailable("mpi", "init-failed", "this MPI does not support MPI_THREAD_SERIALIZED (got level " + std::to_string(provided) + ")");
  g_api.comm_set_errhandler(g_api.comm_world, g_api.errors_return);
  int rank = 0, size = 0;
  g_api.comm_rank(g_api.comm_world, &rank);
  g_api.comm_size(g_api.comm_world, &size);
  return std::make_unique<MpiCollective>(timeout_ms, rank, size);
}

}  // namespace ad::collective
