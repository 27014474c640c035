// Point-to-point on Gloo (communicator.h's exchange, send, recv) across real processes: every
// rank is a fork of this test process (rank_processes.h), rank 0 hosts the TCP store. Payloads
// are checked bit for bit; a peer that never posts its side, and a neighbour killed or stopped in
// the middle of a ring, must be named the way a failed collective names a rank.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "ax/common/build_config.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/comm/store.h"
#include "rank_processes.h"

namespace ax::train::comm {
namespace {

float value(int rank, int64_t i) { return static_cast<float>((rank * 37 + i * 11) % 1009 - 500); }
uint16_t bf(int rank, int64_t i) { return bf16_from_f32(value(rank, i) / 64.0f + 0.3f); }

Tensor f32(std::vector<float>& v) { return Tensor(v.data(), DType::kF32, {int64_t(v.size())}); }
Tensor b16(std::vector<uint16_t>& v) { return Tensor(v.data(), DType::kBF16, {int64_t(v.size())}); }

// "what[i] = got, want w; " for the first difference, "" when equal.
template <typename T>
std::string diff(const std::string& what, const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size()) return what + ": size differs; ";
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      std::ostringstream os;
      os << what << "[" << i << "] = " << +got[i] << ", want " << +want[i] << "; ";
      return os.str();
    }
  }
  return "";
}

std::vector<float> f32_values(int rank, int64_t n, int64_t offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(rank, i + offset);
  return v;
}
std::vector<uint16_t> bf16_values(int rank, int64_t n, int64_t offset) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = bf(rank, i + offset);
  return v;
}

std::string this_host() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

#if AX_HAVE_GLOO

// A ring of the group's ranks (group rank = global rank here), one batch per round: an f32 and
// a bf16 buffer to the right, the same from the left, the receives listed first; then a halo
// exchange (ring attention's pattern: to both neighbours and from both). Sizes are odd.
std::string check_ring(Communicator& c, int64_t n) {
  const int p = c.size(), me = c.rank();
  const int right = (me + 1) % p, left = (me + p - 1) % p;
  std::string errors;
  const int64_t bytes0 = c.bytes_moved();
  std::vector<float> out = f32_values(me, n, 0), in(static_cast<size_t>(n), -1.f);
  std::vector<uint16_t> out16 = bf16_values(me, n + 2, 5), in16(static_cast<size_t>(n + 2), 0);
  Status s = c.exchange({P2POp::recv(f32(in), left), P2POp::send(f32(out), right),
                         P2POp::recv(b16(in16), left), P2POp::send(b16(out16), right)});
  if (!s.ok()) return "ring: " + s.to_string() + "; ";
  errors += diff("ring f32 from the left", in, f32_values(left, n, 0));
  errors += diff("ring bf16 from the left", in16, bf16_values(left, n + 2, 5));
  errors += diff("ring: a send's buffer is unchanged", out, f32_values(me, n, 0));

  std::vector<float> to_left = f32_values(me, n, 1000), to_right = f32_values(me, n, 2000);
  std::vector<float> from_left(static_cast<size_t>(n), -1.f),
      from_right(static_cast<size_t>(n), -1.f);
  s = c.exchange({P2POp::send(f32(to_left), left), P2POp::send(f32(to_right), right),
                  P2POp::recv(f32(from_right), right), P2POp::recv(f32(from_left), left)});
  if (!s.ok()) return errors + "halo: " + s.to_string() + "; ";
  // What the right neighbour sent to its left, and the left neighbour to its right.
  errors += diff("halo from the right", from_right, f32_values(right, n, 1000));
  errors += diff("halo from the left", from_left, f32_values(left, n, 2000));

  const int64_t want = 2 * n * 4 + 2 * (n + 2) * 2 + 4 * n * 4;
  if (c.bytes_moved() - bytes0 != want) {
    errors += "bytes_moved " + std::to_string(c.bytes_moved() - bytes0) + ", want " +
              std::to_string(want) + "; ";
  }
  return errors;
}

class GlooRing : public ::testing::TestWithParam<int> {};

