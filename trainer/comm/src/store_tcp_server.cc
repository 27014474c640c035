// The TCP store's server. Each connection first gets the greeting (magic + nonce) and must answer
// with a proof of the job secret before any request is read; strangers are refused, logged once
// per address, and can hold at most kMaxUnproven connections for at most kHandshakeTimeout, so
// they never keep the job's own ranks out. Admitted clients are served one request at a time
// (the client library never sends another before the reply), which bounds what each can make
// the server buffer; the stored keys and bytes are bounded by AX_STORE_MAX_KEYS/_BYTES. Each
// admitted client says its rank (kRank); the first of them whose connection closes (a killed
// rank's, at once) is recorded at kStoreFirstGoneKey, for the ranks that name who failed
// (comm_failure.cc). Strangers never get that far, so they cannot make a rank look gone.
#include "store_tcp_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ax/common/env.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "store_auth.h"
#include "store_internal.h"
#include "store_wire.h"

namespace ax::train::comm {

namespace {

using namespace wire;  // NOLINT: the wire format's names are this file's vocabulary

const EnvKnob<int64_t> kMaxKeys("AX_STORE_MAX_KEYS", int64_t{1} << 20,
                                "Keys rank 0's TCP store holds at most; setting a new key beyond "
                                "it is an error naming the key",
                                1);
const EnvKnob<int64_t> kMaxBytes("AX_STORE_MAX_BYTES", int64_t{2} << 30,
                                 "Bytes of keys and values rank 0's TCP store holds at most; a "
                                 "set beyond it is an error naming the key",
                                 1);

constexpr Millis kServerLinger{10000};
constexpr Millis kHandshakeTimeout{10000};
constexpr Millis kAcceptPause{100};
constexpr size_t kMaxUnproven = 64;
constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxLoggedPeers = 256;

// A key as error messages show it: long ones cut.
std::string shown(const std::string& key) {
  return key.size() <= 100 ? key : key.substr(0, 100) + "...";
}

class Server final : public TcpServer {
 public:
  Server(int fd, int port, const int wake[2], std::string secret, std::string name,
         int64_t max_keys, int64_t max_bytes)
      : listen_fd_(fd),
        port_(port),
        secret_(std::move(secret)),
        name_(std::move(name)),
        max_keys_(max_keys),
        max_bytes_(max_bytes) {
    wake_[0] = wake[0];
    wake_[1] = wake[1];
    thread_ = std::thread([this] { loop(); });
  }

  ~Server() override {
    char c = 's';
    ssize_t n = write(wake_[1], &c, 1);
    (void)n;
    thread_.join();
    for (auto& [fd, client] : clients_) close(fd);
    close(listen_fd_);
    close(wake_[0]);
    close(wake_[1]);
  }

  int port() const override { return port_; }

 private:
  struct Client {
    std::string in;
    std::string out;
    std::string peer;  // "10.0.0.7:53122"
    std::string ip;
    std::string nonce;  // the greeting's, until admitted
    Clock::time_point accepted;
    bool admitted = false;
    bool closing = false;  // refused: dropped once `out` is sent
    bool waiting = false;  // a GET or WAIT waits for its keys
    int rank = -1;         // the rank it said (kRank) once admitted; -1: none
  };
  struct Pending {
    int fd;
    Op op;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  void loop() {
    bool stopping = false;
    Clock::time_point linger_end;
    std::vector<pollfd> fds;
    while (!(stopping && (admitted_ == 0 || Clock::now() >= linger_end))) {
      const bool accepting = !stopping && Clock::now() >= accept_paused_until_;
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
      for (auto& [fd, c] : clients_) {
        short events =
            static_cast<short>((wants_input(c) ? POLLIN : 0) | (c.out.empty() ? 0 : POLLOUT));
        fds.push_back({fd, events, 0});
      }
      int64_t wait_ms = next_deadline_ms();
      if (stopping) {
        const int64_t left = remaining_ms(linger_end);
        wait_ms = wait_ms < 0 ? left : std::min(wait_ms, left);
      }
      int n = poll(fds.data(), fds.size(),
                   wait_ms < 0 ? -1 : static_cast<int>(std::min<int64_t>(wait_ms, INT32_MAX)));
      if (n < 0 && errno != EINTR) {
        AX_LOG(kError, "store") << "TCP store server: poll: " << std::strerror(errno);
        return;
      }
      if (n > 0 && (fds[0].revents & POLLIN)) {
        char buf[16];
        while (read(wake_[0], buf, sizeof(buf)) > 0) {
        }
        if (!stopping) {
          stopping = true;
          linger_end = Clock::now() + kServerLinger;
        }
      }
      if (n > 0 && (fds[1].revents & POLLIN)) accept_all();
      for (size_t i = 2; n > 0 && i < fds.size(); ++i) {
        if (fds[i].revents == 0 || clients_.count(fds[i].fd) == 0) continue;
        bool alive = true;
        if (fds[i].events & POLLIN) {
          if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) alive = read_from(fds[i].fd);
        } else if (fds[i].revents & (POLLHUP | POLLERR)) {
          alive = false;  // gone while we were not reading from it
        }
        if (alive && (fds[i].revents & POLLOUT)) alive = flush(fds[i].fd);
        if (!alive) drop(fds[i].fd, "closed the connection before proving the job secret");
      }
      advance_all();
      expire();
    }
    if (admitted_ > 0) {
      AX_LOG(kWarn, "store") << "TCP store server at " << name_ << ": " << admitted_
                             << " client(s) still connected after " << seconds_text(kServerLinger)
                             << "; closing";
    }
  }

