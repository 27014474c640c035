// Gloo communicators across real processes: every rank is a fork of this (single-threaded) test
// process, rank 0 hosts the TCP store. Results are checked exactly against references computed
// locally (integer-valued floats, so the order of a sum does not matter); killed and stopped
// ranks must make every other rank fail within the timeout, naming the missing rank.
#include "ax/trainer/comm/communicator.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ax/common/build_config.h"
#include "ax/trainer/comm/store.h"
#include "rank_processes.h"

namespace ax::train::comm {
namespace {

// Integer-valued inputs that differ per rank, so sums and maxima are exact.
float value(int rank, int64_t i) { return static_cast<float>((rank * 37 + i * 11) % 1009 - 500); }

std::string check_equal(const std::string& what, const std::vector<float>& got,
                        const std::vector<float>& want) {
  if (got.size() != want.size()) return what + ": size differs; ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      std::ostringstream os;
      os << what << "[" << i << "] = " << got[i] << ", want " << want[i] << "; ";
      return os.str();
    }
  }
  return "";
}

Tensor view(std::vector<float>& v) { return Tensor(v.data(), DType::kF32, {int64_t(v.size())}); }

// Every collective of `comm` on n elements per block; `members` are the global ranks.
std::string check_collectives(Communicator& comm, const std::vector<int>& members, int64_t n) {
  const int p = comm.size(), me = comm.rank();
  const int global = members[static_cast<size_t>(me)];
  std::string errors;
  auto expect_ok = [&](const std::string& what, const Status& s) {
    if (!s.ok()) errors += what + ": " + s.to_string() + "; ";
    return s.ok();
  };
  const int64_t bytes0 = comm.bytes_moved();

  std::vector<float> buf(static_cast<size_t>(n)), sum(buf.size()), mx(buf.size());
  for (int64_t i = 0; i < n; ++i) {
    buf[i] = value(global, i);
    sum[i] = 0;
    mx[i] = -1e30f;
    for (int g : members) {
      sum[i] += value(g, i);
      mx[i] = std::max(mx[i], value(g, i));
    }
  }
  std::vector<float> in = buf;
  if (expect_ok("all_reduce sum", comm.all_reduce(view(buf), ReduceOp::kSum))) {
    errors += check_equal("all_reduce sum", buf, sum);
  }
  buf = in;
  if (expect_ok("all_reduce max", comm.all_reduce(view(buf), ReduceOp::kMax))) {
    errors += check_equal("all_reduce max", buf, mx);
  }

  // reduce_scatter: in has p blocks of n; block b of rank g is value(g, b * n + i).
  std::vector<float> rs_in(static_cast<size_t>(p * n)), rs_out(static_cast<size_t>(n)),
      rs_want(static_cast<size_t>(n), 0.f);
  for (int64_t i = 0; i < p * n; ++i) rs_in[i] = value(global, i);
  for (int64_t i = 0; i < n; ++i) {
    for (int g : members) rs_want[i] += value(g, me * n + i);
  }
  const std::vector<float> rs_in_copy = rs_in;
  if (expect_ok("reduce_scatter", comm.reduce_scatter(view(rs_out), view(rs_in)))) {
    errors += check_equal("reduce_scatter", rs_out, rs_want);
    errors += check_equal("reduce_scatter input untouched", rs_in, rs_in_copy);
  }

  // all_gather: rank r's block lands at out[r·n, (r+1)·n).
  std::vector<float> ag_in(static_cast<size_t>(n)), ag_out(static_cast<size_t>(p * n), -7.f),
      ag_want(static_cast<size_t>(p * n));
  for (int64_t i = 0; i < n; ++i) ag_in[i] = value(global, i + 3);
  for (int r = 0; r < p; ++r) {
    for (int64_t i = 0; i < n; ++i) ag_want[r * n + i] = value(members[r], i + 3);
  }
  if (expect_ok("all_gather", comm.all_gather(view(ag_out), view(ag_in)))) {
    errors += check_equal("all_gather", ag_out, ag_want);
  }
  // In place: the input is this rank's own block of the output.
  std::vector<float> ag_inplace(static_cast<size_t>(p * n), -7.f);
  std::copy(ag_in.begin(), ag_in.end(), ag_inplace.begin() + me * n);
  Tensor own(ag_inplace.data() + me * n, DType::kF32, {n});
  if (expect_ok("all_gather in place", comm.all_gather(view(ag_inplace), own))) {
    errors += check_equal("all_gather in place", ag_inplace, ag_want);
  }

  for (int root = 0; root < p; ++root) {
    std::vector<float> b(static_cast<size_t>(n)), want(b.size());
    for (int64_t i = 0; i < n; ++i) {
      b[i] = value(global, i + 100 * root);
      want[i] = value(members[root], i + 100 * root);
    }
    if (expect_ok("broadcast", comm.broadcast(view(b), root))) {
      errors += check_equal("broadcast from " + std::to_string(root), b, want);
    }
  }
  expect_ok("barrier", comm.barrier());

  // The header's accounting: all_reduce n·4 (twice), reduce_scatter and all_gather the full
  // p·n·4 (all_gather twice), broadcast n·4 per root.
  const int64_t want_bytes = 4 * (2 * n + p * n + 2 * p * n + p * n);
  if (comm.bytes_moved() - bytes0 != want_bytes) {
    errors += "bytes_moved " + std::to_string(comm.bytes_moved() - bytes0) + ", want " +
              std::to_string(want_bytes) + "; ";
  }
  return errors;
}

