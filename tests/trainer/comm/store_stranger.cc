#include "store_stranger.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <deque>
#include <optional>

#include "store_auth.h"
#include "store_wire.h"

namespace ax::train::comm::testing {

namespace {

constexpr size_t kIdleHeld = 40;  // connections one thread holds open doing nothing

int connect_to(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval tv{2, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool send_bytes(int fd, const std::string& data) {
  return send(fd, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
}

bool recv_exact(int fd, size_t n, std::string* out) {
  out->assign(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, out->data() + got, n - got, 0);
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}

std::optional<std::string> read_frame(int fd) {
  std::string head, body;
  if (!recv_exact(fd, 4, &head)) return std::nullopt;
  uint32_t len = static_cast<uint32_t>(wire::Reader(head).u(4));
  if (len > (1u << 20) || !recv_exact(fd, len, &body)) return std::nullopt;
  return body;
}

bool is_greeting(const std::optional<std::string>& f) {
  return f && f->size() == wire::kGreetingBytes && f->compare(0, 4, wire::kGreetingMagic) == 0;
}

}  // namespace

std::string requests_without_handshake(const std::string& set_key, const std::string& value,
                                       const std::string& get_key) {
  std::string set(1, static_cast<char>(wire::kSet));
  wire::put_str(set, set_key);
  wire::put_str(set, value);
  std::string get(1, static_cast<char>(wire::kGet));
  wire::put_u64(get, 0);
  wire::put_str(get, get_key);
  return wire::frame(set) + wire::frame(get);
}

Stranger::Stranger(int port, int threads) : port_(port) {
  for (int t = 0; t < threads; ++t) threads_.emplace_back([this, t] { run(t); });
}

Stranger::~Stranger() { stop(); }

Stranger::Tally Stranger::stop() {
  stop_ = true;
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  return {connections_.load(), refused_.load(), answered_.load(), greetings_.load()};
}

void Stranger::run(int thread) {
  std::deque<int> idle;
  for (int i = thread; !stop_; ++i) {
    int fd = connect_to(port_);
    if (fd < 0) {  // nobody listens (yet, or any more)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      continue;
    }
    ++connections_;
    const int mode = i % 4;
    if (mode == 0) {  // held open, never speaking
      idle.push_back(fd);
      if (idle.size() > kIdleHeld) {
        close(idle.front());
        idle.pop_front();
      }
      continue;
    }
    std::optional<std::string> greeting = read_frame(fd);
    std::string attempt;
    if (mode == 1) {  // write a barrier key, read another
      attempt = requests_without_handshake("ax.sync.0/1", "1", "ax.sync.0/0");
    } else if (mode == 2 && is_greeting(greeting)) {  // a handshake with another job's secret
      ++greetings_;
      const std::string nonce = auth::nonce();
      std::string hello(1, static_cast<char>(wire::kHello));
      hello += nonce;
      hello += auth::client_proof("another job's secret 0123456789abcdef",
                                  greeting->substr(wire::kGreetingMagic.size()), nonce);
      attempt = wire::frame(hello);
    } else {  // garbage
      attempt.assign(1000, '\x7f');
    }
    if (send_bytes(fd, attempt)) {
      std::optional<std::string> reply = read_frame(fd);
      if (reply && !reply->empty() && reply->front() == static_cast<char>(wire::kRefused)) {
        ++refused_;
        reply = read_frame(fd);  // the server closes after a refusal
      }
      if (reply) ++answered_;
    }
    close(fd);
  }
  for (int fd : idle) close(fd);
}

}  // namespace ax::train::comm::testing
