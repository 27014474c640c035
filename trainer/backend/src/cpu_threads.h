// A small persistent thread pool for the CPU backend. The calling thread takes part as thread
// 0. Between jobs, workers spin briefly (yielding the core) and then sleep on a condition
// variable: ops follow each other within microseconds, a futex wake-up costs 20-50 µs on a busy
// VM, and a worker that sleeps cannot compete with the data loader or other processes. OpenBLAS
// runs single-threaded inside the pool's tasks, so no second pool spins beside this one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace ax::train::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads >= 1
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return threads_; }

  // Calls fn(task, thread) for every task in [0, num_tasks) and returns when all are done.
  // Tasks are handed out in order to whichever thread is free, so each task must write outputs
  // no other task writes: results then do not depend on the thread count. `thread` (in
  // [0, size())) indexes per-thread scratch. A call from inside a task runs inline.
  template <typename F>
  void run(int64_t num_tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_impl(
        num_tasks,
        [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }

  // Calls fn(begin, end) on contiguous ranges covering [0, n), each at least `grain` long
  // (except when n < grain). Up to four ranges per thread, so that a thread that starts late
  // (descheduled, or still waking up) leaves its share to the others.
  template <typename F>
  void parallel_for(int64_t n, int64_t grain, F&& fn) {
    if (n <= 0) return;
    int64_t chunks = n / (grain > 0 ? grain : 1);
    if (chunks > 4 * threads_) chunks = 4 * threads_;
    if (chunks < 1 || threads_ == 1) chunks = 1;
    run(chunks, [&](int64_t c, int) { fn(n * c / chunks, n * (c + 1) / chunks); });
  }

 private:
  using TaskFn = void (*)(void*, int64_t, int);
  void run_impl(int64_t num_tasks, TaskFn fn, void* ctx);
  void work(int thread);
  void worker_loop(int thread);

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mu_;  // one job at a time
  std::mutex mu_;      // for the condition variables; the state below is atomic
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  // A new job bumps the generation (release) after setting fn_, ctx_ and num_tasks_.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> busy_workers_{0};
  std::atomic<bool> stop_{false};
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  int64_t num_tasks_ = 0;
  std::atomic<int64_t> next_task_{0};
};

}  // namespace ax::train::cpu