#if AX_HAVE_GLOO

class GlooWorld : public ::testing::TestWithParam<int> {};

TEST_P(GlooWorld, EveryCollectiveMatchesTheLocalReference) {
  const int world = GetParam();
  auto outcomes = run_ranks(
      world,
      [world](int rank, std::shared_ptr<Store> store) -> std::string {
        auto comm = make_gloo_communicator(store, "world", iota(world), rank, cpu_options());
        if (!comm.ok()) return comm.status().to_string();
        std::string errors;
        for (int64_t n : {1, 7, 1000}) errors += check_collectives(**comm, iota(world), n);
        if ((*comm)->size() != world || (*comm)->rank() != rank) errors += "rank/size wrong; ";
        return errors.empty() ? "OK" : errors;
      },
      120);
  for (int r = 0; r < world; ++r) EXPECT_EQ(outcomes[r].report, "OK") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooWorld, ::testing::Values(1, 2, 4));

// bf16 buffers (the cpu-bf16 plan): sums in f32 rounded once to bf16, max and gathers exact.
std::string check_bf16_collectives(Communicator& comm, int world) {
  const int me = comm.rank();
  constexpr int64_t n = 300;
  // Values with 8 significant bits that do not add up exactly in bf16.
  auto bf = [](int rank, int64_t i) {
    return bf16_from_f32(1.0f + static_cast<float>((rank * 13 + i * 7) % 97) / 64.0f +
                         static_cast<float>(i % 5) * 0.3f);
  };
  std::string errors;
  std::vector<uint16_t> buf(n), gathered(static_cast<size_t>(world * n));
  for (int64_t i = 0; i < n; ++i) buf[i] = bf(me, i);
  Status s = comm.all_reduce(Tensor(buf.data(), DType::kBF16, {n}), ReduceOp::kSum);
  if (!s.ok()) return "all_reduce bf16: " + s.to_string();
  for (int64_t i = 0; i < n && errors.empty(); ++i) {
    float sum = 0;
    for (int g = 0; g < world; ++g) sum += f32_from_bf16(bf(g, i));
    if (buf[i] != bf16_from_f32(sum)) errors += "all_reduce bf16[" + std::to_string(i) + "]; ";
  }
  std::vector<uint16_t> mine(n);
  for (int64_t i = 0; i < n; ++i) mine[i] = bf(me, i + 1);
  s = comm.all_gather(Tensor(gathered.data(), DType::kBF16, {world * n}),
                      Tensor(mine.data(), DType::kBF16, {n}));
  if (!s.ok()) return "all_gather bf16: " + s.to_string();
  for (int g = 0; g < world && errors.empty(); ++g) {
    for (int64_t i = 0; i < n; ++i) {
      if (gathered[g * n + i] != bf(g, i + 1)) {
        errors += "all_gather bf16 block " + std::to_string(g) + "; ";
        break;
      }
    }
  }
  std::vector<uint16_t> rs_in(static_cast<size_t>(world * n)), rs_out(n);
  for (int64_t i = 0; i < world * n; ++i) rs_in[i] = bf(me, i);
  s = comm.reduce_scatter(Tensor(rs_out.data(), DType::kBF16, {n}),
                          Tensor(rs_in.data(), DType::kBF16, {world * n}));
  if (!s.ok()) return "reduce_scatter bf16: " + s.to_string();
  for (int64_t i = 0; i < n && errors.empty(); ++i) {
    float sum = 0;
    for (int g = 0; g < world; ++g) sum += f32_from_bf16(bf(g, me * n + i));
    if (rs_out[i] != bf16_from_f32(sum)) errors += "reduce_scatter bf16; ";
  }
  for (int64_t i = 0; i < n; ++i) buf[i] = bf(me, i + 2);
  s = comm.broadcast(Tensor(buf.data(), DType::kBF16, {n}), world - 1);
  if (!s.ok()) return "broadcast bf16: " + s.to_string();
  for (int64_t i = 0; i < n && errors.empty(); ++i) {
    if (buf[i] != bf(world - 1, i + 2)) errors += "broadcast bf16; ";
  }
  return errors;
}