  bool wants_input(const Client& c) const {
    if (c.closing) return false;
    return c.in.size() < (c.admitted ? 4 + size_t{kMaxFrame} : 4 + kHelloBytes);
  }

  // Milliseconds until the next pending request, handshake or accept pause runs out; -1: none.
  int64_t next_deadline_ms() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
    for (const Pending& p : pending_) consider(p.deadline);
    if (unproven_ > 0) {
      for (const auto& [fd, c] : clients_) {
        if (!c.admitted) consider(c.accepted + kHandshakeTimeout);
      }
    }
    if (Clock::now() < accept_paused_until_) consider(accept_paused_until_);
    return next ? remaining_ms(*next) : -1;
  }

  void accept_all() {
    while (true) {
      sockaddr_in addr{};
      socklen_t len = sizeof(addr);
      int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len,
                       SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
        // Out of descriptors: strangers' connections go first; else wait for some to close.
        if (evict_oldest_unproven()) continue;
        accept_paused_until_ = Clock::now() + kAcceptPause;
        return;
      }
      if (fd < 0) return;  // EAGAIN, or a connection that vanished before we took it
      if (unproven_ >= kMaxUnproven) evict_oldest_unproven();
      set_nodelay(fd);
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
      Client& c = clients_[fd];
      c.ip = ip;
      c.peer = str_cat(ip, ":", ntohs(addr.sin_port));
      c.accepted = Clock::now();
      c.nonce = auth::nonce();
      c.out = frame(std::string(kGreetingMagic) + c.nonce);
      ++unproven_;
      if (!flush(fd)) drop(fd, "closed the connection before proving the job secret");
    }
  }

  bool evict_oldest_unproven() {
    std::optional<int> oldest;
    Clock::time_point oldest_at;
    for (const auto& [fd, c] : clients_) {
      if (!c.admitted && (!oldest || c.accepted < oldest_at)) {
        oldest = fd;
        oldest_at = c.accepted;
      }
    }
    if (!oldest) return false;
    drop(*oldest, str_cat("was the oldest of ", kMaxUnproven,
                          " connections that had not proved the job secret"));
    return true;
  }

  // Reads what the socket holds, up to what the client may have buffered. False when the
  // client is gone.
  bool read_from(int fd) {
    Client& c = clients_[fd];
    char buf[65536];
    while (wants_input(c)) {
      size_t room = (c.admitted ? 4 + size_t{kMaxFrame} : 4 + kHelloBytes) - c.in.size();
      ssize_t got = recv(fd, buf, std::min(sizeof(buf), room), 0);
      if (got > 0) {
        c.in.append(buf, static_cast<size_t>(got));
      } else if (got < 0 && errno == EINTR) {
        continue;
      } else {
        return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      }
    }
    return true;
  }

  void advance_all() {
    std::vector<int> gone;
    for (auto& [fd, c] : clients_) {
      if (!advance(fd, c)) gone.push_back(fd);
    }
    for (int fd : gone) drop(fd, "closed the connection before proving the job secret");
  }

