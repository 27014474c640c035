// libFuzzer target: the input bytes are a shard file. Opening it, reading every frame, reading
// across frame boundaries and verifying must only ever return errors.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "ax/datasets/shards/shard_reader.h"

namespace {

// The reader opens files by path; a memfd gives it one without touching the disk.
struct InputFile {
  InputFile() : fd(memfd_create("fuzz-shard.axs", 0)), path("/proc/self/fd/" + std::to_string(fd)) {
    if (fd < 0) std::abort();
  }

  void store(const uint8_t* data, size_t size) const {
    if (ftruncate(fd, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      ssize_t n = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
      if (n <= 0) std::abort();
      done += static_cast<size_t>(n);
    }
  }

  const int fd;
  const std::string path;
};

void exercise(const ax::data::ShardReader& r) {
  // What open() promises about a shard it accepted.
  const uint64_t n = r.num_tokens();
  const uint32_t frame_tokens = r.header().frame_tokens;
  if (r.doc_ends().size() != r.num_docs()) std::abort();
  if (r.num_docs() > 0 && r.doc_ends().back() != n) std::abort();

  static std::vector<uint32_t> buf(ax::data::kMaxFrameTokens + 2);
  for (uint32_t f = 0; f < r.num_frames(); ++f) {
    const uint64_t begin = uint64_t{f} * frame_tokens;
    const size_t count = std::min<uint64_t>(frame_tokens, n - begin);
    r.read(begin, {buf.data(), count}).ignore();
    if (f > 0) r.read(begin - 1, {buf.data(), 2}).ignore();  // across the frame boundary
  }
  if (r.read(n, {buf.data(), 1}).code() != ax::StatusCode::kOutOfRange) std::abort();
  r.verify().ignore();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const InputFile file;
  file.store(data, size);
  auto reader = ax::data::ShardReader::open(file.path, 2);
  if (reader.ok()) exercise(**reader);
  return 0;
}