TEST_P(GlooRing, EachRankSendsRightAndReceivesLeftInOneBatch) {
  const int world = GetParam();
  auto outcomes = run_ranks(
      world,
      [world](int rank, std::shared_ptr<Store> store) -> std::string {
        auto comm = make_gloo_communicator(store, "ring", iota(world), rank, cpu_options());
        if (!comm.ok()) return comm.status().to_string();
        std::string errors;
        for (int64_t n : {1, 7, 1001, 12345}) errors += check_ring(**comm, n);
        return errors.empty() ? "OK" : errors;
      },
      120);
  for (int r = 0; r < world; ++r) EXPECT_EQ(outcomes[r].report, "OK") << "rank " << r;
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooRing, ::testing::Values(1, 2, 3, 4));

// A pipeline of three stages with one-op calls: activations (f32) flow forward, gradients (bf16)
// back; every stage changes what it passes on, so a message delivered to the wrong stage or
// twice shows. Stage 1's group rank differs from its global rank (group {2,5,7}).
TEST(GlooP2P, PipelineSendsActivationsForwardAndGradientsBack) {
  auto outcomes = run_ranks(
      8,
      [](int rank, std::shared_ptr<Store> store) -> std::string {
        const std::vector<int> stages = {2, 5, 7};
        int stage = -1;
        for (int s = 0; s < 3; ++s) stage = stages[static_cast<size_t>(s)] == rank ? s : stage;
        if (stage < 0) return "OK";
        auto comm = make_gloo_communicator(store, "pipe[d=0]", stages, rank, cpu_options());
        if (!comm.ok()) return comm.status().to_string();
        Communicator& c = **comm;
        std::string errors;
        auto expect_ok = [&](const std::string& what, const Status& s) {
          if (!s.ok()) errors += what + ": " + s.to_string() + "; ";
          return s.ok();
        };
        const int64_t n = 1001, g = 999;
        for (int micro = 0; micro < 3; ++micro) {
          std::vector<float> act = f32_values(0, n, micro);
          if (stage > 0 && expect_ok("recv act", c.recv(f32(act), stage - 1))) {
            std::vector<float> want = f32_values(0, n, micro);
            for (float& x : want) x += static_cast<float>(stage);
            errors += diff("activation " + std::to_string(micro), act, want);
          }
          for (float& x : act) x += 1.f;
          if (stage < 2) expect_ok("send act", c.send(f32(act), stage + 1));
        }
        for (int micro = 0; micro < 3; ++micro) {
          std::vector<uint16_t> grad = bf16_values(micro, g, 0);
          if (stage < 2 && expect_ok("recv grad", c.recv(b16(grad), stage + 1))) {
            std::vector<uint16_t> want = bf16_values(micro, g, 0);
            for (uint16_t& x : want) x = static_cast<uint16_t>(x + 2 - stage);
            errors += diff("gradient " + std::to_string(micro), grad, want);
          }
          // The next bf16 up: the bits must arrive exactly.
          for (uint16_t& x : grad) x = static_cast<uint16_t>(x + 1);
          if (stage > 0) expect_ok("send grad", c.send(b16(grad), stage - 1));
        }
        const int64_t want_bytes = (stage > 0 && stage < 2 ? 2 : 1) * 3 * (n * 4 + g * 2);
        if (c.bytes_moved() != want_bytes) {
          errors += "bytes_moved " + std::to_string(c.bytes_moved()) + ", want " +
                    std::to_string(want_bytes) + "; ";
        }
        return errors.empty() ? "OK" : errors;
      },
      120);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(outcomes[r].report, "OK") << "rank " << r;
}

