#include "append_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <utility>

namespace ax::train {

StatusOr<AppendFile> AppendFile::open(const std::string& path, bool exclusive) {
  int flags = O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (exclusive ? O_EXCL : 0);
  int fd = ::open(path.c_str(), flags, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return AlreadyExists(path, " exists");
    return IoError(str_cat("open ", path), errno);
  }
  return AppendFile(fd, path);
}

AppendFile::AppendFile(AppendFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)) {}

AppendFile& AppendFile::operator=(AppendFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
  }
  return *this;
}

AppendFile::~AppendFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status AppendFile::append(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(str_cat("write ", path_), errno);
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status AppendFile::sync() {
  if (::fdatasync(fd_) != 0) return IoError(str_cat("fdatasync ", path_), errno);
  return Status::Ok();
}

StatusOr<bool> AppendFile::ends_with_or_empty(char c) const {
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(str_cat("open ", path_), errno);
  struct stat st {};
  bool result = true;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = IoError(str_cat("stat ", path_), errno);
  } else if (st.st_size > 0) {
    char last = 0;
    ssize_t n = ::pread(fd, &last, 1, st.st_size - 1);
    if (n != 1) status = IoError(str_cat("read ", path_), n < 0 ? errno : EIO);
    result = last == c;
  }
  ::close(fd);
  if (!status.ok()) return status;
  return result;
}

Status make_dirs(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(str_cat("create directory ", dir), ec.value());
  return Status::Ok();
}

}  // namespace ax::train
