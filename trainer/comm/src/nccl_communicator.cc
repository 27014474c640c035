// The NCCL communicator: device buffers, collectives and point-to-point groups enqueued on the
// backend's stream (or on one of its own, ordered by events against it: CommOptions::own_stream).
//
// Every group is initialised on its own (ncclCommInitRankConfig with an id that the group's
// first rank publishes through the Store) rather than split from the world communicator:
// ncclCommSplit is collective over the whole parent, so it would force every rank to create
// every group in lockstep and would tie the groups' lifetime to the world's. Separate inits cost
// one store round per group at start-up and nothing afterwards.
//
// Communicators are non-blocking (config.blocking = 0): initialisation and every enqueue are
// polled with ncclCommGetAsyncError until they finish, fail, or CommOptions::timeout passes; then
// the communicator is aborted (ncclCommAbort) so no rank waits forever, and the store's "who is
// alive" round names the ranks that went missing. What runs on the device afterwards is followed
// by a watchdog thread (collective_watchdog.h): a collective that runs longer than the timeout,
// or an asynchronous NCCL error, fails the group the same way while the host waits elsewhere.
#include "ax/common/build_config.h"
#include "ax/trainer/comm/communicator.h"

#if AX_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <optional>

#include "ax/common/device_check.h"
#include "ax/common/logging.h"
#include "ax/trainer/comm/activity.h"
#include "collective_watchdog.h"
#include "comm_internal.h"

namespace ax::train::comm {
namespace {

using internal::DeviceProgress;

constexpr Millis kPollInterval{1};

ncclDataType_t nccl_type(DType t) { return t == DType::kBF16 ? ncclBfloat16 : ncclFloat32; }

// Polls an in-progress NCCL operation: true when done, an error when the communicator failed.
StatusOr<bool> nccl_state(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r != ncclSuccess) return Unavailable("ncclCommGetAsyncError: ", ncclGetErrorString(r));
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) {
    return Unavailable(ncclGetErrorString(state), " (", ncclGetLastError(comm), ")");
  }
  return true;
}

// NCCL (2.26 and later) orders the kernels of different communicators on one device by the
// order in which the host launched them when NCCL_LAUNCH_ORDER_IMPLICIT=1: two communicators on
// two streams then cannot deadlock as long as every rank launches in the same order, which ax
// guarantees by issuing every collective from the training thread (docs/comm.md). With CUDA 12.3+
// the kernels still overlap. NCCL reads the variable at its first launch; a value the user set
// is kept. Earlier NCCL versions ignore it.
void order_launches_implicitly() {
  static std::once_flag once;
  std::call_once(once, [] { setenv("NCCL_LAUNCH_ORDER_IMPLICIT", "1", /*overwrite=*/0); });
}

StatusOr<bool> event_passed(cudaEvent_t e) {
  cudaError_t r = cudaEventQuery(e);
  if (r == cudaSuccess) return true;
  if (r == cudaErrorNotReady) return false;
  return Internal("cudaEventQuery: ", cudaGetErrorString(r));
}

// One collective on the device: events recorded on its stream just before and just after the
// NCCL call. The watchdog follows its progress; on the backend's stream the events also time it
// (`timed`: device_collective_seconds, the stragglers' figures), so they keep timing enabled.
// Shared by the watchdog (StreamProgress) and the communicator's list of timed collectives, and
// destroyed by whichever lets go last, once the collective is done.
class StreamMarkers {
 public:
  explicit StreamMarkers(bool timed) {
    const unsigned flags = timed ? cudaEventDefault : cudaEventDisableTiming;
    AX_CUDA_CHECK(cudaEventCreateWithFlags(&start_, flags));
    AX_CUDA_CHECK(cudaEventCreateWithFlags(&end_, flags));
  }
  ~StreamMarkers() {
    cudaEventDestroy(start_);
    cudaEventDestroy(end_);
  }
  StreamMarkers(const StreamMarkers&) = delete;
  StreamMarkers& operator=(const StreamMarkers&) = delete;
  void record_start(cudaStream_t s) { AX_CUDA_CHECK(cudaEventRecord(start_, s)); }
  void record_end(cudaStream_t s) { AX_CUDA_CHECK(cudaEventRecord(end_, s)); }
  StatusOr<DeviceProgress> progress() {
    AX_ASSIGN_OR_RETURN(bool ended, event_passed(end_));
    if (ended) return DeviceProgress::kDone;
    AX_ASSIGN_OR_RETURN(bool started, event_passed(start_));
    return started ? DeviceProgress::kRunning : DeviceProgress::kQueued;
  }
  // Milliseconds between the two events once the end has passed; nullopt before that (or when
  // the device cannot say: the collective then counts nothing).
  std::optional<float> elapsed_ms() {
    StatusOr<bool> ended = event_passed(end_);
    if (!ended.ok()) return 0.0f;
    if (!*ended) return std::nullopt;
    float ms = 0;
    return cudaEventElapsedTime(&ms, start_, end_) == cudaSuccess ? ms : 0.0f;
  }

