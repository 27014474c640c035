// Collectives and point-to-point transfers over a group of ranks (docs/architecture.md
// "Communication"): Gloo on CPU ranks (host memory), NCCL on GPU ranks (device memory, on the
// backend's stream). Groups are built per mesh axis; every operation has a timeout, and a failure
// names the rank(s) that went missing.
//
// Buffers are f32 Tensors (bf16 also for NCCL). Sizes: reduce_scatter takes in = size() × n
// elements and leaves in `out` (n elements) the sum over ranks of block rank() of `in`;
// all_gather takes n elements and leaves rank r's block at out[r·n, (r+1)·n). reduce_scatter
// leaves `in` unchanged; all_gather's `in` may be this rank's own block of `out`. Collectives are
// blocking from the caller's point of view on Gloo; on NCCL they are enqueued on the stream.
// A failed collective leaves the communicator broken: every later call returns the same Status,
// whose message names the ranks that did not answer (docs/comm.md "Timeouts and failures").
// NCCL's collectives must be issued by one thread in the same order on every rank, across all
// the communicators of a process (docs/comm.md "NCCL: one issuing thread").
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/backend/tensor.h"
#include "ax/trainer/comm/store.h"

namespace ax::train::comm {

enum class ReduceOp : uint8_t { kSum, kMax };

// One transfer of a point-to-point batch (Communicator::exchange): send `buf` to the group rank
// `peer`, or receive into `buf` from it.
struct P2POp {
  enum class Kind : uint8_t { kSend, kRecv };
  Kind kind = Kind::kSend;
  Tensor buf;
  int peer = 0;
  static P2POp send(Tensor buf, int peer) { return {Kind::kSend, buf, peer}; }
  static P2POp recv(Tensor buf, int peer) { return {Kind::kRecv, buf, peer}; }
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;  // in the group
  virtual int size() const = 0;
  // "gloo tensor[1] (ranks 2,3)"
  virtual std::string name() const = 0;

  virtual Status all_reduce(Tensor buf, ReduceOp op) = 0;
  virtual Status reduce_scatter(Tensor out, Tensor in) = 0;
  virtual Status all_gather(Tensor out, Tensor in) = 0;
  virtual Status broadcast(Tensor buf, int root) = 0;
  virtual Status barrier() = 0;

  // Point-to-point, the pipeline axis's building block (docs/comm.md "Point-to-point"): posts
  // every send and receive of `ops` together and returns when all are done (Gloo) or enqueued
  // (NCCL: ncclSend/ncclRecv in one group), so that neighbours which both send and receive do it
  // in one call each, in any order (Megatron's batch_isend_irecv). Only the ranks named as peers
  // take part. The n-th send from rank a to rank b meets b's n-th receive from a, which must have
  // the same dtype and size. A send to this rank itself needs a matching receive from itself in
  // the same call. Buffers are f32 or bf16, moved bit for bit. A failure names the peer.
  virtual Status exchange(const std::vector<P2POp>& ops) = 0;
  // One-op batches. Two ranks that send to each other must not both call send() first: each
  // would wait for the other's receive (use exchange).
  Status send(Tensor buf, int peer) { return exchange({P2POp::send(buf, peer)}); }
  Status recv(Tensor buf, int peer) { return exchange({P2POp::recv(buf, peer)}); }

  // True when collectives return once enqueued on a device stream, before they finish (NCCL);
  // false when they return with the result in place (Gloo, Gloo's groups of one).
  virtual bool enqueues() const { return false; }
  // Makes later work on the backend's stream (CommOptions::cuda_stream) wait for every collective
  // enqueued here so far, without waiting on the host. Only a communicator with a stream of its
  // own (CommOptions::own_stream) has anything to do.
  virtual void join() {}
  // Seconds the device has spent in this communicator's collectives that have finished so far
  // (NCCL on the backend's stream: timing events around each; a collective counts once the
  // stream has passed it, so synchronize first). 0 where collectives block the calling thread
  // instead (Gloo: activity.h's collective_wait_seconds() times those) and on a stream of the
  // communicator's own, whose collectives overlap the compute.
  virtual double device_collective_seconds() { return 0; }