TEST(GlooCommunicator, Bf16BuffersSumInF32AndRoundOnce) {
  for (int world : {1, 3}) {
    auto outcomes = run_ranks(
        world,
        [world](int rank, std::shared_ptr<Store> store) -> std::string {
          auto comm = make_gloo_communicator(store, "world", iota(world), rank, cpu_options());
          if (!comm.ok()) return comm.status().to_string();
          std::string errors = check_bf16_collectives(**comm, world);
          return errors.empty() ? "OK" : errors;
        },
        120);
    for (int r = 0; r < world; ++r) EXPECT_EQ(outcomes[r].report, "OK") << world << " rank " << r;
  }
}

TEST(GlooCommunicator, LargeBuffersOfAMillionFloats) {
  const int world = 4;
  const int64_t total = 1 << 20;
  auto outcomes = run_ranks(
      world,
      [&](int rank, std::shared_ptr<Store> store) -> std::string {
        auto comm = make_gloo_communicator(store, "world", iota(world), rank, cpu_options());
        if (!comm.ok()) return comm.status().to_string();
        std::string errors;
        std::vector<float> buf(total), want(total, 0.f);
        for (int64_t i = 0; i < total; ++i) {
          buf[i] = value(rank, i);
          for (int g = 0; g < world; ++g) want[i] += value(g, i);
        }
        Status s = (*comm)->all_reduce(view(buf), ReduceOp::kSum);
        errors += s.ok() ? check_equal("all_reduce", buf, want) : s.to_string();
        // reduce_scatter of the same 1M inputs: this rank's quarter of the sum.
        for (int64_t i = 0; i < total; ++i) buf[i] = value(rank, i);
        std::vector<float> part(total / world);
        s = (*comm)->reduce_scatter(view(part), view(buf));
        std::vector<float> want_part(want.begin() + rank * (total / world),
                                     want.begin() + (rank + 1) * (total / world));
        errors += s.ok() ? check_equal("reduce_scatter", part, want_part) : s.to_string();
        // all_gather the quarters back into the full sum.
        std::vector<float> full(total);
        s = (*comm)->all_gather(view(full), view(part));
        errors += s.ok() ? check_equal("all_gather", full, want) : s.to_string();
        return errors.empty() ? "OK" : errors;
      },
      180);
  for (int r = 0; r < world; ++r) EXPECT_EQ(outcomes[r].report, "OK") << "rank " << r;
}

// Each group of a 2×2 mesh computes over exactly its members; tags keep the groups' keys apart.
struct MeshCase {
  int data, fsdp, tensor;
};
class GlooMesh : public ::testing::TestWithParam<MeshCase> {};