  // Handles what a client has buffered: its handshake, or its next request once the previous
  // one is answered and sent. False: drop it (refused and told so, or malformed).
  bool advance(int fd, Client& c) {
    if (!c.admitted) {  // closing (refused) clients are never admitted
      if (!c.closing && c.in.size() >= 4 && Reader(c.in).u(4) != kHelloBytes) {
        refuse(c, "sent a request without proving the job secret first");
      } else if (!c.closing && c.in.size() == 4 + kHelloBytes) {
        check_hello(c);
      }
      return flush(fd) && !(c.closing && c.out.empty());
    }
    while (!c.waiting && c.out.empty() && c.in.size() >= 4) {
      uint32_t len = static_cast<uint32_t>(Reader(c.in).u(4));
      if (len > kMaxFrame) return false;
      if (c.in.size() - 4 < len) break;
      std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + size_t{len});
      if (!handle(fd, body) || !flush(fd)) return false;
    }
    return true;
  }

  void check_hello(Client& c) {
    Reader r(std::string_view(c.in).substr(4));
    const uint8_t op = static_cast<uint8_t>(r.u(1));
    const std::string client_nonce = r.bytes(kNonceBytes);
    const std::string proof = r.bytes(kProofBytes);
    c.in.clear();
    if (op != kHello || !r.ok() ||
        !auth::same_proof(proof, auth::client_proof(secret_, c.nonce, client_nonce))) {
      refuse(c, "did not prove the job secret (its proof is wrong)");
      return;
    }
    c.admitted = true;
    --unproven_;
    ++admitted_;
    std::string reply(1, static_cast<char>(kOk));
    reply += auth::server_proof(secret_, c.nonce, client_nonce);
    c.out += frame(reply);
  }

  void refuse(Client& c, const std::string& why) {
    log_refusal(c, why);
    std::string reply(1, static_cast<char>(kRefused));
    put_str(reply, "refused: this connection did not prove the job secret");
    c.out += frame(reply);
    c.in.clear();
    c.closing = true;
  }

  void log_refusal(const Client& c, const std::string& why) {
    if (logged_.count(c.ip) > 0) return;
    if (logged_.size() >= kMaxLoggedPeers) {
      if (!logged_all_) {
        AX_LOG(kWarn, "store") << "TCP store at " << name_ << ": refusals from more than "
                               << kMaxLoggedPeers << " addresses; no more are logged";
      }
      logged_all_ = true;
      return;
    }
    logged_.insert(c.ip);
    AX_LOG(kWarn, "store") << "TCP store at " << name_ << ": refused the connection from " << c.peer
                           << ": it " << why
                           << " (AX_JOB_SECRET; this job's ranks hold it, a process of another "
                              "job or user does not). Further refusals of "
                           << c.ip << " are not logged";
  }

  bool handle(int fd, const std::string& body) {
    Reader r(body);
    Op op = static_cast<Op>(r.u(1));
    std::string reply(1, static_cast<char>(kOk));
    switch (op) {
      case kSet: {
        std::string key = r.str();
        std::string value = r.str();
        if (!r.ok()) return false;
        if (std::string full = no_room(key, value.size()); !full.empty()) {
          reply_error(fd, kFull, full);
          return true;
        }
        put_value(key, std::move(value));
        send_reply(fd, reply);
        serve_pending();
        return true;
      }
      case kAdd:
        return handle_add(fd, r);
      case kErase: {
        std::string prefix = r.str();
        if (!r.ok()) return false;
        put_u64(reply, erase_prefix(prefix));
        send_reply(fd, reply);
        return true;
      }
      case kGet:
      case kWait:
        return handle_wait(fd, op, r);
      case kRank: {
        const uint64_t rank = r.u(4);
        if (!r.ok() || rank > uint64_t{INT32_MAX}) return false;
        clients_[fd].rank = static_cast<int>(rank);
        send_reply(fd, reply);
        return true;
      }
      case kHello:
        return false;
    }
    return false;
  }

  bool handle_add(int fd, Reader& r) {
    int64_t delta = static_cast<int64_t>(r.u(8));
    std::string key = r.str();
    if (!r.ok()) return false;
    auto it = data_.find(key);
    int64_t value = 0;
    if (it != data_.end()) {
      std::optional<int64_t> old = parse_int64(it->second);
      if (!old) {
        reply_error(fd, kError, str_cat("add: the value of '", shown(key), "' is not an integer"));
        return true;
      }
      value = *old;
    }
    value += delta;
    std::string text = std::to_string(value);
    if (std::string full = no_room(key, text.size()); !full.empty()) {
      reply_error(fd, kFull, full);
      return true;
    }
    put_value(key, std::move(text));
    std::string reply(1, static_cast<char>(kOk));
    put_u64(reply, static_cast<uint64_t>(value));
    send_reply(fd, reply);
    serve_pending();
    return true;
  }

  bool handle_wait(int fd, Op op, Reader& r) {
    Pending p{fd, op, {}, {}};
    p.deadline =
        Clock::now() + Millis(static_cast<int64_t>(std::min<uint64_t>(r.u(8), uint64_t{1} << 40)));
    if (op == kGet) {
      p.keys.push_back(r.str());
    } else {
      uint64_t n = r.u(4);
      for (uint64_t i = 0; i < n && r.ok(); ++i) p.keys.push_back(r.str());
    }
    if (!r.ok()) return false;
    if (!try_answer(p)) {
      clients_[fd].waiting = true;
      pending_.push_back(std::move(p));
    }
    return true;
  }

  // Why `key` with a value of `size` bytes does not fit the bounds; empty when it does.
  std::string no_room(const std::string& key, size_t size) const {
    if (key.size() > kMaxKeyBytes) {
      return str_cat("the key '", shown(key), "' is ", key.size(), " bytes long, over the ",
                     kMaxKeyBytes, " a key may have");
    }
    auto it = data_.find(key);
    const bool fresh = it == data_.end();
    if (fresh && static_cast<int64_t>(data_.size()) >= max_keys_) {
      return str_cat("store full: setting '", shown(key), "' would make rank 0's store hold more ",
                     "than ", max_keys_, " keys (AX_STORE_MAX_KEYS)");
    }
    const int64_t after =
        bytes_ + static_cast<int64_t>(size) -
        (fresh ? -static_cast<int64_t>(key.size()) : static_cast<int64_t>(it->second.size()));
    if (after > max_bytes_) {
      return str_cat("store full: setting '", shown(key), "' (", size, " bytes) would make ",
                     "rank 0's store hold ", after, " bytes, more than ", max_bytes_,
                     " (AX_STORE_MAX_BYTES)");
    }
    return "";
  }

  void put_value(const std::string& key, std::string value) {
    auto [it, fresh] = data_.try_emplace(key);
    bytes_ += static_cast<int64_t>(value.size()) -
              (fresh ? -static_cast<int64_t>(key.size()) : static_cast<int64_t>(it->second.size()));
    it->second = std::move(value);
  }

  uint64_t erase_prefix(const std::string& prefix) {
    uint64_t n = 0;
    for (auto it = data_.begin(); it != data_.end();) {
      if (starts_with(it->first, prefix)) {
        bytes_ -= static_cast<int64_t>(it->first.size() + it->second.size());
        it = data_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  // Answers p when all its keys exist; false otherwise.
  bool try_answer(const Pending& p) {
    for (const std::string& k : p.keys) {
      if (data_.find(k) == data_.end()) return false;
    }
    std::string reply(1, static_cast<char>(kOk));
    if (p.op == kGet) put_str(reply, data_[p.keys[0]]);
    send_reply(p.fd, reply);
    clients_[p.fd].waiting = false;
    return true;
  }

  void serve_pending() {
    auto it = std::remove_if(pending_.begin(), pending_.end(),
                             [&](const Pending& p) { return try_answer(p); });
    pending_.erase(it, pending_.end());
  }

  // Times out pending requests and handshakes.
  void expire() {
    Clock::time_point now = Clock::now();
    auto it = std::remove_if(pending_.begin(), pending_.end(), [&](const Pending& p) {
      if (p.deadline > now) return false;
      std::string reply(1, static_cast<char>(kTimeout));
      if (p.op == kWait) {
        std::vector<std::string> missing;
        for (const std::string& k : p.keys) {
          if (data_.find(k) == data_.end()) missing.push_back(k);
        }
        put_u32(reply, static_cast<uint32_t>(missing.size()));
        for (const std::string& k : missing) put_str(reply, k);
      }
      send_reply(p.fd, reply);
      clients_[p.fd].waiting = false;
      return true;
    });
    pending_.erase(it, pending_.end());
    if (unproven_ == 0) return;
    std::vector<int> late;
    for (const auto& [fd, c] : clients_) {
      if (!c.admitted && now >= c.accepted + kHandshakeTimeout) late.push_back(fd);
    }
    for (int fd : late) {
      drop(fd, str_cat("did not prove the job secret within ", seconds_text(kHandshakeTimeout)));
    }
  }

  void reply_error(int fd, Reply code, const std::string& message) {
    std::string reply(1, static_cast<char>(code));
    put_str(reply, message);
    send_reply(fd, reply);
  }

  void send_reply(int fd, const std::string& body) { clients_[fd].out += frame(body); }

  bool flush(int fd) {
    std::string& out = clients_[fd].out;
    while (!out.empty()) {
      ssize_t sent = send(fd, out.data(), out.size(), MSG_NOSIGNAL);
      if (sent > 0) {
        out.erase(0, static_cast<size_t>(sent));
      } else if (sent < 0 && errno == EINTR) {
        continue;
      } else {
        return sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
      }
    }
    return true;
  }

  // Closes a connection; one that had not proved the secret is logged (once per address) with
  // `why`, unless it was refused already.
  void drop(int fd, const std::string& why) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    const int rank = it->second.rank;  // set only for a client that proved the secret
    if (it->second.admitted) {
      --admitted_;
    } else {
      --unproven_;
      if (!it->second.closing) log_refusal(it->second, why);
    }
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [fd](const Pending& p) { return p.fd == fd; }),
                   pending_.end());
    clients_.erase(it);
    close(fd);
    // The kernel closes a killed process's sockets at once: the first rank whose connection
    // closes is, when a collective then fails, the rank that failed. A rank that ends normally
    // closes it too; that record is read only after a failure.
    if (rank >= 0 && data_.find(kStoreFirstGoneKey) == data_.end()) {
      put_value(kStoreFirstGoneKey, std::to_string(rank));
      serve_pending();
    }
  }

  int listen_fd_;
  int port_;
  int wake_[2];
  const std::string secret_;
  const std::string name_;
  const int64_t max_keys_;
  const int64_t max_bytes_;
  std::thread thread_;
  // Touched only by the server thread.
  std::unordered_map<std::string, std::string> data_;
  int64_t bytes_ = 0;  // keys and values in data_
  std::map<int, Client> clients_;
  std::vector<Pending> pending_;
  size_t unproven_ = 0;
  size_t admitted_ = 0;
  Clock::time_point accept_paused_until_;
  std::set<std::string> logged_;  // addresses whose refusal was logged
  bool logged_all_ = false;
};

}  // namespace