  // Payload bytes this rank has handed to collectives so far (the benchmark's volume figures):
  // all_reduce n·4, reduce_scatter/all_gather the full (size × n)·4, broadcast n·4; exchange the
  // bytes of every send and every receive.
  virtual int64_t bytes_moved() const = 0;
};

struct CommOptions {
  Millis timeout{300000};  // per collective and for initialisation
  // AX_COORDINATOR ("host:port", may be empty). Gloo listens on the local address that routes to
  // its host, so multi-node groups use the interface the job's bootstrap already uses; empty:
  // the address the hostname resolves to, else loopback (docs/comm.md "Gloo: addresses").
  std::string coordinator;
  void* cuda_stream = nullptr;  // NCCL only: the backend's cudaStream_t
  int cuda_device = -1;         // NCCL only
  // NCCL only: run the collectives on a CUDA stream of the communicator's own. Each collective
  // first waits (an event) for the work enqueued on cuda_stream so far; join() makes later work
  // on cuda_stream wait for the collectives. FSDP prefetch gathers this way, beside the compute.
  bool own_stream = false;
  // NCCL only: called from the communicator's watchdog thread when an enqueued collective fails
  // or runs longer than `timeout`, with the Status a failed call returns (group, missing ranks).
  // ax-train ends the process here. Afterwards (or when empty) the communicator is aborted, so
  // that what waits for the stream moves on, and every later call returns the failure.
  std::function<void(const Status&)> on_async_failure;
};

// A group of `ranks` (global ranks, sorted) of which `global_rank` is one; `tag` names the group
// in store keys and messages ("data[f=0,t=1]", "world"; no '/'). Every member calls it with the
// same ranks and tag. Gloo: Unimplemented when ax was built without Gloo.
StatusOr<std::unique_ptr<Communicator>> make_gloo_communicator(std::shared_ptr<Store> store,
                                                               const std::string& tag,
                                                               const std::vector<int>& ranks,
                                                               int global_rank,
                                                               const CommOptions& options);
// NCCL: Unimplemented when ax was built without CUDA/NCCL.
StatusOr<std::unique_ptr<Communicator>> make_nccl_communicator(std::shared_ptr<Store> store,
                                                               const std::string& tag,
                                                               const std::vector<int>& ranks,
                                                               int global_rank,
                                                               const CommOptions& options);

// The mesh axes of docs/architecture.md in AXLearn's order pipeline, data, fsdp, seq, tensor:
// global rank = (((p · data + d) · fsdp + f) · seq + s) · tensor + t (tensor fastest, then seq,
// fsdp, data, and pipeline slowest: the order derive_mesh places ranks in).
struct MeshCoords {
  int data = 1, fsdp = 1, tensor = 1;  // axis sizes (global = ICI × DCN per axis)
  int d = 0, f = 0, t = 0;             // this rank's coordinates
  // The pipeline axis, slowest of all (AXLearn's order): stage p of `pipeline`.
  int pipeline = 1, p = 0;
  // The seq axis (context parallelism, docs/sharding.md "Sequence parallelism"): slice s of
  // `seq` of every row.
  int seq = 1, s = 0;
  int world() const { return pipeline * data * fsdp * seq * tensor; }
  int rank() const { return (((p * data + d) * fsdp + f) * seq + s) * tensor + t; }
  static MeshCoords of(int rank, int data, int fsdp, int tensor, int pipeline = 1, int seq = 1);
  // Global ranks of each group this rank belongs to, sorted. All but the pipeline group lie
  // inside this rank's stage; all but the seq group inside this rank's slice of the rows.
  std::vector<int> data_group() const;    // same p, f, s, t
  std::vector<int> fsdp_group() const;    // same p, d, s, t
  std::vector<int> tensor_group() const;  // same p, d, f, s
  std::vector<int> replica_group()
      const;  // data × fsdp: same p, s, t (ranks that see different data)
  std::vector<int> pipeline_group() const;  // same d, f, s, t: the stages in order
  std::vector<int> seq_group() const;       // same p, d, f, t: the slices of a row in order
};

// The communicators of one rank, passed explicitly to the model, optimizer, loader and
// checkpoints. A group of size 1 is still a Communicator (its collectives are copies/no-ops).
struct MeshGroups {
  MeshCoords coords;
  std::unique_ptr<Communicator> world;
  std::unique_ptr<Communicator> data;
  std::unique_ptr<Communicator> fsdp;
  std::unique_ptr<Communicator> tensor;
  std::unique_ptr<Communicator> replica;  // data × fsdp
  // The stages of this rank's pipeline (pipeline > 1 only; null otherwise): activations and
  // their gradients go to the neighbours with exchange(), the loss and the gradient norm are
  // summed over it.
  std::unique_ptr<Communicator> pipeline;
  // The slices of this rank's rows (seq > 1 only; null otherwise): attention gathers the keys
  // and values of the whole row over it, and gradients and the loss are summed over it.
  std::unique_ptr<Communicator> seq;
  // A second communicator over the fsdp group (fsdp > 1 only): FSDP prefetch gathers the next
  // layer on it while the current one computes and reduce-scatters on `fsdp` (Gloo: on a thread
  // of its own; NCCL: issued by the training thread onto a stream of its own, own_stream).
  std::unique_ptr<Communicator> fsdp_prefetch;
};

// The exit status of collective_or_die (ax-train's kExitCollectiveFailed): this rank stops
// because another one failed or stopped answering; ax-launch reports such exits as a
// consequence, not as the cause.
inline constexpr int kExitCollectiveFailed = 3;
// The training loop's policy for a collective that failed (docs/comm.md "Timeouts and
// failures"): a half-finished step cannot be recovered, so print the failure (whose message names
// the rank that failed first) as "ax-train: <what> failed: ..." and end the process with status
// kExitCollectiveFailed; the run resumes from its last checkpoint. Nothing to do when `status`
// is ok.
void collective_or_die(const Status& status, const char* what);
// What collective_or_die does with its line, also for a rank that learns of the job's failure
// outside a collective (ActivityReporter, activity.h): prints `line` on stderr, runs the exit
// hooks below and ends the process with kExitCollectiveFailed.
[[noreturn]] void exit_collective_failed(const std::string& line);
// How long collective_or_die waits before exiting: the rank that hosts the store stays a little
// longer, so that the other ranks can still find out through it which rank went missing.
void set_failure_linger(int milliseconds);
// Hooks of that exit, both optional: `notify` runs first (a rank other than the store host tells
// it that it is going); the linger then ends early once `others_gone` returns true (the store
// host: every other rank said so). Polled every 50 ms.
void set_failure_exit_hooks(std::function<void()> notify, std::function<bool()> others_gone);

enum class CommBackend : uint8_t { kGloo, kNccl };
StatusOr<MeshGroups> make_mesh_groups(std::shared_ptr<Store> store, const MeshCoords& coords,
                                      CommBackend backend, const CommOptions& options);

}  // namespace ax::train::comm
