// Low-level file helpers shared by the dataset and checkpoint code: path joining, whole-file
// reads, write loops, directory fsync and whole-file XXH64. Errors are IoError naming the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ax/common/status.h"

namespace ax {

// "dir/name"; an empty dir gives `name`, a trailing '/' on dir is not doubled.
std::string join_path(std::string_view dir, std::string_view name);

// The whole file. Errors: "open <path>" (NotFound if missing), "read <path>".
StatusOr<std::string> read_file(const std::string& path);

// Writes all `size` bytes to fd, retrying short writes and EINTR. Error: "write <path>".
Status write_all(int fd, const void* data, size_t size, const std::string& path_for_errors);

// Replaces `path` with `text` so that a reader sees the old file or the new one, never a part:
// the text goes to a temporary file of a unique name beside it (so several writers, on several
// hosts, may replace the same file at once), then is renamed over it. kDurable also fsyncs the
// file before the rename and the directory after, so the new file survives a crash (index.json,
// config.json, error.json); kFast skips both (progress files, the file store's keys). On an error
// the temporary file is removed. Errors: "create", "write", "fsync", "rename" naming the path.
enum class Durability { kDurable, kFast };
Status write_file_atomically(const std::string& path, std::string_view text,
                             Durability durability = Durability::kDurable);

// fsync of a directory (empty = "."), so names created or renamed in it survive a crash.
// Errors: "open directory <dir>", "fsync directory <dir>".
Status fsync_dir(const std::string& dir);

// Size and XXH64 (seed 0) of a file as it is on disk. Errors: "open <path>", "read <path>".
struct FileDigest {
  uint64_t size = 0;
  uint64_t xxh64 = 0;
};
StatusOr<FileDigest> xxh64_file(const std::string& path);

}  // namespace ax
