// The TCP store's client, and make_tcp_store, which starts rank 0's server
// (store_tcp_server.cc) on the address its coordinator host resolves to. Every connection begins
// with the challenge-response handshake of store_auth.h; then one request is outstanding per
// connection (a mutex serialises the threads of a process). Wire format: store_wire.h and
// docs/bootstrap.md. The server answers GET and WAIT when the keys exist or their timeout passes,
// so a client never polls; it waits for a reply the request's timeout plus a grace at most
// (kReplyGrace, longer for a larger job).
// Once admitted, a client says its rank (kRank), so that the server can record the first rank
// whose connection closes (kStoreFirstGoneKey).
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "ax/common/strings.h"
#include "ax/trainer/comm/store.h"
#include "store_auth.h"
#include "store_internal.h"
#include "store_tcp_server.h"
#include "store_wire.h"

namespace ax::train::comm {

namespace {

using namespace wire;  // NOLINT: the wire format's names are this file's vocabulary

// How long past a request's own wait a reply may take: 10 s, plus 5 ms per rank of the job,
// since at thousands of ranks a request may queue behind one from every other rank (30 s at
// 4096 ranks). Past it the store counts as gone (a stopped or hung rank 0).
constexpr Millis kReplyGrace{10000};
constexpr Millis kReplyGracePerRank{5};
constexpr Millis kHandshakeLimit{10000};

StatusOr<std::pair<std::string, int>> split_host_port(const std::string& host_port) {
  size_t colon = host_port.rfind(':');
  std::optional<int64_t> port =
      colon == std::string::npos ? std::nullopt : parse_int64(host_port.substr(colon + 1));
  if (!port || *port < 0 || *port > 65535 || colon == 0) {
    return InvalidArgument("TCP store address '", host_port, "': expected host:port");
  }
  return std::make_pair(host_port.substr(0, colon), static_cast<int>(*port));
}

// The IPv4 address `host` resolves to here: where rank 0's server listens.
StatusOr<std::string> resolve_ipv4(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || res == nullptr) {
    return Unavailable("TCP store: cannot resolve the coordinator host '", host,
                       "' to an IPv4 address: ", gai_strerror(rc));
  }
  char ip[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, ip, sizeof(ip));
  freeaddrinfo(res);
  return std::string(ip);
}

// A connected socket, or -1 with the reason in *why.
int connect_once(const std::string& host, int port, Millis limit, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0) {
    *why = str_cat("cannot resolve '", host, "': ", gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    // Bounds connect() against a host that drops SYNs.
    timeval tv{static_cast<time_t>(limit.count() / 1000),
               static_cast<suseconds_t>(limit.count() % 1000 * 1000)};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      *why = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

enum class Wire { kOk, kTimeout, kClosed, kTooLong };

int poll_ms(Clock::time_point deadline) {
  return static_cast<int>(std::min<int64_t>(remaining_ms(deadline), INT32_MAX));
}

// Sends all of `data` before `deadline`; *err is errno when the connection failed.
Wire send_all(int fd, std::string_view data, Clock::time_point deadline, int* err) {
  size_t done = 0;
  while (done < data.size()) {
    pollfd p{fd, POLLOUT, 0};
    int n = poll(&p, 1, poll_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return Wire::kTimeout;
    ssize_t sent = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (sent < 0) {
      *err = errno;
      return Wire::kClosed;
    }
    done += static_cast<size_t>(sent);
  }
  return Wire::kOk;
}

// Receives one frame's body of at most `max_body` bytes before `deadline`; *err as above (0 for
// an orderly close).
Wire recv_frame(int fd, Clock::time_point deadline, uint32_t max_body, std::string* body,
                int* err) {
  std::string in;
  size_t want = 4;
  bool have_len = false;
  while (in.size() < want) {
    pollfd p{fd, POLLIN, 0};
    int n = poll(&p, 1, poll_ms(deadline));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return Wire::kTimeout;
    char buf[65536];
    ssize_t got = recv(fd, buf, std::min(sizeof(buf), want - in.size()), MSG_DONTWAIT);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) {
      *err = got < 0 ? errno : 0;
      return Wire::kClosed;
    }
    in.append(buf, static_cast<size_t>(got));
    if (!have_len && in.size() == 4) {
      uint32_t len = static_cast<uint32_t>(Reader(in).u(4));
      if (len > max_body) return Wire::kTooLong;
      want = 4 + size_t{len};
      have_len = true;
    }
  }
  *body = in.substr(4);
  return Wire::kOk;
}

std::string closed_text(int err) {
  return err == 0 ? "closed the connection"
                  : str_cat("closed the connection (", std::strerror(err), ")");
}

class TcpStoreImpl final : public TcpStore {
 public:
  TcpStoreImpl(const TcpStoreOptions& options, std::string address,
               std::unique_ptr<TcpServer> server)
      : options_(options), address_(std::move(address)), server_(std::move(server)) {}

  ~TcpStoreImpl() override {
    if (fd_ >= 0) close(fd_);
    server_.reset();  // lingers until the other ranks have disconnected
  }

  // Connects and passes the handshake, retrying until connect_timeout while nobody listens or a
  // connection ends before the handshake completed; a refusal or an impostor fails at once.
  Status connect_to(const std::string& host, int port) {
    Clock::time_point deadline = Clock::now() + options_.connect_timeout;
    Millis backoff{20};
    std::string why;
    while (true) {
      Millis limit{std::clamp<int64_t>(remaining_ms(deadline), 1, 5000)};
      int fd = connect_once(host, port, limit, &why);
      if (fd >= 0) {
        set_nodelay(fd);
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        Millis hs{std::clamp<int64_t>(remaining_ms(deadline), 1000, kHandshakeLimit.count())};
        Status st = handshake(fd, Clock::now() + hs);
        if (st.ok()) {
          fd_ = fd;
          return say_rank();
        }
        close(fd);
        if (st.code() != StatusCode::kUnavailable) return st;
        why = st.message();
      }
      if (Clock::now() >= deadline) {
        return DeadlineExceeded("could not reach the store at ", address_, " (rank 0) within ",
                                seconds_text(options_.connect_timeout), ": ", why);
      }
      std::this_thread::sleep_for(std::min<Millis>(backoff, Millis(remaining_ms(deadline))));
      backoff = std::min<Millis>(backoff * 2, Millis(1000));
    }
  }

  Status set(const std::string& key, std::string_view value) override {
    std::string req(1, static_cast<char>(kSet));
    put_str(req, key);
    put_str(req, value);
    StatusOr<std::string> reply = call(req, Millis(0));
    if (!reply.ok()) return reply.status();
    Reader r(*reply);
    uint8_t code = static_cast<uint8_t>(r.u(1));
    if (code == kFull) return ResourceExhausted(r.str(), " (", describe(), ")");
    if (code != kOk || !r.ok()) return protocol_error();
    return Status::Ok();
  }

  StatusOr<std::string> get(const std::string& key, Millis timeout) override {
    std::string req(1, static_cast<char>(kGet));
    put_u64(req, static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
    put_str(req, key);
    StatusOr<std::string> reply = call(req, timeout);
    if (!reply.ok()) return reply.status();
    Reader r(*reply);
    uint8_t code = static_cast<uint8_t>(r.u(1));
    if (code == kTimeout) {
      return DeadlineExceeded("key '", key, "' not set within ", seconds_text(timeout), " (",
                              describe(), ")");
    }
    std::string value = r.str();
    if (code != kOk || !r.ok()) return protocol_error();
    return value;
  }

  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    std::string req(1, static_cast<char>(kAdd));
    put_u64(req, static_cast<uint64_t>(delta));
    put_str(req, key);
    StatusOr<std::string> reply = call(req, Millis(0));
    if (!reply.ok()) return reply.status();
    Reader r(*reply);
    uint8_t code = static_cast<uint8_t>(r.u(1));
    if (code == kError) return InvalidArgument(r.str(), " (", describe(), ")");
    if (code == kFull) return ResourceExhausted(r.str(), " (", describe(), ")");
    int64_t value = static_cast<int64_t>(r.u(8));
    if (code != kOk || !r.ok()) return protocol_error();
    return value;
  }

  Status wait(const std::vector<std::string>& keys, Millis timeout) override {
    std::string req(1, static_cast<char>(kWait));
    put_u64(req, static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
    put_u32(req, static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) put_str(req, k);
    StatusOr<std::string> reply = call(req, timeout);
    if (!reply.ok()) return reply.status();
    Reader r(*reply);
    uint8_t code = static_cast<uint8_t>(r.u(1));
    if (code == kOk && r.ok()) return Status::Ok();
    if (code != kTimeout) return protocol_error();
    std::vector<std::string> missing(r.u(4));
    for (std::string& k : missing) k = r.str();
    if (!r.ok()) return protocol_error();
    return DeadlineExceeded("keys ", keys_text(missing), " not set within ", seconds_text(timeout),
                            " (", describe(), ")");
  }

  StatusOr<std::vector<std::string>> get_many(const std::vector<std::string>& keys,
                                              Millis timeout) override {
    std::string req(1, static_cast<char>(kGetMany));
    put_u64(req, static_cast<uint64_t>(std::max<int64_t>(0, timeout.count())));
    put_u32(req, static_cast<uint32_t>(keys.size()));
    for (const std::string& k : keys) put_str(req, k);
    StatusOr<std::string> reply = call(req, timeout);
    if (!reply.ok()) return reply.status();
    Reader r(*reply);
    const uint8_t code = static_cast<uint8_t>(r.u(1));
    if (code == kError) return ResourceExhausted(r.str(), " (", describe(), ")");
    const uint64_t n = r.u(4);
    if (n > reply->size() / 4) return protocol_error();  // each string takes 4 bytes at least
    std::vector<std::string> strings(static_cast<size_t>(n));
    for (std::string& s : strings) s = r.str();
    if (!r.ok() || (code != kOk && code != kTimeout)) return protocol_error();
    if (code == kTimeout) {
      return DeadlineExceeded("keys ", keys_text(strings), " not set within ",
                              seconds_text(timeout), " (", describe(), ")");
    }
    if (strings.size() != keys.size()) return protocol_error();
    return strings;
  }

  StatusOr<int64_t> erase_prefix(const std::string& prefix) override {
    std::string req(1, static_cast<char>(kErase));
    put_str(req, prefix);
    StatusOr<std::string> reply = call(req, Millis(0));
    if (!reply.ok()) return reply.status();
    Reader r(*reply);
    uint8_t code = static_cast<uint8_t>(r.u(1));
    int64_t erased = static_cast<int64_t>(r.u(8));
    if (code != kOk || !r.ok()) return protocol_error();
    return erased;
  }

  Status sync(Millis timeout) override {
    int generation = sync_generation_++;
    return store_barrier(*this, str_cat("ax.sync.", generation), options_.rank, options_.world,
                         timeout);
  }

  std::string describe() const override {
    return str_cat("tcp ", address_, server_ ? " (server)" : " (client)");
  }
  std::string bound_address() const override { return address_; }

 private:
  // The client's half of the handshake on a fresh connection. Unavailable: the connection ended
  // or stalled before the handshake completed (worth another try); FailedPrecondition: refused,
  // or whoever listens is not this job's rank 0.
  Status handshake(int fd, Clock::time_point deadline) {
    int err = 0;
    std::string greeting;
    Wire w = recv_frame(fd, deadline, kGreetingBytes, &greeting, &err);
    if (w == Wire::kTimeout) return Unavailable("no greeting from the store within the limit");
    if (w == Wire::kClosed) return Unavailable("the store ", closed_text(err), " at once");
    if (w == Wire::kTooLong || greeting.size() != kGreetingBytes ||
        greeting.compare(0, kGreetingMagic.size(), kGreetingMagic) != 0) {
      return FailedPrecondition("the process listening at ", address_,
                                " is not an ax TCP store (its greeting is not the store's): is "
                                "the coordinator's port taken by another program?");
    }
    const std::string server_nonce = greeting.substr(kGreetingMagic.size());
    const std::string client_nonce = auth::nonce();
    std::string hello(1, static_cast<char>(kHello));
    hello += client_nonce;
    hello += auth::client_proof(options_.secret, server_nonce, client_nonce);
    std::string answer;
    if (send_all(fd, frame(hello), deadline, &err) != Wire::kOk ||
        recv_frame(fd, deadline, 4096, &answer, &err) != Wire::kOk) {
      return Unavailable("the store ", closed_text(err), " during the handshake");
    }
    Reader r(answer);
    const uint8_t code = static_cast<uint8_t>(r.u(1));
    if (code == kRefused) {
      return FailedPrecondition(
          "the store at ", address_, " (rank 0) refused rank ", options_.rank,
          ": this rank's job secret (AX_JOB_SECRET) is not rank 0's. The likeliest cause is a rank "
          "of another job, or a rank started outside ax's launch path (ax-launch, srun with "
          "spank_ax.so, the sbatch/ job scripts, srun --mpi=pmix), which has another secret or "
          "none");
    }
    const std::string proof = r.bytes(kProofBytes);
    if (code != kOk || !r.ok() ||
        !auth::same_proof(proof, auth::server_proof(options_.secret, server_nonce, client_nonce))) {
      return FailedPrecondition(
          "the process listening at ", address_,
          " does not know this job's secret "
          "(AX_JOB_SECRET): it is not this job's rank 0 (another job's store on the same port, or "
          "a rank 0 started outside ax's launch path)");
    }
    return Status::Ok();
  }

  // The first request once admitted: only a connection that proved the secret can say a rank.
  Status say_rank() {
    std::string req(1, static_cast<char>(kRank));
    put_u32(req, static_cast<uint32_t>(options_.rank));
    StatusOr<std::string> reply = call(req, Millis(0));
    if (!reply.ok()) return reply.status();
    Reader r(*reply);
    if (static_cast<uint8_t>(r.u(1)) != kOk || !r.ok()) return protocol_error();
    return Status::Ok();
  }

  Status protocol_error() {
    broken_ = Internal("the store at ", address_, " (rank 0) sent a malformed reply");
    return broken_;
  }

  Status io_error(const std::string& what) {
    broken_ = Unavailable("the store at ", address_, " (rank 0) ", what);
    return broken_;
  }

  // One request, one reply; the server may hold the reply up to `wait` (GET/WAIT).
  StatusOr<std::string> call(const std::string& body, Millis wait) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
    const Millis grace = kReplyGrace + kReplyGracePerRank * options_.world;
    const Millis limit = std::max(wait, Millis(0)) + grace;
    Clock::time_point deadline = Clock::now() + limit;
    int err = 0;
    Wire w = send_all(fd_, frame(body), deadline, &err);
    if (w == Wire::kTimeout) {
      return io_error(str_cat("did not take a request within ", seconds_text(grace)));
    }
    if (w != Wire::kOk) return io_error(closed_text(err));
    std::string reply;
    w = recv_frame(fd_, deadline, kMaxFrame, &reply, &err);
    if (w == Wire::kTimeout)
      return io_error(str_cat("did not answer within ", seconds_text(limit)));
    if (w == Wire::kTooLong) return protocol_error();
    if (w != Wire::kOk) return io_error(closed_text(err));
    return reply;
  }

  TcpStoreOptions options_;
  std::string address_;
  std::unique_ptr<TcpServer> server_;
  int fd_ = -1;
  std::mutex mu_;
  Status broken_;  // once the connection failed, every call fails the same way
  std::atomic<int> sync_generation_{0};
};

}  // namespace

StatusOr<std::shared_ptr<TcpStore>> make_tcp_store(const TcpStoreOptions& options) {
  AX_ASSIGN_OR_RETURN(auto host_port, split_host_port(options.host_port));
  auto [host, port] = host_port;
  if (options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return InvalidArgument("TCP store: rank ", options.rank, " of a world of ", options.world);
  }
  if (!options.is_server && port == 0) {
    return InvalidArgument("TCP store address '", options.host_port,
                           "': a client needs the server's port");
  }
  if (options.secret.empty()) {
    return InvalidArgument("TCP store: no job secret (every connection must prove one)");
  }
  std::unique_ptr<TcpServer> server;
  std::string connect_host = host;
  if (options.is_server) {
    // Only the address the job chose for the coordinator, not every interface.
    AX_ASSIGN_OR_RETURN(connect_host, resolve_ipv4(host));
    StatusOr<std::unique_ptr<TcpServer>> started =
        TcpServer::start(connect_host, port, options.secret, host, options.world);
    if (!started.ok()) return started.status();  // the user's message, without a location
    server = std::move(*started);
    port = server->port();
  }
  std::string address = str_cat(host, ":", port);
  auto store = std::make_shared<TcpStoreImpl>(options, address, std::move(server));
  AX_RETURN_IF_ERROR(store->connect_to(connect_host, port));
  return std::shared_ptr<TcpStore>(std::move(store));
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace ax::train::comm
