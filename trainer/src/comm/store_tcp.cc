// The TCP store: a poll() server thread in rank 0's process, one socket per client. Wire format
// (docs/bootstrap.md): frames of u32 little-endian length + body; strings are u32 length + bytes.
//   request  SET  1 key value            reply  0
//            GET  2 u64 timeout_ms key          0 value | 1 (timeout)
//            ADD  3 i64 delta key               0 i64   | 2 message (not an integer)
//            WAIT 4 u64 timeout_ms u32 n keys   0       | 1 u32 n missing-keys
// The server answers GET and WAIT when the keys exist or their timeout passes, so a client never
// polls; a client waits for the reply the request's timeout plus kReplyGrace at most.
#include <arpa/inet.h>
#include <fcntl.h>
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
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/trainer/comm/store.h"
#include "store_internal.h"

namespace ax::train::comm {

namespace {

using Clock = std::chrono::steady_clock;

enum Op : uint8_t { kSet = 1, kGet = 2, kAdd = 3, kWait = 4 };
enum Reply : uint8_t { kOk = 0, kTimeout = 1, kError = 2 };

constexpr uint32_t kMaxFrame = 256u << 20;
constexpr Millis kReplyGrace{10000};
constexpr Millis kServerLinger{10000};

// --- encoding ---------------------------------------------------------------------------------

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& out, std::string_view s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}
std::string frame(const std::string& body) {
  std::string out;
  put_u32(out, static_cast<uint32_t>(body.size()));
  return out + body;
}

// Reads a body front to back; any overrun marks it bad.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  uint64_t u(int bytes) {
    if (pos_ + static_cast<size_t>(bytes) > data_.size()) {
      bad_ = true;
      return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    }
    pos_ += static_cast<size_t>(bytes);
    return v;
  }
  std::string str() {
    uint64_t n = u(4);
    if (bad_ || pos_ + n > data_.size()) {
      bad_ = true;
      return {};
    }
    std::string s(data_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  bool ok() const { return !bad_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  bool bad_ = false;
};

int64_t remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now()).count();
  return std::max<int64_t>(0, left);
}

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

StatusOr<std::pair<std::string, int>> split_host_port(const std::string& host_port) {
  size_t colon = host_port.rfind(':');
  std::optional<int64_t> port =
      colon == std::string::npos ? std::nullopt : parse_int64(host_port.substr(colon + 1));
  if (!port || *port < 0 || *port > 65535) {
    return InvalidArgument("TCP store address '", host_port, "': expected host:port");
  }
  return std::make_pair(host_port.substr(0, colon), static_cast<int>(*port));
}

// --- server -----------------------------------------------------------------------------------

