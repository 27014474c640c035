#include "checkpoint_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <thread>
#include <utility>

#include "ax/common/check.h"
#include "ax/common/env.h"
#include "ax/common/logging.h"

namespace ax::train::ckpt {
namespace {

const EnvKnob<int64_t> kFailAfterBytes(
    "AX_CHECKPOINT_FAIL_AFTER_BYTES", -1,
    "test hook: a checkpoint save fails with 'No space left on device' after writing this many "
    "bytes, to test full-disk handling (-1 = off)",
    -1);

const EnvKnob<int64_t> kWriteDelay(
    "AX_CHECKPOINT_WRITE_DELAY_MS", 0,
    "test hook: a checkpoint save sleeps this many milliseconds per MiB it writes, a slow disk "
    "for the tests of background checkpoints (0 = off)",
    0);

}  // namespace

StatusOr<WriteBudget> write_budget_from_env() {
  AX_ASSIGN_OR_RETURN(int64_t bytes, kFailAfterBytes.get());
  AX_ASSIGN_OR_RETURN(int64_t delay, kWriteDelay.get());
  return WriteBudget{bytes, delay};
}

FileWriter::FileWriter(std::string path, std::string name, int fd, WriteBudget* budget)
    : path_(std::move(path)), name_(std::move(name)), fd_(fd), budget_(budget) {
  hash_state_ = XXH64_createState();
  AX_CHECK(hash_state_ != nullptr);
  XXH64_reset(hash_state_, 0);
}

FileWriter::FileWriter(FileWriter&& other) noexcept
    : path_(std::move(other.path_)),
      name_(std::move(other.name_)),
      fd_(std::exchange(other.fd_, -1)),
      budget_(other.budget_),
      hash_state_(std::exchange(other.hash_state_, nullptr)),
      size_(other.size_) {}

FileWriter::~FileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (hash_state_ != nullptr) XXH64_freeState(hash_state_);
}

StatusOr<FileWriter> FileWriter::create(std::string path, std::string name, WriteBudget* budget) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return IoError(str_cat("create ", path), errno);
  return FileWriter(std::move(path), std::move(name), fd, budget);
}

Status FileWriter::append(const void* data, size_t size) {
  AX_CHECK(fd_ >= 0) << path_ << " already finished";
  XXH64_update(hash_state_, data, size);
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    size_t chunk = size;
    bool over_budget = false;
    if (budget_ != nullptr && budget_->bytes_left >= 0 &&
        static_cast<uint64_t>(budget_->bytes_left) < chunk) {
      chunk = static_cast<size_t>(budget_->bytes_left);
      over_budget = true;
    }
    if (chunk == 0 && over_budget) return IoError(str_cat("write ", path_), ENOSPC);
    ssize_t n = ::write(fd_, p, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(str_cat("write ", path_), errno);
    if (budget_ != nullptr && budget_->bytes_left >= 0) budget_->bytes_left -= n;
    if (budget_ != nullptr && budget_->delay_ms_per_mib > 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(
          budget_->delay_ms_per_mib * 1000 * static_cast<int64_t>(n) / (int64_t{1} << 20)));
    }
    p += n;
    size -= static_cast<size_t>(n);
    size_ += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

StatusOr<FileRecord> FileWriter::finish() {
  AX_CHECK(fd_ >= 0) << path_ << " already finished";
  int fd = std::exchange(fd_, -1);
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    return IoError(str_cat("fsync ", path_), err);
  }
  if (::close(fd) != 0) return IoError(str_cat("close ", path_), errno);
  return FileRecord{name_, size_, XXH64_digest(hash_state_)};
}

StatusOr<FileRecord> write_file(const std::string& dir, const std::string& name,
                                std::string_view content, WriteBudget* budget) {
  AX_ASSIGN_OR_RETURN(FileWriter writer, FileWriter::create(join_path(dir, name), name, budget));
  AX_RETURN_IF_ERROR(writer.append(content.data(), content.size()));
  return writer.finish();
}

StatusOr<FileRecord> hash_file(const std::string& dir, const std::string& name) {
  AX_ASSIGN_OR_RETURN(FileDigest digest, xxh64_file(join_path(dir, name)));
  return FileRecord{name, digest.size, digest.xxh64};
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) AX_LOG(kWarn, "checkpoint") << "could not remove " << path << ": " << ec.message();
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

std::optional<uint64_t> parse_hex64(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    uint64_t d;
    if (c >= '0' && c <= '9') {
      d = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      d = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return std::nullopt;
    }
    v = (v << 4) | d;
  }
  return v;
}

}  // namespace ax::train::ckpt
