// A persistent pool of worker threads for the CPU backend's parallel loops. One pool per
// engine; the caller's thread takes part in every loop, so `threads` = 1 runs inline.
//
// Between loops a worker spins for a short while (kSpinMicros, AUTODIDACT_SPIN_US) before it
// sleeps on a condition variable, and so does the caller waiting for the workers: a decode step
// runs hundreds of short parallel loops back to back, and waking a sleeping thread costs tens to
// hundreds of microseconds (measured on a 2-core VM: a 96-row GEMM took 0.01 ms on one thread and
// 0.11 ms on two with sleeping workers). Spinning only between loops that follow closely keeps an
// idle engine idle, and a spinning thread yields its core to any thread that is ready to run
// there (another engine's pool in the same process, another process): without that, two test
// files of several engines each on 2 cores took 40 s instead of 17.
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

// How long a thread spins for the next loop (or for the workers to finish) before it sleeps,
// unless AUTODIDACT_SPIN_US says otherwise (0: never spin).
constexpr int kSpinMicros = 200;

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
  void wait_for_workers();

  int nthreads_;
  int spin_micros_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;  // guards the sleeping; the atomics below carry the work
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleeping_workers_{0};
  std::atomic<bool> caller_sleeping_{false};
  std::atomic<bool> stop_{false};
  std::mutex serialize_;  // one parallel region at a time per pool
};

int hardware_threads();

}  // namespace ad::cpu
