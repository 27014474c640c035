// The bootstrap stores with real threads and real processes: TCP (server thread in "rank 0"),
// file (a temporary directory), the prefix store, barrier/all-gather timeouts that name the
// missing ranks, a killed server, and ax-store-check run as 8 processes.
#include "ax/trainer/comm/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ax/common/build_config.h"
#include "ax/common/strings.h"
#include "test_files.h"

extern char** environ;

namespace ax::train::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kWorld = 8;
constexpr const char* kSecret = "0123456789abcdef0123456789abcdef";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One store per rank of a world, rank 0 first (it may host the others' server).
using Factory = std::function<std::shared_ptr<Store>(int rank, int world)>;

Factory tcp_factory() {
  auto address = std::make_shared<std::string>();
  return [address](int rank, int world) -> std::shared_ptr<Store> {
    TcpStoreOptions o;
    o.host_port = rank == 0 ? "127.0.0.1:0" : *address;
    o.is_server = rank == 0;
    o.rank = rank;
    o.world = world;
    o.connect_timeout = Millis(5000);
    o.secret = kSecret;
    StatusOr<std::shared_ptr<TcpStore>> s = make_tcp_store(o);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (!s.ok()) return nullptr;
    if (rank == 0) *address = (*s)->bound_address();
    return *s;
  };
}

Factory file_factory() {
  std::string dir = ax::testing::temp_dir("file-store");
  return [dir](int rank, int world) -> std::shared_ptr<Store> {
    StatusOr<std::shared_ptr<Store>> s = make_file_store(dir + "/store", rank, world);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? *s : nullptr;
  };
}

// The stores of one world. Clients go first, as ranks would leave a job: rank 0's server
// otherwise waits for them (up to its linger time) when its store is destroyed.
struct World {
  std::vector<std::shared_ptr<Store>> stores;
  ~World() {
    while (!stores.empty()) stores.pop_back();
  }
  const std::shared_ptr<Store>& operator[](size_t i) const { return stores[i]; }
};

World make_world(const Factory& factory, int world) {
  World w;
  for (int r = 0; r < world; ++r) w.stores.push_back(factory(r, world));
  return w;
}

// Runs fn(rank) on one thread per rank.
void on_threads(int world, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) threads.emplace_back(fn, r);
  for (std::thread& t : threads) t.join();
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  Factory factory() const { return GetParam() == "tcp" ? tcp_factory() : file_factory(); }
};

TEST_P(StoreTest, SetGetWaitAndValuesAreBytes) {
  auto stores = make_world(factory(), 2);
  ASSERT_TRUE(stores[0] && stores[1]);
  std::string binary("a\0b\xff", 4);
  ASSERT_TRUE(stores[1]->set("k/1", binary).ok());
  StatusOr<std::string> got = stores[0]->get("k/1", Millis(1000));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, binary);
  ASSERT_TRUE(stores[0]->set("k/1", "").ok());  // overwrite with an empty value
  got = stores[1]->get("k/1", Millis(1000));
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, "");
  // A get that waits: the value arrives later from another thread.
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(stores[1]->set("late key", "v").ok());
  });
  Clock::time_point start = Clock::now();
  got = stores[0]->get("late key", Millis(10000));
  late.join();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, "v");
  EXPECT_GE(seconds_since(start), 0.15);
  EXPECT_TRUE(stores[0]->wait({"k/1", "late key"}, Millis(1000)).ok());
}

TEST_P(StoreTest, EightRanksExchangeValues) {
  auto stores = make_world(factory(), kWorld);
  std::atomic<int> good{0};
  on_threads(kWorld, [&](int rank) {
    StatusOr<std::vector<std::string>> all = store_all_gather(
        *stores[rank], "exchange", rank, kWorld, "value of " + std::to_string(rank), Millis(10000));
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    ASSERT_EQ(all->size(), static_cast<size_t>(kWorld));
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ((*all)[r], "value of " + std::to_string(r));
    EXPECT_TRUE(stores[rank]->sync(Millis(10000)).ok());
    EXPECT_TRUE(stores[rank]->sync(Millis(10000)).ok());  // generations do not collide
    ++good;
  });
  EXPECT_EQ(good.load(), kWorld);
}

