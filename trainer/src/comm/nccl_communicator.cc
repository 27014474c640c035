// The NCCL communicator: device buffers, collectives enqueued on the backend's stream.
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
// alive" round names the ranks that went missing. barrier() also waits for the stream, so it is
// where a peer that stopped mid-collective is detected.
#include "ax/common/build_config.h"
#include "ax/trainer/comm/communicator.h"

#if AX_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>

#include "ax/common/device_check.h"
#include "ax/common/logging.h"
#include "comm_internal.h"

namespace ax::train::comm {
namespace {

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

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<Store> store, std::string prefix, std::string name,
                   std::vector<int> ranks, int rank, const CommOptions& options, ncclComm_t comm)
      : store_(std::move(store)),
        prefix_(std::move(prefix)),
        name_(std::move(name)),
        ranks_(std::move(ranks)),
        rank_(rank),
        timeout_(options.timeout),
        stream_(static_cast<cudaStream_t>(options.cuda_stream)),
        comm_(comm) {}

  ~NcclCommunicator() override {
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (aborted_) return;  // ncclCommAbort freed it
    ncclResult_t r = ncclCommFinalize(comm_);
    Status s =
        r == ncclSuccess || r == ncclInProgress
            ? internal::poll_until([&] { return nccl_state(comm_); }, timeout_, kPollInterval,
                                   [&] { abort(); }, str_cat("finalizing ", name_))
            : Unavailable("finalizing ", name_, ": ", ncclGetErrorString(r));
    if (!s.ok()) {
      AX_LOG(kWarn, "comm") << s.message();
      abort();
      return;
    }
    ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  std::string name() const override { return name_; }
  int64_t bytes_moved() const override { return bytes_; }

  Status all_reduce(Tensor buf, ReduceOp op) override {
    AX_RETURN_IF_ERROR(internal::check_all_reduce(name_, buf, true));
    bytes_ += static_cast<int64_t>(buf.bytes());
    return enqueue("all_reduce", [&] {
      return ncclAllReduce(buf.data, buf.data, static_cast<size_t>(buf.numel()),
                           nccl_type(buf.dtype), op == ReduceOp::kSum ? ncclSum : ncclMax, comm_,
                           stream_);
    });
  }

  Status reduce_scatter(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_reduce_scatter(name_, size(), out, in, true));
    bytes_ += static_cast<int64_t>(in.bytes());
    return enqueue("reduce_scatter", [&] {
      return ncclReduceScatter(in.data, out.data, static_cast<size_t>(out.numel()),
                               nccl_type(in.dtype), ncclSum, comm_, stream_);
    });
  }

  Status all_gather(Tensor out, Tensor in) override {
    AX_RETURN_IF_ERROR(internal::check_all_gather(name_, size(), out, in, true));
    bytes_ += static_cast<int64_t>(out.bytes());
    return enqueue("all_gather", [&] {
      return ncclAllGather(in.data, out.data, static_cast<size_t>(in.numel()), nccl_type(in.dtype),
                           comm_, stream_);
    });
  }

  Status broadcast(Tensor buf, int root) override {
    AX_RETURN_IF_ERROR(internal::check_broadcast(name_, size(), buf, root, true));
    bytes_ += static_cast<int64_t>(buf.bytes());
    return enqueue("broadcast", [&] {
      return ncclBroadcast(buf.data, buf.data, static_cast<size_t>(buf.numel()),
                           nccl_type(buf.dtype), root, comm_, stream_);
    });
  }

  // A one-element all-reduce, then a wait for the stream: the point where a stuck peer shows.
  Status barrier() override {
    if (scratch_ == nullptr) AX_CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));
    AX_RETURN_IF_ERROR(enqueue("barrier", [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    }));
    Status s = internal::poll_until(
        [&]() -> StatusOr<bool> {
          cudaError_t e = cudaStreamQuery(stream_);
          if (e == cudaSuccess) return true;
          if (e != cudaErrorNotReady) return Internal("stream: ", cudaGetErrorString(e));
          return nccl_state(comm_);
        },
        timeout_, kPollInterval, [&] { abort(); }, "barrier");
    return s.ok() ? s : fail("barrier", s);
  }

 private:
  template <typename Fn>
  Status enqueue(std::string_view op, Fn&& call) {
    if (!failed_.ok()) return failed_;
    ncclResult_t r = call();
    if (r == ncclSuccess) return Status::Ok();
    if (r != ncclInProgress) {
      abort();
      return fail(op, Unavailable(ncclGetErrorString(r), " (", ncclGetLastError(comm_), ")"));
    }
    Status s = internal::poll_until([&] { return nccl_state(comm_); }, timeout_, kPollInterval,
                                    [&] { abort(); }, str_cat(op, " enqueue"));
    return s.ok() ? s : fail(op, s);
  }

  void abort() {
    if (aborted_) return;
    aborted_ = true;
    ncclCommAbort(comm_);
  }

  Status fail(std::string_view op, const Status& cause) {
    abort();
    internal::AliveReport report = internal::find_missing_ranks(*store_, prefix_, ranks_, rank_,
                                                                internal::alive_window(timeout_));
    failed_ = internal::collective_failure(op, name_, cause.code(), cause.message(), report,
                                           store_->describe());
    AX_LOG(kError, "comm") << failed_.message();
    return failed_;
  }

  std::shared_ptr<Store> store_;
  const std::string prefix_;
  const std::string name_;
  const std::vector<int> ranks_;
  const int rank_;
  const Millis timeout_;
  cudaStream_t stream_;
  ncclComm_t comm_;
  void* scratch_ = nullptr;
  bool aborted_ = false;
  int64_t bytes_ = 0;
  Status failed_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(std::shared_ptr<Store> store,
                                                               const std::string& tag,
                                                               const std::vector<int>& ranks,
                                                               int global_rank,
                                                               const CommOptions& options) {
  AX_ASSIGN_OR_RETURN(int rank, internal::check_group(tag, ranks, global_rank));
  const std::string name = internal::group_name("nccl", tag, ranks);
  const int size = static_cast<int>(ranks.size());
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
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(std::move(store), prefix, name, ranks, rank, options, comm));
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
