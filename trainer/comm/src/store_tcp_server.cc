// The TCP store's server. Each connection first gets the greeting (magic + nonce) and must answer
// with a proof of the job secret before any request is read; strangers are refused, logged once
// per address, and can hold at most max(64, world) connections for at most kHandshakeTimeout, so
// they never keep the job's own ranks out. Admitted clients are served one request at a time
// (the client library never sends another before the reply), which bounds what each can make
// the server buffer; the stored keys and bytes are bounded by AX_STORE_MAX_KEYS/_BYTES. Each
// admitted client says its rank (kRank); the first of them whose connection closes (a killed
// rank's, at once) is recorded at kStoreFirstGoneKey, for the ranks that name who failed
// (comm_failure.cc). Strangers never get that far, so they cannot make a rank look gone.
//
// Built for thousands of ranks (docs/reliability.md "The store at scale"): one epoll loop whose
// work per wake-up is that of the connections that woke it, not of every connection; a GET or
// WAIT that must wait is filed under the one key it waits for next, so a new key wakes only its
// own waiters; deadlines sit in ordered sets. Before it listens, start() makes sure the process
// may open a descriptor per rank (raising the soft RLIMIT_NOFILE when the hard one allows).
#include "store_tcp_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
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
constexpr size_t kMinUnproven = 64;
constexpr size_t kMaxKeyBytes = 4096;
constexpr size_t kMaxLoggedPeers = 256;
constexpr size_t kKeptBuffer = 4096;  // a connection's buffers shrink back after more
constexpr int kEvents = 256;

// A key as error messages show it: long ones cut.
std::string shown(const std::string& key) {
  return key.size() <= 100 ? key : key.substr(0, 100) + "...";
}

// Gives a drained buffer's memory back when a large message made it grow: thousands of
// connections each keeping the capacity of their largest request or reply add up.
void release_if_large(std::string& s) {
  if (s.empty() && s.capacity() > kKeptBuffer) std::string().swap(s);
}

class Server final : public TcpServer {
 public:
  Server(int fd, int port, int epoll_fd, const int wake[2], std::string secret, std::string name,
         int64_t max_keys, int64_t max_bytes, size_t max_unproven)
      : listen_fd_(fd),
        port_(port),
        epoll_fd_(epoll_fd),
        secret_(std::move(secret)),
        name_(std::move(name)),
        max_keys_(max_keys),
        max_bytes_(max_bytes),
        max_unproven_(max_unproven) {
    wake_[0] = wake[0];
    wake_[1] = wake[1];
    watch(wake_[0], EPOLLIN);
    watch(listen_fd_, EPOLLIN);
    thread_ = std::thread([this] { loop(); });
  }

  ~Server() override {
    char c = 's';
    ssize_t n = write(wake_[1], &c, 1);
    (void)n;
    thread_.join();
    for (auto& [fd, client] : clients_) close(fd);
    close(listen_fd_);
    close(epoll_fd_);
    close(wake_[0]);
    close(wake_[1]);
  }

  int port() const override { return port_; }

 private:
  // A GET, WAIT or GETM whose keys are not all there yet.
  struct Pending {
    Op op;
    std::vector<std::string> keys;
    size_t next = 0;  // keys[0, next) were there when last looked at; filed under keys[next]
    Clock::time_point deadline;
  };
  struct Client {
    std::string in;
    std::string out;
    std::string peer;  // "10.0.0.7:53122"
    std::string ip;
    std::string nonce;  // the greeting's, until admitted
    Clock::time_point accepted;
    bool admitted = false;
    bool closing = false;  // refused: dropped once `out` is sent
    bool queued = false;   // in ready_
    int rank = -1;         // the rank it said (kRank) once admitted; -1: none
    uint32_t events = 0;   // what epoll watches for it
    std::optional<Pending> pending;
  };

  void watch(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
  }

  void rewatch(int fd, uint32_t events) {
    epoll_event ev{};
    ev.events = events;
    ev.data.fd = fd;
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  }

