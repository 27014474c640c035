// File primitives of the checkpoint layer: a writer that hashes and fsyncs what it writes and can
// be made to fail after a byte budget (the full-disk test hook), directory fsync, and hashing and
// reading of files on disk. Private to trainer/checkpoint/src/.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ax/common/file_io.h"
#include "ax/common/status.h"

struct XXH64_state_s;  // xxhash.h, kept out of this header

namespace ax::train::ckpt {

// Size and XXH64 (seed 0) of one file of a checkpoint, as recorded in tensors.json and COMMIT.
struct FileRecord {
  std::string name;  // relative to the checkpoint directory
  uint64_t size = 0;
  uint64_t xxh64 = 0;
};

// The bytes one save may still write before its writes fail with ENOSPC; negative = unlimited.
// Set from AX_CHECKPOINT_FAIL_AFTER_BYTES, a test hook that simulates a full disk.
// AX_CHECKPOINT_WRITE_DELAY_MS, the slow-disk test hook, sleeps that many milliseconds per MiB
// written.
struct WriteBudget {
  int64_t bytes_left = -1;
  int64_t delay_ms_per_mib = 0;
};
StatusOr<WriteBudget> write_budget_from_env();

// Writes one new file. Every byte is hashed on the way; finish() fsyncs and closes it. Errors name
// the file's path. A writer destroyed before finish() closes the file and leaves it for the caller
// to remove with its directory.
class FileWriter {
 public:
  // name: recorded in the FileRecord; path: where the bytes go. budget may be null.
  static StatusOr<FileWriter> create(std::string path, std::string name, WriteBudget* budget);
  FileWriter(FileWriter&& other) noexcept;
  FileWriter& operator=(FileWriter&&) = delete;
  FileWriter(const FileWriter&) = delete;
  ~FileWriter();

  Status append(const void* data, size_t size);
  StatusOr<FileRecord> finish();

 private:
  FileWriter(std::string path, std::string name, int fd, WriteBudget* budget);

  std::string path_;
  std::string name_;
  int fd_ = -1;
  WriteBudget* budget_ = nullptr;
  XXH64_state_s* hash_state_ = nullptr;
  uint64_t size_ = 0;
};

// Writes `content` as the file `dir/name` (fsynced).
StatusOr<FileRecord> write_file(const std::string& dir, const std::string& name,
                                std::string_view content, WriteBudget* budget);
// join_path, read_file, fsync_dir: the shared helpers of ax/common/file_io.h.
using ::ax::fsync_dir;
using ::ax::join_path;
using ::ax::read_file;
// Size and XXH64 of `dir/name` as it is on disk.
StatusOr<FileRecord> hash_file(const std::string& dir, const std::string& name);
// Best-effort recursive removal (errors are logged); for partial and pruned directories.
void remove_tree(const std::string& path);

std::string hex64(uint64_t v);
std::optional<uint64_t> parse_hex64(std::string_view s);

}  // namespace ax::train::ckpt
