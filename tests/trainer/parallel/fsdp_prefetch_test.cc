// FSDP prefetch (trainer/src/model/fsdp_prefetch.h) without a GPU.
//
// The NCCL hazard, simulated: each rank has one "stream" (a thread that runs what was enqueued,
// in order) and its communicators enqueue collectives there and return, like NCCL on the
// backend's stream; a collective finishes when every rank's stream has reached it. Two ranks
// prefetch with one communicator while the training thread reduce-scatters with another, and
// enqueueing takes a while on the host on one rank for one communicator and on the other rank
// for the other (NCCL sets up connections at a communicator's first use). Gathers issued from a
// second thread then land on the two streams in opposite orders and each stream waits for the
// other forever; issued by the training thread they land in program order on both.
#include "fsdp_prefetch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ax::train {
namespace {

using std::chrono::milliseconds;

// Where the ranks' streams meet: a collective is done once `world` streams have reached it.
class Fabric {
 public:
  explicit Fabric(int world) : world_(world) {}
  // False when the other ranks did not arrive within `timeout` (a deadlock, in this test).
  bool meet(const std::string& collective, milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    ++arrived_[collective];
    cv_.notify_all();
    return cv_.wait_for(lock, timeout, [&] { return arrived_[collective] == world_; });
  }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, int> arrived_;
};

// One rank's GPU stream: runs the enqueued collectives in order; stops at one that never meets
// its peers, as a GPU stream stays stuck in a kernel that waits for a peer.
class Stream {
 public:
  explicit Stream(Fabric* fabric) : fabric_(fabric), thread_([this] { loop(); }) {}
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void enqueue(const std::string& collective) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(collective);
    order_.push_back(collective);
    cv_.notify_all();
  }
  // True once everything enqueued has run; false when the stream is stuck or `timeout` passed.
  bool drain(milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return stuck_ || (queue_.empty() && !busy_); }) &&
           !stuck_;
  }
  std::vector<std::string> order() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return quit_ || (!queue_.empty() && !stuck_); });
      if (quit_) return;
      std::string next = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      const bool met = fabric_->meet(next, milliseconds(2000));
      lock.lock();
      busy_ = false;
      if (!met) stuck_ = true;
      cv_.notify_all();
    }
  }

  Fabric* fabric_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::vector<std::string> order_;
  bool busy_ = false, stuck_ = false, quit_ = false;
  std::thread thread_;  // last
};

// A communicator that enqueues on its rank's stream and returns, as NCCL does; enqueueing takes
// `host_delay` on the calling thread.
class StreamCommunicator : public comm::Communicator {
 public:
  StreamCommunicator(std::string tag, Stream* stream, milliseconds host_delay)
      : tag_(std::move(tag)), stream_(stream), host_delay_(host_delay) {}
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return tag_; }
  int64_t bytes_moved() const override { return 0; }
  bool enqueues() const override { return true; }
  void join() override { ++joins; }
  Status all_reduce(Tensor, comm::ReduceOp) override { return enqueue("all_reduce"); }
  Status reduce_scatter(Tensor, Tensor) override { return enqueue("reduce_scatter"); }
  Status all_gather(Tensor, Tensor) override { return enqueue("all_gather"); }
  Status broadcast(Tensor, int) override { return enqueue("broadcast"); }
  Status barrier() override { return enqueue("barrier"); }
  Status exchange(const std::vector<comm::P2POp>&) override { return enqueue("exchange"); }
  int joins = 0;

 private:
  Status enqueue(const std::string& op) {
    std::this_thread::sleep_for(host_delay_);
    stream_->enqueue(tag_ + " " + op + " #" + std::to_string(count_++));
    return Status::Ok();
  }
  const std::string tag_;
  Stream* stream_;
  const milliseconds host_delay_;
  int count_ = 0;
};

// The pattern of a backward pass: prefetch the next layer, compute and reduce-scatter this one,
// then wait for the prefetch before the next layer uses its slot.
void train_steps(Prefetcher& prefetcher, comm::Communicator& fsdp, int layers) {
  float dummy[4] = {};
  Tensor t(dummy, DType::kF32, {4});
  for (int i = 0; i < layers; ++i) {
    prefetcher.submit(t, t);
    ASSERT_TRUE(fsdp.reduce_scatter(t, t).ok());
    ASSERT_TRUE(prefetcher.wait().ok());
  }
}

