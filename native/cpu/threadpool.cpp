#include "cpu/threadpool.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ad::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// AUTODIDACT_SPIN_US when it is a whole number of microseconds in [0, 100000], else kSpinMicros.
int spin_micros_from_env() {
  const char* v = std::getenv("AUTODIDACT_SPIN_US");
  if (!v || !*v) return kSpinMicros;
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  return *end == '\0' && us >= 0 && us <= 100000 ? static_cast<int>(us) : kSpinMicros;
}

// Spins until done() or `micros` have passed; true when done() held.
template <class Done>
bool spin_until(int micros, const Done& done) {
  if (micros <= 0) return done();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(micros);
  for (;;) {
    for (int i = 0; i < 16; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    std::this_thread::yield();  // a thread that is ready to run here (another engine's, another process's) goes first
    if (std::chrono::steady_clock::now() >= deadline) return done();
  }
}

}  // namespace

int hardware_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : static_cast<int>(n);
}

ThreadPool::ThreadPool(int threads) : nthreads_(threads), spin_micros_(spin_micros_from_env()) {
  if (threads < 1 || threads > kMaxThreads)
    throw std::out_of_range("a thread pool needs between 1 and " + std::to_string(kMaxThreads) + " threads, got " + std::to_string(threads));
  try {
    for (int i = 1; i < nthreads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
  } catch (...) {
    stop_workers();  // a joinable std::thread left behind would terminate the process
    throw;
  }
}

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

ThreadPool::~ThreadPool() { stop_workers(); }

// A sleeper announces itself (sleeping_*) before it checks, under the mutex, for what it waits
// on; a waker publishes first, then looks for sleepers and notifies under the mutex. Both sides
// are sequentially consistent, so either the sleeper sees the news or the waker sees the sleeper.
void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    const auto news = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(spin_micros_, news)) {
      std::unique_lock<std::mutex> lock(mutex_);
      sleeping_workers_.fetch_add(1);
      wake_.wait(lock, news);
      sleeping_workers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load();
    (*job_.load())(index);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::wait_for_workers() {
  const auto finished = [&] { return pending_.load() == 0; };
  if (spin_until(spin_micros_, finished)) return;
  std::unique_lock<std::mutex> lock(mutex_);
  caller_sleeping_.store(true);
  done_.wait(lock, finished);
  caller_sleeping_.store(false);
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  std::lock_guard<std::mutex> serial(serialize_);
  if (nthreads_ == 1) {
    fn(0);
    return;
  }
  job_.store(&fn);
  pending_.store(nthreads_ - 1);
  generation_.fetch_add(1);
  if (sleeping_workers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    wake_.notify_all();
  }
  fn(0);
  wait_for_workers();
  job_.store(nullptr);
}

void ThreadPool::parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int64_t chunks = std::min<int64_t>(nthreads_, (n + grain - 1) / grain);
  if (chunks <= 1) {
    fn(0, n, 0);
    return;
  }
  run_on_all([&](int worker) {
    if (worker >= chunks) return;
    int64_t begin = n * worker / chunks;
    int64_t end = n * (worker + 1) / chunks;
    if (begin < end) fn(begin, end, worker);
  });
}

}  // namespace ad::cpu
