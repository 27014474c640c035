#include "cpu_threads.h"

#include <chrono>

#include "ax/common/check.h"

namespace ax::train::cpu {
namespace {

// The pool thread index of the current thread while it runs a task, -1 outside tasks.
thread_local int tls_task_thread = -1;

constexpr auto kSpinTime = std::chrono::microseconds(50);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Polls done() for up to kSpinTime, yielding the core now and then; false on timeout.
template <typename Pred>
bool spin_until(Pred done) {
  auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (i % 64 == 0) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    } else {
      cpu_relax();
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  AX_CHECK_GE(threads, 1);
  workers_.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run_impl(int64_t num_tasks, TaskFn fn, void* ctx) {
  if (num_tasks <= 0) return;
  if (tls_task_thread >= 0 || threads_ == 1 || num_tasks == 1) {
    int thread = tls_task_thread >= 0 ? tls_task_thread : 0;
    for (int64_t t = 0; t < num_tasks; ++t) fn(ctx, t, thread);
    return;
  }
  std::lock_guard<std::mutex> run_lock(run_mu_);
  fn_ = fn;
  ctx_ = ctx;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  busy_workers_.store(threads_ - 1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);  // a worker about to sleep sees it or gets notified
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.notify_all();
  work(0);
  auto idle = [this] { return busy_workers_.load(std::memory_order_acquire) == 0; };
  if (!spin_until(idle)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, idle);
  }
}

void ThreadPool::work(int thread) {
  tls_task_thread = thread;
  for (int64_t t = next_task_.fetch_add(1); t < num_tasks_; t = next_task_.fetch_add(1)) {
    fn_(ctx_, t, thread);
  }
  tls_task_thread = -1;
}

void ThreadPool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, ready);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    work(thread);
    if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);  // the caller checks idle() under mu_ before waiting
      done_cv_.notify_one();
    }
  }
}

}  // namespace ax::train::cpu