TEST_P(StoreTest, AddIsAtomicUnderContention) {
  auto stores = make_world(factory(), kWorld);
  const int per_rank = GetParam() == "tcp" ? 200 : 40;
  std::vector<std::vector<int64_t>> seen(kWorld);
  on_threads(kWorld, [&](int rank) {
    for (int i = 0; i < per_rank; ++i) {
      StatusOr<int64_t> v = stores[rank]->add("counter", 1);
      ASSERT_TRUE(v.ok()) << v.status().to_string();
      seen[rank].push_back(*v);
    }
  });
  std::set<int64_t> all;
  for (const auto& s : seen) all.insert(s.begin(), s.end());
  // Every increment returned a distinct value: 1..N, no lost update.
  EXPECT_EQ(all.size(), static_cast<size_t>(kWorld * per_rank));
  EXPECT_EQ(*all.begin(), 1);
  EXPECT_EQ(*all.rbegin(), kWorld * per_rank);
  StatusOr<int64_t> last = stores[0]->add("counter", -5);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(*last, kWorld * per_rank - 5);
  ASSERT_TRUE(stores[0]->set("text", "abc").ok());
  StatusOr<int64_t> bad = stores[1]->add("text", 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'text' is not an integer"), std::string::npos);
}

TEST_P(StoreTest, BarrierTimeoutNamesTheMissingRanks) {
  auto stores = make_world(factory(), kWorld);
  std::vector<Status> results(kWorld);
  Clock::time_point start = Clock::now();
  on_threads(kWorld, [&](int rank) {
    if (rank == 3 || rank == 5) return;  // never arrive
    results[rank] = store_barrier(*stores[rank], "x", rank, kWorld, Millis(500));
  });
  EXPECT_LT(seconds_since(start), 8.0);
  for (int rank : {0, 1, 7}) {
    ASSERT_EQ(results[rank].code(), StatusCode::kDeadlineExceeded) << results[rank].to_string();
    EXPECT_NE(
        results[rank].message().find("barrier 'x': ranks 3, 5 of 8 did not arrive within 0.5 s"),
        std::string::npos)
        << results[rank].message();
  }
  // One missing rank in an all-gather.
  on_threads(3, [&](int rank) {
    if (rank == 2) return;
    StatusOr<std::vector<std::string>> all =
        store_all_gather(*stores[rank], "g", rank, 3, "v", Millis(300));
    ASSERT_FALSE(all.ok());
    EXPECT_NE(all.status().message().find("all-gather 'g': rank 2 of 3 did not arrive within"),
              std::string::npos)
        << all.status().message();
  });
}

TEST_P(StoreTest, GetAndWaitTimeOutNamingTheKeys) {
  auto stores = make_world(factory(), 1);
  ASSERT_TRUE(stores[0]->set("present", "1").ok());
  Clock::time_point start = Clock::now();
  StatusOr<std::string> got = stores[0]->get("absent", Millis(300));
  EXPECT_GE(seconds_since(start), 0.25);
  EXPECT_LT(seconds_since(start), 5.0);
  ASSERT_EQ(got.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(got.status().message().find("key 'absent' not set within 0.3 s"), std::string::npos)
      << got.status().message();
  Status st = stores[0]->wait({"present", "a", "b"}, Millis(200));
  ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("keys 'a', 'b' not set within 0.2 s"), std::string::npos)
      << st.message();
}

TEST_P(StoreTest, PrefixStoresAreSeparateNamespaces) {
  auto stores = make_world(factory(), 1);
  std::shared_ptr<Store> a = make_prefix_store("group a", stores[0]);
  std::shared_ptr<Store> b = make_prefix_store("group b", stores[0]);
  ASSERT_TRUE(a->set("k", "from a").ok());
  ASSERT_TRUE(b->set("k", "from b").ok());
  EXPECT_EQ(*a->get("k", Millis(100)), "from a");
  EXPECT_EQ(*b->get("k", Millis(100)), "from b");
  EXPECT_EQ(*stores[0]->get("group a/k", Millis(100)), "from a");
  EXPECT_EQ(*a->add("n", 2), 2);
  EXPECT_EQ(*stores[0]->add("group a/n", 1), 3);
  EXPECT_TRUE(a->wait({"k", "n"}, Millis(100)).ok());
  EXPECT_FALSE(b->wait({"n"}, Millis(50)).ok());
  EXPECT_TRUE(a->sync(Millis(1000)).ok());  // the base's collective (world 1)
  EXPECT_NE(a->describe().find("group a/"), std::string::npos);
}

TEST_P(StoreTest, GetManyReturnsTheValuesInOrderOnceAllExist) {
  auto stores = make_world(factory(), 2);
  ASSERT_TRUE(stores[0]->set("m/0", "zero").ok());
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_TRUE(stores[1]->set("m/1", std::string("o\0ne", 4)).ok());
  });
  StatusOr<std::vector<std::string>> got = stores[0]->get_many({"m/1", "m/0"}, Millis(10000));
  late.join();
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(*got, (std::vector<std::string>{std::string("o\0ne", 4), "zero"}));
  got = stores[1]->get_many({"m/0", "m/2"}, Millis(200));
  ASSERT_EQ(got.status().code(), StatusCode::kDeadlineExceeded) << got.status().to_string();
  EXPECT_NE(got.status().message().find("'m/2' not set within 0.2 s"), std::string::npos)
      << got.status().message();
  EXPECT_EQ(got.status().message().find("m/0"), std::string::npos) << got.status().message();
}