TEST(FsdpPrefetch, GathersKeepOneOrderOnEveryRanksStreamAndNeverDeadlock) {
  constexpr int kLayers = 3;
  Fabric fabric(2);
  Stream stream0(&fabric), stream1(&fabric);
  // Rank 0 is slow to enqueue on the prefetch communicator, rank 1 on the fsdp one.
  StreamCommunicator prefetch0("fsdp-prefetch", &stream0, milliseconds(100));
  StreamCommunicator fsdp0("fsdp", &stream0, milliseconds(0));
  StreamCommunicator prefetch1("fsdp-prefetch", &stream1, milliseconds(0));
  StreamCommunicator fsdp1("fsdp", &stream1, milliseconds(100));
  std::thread rank0([&] {
    Prefetcher prefetcher(&prefetch0);
    train_steps(prefetcher, fsdp0, kLayers);
  });
  std::thread rank1([&] {
    Prefetcher prefetcher(&prefetch1);
    train_steps(prefetcher, fsdp1, kLayers);
  });
  rank0.join();
  rank1.join();
  const bool done0 = stream0.drain(milliseconds(10000));
  const bool done1 = stream1.drain(milliseconds(10000));
  std::vector<std::string> program;
  for (int i = 0; i < kLayers; ++i) {
    program.push_back("fsdp-prefetch all_gather #" + std::to_string(i));
    program.push_back("fsdp reduce_scatter #" + std::to_string(i));
  }
  auto text = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += x + "; ";
    return s;
  };
  EXPECT_TRUE(done0 && done1) << "the streams deadlocked: rank 0 ran " << text(stream0.order())
                              << "rank 1 ran " << text(stream1.order());
  EXPECT_EQ(stream0.order(), program);
  EXPECT_EQ(stream1.order(), program);
  // Every gather was joined into the compute stream before its slot was used.
  EXPECT_EQ(prefetch0.joins, kLayers);
  EXPECT_EQ(prefetch1.joins, kLayers);
}

// A communicator whose gathers block the caller until the test lets them finish (Gloo).
class BlockingCommunicator : public comm::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::string name() const override { return "gloo fsdp-prefetch"; }
  int64_t bytes_moved() const override { return 0; }
  Status all_reduce(Tensor, comm::ReduceOp) override { return Status::Ok(); }
  Status reduce_scatter(Tensor, Tensor) override { return Status::Ok(); }
  Status broadcast(Tensor, int) override { return Status::Ok(); }
  Status barrier() override { return Status::Ok(); }
  Status exchange(const std::vector<comm::P2POp>&) override { return Status::Ok(); }
  Status all_gather(Tensor, Tensor) override {
    std::unique_lock<std::mutex> lock(mu);
    caller = std::this_thread::get_id();
    started = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
    released = false;
    return result;
  }
  void release(Status s) {
    std::lock_guard<std::mutex> lock(mu);
    result = s;
    released = true;
    cv.notify_all();
  }
  void wait_started() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started; });
    started = false;
  }
  std::mutex mu;
  std::condition_variable cv;
  bool started = false, released = false;
  Status result;
  std::thread::id caller;
};

TEST(FsdpPrefetch, BlockingGathersRunOnABackgroundThreadAndReportTheirStatus) {
  BlockingCommunicator comm;
  Prefetcher prefetcher(&comm);
  float dummy[2] = {};
  Tensor t(dummy, DType::kF32, {2});
  prefetcher.submit(t, t);  // returns while the gather blocks
  comm.wait_started();
  EXPECT_NE(comm.caller, std::this_thread::get_id());
  comm.release(Status::Ok());
  EXPECT_TRUE(prefetcher.wait().ok());

  prefetcher.submit(t, t);
  comm.wait_started();
  comm.release(Unavailable("all_gather on gloo fsdp-prefetch failed: rank 1 did not answer"));
  Status s = prefetcher.wait();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "all_gather on gloo fsdp-prefetch failed: rank 1 did not answer");
}

}  // namespace
}  // namespace ax::train
