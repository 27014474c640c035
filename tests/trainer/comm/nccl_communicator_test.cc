// The NCCL communicator on GPUs (label gpu). Every case runs in forked ranks (rank_processes.h)
// and the parent never touches CUDA: a process that forks after initialising CUDA cannot use it
// in the child. NCCL refuses two ranks on one GPU, so the multi-rank cases need two GPUs that
// answer and skip otherwise; the one-GPU cases cover what one rank shows: every collective, the
// own-stream ordering (events against the compute stream), the watchdog's clock, which starts
// only when the stream reaches a collective, and point-to-point with itself.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/comm/store.h"
#include "rank_processes.h"

namespace ax::train::comm {
namespace {

// GPUs that answer, asked in a child process so that this one never initialises CUDA.
int gpus_answering() {
  static const int count = [] {
    int fds[2];
    if (pipe(fds) != 0) return 0;
    pid_t pid = fork();
    if (pid == 0) {
      int n = 0;
      if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
      write_all(fds[1], std::to_string(n));
      _exit(0);
    }
    close(fds[1]);
    char buf[16] = {};
    ssize_t got = read(fds[0], buf, sizeof(buf) - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return got > 0 ? std::atoi(buf) : 0;
  }();
  return count;
}

#define NEED_GPUS(n)                                                                     \
  do {                                                                                   \
    if (gpus_answering() < (n)) {                                                        \
      GTEST_SKIP() << "needs " << (n) << " GPUs that answer, found " << gpus_answering() \
                   << ((n) > 1 ? " (NCCL refuses two ranks on one GPU)" : "");           \
    }                                                                                    \
  } while (0)

// What a rank found wrong, as its report ("OK" when nothing).
struct Findings {
  std::string text;
  void expect(bool ok, const std::string& what) {
    if (!ok) text += what + "; ";
  }
  bool cuda(cudaError_t e, const char* what) {
    expect(e == cudaSuccess, std::string(what) + ": " + cudaGetErrorString(e));
    return e == cudaSuccess;
  }
  std::string report() const { return text.empty() ? "OK" : text; }
};

// A device buffer of floats (freed at scope end) and its host copy.
struct DeviceFloats {
  explicit DeviceFloats(size_t count) : n(count) {
    cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(float));
  }
  ~DeviceFloats() { cudaFree(ptr); }
  void set(const std::vector<float>& host, cudaStream_t s) {
    cudaMemcpyAsync(ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
  }
  std::vector<float> get(cudaStream_t s) const {
    std::vector<float> h(n);
    cudaMemcpyAsync(h.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    return h;
  }
  Tensor tensor() const { return Tensor(ptr, DType::kF32, {static_cast<int64_t>(n)}); }
  float* ptr = nullptr;
  size_t n;
};

// A device buffer of bf16 bits (freed at scope end), for point-to-point, which moves them as
// they are.
struct DeviceBf16 {
  explicit DeviceBf16(size_t count) : n(count) {
    cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(uint16_t));
  }
  ~DeviceBf16() { cudaFree(ptr); }
  void set(const std::vector<uint16_t>& host, cudaStream_t s) {
    cudaMemcpyAsync(ptr, host.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
  }
  std::vector<uint16_t> get(cudaStream_t s) const {
    std::vector<uint16_t> h(n);
    cudaMemcpyAsync(h.data(), ptr, n * sizeof(uint16_t), cudaMemcpyDeviceToHost, s);
    cudaStreamSynchronize(s);
    return h;
  }
  Tensor tensor() const { return Tensor(ptr, DType::kBF16, {static_cast<int64_t>(n)}); }
  uint16_t* ptr = nullptr;
  size_t n;
};

// The options a rank of these tests uses: its own GPU, a compute stream like the backend's.
CommOptions gpu_options(int rank, cudaStream_t stream, Millis timeout) {
  CommOptions o;
  o.timeout = timeout;
  o.cuda_stream = stream;
  o.cuda_device = rank;
  return o;
}

// A failure the watchdog hands over (ax-train exits there; the tests keep it).
struct AsyncFailures {
  std::mutex mu;
  std::vector<std::string> messages;
  std::function<void(const Status&)> hook() {
    return [this](const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      messages.push_back(s.message());
    };
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mu);
    return messages;
  }
};

// Sleeps on the stream's timeline: what follows waits as if behind a long compute kernel.
void CUDART_CB sleep_on_stream(void* ms) {
  std::this_thread::sleep_for(Millis(reinterpret_cast<intptr_t>(ms)));
}

float value(int rank, size_t i) { return static_cast<float>((rank * 37 + i * 11) % 1009 - 500); }

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::vector<float> floats(int rank, size_t n, size_t offset) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = value(rank, i + offset);
  return v;
}
std::vector<uint16_t> bf16s(int rank, size_t n, size_t offset) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = bf16_from_f32(value(rank, i + offset) / 64.0f + 0.3f);
  return v;
}

// Runs `body` on `world` forked ranks, rank r on GPU r with a compute stream like the backend's
// (non-blocking), and expects every rank but the victims to find nothing wrong.
using GpuRankBody =
    std::function<void(int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f)>;
void run_gpu_ranks(int world, double deadline_s, const GpuRankBody& body,
                   const std::set<int>& victims = {}) {
  auto outcomes = run_ranks(
      world,
      [&](int rank, std::shared_ptr<Store> store) {
        Findings f;
        cudaStream_t stream = nullptr;
        if (f.cuda(cudaSetDevice(rank), "cudaSetDevice") &&
            f.cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream")) {
          body(rank, std::move(store), stream, f);
        }
        return f.report();
      },
      deadline_s, victims);
  for (size_t r = 0; r < outcomes.size(); ++r) {
    if (victims.count(static_cast<int>(r))) continue;
    EXPECT_EQ(outcomes[r].report, "OK") << "rank " << r;
  }
}

// A communicator or an error in the findings.
template <typename T>
bool made(const StatusOr<T>& comm, Findings& f) {
  f.expect(comm.ok(), comm.status().to_string());
  return comm.ok();
}

// ---- one GPU ----

TEST(NcclCommunicator, WorldOfOneGpuRunsEveryCollective) {
  NEED_GPUS(1);
  run_gpu_ranks(1, 120, [](int, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
    auto groups = make_mesh_groups(store, MeshCoords::of(0, 1, 1, 1), CommBackend::kNccl,
                                   gpu_options(0, stream, Millis(60000)));
    if (!made(groups, f)) return;
    f.expect(groups->world->name() == "nccl world (ranks 0)", groups->world->name());
    f.expect(groups->world->enqueues(), "an NCCL communicator enqueues");
    Communicator& c = *groups->data;
    const std::vector<float> values = {1, -2, 3.5f, 4};
    DeviceFloats buf(4), out(4), gathered(4);
    buf.set(values, stream);
    f.expect(c.all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "all_reduce sum");
    f.expect(c.all_reduce(buf.tensor(), ReduceOp::kMax).ok(), "all_reduce max");
    f.expect(c.broadcast(buf.tensor(), 0).ok(), "broadcast");
    f.expect(c.reduce_scatter(out.tensor(), buf.tensor()).ok(), "reduce_scatter");
    f.expect(c.barrier().ok(), "barrier");
    f.expect(buf.get(stream) == values, "all_reduce/broadcast changed a world of one");
    f.expect(out.get(stream) == values, "reduce_scatter of one rank is a copy");
    f.expect(c.all_gather(gathered.tensor(), buf.tensor()).ok(), "all_gather");
    f.expect(c.barrier().ok(), "barrier");
    f.expect(gathered.get(stream) == values, "all_gather of one rank is a copy");
    f.expect(c.bytes_moved() == 4 * 4 * 5, "bytes_moved");
  });
}

// A communicator with a stream of its own: its gather must wait for what the compute stream
// wrote before the call (here behind 100 ms of queued host work), and join() must hold the
// compute stream's next read until the gather has written.
TEST(NcclCommunicator, OwnStreamWaitsForTheComputeStreamAndJoinOrdersItBack) {
  NEED_GPUS(1);
  run_gpu_ranks(1, 180, [](int, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
    CommOptions o = gpu_options(0, stream, Millis(60000));
    o.own_stream = true;
    auto comm = make_nccl_communicator(store, "prefetch", {0}, 0, o);
    if (!made(comm, f)) return;
    const size_t n = size_t{64} << 20;  // 256 MiB: the gather takes a while
    std::vector<float> values(n);
    for (size_t i = 0; i < n; ++i) values[i] = value(0, i);
    DeviceFloats src(n), in(n), out(n);
    src.set(values, stream);
    for (int round = 0; round < 3; ++round) {
      in.set(std::vector<float>(n, 0.f), stream);
      out.set(std::vector<float>(n, -1.f), stream);
      cudaLaunchHostFunc(stream, sleep_on_stream, reinterpret_cast<void*>(intptr_t{100}));
      cudaMemcpyAsync(in.ptr, src.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
      f.expect((*comm)->all_gather(out.tensor(), in.tensor()).ok(), "all_gather");
      (*comm)->join();
      f.expect(out.get(stream) == values,  // read on the compute stream
               "round " + std::to_string(round) +
                   ": the gather missed the compute stream's write, or the compute stream read "
                   "before the gather had written");
    }
  });
}

// The timeout counts from the moment the stream reaches the collective: three seconds queued
// behind other work on a one-second timeout is no failure.
TEST(NcclCommunicator, TimeQueuedOnTheStreamDoesNotCountTowardsTheTimeout) {
  NEED_GPUS(1);
  run_gpu_ranks(1, 120, [](int, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
    AsyncFailures failures;
    CommOptions o = gpu_options(0, stream, Millis(1000));
    o.on_async_failure = failures.hook();
    auto comm = make_nccl_communicator(store, "world", {0}, 0, o);
    if (!made(comm, f)) return;
    DeviceFloats buf(1024);
    cudaLaunchHostFunc(stream, sleep_on_stream, reinterpret_cast<void*>(intptr_t{3000}));
    f.expect((*comm)->all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "all_reduce");
    f.cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    std::this_thread::sleep_for(Millis(200));  // a watchdog round after the end
    std::vector<std::string> seen = failures.seen();
    f.expect(seen.empty(), "the watchdog fired: " + (seen.empty() ? std::string() : seen[0]));
    f.expect((*comm)->barrier().ok(), "the communicator still works");
  });
}

// The stragglers' figures on a GPU (docs/reliability.md): a collective's device time, from
// timing events around it on the compute stream, counted once the stream has passed it; time
// queued before it (a long kernel) is not its; a stream of the communicator's own counts nothing.
TEST(NcclCommunicator, DeviceCollectiveSecondsCountTheCollectivesOwnTime) {
  NEED_GPUS(1);
  run_gpu_ranks(1, 120, [](int, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
    auto comm =
        make_nccl_communicator(store, "world", {0}, 0, gpu_options(0, stream, Millis(60000)));
    CommOptions o = gpu_options(0, stream, Millis(60000));
    o.own_stream = true;
    auto own = make_nccl_communicator(store, "prefetch", {0}, 0, o);
    if (!made(comm, f) || !made(own, f)) return;
    f.expect((*comm)->device_collective_seconds() == 0, "nothing ran yet");
    DeviceFloats buf(size_t{16} << 20);
    cudaLaunchHostFunc(stream, sleep_on_stream, reinterpret_cast<void*>(intptr_t{300}));
    for (int i = 0; i < 4; ++i) {
      f.expect((*comm)->all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "all_reduce");
    }
    f.cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const double s = (*comm)->device_collective_seconds();
    f.expect(s > 0 && s < 0.25,
             "4 all_reduces of a world of one took " + std::to_string(s) +
                 " s on the device; the 300 ms queued before them must not count");
    f.expect((*comm)->device_collective_seconds() == s, "counted once");
    f.expect((*own)->all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "all_reduce (own stream)");
    f.cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    f.expect((*own)->device_collective_seconds() == 0, "a stream of its own overlaps the compute");
  });
}

// Point-to-point on a world of one: sends to itself meet its recvs inside one NCCL group.
TEST(NcclP2P, WorldOfOneGpuSendsToItself) {
  NEED_GPUS(1);
  run_gpu_ranks(1, 120, [](int, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
    auto comm =
        make_nccl_communicator(store, "pipe", {0}, 0, gpu_options(0, stream, Millis(60000)));
    if (!made(comm, f)) return;
    const size_t n = 1001, m = 777;
    DeviceFloats out(n), in(n);
    DeviceBf16 out16(m), in16(m);
    out.set(floats(0, n, 0), stream);
    in.set(std::vector<float>(n, -1.f), stream);
    out16.set(bf16s(0, m, 3), stream);
    f.expect((*comm)
                 ->exchange({P2POp::send(out.tensor(), 0), P2POp::recv(in.tensor(), 0),
                             P2POp::send(out16.tensor(), 0), P2POp::recv(in16.tensor(), 0)})
                 .ok(),
             "exchange with itself");
    f.expect(in.get(stream) == floats(0, n, 0), "f32 sent to itself");
    f.expect(in16.get(stream) == bf16s(0, m, 3), "bf16 sent to itself");
    f.expect((*comm)->bytes_moved() == static_cast<int64_t>(2 * (n * 4 + m * 2)), "bytes_moved");
    f.expect(!(*comm)->send(out.tensor(), 0).ok(), "a send to itself without its recv is refused");
  });
}

// ---- two GPUs ----

TEST(NcclCommunicator, TwoGpusRunEveryCollectiveExactly) {
  NEED_GPUS(2);
  run_gpu_ranks(2, 180,
                [](int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
                  auto comm = make_nccl_communicator(store, "world", {0, 1}, rank,
                                                     gpu_options(rank, stream, Millis(60000)));
                  if (!made(comm, f)) return;
                  Communicator& c = **comm;
                  const size_t n = 1000;
                  std::vector<float> mine(2 * n), sum(2 * n), block(n), gathered(2 * n);
                  for (size_t i = 0; i < 2 * n; ++i) {
                    mine[i] = value(rank, i);
                    sum[i] = value(0, i) + value(1, i);
                  }
                  for (size_t i = 0; i < n; ++i) block[i] = sum[rank * n + i];
                  for (int r = 0; r < 2; ++r) {
                    for (size_t i = 0; i < n; ++i) gathered[r * n + i] = value(r, i);
                  }
                  DeviceFloats buf(2 * n), out(n), in(n), all(2 * n);
                  buf.set(mine, stream);
                  f.expect(c.all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "all_reduce");
                  f.expect(buf.get(stream) == sum, "all_reduce sum");
                  buf.set(mine, stream);
                  f.expect(c.reduce_scatter(out.tensor(), buf.tensor()).ok(), "reduce_scatter");
                  f.expect(out.get(stream) == block, "reduce_scatter block");
                  in.set(std::vector<float>(mine.begin(), mine.begin() + n), stream);
                  f.expect(c.all_gather(all.tensor(), in.tensor()).ok(), "all_gather");
                  f.expect(all.get(stream) == gathered, "all_gather");
                  f.expect(c.barrier().ok(), "barrier");
                });
}

// A rank that reaches the all_reduce 400 ms late: the other waits for it inside the collective,
// on the device, and its device_collective_seconds says so; the late rank's does not. The host
// returned from the call at once on both (it only enqueues).
TEST(NcclCommunicator, TheRankThatWaitsForALatePeerCountsTheWait) {
  NEED_GPUS(2);
  run_gpu_ranks(2, 180,
                [](int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
                  auto comm = make_nccl_communicator(store, "world", {0, 1}, rank,
                                                     gpu_options(rank, stream, Millis(60000)));
                  if (!made(comm, f)) return;
                  DeviceFloats buf(1024);
                  f.expect((*comm)->barrier().ok(), "barrier");
                  const double before = (*comm)->device_collective_seconds();
                  if (rank == 1) std::this_thread::sleep_for(Millis(400));
                  f.expect((*comm)->all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "all_reduce");
                  f.cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
                  const double waited = (*comm)->device_collective_seconds() - before;
                  if (rank == 0) {
                    f.expect(waited > 0.3, "rank 0 waited " + std::to_string(waited) + " s");
                  } else {
                    f.expect(waited < 0.1, "rank 1 (late) waited " + std::to_string(waited) + " s");
                  }
                });
}

// FSDP's pattern over NCCL with prefetch: the training thread issues a gather on the prefetch
// communicator (own stream) after casting its input, then compute and a reduce-scatter on the
// fsdp communicator (compute stream), then joins. Host delays differ per rank and per round, so
// the streams' timing differs; nothing may deadlock and every gather must be exact.
TEST(NcclCommunicator, PrefetchOnItsOwnStreamBesideReduceScattersNeverDeadlocks) {
  NEED_GPUS(2);
  run_gpu_ranks(
      2, 300, [](int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
        CommOptions o = gpu_options(rank, stream, Millis(60000));
        auto fsdp = make_nccl_communicator(store, "fsdp", {0, 1}, rank, o);
        o.own_stream = true;
        auto prefetch = make_nccl_communicator(store, "fsdp-prefetch", {0, 1}, rank, o);
        if (!made(fsdp, f) || !made(prefetch, f)) return;
        const size_t n = size_t{1} << 20;
        DeviceFloats shard(n), cast(n), slot(2 * n), grads(2 * n), grad_shard(n);
        DeviceFloats busy(size_t{32} << 20);
        std::mt19937 rng(static_cast<unsigned>(rank * 7919 + 1));
        std::uniform_int_distribution<int> delay_us(0, 3000);
        int wrong_rounds = 0;  // every round runs on both ranks, whatever it finds
        for (int round = 0; round < 200; ++round) {
          std::vector<float> mine(n);
          for (size_t i = 0; i < n; ++i) mine[i] = value(rank, i + static_cast<size_t>(round));
          shard.set(mine, stream);
          // The cast of the gather's input, on the compute stream, then the gather.
          cudaMemcpyAsync(cast.ptr, shard.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice, stream);
          std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
          f.expect((*prefetch)->all_gather(slot.tensor(), cast.tensor()).ok(), "all_gather");
          // Compute on the compute stream meanwhile, then this layer's reduce-scatter.
          cudaMemsetAsync(busy.ptr, round & 0xff, busy.n * sizeof(float), stream);
          std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
          f.expect((*fsdp)->reduce_scatter(grad_shard.tensor(), grads.tensor()).ok(),
                   "reduce_scatter");
          (*prefetch)->join();
          std::vector<float> got = slot.get(stream);
          bool exact = true;
          for (int r = 0; r < 2 && exact; ++r) {
            for (size_t i = 0; i < n && exact; i += 4099) {
              exact = got[r * n + i] == value(r, i + static_cast<size_t>(round));
            }
          }
          wrong_rounds += exact ? 0 : 1;
        }
        f.expect(wrong_rounds == 0,
                 std::to_string(wrong_rounds) + " rounds gathered wrong weights");
      });
}

// Two neighbours that both send and receive, in one batch each (the receives listed first on
// one rank, last on the other), f32 and bf16 of odd sizes; then a pipeline's one-op calls.
TEST(NcclP2P, TwoGpusExchangeBothWaysInOneBatch) {
  NEED_GPUS(2);
  run_gpu_ranks(2, 180,
                [](int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
                  auto comm = make_nccl_communicator(store, "pipe", {0, 1}, rank,
                                                     gpu_options(rank, stream, Millis(60000)));
                  if (!made(comm, f)) return;
                  Communicator& c = **comm;
                  const int peer = 1 - rank;
                  const size_t n = 12345, m = 1001;
                  DeviceFloats out(n), in(n);
                  DeviceBf16 out16(m), in16(m);
                  out.set(floats(rank, n, 0), stream);
                  out16.set(bf16s(rank, m, 7), stream);
                  std::vector<P2POp> sends = {P2POp::send(out.tensor(), peer),
                                              P2POp::send(out16.tensor(), peer)};
                  std::vector<P2POp> recvs = {P2POp::recv(in.tensor(), peer),
                                              P2POp::recv(in16.tensor(), peer)};
                  std::vector<P2POp> batch = rank == 0 ? recvs : sends;
                  for (const P2POp& op : rank == 0 ? sends : recvs) batch.push_back(op);
                  f.expect(c.exchange(batch).ok(), "exchange");
                  f.expect(in.get(stream) == floats(peer, n, 0), "f32 from the peer");
                  f.expect(in16.get(stream) == bf16s(peer, m, 7), "bf16 from the peer");
                  // Forward to rank 1, then back to rank 0, one op per call.
                  DeviceFloats act(n);
                  act.set(floats(0, n, 100), stream);
                  if (rank == 0) {
                    f.expect(c.send(act.tensor(), 1).ok(), "send");
                    f.expect(c.recv(act.tensor(), 1).ok(), "recv");
                    f.expect(act.get(stream) == floats(1, n, 100), "the reply");
                  } else {
                    f.expect(c.recv(act.tensor(), 0).ok(), "recv");
                    f.expect(act.get(stream) == floats(0, n, 100), "the activation");
                    act.set(floats(1, n, 100), stream);
                    f.expect(c.send(act.tensor(), 0).ok(), "send");
                  }
                  f.expect(c.barrier().ok(), "barrier");
                  f.expect(c.bytes_moved() == static_cast<int64_t>(2 * (n * 4 + m * 2) + 2 * n * 4),
                           "bytes_moved");
                });
}

// A peer that dies (or stops) in the middle of training: the survivor's collective is enqueued,
// the survivor waits for its stream as the backend does, and the watchdog must end that wait
// within the timeout plus the alive window, naming the rank that did not arrive as the cause.
constexpr int kTimeoutMs = 3000;

void expect_dead_peer_named(bool stop_instead_of_exit) {
  run_gpu_ranks(
      2, 120,
      [stop_instead_of_exit](int rank, std::shared_ptr<Store> store, cudaStream_t stream,
                             Findings& f) {
        AsyncFailures failures;
        CommOptions o = gpu_options(rank, stream, Millis(kTimeoutMs));
        o.on_async_failure = failures.hook();
        auto comm = make_nccl_communicator(store, "world", {0, 1}, rank, o);
        if (!made(comm, f)) return;
        DeviceFloats buf(1 << 16);
        f.expect((*comm)->all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "first all_reduce");
        f.cuda(cudaStreamSynchronize(stream), "first sync");
        if (rank == 1) {
          if (stop_instead_of_exit) raise(SIGSTOP);
          _exit(0);
        }
        const auto t0 = Clock::now();
        f.expect((*comm)->all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "enqueue");
        cudaStreamSynchronize(stream);  // where the backend's copy_to_host would wait forever
        const double waited = since(t0);
        std::vector<std::string> seen = failures.seen();
        f.expect(seen.size() == 1, "watchdog reports: " + std::to_string(seen.size()));
        if (seen.empty()) return;
        // Named as the job's cause (comm.md "Timeouts and failures"): from the store's record of
        // its closed connection when it exited, from the alive round when it stopped.
        f.expect(contains(seen[0], "all_reduce on nccl world (ranks 0,1) failed: rank 1 (host ") &&
                     contains(seen[0], ") stopped answering first ("),
                 seen[0]);
        f.expect(waited < (2 * kTimeoutMs) / 1000.0 + 5.0,
                 "the wait lasted " + std::to_string(waited) + " s");
        Status next = (*comm)->all_reduce(buf.tensor(), ReduceOp::kSum);
        f.expect(next.message() == seen[0],
                 "the next call returns the failure: " + next.to_string());
      },
      {1});
}

TEST(NcclFailure, DeadPeerIsNamedWithinTheTimeout) {
  NEED_GPUS(2);
  expect_dead_peer_named(false);
}

TEST(NcclFailure, StoppedPeerIsNamedWithinTheTimeout) {
  NEED_GPUS(2);
  expect_dead_peer_named(true);
}

// Destroying a communicator whose collective waits for a dead peer returns: the communicator is
// finalized or aborted before its buffers are freed (cudaFree would wait for the hung kernel).
TEST(NcclFailure, DestroyingACommunicatorWithAHungCollectiveReturns) {
  NEED_GPUS(2);
  run_gpu_ranks(2, 60,
                [](int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
                  auto comm = make_nccl_communicator(store, "world", {0, 1}, rank,
                                                     gpu_options(rank, stream, Millis(kTimeoutMs)));
                  if (!made(comm, f)) return;
                  f.expect((*comm)->barrier().ok(), "barrier");
                  if (rank == 1) _exit(0);
                  DeviceFloats buf(1024);
                  f.expect((*comm)->all_reduce(buf.tensor(), ReduceOp::kSum).ok(), "enqueue");
                  const auto t0 = Clock::now();
                  comm->reset();
                  f.expect(since(t0) < 15.0,
                           "destruction took " + std::to_string(since(t0)) + " s");
                },
                {1});
}

// A recv whose peer is alive but never sends: the watchdog ends the survivor's wait on the stream
// after the timeout and names the peer (its alive round looks for the peer only), as Gloo does.
TEST(NcclP2PFailure, RecvFromAPeerThatNeverSendsNamesThatPeer) {
  NEED_GPUS(2);
  run_gpu_ranks(2, 120,
                [](int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
                  AsyncFailures failures;
                  CommOptions o = gpu_options(rank, stream, Millis(kTimeoutMs));
                  o.on_async_failure = failures.hook();
                  auto comm = make_nccl_communicator(store, "pipe", {0, 1}, rank, o);
                  if (!made(comm, f)) return;
                  f.expect((*comm)->barrier().ok(), "barrier");
                  if (rank == 1) {  // alive and connected until rank 0 has its verdict
                    f.expect(store->get("test/done", Millis(60000)).ok(), "rank 0 finished");
                    return;
                  }
                  DeviceFloats buf(1 << 16);
                  const auto t0 = Clock::now();
                  f.expect((*comm)->recv(buf.tensor(), 1).ok(), "enqueue");
                  cudaStreamSynchronize(stream);
                  const double waited = since(t0);
                  std::vector<std::string> seen = failures.seen();
                  (void)store->set("test/done", "1");
                  f.expect(seen.size() == 1, "watchdog reports: " + std::to_string(seen.size()));
                  if (seen.empty()) return;
                  f.expect(contains(seen[0],
                                    "recv from rank 1 on nccl pipe (ranks 0,1) failed: rank 1 "
                                    "(host ") &&
                               contains(seen[0], ") stopped answering first (timed out after 3 s)"),
                           seen[0]);
                  f.expect(waited < (2 * kTimeoutMs) / 1000.0 + 5.0,
                           "the wait lasted " + std::to_string(waited) + " s");
                });
}

// A neighbour that exits between two exchanges: the survivor's batch is named with both its
// transfers, and the dead rank as the cause.
TEST(NcclP2PFailure, DeadNeighbourOfAnExchangeIsNamed) {
  NEED_GPUS(2);
  run_gpu_ranks(
      2, 120,
      [](int rank, std::shared_ptr<Store> store, cudaStream_t stream, Findings& f) {
        AsyncFailures failures;
        CommOptions o = gpu_options(rank, stream, Millis(kTimeoutMs));
        o.on_async_failure = failures.hook();
        auto comm = make_nccl_communicator(store, "pipe", {0, 1}, rank, o);
        if (!made(comm, f)) return;
        DeviceFloats out(1 << 16), in(1 << 16);
        const int peer = 1 - rank;
        const std::vector<P2POp> batch = {P2POp::send(out.tensor(), peer),
                                          P2POp::recv(in.tensor(), peer)};
        f.expect((*comm)->exchange(batch).ok(), "first exchange");
        f.cuda(cudaStreamSynchronize(stream), "first sync");
        if (rank == 1) _exit(0);
        const auto t0 = Clock::now();
        f.expect((*comm)->exchange(batch).ok(), "enqueue");
        cudaStreamSynchronize(stream);
        const double waited = since(t0);
        std::vector<std::string> seen = failures.seen();
        f.expect(seen.size() == 1, "watchdog reports: " + std::to_string(seen.size()));
        if (seen.empty()) return;
        f.expect(contains(seen[0],
                          "exchange (send to rank 1, recv from rank 1) on nccl pipe (ranks 0,1) "
                          "failed: rank 1 (host ") &&
                     contains(seen[0], ") stopped answering first ("),
                 seen[0]);
        f.expect(waited < (2 * kTimeoutMs) / 1000.0 + 5.0,
                 "the wait lasted " + std::to_string(waited) + " s");
        Status next = (*comm)->send(out.tensor(), 1);
        f.expect(next.message() == seen[0],
                 "the next call returns the failure: " + next.to_string());
      },
      {1});
}

}  // namespace
}  // namespace ax::train::comm