TEST_P(GlooMesh, EveryGroupReducesOverItsMembers) {
  const MeshCase m = GetParam();
  const int world = m.data * m.fsdp * m.tensor;
  auto outcomes = run_ranks(
      world,
      [m](int rank, std::shared_ptr<Store> store) -> std::string {
        MeshCoords c = MeshCoords::of(rank, m.data, m.fsdp, m.tensor);
        auto groups = make_mesh_groups(store, c, CommBackend::kGloo, cpu_options());
        if (!groups.ok()) return groups.status().to_string();
        std::string errors;
        std::pair<Communicator*, std::vector<int>> all[] = {
            {groups->world.get(), iota(c.world())},
            {groups->data.get(), c.data_group()},
            {groups->fsdp.get(), c.fsdp_group()},
            {groups->tensor.get(), c.tensor_group()},
            {groups->replica.get(), c.replica_group()}};
        for (auto& [comm, members] : all) {
          if (comm->size() != static_cast<int>(members.size())) errors += comm->name() + " size; ";
          errors += check_collectives(*comm, members, 5);
        }
        std::ostringstream names;
        names << groups->data->name() << "|" << groups->tensor->name();
        return errors.empty() ? "OK " + names.str() : errors;
      },
      120);
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(outcomes[r].report.substr(0, 3), "OK ") << "rank " << r << ": " << outcomes[r].report;
  }
  if (m.data == 2 && m.fsdp == 1 && m.tensor == 2) {
    // rank 3 = (d=1, f=0, t=1): data group {1,3}, tensor group {2,3}.
    EXPECT_EQ(outcomes[3].report,
              "OK gloo data[f=0,t=1] (ranks 1,3)|gloo tensor[d=1,f=0] (ranks 2,3)");
  }
}

INSTANTIATE_TEST_SUITE_P(Meshes, GlooMesh,
                         ::testing::Values(MeshCase{2, 2, 1}, MeshCase{2, 1, 2}, MeshCase{1, 2, 2}),
                         [](const auto& info) {
                           return "d" + std::to_string(info.param.data) + "f" +
                                  std::to_string(info.param.fsdp) + "t" +
                                  std::to_string(info.param.tensor);
                         });

// A group created twice with the same tag on the same store must not read the first one's keys.
TEST(GlooCommunicator, RecreatingAGroupWithTheSameTagWorks) {
  auto outcomes = run_ranks(
      2,
      [](int rank, std::shared_ptr<Store> store) -> std::string {
        std::string errors;
        for (int round = 0; round < 3; ++round) {
          auto comm = make_gloo_communicator(store, "world", {0, 1}, rank, cpu_options());
          if (!comm.ok()) return comm.status().to_string();
          errors += check_collectives(**comm, {0, 1}, 3);
        }
        return errors.empty() ? "OK" : errors;
      },
      60);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(outcomes[r].report, "OK") << "rank " << r;
}

// --- failures -------------------------------------------------------------------------------

constexpr Millis kFailTimeout{4000};

enum class Fate { kKill, kStop };

// Rank `victim` of 4 does a few all-reduces, then is killed or stopped; the others keep calling
// all_reduce. Each survivor reports "<code>|<message>|<seconds since its failing call began>".
std::vector<RankOutcome> lose_a_rank(int victim, Fate fate) {
  const int world = 4;
  return run_ranks(world,
                   [=](int rank, std::shared_ptr<Store> store) -> std::string {
                     auto comm = make_gloo_communicator(store, "world", iota(world), rank,
                                                        cpu_options(kFailTimeout));
                     if (!comm.ok()) return "create: " + comm.status().to_string();
                     std::vector<float> buf(1000, 1.f);
                     for (int step = 0;; ++step) {
                       if (rank == victim && step == 3)
                         raise(fate == Fate::kKill ? SIGKILL : SIGSTOP);
                       auto t0 = Clock::now();
                       Status s = (*comm)->all_reduce(view(buf), ReduceOp::kSum);
                       if (!s.ok()) {
                         // Once failed, the communicator keeps returning the same error at once.
                         Status again = (*comm)->barrier();
                         std::string sticky = again.message() == s.message() ? "" : " [not sticky]";
                         std::ostringstream os;
                         os << status_code_name(s.code()) << "|" << s.message() << "|" << since(t0)
                            << sticky;
                         return os.str();
                       }
                       if (step > 1000) return "no failure after 1000 steps";
                     }
                   },
                   60, {victim});
}