class TcpServer {
 public:
  static StatusOr<std::unique_ptr<TcpServer>> start(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) return IoError("TCP store: socket", errno);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd, 1024) != 0) {
      Status st = IoError(str_cat("TCP store: listen on port ", port), errno);
      close(fd);
      return st;
    }
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    int wake[2];
    if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
      Status st = IoError("TCP store: pipe", errno);
      close(fd);
      return st;
    }
    std::unique_ptr<TcpServer> server(new TcpServer(fd, ntohs(addr.sin_port), wake));
    server->thread_ = std::thread([s = server.get()] { s->loop(); });
    return server;
  }

  // Stops accepting and serves the connected clients until they have all gone, or kServerLinger.
  ~TcpServer() {
    char c = 's';
    ssize_t n = write(wake_[1], &c, 1);
    (void)n;
    thread_.join();
    for (auto& [fd, client] : clients_) close(fd);
    close(listen_fd_);
    close(wake_[0]);
    close(wake_[1]);
  }

  int port() const { return port_; }

 private:
  struct Client {
    std::string in;
    std::string out;
  };
  struct Pending {
    int fd;
    Op op;
    std::vector<std::string> keys;
    Clock::time_point deadline;
  };

  TcpServer(int fd, int port, const int wake[2]) : listen_fd_(fd), port_(port) {
    wake_[0] = wake[0];
    wake_[1] = wake[1];
  }

  void loop() {
    bool stopping = false;
    Clock::time_point linger_end;
    std::vector<pollfd> fds;
    while (!(stopping && (clients_.empty() || Clock::now() >= linger_end))) {
      fds.clear();
      fds.push_back({wake_[0], POLLIN, 0});
      fds.push_back({stopping ? -1 : listen_fd_, POLLIN, 0});
      for (auto& [fd, client] : clients_) {
        fds.push_back({fd, static_cast<short>(POLLIN | (client.out.empty() ? 0 : POLLOUT)), 0});
      }
      int64_t wait_ms = -1;
      for (const Pending& p : pending_) {
        int64_t left = remaining_ms(p.deadline);
        wait_ms = wait_ms < 0 ? left : std::min(wait_ms, left);
      }
      if (stopping)
        wait_ms = std::min<int64_t>(wait_ms < 0 ? INT32_MAX : wait_ms, remaining_ms(linger_end));
      int n = poll(fds.data(), fds.size(), static_cast<int>(std::min<int64_t>(wait_ms, INT32_MAX)));
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
      if (n > 0 && fds[1].revents & POLLIN) accept_all();
      for (size_t i = 2; n > 0 && i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        int fd = fds[i].fd;
        bool alive = true;
        if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) alive = read_from(fd);
        if (alive && (fds[i].revents & POLLOUT)) alive = flush(fd);
        if (!alive) drop(fd);
      }
      expire();
    }
    if (!clients_.empty()) {
      AX_LOG(kWarn, "store") << "TCP store server on port " << port_ << ": " << clients_.size()
                             << " client(s) still connected after " << seconds_text(kServerLinger)
                             << "; closing";
    }
  }

  void accept_all() {
    while (true) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;  // EAGAIN, or a connection that vanished before we took it
      set_nodelay(fd);
      clients_[fd];
    }
  }

  // False when the client is gone or spoke garbage.
  bool read_from(int fd) {
    Client& c = clients_[fd];
    char buf[65536];
    while (true) {
      ssize_t got = recv(fd, buf, sizeof(buf), 0);
      if (got > 0) {
        c.in.append(buf, static_cast<size_t>(got));
        continue;
      }
      if (got == 0) return false;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    size_t pos = 0;
    while (c.in.size() - pos >= 4) {
      Reader head(std::string_view(c.in).substr(pos, 4));
      uint32_t len = static_cast<uint32_t>(head.u(4));
      if (len > kMaxFrame) return false;
      if (c.in.size() - pos - 4 < len) break;
      std::string body = c.in.substr(pos + 4, len);
      pos += 4 + len;
      if (!handle(fd, body)) return false;
    }
    c.in.erase(0, pos);
    return flush(fd);
  }

  bool handle(int fd, const std::string& body) {
    Reader r(body);
    Op op = static_cast<Op>(r.u(1));
    std::string reply;
    switch (op) {
      case kSet: {
        std::string key = r.str();
        std::string value = r.str();
        if (!r.ok()) return false;
        data_[key] = std::move(value);
        reply.push_back(kOk);
        send_reply(fd, reply);
        serve_pending();
        return true;
      }
      case kAdd: {
        int64_t delta = static_cast<int64_t>(r.u(8));
        std::string key = r.str();
        if (!r.ok()) return false;
        auto it = data_.find(key);
        int64_t value = 0;
        if (it != data_.end()) {
          std::optional<int64_t> old = parse_int64(it->second);
          if (!old) {
            reply.push_back(kError);
            put_str(reply, str_cat("add: the value of '", key, "' is not an integer"));
            send_reply(fd, reply);
            return true;
          }
          value = *old;
        }
        value += delta;
        data_[key] = std::to_string(value);
        reply.push_back(kOk);
        put_u64(reply, static_cast<uint64_t>(value));
        send_reply(fd, reply);
        serve_pending();
        return true;
      }
      case kGet:
      case kWait: {
        Pending p{fd, op, {}, {}};
        p.deadline = Clock::now() +
                     Millis(static_cast<int64_t>(std::min<uint64_t>(r.u(8), uint64_t{1} << 40)));
        if (op == kGet) {
          p.keys.push_back(r.str());
        } else {
          uint64_t n = r.u(4);
          for (uint64_t i = 0; i < n && r.ok(); ++i) p.keys.push_back(r.str());
        }
        if (!r.ok()) return false;
        if (!try_answer(p)) pending_.push_back(std::move(p));
        return true;
      }
    }
    return false;
  }

  // Answers p when all its keys exist; false otherwise.
  bool try_answer(const Pending& p) {
    for (const std::string& k : p.keys) {
      if (data_.find(k) == data_.end()) return false;
    }
    std::string reply(1, static_cast<char>(kOk));
    if (p.op == kGet) put_str(reply, data_[p.keys[0]]);
    send_reply(p.fd, reply);
    return true;
  }

  void serve_pending() {
    auto it = std::remove_if(pending_.begin(), pending_.end(),
                             [&](const Pending& p) { return try_answer(p); });
    pending_.erase(it, pending_.end());
  }

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
      return true;
    });
    pending_.erase(it, pending_.end());
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

  void drop(int fd) {
    pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                  [fd](const Pending& p) { return p.fd == fd; }),
                   pending_.end());
    clients_.erase(fd);
    close(fd);
  }

  int listen_fd_;
  int port_;
  int wake_[2];
  std::thread thread_;
  // Touched only by the server thread.
  std::unordered_map<std::string, std::string> data_;
  std::map<int, Client> clients_;
  std::vector<Pending> pending_;
};

