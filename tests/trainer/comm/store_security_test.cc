// The TCP store admits only the job's ranks (docs/threat-model.md): a stranger can neither read
// nor write a key and is logged once, another job's secret fails at once, a listener that does
// not know the secret is not taken for rank 0, the job's ranks meet while strangers hammer the
// port, the server listens only on the coordinator's address, and what it holds is bounded.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ax/trainer/comm/store.h"
#include "store_stranger.h"
#include "store_wire.h"

namespace ax::train::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kSecret = "5ec2e7005ec2e7005ec2e7005ec2e700";
constexpr const char* kOtherJobsSecret = "0b7e200b0b7e200b0b7e200b0b7e200b";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::shared_ptr<TcpStore> rank0(int world) {
  StatusOr<std::shared_ptr<TcpStore>> s =
      make_tcp_store({"127.0.0.1:0", true, 0, world, Millis(5000), kSecret});
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? *s : nullptr;
}

StatusOr<std::shared_ptr<TcpStore>> rank(const TcpStore& server, int r, int world,
                                         const std::string& secret, Millis timeout = Millis(5000)) {
  return make_tcp_store({server.bound_address(), false, r, world, timeout, secret});
}

int port_of(const TcpStore& s) {
  const std::string a = s.bound_address();
  return std::atoi(a.substr(a.rfind(':') + 1).c_str());
}

