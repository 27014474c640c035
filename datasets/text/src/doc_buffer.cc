#include "doc_buffer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"
#include "utf8.h"

namespace ax::data {
namespace {

// Once spilled, appends are gathered into writes of this size.
constexpr size_t kWriteBehindBytes = size_t{1} << 20;

using internal::is_continuation;

// An anonymous file in dir: O_TMPFILE where the file system has it, else a name removed at once.
StatusOr<int> open_spill_file(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0) return fd;
  std::string templ = join_path(dir, "ax-long-document-XXXXXX");
  fd = ::mkostemp(templ.data(), O_CLOEXEC);
  if (fd < 0) {
    return IoError(str_cat("create a temporary file in ", dir, " for a long document"), errno);
  }
  ::unlink(templ.c_str());
  return fd;
}

}  // namespace

DocBuffer::DocBuffer(std::string spill_dir, size_t memory_limit, uint64_t keep_limit)
    : spill_dir_(std::move(spill_dir)),
      memory_limit_(std::max<size_t>(memory_limit, 16)),
      keep_limit_(keep_limit) {
  if (spill_dir_.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    spill_dir_ = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
}

DocBuffer::~DocBuffer() {
  if (fd_ >= 0) ::close(fd_);
}

void DocBuffer::clear() {
  mem_.clear();
  if (file_bytes_ > 0 && fd_ >= 0) {
    // Gives the disk space back; on failure the file is only larger than it needs to be.
    [[maybe_unused]] int rc = ::ftruncate(fd_, 0);
  }
  file_bytes_ = 0;
  size_ = 0;
  read_pos_ = 0;
  full_ = false;
  text_ = false;
}

Status DocBuffer::append(std::string_view bytes) {
  size_ += bytes.size();
  if (full_) return Status::Ok();
  if (keep_limit_ > 0 && kept() + bytes.size() > keep_limit_) {
    size_t take = keep_limit_ > kept() ? static_cast<size_t>(keep_limit_ - kept()) : 0;
    while (take > 0 && is_continuation(bytes[take])) --take;
    bytes = bytes.substr(0, take);
    full_ = true;
  }
  if (!text_ && bytes.find_first_not_of(" \t\r\n\v\f") != std::string_view::npos) text_ = true;
  if (file_bytes_ == 0 && mem_.size() + bytes.size() > memory_limit_) {
    AX_RETURN_IF_ERROR(spill());
  } else if (file_bytes_ == 0 && mem_.capacity() < memory_limit_ &&
             mem_.size() + bytes.size() > kWriteBehindBytes) {
    // One allocation of the whole limit: growing by doubling would copy it and hold it twice.
    mem_.reserve(memory_limit_);
  }
  mem_.append(bytes);
  if (file_bytes_ > 0 && mem_.size() >= kWriteBehindBytes) return spill();
  return Status::Ok();
}

void DocBuffer::rollback(const Mark& m) {
  if (m.kept >= file_bytes_) {
    mem_.resize(std::min<uint64_t>(mem_.size(), m.kept - file_bytes_));
  } else {
    // The file keeps its old bytes past m.kept; later writes go there and reads stop at kept().
    file_bytes_ = m.kept;
    mem_.clear();
  }
  size_ = m.size;
  full_ = m.full;
  text_ = m.text;
}

Status DocBuffer::spill() {
  if (fd_ < 0) {
    AX_ASSIGN_OR_RETURN(fd_, open_spill_file(spill_dir_));
  }
  size_t done = 0;
  while (done < mem_.size()) {
    ssize_t n = ::pwrite(fd_, mem_.data() + done, mem_.size() - done,
                         static_cast<off_t>(file_bytes_ + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return IoError(str_cat("write a long document to a temporary file in ", spill_dir_), errno);
    }
    done += static_cast<size_t>(n);
  }
  file_bytes_ += mem_.size();
  mem_.clear();
  return Status::Ok();
}

Status DocBuffer::read_at(uint64_t pos, char* out, size_t n) {
  while (n > 0 && pos < file_bytes_) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, file_bytes_ - pos));
    ssize_t got = ::pread(fd_, out, want, static_cast<off_t>(pos));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      return IoError(str_cat("read back a long document from a temporary file in ", spill_dir_),
                     got < 0 ? errno : EIO);
    }
    pos += static_cast<uint64_t>(got);
    out += got;
    n -= static_cast<size_t>(got);
  }
  if (n > 0) mem_.copy(out, n, static_cast<size_t>(pos - file_bytes_));
  return Status::Ok();
}

StatusOr<bool> DocBuffer::read_part(std::string* out, size_t max_bytes) {
  out->clear();
  const uint64_t end = kept();
  if (read_pos_ >= end) return false;
  size_t n =
      static_cast<size_t>(std::min<uint64_t>(std::max<size_t>(max_bytes, 4), end - read_pos_));
  out->resize(n);
  AX_RETURN_IF_ERROR(read_at(read_pos_, out->data(), n));
  if (read_pos_ + n < end) {
    // Cut before a character that continues past the part (the text is valid UTF-8).
    char next;
    AX_RETURN_IF_ERROR(read_at(read_pos_ + n, &next, 1));
    size_t cut = n;
    while (cut > 0 && is_continuation(next)) {
      next = (*out)[--cut];
    }
    if (cut > 0) n = cut;
    out->resize(n);
  }
  read_pos_ += n;
  return true;
}

StatusOr<std::string> DocBuffer::read_all() {
  std::string out(static_cast<size_t>(kept()), '\0');
  AX_RETURN_IF_ERROR(read_at(0, out.data(), out.size()));
  return out;
}

}  // namespace ax::data