// --- client -----------------------------------------------------------------------------------

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

class TcpStoreImpl final : public TcpStore {
 public:
  TcpStoreImpl(const TcpStoreOptions& options, std::string address,
               std::unique_ptr<TcpServer> server)
      : options_(options), address_(std::move(address)), server_(std::move(server)) {}

  ~TcpStoreImpl() override {
    if (fd_ >= 0) close(fd_);
    server_.reset();  // lingers until the other ranks have disconnected
  }

  Status connect_to(const std::string& host, int port) {
    Clock::time_point deadline = Clock::now() + options_.connect_timeout;
    Millis backoff{20};
    std::string why;
    while (true) {
      Millis limit{std::clamp<int64_t>(remaining_ms(deadline), 1, 5000)};
      int fd = connect_once(host, port, limit, &why);
      if (fd >= 0) {
        fd_ = fd;
        set_nodelay(fd_);
        int one = 1;
        setsockopt(fd_, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        return Status::Ok();
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
    return call(req, Millis(0)).status();
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
    Clock::time_point deadline = Clock::now() + std::max(wait, Millis(0)) + kReplyGrace;
    std::string out = frame(body);
    size_t done = 0;
    while (done < out.size()) {
      pollfd p{fd_, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(remaining_ms(deadline))) == 0) {
        return io_error(str_cat("did not take a request within ", seconds_text(kReplyGrace)));
      }
      ssize_t sent = send(fd_, out.data() + done, out.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (sent < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (sent < 0) return io_error(str_cat("closed the connection (", std::strerror(errno), ")"));
      done += static_cast<size_t>(sent);
    }
    std::string in;
    size_t want = 4;
    bool have_len = false;
    while (in.size() < want) {
      pollfd p{fd_, POLLIN, 0};
      int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(remaining_ms(deadline), INT32_MAX)));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        return io_error(str_cat("did not answer within ",
                                seconds_text(std::max(wait, Millis(0)) + kReplyGrace)));
      }
      char buf[65536];
      ssize_t got = recv(fd_, buf, std::min(sizeof(buf), want - in.size()), MSG_DONTWAIT);
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (got == 0) return io_error("closed the connection");
      if (got < 0) return io_error(str_cat("closed the connection (", std::strerror(errno), ")"));
      in.append(buf, static_cast<size_t>(got));
      if (!have_len && in.size() == 4) {
        uint32_t len = static_cast<uint32_t>(Reader(in).u(4));
        if (len > kMaxFrame) return protocol_error();
        want = 4 + len;
        have_len = true;
      }
    }
    return in.substr(4);
  }

  TcpStoreOptions options_;
  std::string address_;
  std::unique_ptr<TcpServer> server_;
  int fd_ = -1;
  std::mutex mu_;
  Status broken_;  // once the connection failed, every call fails the same way
  std::atomic<int> sync_generation_{0};
};

std::string local_hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

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
  std::unique_ptr<TcpServer> server;
  std::string connect_host = host;
  if (options.is_server) {
    AX_ASSIGN_OR_RETURN(server, TcpServer::start(port));
    port = server->port();
    if (host.empty()) host = local_hostname();
    connect_host = "127.0.0.1";  // the server listens on every interface
  }
  std::string address = str_cat(host, ":", port);
  auto store = std::make_shared<TcpStoreImpl>(options, address, std::move(server));
  AX_RETURN_IF_ERROR(store->connect_to(connect_host, port));
  return std::shared_ptr<TcpStore>(std::move(store));
}

}  // namespace ax::train::comm