 private:
  cudaEvent_t start_ = nullptr, end_ = nullptr;
};

// The watchdog's view of a collective's markers.
class StreamProgress final : public internal::TrackedCollective {
 public:
  explicit StreamProgress(std::shared_ptr<StreamMarkers> markers) : markers_(std::move(markers)) {}
  StatusOr<DeviceProgress> progress() override { return markers_->progress(); }

 private:
  std::shared_ptr<StreamMarkers> markers_;
};

// What make_nccl_communicator hands over besides the options.
struct NcclResources {
  ncclComm_t comm = nullptr;
  int device = 0;
  cudaStream_t stream = nullptr;  // == the backend's stream unless own_stream
  cudaEvent_t ready = nullptr, joined = nullptr;
  float* scratch = nullptr;  // the barrier's one float
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Store> store, std::string prefix, std::string name,
                   std::vector<int> ranks, int rank, const CommOptions& options, NcclResources res)
      : store_(std::move(store)),
        name_(std::move(name)),
        ranks_(ranks),
        rank_(rank),
        timeout_(options.timeout),
        main_stream_(static_cast<cudaStream_t>(options.cuda_stream)),
        res_(res),
        on_async_failure_(options.on_async_failure),
        activity_(ranks_.size() > 1 ? GroupActivity::track(prefix, name_) : nullptr),
        latch_(name_, prefix, std::move(ranks), rank, options.timeout),
        watchdog_(options.timeout, {[this] { return async_error(); },
                                    [this](const std::string& op, const std::vector<int>& peers,
                                           const Status& cause, int64_t seq) {
                                      internal::handle_async_failure(
                                          latch_, op, peers, cause, *store_, on_async_failure_,
                                          [this] { abort(); }, seq);
                                    }}) {
    const int device = res_.device;
    watchdog_.start(internal::CollectiveWatchdog::interval_for(timeout_),
                    [device] { cudaSetDevice(device); });
    // The rank's failure domain (comm_internal.h): a failure in another group of this rank aborts
    // this one, which wakes its peers; the latch records this group's failures through it. A
    // group of one has no peers.
    if (ranks_.size() > 1) {
      domain_id_ = internal::join_failure_domain(*store_, ranks_[static_cast<size_t>(rank_)],
                                                 {std::move(prefix), rank_, [this] { abort(); }});
    }
  }

  // The watchdog stops first (this thread finishes the job), then the communicator is finalized
  // (or aborted when that fails or times out), and only then are the buffers and the stream
  // that its kernels may still use released: freeing first would wait for a hung kernel forever
  // (cudaFree synchronises the device) or pull memory from under a running one.
  ~NcclCommunicator() override {
    // First: returns once no other group's failure is calling abort() on this one.
    if (domain_id_ >= 0) internal::leave_failure_domain(*store_, domain_id_);
    watchdog_.stop();
    finalize();
    timed_.clear();  // their events, before the stream they were recorded on goes
    cudaFree(res_.scratch);
    cudaEventDestroy(res_.ready);
    cudaEventDestroy(res_.joined);
    if (res_.stream != main_stream_) cudaStreamDestroy(res_.stream);
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override { return name_; }
  int64_t bytes_moved() const override { return bytes_; }
  bool enqueues() const override { return true; }

  // The finished collectives at the head of the list (they finish in order: one stream).
  double device_collective_seconds() override {
    while (!timed_.empty()) {
      std::optional<float> ms = timed_.front()->elapsed_ms();
      if (!ms) break;
      device_ms_ += static_cast<double>(*ms);
      timed_.pop_front();
    }
    return device_ms_ / 1000.0;
  }

  void join() override {
    if (res_.stream == main_stream_) return;
    AX_CUDA_CHECK(cudaEventRecord(res_.joined, res_.stream));
    AX_CUDA_CHECK(cudaStreamWaitEvent(main_stream_, res_.joined, 0));
  }

  Status all_reduce(Tensor buf, ReduceOp op) override {
    AX_RETURN_IF_ERROR(internal::check_all_reduce(name_, buf, true));
    bytes_ += static_cast<int64_t>(buf.bytes());
    return enqueue("all_reduce", [&] {
      return ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()),
                           nccl_type(buf.dtype), op == ReduceOp::kSum ? ncclSum : ncclMax,
                           res_.comm, res_.stream);
    });
  }

  Status reduce_scatter(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_reduce_scatter(name_, size(), out, in, true));
    bytes_ += static_cast<int64_t>(in.bytes());
    return enqueue("reduce_scatter", [&] {
      return ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()),
                               nccl_type(in.dtype), ncclSum, res_.comm, res_.stream);
    });
  }

  Status all_gather(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_all_gather(name_, size(), out, in, true));
    bytes_ += static_cast<int64_t>(out.bytes());
    return enqueue("all_gather", [&] {
      return ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), nccl_type(in.dtype),
                           res_.comm, res_.stream);
    });
  }

  Status broadcast(Tensor buf, int root) override {
    AX_RETURN_IF_ERROR(internal::check_broadcast(name_, size(), buf, root, true));
    bytes_ += static_cast<int64_t>(buf.bytes());
    return enqueue("broadcast", [&] {
      return ncclBroadcast(buf.data, buf.data, static_cast<size_t>(buf.numel()),
                           nccl_type(buf.dtype), root, res_.comm, res_.stream);
    });
  }

  // A one-element all-reduce, then a wait for the stream on this thread.
  Status barrier() override {
    AX_RETURN_IF_ERROR(enqueue("barrier", [&] {
      return ncclAllReduce(res_.scratch, res_.scratch, 1, ncclFloat32, ncclSum, res_.comm,
                           res_.stream);
    }));
    Status s = internal::poll_until(
        [&]() -> StatusOr<bool> {
          cudaError_t e = cudaStreamQuery(res_.stream);
          if (e == cudaSuccess) return true;
          if (e != cudaErrorNotReady) return Internal("stream: ", cudaGetErrorString(e));
          if (Status failed = latch_.status(); !failed.ok()) return failed;  // by the watchdog
          return state();
        },
        timeout_, kPollInterval, [&] { abort(); }, "barrier");
    if (!s.ok()) return fail("barrier", s, {}, activity_ ? activity_->entered() : 0);
    return latch_.status();  // a stream that drained because the watchdog aborted
  }

  // One NCCL group of ncclSend/ncclRecv: a single kernel on the stream, which the watchdog times
  // like a collective and which, when it fails or hangs, names the batch and looks for its peers
  // only. Sends to this rank itself meet their recvs inside the group (NCCL copies them).
  Status exchange(const std::vector<P2POp>& ops) override {
    AX_RETURN_IF_ERROR(internal::check_exchange(name_, size(), rank_, ops, true));
    bytes_ += internal::exchange_bytes(ops);
    if (internal::exchange_bytes(ops) == 0) return latch_.status();
    return enqueue(
        internal::exchange_name(ops, ranks_),
        [&] {
          ncclResult_t r = ncclGroupStart();
          if (r != ncclSuccess) return r;
          for (const P2POp& op : ops) {
            if (op.buf.numel() == 0) continue;
            const size_t n = static_cast<size_t>(op.buf.numel());
            r = op.kind == P2POp::Kind::kSend ? ncclSend(op.buf.data, n, nccl_type(op.buf.dtype),
                                                         op.peer, res_.comm, res_.stream)
                                              : ncclRecv(op.buf.data, n, nccl_type(op.buf.dtype),
                                                         op.peer, res_.comm, res_.stream);
            if (r != ncclSuccess) break;
          }
          const ncclResult_t end = ncclGroupEnd();  // closes the group whatever happened inside
          return r != ncclSuccess ? r : end;
        },
        internal::exchange_peers(ops, rank_));
  }

 private:
  // `peers`: the group ranks a point-to-point batch waits for (empty for a collective).
  template <typename Fn>
  Status enqueue(std::string_view op, Fn&& call, const std::vector<int>& peers = {}) {
    if (Status failed = latch_.status(); !failed.ok()) return failed;
    // The call only enqueues: its time on the device is counted by the markers (timed = false).
    CollectiveScope scope(activity_.get(), op, /*timed=*/false);
    if (res_.stream != main_stream_) {
      // The collective reads what the compute stream wrote before this call (the cast of its
      // input) and overwrites what the compute stream read before it (the previous use of its
      // output): it waits for everything enqueued there so far.
      AX_CUDA_CHECK(cudaEventRecord(res_.ready, main_stream_));
      AX_CUDA_CHECK(cudaStreamWaitEvent(res_.stream, res_.ready, 0));
    }
    // Collectives on the backend's stream are timed (device_collective_seconds); a stream of the
    // communicator's own overlaps the compute, so its time is nobody's wait.
    const bool timed = res_.stream == main_stream_;
    auto markers = std::make_shared<StreamMarkers>(timed);
    markers->record_start(res_.stream);
    ncclResult_t r = ncclInvalidUsage;
    std::string error = "the communicator was aborted";
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      if (!aborted_) {
        r = call();
        if (r != ncclSuccess && r != ncclInProgress) {
          error = str_cat(ncclGetErrorString(r), " (", ncclGetLastError(res_.comm), ")");
        }
      }
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      return fail(op, Unavailable(error), peers, scope.seq());
    }
    if (r == ncclInProgress) {
      Status s = internal::poll_until([&] { return state(); }, timeout_, kPollInterval,
                                      [&] { abort(); }, str_cat(op, " enqueue"));
      if (!s.ok()) return fail(op, s, peers, scope.seq());
    }
    markers->record_end(res_.stream);
    if (timed) {
      // Finished ones leave at the next device_collective_seconds(); bound the list meanwhile
      // for a caller that never asks (their time is then counted only up to this bound).
      constexpr size_t kMostTimed = 4096;
      if (timed_.size() >= kMostTimed) device_collective_seconds();
      if (timed_.size() < kMostTimed) timed_.push_back(markers);
    }
    watchdog_.track(std::string(op), std::make_unique<StreamProgress>(std::move(markers)), peers,
                    scope.seq());
    return Status::Ok();
  }

  // The communicator's progress, as the poll loops on this thread read it.
  StatusOr<bool> state() {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (aborted_) return Unavailable("the communicator was aborted");
    return nccl_state(res_.comm);
  }

  // The watchdog's question: Ok while healthy, also while this thread holds the communicator
  // (asked again next round) or after an abort (whoever aborted reports the failure).
  Status async_error() {
    std::unique_lock<std::mutex> lock(nccl_mu_, std::try_to_lock);
    if (!lock.owns_lock() || aborted_) return Status::Ok();
    StatusOr<bool> s = nccl_state(res_.comm);
    return s.ok() ? Status::Ok() : s.status();
  }

  void abort() {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (aborted_) return;
    aborted_ = true;
    ncclCommAbort(res_.comm);
  }

  // A failure met on this thread: abort first, which wakes peers waiting on this rank over
  // network transports, then record the rank's failure (the latch: the other groups aborted, the
  // culprit named once for the job).
  Status fail(std::string_view op, const Status& cause, const std::vector<int>& peers = {},
              int64_t seq = 0) {
    abort();
    return latch_.record(op, cause, *store_, peers, seq);
  }

  // Flushes and destroys the communicator, or aborts it when that fails or does not finish.
  void finalize() {
    ncclResult_t r = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      if (aborted_) return;  // ncclCommAbort freed it
      r = ncclCommFinalize(res_.comm);
    }
    Status s = r == ncclSuccess || r == ncclInProgress
                   ? internal::poll_until([&] { return state(); }, timeout_, kPollInterval,
                                          [&] { abort(); }, str_cat("finalizing ", name_))
                   : Unavailable("finalizing ", name_, ": ", ncclGetErrorString(r));
    if (!s.ok()) {
      AX_LOG(kWarn, "comm") << s.message();
      abort();
      return;
    }
    std::lock_guard<std::mutex> lock(nccl_mu_);
    ncclCommDestroy(res_.comm);
    aborted_ = true;  // gone: nothing may touch it any more
  }

  std::shared_ptr<Store> store_;
  const std::string name_;
  const std::vector<int> ranks_;
  const int rank_;
  const Millis timeout_;
  const cudaStream_t main_stream_;
  const NcclResources res_;
  const std::function<void(const Status&)> on_async_failure_;
  int64_t bytes_ = 0;
  // Timed collectives not yet counted, oldest first, and the device time of those counted
  // (training thread only).
  std::deque<std::shared_ptr<StreamMarkers>> timed_;
  double device_ms_ = 0;
  std::shared_ptr<GroupActivity> activity_;  // groups of more than one rank (activity.h)
  std::mutex nccl_mu_;                       // every NCCL call on res_.comm, and aborted_
  bool aborted_ = false;                     // aborted or destroyed: res_.comm is gone
  int domain_id_ = -1;  // in the rank's failure domain (groups of more than one rank)
  internal::FailureLatch latch_;
  internal::CollectiveWatchdog watchdog_;  // last: its thread uses the members above
};

