// CUDA graphs for decode steps (issue 20): the kernels of a decode forward (embedding, rotation
// table, every layer, final norm) captured once per launch configuration and replayed, so a step
// costs one graph launch instead of hundreds of kernel launches. Before each replay the host has
// written the step's inputs (tokens, slots, positions, attention tiles) into the same device
// buffers the graph reads.
//
// A graph is keyed by everything the host decides about those launches: the rows, the attention
// plan's launch shape, the address of every buffer the kernels touch (weights, scratch, KV cache)
// and the generation of the GEMM's split-K workspace. Buffers only grow, so a buffer at a key's
// address is one sized for the key's rows; a replay launches exactly the kernels, with exactly the
// arguments, of the eager forward: the same bits. A configuration is captured the second time it
// is seen (its first, eager run sizes every buffer); a capture that fails turns graphs off for the
// model, and its steps run eagerly. AUTODIDACT_CUDA_GRAPHS=0 turns them off.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <vector>

namespace ad::cuda {

struct DecodeGraphKey {
  int64_t rows = 0, out_rows = 0;
  int capacity = 0;
  bool tensor_cores = false;
  int q_tiles = 0, tile_rows = 0, splits = 1, split_tiles = 0;
  uint64_t gemm_generation = 0;
  std::vector<const void*> buffers;

  bool operator<(const DecodeGraphKey& o) const {
    return std::tie(rows, out_rows, capacity, tensor_cores, q_tiles, tile_rows, splits, split_tiles, gemm_generation, buffers) <
           std::tie(o.rows, o.out_rows, o.capacity, o.tensor_cores, o.q_tiles, o.tile_rows, o.splits, o.split_tiles,
                    o.gemm_generation, o.buffers);
  }
  bool operator==(const DecodeGraphKey& o) const { return !(*this < o) && !(o < *this); }
};

struct DecodeGraphStats {
  int64_t captures = 0, replays = 0, eager = 0;
  bool failed = false;
};

// Whether AUTODIDACT_CUDA_GRAPHS allows graphs (read at every call).
bool cuda_graphs_allowed();

class DecodeGraphs {
 public:
  DecodeGraphs() = default;
  ~DecodeGraphs();
  DecodeGraphs(const DecodeGraphs&) = delete;
  DecodeGraphs& operator=(const DecodeGraphs&) = delete;

  // Runs `kernels` (launches on `stream` only: no allocation, copy or synchronization) for `key`:
  // replays its graph, captures one, or runs them eagerly. `current` recomputes the key after a
  // capture (a capture during which a buffer moved is thrown away).
  void run(const DecodeGraphKey& key, cudaStream_t stream, const std::function<void()>& kernels,
           const std::function<DecodeGraphKey()>& current);
  // Destroys every graph (the model's memory is about to change, or it goes).
  void clear();
  const DecodeGraphStats& stats() const { return stats_; }

 private:
  static constexpr size_t kMaxGraphs = 64;
  std::map<DecodeGraphKey, cudaGraphExec_t> execs_;
  std::map<DecodeGraphKey, int> seen_;
  DecodeGraphStats stats_;
  bool off_ = false;  // a capture failed
  void capture(const DecodeGraphKey& key, cudaStream_t stream, const std::function<void()>& kernels,
               const std::function<DecodeGraphKey()>& current);
};

}  // namespace ad::cuda