std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// Every survivor's message contains `phrase`, or, when `cause` is given, exactly one says
// "<cause> stopped answering first (<why>)" and every other "stopping: <cause> stopped
// answering (rank R reports it)".
void expect_named(const std::vector<RankOutcome>& outcomes, int victim, const std::string& code,
                  const std::string& phrase, double max_seconds, const std::string& why = "") {
  int causes = 0;
  for (int r = 0; r < static_cast<int>(outcomes.size()); ++r) {
    if (r == victim) continue;
    const std::string& rep = outcomes[r].report;
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + rep);
    std::vector<std::string> parts;
    std::stringstream ss(rep);
    for (std::string p; std::getline(ss, p, '|');) parts.push_back(p);
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[0], code);
    EXPECT_NE(parts[1].find("all_reduce on gloo world (ranks 0,1,2,3) failed: "),
              std::string::npos);
    if (why.empty()) {
      EXPECT_NE(parts[1].find(phrase), std::string::npos);
    } else if (parts[1].find(phrase + " stopped answering first (" + why + ")") !=
               std::string::npos) {
      ++causes;
    } else {
      EXPECT_NE(parts[1].find("stopping: " + phrase + " stopped answering (rank "),
                std::string::npos);
    }
    EXPECT_LT(std::stod(parts[2]), max_seconds);
  }
  if (!why.empty()) {
    EXPECT_EQ(causes, 1);
  }
}

TEST(GlooFailure, KilledRankIsNamedByEveryOtherRank) {
  auto outcomes = lose_a_rank(2, Fate::kKill);
  // Detection is immediate (closed connection); then the alive round waits its window.
  expect_named(outcomes, 2, "Unavailable", "rank 2 (host " + this_host() + ")",
               kFailTimeout.count() / 1000.0 + 4, "peer closed the connection");
}

TEST(GlooFailure, StoppedRankIsNamedWithinTheTimeout) {
  auto outcomes = lose_a_rank(1, Fate::kStop);
  // The collective times out, then the alive round waits its window (≤ the timeout). The first
  // rank to time out closes its connections: the others fail at once, with a closed connection,
  // and run the same round; whichever names rank 1 first gives the cause.
  const std::string who = "rank 1 (host " + this_host() + ")";
  int causes = 0;
  for (int r : {0, 2, 3}) {
    const std::string& rep = outcomes[static_cast<size_t>(r)].report;
    if (rep.find(who + " stopped answering first (") != std::string::npos) ++causes;
  }
  EXPECT_EQ(causes, 1);
  for (int r : {0, 2, 3}) {
    const std::string& rep = outcomes[static_cast<size_t>(r)].report;
    EXPECT_NE(rep.find(who + " stopped answering"), std::string::npos) << rep;
    EXPECT_EQ(rep.find("did not answer"), std::string::npos) << rep;
    EXPECT_LT(std::stod(rep.substr(rep.rfind('|') + 1)), 2 * kFailTimeout.count() / 1000.0 + 4)
        << rep;
  }
}

TEST(GlooFailure, KilledStoreHostIsNamed) {
  auto outcomes = lose_a_rank(0, Fate::kKill);
  expect_named(outcomes, 0, "Unavailable", "the store host, rank 0, is gone", 2 * 4.0 + 4);
}