// A group of one: sends to itself meet its receives (copies); what breaks the contract is an
// InvalidArgument before anything moves (the messages end in the place that returned them), and
// leaves the group usable.
TEST(GlooP2P, GroupOfOneSendsToItselfAndRejectsWhatCannotBeMet) {
  auto comm = make_gloo_communicator(nullptr, "pipe", {3}, 3, cpu_options());
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  Communicator& c = **comm;
  std::vector<float> a = f32_values(3, 7, 0), got(7, 0.f);
  std::vector<uint16_t> h = bf16_values(3, 5, 0), got16(5, 0);
  // The first recv from itself meets the first send to itself.
  Status mismatch = c.exchange({P2POp::send(f32(a), 0), P2POp::recv(b16(got16), 0),
                                P2POp::send(b16(h), 0), P2POp::recv(f32(got), 0)});
  EXPECT_EQ(mismatch.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(mismatch.message().rfind(
                "exchange on gloo pipe (ranks 3): send 0 to this rank is (7) f32 but the recv that "
                "meets it is (5) bf16",
                0),
            0u);
  ASSERT_TRUE(c.exchange({P2POp::send(f32(a), 0), P2POp::send(b16(h), 0), P2POp::recv(f32(got), 0),
                          P2POp::recv(b16(got16), 0)})
                  .ok());
  EXPECT_EQ(got, a);
  EXPECT_EQ(got16, h);
  EXPECT_EQ(c.bytes_moved(), 2 * (7 * 4 + 5 * 2));

  Status s = c.send(f32(a), 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message().rfind(
          "exchange on gloo pipe (ranks 3): 1 send(s) to this rank (0) and 0 recv(s) from it; "
          "each send to itself needs a recv in the same call",
          0),
      0u);
  s = c.recv(f32(got), 1);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message().rfind(
          "recv from group rank 1 on gloo pipe (ranks 3): peer 1 is not a group rank (0..0)", 0),
      0u);
  int32_t ints[2] = {};
  s = c.exchange({P2POp::send(Tensor(ints, DType::kI32, {2}), 0),
                  P2POp::recv(Tensor(ints, DType::kI32, {2}), 0)});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("has dtype i32; this backend takes f32 or bf16"), std::string::npos)
      << s.message();
  EXPECT_EQ(c.bytes_moved(), 2 * (7 * 4 + 5 * 2));
  EXPECT_TRUE(c.exchange({}).ok());
}

// --- failures -------------------------------------------------------------------------------

// "<code>|<message>|<seconds>" of a failed call, with " [not sticky]" when the next call on the
// communicator does not return the same failure.
std::string failure_report(Communicator& c, const Status& s, Clock::time_point t0) {
  if (s.ok()) return "no failure";
  std::ostringstream os;
  os << status_code_name(s.code()) << "|" << s.message() << "|" << since(t0);
  if (c.barrier().message() != s.message()) os << " [not sticky]";
  return os.str();
}

// Rank 0 of a group of three waits for a transfer from (or to) rank 1, which is alive but never
// posts its side; rank 2 takes no part. Rank 0 must fail after the timeout naming rank 1 only:
// rank 2 is not at fault however long it stays away.
std::string never_posted(P2POp::Kind kind, Millis timeout) {
  auto outcomes = run_ranks(
      3,
      [=](int rank, std::shared_ptr<Store> store) -> std::string {
        auto comm = make_gloo_communicator(store, "pipe", {0, 1, 2}, rank, cpu_options(timeout));
        if (!comm.ok()) return "create: " + comm.status().to_string();
        if (rank != 0) {  // alive and connected until rank 0 has its verdict
          StatusOr<std::string> done = store->get("test/done", Millis(30000));
          return done.ok() ? "OK" : done.status().to_string();
        }
        std::vector<float> buf(1 << 20, 1.f);  // 4 MiB: more than the sockets buffer
        const auto t0 = Clock::now();
        Status s =
            kind == P2POp::Kind::kRecv ? (*comm)->recv(f32(buf), 1) : (*comm)->send(f32(buf), 1);
        std::string report = failure_report(**comm, s, t0);
        (void)store->set("test/done", "1");
        return report;
      },
      60);
  EXPECT_EQ(outcomes[1].report, "OK");
  EXPECT_EQ(outcomes[2].report, "OK");
  return outcomes[0].report;
}

void expect_never_posted_named(const std::string& report, const std::string& op) {
  SCOPED_TRACE(report);
  const size_t bar = report.rfind('|');
  ASSERT_NE(bar, std::string::npos);
  EXPECT_EQ(report.substr(0, bar),
            "DeadlineExceeded|" + op + " on gloo pipe (ranks 0,1,2) failed: rank 1 (host " +
                this_host() + ") stopped answering first (timed out after 1.5 s)");
  // The timeout, up to 1 s for a closed store connection, the alive window (1.5 s).
  const double seconds = std::stod(report.substr(bar + 1));
  EXPECT_GE(seconds, 1.5);
  EXPECT_LT(seconds, 1.5 + 1 + 1.5 + 2);
}

