// CUDA graphs for decode steps: see graphs.h.
#include "cuda/graphs.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

namespace ad::cuda {

// Read at every step, so a process (a benchmark) can compare the two.
bool cuda_graphs_allowed() {
  const char* env = std::getenv("AUTODIDACT_CUDA_GRAPHS");
  return !(env && std::strcmp(env, "0") == 0);
}

DecodeGraphs::~DecodeGraphs() { clear(); }

void DecodeGraphs::clear() {
  for (auto& [key, exec] : execs_) cudaGraphExecDestroy(exec);
  execs_.clear();
  seen_.clear();
}

void DecodeGraphs::run(const DecodeGraphKey& key, cudaStream_t stream, const std::function<void()>& kernels,
                       const std::function<DecodeGraphKey()>& current) {
  if (off_) {
    ++stats_.eager;
    kernels();
    return;
  }
  if (auto it = execs_.find(key); it != execs_.end()) {
    const cudaError_t err = cudaGraphLaunch(it->second, stream);
    if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA graph launch failed: ") + cudaGetErrorString(err));
    ++stats_.replays;
    return;
  }
  if (seen_.size() >= kMaxGraphs) clear();
  if (seen_[key]++ == 0) {  // first sighting: eager, so every buffer it needs is sized
    ++stats_.eager;
    kernels();
    return;
  }
  capture(key, stream, kernels, current);
}

void DecodeGraphs::capture(const DecodeGraphKey& key, cudaStream_t stream, const std::function<void()>& kernels,
                           const std::function<DecodeGraphKey()>& current) {
  auto give_up = [&](const char* why, cudaError_t err) {
    cudaGetLastError();  // capture errors are not sticky: clear them before running eagerly
    off_ = true;
    stats_.failed = true;
    std::fprintf(stderr, "autodidact: CUDA graphs off for this model (%s: %s); decode steps run kernel by kernel\n", why,
                 cudaGetErrorString(err));
  };
  cudaError_t err = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    give_up("begin capture", err);
    ++stats_.eager;
    kernels();
    return;
  }
  bool threw = false;
  try {
    kernels();  // recorded, not run
  } catch (...) {
    threw = true;
  }
  cudaGraph_t graph = nullptr;
  err = cudaStreamEndCapture(stream, &graph);
  const bool moved = !(current() == key);  // a buffer moved while capturing
  cudaGraphExec_t exec = nullptr;
  if (!threw && err == cudaSuccess && graph && !moved) err = cudaGraphInstantiate(&exec, graph, 0);
  if (graph) cudaGraphDestroy(graph);
  if (threw || err != cudaSuccess || !exec) {
    if (exec) cudaGraphExecDestroy(exec);
    if (threw || err != cudaSuccess) give_up(threw ? "a launch failed while capturing" : "capture", err);
    ++stats_.eager;
    kernels();  // nothing ran while capturing
    return;
  }
  if (moved) {
    cudaGraphExecDestroy(exec);
    ++stats_.eager;
    kernels();
    return;
  }
  execs_.emplace(key, exec);
  ++stats_.captures;
  err = cudaGraphLaunch(exec, stream);
  if (err != cudaSuccess) throw std::runtime_error(std::string("CUDA graph launch failed: ") + cudaGetErrorString(err));
}

}  // namespace ad::cuda
