// A persistent pool of worker threads for the CPU backend's parallel loops. One pool per
// engine; the caller's thread takes part in every loop, so `threads` = 1 runs inline.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ad::cpu {

// The most threads one pool may have (beyond the machine's cores they only cost memory).
constexpr int kMaxThreads = 256;

class ThreadPool {
 public:
  // Throws std::out_of_range outside [1, kMaxThreads] and std::system_error when the system
  // cannot start the threads (those it started are joined first).
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return nthreads_; }

  // Calls fn(begin, end, worker) over [0, n) split into contiguous chunks of at least `grain`.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

  // Calls fn(worker) once on every worker (worker in [0, size())).
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker_loop(int index);
  void stop_workers();

  int nthreads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::mutex serialize_;  // one parallel region at a time per pool
};

int hardware_threads();

}  // namespace ad::cpu
