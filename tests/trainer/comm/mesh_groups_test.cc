// Mesh coordinates and groups, and the transport-free pieces of the communicators: failure
// messages, the "who is alive" round, NCCL's id exchange and poll loop (the CPU side of NCCL,
// tested here because no GPU is needed for it), argument checks and size-1 groups.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "ax/common/build_config.h"
#include "ax/trainer/comm/communicator.h"
#include "comm_internal.h"
#include "memory_store.h"

namespace ax::train::comm {
namespace {

// Fails every call: proves that a code path never touches the store.
class DeadStore : public Store {
 public:
  Status set(const std::string&, std::string_view) override { return Unavailable("dead"); }
  StatusOr<std::string> get(const std::string&, Millis) override { return Unavailable("dead"); }
  StatusOr<int64_t> add(const std::string&, int64_t) override { return Unavailable("dead"); }
  Status wait(const std::vector<std::string>&, Millis) override { return Unavailable("dead"); }
  Status sync(Millis) override { return Unavailable("dead"); }
  std::string describe() const override { return "tcp n1:29500 (client)"; }
};

TEST(MeshCoords, RankAndCoordinatesRoundTripTensorFastest) {
  for (int r = 0; r < 12; ++r) {
    MeshCoords c = MeshCoords::of(r, 3, 2, 2);
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.world(), 12);
    EXPECT_EQ(c.t, r % 2);
    EXPECT_EQ(c.f, (r / 2) % 2);
    EXPECT_EQ(c.d, r / 4);
  }
}

TEST(MeshCoords, GroupsOfOneRankOfA2x2x2Mesh) {
  MeshCoords c = MeshCoords::of(5, 2, 2, 2);  // d=1, f=0, t=1
  EXPECT_EQ(c.data_group(), (std::vector<int>{1, 5}));
  EXPECT_EQ(c.fsdp_group(), (std::vector<int>{5, 7}));
  EXPECT_EQ(c.tensor_group(), (std::vector<int>{4, 5}));
  EXPECT_EQ(c.replica_group(), (std::vector<int>{1, 3, 5, 7}));
}

// The pipeline axis is the slowest: a stage is a contiguous block of ranks, the other groups lie
// inside one stage, and the pipeline group holds one rank of each stage in stage order.
TEST(MeshCoords, PipelineIsTheSlowestAxis) {
  for (int r = 0; r < 24; ++r) {
    MeshCoords c = MeshCoords::of(r, 3, 2, 2, /*pipeline=*/2);
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.world(), 24);
    EXPECT_EQ(c.p, r / 12);
    EXPECT_EQ(c.d, (r / 4) % 3);
  }
  MeshCoords c = MeshCoords::of(17, 2, 2, 2, /*pipeline=*/3);  // p=2, d=0, f=0, t=1
  EXPECT_EQ(c.pipeline_group(), (std::vector<int>{1, 9, 17}));
  EXPECT_EQ(c.data_group(), (std::vector<int>{17, 21}));
  EXPECT_EQ(c.fsdp_group(), (std::vector<int>{17, 19}));
  EXPECT_EQ(c.tensor_group(), (std::vector<int>{16, 17}));
  EXPECT_EQ(c.replica_group(), (std::vector<int>{17, 19, 21, 23}));
}

// Issue 26: the seq axis lies between fsdp and tensor (AXLearn's order pipeline, data, fsdp,
// seq, tensor); every other group holds one slice, the seq group the slices of a row in order.
TEST(MeshCoords, SeqIsBetweenFsdpAndTensor) {
  for (int r = 0; r < 48; ++r) {
    MeshCoords c = MeshCoords::of(r, 3, 2, 2, /*pipeline=*/2, /*seq=*/2);
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.world(), 48);
    EXPECT_EQ(c.t, r % 2);
    EXPECT_EQ(c.s, (r / 2) % 2);
    EXPECT_EQ(c.f, (r / 4) % 2);
    EXPECT_EQ(c.d, (r / 8) % 3);
    EXPECT_EQ(c.p, r / 24);
  }
  MeshCoords c = MeshCoords::of(13, 2, 2, 2, /*pipeline=*/1, /*seq=*/2);  // d=1 f=1 s=0 t=1
  EXPECT_EQ(std::tuple(c.d, c.f, c.s, c.t), std::tuple(1, 1, 0, 1));
  EXPECT_EQ(c.seq_group(), (std::vector<int>{13, 15}));
  EXPECT_EQ(c.data_group(), (std::vector<int>{5, 13}));
  EXPECT_EQ(c.fsdp_group(), (std::vector<int>{9, 13}));
  EXPECT_EQ(c.tensor_group(), (std::vector<int>{12, 13}));
  EXPECT_EQ(c.replica_group(), (std::vector<int>{1, 5, 9, 13}));
  c = MeshCoords::of(3, 1, 1, 1, /*pipeline=*/1, /*seq=*/4);
  EXPECT_EQ(c.s, 3);
  EXPECT_EQ(c.seq_group(), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(c.data_group(), (std::vector<int>{3}));
  c = MeshCoords::of(11, 1, 1, 2, /*pipeline=*/3, /*seq=*/2);  // p=2 s=1 t=1
  EXPECT_EQ(c.pipeline_group(), (std::vector<int>{3, 7, 11}));
  EXPECT_EQ(c.seq_group(), (std::vector<int>{9, 11}));
}

