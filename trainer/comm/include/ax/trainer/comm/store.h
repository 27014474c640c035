// Bootstrap key-value stores (docs/architecture.md "Communication"): the TCP store hosted by rank 0
// at AX_COORDINATOR, a file store in a shared directory, and PMIx put/commit/fence/get under `srun
// --mpi=pmix`. Communicators exchange their addresses through a Store; checkpoints use it to
// collect each rank's file list on rank 0.
//
// Semantics every implementation keeps:
//   - set() makes a value visible to later get()/wait() calls of any rank, except on PMIx, where
//     values become visible to other ranks only after the collective sync() (PMIx_Fence). Code
//     that must also run on PMIx calls sync() between its set phase and its get phase; on the
//     TCP and file stores sync() is a barrier of all `world` ranks.
//   - get() and wait() block until the keys exist or the timeout passes; a timeout is
//     DeadlineExceeded naming the missing keys (and, through the key names our callers use,
//     the missing ranks).
//   - Keys are byte strings without '\0'; values are arbitrary bytes.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"
#include "ax/job_context/job_context.h"

namespace ax::train::comm {

using Millis = std::chrono::milliseconds;

class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, std::string_view value) = 0;
  virtual StatusOr<std::string> get(const std::string& key, Millis timeout) = 0;
  // Atomically adds delta to the integer at key (absent = 0) and returns the new value.
  // Unimplemented on PMIx.
  virtual StatusOr<int64_t> add(const std::string& key, int64_t delta) = 0;
  virtual Status wait(const std::vector<std::string>& keys, Millis timeout) = 0;
  // The values of `keys`, in order, once all exist (one timeout for all of them). The TCP store
  // answers it with one request; the others get() each key.
  virtual StatusOr<std::vector<std::string>> get_many(const std::vector<std::string>& keys,
                                                      Millis timeout);
  // Collective over all ranks of the job (see above).
  virtual Status sync(Millis timeout) = 0;
  // "tcp n1:29500 (server)", "file /shared/run/store", "pmix slurm.pmix.42.0"
  virtual std::string describe() const = 0;
};

// Every rank sets "<name>/<rank>" and waits for the others. On timeout: DeadlineExceeded
// "barrier 'name': ranks 3, 5 of 8 did not arrive within 30 s". On a store with add() each
// rank also counts itself in at "<name>/arrived"; the last one sets "<name>/all", which is the
// one key everyone waits for (a store serving thousands of ranks then holds one waiting key per
// rank, not the whole world's); the per-rank keys name the missing ranks after a timeout.
Status store_barrier(Store& store, const std::string& name, int rank, int world, Millis timeout);

// Gathers one value from every rank on every rank (set "<name>/<rank>", the barrier's wait, then
// one get_many of all values), in rank order. Same timeout message as store_barrier.
StatusOr<std::vector<std::string>> store_all_gather(Store& store, const std::string& name, int rank,
                                                    int world, std::string_view value,
                                                    Millis timeout);

// Keys are prefixed with "<prefix>/" (groups, generations of a restart).
std::shared_ptr<Store> make_prefix_store(std::string prefix, std::shared_ptr<Store> base);

struct TcpStoreOptions {
  // "host:port"; the server listens only on the IPv4 address `host` resolves to on its machine.
  // Port 0 with is_server picks a free port.
  std::string host_port;
  bool is_server = false;  // rank 0 hosts the store in a background thread of its process
  int rank = 0;
  int world = 1;
  Millis connect_timeout{60000};  // clients retry until the server answers
  // The job secret (AX_JOB_SECRET, job_store_secret below), required: every connection proves it
  // holds it before the server reads a request, and the server proves it back.
  std::string secret;
};
// The secret of the job's TCP store: the launcher's AX_JOB_SECRET (ctx.secret); under a PMIx
// server without one (srun --mpi=pmix without spank_ax.so), one that rank 0 makes and shares
// through PMIx, which only this job's processes can read; a fresh one for a single process.
// Otherwise FailedPrecondition saying that the rank has none and how to start ranks.
StatusOr<std::string> job_store_secret(const job::JobContext& ctx, Millis timeout);

// Set by the TCP store's server to the rank of the first client whose connection closed (every
// client says its rank right after it proved the job secret; a connection that did not prove it
// never counts); a rank that is killed closes it at once.
inline constexpr const char* kStoreFirstGoneKey = "store/first_gone";

// A TCP store client (every rank, rank 0 included, talks to the server over a socket). The
// server is a background thread of rank 0's process with its own poll() loop; destroying rank 0's
// store lets the server run on until every other rank has disconnected (at most 10 s), so ranks
// still reading their last keys are not cut off. A server that goes away (process killed, host
// gone) is Unavailable "the store at n1:20064 (rank 0) closed the connection" on every client.
// A client whose secret is not the server's fails at once (FailedPrecondition naming the likely
// cause); strangers are refused and logged by the server. What the server holds is bounded
// (AX_STORE_MAX_KEYS, AX_STORE_MAX_BYTES): a set beyond it is ResourceExhausted naming the key.
class TcpStore : public Store {
 public:
  // "host:port" the server listens on (the actual port when the options asked for port 0); what
  // rank 0 publishes when others discover it through another store (ax-store-check --store pmix).
  virtual std::string bound_address() const = 0;
  // Removes every key that starts with `prefix`; returns how many. For keys every rank is known
  // to have read (the checkpoint rounds of an earlier step), so the store does not grow with
  // the length of a run.
  virtual StatusOr<int64_t> erase_prefix(const std::string& prefix) = 0;
};
// Returns TcpStore rather than Store so that rank 0 can read bound_address() without a cast.
StatusOr<std::shared_ptr<TcpStore>> make_tcp_store(const TcpStoreOptions& options);

// One file per key in a directory every rank sees (written under a temporary name and
// renamed); counters use a lock file. rank/world are for sync().
StatusOr<std::shared_ptr<Store>> make_file_store(const std::string& dir, int rank, int world);

// PMIx_Init on first use (Unimplemented when ax was built without PMIx, FailedPrecondition
// when the process was not started by a PMIx server).
StatusOr<std::shared_ptr<Store>> make_pmix_store();

}  // namespace ax::train::comm
