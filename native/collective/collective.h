// The one collective interface data-parallel training and rollouts are written against: this
// process's rank and the world size, all-reduce (sum / average) of f32 buffers, broadcast and
// all-gather of bytes, and a barrier, each bounded by a timeout. Implementations sit on existing
// collective engines opened at run time with dlopen, never linked (as the cuBLAS loader,
// native/cuda/cublaslt_loader.cpp):
//   - "mpi"    the CPU path: OpenMPI's libmpi.so.40 (mpi_collective.cpp), started by mpirun;
//   - "nccl"   the GPU path: libnccl.so.2 (nccl_collective.cpp), rank 0's unique id handed to the
//              others over a TCP rendezvous (src/parallel/rendezvous.ts);
//   - "single" one process, world size 1: every operation is the identity, so a 1-rank run goes
//              through the very same code above this interface.
//
// Buffers are host memory on every implementation ("nccl" stages them through device memory of its
// own). A collective that does not complete within its timeout throws
// CollectiveTimeout (ERR_AD_COLLECTIVE_TIMEOUT in JavaScript); the collective is then broken —
// its peers can no longer be trusted to be in step — and every later call throws CollectiveError
// at once. An implementation that cannot start (no library, no launcher) throws
// CollectiveUnavailable (ERR_AD_COLLECTIVE_UNAVAILABLE).
#pragma once
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace ad::collective {

enum class ReduceOp { kSum, kAverage };

// A collective operation failed (its engine's error, or an earlier timeout broke the collective).
class CollectiveError : public std::runtime_error {
 public:
  CollectiveError(const std::string& what, int rank) : std::runtime_error(what), rank(rank) {}
  const int rank;  // the rank that raised it (this process)
};

// A collective operation did not complete in time: a peer stopped, died or is stuck.
class CollectiveTimeout : public CollectiveError {
 public:
  CollectiveTimeout(const std::string& what, int rank, const std::string& operation, int64_t timeout_ms)
      : CollectiveError(what, rank), operation(operation), timeout_ms(timeout_ms) {}
  const std::string operation;
  const int64_t timeout_ms;
};

// An implementation cannot start here: `kind` says why ("no-library", "not-launched", …).
class CollectiveUnavailable : public std::runtime_error {
 public:
  CollectiveUnavailable(const std::string& backend, const std::string& kind, const std::string& what)
      : std::runtime_error(what), backend(backend), kind(kind) {}
  const std::string backend, kind;
};

class Collective {
 public:
  virtual ~Collective() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // The timeout of every operation, in milliseconds (> 0).
  int64_t timeout_ms() const { return timeout_ms_; }

  // data[0, n) ← the element-wise sum (or mean) of every rank's data[0, n), on every rank.
  virtual void all_reduce(float* data, int64_t n, ReduceOp op) = 0;
  // data[0, bytes) ← root's data[0, bytes) on every rank (`bytes` equal on every rank).
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // out[r·bytes, (r+1)·bytes) ← rank r's in[0, bytes), on every rank (`bytes` equal on every rank;
  // out holds world_size()·bytes).
  virtual void all_gather(const void* in, int64_t bytes, void* out) = 0;
  virtual void barrier() = 0;

 protected:
  explicit Collective(int64_t timeout_ms) : timeout_ms_(timeout_ms) {}
  int64_t timeout_ms_;
};

// Every rank's byte string, whatever its length (two all-gathers: the lengths, then the padded bytes).
std::vector<std::string> all_gather_bytes(Collective& c, const std::string& mine);

// Where an implementation's library was found, or why not (for `doctor`).
struct LibraryStatus {
  bool found = false;
  std::string path;    // the library opened
  std::string version; // what it says of itself
  std::string reason;  // why not, when !found
};

struct OpenOptions {
  std::string backend;     // "mpi" | "nccl" | "single"
  int64_t timeout_ms = 600000;
  // nccl: this process's rank, the world size, and rank 0's unique id (nccl_unique_id() on rank 0,
  // handed to the others by the rendezvous).
  int rank = 0, world_size = 1;
  std::string unique_id;
};

// For the library loaders: "no X found (…)" followed by each candidate tried and why it failed.
std::string not_found(const std::string& what, const std::vector<std::string>& tried);

// Opens the named implementation (throws CollectiveUnavailable, std::invalid_argument).
std::unique_ptr<Collective> open(const OpenOptions& options);

std::unique_ptr<Collective> open_single(int64_t timeout_ms);
std::unique_ptr<Collective> open_mpi(int64_t timeout_ms);
std::unique_ptr<Collective> open_nccl(const OpenOptions& options);

// Library probes: found or not, and why (they load the library once; nothing is initialized).
const LibraryStatus& mpi_library();
const LibraryStatus& nccl_library();
// Throws CollectiveUnavailable ("no-library") unless the backend's library was found.
void require_library(const std::string& backend);

// Rank 0's NCCL unique id (ncclGetUniqueId: 128 bytes, which also starts NCCL's bootstrap root in
// this process), for the other ranks' open_nccl.
std::string nccl_unique_id();

}  // namespace ad::collective