// Ranks blocked in other groups when a rank dies (what a training step looks like: each rank is
// in whichever collective it reached). 2x2 mesh, fsdp groups {0,1} {2,3}, data groups {0,2}
// {1,3}; rank 3 dies. Rank 1 is in data {1,3} with it; rank 0 waits in fsdp {0,1} for rank 1,
// rank 2 in data {0,2} for rank 0: neither shares a collective with rank 3. Every survivor must
// name rank 3, and only rank 3; exactly one line gives it as the cause.
TEST(GlooFailure, RanksBlockedInOtherGroupsNameOnlyTheDeadRank) {
  const int world = 4;
  auto outcomes = run_ranks(world,
                            [](int rank, std::shared_ptr<Store> store) -> std::string {
                              auto fsdp = make_gloo_communicator(
                                  store, rank < 2 ? "fsdp[d=0]" : "fsdp[d=1]",
                                  rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, rank,
                                  cpu_options(kFailTimeout));
                              if (!fsdp.ok()) return "create: " + fsdp.status().to_string();
                              auto data = make_gloo_communicator(
                                  store, rank % 2 ? "data[f=1]" : "data[f=0]",
                                  rank % 2 ? std::vector<int>{1, 3} : std::vector<int>{0, 2}, rank,
                                  cpu_options(kFailTimeout));
                              if (!data.ok()) return "create: " + data.status().to_string();
                              // Every pair of both groups is connected before rank 3 dies (its
                              // creation could finish while a peer's was still connecting).
                              for (auto* g : {&*fsdp, &*data}) {
                                Status b = (*g)->barrier();
                                if (!b.ok()) return "barrier: " + b.to_string();
                              }
                              if (rank == 3) raise(SIGKILL);
                              Communicator& comm = rank == 0 ? **fsdp : **data;
                              std::vector<float> buf(1000, 1.f);
                              auto t0 = Clock::now();
                              Status s = comm.all_reduce(view(buf), ReduceOp::kSum);
                              if (s.ok()) return "no failure";
                              std::ostringstream os;
                              os << s.message() << "|" << since(t0);
                              return os.str();
                            },
                            60, {3});
  const std::string culprit = "rank 3 (host " + this_host() + ")";
  std::vector<int> causes;  // whoever names it first gives the cause (usually rank 1)
  for (int r = 0; r < 3; ++r) {
    const std::string& rep = outcomes[static_cast<size_t>(r)].report;
    if (rep.find(culprit + " stopped answering first (peer closed the connection)|") !=
        std::string::npos) {
      causes.push_back(r);
    }
  }
  ASSERT_EQ(causes.size(), 1u) << outcomes[0].report << "\n"
                               << outcomes[1].report << "\n"
                               << outcomes[2].report;
  for (int r = 0; r < 3; ++r) {
    const std::string& rep = outcomes[static_cast<size_t>(r)].report;
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + rep);
    const size_t bar = rep.rfind('|');
    ASSERT_NE(bar, std::string::npos);
    const std::string message = rep.substr(0, bar);
    if (r != causes[0]) {
      EXPECT_NE(message.find(str_cat("stopping: ", culprit, " stopped answering (rank ", causes[0],
                                     " reports it)")),
                std::string::npos);
    }
    EXPECT_EQ(message.find("did not answer"), std::string::npos);
    // Prompt: one alive window, not a window per group the failure had to travel through.
    EXPECT_LT(std::stod(rep.substr(bar + 1)), kFailTimeout.count() / 1000.0 + 3);
  }
}

TEST(GlooFailure, RankThatNeverArrivesFailsCreationWithItsName) {
  const Millis timeout{2000};
  auto outcomes = run_ranks(
      3,
      [&](int rank, std::shared_ptr<Store> store) -> std::string {
        if (rank == 2) return "absent";
        auto t0 = Clock::now();
        auto comm = make_gloo_communicator(store, "world", {0, 1, 2}, rank, cpu_options(timeout));
        if (comm.ok()) return "created without rank 2";
        std::ostringstream os;
        os << status_code_name(comm.status().code()) << "|" << comm.status().message() << "|"
           << since(t0);
        return os.str();
      },
      30);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE(outcomes[r].report);
    EXPECT_EQ(outcomes[r].report.rfind(
                  "DeadlineExceeded|creating gloo world (ranks 0,1,2): rank 2 did not arrive", 0),
              0u);
    EXPECT_LT(std::stod(outcomes[r].report.substr(outcomes[r].report.rfind('|') + 1)), 2 + 3.0);
  }
}

#else

TEST(GlooCommunicator, UnimplementedWithoutGloo) {
  auto comm = make_gloo_communicator(nullptr, "world", {0, 1}, 0, cpu_options());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnimplemented);
}

#endif  // AX_HAVE_GLOO

}  // namespace
}  // namespace ax::train::comm