// For every axis, the groups of all ranks partition the world into groups of the axis size
// that every member agrees on.
TEST(MeshCoords, GroupsPartitionTheWorld) {
  const int data = 3, fsdp = 2, tensor = 2, seq = 2, world = data * fsdp * seq * tensor;
  using Getter = std::vector<int> (MeshCoords::*)() const;
  std::pair<Getter, int> axes[] = {{&MeshCoords::data_group, data},
                                   {&MeshCoords::fsdp_group, fsdp},
                                   {&MeshCoords::tensor_group, tensor},
                                   {&MeshCoords::replica_group, data * fsdp},
                                   {&MeshCoords::seq_group, seq}};
  for (auto [getter, size] : axes) {
    std::set<std::vector<int>> groups;
    for (int r = 0; r < world; ++r) {
      std::vector<int> g = (MeshCoords::of(r, data, fsdp, tensor, 1, seq).*getter)();
      ASSERT_EQ(static_cast<int>(g.size()), size);
      EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
      EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
      for (int member : g) {
        EXPECT_EQ((MeshCoords::of(member, data, fsdp, tensor, 1, seq).*getter)(), g);
      }
      groups.insert(g);
    }
    EXPECT_EQ(static_cast<int>(groups.size()) * size, world);
  }
}

TEST(MeshGroups, OneRankNeedsNoStoreAndCopies) {
  auto groups = make_mesh_groups(std::make_shared<DeadStore>(), MeshCoords::of(0, 1, 1, 1),
                                 CommBackend::kGloo, CommOptions{});
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  EXPECT_EQ(groups->world->name(), "gloo world (ranks 0)");
  EXPECT_EQ(groups->data->name(), "gloo data[f=0,t=0] (ranks 0)");
  EXPECT_EQ(groups->fsdp->name(), "gloo fsdp[d=0,t=0] (ranks 0)");
  EXPECT_EQ(groups->tensor->name(), "gloo tensor[d=0,f=0] (ranks 0)");
  EXPECT_EQ(groups->replica->name(), "gloo replica[t=0] (ranks 0)");

  Communicator& c = *groups->fsdp;
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  std::vector<float> in = {1, 2, 3}, out(3, 0);
  Tensor tin(in.data(), DType::kF32, {3}), tout(out.data(), DType::kF32, {3});
  ASSERT_TRUE(c.all_reduce(tin, ReduceOp::kMax).ok());
  EXPECT_EQ(in, (std::vector<float>{1, 2, 3}));
  ASSERT_TRUE(c.reduce_scatter(tout, tin).ok());
  EXPECT_EQ(out, in);
  out.assign(3, 0);
  ASSERT_TRUE(c.all_gather(tout, tin).ok());
  EXPECT_EQ(out, in);
  ASSERT_TRUE(c.broadcast(tin, 0).ok());
  ASSERT_TRUE(c.barrier().ok());
  EXPECT_EQ(c.bytes_moved(), 4 * 12);
  EXPECT_EQ(c.broadcast(tin, 1).code(), StatusCode::kInvalidArgument);
}