// A raw TCP connection to ip:port, or -1.
int dial(const char* ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, ip, &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the peer sends until it closes the connection.
std::string read_all(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(TcpStoreSecurity, StrangerCanNeitherReadNorWriteAndIsLoggedOnce) {
  std::shared_ptr<TcpStore> server = rank0(2);
  ASSERT_TRUE(server);
  ASSERT_TRUE(server->set("gloo/world/0", "10.0.0.1:4000 the job's address").ok());
  ::testing::internal::CaptureStderr();
  // Requests straight away, without the handshake: a write and a read.
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = dial("127.0.0.1", port_of(*server));
    ASSERT_GE(fd, 0);
    const std::string requests =
        testing::requests_without_handshake("gloo/world/1", "a stranger's address", "gloo/world/0");
    ASSERT_EQ(send(fd, requests.data(), requests.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(requests.size()));
    const std::string got = read_all(fd);  // the greeting, the refusal, then the close
    close(fd);
    EXPECT_EQ(got.find("the job's address"), std::string::npos);
    ASSERT_EQ(got.size(), 4 + wire::kGreetingBytes + 4 + 1 + 4 +
                              std::string("refused: this connection did not prove the job "
                                          "secret")
                                  .size())
        << got;
    EXPECT_EQ(got[4 + wire::kGreetingBytes + 4], static_cast<char>(wire::kRefused));
  }
  // The job goes on: its rank 1 gets in, the key is intact, the stranger's never landed.
  StatusOr<std::shared_ptr<TcpStore>> rank1 = rank(*server, 1, 2, kSecret);
  ASSERT_TRUE(rank1.ok()) << rank1.status().to_string();
  EXPECT_EQ(*(*rank1)->get("gloo/world/0", Millis(1000)), "10.0.0.1:4000 the job's address");
  EXPECT_EQ((*rank1)->wait({"gloo/world/1"}, Millis(200)).code(), StatusCode::kDeadlineExceeded);
  rank1->reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(log, "refused the connection from 127.0.0.1:"), 1u) << log;
  EXPECT_NE(log.find("sent a request without proving the job secret first"), std::string::npos)
      << log;
  EXPECT_NE(log.find("AX_JOB_SECRET"), std::string::npos) << log;
  EXPECT_EQ(log.find(kSecret), std::string::npos) << log;
}

TEST(TcpStoreSecurity, RankWithAnotherJobsSecretFailsAtOnceSayingWhy) {
  std::shared_ptr<TcpStore> server = rank0(3);
  ASSERT_TRUE(server);
  Clock::time_point start = Clock::now();
  StatusOr<std::shared_ptr<TcpStore>> stray = rank(*server, 1, 3, kOtherJobsSecret, Millis(30000));
  EXPECT_LT(seconds_since(start), 3.0);  // not after the 30 s connect timeout
  ASSERT_EQ(stray.status().code(), StatusCode::kFailedPrecondition) << stray.status().to_string();
  const std::string m = stray.status().message();
  EXPECT_NE(m.find("refused rank 1"), std::string::npos) << m;
  EXPECT_NE(m.find("AX_JOB_SECRET"), std::string::npos) << m;
  EXPECT_NE(m.find("a rank of another job"), std::string::npos) << m;
  EXPECT_NE(m.find("outside ax's launch path"), std::string::npos) << m;
  EXPECT_EQ(m.find(kOtherJobsSecret), std::string::npos) << m;
  // The job's own rank still gets in.
  StatusOr<std::shared_ptr<TcpStore>> own = rank(*server, 2, 3, kSecret);
  EXPECT_TRUE(own.ok()) << own.status().to_string();
}

// Only a connection that proved the job secret can say a rank, so strangers that come and go
// (every way in, a rank-announcing frame sent without the handshake, another job's rank 2) never
// make a rank of the job look gone (kStoreFirstGoneKey, read to name a failed rank).
TEST(TcpStoreSecurity, StrangersThatLeaveAreNeverRecordedAsAGoneRank) {
  std::shared_ptr<TcpStore> server = rank0(3);
  ASSERT_TRUE(server);
  StatusOr<std::shared_ptr<TcpStore>> one = rank(*server, 1, 3, kSecret);
  StatusOr<std::shared_ptr<TcpStore>> two = rank(*server, 2, 3, kSecret);
  ASSERT_TRUE(one.ok() && two.ok());
  ::testing::internal::CaptureStderr();
  testing::Stranger stranger(port_of(*server), 2);
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = dial("127.0.0.1", port_of(*server));
    ASSERT_GE(fd, 0);
    std::string says_rank_1(1, static_cast<char>(wire::kRank));
    wire::put_u32(says_rank_1, 1);
    const std::string request = wire::frame(says_rank_1);
    send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    read_all(fd);  // the greeting, the refusal, the close
    close(fd);
  }
  EXPECT_FALSE(rank(*server, 2, 3, kOtherJobsSecret).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const testing::Stranger::Tally tally = stranger.stop();
  ::testing::internal::GetCapturedStderr();
  EXPECT_GT(tally.connections, 0);
  EXPECT_EQ(tally.answered, 0);
  EXPECT_EQ(server->get(kStoreFirstGoneKey, Millis(300)).status().code(),
            StatusCode::kDeadlineExceeded);
  two->reset();  // a rank of the job leaves: that one counts
  StatusOr<std::string> gone = server->get(kStoreFirstGoneKey, Millis(2000));
  ASSERT_TRUE(gone.ok()) << gone.status().to_string();
  EXPECT_EQ(*gone, "2");
}

// A listener on the coordinator's port that speaks the greeting but does not hold the secret
// (a stranger who took the port first), or is another program altogether.
class FakeRankZero {
 public:
  explicit FakeRankZero(std::string greeting_and_answer) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 4);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this, reply = std::move(greeting_and_answer)] {
      int c = accept(fd_, nullptr, nullptr);
      if (c < 0) return;
      send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      char buf[256];
      while (recv(c, buf, sizeof(buf), 0) > 0) {
      }
      close(c);
    });
  }
  ~FakeRankZero() {
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

TEST(TcpStoreSecurity, ListenerWithoutTheSecretIsNotTakenForRankZero) {
  std::string greeting(wire::kGreetingMagic);
  greeting.append(wire::kNonceBytes, 'n');
  std::string ok_without_proof(1, static_cast<char>(wire::kOk));
  ok_without_proof.append(wire::kProofBytes, 'p');
  FakeRankZero impostor(wire::frame(greeting) + wire::frame(ok_without_proof));
  StatusOr<std::shared_ptr<TcpStore>> c =
      make_tcp_store({impostor.address(), false, 1, 2, Millis(5000), kSecret});
  ASSERT_EQ(c.status().code(), StatusCode::kFailedPrecondition) << c.status().to_string();
  EXPECT_NE(c.status().message().find("does not know this job's secret"), std::string::npos)
      << c.status().message();

  FakeRankZero web_server("HTTP/1.1 400 Bad Request\r\n\r\n");
  c = make_tcp_store({web_server.address(), false, 1, 2, Millis(5000), kSecret});
  ASSERT_EQ(c.status().code(), StatusCode::kFailedPrecondition) << c.status().to_string();
  EXPECT_NE(c.status().message().find("is not an ax TCP store"), std::string::npos)
      << c.status().message();
}

TEST(TcpStoreSecurity, RanksMeetWithinTheTimeoutWhileStrangersHammerThePort) {
  constexpr int kWorld = 8;
  std::shared_ptr<TcpStore> server = rank0(kWorld);
  ASSERT_TRUE(server);
  testing::Stranger stranger(port_of(*server), 4);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the port is busy before
  Clock::time_point start = Clock::now();
  std::vector<Status> results(kWorld);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kWorld; ++r) {
    ranks.emplace_back([&, r] {
      std::shared_ptr<TcpStore> store = server;
      if (r > 0) {
        StatusOr<std::shared_ptr<TcpStore>> c = rank(*server, r, kWorld, kSecret, Millis(20000));
        if (!c.ok()) {
          results[r] = c.status();
          return;
        }
        store = *c;
      }
      StatusOr<std::vector<std::string>> all = store_all_gather(
          *store, "addresses", r, kWorld, "rank " + std::to_string(r), Millis(20000));
      results[r] = all.ok() ? store->sync(Millis(20000)) : all.status();
      if (all.ok() && (*all)[kWorld - 1] != "rank " + std::to_string(kWorld - 1)) {
        results[r] = DataLoss("wrong value ", (*all)[kWorld - 1]);
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  const double met_after = seconds_since(start);
  testing::Stranger::Tally tally = stranger.stop();
  for (int r = 0; r < kWorld; ++r)
    EXPECT_TRUE(results[r].ok()) << r << ": " << results[r].to_string();
  EXPECT_LT(met_after, 20.0);
  EXPECT_GT(tally.connections, kWorld);  // the stranger did hammer
  EXPECT_GT(tally.other_job_greetings, 0);
  EXPECT_GT(tally.refused, 0);
  EXPECT_EQ(tally.answered, 0);
  std::printf("8 ranks met in %.2f s while a stranger made %d connections (%d refused)\n",
              met_after, tally.connections, tally.refused);
}

TEST(TcpStoreSecurity, ListensOnlyOnTheCoordinatorsAddress) {
  std::shared_ptr<TcpStore> server = rank0(2);
  ASSERT_TRUE(server);
  int on_coordinator = dial("127.0.0.1", port_of(*server));
  EXPECT_GE(on_coordinator, 0);
  if (on_coordinator >= 0) close(on_coordinator);
  // Another address of this host (all of 127/8 is loopback) at the same port: nobody listens.
  int elsewhere = dial("127.0.0.2", port_of(*server));
  EXPECT_LT(elsewhere, 0) << "the store answers on 127.0.0.2 too, not only on its coordinator";
  if (elsewhere >= 0) close(elsewhere);
}

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }

 private:
  const char* name_;
};

TEST(TcpStoreSecurity, WhatTheStoreHoldsIsBoundedAndTheErrorNamesTheKey) {
  ScopedEnv keys("AX_STORE_MAX_KEYS", "4");
  ScopedEnv bytes("AX_STORE_MAX_BYTES", "64");
  std::shared_ptr<TcpStore> s = rank0(1);
  ASSERT_TRUE(s);
  for (const char* k : {"a", "b", "c", "d"}) ASSERT_TRUE(s->set(k, "1").ok()) << k;
  Status st = s->set("e", "1");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_NE(st.message().find("setting 'e'"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("AX_STORE_MAX_KEYS"), std::string::npos) << st.to_string();
  StatusOr<int64_t> added = s->add("counter", 1);
  EXPECT_EQ(added.status().code(), StatusCode::kResourceExhausted) << added.status().to_string();
  EXPECT_NE(added.status().message().find("'counter'"), std::string::npos)
      << added.status().to_string();
  st = s->set("a", std::string(70, 'x'));
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_NE(st.message().find("setting 'a' (70 bytes)"), std::string::npos) << st.to_string();
  EXPECT_NE(st.message().find("AX_STORE_MAX_BYTES"), std::string::npos) << st.to_string();
  EXPECT_TRUE(s->set("a", "overwritten").ok());  // an existing key within the bytes: fine
  EXPECT_EQ(*s->erase_prefix("a"), 1);
  EXPECT_TRUE(s->set("e", "1").ok());  // the erased key made room
  EXPECT_EQ(s->get("a", Millis(0)).status().code(), StatusCode::kDeadlineExceeded);
  st = s->set(std::string(5000, 'k'), "1");
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
  EXPECT_NE(st.message().find("5000 bytes long"), std::string::npos) << st.to_string();
}

TEST(TcpStoreSecurity, MalformedBoundIsAnErrorNamingTheVariable) {
  ScopedEnv keys("AX_STORE_MAX_KEYS", "lots");
  StatusOr<std::shared_ptr<TcpStore>> s =
      make_tcp_store({"127.0.0.1:0", true, 0, 1, Millis(5000), kSecret});
  ASSERT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().to_string();
  EXPECT_NE(s.status().message().find("AX_STORE_MAX_KEYS"), std::string::npos)
      << s.status().to_string();
}

TEST(TcpStoreSecurity, StoreWithoutASecretIsRefused) {
  StatusOr<std::shared_ptr<TcpStore>> s =
      make_tcp_store({"127.0.0.1:0", true, 0, 1, Millis(5000), ""});
  ASSERT_EQ(s.status().code(), StatusCode::kInvalidArgument) << s.status().to_string();
  EXPECT_NE(s.status().message().find("no job secret"), std::string::npos)
      << s.status().to_string();
}

TEST(JobStoreSecret, ComesFromTheLaunchOrFailsSayingSo) {
  job::JobContext ctx;
  ctx.world = 4;
  ctx.rank = 2;
  StatusOr<std::string> none = job_store_secret(ctx, Millis(100));
  ASSERT_EQ(none.status().code(), StatusCode::kFailedPrecondition) << none.status().to_string();
  for (const char* part :
       {"rank 2 of 4 has no job secret", "AX_JOB_SECRET is not set", "outside ax's launch path",
        "ax-launch", "spank_ax.so", "srun --mpi=pmix"}) {
    EXPECT_NE(none.status().message().find(part), std::string::npos) << part;
  }
  ctx.secret = kSecret;
  EXPECT_EQ(*job_store_secret(ctx, Millis(100)), kSecret);
  // A single process makes its own, fresh each time.
  job::JobContext single;
  StatusOr<std::string> a = job_store_secret(single, Millis(100));
  StatusOr<std::string> b = job_store_secret(single, Millis(100));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_NE(*a, *b);
}

}  // namespace
}  // namespace ax::train::comm
