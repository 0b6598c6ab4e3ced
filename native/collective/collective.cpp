// What every implementation shares: choosing one by name, the one-process collective, and the
// all-gather of byte strings of any length.
#include "collective/collective.h"

#include <algorithm>
#include <cstring>

namespace ad::collective {
namespace {

// World size 1: every rank's data is this rank's, so each operation leaves its buffer as it is.
class SingleCollective : public Collective {
 public:
  explicit SingleCollective(int64_t timeout_ms) : Collective(timeout_ms) {}
  const char* name() const override { return "single"; }
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  void all_reduce(float*, int64_t, ReduceOp) override {}
  void broadcast(void*, int64_t, int root) override {
    if (root != 0) throw std::out_of_range("broadcast root " + std::to_string(root) + " is not a rank of a 1-rank world");
  }
  void all_gather(const void* in, int64_t bytes, void* out) override {
    if (bytes > 0 && in != out) std::memmove(out, in, static_cast<size_t>(bytes));
  }
  void barrier() override {}
};

}  // namespace

std::unique_ptr<Collective> open_single(int64_t timeout_ms) { return std::make_unique<SingleCollective>(timeout_ms); }

std::unique_ptr<Collective> open(const OpenOptions& o) {
  if (!(o.timeout_ms > 0)) throw std::invalid_argument("a collective's timeout must be > 0 ms, got " + std::to_string(o.timeout_ms));
  if (o.backend == "single") return open_single(o.timeout_ms);
  if (o.backend == "mpi") return open_mpi(o.timeout_ms);
  if (o.backend == "nccl") return open_nccl(o);
  throw std::invalid_argument("unknown collective backend '" + o.backend + "' (mpi | nccl | single)");
}

void require_library(const std::string& backend) {
  if (backend == "single") return;
  const LibraryStatus* lib = backend == "mpi" ? &mpi_library() : backend == "nccl" ? &nccl_library() : nullptr;
  if (!lib) throw std::invalid_argument("unknown collective backend '" + backend + "' (mpi | nccl | single)");
  if (!lib->found) throw CollectiveUnavailable(backend, "no-library", lib->reason);
}

std::string not_found(const std::string& what, const std::vector<std::string>& tried) {
  std::string out = what;
  for (size_t i = 0; i < tried.size(); ++i) out += (i ? "; " : "; tried ") + tried[i];
  return out;
}

std::vector<std::string> all_gather_bytes(Collective& c, const std::string& mine) {
  const int n = c.world_size();
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  const int64_t length = static_cast<int64_t>(mine.size());
  c.all_gather(&length, sizeof(int64_t), lengths.data());
  int64_t longest = 0;
  for (int64_t l : lengths) {
    if (l < 0) throw CollectiveError("all-gather: a rank sent a negative length", c.rank());
    longest = std::max(longest, l);
  }
  // Padded to the longest, so every rank sends the same count.
  std::string padded(static_cast<size_t>(longest), '\0');
  std::memcpy(padded.data(), mine.data(), mine.size());
  std::string all(static_cast<size_t>(longest) * static_cast<size_t>(n), '\0');
  c.all_gather(padded.data(), longest, all.data());
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) out.emplace_back(all.data() + static_cast<size_t>(r) * static_cast<size_t>(longest), static_cast<size_t>(lengths[r]));
  return out;
}

}  // namespace ad::collective