  void loop() {
    bool stopping = false;
    bool listening = true;
    Clock::time_point linger_end;
    epoll_event events[kEvents];
    while (!(stopping && (admitted_ == 0 || Clock::now() >= linger_end))) {
      const bool accept_now = !stopping && Clock::now() >= accept_paused_until_;
      if (accept_now != listening) {
        rewatch(listen_fd_, accept_now ? static_cast<uint32_t>(EPOLLIN) : 0u);
        listening = accept_now;
      }
      int64_t wait_ms = next_deadline_ms();
      if (stopping) {
        const int64_t left = remaining_ms(linger_end);
        wait_ms = wait_ms < 0 ? left : std::min(wait_ms, left);
      }
      const int n =
          epoll_wait(epoll_fd_, events, kEvents,
                     wait_ms < 0 ? -1 : static_cast<int>(std::min<int64_t>(wait_ms, INT32_MAX)));
      if (n < 0 && errno != EINTR) {
        AX_LOG(kError, "store") << "TCP store server: epoll_wait: " << std::strerror(errno);
        return;
      }
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        const uint32_t got = events[i].events;
        if (fd == wake_[0]) {
          char buf[16];
          while (read(wake_[0], buf, sizeof(buf)) > 0) {
          }
          if (!stopping) {
            stopping = true;
            linger_end = Clock::now() + kServerLinger;
          }
          continue;
        }
        if (fd == listen_fd_) {
          if (listening) accept_all();
          continue;
        }
        auto it = clients_.find(fd);
        if (it == clients_.end()) continue;
        Client& c = it->second;
        bool alive = true;
        if (wants_input(c)) {
          if (got & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) alive = read_from(fd, c);
        } else if (got & (EPOLLHUP | EPOLLERR)) {
          alive = false;  // gone while we were not reading from it
        }
        if (alive && (got & EPOLLOUT)) alive = flush(fd, c);
        if (!alive) {
          drop(fd, "closed the connection before proving the job secret");
        } else {
          ready(fd, c);
        }
      }
      serve_ready();
      expire();
      serve_ready();
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

  // Marks a connection for serve_ready: its input, its output or its pending request moved.
  void ready(int fd, Client& c) {
    if (c.queued) return;
    c.queued = true;
    ready_.push_back(fd);
  }

  // Handles what the marked connections hold, sends what they have to send and sets what epoll
  // watches for them; a request served here can mark more (the waiters of a key it set).
  void serve_ready() {
    while (!ready_.empty()) {
      const int fd = ready_.back();
      ready_.pop_back();
      auto it = clients_.find(fd);
      if (it == clients_.end()) continue;
      Client& c = it->second;
      c.queued = false;
      if (!advance(fd, c) || !flush(fd, c)) {
        drop(fd, "closed the connection before proving the job secret");
        continue;
      }
      if (c.closing && c.out.empty()) {
        drop(fd, "");
        continue;
      }
      release_if_large(c.in);
      release_if_large(c.out);
      const uint32_t want = (wants_input(c) ? EPOLLIN | EPOLLRDHUP : 0u) |
                            (c.out.empty() ? 0u : static_cast<uint32_t>(EPOLLOUT));
      if (want != c.events) {
        rewatch(fd, want);
        c.events = want;
      }
    }
  }

  // Milliseconds until the next pending request, handshake or accept pause runs out; -1: none.
  int64_t next_deadline_ms() const {
    std::optional<Clock::time_point> next;
    auto consider = [&](Clock::time_point t) { next = next ? std::min(*next, t) : t; };
    if (!deadlines_.empty()) consider(deadlines_.begin()->first);
    if (!unproven_.empty()) consider(unproven_.begin()->first + kHandshakeTimeout);
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
      if (unproven_.size() >= max_unproven_) evict_oldest_unproven();
      set_nodelay(fd);
      char ip[INET_ADDRSTRLEN] = "?";
      inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof(ip));
      Client& c = clients_[fd];
      c.ip = ip;
      c.peer = str_cat(ip, ":", ntohs(addr.sin_port));
      c.accepted = Clock::now();
      c.nonce = auth::nonce();
      c.out = frame(std::string(kGreetingMagic) + c.nonce);
      c.events = EPOLLIN | EPOLLRDHUP;
      watch(fd, c.events);
      unproven_.emplace(c.accepted, fd);
      ready(fd, c);
    }
  }

  bool evict_oldest_unproven() {
    if (unproven_.empty()) return false;
    drop(unproven_.begin()->second, str_cat("was the oldest of ", max_unproven_,
                                            " connections that had not proved the job secret"));
    return true;
  }

  // Reads what the socket holds, up to what the client may have buffered. False when the
  // client is gone.
  bool read_from(int fd, Client& c) {
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

  // Handles what a client has buffered: its handshake, or its next request once the previous
  // one is answered and sent. False: drop it (malformed).
  bool advance(int fd, Client& c) {
    if (!c.admitted) {  // closing (refused) clients are never admitted
      if (!c.closing && c.in.size() >= 4 && Reader(c.in).u(4) != kHelloBytes) {
        refuse(c, "sent a request without proving the job secret first");
      } else if (!c.closing && c.in.size() == 4 + kHelloBytes) {
        check_hello(fd, c);
      }
      return true;
    }
    while (!c.pending && c.out.empty() && c.in.size() >= 4) {
      uint32_t len = static_cast<uint32_t>(Reader(c.in).u(4));
      if (len > kMaxFrame) return false;
      if (c.in.size() - 4 < len) break;
      std::string body = c.in.substr(4, len);
      c.in.erase(0, 4 + size_t{len});
      if (!handle(fd, c, body) || !flush(fd, c)) return false;
    }
    return true;
  }

  void check_hello(int fd, Client& c) {
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
    unproven_.erase({c.accepted, fd});
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

  bool handle(int fd, Client& c, const std::string& body) {
    Reader r(body);
    Op op = static_cast<Op>(r.u(1));
    std::string reply(1, static_cast<char>(kOk));
    switch (op) {
      case kSet: {
        std::string key = r.str();
        std::string value = r.str();
        if (!r.ok()) return false;
        if (std::string full = no_room(key, value.size()); !full.empty()) {
          reply_error(c, kFull, full);
          return true;
        }
        put_value(key, std::move(value));
        c.out += frame(reply);
        return true;
      }
      case kAdd:
        return handle_add(c, r);
      case kErase: {
        std::string prefix = r.str();
        if (!r.ok()) return false;
        put_u64(reply, erase_prefix(prefix));
        c.out += frame(reply);
        return true;
      }
      case kGet:
      case kWait:
      case kGetMany:
        return handle_wait(fd, c, op, body, r);
      case kRank: {
        const uint64_t rank = r.u(4);
        if (!r.ok() || rank > uint64_t{INT32_MAX}) return false;
        c.rank = static_cast<int>(rank);
        c.out += frame(reply);
        return true;
      }
      case kHello:
        return false;
    }
    return false;
  }

  bool handle_add(Client& c, Reader& r) {
    int64_t delta = static_cast<int64_t>(r.u(8));
    std::string key = r.str();
    if (!r.ok()) return false;
    auto it = data_.find(key);
    int64_t value = 0;
    if (it != data_.end()) {
      std::optional<int64_t> old = parse_int64(it->second);
      if (!old) {
        reply_error(c, kError, str_cat("add: the value of '", shown(key), "' is not an integer"));
        return true;
      }
      value = *old;
    }
    value += delta;
    std::string text = std::to_string(value);
    if (std::string full = no_room(key, text.size()); !full.empty()) {
      reply_error(c, kFull, full);
      return true;
    }
    put_value(key, std::move(text));
    std::string reply(1, static_cast<char>(kOk));
    put_u64(reply, static_cast<uint64_t>(value));
    c.out += frame(reply);
    return true;
  }

  bool handle_wait(int fd, Client& c, Op op, const std::string& body, Reader& r) {
    Pending p;
    p.op = op;
    p.deadline =
        Clock::now() + Millis(static_cast<int64_t>(std::min<uint64_t>(r.u(8), uint64_t{1} << 40)));
    if (op == kGet) {
      p.keys.push_back(r.str());
    } else {
      const uint64_t n = r.u(4);
      if (n > body.size() / 4) return false;  // each string takes 4 bytes at least
      p.keys.reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n && r.ok(); ++i) p.keys.push_back(r.str());
    }
    if (!r.ok()) return false;
    c.pending = std::move(p);
    if (!recheck(fd, c) && c.pending->deadline <= Clock::now()) {
      unfile(fd, c);  // a timeout of 0 (a look, not a wait) is answered at once
      time_out(fd, c);
    }
    return true;
  }

  // Moves c's pending request past the keys that exist now: answered when all do, else filed
  // under the first missing one (with its deadline). True when answered.
  bool recheck(int fd, Client& c) {
    Pending& p = *c.pending;
    while (true) {
      while (p.next < p.keys.size() && data_.count(p.keys[p.next]) > 0) ++p.next;
      if (p.next < p.keys.size()) break;
      // All seen; one may have been erased since (erase_prefix): look again from the start.
      size_t missing = 0;
      while (missing < p.keys.size() && data_.count(p.keys[missing]) > 0) ++missing;
      if (missing == p.keys.size()) {
        answer(c);
        return true;
      }
      p.next = missing;
    }
    waiters_[p.keys[p.next]].insert(fd);
    deadlines_.emplace(p.deadline, fd);
    return false;
  }

  // Removes c's pending request from the key it is filed under and from the deadlines.
  void unfile(int fd, const Client& c) {
    const Pending& p = *c.pending;
    if (p.next < p.keys.size()) {
      auto w = waiters_.find(p.keys[p.next]);
      if (w != waiters_.end()) {
        w->second.erase(fd);
        if (w->second.empty()) waiters_.erase(w);
      }
    }
    deadlines_.erase({p.deadline, fd});
  }

  void answer(Client& c) {
    const Pending& p = *c.pending;
    std::string reply(1, static_cast<char>(kOk));
    if (p.op == kGet) put_str(reply, data_.at(p.keys[0]));
    if (p.op == kGetMany) {
      size_t bytes = 1 + 4;
      for (const std::string& k : p.keys) bytes += 4 + data_.at(k).size();
      if (bytes > kMaxFrame) {
        const size_t n = p.keys.size();
        c.pending.reset();
        reply_error(c, kError,
                    str_cat("the values of ", n, " keys are ", bytes,
                            " bytes, more than one reply may hold (", kMaxFrame, ")"));
        return;
      }
      reply.reserve(bytes);
      put_u32(reply, static_cast<uint32_t>(p.keys.size()));
      for (const std::string& k : p.keys) put_str(reply, data_.at(k));
    }
    c.out += frame(reply);
    c.pending.reset();
  }

  void time_out(int fd, Client& c) {
    const Pending& p = *c.pending;
    std::string reply(1, static_cast<char>(kTimeout));
    if (p.op != kGet) {
      std::vector<const std::string*> missing;
      for (const std::string& k : p.keys) {
        if (data_.count(k) == 0) missing.push_back(&k);
      }
      put_u32(reply, static_cast<uint32_t>(missing.size()));
      for (const std::string* k : missing) put_str(reply, *k);
    }
    c.out += frame(reply);
    c.pending.reset();
    ready(fd, c);
  }

  // A key appeared: only the requests filed under it look again.
  void serve_key(const std::string& key) {
    auto w = waiters_.find(key);
    if (w == waiters_.end()) return;
    std::unordered_set<int> fds = std::move(w->second);
    waiters_.erase(w);
    for (int fd : fds) {
      auto it = clients_.find(fd);
      if (it == clients_.end() || !it->second.pending) continue;
      Client& c = it->second;
      deadlines_.erase({c.pending->deadline, fd});
      if (!recheck(fd, c)) continue;
      // Sent now rather than after every waiter is answered: thousands of waiters of one key
      // (an all-gather's packed values) would otherwise each hold a copy of it at once.
      if (flush(fd, c)) release_if_large(c.out);
      ready(fd, c);
    }
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
    if (fresh) serve_key(key);
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

  // Times out pending requests and handshakes.
  void expire() {
    const Clock::time_point now = Clock::now();
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const int fd = deadlines_.begin()->second;
      auto it = clients_.find(fd);
      if (it == clients_.end() || !it->second.pending) {
        deadlines_.erase(deadlines_.begin());
        continue;
      }
      unfile(fd, it->second);
      time_out(fd, it->second);
    }
    while (!unproven_.empty() && unproven_.begin()->first + kHandshakeTimeout <= now) {
      drop(unproven_.begin()->second,
           str_cat("did not prove the job secret within ", seconds_text(kHandshakeTimeout)));
    }
  }

  void reply_error(Client& c, Reply code, const std::string& message) {
    std::string reply(1, static_cast<char>(code));
    put_str(reply, message);
    c.out += frame(reply);
  }

  bool flush(int fd, Client& c) {
    std::string& out = c.out;
    size_t done = 0;
    bool ok = true;
    while (done < out.size()) {
      ssize_t sent = send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL);
      if (sent > 0) {
        done += static_cast<size_t>(sent);
      } else if (sent < 0 && errno == EINTR) {
        continue;
      } else {
        ok = sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        break;
      }
    }
    out.erase(0, done);
    return ok;
  }

  // Closes a connection; one that had not proved the secret is logged (once per address) with
  // `why`, unless it was refused already.
  void drop(int fd, const std::string& why) {
    auto it = clients_.find(fd);
    if (it == clients_.end()) return;
    Client& c = it->second;
    const int rank = c.rank;  // set only for a client that proved the secret
    if (c.admitted) {
      --admitted_;
    } else {
      unproven_.erase({c.accepted, fd});
      if (!c.closing) log_refusal(c, why);
    }
    if (c.pending) unfile(fd, c);
    clients_.erase(it);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    close(fd);
    // The kernel closes a killed process's sockets at once: the first rank whose connection
    // closes is, when a collective then fails, the rank that failed. A rank that ends normally
    // closes it too; that record is read only after a failure.
    if (rank >= 0 && data_.find(kStoreFirstGoneKey) == data_.end()) {
      put_value(kStoreFirstGoneKey, std::to_string(rank));
    }
  }

  int listen_fd_;
  int port_;
  int epoll_fd_;
  int wake_[2];
  const std::string secret_;
  const std::string name_;
  const int64_t max_keys_;
  const int64_t max_bytes_;
  const size_t max_unproven_;
  std::thread thread_;
  // Touched only by the server thread.
  std::unordered_map<std::string, std::string> data_;
  int64_t bytes_ = 0;  // keys and values in data_
  std::unordered_map<int, Client> clients_;
  std::vector<int> ready_;  // connections serve_ready looks at
  // Pending requests by the key they wait for next, and by deadline.
  std::unordered_map<std::string, std::unordered_set<int>> waiters_;
  std::set<std::pair<Clock::time_point, int>> deadlines_;
  std::set<std::pair<Clock::time_point, int>> unproven_;  // by the time they were accepted
  size_t admitted_ = 0;
  Clock::time_point accept_paused_until_;
  std::set<std::string> logged_;  // addresses whose refusal was logged
  bool logged_all_ = false;
};

