// An append-only file written with one write() per record, so that a crashed process leaves every
// completed record on disk and at most the last one torn. Private to the metrics writers.
#pragma once

#include <string>
#include <string_view>

#include "ax/common/status.h"

namespace ax::train {

class AppendFile {
 public:
  // Creates the file or appends to it; `exclusive` refuses an existing file (AlreadyExists).
  static StatusOr<AppendFile> open(const std::string& path, bool exclusive);
  AppendFile(AppendFile&& other) noexcept;
  AppendFile& operator=(AppendFile&& other) noexcept;
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;
  ~AppendFile();

  Status append(std::string_view bytes);
  // fdatasync: the records survive a machine crash too.
  Status sync();
  // The file ends with `c` (or is empty), e.g. no torn line left by a crash.
  StatusOr<bool> ends_with_or_empty(char c) const;
  const std::string& path() const { return path_; }

 private:
  AppendFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// mkdir -p.
Status make_dirs(const std::string& dir);

}  // namespace ax::train
