#include "test_files.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace ax::testing {
namespace {

std::vector<std::string>& dirs_to_remove() {
  static std::vector<std::string>* dirs = [] {
    auto* d = new std::vector<std::string>();
    std::atexit([] {
      for (const auto& p : dirs_to_remove()) {
        std::error_code ec;
        std::filesystem::remove_all(p, ec);
      }
    });
    return d;
  }();
  return *dirs;
}

}  // namespace

std::string temp_dir(const std::string& tag) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/ax-" + tag + "-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
  dirs_to_remove().emplace_back(buf.data());
  return buf.data();
}

void write_file(const std::string& path, const std::string& content) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(content.data(), static_cast<std::streamsize>(content.size()));
  if (!f) throw std::runtime_error("cannot write " + path);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  std::ostringstream os;
  os << f.rdbuf();
  return os.str();
}

namespace {

// The first port of the kernel's ephemeral range (bind to port 0, connect): 32768 by default.
int ephemeral_low() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0, high = 0;
  if (f >> low >> high && low > 0) return low;
  return 32768;
}

bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;  // as the store's listener: a port in TIME_WAIT is usable
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

int free_port() {
  // Not the kernel's pick (port 0): that comes from the ephemeral range, where the port, once
  // released, can be handed to another process's listener or connection — Gloo's listeners in a
  // test running beside this one take ports there too — before the rank meant to bind it does (a
  // rare "address in use" and a job that times out). A random port below the range is handed out
  // by no one; only another test picking the same one at the same moment could clash.
  static std::mutex mu;
  static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
  std::lock_guard<std::mutex> lock(mu);
  const int low = ephemeral_low();
  constexpr int kFirst = 10000;
  if (low > kFirst + 1000) {
    std::uniform_int_distribution<int> pick(kFirst, low - 1);
    for (int attempt = 0; attempt < 200; ++attempt) {
      const int port = pick(rng);
      if (bindable(port)) return port;
    }
  }
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace ax::testing