StatusOr<std::unique_ptr<TcpServer>> TcpServer::start(const std::string& ip, int port,
                                                      const std::string& secret,
                                                      const std::string& host) {
  AX_ASSIGN_OR_RETURN(int64_t max_keys, kMaxKeys.get());
  AX_ASSIGN_OR_RETURN(int64_t max_bytes, kMaxBytes.get());
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (inet_pton(AF_INET, ip.c_str(), &addr.sin_addr) != 1) {
    return InvalidArgument("TCP store: '", ip, "' is not an IPv4 address");
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return IoError("TCP store: socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1024) != 0) {
    const int err = errno;
    close(fd);
    std::string hint = err == EADDRNOTAVAIL
                           ? " (not an address of this host: rank 0 must run on the coordinator's "
                             "host, docs/bootstrap.md)"
                           : "";
    return IoError(str_cat("TCP store: listen on ", ip, " port ", port, " (", host, ")", hint),
                   err);
  }
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    Status st = IoError("TCP store: pipe", errno);
    close(fd);
    return st;
  }
  const int bound = ntohs(addr.sin_port);
  return std::unique_ptr<TcpServer>(
      new Server(fd, bound, wake, secret, str_cat(host, ":", bound), max_keys, max_bytes));
}

}  // namespace ax::train::comm