// The stream, events and scratch float a communicator needs besides the NCCL communicator.
NcclResources make_resources(const CommOptions& options, ncclComm_t comm) {
  NcclResources res;
  res.comm = comm;
  AX_CUDA_CHECK(cudaGetDevice(&res.device));
  res.stream = static_cast<cudaStream_t>(options.cuda_stream);
  if (options.own_stream) {
    AX_CUDA_CHECK(cudaStreamCreateWithFlags(&res.stream, cudaStreamNonBlocking));
  }
  AX_CUDA_CHECK(cudaEventCreateWithFlags(&res.ready, cudaEventDisableTiming));
  AX_CUDA_CHECK(cudaEventCreateWithFlags(&res.joined, cudaEventDisableTiming));
  // Allocated now rather than at the first barrier: cudaMalloc may synchronise the device,
  // which must not happen while collectives are in flight.
  AX_CUDA_CHECK(cudaMalloc(&res.scratch, sizeof(float)));
  return res;
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(std::shared_ptr<Store> store,
                                                               const std::string& tag,
                                                               const std::vector<int>& ranks,
                                                               int global_rank,
                                                               const CommOptions& options) {
  AX_ASSIGN_OR_RETURN(int rank, internal::check_group(tag, ranks, global_rank));
  const std::string name = internal::group_name("nccl", tag, ranks);
  const int size = static_cast<int>(ranks.size());
  order_launches_implicitly();
  if (options.cuda_device >= 0) {
    AX_CUDA_CHECK(cudaSetDevice(options.cuda_device));
    ::ax::internal::set_error_device(options.cuda_device);
  }
  auto make_id = []() -> StatusOr<std::string> {
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return Unavailable("ncclGetUniqueId: ", ncclGetErrorString(r));
    return std::string(id.internal, sizeof(id.internal));
  };
  // A group of one needs no peers (and no store round): NCCL still runs its copies on the stream.
  std::string prefix = tag;
  std::string id_bytes;
  if (size == 1) {
    AX_ASSIGN_OR_RETURN(id_bytes, make_id());
  } else {
    AX_ASSIGN_OR_RETURN(int64_t instance, internal::group_instance(*store, tag, size));
    prefix = str_cat(tag, "/", instance);
    AX_ASSIGN_OR_RETURN(id_bytes, internal::exchange_unique_id(*store, prefix, name, ranks[0], rank,
                                                               make_id, options.timeout));
  }
  ncclUniqueId id;
  if (id_bytes.size() != sizeof(id.internal)) {
    return DataLoss("creating ", name, ": NCCL id has ", id_bytes.size(), " bytes, expected ",
                    sizeof(id.internal));
  }
  std::memcpy(id.internal, id_bytes.data(), sizeof(id.internal));

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
  config.commName = name.c_str();
#endif
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return Unavailable("creating ", name, ": ncclCommInitRankConfig: ", ncclGetErrorString(r));
  }
  bool aborted = false;
  Status init =
      internal::poll_until([&] { return nccl_state(comm); }, options.timeout, kPollInterval,
                           [&] {
                             aborted = true;
                             ncclCommAbort(comm);
                           },
                           "initialisation");
  if (!init.ok()) {
    if (!aborted) ncclCommAbort(comm);
    internal::AliveReport report;
    if (size > 1) {
      report = internal::find_missing_ranks(*store, prefix + "/init", ranks, rank,
                                            internal::alive_window(options.timeout));
    }
    return internal::collective_failure("init", name, init.code(), init.message(), report,
                                        store->describe());
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(
      std::move(store), prefix, name, ranks, rank, options, make_resources(options, comm)));
}

}  // namespace ax::train::comm

#else  // !AX_HAVE_CUDA

namespace ax::train::comm {

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(std::shared_ptr<Store>,
                                                               const std::string& tag,
                                                               const std::vector<int>&, int,
                                                               const CommOptions&) {
  return Unimplemented("nccl communicator ", tag,
                       ": ax was built without CUDA/NCCL (configure with --preset cuda)");
}

}  // namespace ax::train::comm

#endif  // AX_HAVE_CUDA