TEST(MeshGroups, CoordinatesOutsideTheMeshAreRejected) {
  MeshCoords c = MeshCoords::of(0, 2, 1, 1);
  c.d = 2;
  auto groups = make_mesh_groups(std::make_shared<DeadStore>(), c, CommBackend::kGloo, {});
  EXPECT_EQ(groups.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(groups.status().message().find("d=2"), std::string::npos);
}

TEST(Communicator, ArgumentsAreCheckedAgainstTheContract) {
  auto comm = make_gloo_communicator(std::make_shared<DeadStore>(), "solo", {3}, 3, {});
  ASSERT_TRUE(comm.ok());
  std::vector<float> a(6), b(4);
  Tensor ta(a.data(), DType::kF32, {6}), tb(b.data(), DType::kF32, {4});
  Status s = (*comm)->all_gather(tb, ta);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("all_gather on gloo solo (ranks 3): out (4) f32"), std::string::npos)
      << s.message();
  EXPECT_EQ((*comm)->reduce_scatter(ta, tb).code(), StatusCode::kInvalidArgument);
  std::vector<int32_t> ids(4);
  Tensor ti(ids.data(), DType::kI32, {4});
  s = (*comm)->all_reduce(ti, ReduceOp::kSum);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("takes f32 or bf16"), std::string::npos) << s.message();

  EXPECT_EQ(make_gloo_communicator(nullptr, "g", {0, 2}, 1, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make_gloo_communicator(nullptr, "g", {2, 0}, 0, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(make_gloo_communicator(nullptr, "a/b", {0}, 0, {}).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(FailureNaming, AliveRoundNamesTheRanksThatNeverAnswer) {
  MemoryStore store;
  const std::vector<int> ranks = {2, 5, 7, 9};
  internal::AliveReport reports[4];
  // Group ranks 0, 1 and 3 are alive; group rank 2 (global 7) is gone.
  std::vector<std::thread> threads;
  for (int r : {0, 1, 3}) {
    threads.emplace_back([&, r] {
      reports[r] = internal::find_missing_ranks(store, "tensor[d=0]/0", ranks, r, Millis(300));
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(reports[r].store_status.ok());
    EXPECT_EQ(reports[r].missing, std::vector<int>{7}) << "group rank " << r;
  }
}

TEST(FailureNaming, Messages) {
  internal::AliveReport one{Status::Ok(), {2}};
  Status s = internal::collective_failure("all_reduce", "gloo data[0] (ranks 0,2)",
                                          StatusCode::kUnavailable, "peer closed the connection",
                                          one, "tcp n1:29500 (client)");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "all_reduce on gloo data[0] (ranks 0,2) failed: rank 2 did not answer (peer closed "
            "the connection)");

  internal::AliveReport two{Status::Ok(), {1, 3}};
  s = internal::collective_failure("barrier", "g", StatusCode::kDeadlineExceeded,
                                   "timed out after 30 s", two, "file /x");
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "barrier on g failed: ranks 1,3 did not answer (timed out after 30 s)");

  internal::AliveReport none{Status::Ok(), {}};
  s = internal::collective_failure("broadcast", "g", StatusCode::kUnavailable, "oops", none, "");
  EXPECT_EQ(s.message(), "broadcast on g failed: oops");

  internal::AliveReport gone{Unavailable("the store at n1:29500 (rank 0) closed the connection"),
                             {}};
  s = internal::collective_failure("all_gather", "g", StatusCode::kUnavailable,
                                   "peer closed the connection", gone, "tcp n1:29500 (client)");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.message(),
            "all_gather on g failed: the store host, rank 0, is gone (peer closed the connection; "
            "the store at n1:29500 (rank 0) closed the connection)");
  s = internal::collective_failure("all_gather", "g", StatusCode::kUnavailable, "x", gone,
                                   "file /shared/store");
  EXPECT_NE(s.message().find("the store (file /shared/store) failed"), std::string::npos);
}

// A MemoryStore without add, like PMIx.
class NoAddStore : public MemoryStore {
 public:
  StatusOr<int64_t> add(const std::string&, int64_t) override { return Unimplemented("add"); }
};

TEST(FailureAgreement, TheFirstRankThatNamesAnotherGivesTheCauseTheOthersStop) {
  MemoryStore store;
  ASSERT_TRUE(store.set("hosts/3", "n2").ok());
  const internal::TransportError lost{StatusCode::kUnavailable, "peer closed the connection"};
  const internal::AliveReport saw3{Status::Ok(), {3}};
  Status first = internal::agree_on_cause(store, "all_reduce", "gloo data[f=1] (ranks 1,3)", 1,
                                          lost, saw3, Millis(1000));
  EXPECT_EQ(first.code(), StatusCode::kUnavailable);
  EXPECT_EQ(first.message(),
            "all_reduce on gloo data[f=1] (ranks 1,3) failed: rank 3 (host n2) stopped answering "
            "first (peer closed the connection)");
  // A later rank whose own round also missed rank 3, and one whose group was all alive.
  Status second = internal::agree_on_cause(store, "all_reduce", "gloo world (ranks 0,1,2,3)", 2,
                                           lost, saw3, Millis(1000));
  Status third = internal::agree_on_cause(store, "all_gather", "gloo fsdp[d=0] (ranks 0,1)", 0,
                                          lost, {Status::Ok(), {}}, Millis(1000));
  EXPECT_EQ(second.message(),
            "all_reduce on gloo world (ranks 0,1,2,3) failed: stopping: rank 3 (host n2) stopped "
            "answering (rank 1 reports it)");
  EXPECT_EQ(third.message(),
            "all_gather on gloo fsdp[d=0] (ranks 0,1) failed: stopping: rank 3 (host n2) stopped "
            "answering (rank 1 reports it)");
}

TEST(FailureAgreement, RacingRanksAgreeOnOneCause) {
  MemoryStore store;
  const internal::TransportError lost{StatusCode::kUnavailable, "peer closed the connection"};
  std::vector<Status> out(6);
  std::vector<std::thread> threads;
  for (int r = 0; r < 6; ++r) {
    if (r == 5) continue;  // the dead one; ranks 1 and 4 shared a group with it
    threads.emplace_back([&, r] {
      internal::AliveReport report{Status::Ok(), {}};
      if (r == 1 || r == 4) report.missing = {5};
      out[static_cast<size_t>(r)] =
          internal::agree_on_cause(store, "all_reduce", "g", r, lost, report, Millis(2000));
    });
  }
  for (auto& t : threads) t.join();
  int causes = 0;
  for (int r = 0; r < 5; ++r) {
    const std::string& m = out[static_cast<size_t>(r)].message();
    SCOPED_TRACE(m);
    if (m.find("rank 5 stopped answering first") != std::string::npos) {
      ++causes;
    } else {
      EXPECT_NE(m.find("stopping: rank 5 stopped answering (rank "), std::string::npos);
    }
  }
  EXPECT_EQ(causes, 1);
}

TEST(FailureAgreement, WithoutAddOrAClaimEachRankSaysWhatItSaw) {
  NoAddStore no_add;
  ASSERT_TRUE(no_add.set("hosts/2", "n1").ok());
  ASSERT_TRUE(no_add.set("hosts/3", "n2").ok());
  const internal::TransportError late{StatusCode::kDeadlineExceeded, "timed out after 4 s"};
  Status s = internal::agree_on_cause(no_add, "barrier", "g", 0, late, {Status::Ok(), {2, 3}},
                                      Millis(100));
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(),
            "barrier on g failed: ranks 2,3 (hosts n1,n2) did not answer (timed out "
            "after 4 s)");
  // Nobody named anyone within the wait: the transport's words.
  MemoryStore quiet;
  s = internal::agree_on_cause(quiet, "barrier", "g", 0, late, {Status::Ok(), {}}, Millis(100));
  EXPECT_EQ(s.message(), "barrier on g failed: timed out after 4 s");
}

TEST(FailureAgreement, RanksAreDescribedWithTheirHosts) {
  MemoryStore store;
  ASSERT_TRUE(store.set("hosts/2", "n2").ok());
  ASSERT_TRUE(store.set("hosts/3", "n2").ok());
  ASSERT_TRUE(store.set("hosts/5", "n3").ok());
  EXPECT_EQ(internal::describe_ranks(store, {3}), "rank 3 (host n2)");
  EXPECT_EQ(internal::describe_ranks(store, {2, 3}), "ranks 2,3 (host n2)");
  EXPECT_EQ(internal::describe_ranks(store, {3, 5}), "ranks 3,5 (hosts n2,n3)");
  EXPECT_EQ(internal::describe_ranks(store, {3, 7}), "ranks 3,7");  // 7 never said where it is
}

// A pipelined mesh's ranks also published their stage: the line names it (issue 25).
TEST(FailureAgreement, PipelinedRanksAreDescribedWithTheirStages) {
  MemoryStore store;
  for (int r : {2, 3, 5}) ASSERT_TRUE(store.set(str_cat("hosts/", r), r < 5 ? "n2" : "n3").ok());
  ASSERT_TRUE(store.set("stages/2", "1").ok());
  ASSERT_TRUE(store.set("stages/3", "1").ok());
  ASSERT_TRUE(store.set("stages/5", "2").ok());
  EXPECT_EQ(internal::describe_ranks(store, {5}), "rank 5 (host n3, pipeline stage 2)");
  EXPECT_EQ(internal::describe_ranks(store, {2, 5}),
            "ranks 2,5 (hosts n2,n3, pipeline stages 1,2)");
  EXPECT_EQ(internal::describe_ranks(store, {2, 3}), "ranks 2,3 (host n2, pipeline stage 1)");
  ASSERT_TRUE(store.set("stages/7", "3").ok());  // 7 has a stage but never said its host
  EXPECT_EQ(internal::describe_ranks(store, {7}), "rank 7 (pipeline stage 3)");
}

// One rank's groups: the first failure sets the rank's alive key in every registered group and
// closes the others; a second failure (another group, another thread) gets the same verdict. The
// failed group itself is the caller's to close (Gloo closes it first; NCCL's watchdog only after
// the verdict, so that its stream stays blocked meanwhile).
TEST(FailureDomain, TheFirstFailureAnswersEveryGroupAndClosesTheOthers) {
  MemoryStore store;
  int closed_a = 0, closed_b = 0;
  const int a = internal::join_failure_domain(store, 4, {"data[f=0]/0", 2, [&] { ++closed_a; }});
  const int b = internal::join_failure_domain(store, 4, {"fsdp[d=2]/0", 0, [&] { ++closed_b; }});
  EXPECT_TRUE(store.get("hosts/4", Millis(0)).ok());
  // The peer (global 5, group rank 1 of fsdp) is alive and says so.
  ASSERT_TRUE(store.set("fsdp[d=2]/0/alive/1", "1").ok());
  const internal::TransportError lost{StatusCode::kUnavailable, "peer closed the connection"};
  Status first = internal::fail_rank(store, "all_gather", "gloo fsdp[d=2] (ranks 4,5)",
                                     "fsdp[d=2]/0", {4, 5}, 0, lost, Millis(300));
  EXPECT_TRUE(store.get("data[f=0]/0/alive/2", Millis(0)).ok());
  EXPECT_TRUE(store.get("fsdp[d=2]/0/alive/0", Millis(0)).ok());
  EXPECT_EQ(closed_a, 1);
  EXPECT_EQ(closed_b, 0);
  EXPECT_EQ(first.message(),
            "all_gather on gloo fsdp[d=2] (ranks 4,5) failed: peer closed the connection");
  Status again = internal::fail_rank(store, "all_reduce", "gloo data[f=0] (ranks 0,2,4)",
                                     "data[f=0]/0", {0, 2, 4}, 2, lost, Millis(300));
  EXPECT_EQ(again.message(), first.message());
  EXPECT_EQ(closed_a, 1);
  internal::leave_failure_domain(store, a);
  internal::leave_failure_domain(store, b);
}

// A group whose owner is being destroyed while another group's failure closes it: the owner's
// leave_failure_domain returns only after that close has returned (the close function uses the
// owner: NCCL's aborts its communicator).
TEST(FailureDomain, LeavingWaitsForAClosingInProgress) {
  MemoryStore store;
  std::atomic<bool> closing{false}, closed{false};
  const int a = internal::join_failure_domain(
      store, 0, {"data[f=0]/0", 0, [&] {
                   closing = true;
                   std::this_thread::sleep_for(std::chrono::milliseconds(300));
                   closed = true;
                 }});
  const int b = internal::join_failure_domain(store, 0, {"fsdp[d=0]/0", 0, nullptr});
  ASSERT_TRUE(store.set("fsdp[d=0]/0/alive/1", "1").ok());
  std::thread failing([&] {
    (void)internal::fail_rank(store, "all_reduce", "gloo fsdp[d=0] (ranks 0,1)", "fsdp[d=0]/0",
                              {0, 1}, 0, {StatusCode::kUnavailable, "peer closed the connection"},
                              Millis(100));
  });
  while (!closing) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  internal::leave_failure_domain(store, a);  // the owner of data[f=0] goes away
  EXPECT_TRUE(closed) << "left while its close function was still running";
  failing.join();
  internal::leave_failure_domain(store, b);
}

TEST(FailureNaming, AliveRoundReportsAStoreThatIsGone) {
  DeadStore store;
  internal::AliveReport r = internal::find_missing_ranks(store, "w/0", {0, 1}, 1, Millis(100));
  EXPECT_FALSE(r.store_status.ok());
  EXPECT_TRUE(r.missing.empty());
}

TEST(FailureNaming, GlooErrorsInAFewWords) {
  auto e = internal::classify_gloo_error(
      "[/build/gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:41231",
      Millis(30000));
  EXPECT_EQ(e.code, StatusCode::kUnavailable);
  EXPECT_EQ(e.cause, "peer closed the connection");
  e = internal::classify_gloo_error(
      "[/build/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 4000ms for recv "
      "operation to complete",
      Millis(4000));
  EXPECT_EQ(e.code, StatusCode::kDeadlineExceeded);
  EXPECT_EQ(e.cause, "timed out after 4 s");
  e = internal::classify_gloo_error("[a.cc:1] something else\nmore", Millis(1));
  EXPECT_EQ(e.cause, "something else");
}

TEST(GroupInstance, EachCreationOfATagGetsTheNextNumber) {
  MemoryStore store;
  for (int creation = 0; creation < 3; ++creation) {
    for (int member = 0; member < 4; ++member) {
      auto n = internal::group_instance(store, "data[f=0,t=0]", 4);
      ASSERT_TRUE(n.ok());
      EXPECT_EQ(*n, creation);
    }
  }
  auto other = internal::group_instance(store, "data[f=1,t=0]", 4);
  EXPECT_EQ(*other, 0);
}

TEST(NcclBootstrap, FirstRankPublishesTheIdAndOthersReadIt) {
  MemoryStore store;
  int made = 0;
  auto make_id = [&]() -> StatusOr<std::string> {
    ++made;
    return std::string("\x01\x00\x02 id", 6);
  };
  StatusOr<std::string> got[3] = {Status(), Status(), Status()};
  std::vector<std::thread> threads;
  for (int r = 2; r >= 0; --r) {  // readers first: they must wait for the id
    threads.emplace_back([&, r] {
      got[r] = internal::exchange_unique_id(store, "data[f=0,t=0]/0", "nccl g", 4, r, make_id,
                                            Millis(5000));
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(made, 1);
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status().to_string();
    EXPECT_EQ(*got[r], std::string("\x01\x00\x02 id", 6));
  }
}

TEST(NcclBootstrap, MissingFirstRankIsNamed) {
  MemoryStore store;
  auto never = []() -> StatusOr<std::string> { return std::string("x"); };
  auto got = internal::exchange_unique_id(store, "t/0", "nccl tensor[d=0,f=0] (ranks 4,5)", 4, 1,
                                          never, Millis(50));
  EXPECT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("rank 4 (the group's first rank) did not publish"),
            std::string::npos)
      << got.status().message();
}

TEST(NcclBootstrap, PollLoopFinishesFailsOrAbortsOnTimeout) {
  int polls = 0, aborts = 0;
  auto abort = [&] { ++aborts; };
  Status s = internal::poll_until([&]() -> StatusOr<bool> { return ++polls == 3; }, Millis(5000),
                                  Millis(1), abort, "init");
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(aborts, 0);

  s = internal::poll_until([&]() -> StatusOr<bool> { return Unavailable("ncclSystemError"); },
                           Millis(5000), Millis(1), abort, "init");
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(aborts, 1);

  auto t0 = std::chrono::steady_clock::now();
  s = internal::poll_until([&]() -> StatusOr<bool> { return false; }, Millis(100), Millis(5), abort,
                           "initialisation of nccl world (ranks 0,1)");
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded);
  EXPECT_EQ(s.message(), "initialisation of nccl world (ranks 0,1) did not finish within 0.1 s");
  EXPECT_EQ(aborts, 2);
  EXPECT_GE(waited, 0.1);
  EXPECT_LT(waited, 2.0);
}

#if !AX_HAVE_CUDA
TEST(NcclCommunicator, UnimplementedWithoutCuda) {
  auto comm = make_nccl_communicator(std::make_shared<MemoryStore>(), "world", {0}, 0, {});
  EXPECT_EQ(comm.status().code(), StatusCode::kUnimplemented);
}
#endif

}  // namespace
}  // namespace ax::train::comm