std::string limit_text(rlim_t v) {
  return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v);
}

}  // namespace

Status ensure_descriptors(int world, const std::string& where) {
  const rlim_t needed = static_cast<rlim_t>(world) + kStoreSpareDescriptors;
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return IoError("getrlimit(RLIMIT_NOFILE)", errno);
  auto enough = [&](rlim_t limit) { return limit == RLIM_INFINITY || limit >= needed; };
  if (enough(rl.rlim_cur)) return Status::Ok();
  if (enough(rl.rlim_max)) {
    // As many servers do: an unprivileged process may raise its soft limit up to the hard one.
    rlimit raised{needed, rl.rlim_max};
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      AX_LOG(kInfo, "store") << where << ": raised the open-file limit from "
                             << limit_text(rl.rlim_cur) << " to " << needed << " for " << world
                             << " ranks";
      return Status::Ok();
    }
  }
  return FailedPrecondition(
      where, " needs ", needed, " open files for a job of ", world, " ranks (one per rank and ",
      kStoreSpareDescriptors, " for the rest of the process), but this process may open ",
      limit_text(rl.rlim_cur), " (RLIMIT_NOFILE; hard limit ", limit_text(rl.rlim_max),
      "): raise the limit to ", needed, " or more where rank 0 starts, e.g. `ulimit -n ", needed,
      "` in the shell that runs sbatch, srun or ax-launch (Slurm gives a job the submitting "
      "shell's limits unless slurm.conf's PropagateResourceLimits leaves NOFILE out; "
      "--propagate=NOFILE asks for it), within slurmd's hard limit (LimitNOFILE= in its systemd "
      "unit)");
}

