// Pieces the Gloo and NCCL communicators share, kept apart so the CPU build unit-tests them:
// group names, argument checks, the "who is alive" round that names missing ranks after a
// failure, the size-1 communicator, and NCCL's bootstrap logic (id exchange, poll loop).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/comm/store.h"

namespace ax::train::comm::internal {

// "0,2,5"
std::string rank_list(const std::vector<int>& ranks);
// "gloo data[f=0,t=1] (ranks 0,2)"
std::string group_name(std::string_view backend, const std::string& tag,
                       const std::vector<int>& ranks);
// The members' common arguments: ranks sorted, distinct, non-negative, global_rank among them.
// Returns the group rank of global_rank.
StatusOr<int> check_group(const std::string& tag, const std::vector<int>& ranks, int global_rank);

// Shape checks of communicator.h's contract ("all_gather on <group>: out has 6 elements, ...").
Status check_all_reduce(const std::string& group, const Tensor& buf, bool allow_bf16);
Status check_reduce_scatter(const std::string& group, int size, const Tensor& out, const Tensor& in,
                            bool allow_bf16);
Status check_all_gather(const std::string& group, int size, const Tensor& out, const Tensor& in,
                        bool allow_bf16);
Status check_broadcast(const std::string& group, int size, const Tensor& buf, int root,
                       bool allow_bf16);

// Point-to-point (communicator.h's exchange). A batch's checks: dtypes, peers inside the group,
// and every send to this rank (`rank`) met, in order, by a receive from it of the same dtype and
// size ("exchange on <group>: send to rank 3 (group rank 1) of (7) f32 ...").
Status check_exchange(const std::string& group, int size, int rank, const std::vector<P2POp>& ops,
                      bool allow_bf16);
// "send to rank 5", "recv from rank 2": the op with the peer's global rank (`ranks`: the group's).
std::string p2p_name(const P2POp& op, const std::vector<int>& ranks);
// A batch as one op: the op itself when there is one, else "exchange (send to rank 1, recv from
// rank 3)".
std::string exchange_name(const std::vector<P2POp>& ops, const std::vector<int>& ranks);
// The group ranks other than `rank` that a batch waits for, sorted and distinct.
std::vector<int> exchange_peers(const std::vector<P2POp>& ops, int rank);
// The bytes of every send and receive (bytes_moved).
int64_t exchange_bytes(const std::vector<P2POp>& ops);
// Host buffers: copies each send to `rank` into the receive from `rank` that meets it.
void copy_to_self(const std::vector<P2POp>& ops, int rank);

// Which instance of the group `tag` this creation is: members of the n-th creation of a group
// with the same tag on the same store all get n, so a re-created group never reads the keys of
// an earlier one. Uses store.add; stores without add (PMIx) fall back to a per-process count,
// which agrees because every member creates its groups in the same order.
StatusOr<int64_t> group_instance(Store& store, const std::string& tag, int size);

// The outcome of the "who is alive" round.
struct AliveReport {
  Status store_status;       // not ok: the store itself failed, nothing is known about ranks
  std::vector<int> missing;  // global ranks that did not answer within the window
};

// Every live member sets "<prefix>/alive/<group rank>" and waits up to `window` for the other
// members' keys. Members that never arrive (killed, stopped, stuck elsewhere) are `missing`.
// `peers` (group ranks) narrows the wait to the members a point-to-point call waited for: the
// others may be busy elsewhere without being at fault. Empty: every member.
AliveReport find_missing_ranks(Store& store, const std::string& prefix,
                               const std::vector<int>& ranks, int group_rank, Millis window,
                               const std::vector<int>& peers = {});

// The window of the alive round: a few seconds, never longer than the collective timeout.
Millis alive_window(Millis timeout);

// The error a failed collective returns, e.g.
//   "all_reduce on gloo data[0] (ranks 0,2) failed: rank 2 did not answer (peer closed the
//    connection)"
// `cause` is the transport's error in a few words; `store_description` is Store::describe().
Status collective_failure(std::string_view op, const std::string& group, StatusCode code,
                          const std::string& cause, const AliveReport& report,
                          const std::string& store_description);

// A few words for a Gloo exception's text ("peer closed the connection", "timed out after
// 30 s"); the code is Unavailable for a lost peer, DeadlineExceeded for a timeout.
struct TransportError {
  StatusCode code;
  std::string cause;
  // The failed call's sequence number in its group (activity.h: the n-th call of the group on
  // every member); 0 when unknown.
  int64_t seq = 0;
};
TransportError classify_gloo_error(std::string_view what, Millis timeout);
// The first line of a Gloo exception's text without its "[file:line] " prefix.
std::string gloo_message(std::string_view what);

// --- one rank's groups fail together, and the job agrees on the cause ------------------------
// Without this, a live rank blocked in another group's collective (waiting for a peer that is
// itself in the failed group's alive round) is named as missing, and every rank names a
// different set of ranks (docs/comm.md "Timeouts and failures").

// A live group of this process, registered by its communicator for as long as it exists.
struct GroupEntry {
  std::string prefix;  // "<tag>/<instance>": where its alive keys are
  int group_rank = 0;
  // Closes its connections (Gloo) or aborts it (NCCL), which wakes the peers blocked in it. Called
  // from whichever thread of the rank fails first in another group.
  std::function<void()> close;
};
// Registers a group of the rank `global_rank`, whose groups all share `store` (the job's store);
// the first registration also publishes the rank's host name at "hosts/<global rank>".
// Returns the id leave_failure_domain takes.
int join_failure_domain(Store& store, int global_rank, GroupEntry entry);
// Unregisters a group; called first by its owner's destructor: when another group's failure is
// calling the close functions, it returns only once they have all returned.
void leave_failure_domain(Store& store, int id);

// "rank 3 (host n2)", "ranks 2,3 (host n2)", "ranks 3,5 (hosts n2,n3)"; without the hosts when
// the store does not know them all. On a pipelined mesh, whose ranks publish their stage at
// kStageKeyPrefix + <global rank>, the stages too: "rank 2 (host n2, pipeline stage 2)".
std::string describe_ranks(Store& store, const std::vector<int>& ranks);
inline constexpr const char* kStageKeyPrefix = "stages/";

// Job-wide keys of the agreement on the first failure.
inline constexpr const char* kFailureClaimKey = "failure/claim";
inline constexpr const char* kFailureCauseKey = "failure/cause";

// The job-wide cause of a failure, given this rank's alive round: the first rank of the job whose
// round names missing ranks claims the cause (store.add on kFailureClaimKey returns 1; it sets
// kFailureCauseKey to "<its global rank>|<who>") and says "<who> stopped answering first (...)";
// every other rank waits up to `wait` for that cause and says "stopping: <who> stopped answering
// (rank R reports it)". A store without add (PMIx), or no claim within `wait`, gives the rank's
// own report (collective_failure). The code is the transport's (err.code).
// `detail` is appended to the claiming rank's line: what the missing ranks were doing instead
// (absence_detail).
Status agree_on_cause(Store& store, std::string_view op, const std::string& group, int global_rank,
                      const TransportError& err, const AliveReport& report, Millis wait,
                      const std::string& detail = {});

// What the missing ranks of a failed call (`op`, call err.seq of the group at `prefix`) were
// doing instead, from the records they published (activity.h): ": it never entered all_gather
// #37 of this group (its last there was #36) and has been in data loading for 5.2 s (step 3)",
// or for several ranks ": rank 1: it ...; rank 2: it ...". Empty when none published one.
std::string absence_detail(Store& store, const std::vector<int>& missing, std::string_view op,
                           const std::string& prefix, int64_t seq);

// What a failed collective of a registered group (`prefix`) returns, decided once per rank: the
// first failure sets the rank's alive key in every registered group, closes every other one (its
// peers in other groups fail at once instead of after their timeout, and reach their own alive
// rounds; the failed group is the caller's to close, before or after), names the culprit (the
// store's first closed connection, else the alive round of the failed group) and agrees on the
// cause (agree_on_cause). A later failure of another group or thread of the same rank returns
// the same Status. `peers`: the group ranks a point-to-point call waited for, the only ones its
// alive round looks for (find_missing_ranks); empty for a collective.
Status fail_rank(Store& store, std::string_view op, const std::string& group,
                 const std::string& prefix, const std::vector<int>& ranks, int group_rank,
                 const TransportError& err, Millis timeout, const std::vector<int>& peers = {});

// A group of one rank: every collective is a copy (or nothing) and never touches the network.
std::unique_ptr<Communicator> make_local_communicator(std::string_view backend,
                                                      const std::string& tag, int global_rank,
                                                      bool allow_bf16);

// NCCL bootstrap, transport-free so the CPU build tests it. Group rank 0 calls make_id and
// publishes the bytes at "<prefix>/nccl_id"; the others wait for them (timeout names rank 0 of
// the group as the one that did not publish).
StatusOr<std::string> exchange_unique_id(Store& store, const std::string& prefix,
                                         const std::string& group, int root_global_rank,
                                         int group_rank,
                                         const std::function<StatusOr<std::string>()>& make_id,
                                         Millis timeout);

// Polls `poll` (true = finished, error = failed) every `interval` until it finishes, fails or
// `timeout` passes; on timeout calls `abort` and returns DeadlineExceeded "<what> did not finish
// within 30 s". NCCL's non-blocking init and collectives wait through it.
Status poll_until(const std::function<StatusOr<bool>()>& poll, Millis timeout, Millis interval,
                  const std::function<void()>& abort, const std::string& what);

}  // namespace ax::train::comm::internal
