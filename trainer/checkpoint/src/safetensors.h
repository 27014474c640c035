// The safetensors format (https://github.com/huggingface/safetensors); ax writes F32 and reads
// F32, F16 and BF16 (Hugging Face checkpoints are mostly BF16):
//
//   u64 LE  N            length of the header
//   N bytes header       JSON {"<key>": {"dtype": "F32", "shape": [...],
//                                        "data_offsets": [begin, end]}, ...,
//                              "__metadata__": {"<string>": "<string>"}},
//                        padded with spaces so that 8 + N is a multiple of 8
//   data                 the tensors' bytes, row-major, little-endian; offsets are relative to
//                        the start of the data section
//
// Private to trainer/checkpoint/src/ (and its tests). Byte layout: docs/checkpoint-format.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "checkpoint_io.h"

namespace ax::train::ckpt {

// A tensor to write: `data` holds product(shape) floats.
struct TensorRef {
  std::string key;
  std::vector<int64_t> shape;
  const float* data = nullptr;
};

// Writes the file at `dir/name` (fsynced) with the tensors in the order given.
StatusOr<FileRecord> write_safetensors(const std::string& dir, const std::string& name,
                                       const std::vector<TensorRef>& tensors,
                                       const std::map<std::string, std::string>& metadata,
                                       WriteBudget* budget);

// The stored element types ax reads; each is converted to float32 exactly.
enum class StoredType : uint8_t { kF32, kF16, kBF16 };

struct SafetensorsEntry {
  std::string key;
  std::vector<int64_t> shape;
  StoredType dtype = StoredType::kF32;
  uint64_t begin = 0;  // byte range in the data section
  uint64_t end = 0;
};

// Reads a safetensors file. open() validates the whole header: the JSON, every dtype (F32, F16
// or BF16), that every tensor's byte range has product(shape) * element size bytes, and that the
// ranges tile the data section exactly (no overlap, no gap, nothing past the end of the file).
// Any violation is DataLoss naming the file; another valid dtype is Unimplemented.
class SafetensorsReader {
 public:
  static StatusOr<SafetensorsReader> open(const std::string& path);
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&&) = delete;
  SafetensorsReader(const SafetensorsReader&) = delete;
  ~SafetensorsReader();

  const std::string& path() const { return path_; }
  // In data order.
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // nullptr when the file has no tensor of that key.
  const SafetensorsEntry* find(const std::string& key) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Reads one tensor's product(shape) elements into `out`, as float32.
  Status read(const SafetensorsEntry& entry, float* out) const;
  // Reads the box [offset, offset + shape) of a 1-D or 2-D tensor into `out` (row-major,
  // product(shape) floats), reading only the byte ranges of the box: one range when the box
  // spans whole rows, else one per row.
  Status read_box(const SafetensorsEntry& entry, const std::vector<int64_t>& offset,
                  const std::vector<int64_t>& shape, float* out) const;

 private:
  SafetensorsReader(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  Status parse_header(const std::string& header, uint64_t data_size);

  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;  // key -> position in entries_
  std::map<std::string, std::string> metadata_;
};

}  // namespace ax::train::ckpt