StatusOr<std::unique_ptr<TcpServer>> TcpServer::start(const std::string& ip, int port,
                                                      const std::string& secret,
                                                      const std::string& host, int world) {
  AX_ASSIGN_OR_RETURN(int64_t max_keys, kMaxKeys.get());
  AX_ASSIGN_OR_RETURN(int64_t max_bytes, kMaxBytes.get());
  // A plain return: the message is the user's, without a source location.
  if (Status enough = ensure_descriptors(world, str_cat("rank 0's TCP store at ", host, ":", port));
      !enough.ok()) {
    return enough;
  }
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
  // Room for every rank knocking at once (the kernel caps it at net.core.somaxconn).
  const int backlog = std::max(1024, std::min(world + 64, 65535));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, backlog) != 0) {
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
  const int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) {
    Status st = IoError("TCP store: epoll_create1", errno);
    close(fd);
    close(wake[0]);
    close(wake[1]);
    return st;
  }
  const int bound = ntohs(addr.sin_port);
  const size_t max_unproven = std::max(kMinUnproven, static_cast<size_t>(std::max(world, 1)));
  return std::unique_ptr<TcpServer>(new Server(fd, bound, epoll_fd, wake, secret,
                                               str_cat(host, ":", bound), max_keys, max_bytes,
                                               max_unproven));
}

}  // namespace ax::train::comm