TEST(GlooP2PFailure, RecvFromAPeerThatNeverSendsNamesThatPeer) {
  expect_never_posted_named(never_posted(P2POp::Kind::kRecv, Millis(1500)), "recv from rank 1");
}

TEST(GlooP2PFailure, SendToAPeerThatNeverReceivesNamesThatPeer) {
  expect_never_posted_named(never_posted(P2POp::Kind::kSend, Millis(1500)), "send to rank 1");
}

constexpr Millis kFailTimeout{3000};

enum class Fate { kKill, kStop };

// A ring of four exchanging every round; rank 2 is killed or stopped after three rounds. Its
// neighbours (1 sends to it, 3 receives from it) fail on it; rank 0 fails when they close their
// connections. Exactly one survivor names rank 2 as the cause, the others repeat it.
void expect_ring_names_lost_neighbour(Fate fate) {
  const int world = 4, victim = 2;
  auto outcomes = run_ranks(
      world,
      [=](int rank, std::shared_ptr<Store> store) -> std::string {
        auto comm =
            make_gloo_communicator(store, "ring", iota(world), rank, cpu_options(kFailTimeout));
        if (!comm.ok()) return "create: " + comm.status().to_string();
        std::vector<float> out(1000, 1.f), in(1000);
        for (int step = 0;; ++step) {
          if (rank == victim && step == 3) raise(fate == Fate::kKill ? SIGKILL : SIGSTOP);
          const auto t0 = Clock::now();
          Status s = (*comm)->exchange({P2POp::send(f32(out), (rank + 1) % world),
                                        P2POp::recv(f32(in), (rank + world - 1) % world)});
          if (!s.ok()) return failure_report(**comm, s, t0);
          if (step > 1000) return "no failure after 1000 steps";
        }
      },
      60, {victim});
  const std::string culprit = "rank 2 (host " + this_host() + ")";
  const std::string why =
      fate == Fate::kKill ? "peer closed the connection" : "timed out after 3 s";
  int causes = 0;
  for (int r : {0, 1, 3}) {
    const std::string& rep = outcomes[static_cast<size_t>(r)].report;
    SCOPED_TRACE("rank " + std::to_string(r) + ": " + rep);
    const size_t bar = rep.rfind('|');
    ASSERT_NE(bar, std::string::npos);
    const std::string message = rep.substr(0, bar);
    EXPECT_NE(message.find(" on gloo ring (ranks 0,1,2,3) failed: "), std::string::npos);
    EXPECT_TRUE(message.find("|send to rank ") != std::string::npos ||
                message.find("|recv from rank ") != std::string::npos);
    if (message.find(culprit + " stopped answering first (" + why + ")") != std::string::npos) {
      ++causes;
    } else {
      EXPECT_NE(message.find("stopping: " + culprit + " stopped answering (rank "),
                std::string::npos);
    }
    EXPECT_EQ(message.find("did not answer"), std::string::npos);
    EXPECT_EQ(rep.find("[not sticky]"), std::string::npos);
    EXPECT_LT(std::stod(rep.substr(bar + 1)), 2 * kFailTimeout.count() / 1000.0 + 4);
  }
  EXPECT_EQ(causes, 1);
}

TEST(GlooP2PFailure, KilledNeighbourInARingIsNamed) {
  expect_ring_names_lost_neighbour(Fate::kKill);
}

TEST(GlooP2PFailure, StoppedNeighbourInARingIsNamed) {
  expect_ring_names_lost_neighbour(Fate::kStop);
}

#else

TEST(GlooP2P, UnimplementedWithoutGloo) {
  auto comm = make_gloo_communicator(nullptr, "pipe", {0, 1}, 0, cpu_options());
  EXPECT_EQ(comm.status().code(), StatusCode::kUnimplemented);
}

#endif  // AX_HAVE_GLOO

}  // namespace
}  // namespace ax::train::comm
