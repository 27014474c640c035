#include "ax/common/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <vector>

#include "ax/common/check.h"

namespace ax {

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (!out.empty() && out.back() != '/') out += '/';
  out += name;
  return out;
}

StatusOr<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(str_cat("open ", path), errno);
  std::string out;
  char buf[65536];
  while (true) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return IoError(str_cat("read ", path), err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status write_all(int fd, const void* data, size_t size, const std::string& path_for_errors) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(str_cat("write ", path_for_errors), errno);
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status write_file_atomically(const std::string& path, std::string_view text,
                             Durability durability) {
  std::string tmp = path + ".XXXXXX.tmp";
  int fd = ::mkostemps(tmp.data(), 4, O_CLOEXEC);
  if (fd < 0) return IoError(str_cat("create ", tmp), errno);
  ::fchmod(fd, 0644);
  Status s = write_all(fd, text.data(), text.size(), tmp);
  const bool durable = durability == Durability::kDurable;
  if (s.ok() && durable && ::fsync(fd) != 0) s = IoError(str_cat("fsync ", tmp), errno);
  if (::close(fd) != 0 && s.ok()) s = IoError(str_cat("close ", tmp), errno);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = IoError(str_cat("rename ", tmp, " to ", path), errno);
  }
  if (!s.ok()) {
    ::unlink(tmp.c_str());
    return s;
  }
  if (!durable) return Status::Ok();
  const size_t slash = path.rfind('/');
  return fsync_dir(slash == std::string::npos ? "" : path.substr(0, slash == 0 ? 1 : slash));
}

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return IoError(str_cat("open directory ", dir), errno);
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (rc != 0) return IoError(str_cat("fsync directory ", dir), err);
  return Status::Ok();
}

StatusOr<FileDigest> xxh64_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(str_cat("open ", path), errno);
  XXH64_state_t* state = XXH64_createState();
  AX_CHECK(state != nullptr);
  XXH64_reset(state, 0);
  std::vector<char> buf(size_t{1} << 20);
  FileDigest digest;
  Status status;
  while (true) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = IoError(str_cat("read ", path), errno);
      break;
    }
    if (n == 0) break;
    XXH64_update(state, buf.data(), static_cast<size_t>(n));
    digest.size += static_cast<uint64_t>(n);
  }
  ::close(fd);
  digest.xxh64 = XXH64_digest(state);
  XXH64_freeState(state);
  if (!status.ok()) return status;
  return digest;
}

}  // namespace ax
