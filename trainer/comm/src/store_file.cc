// The file store: one file per key in a directory every rank sees. A value is written to a
// temporary name and renamed, so a reader sees the whole value or nothing (rename is atomic on
// local file systems, NFS and Lustre). add() serialises on flock() of ".lock" (NFSv4 and Lustre
// with flock support honour it across hosts). Readers poll with a backoff up to 50 ms.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <thread>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"
#include "ax/trainer/comm/store.h"
#include "store_internal.h"

namespace ax::train::comm {

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr size_t kMaxFileName = 240;
constexpr Millis kMaxBackoff{50};

// Keys become file names: [A-Za-z0-9_.-] stay (a leading '.' does not, so keys never collide
// with ".lock" or ".tmp.*"), every other byte becomes %XX.
StatusOr<std::string> file_name(const std::string& key) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < key.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(key[i]);
    bool plain = std::isalnum(c) || c == '_' || c == '-' || (c == '.' && i > 0);
    if (plain) {
      out.push_back(static_cast<char>(c));
    } else {
      out += {'%', kHex[c >> 4], kHex[c & 15]};
    }
  }
  if (out.empty() || out.size() > kMaxFileName) {
    return InvalidArgument("file store: key '", key, "' is empty or too long for a file name");
  }
  return out;
}

class FileStore final : public Store {
 public:
  FileStore(std::string dir, int rank, int world)
      : dir_(std::move(dir)), rank_(rank), world_(world) {}

  Status set(const std::string& key, std::string_view value) override {
    AX_ASSIGN_OR_RETURN(std::string name, file_name(key));
    return write_atomically(name, value);
  }

  StatusOr<std::string> get(const std::string& key, Millis timeout) override {
    AX_ASSIGN_OR_RETURN(std::string name, file_name(key));
    Clock::time_point deadline = Clock::now() + timeout;
    Millis backoff{1};
    while (true) {
      StatusOr<std::string> value = read_file(path(name));
      if (value.ok() || value.status().code() != StatusCode::kNotFound) return value;
      if (Clock::now() >= deadline) {
        return DeadlineExceeded("key '", key, "' not set within ", seconds_text(timeout), " (",
                                describe(), ")");
      }
      sleep_backoff(backoff, deadline);
    }
  }

  StatusOr<int64_t> add(const std::string& key, int64_t delta) override {
    AX_ASSIGN_OR_RETURN(std::string name, file_name(key));
    std::string lock_path = path(".lock");
    int fd = open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return IoError("file store: open " + lock_path, errno);
    while (flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) {
        Status st = IoError("file store: flock " + lock_path, errno);
        close(fd);
        return st;
      }
    }
    StatusOr<int64_t> result = add_locked(key, name, delta);
    close(fd);  // releases the lock
    return result;
  }

  Status wait(const std::vector<std::string>& keys, Millis timeout) override {
    std::vector<std::string> names;
    for (const std::string& k : keys) {
      AX_ASSIGN_OR_RETURN(std::string name, file_name(k));
      names.push_back(std::move(name));
    }
    Clock::time_point deadline = Clock::now() + timeout;
    Millis backoff{1};
    size_t next = 0;  // keys before `next` have been seen
    while (true) {
      while (next < names.size() && access(path(names[next]).c_str(), F_OK) == 0) ++next;
      if (next == names.size()) return Status::Ok();
      if (Clock::now() >= deadline) {
        std::vector<std::string> missing;
        for (size_t i = next; i < names.size(); ++i) {
          if (access(path(names[i]).c_str(), F_OK) != 0) missing.push_back(keys[i]);
        }
        if (missing.empty()) return Status::Ok();
        return DeadlineExceeded("keys ", keys_text(missing), " not set within ",
                                seconds_text(timeout), " (", describe(), ")");
      }
      sleep_backoff(backoff, deadline);
    }
  }

  Status sync(Millis timeout) override {
    int generation = sync_generation_++;
    return store_barrier(*this, str_cat("ax.sync.", generation), rank_, world_, timeout);
  }

  std::string describe() const override { return "file " + dir_; }

 private:
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  static void sleep_backoff(Millis& backoff, Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    std::this_thread::sleep_for(std::max(Millis(0), std::min(backoff, left)));
    backoff = std::min(backoff * 2, kMaxBackoff);
  }

  // Keys live for one job on a shared file system: atomic, not durable.
  Status write_atomically(const std::string& name, std::string_view value) {
    Status st = write_file_atomically(path(name), value, Durability::kFast);
    return st.ok() ? st : st.with_context("file store");
  }

  StatusOr<int64_t> add_locked(const std::string& key, const std::string& name, int64_t delta) {
    int64_t value = 0;
    StatusOr<std::string> old = read_file(path(name));
    if (old.ok()) {
      std::optional<int64_t> v = parse_int64(*old);
      if (!v) {
        return InvalidArgument("add: the value of '", key, "' is not an integer (", describe(),
                               ")");
      }
      value = *v;
    } else if (old.status().code() != StatusCode::kNotFound) {
      return old.status();
    }
    value += delta;
    AX_RETURN_IF_ERROR(write_atomically(name, std::to_string(value)));
    return value;
  }

  std::string dir_;
  int rank_;
  int world_;
  std::atomic<int> sync_generation_{0};
};

}  // namespace

StatusOr<std::shared_ptr<Store>> make_file_store(const std::string& dir, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world) {
    return InvalidArgument("file store: rank ", rank, " of a world of ", world);
  }
  if (dir.empty()) return InvalidArgument("file store: no directory given");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return IoError("file store: create directory " + dir, ec ? ec.value() : ENOTDIR);
  }
  return std::shared_ptr<Store>(std::make_shared<FileStore>(dir, rank, world));
}

}  // namespace ax::train::comm