// Thousands of ranks missing make one line: the first 16 and a count.
TEST_P(StoreTest, ManyMissingRanksAreCountedNotAllListed) {
  constexpr int kBig = 40;
  auto stores = make_world(factory(), kBig);
  std::vector<Status> results(2);
  on_threads(2, [&](int rank) {
    results[rank] = store_barrier(*stores[rank], "many", rank, kBig, Millis(300));
  });
  for (const Status& st : results) {
    ASSERT_EQ(st.code(), StatusCode::kDeadlineExceeded) << st.to_string();
    EXPECT_NE(st.message().find("barrier 'many': ranks 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, "
                                "14, 15, 16, 17 and 22 more of 40 did not arrive within 0.3 s"),
              std::string::npos)
        << st.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values("tcp", "file"),
                         [](const auto& info) { return info.param; });

// A store without add() (as PMIx): barrier and all-gather wait for every rank's key instead of
// counting the ranks in.
class NoAddStore final : public Store {
 public:
  explicit NoAddStore(std::shared_ptr<Store> base) : base_(std::move(base)) {}
  Status set(const std::string& key, std::string_view value) override {
    return base_->set(key, value);
  }
  StatusOr<std::string> get(const std::string& key, Millis timeout) override {
    return base_->get(key, timeout);
  }
  StatusOr<int64_t> add(const std::string&, int64_t) override {
    return Status(StatusCode::kUnimplemented, "no add here");
  }
  Status wait(const std::vector<std::string>& keys, Millis timeout) override {
    return base_->wait(keys, timeout);
  }
  Status sync(Millis timeout) override { return base_->sync(timeout); }
  std::string describe() const override { return "no-add " + base_->describe(); }

 private:
  std::shared_ptr<Store> base_;
};

TEST(Store, WithoutAddBarrierAndAllGatherWaitForEveryRanksKey) {
  auto stores = make_world(tcp_factory(), 4);
  on_threads(4, [&](int rank) {
    NoAddStore store(stores[rank]);
    StatusOr<std::vector<std::string>> all =
        store_all_gather(store, "g", rank, 4, std::to_string(rank * 10), Millis(10000));
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    EXPECT_EQ(*all, (std::vector<std::string>{"0", "10", "20", "30"}));
    EXPECT_TRUE(store_barrier(store, "b", rank, 4, Millis(10000)).ok());
    if (rank == 3) return;
    Status late = store_barrier(store, "c", rank, 4, Millis(300));
    EXPECT_NE(late.message().find("barrier 'c': rank 3 of 4 did not arrive within 0.3 s"),
              std::string::npos)
        << late.to_string();
  });
  // Counting in, nothing is left waiting on the per-rank keys: no "arrived" key here.
  EXPECT_FALSE(stores[0]->get("b/arrived", Millis(0)).ok());
}

// Hundreds of ranks at once (threads here): the all-gather reads one packed value per rank and
// the barrier waits for one key; ax-store-bench does 4096 (docs/reliability.md).
TEST(TcpStore, HundredsOfRanksGatherAndMeet) {
  constexpr int kMany = 256;
  auto stores = make_world(tcp_factory(), kMany);
  std::atomic<int> good{0};
  Clock::time_point start = Clock::now();
  on_threads(kMany, [&](int rank) {
    StatusOr<std::vector<std::string>> all = store_all_gather(
        *stores[rank], "resume/0", rank, kMany, rank == 0 ? "proposal" : "", Millis(30000));
    ASSERT_TRUE(all.ok()) << all.status().to_string();
    ASSERT_EQ(all->size(), static_cast<size_t>(kMany));
    EXPECT_EQ((*all)[0], "proposal");
    EXPECT_EQ((*all)[kMany - 1], "");
    ASSERT_TRUE(stores[rank]->sync(Millis(30000)).ok());
    ++good;
  });
  EXPECT_EQ(good.load(), kMany);
  EXPECT_LT(seconds_since(start), 30.0);
  StatusOr<std::string> arrived = stores[0]->get("resume/0/arrived", Millis(0));
  ASSERT_TRUE(arrived.ok());
  EXPECT_EQ(*arrived, std::to_string(kMany));
}

// A request waiting for several keys looks at each only until it is there; a key erased after
// that (erase_prefix) is looked for again before the answer.
TEST(TcpStore, WaitNoticesAKeyErasedAfterItWasSeen) {
  auto stores = make_world(tcp_factory(), 2);
  auto* tcp = dynamic_cast<TcpStore*>(stores[0].get());
  ASSERT_NE(tcp, nullptr);
  ASSERT_TRUE(stores[0]->set("e/a", "1").ok());
  Status waited;
  std::thread waiter([&] { waited = stores[1]->wait({"e/a", "f/b"}, Millis(10000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // filed under f/b
  ASSERT_EQ(*tcp->erase_prefix("e/"), 1);
  ASSERT_TRUE(stores[0]->set("f/b", "1").ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_TRUE(stores[0]->get("e/a", Millis(0)).status().code() == StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(stores[0]->set("e/a", "again").ok());
  waiter.join();
  EXPECT_TRUE(waited.ok()) << waited.to_string();
}

TEST(TcpStore, PortZeroPicksAFreePortAndDescribesIt) {
  TcpStoreOptions o;
  o.host_port = "127.0.0.1:0";
  o.is_server = true;
  o.secret = kSecret;
  StatusOr<std::shared_ptr<TcpStore>> s = make_tcp_store(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  std::string address = (*s)->bound_address();
  ASSERT_EQ(address.rfind("127.0.0.1:", 0), 0u) << address;
  EXPECT_NE(address, "127.0.0.1:0");
  EXPECT_EQ((*s)->describe(), "tcp " + address + " (server)");
}

TEST(TcpStore, BadOptionsAreRejected) {
  TcpStoreOptions o;
  o.secret = kSecret;
  o.host_port = "nohost";
  EXPECT_EQ(make_tcp_store(o).status().code(), StatusCode::kInvalidArgument);
  o.host_port = "127.0.0.1:0";  // a client needs a port
  EXPECT_EQ(make_tcp_store(o).status().code(), StatusCode::kInvalidArgument);
  o.host_port = "127.0.0.1:1";
  o.rank = 2;
  o.world = 2;
  EXPECT_EQ(make_tcp_store(o).status().code(), StatusCode::kInvalidArgument);
}

TEST(TcpStore, ClientGivesUpConnectingAfterTheTimeout) {
  TcpStoreOptions o;
  o.host_port = "127.0.0.1:" + std::to_string(ax::testing::free_port());  // nobody listens
  o.secret = kSecret;
  o.rank = 1;
  o.world = 2;
  o.connect_timeout = Millis(400);
  Clock::time_point start = Clock::now();
  StatusOr<std::shared_ptr<TcpStore>> s = make_tcp_store(o);
  EXPECT_GE(seconds_since(start), 0.35);
  EXPECT_LT(seconds_since(start), 5.0);
  ASSERT_EQ(s.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.status().message().find("could not reach the store at " + o.host_port +
                                      " (rank 0) within 0.4 s"),
            std::string::npos)
      << s.status().message();
}

TEST(TcpStore, ClientRetriesUntilTheServerComesUp) {
  std::string address = "127.0.0.1:" + std::to_string(ax::testing::free_port());
  std::thread server([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    TcpStoreOptions o{address, true, 0, 2, Millis(5000), kSecret};
    StatusOr<std::shared_ptr<TcpStore>> s = make_tcp_store(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_TRUE((*s)->set("hello", "world").ok());
    EXPECT_TRUE((*s)->sync(Millis(5000)).ok());
  });
  TcpStoreOptions o{address, false, 1, 2, Millis(5000), kSecret};
  StatusOr<std::shared_ptr<TcpStore>> client = make_tcp_store(o);
  ASSERT_TRUE(client.ok()) << client.status().to_string();
  EXPECT_EQ(*(*client)->get("hello", Millis(5000)), "world");
  EXPECT_TRUE((*client)->sync(Millis(5000)).ok());
  client->reset();  // leave first, so that the server does not linger
  server.join();
}

TEST(TcpStore, ServerOutlivesRankZerosStoreUntilClientsLeave) {
  TcpStoreOptions o{"127.0.0.1:0", true, 0, 2, Millis(5000), kSecret};
  StatusOr<std::shared_ptr<TcpStore>> server = make_tcp_store(o);
  ASSERT_TRUE(server.ok());
  TcpStoreOptions c{(*server)->bound_address(), false, 1, 2, Millis(5000), kSecret};
  StatusOr<std::shared_ptr<TcpStore>> client = make_tcp_store(c);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*server)->set("last words", "bye").ok());
  // Rank 0 finishes first: its store goes away in another thread while rank 1 still reads.
  std::thread rank0([s = std::move(*server)]() mutable { s.reset(); });
  EXPECT_EQ(*(*client)->get("last words", Millis(2000)), "bye");
  client->reset();  // rank 1 leaves: the server stops now, not after its linger time
  Clock::time_point start = Clock::now();
  rank0.join();
  EXPECT_LT(seconds_since(start), 5.0);
}

// The server records the first client whose connection closes (by the rank it said once it had
// proved the job secret): what a killed rank's peers read to name it at once (comm_failure.cc).
// Strangers' connections never count: store_security_test.
TEST(TcpStore, FirstClosedConnectionIsRecordedByRank) {
  TcpStoreOptions o{"127.0.0.1:0", true, 0, 3, Millis(5000), kSecret};
  StatusOr<std::shared_ptr<TcpStore>> server = make_tcp_store(o);
  ASSERT_TRUE(server.ok());
  const std::string address = (*server)->bound_address();
  StatusOr<std::shared_ptr<TcpStore>> one =
      make_tcp_store({address, false, 1, 3, Millis(5000), kSecret});
  StatusOr<std::shared_ptr<TcpStore>> two =
      make_tcp_store({address, false, 2, 3, Millis(5000), kSecret});
  ASSERT_TRUE(one.ok() && two.ok());
  EXPECT_EQ((*server)->get(kStoreFirstGoneKey, Millis(100)).status().code(),
            StatusCode::kDeadlineExceeded);
  two->reset();
  EXPECT_EQ(*(*server)->get(kStoreFirstGoneKey, Millis(2000)), "2");
  one->reset();  // only the first one counts
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(*(*server)->get(kStoreFirstGoneKey, Millis(0)), "2");
}

TEST(TcpStore, KilledServerIsAnErrorNamingItNotAHang) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // "rank 0" in its own process
    TcpStoreOptions o{"127.0.0.1:0", true, 0, 3, Millis(5000), kSecret};
    StatusOr<std::shared_ptr<TcpStore>> s = make_tcp_store(o);
    if (!s.ok()) _exit(1);
    std::string address = (*s)->bound_address() + "\n";
    if (write(ready[1], address.data(), address.size()) < 0) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char buf[64] = {};
  ASSERT_GT(read(ready[0], buf, sizeof(buf) - 1), 0);
  close(ready[0]);
  std::string address(buf);
  address.pop_back();

  std::vector<std::shared_ptr<TcpStore>> clients;
  for (int rank : {1, 2}) {
    StatusOr<std::shared_ptr<TcpStore>> c =
        make_tcp_store({address, false, rank, 3, Millis(5000), kSecret});
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    clients.push_back(*c);
  }
  // Rank 1 blocks in a long get, rank 2 in a barrier; then rank 0 dies.
  Status get_status, barrier_status;
  Clock::time_point start = Clock::now();
  std::thread getter([&] { get_status = clients[0]->get("never", Millis(60000)).status(); });
  std::thread barrier(
      [&] { barrier_status = store_barrier(*clients[1], "b", 2, 3, Millis(60000)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  getter.join();
  barrier.join();
  EXPECT_LT(seconds_since(start), 10.0);
  const std::string expect = "the store at " + address + " (rank 0) closed the connection";
  for (const Status& st : {get_status, barrier_status}) {
    EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
    EXPECT_NE(st.message().find(expect), std::string::npos) << st.message();
  }
  // The connection stays broken: later calls fail at once with the same message.
  Status again = clients[0]->set("k", "v");
  EXPECT_NE(again.message().find(expect), std::string::npos) << again.message();
}

// Runs `body` in a child process whose open-file limit is soft/hard; returns what it wrote to
// the pipe it gets, or "exit N" when it ended otherwise than with status 0.
std::string with_file_limit(rlim_t soft, rlim_t hard, const std::function<std::string()>& body) {
  int out[2];
  EXPECT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    rlimit rl{soft, hard};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(3);
    const std::string text = body();
    if (write(out[1], text.data(), text.size()) < 0) _exit(4);
    _exit(0);
  }
  close(out[1]);
  std::string got;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof buf)) > 0) got.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "exit " + std::to_string(status);
  return got;
}

// Rank 0's store needs a descriptor per rank: a limit that the process cannot raise that far is
// one line saying how many are needed and how to raise the limit, before anything listens.
TEST(TcpStore, DescriptorLimitTooLowForTheWorldIsOneLineSayingHowToRaiseIt) {
  const std::string message = with_file_limit(200, 300, [] {
    StatusOr<std::shared_ptr<TcpStore>> s =
        make_tcp_store({"127.0.0.1:0", true, 0, 1000, Millis(2000), kSecret});
    return s.ok() ? std::string("started") : s.status().to_string();
  });
  EXPECT_EQ(message.rfind("FailedPrecondition: ", 0), 0u) << message;
  for (const char* part :
       {"rank 0's TCP store at 127.0.0.1:0 needs 1256 open files for a job of 1000 ranks",
        "this process may open 200 (RLIMIT_NOFILE; hard limit 300)", "ulimit -n 1256",
        "PropagateResourceLimits", "--propagate=NOFILE", "LimitNOFILE"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " not in: " << message;
  }
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_EQ(message.find("(at "), std::string::npos) << message;  // no source location
}

// A soft limit below what the world needs is raised up to the hard limit, as servers do.
TEST(TcpStore, SoftDescriptorLimitIsRaisedTowardsTheHardOne) {
  const std::string result = with_file_limit(100, 5000, [] {
    StatusOr<std::shared_ptr<TcpStore>> s =
        make_tcp_store({"127.0.0.1:0", true, 0, 1000, Millis(2000), kSecret});
    if (!s.ok()) return s.status().to_string();
    rlimit rl{};
    getrlimit(RLIMIT_NOFILE, &rl);
    return str_cat("soft ", rl.rlim_cur, " hard ", rl.rlim_max);
  });
  EXPECT_EQ(result, "soft 1256 hard 5000");
}

// The same through a program: ax-store-check as rank 0 of 1000 under `ulimit -n 200` prints the
// one line and exits 1.
TEST(StoreCheck, DescriptorLimitTooLowIsOneErrorLine) {
  const std::string out = with_file_limit(200, 200, [] {
    std::string cmd = str_cat(
        "env -u SLURM_JOB_ID -u SLURM_PROCID -u SLURM_STEP_ID -u PMIX_RANK AX_RANK=0 "
        "AX_WORLD_SIZE=1000 AX_COORDINATOR=127.0.0.1:",
        ax::testing::free_port(), " AX_JOB_SECRET=", kSecret, " ", AX_STORE_CHECK_BIN,
        " --store tcp --timeout 5 2>&1; "
        "echo \"exit $?\"");
    FILE* p = popen(cmd.c_str(), "r");
    std::string text;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
    pclose(p);
    return text;
  });
  const size_t first_newline = out.find('\n');
  ASSERT_NE(first_newline, std::string::npos) << out;
  const std::string line = out.substr(0, first_newline);
  EXPECT_EQ(out.substr(first_newline + 1), "exit 1\n") << out;
  EXPECT_NE(line.find("needs 1256 open files for a job of 1000 ranks"), std::string::npos) << line;
  EXPECT_NE(line.find("ulimit -n 1256"), std::string::npos) << line;
}

// ax-store-check as 8 real processes over TCP and 4 over the file store.
struct Proc {
  pid_t pid;
  std::string out_path;
};

Proc spawn_check(int rank, int world, const std::vector<std::string>& extra_env,
                 const std::vector<std::string>& args, const std::string& dir) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    if (kv.rfind("AX_", 0) == 0 || kv.rfind("SLURM_", 0) == 0 || kv.rfind("PMIX_", 0) == 0) {
      continue;
    }
    env.push_back(kv);
  }
  env.push_back("AX_RANK=" + std::to_string(rank));
  env.push_back("AX_WORLD_SIZE=" + std::to_string(world));
  env.insert(env.end(), extra_env.begin(), extra_env.end());
  std::vector<std::string> argv_s{AX_STORE_CHECK_BIN};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv, envp;
  for (std::string& s : argv_s) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  Proc p{-1, dir + "/rank" + std::to_string(rank) + ".out"};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, p.out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  EXPECT_EQ(posix_spawn(&p.pid, argv[0], &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  return p;
}

void run_check_world(int world, const std::vector<std::string>& extra_env,
                     const std::vector<std::string>& args) {
  std::string dir = ax::testing::temp_dir("store-check");
  std::vector<Proc> procs;
  for (int r = 0; r < world; ++r) procs.push_back(spawn_check(r, world, extra_env, args, dir));
  for (const Proc& p : procs) {
    int status = 0;
    ASSERT_EQ(waitpid(p.pid, &status, 0), p.pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << p.out_path << ": " << ax::testing::read_file(p.out_path);
  }
  std::string out = ax::testing::read_file(procs[0].out_path);
  for (int r = 0; r < world; ++r) {
    EXPECT_NE(out.find("rank " + std::to_string(r) + " "), std::string::npos) << out;
  }
  EXPECT_NE(out.find("ok " + std::to_string(world) + " ranks"), std::string::npos) << out;
}

TEST(StoreCheck, EightProcessesOverTcp) {
  run_check_world(kWorld,
                  {"AX_COORDINATOR=127.0.0.1:" + std::to_string(ax::testing::free_port()),
                   std::string("AX_JOB_SECRET=") + kSecret},
                  {"--store", "tcp", "--timeout", "30"});
}

TEST(StoreCheck, FourProcessesOverTheFileStore) {
  std::string dir = ax::testing::temp_dir("store-check-files");
  run_check_world(4, {}, {"--store", "file", "--dir", dir + "/store", "--timeout", "30"});
}

TEST(PmixStore, OutsidePmixIsAClearError) {
  StatusOr<std::shared_ptr<Store>> s = make_pmix_store();
  ASSERT_FALSE(s.ok());
  if (AX_HAVE_PMIX) {
    EXPECT_EQ(s.status().code(), StatusCode::kFailedPrecondition) << s.status().to_string();
    EXPECT_NE(s.status().message().find("srun --mpi=pmix"), std::string::npos);
  } else {
    EXPECT_EQ(s.status().code(), StatusCode::kUnimplemented);
  }
}

}  // namespace
}  // namespace ax::train::comm
