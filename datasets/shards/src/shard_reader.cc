#include "ax/datasets/shards/shard_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>
#include <zstd_errors.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "ax/common/check.h"
#include "ax/common/file_io.h"
#include "shard_internal.h"

namespace ax::data {
namespace {

using internal::hex64;
using internal::kHeaderFrameBytes;
using internal::kSeekDescriptor;

static_assert(std::endian::native == std::endian::little,
              "the shard format is little-endian and read with plain memcpy");

constexpr uint64_t kFooterBytes = 9;
constexpr uint64_t kSeekEntryBytes = 12;
constexpr uint64_t kDocTableHeadBytes = 8 + 16;  // frame magic + size, then num_docs, checksum, 0
// No zstd frame expands more than this: the best case is a 128 KiB RLE block
// stored in 4 bytes. Bounds what a (corrupt) doc table may make us allocate.
constexpr uint64_t kMaxZstdRatio = 32768;

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

uint64_t load_u64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

std::string hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08" PRIx32, v);
  return buf;
}

struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// A DCtx is not thread-safe and costs ~100 KB, so each reading thread keeps
// one.
ZSTD_DCtx* thread_dctx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> dctx(ZSTD_createDCtx());
  AX_CHECK(dctx != nullptr) << "ZSTD_createDCtx failed";
  return dctx.get();
}

struct FrameInfo {
  uint64_t offset;  // of the zstd frame in the file
  uint32_t compressed;
  uint32_t raw;
  uint32_t checksum;
};

struct DecodedFrame {
  std::unique_ptr<uint32_t[]> tokens;
  uint32_t capacity = 0;  // tokens
  uint32_t count = 0;
};

}  // namespace

// The last few decoded frames, keyed by (shard, frame): a ShardSet shares one
// cache between all its shards, so its size bounds the memory of the whole set.
// Readers hold a shared_ptr to a frame while copying out of it, so the lock
// covers only the lookup. Buffers of evicted frames are reused, so a steady
// stream of misses does not allocate.
class FrameCache {
 public:
  explicit FrameCache(size_t capacity) : capacity_(capacity) { entries_.reserve(capacity); }

  static uint64_t key(uint32_t shard, uint32_t frame) {
    return (static_cast<uint64_t>(shard) << 32) | frame;
  }

  std::shared_ptr<const DecodedFrame> find(uint64_t key) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : entries_) {
      if (e.key == key) {
        e.last_use = ++tick_;
        return e.data;
      }
    }
    return nullptr;
  }

  std::shared_ptr<DecodedFrame> take_spare() {
    std::lock_guard<std::mutex> lock(mu_);
    if (spares_.empty()) return std::make_shared<DecodedFrame>();
    std::shared_ptr<DecodedFrame> spare = std::move(spares_.back());
    spares_.pop_back();
    return spare;
  }

  // Caches a freshly decoded frame, or returns the copy another thread cached
  // meanwhile.
  std::shared_ptr<const DecodedFrame> insert(uint64_t key, std::shared_ptr<DecodedFrame> data) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Entry& e : entries_) {
      if (e.key == key) {
        recycle(std::move(data));
        e.last_use = ++tick_;
        return e.data;
      }
    }
    if (capacity_ == 0) return data;
    if (entries_.size() < capacity_) {
      entries_.push_back({key, ++tick_, data});
      return data;
    }
    Entry& victim =
        *std::min_element(entries_.begin(), entries_.end(),
                          [](const Entry& a, const Entry& b) { return a.last_use < b.last_use; });
    recycle(std::move(victim.data));
    victim = {key, ++tick_, data};
    return data;
  }

 private:
  struct Entry {
    uint64_t key;
    uint64_t last_use;
    std::shared_ptr<DecodedFrame> data;
  };

  void recycle(std::shared_ptr<DecodedFrame> data) {
    // use_count() == 1: no reader holds it, and none can get it (it left the
    // cache under the lock). The fence pairs with the release in the last
    // reader's shared_ptr decrement, so its reads happen before our next decode
    // overwrites the buffer.
    if (spares_.size() >= kMaxSpares || data.use_count() != 1) return;
    std::atomic_thread_fence(std::memory_order_acquire);
    spares_.push_back(std::move(data));
  }

  static constexpr size_t kMaxSpares = 2;
  const size_t capacity_;
  std::mutex mu_;
  uint64_t tick_ = 0;
  std::vector<Entry> entries_;
  std::vector<std::shared_ptr<DecodedFrame>> spares_;
};

class ShardReader::Impl {
 public:
  Impl(std::string path, std::shared_ptr<FrameCache> cache, uint32_t cache_id)
      : path_(std::move(path)), cache_(std::move(cache)), cache_id_(cache_id) {}

  ~Impl() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }

  Status open() {
    int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return IoError(str_cat("open ", path_), errno);
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return IoError(str_cat("stat ", path_), err);
    }
    size_ = static_cast<uint64_t>(st.st_size);
    if (!S_ISREG(st.st_mode) || size_ < kHeaderFrameBytes + 8 + kFooterBytes) {
      ::close(fd);
      if (!S_ISREG(st.st_mode)) return InvalidArgument(path_, ": not a regular file");
      return DataLoss(path_, ": file truncated: ", size_, " bytes is smaller than any shard");
    }
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED) return IoError(str_cat("mmap ", path_), err);
    data_ = static_cast<const uint8_t*>(p);
    AX_RETURN_IF_ERROR(parse_header());
    AX_RETURN_IF_ERROR(parse_seek_table());
    return parse_doc_table();
  }

  const ShardHeader& header() const { return header_; }
  uint32_t num_frames() const { return header_.num_frames; }
  std::span<const uint64_t> doc_ends() const { return doc_ends_; }

  Status read(uint64_t begin, std::span<uint32_t> out) const {
    const uint64_t n = header_.num_tokens;
    if (begin > n || out.size() > n - begin) {
      return OutOfRange(path_, ": tokens [", begin, ", ", begin + out.size(),
                        ") are past the end (", n, " tokens)");
    }
    uint64_t pos = begin;
    size_t done = 0;
    while (done < out.size()) {
      const auto frame = static_cast<uint32_t>(pos / header_.frame_tokens);
      const auto offset = static_cast<uint32_t>(pos % header_.frame_tokens);
      AX_ASSIGN_OR_RETURN(std::shared_ptr<const DecodedFrame> decoded, get_frame(frame));
      size_t take = std::min<size_t>(out.size() - done, decoded->count - offset);
      std::memcpy(out.data() + done, decoded->tokens.get() + offset, take * sizeof(uint32_t));
      done += take;
      pos += take;
    }
    return Status::Ok();
  }

  Status verify() const {
    DecodedFrame buf;
    for (uint32_t i = 0; i < header_.num_frames; ++i) {
      const FrameInfo& f = frames_[i];
      const uint8_t* src = data_ + f.offset;
      size_t size = ZSTD_findFrameCompressedSize(src, f.compressed);
      if (ZSTD_isError(size) || size != f.compressed) {
        return DataLoss(path_, ": frame ", i, ": not one zstd frame of ", f.compressed,
                        " bytes as the seek table says");
      }
      if (ZSTD_getFrameContentSize(src, f.compressed) != f.raw) {
        return DataLoss(path_, ": frame ", i, ": zstd frame header does not record ", f.raw,
                        " content bytes");
      }
      AX_RETURN_IF_ERROR(decode(i, &buf));
    }
    return Status::Ok();
  }

 private:
  Status parse_header() {
    if (load_u32(data_) != kHeaderMagic) {
      return DataLoss(path_, ": not an ax shard: header magic ", hex32(load_u32(data_)),
                      ", expected ", hex32(kHeaderMagic));
    }
    if (load_u32(data_ + 4) != kHeaderPayloadBytes) {
      return DataLoss(path_, ": header frame holds ", load_u32(data_ + 4), " bytes, expected ",
                      kHeaderPayloadBytes);
    }
    std::memcpy(&header_, data_ + 8, sizeof(header_));
    const ShardHeader& h = header_;
    if (std::memcmp(h.magic, kShardMagic, sizeof(h.magic)) != 0) {
      return DataLoss(path_, ": not an ax shard: bad magic in the header payload");
    }
    // Before the checksum: a newer layout may checksum differently, and the
    // version says more.
    if (h.version != kShardVersion) {
      return FailedPrecondition(path_, ": shard format version ", h.version,
                                " is not supported (this build reads version ", kShardVersion, ")");
    }
    if (checksum32(&h, offsetof(ShardHeader, header_checksum)) != h.header_checksum) {
      return DataLoss(path_, ": header checksum mismatch");
    }
    if (h.token_bytes != sizeof(uint32_t)) {
      return FailedPrecondition(path_, ": ", h.token_bytes,
                                "-byte tokens are not supported (only 4)");
    }
    if (h.kind != static_cast<uint32_t>(ShardKind::kLm) &&
        h.kind != static_cast<uint32_t>(ShardKind::kSeq2Seq)) {
      return DataLoss(path_, ": unknown shard kind ", h.kind);
    }
    if (h.frame_tokens == 0 || h.frame_tokens > kMaxFrameTokens) {
      return DataLoss(path_, ": frame_tokens ", h.frame_tokens, " is outside [1, ", kMaxFrameTokens,
                      "]");
    }
    const uint64_t frames = h.num_tokens / h.frame_tokens + (h.num_tokens % h.frame_tokens != 0);
    if (frames != h.num_frames) {
      return DataLoss(path_, ": header says ", h.num_frames, " frames, but ", h.num_tokens,
                      " tokens at ", h.frame_tokens, " per frame make ", frames);
    }
    if (h.num_docs > h.num_tokens || (h.num_docs == 0) != (h.num_tokens == 0)) {
      return DataLoss(path_, ": header says ", h.num_docs, " documents of ", h.num_tokens,
                      " tokens (documents are never empty)");
    }
    if (h.kind == static_cast<uint32_t>(ShardKind::kSeq2Seq) && h.num_docs % 2 != 0) {
      return DataLoss(path_, ": seq2seq shard with an odd number of documents (", h.num_docs, ")");
    }
    return Status::Ok();
  }

  Status parse_seek_table() {
    const uint8_t* footer = data_ + size_ - kFooterBytes;
    if (load_u32(footer + 5) != kSeekableFooterMagic) return diagnose_bad_footer();
    if (footer[4] != kSeekDescriptor) {
      return DataLoss(path_, ": seek table footer: descriptor ", hex32(footer[4]),
                      ", expected 0x80 (checksums present, reserved bits zero)");
    }
    const uint32_t n = load_u32(footer);
    if (n != header_.num_frames) {
      return DataLoss(path_, ": seek table footer lists ", n, " frames, the header ",
                      header_.num_frames);
    }
    const uint64_t table_bytes = 8 + n * kSeekEntryBytes + kFooterBytes;
    if (table_bytes + kHeaderFrameBytes + kDocTableHeadBytes > size_) {
      return DataLoss(path_, ": file truncated or extended: a seek table of ", n,
                      " frames does not fit in ", size_, " bytes");
    }
    seek_start_ = size_ - table_bytes;
    const uint8_t* table = data_ + seek_start_;
    if (load_u32(table) != kSeekTableMagic || load_u32(table + 4) != table_bytes - 8) {
      return DataLoss(path_, ": seek table at offset ", seek_start_, ": frame magic ",
                      hex32(load_u32(table)), " and size ", load_u32(table + 4), ", expected ",
                      hex32(kSeekTableMagic), " and ", table_bytes - 8);
    }
    frames_.resize(n);
    uint64_t offset = kHeaderFrameBytes;
    const uint64_t full_raw = uint64_t{header_.frame_tokens} * sizeof(uint32_t);
    for (uint32_t i = 0; i < n; ++i) {
      const uint8_t* e = table + 8 + i * kSeekEntryBytes;
      FrameInfo& f = frames_[i];
      f = {offset, load_u32(e), load_u32(e + 4), load_u32(e + 8)};
      const uint64_t raw =
          i + 1 < n ? full_raw
                    : (header_.num_tokens - uint64_t{i} * header_.frame_tokens) * sizeof(uint32_t);
      if (f.raw != raw) {
        return DataLoss(path_, ": seek table: frame ", i, " holds ", f.raw, " raw bytes, expected ",
                        raw);
      }
      if (f.compressed == 0) return DataLoss(path_, ": seek table: frame ", i, " is empty");
      offset += f.compressed;
    }
    doc_start_ = offset;
    return Status::Ok();
  }

  // The footer is not at the end of the file. Walking the frames from the front
  // tells a cut or appended file (the usual cause) from a damaged footer.
  Status diagnose_bad_footer() const {
    const uint32_t found = load_u32(data_ + size_ - 4);
    Status bad_footer = DataLoss(path_, ": bad seek table footer: magic ", hex32(found),
                                 ", expected ", hex32(kSeekableFooterMagic));
    const uint32_t n = header_.num_frames;
    uint64_t pos = kHeaderFrameBytes;
    for (uint32_t i = 0; i < n; ++i) {
      auto cut = [&] {
        return DataLoss(path_, ": file truncated: data frame ", i, " of ", n,
                        " runs past the end of the file (", size_, " bytes)");
      };
      if (pos >= size_) return cut();
      size_t size = ZSTD_findFrameCompressedSize(data_ + pos, size_ - pos);
      if (ZSTD_isError(size)) {
        return ZSTD_getErrorCode(size) == ZSTD_error_srcSize_wrong ? cut() : bad_footer;
      }
      pos += size;
    }
    if (pos + 8 > size_) {
      return DataLoss(path_, ": file truncated: it ends (", size_, " bytes) before the doc table");
    }
    if (load_u32(data_ + pos) != kDocTableMagic) return bad_footer;
    const uint64_t expected =
        pos + 8 + load_u32(data_ + pos + 4) + 8 + n * kSeekEntryBytes + kFooterBytes;
    if (expected != size_) {
      return DataLoss(path_, ": file truncated or extended: expected ", expected, " bytes, found ",
                      size_);
    }
    return bad_footer;
  }

  Status parse_doc_table() {
    if (doc_start_ + kDocTableHeadBytes > seek_start_) {
      return DataLoss(path_, ": file truncated or extended: the seek table's frames end at byte ",
                      doc_start_, ", leaving no room for the doc table before byte ", seek_start_);
    }
    const uint8_t* p = data_ + doc_start_;
    if (load_u32(p) != kDocTableMagic) {
      return DataLoss(path_, ": doc table: magic ", hex32(load_u32(p)), " at offset ", doc_start_,
                      ", expected ", hex32(kDocTableMagic),
                      " (the seek table's frame sizes do not match the file)");
    }
    const uint64_t frame_bytes = load_u32(p + 4);
    const uint64_t expected = doc_start_ + 8 + frame_bytes + (size_ - seek_start_);
    if (expected != size_) {
      return DataLoss(path_, ": file truncated or extended: expected ", expected, " bytes, found ",
                      size_);
    }
    if (frame_bytes < 16) {
      return DataLoss(path_, ": doc table: frame of ", frame_bytes, " bytes is too small");
    }
    const uint64_t num_docs = load_u64(p + 8);
    const uint32_t checksum = load_u32(p + 16);
    if (num_docs != header_.num_docs) {
      return DataLoss(path_, ": doc table holds ", num_docs, " documents, the header says ",
                      header_.num_docs);
    }
    if (load_u32(p + 20) != 0) return DataLoss(path_, ": doc table: reserved field is not 0");
    const uint8_t* z = p + kDocTableHeadBytes;
    const uint64_t z_bytes = frame_bytes - 16;
    const uint64_t raw = num_docs * sizeof(uint64_t);  // num_docs <= num_tokens < 2^51
    if (ZSTD_getFrameContentSize(z, z_bytes) != raw || raw > z_bytes * kMaxZstdRatio) {
      return DataLoss(path_, ": doc table: zstd frame does not hold ", num_docs, " documents");
    }
    doc_ends_.resize(num_docs);
    size_t r = ZSTD_decompressDCtx(thread_dctx(), doc_ends_.data(), raw, z, z_bytes);
    if (ZSTD_isError(r)) {
      return DataLoss(path_, ": doc table does not decode: ", ZSTD_getErrorName(r));
    }
    if (r != raw) return DataLoss(path_, ": doc table decodes to ", r, " bytes, expected ", raw);
    if (checksum32(doc_ends_.data(), raw) != checksum) {
      return DataLoss(path_, ": doc table checksum mismatch");
    }
    uint64_t prev = 0;
    for (uint64_t i = 0; i < num_docs; ++i) {
      if (doc_ends_[i] <= prev) {
        return DataLoss(path_, ": doc table: document ", i, " ends at ", doc_ends_[i],
                        ", not after ", prev);
      }
      prev = doc_ends_[i];
    }
    if (prev != header_.num_tokens) {
      return DataLoss(path_, ": doc table: documents end at ", prev, ", but the shard holds ",
                      header_.num_tokens, " tokens");
    }
    return Status::Ok();
  }

  StatusOr<std::shared_ptr<const DecodedFrame>> get_frame(uint32_t frame) const {
    const uint64_t key = FrameCache::key(cache_id_, frame);
    if (std::shared_ptr<const DecodedFrame> hit = cache_->find(key)) return hit;
    // Decode outside the lock so other threads keep reading cached frames
    // meanwhile.
    std::shared_ptr<DecodedFrame> buf = cache_->take_spare();
    AX_RETURN_IF_ERROR(decode(frame, buf.get()));
    return cache_->insert(key, std::move(buf));
  }

  Status decode(uint32_t frame, DecodedFrame* out) const {
    const FrameInfo& f = frames_[frame];
    if (out->capacity < header_.frame_tokens) {
      out->tokens = std::make_unique_for_overwrite<uint32_t[]>(header_.frame_tokens);
      out->capacity = header_.frame_tokens;
    }
    size_t r = ZSTD_decompressDCtx(thread_dctx(), out->tokens.get(), f.raw, data_ + f.offset,
                                   f.compressed);
    if (ZSTD_isError(r)) {
      return DataLoss(path_, ": frame ", frame, ": does not decode: ", ZSTD_getErrorName(r));
    }
    if (r != f.raw) {
      return DataLoss(path_, ": frame ", frame, ": decodes to ", r, " bytes, the seek table says ",
                      f.raw);
    }
    if (checksum32(out->tokens.get(), r) != f.checksum) {
      return DataLoss(path_, ": frame ", frame, ": checksum mismatch");
    }
    out->count = f.raw / sizeof(uint32_t);
    return Status::Ok();
  }

  const std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  ShardHeader header_{};
  std::vector<FrameInfo> frames_;
  uint64_t doc_start_ = 0;   // offset of the doc table frame
  uint64_t seek_start_ = 0;  // offset of the seek table frame
  std::vector<uint64_t> doc_ends_;
  const std::shared_ptr<FrameCache> cache_;  // this shard's own, or its set's
  const uint32_t cache_id_;                  // this shard's key in a shared cache
};

ShardReader::ShardReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardReader::~ShardReader() = default;

StatusOr<std::unique_ptr<ShardReader>> ShardReader::open(const std::string& path,
                                                         size_t cache_frames) {
  return open_with_cache(path, std::make_shared<FrameCache>(cache_frames), 0);
}

StatusOr<std::unique_ptr<ShardReader>> ShardReader::open_with_cache(
    const std::string& path, std::shared_ptr<FrameCache> cache, uint32_t cache_id) {
  auto impl = std::make_unique<Impl>(path, std::move(cache), cache_id);
  AX_RETURN_IF_ERROR(impl->open());
  return std::unique_ptr<ShardReader>(new ShardReader(std::move(impl)));
}

const ShardHeader& ShardReader::header() const { return impl_->header(); }
uint64_t ShardReader::num_tokens() const { return impl_->header().num_tokens; }
uint64_t ShardReader::num_docs() const { return impl_->header().num_docs; }
uint32_t ShardReader::num_frames() const { return impl_->num_frames(); }
std::span<const uint64_t> ShardReader::doc_ends() const { return impl_->doc_ends(); }
Status ShardReader::read(uint64_t begin, std::span<uint32_t> out) const {
  return impl_->read(begin, out);
}
Status ShardReader::verify() const { return impl_->verify(); }

class ShardSet::Impl {
 public:
  explicit Impl(std::string dir) : dir_(std::move(dir)) {}

  Status open(std::optional<uint64_t> expected_tokenizer_hash, size_t cache_frames) {
    auto cache = std::make_shared<FrameCache>(cache_frames);
    AX_ASSIGN_OR_RETURN(index_, read_dataset_index(dir_));
    if (expected_tokenizer_hash && *expected_tokenizer_hash != index_.tokenizer.hash) {
      // Which one made them, where the index says (kind and name: informational).
      const TokenizerInfo& t = index_.tokenizer;
      std::string made_with;
      if (!t.kind.empty() || !t.model_file.empty()) {
        made_with = str_cat(" (", t.kind.empty() ? "" : t.kind,
                            !t.kind.empty() && !t.model_file.empty() ? " " : "",
                            t.model_file.empty() ? "" : str_cat("'", t.model_file, "'"), ")");
      }
      return FailedPrecondition(
          join_path(dir_, kIndexFile),
          ": the shards were made with another tokenizer: ", "tokenizer hash ",
          hex64(index_.tokenizer.hash), made_with, " in the index, ",
          hex64(*expected_tokenizer_hash), " expected; re-tokenize with this tokenizer");
    }
    token_starts_.push_back(0);
    doc_starts_.push_back(0);
    for (const ShardEntry& e : index_.shards) {
      const std::string path = join_path(dir_, e.file);
      AX_ASSIGN_OR_RETURN(std::unique_ptr<ShardReader> shard,
                          ShardReader::open_with_cache(path, cache, shards_.size()));
      AX_RETURN_IF_ERROR(check_against_index(path, *shard, e));
      token_starts_.push_back(token_starts_.back() + e.num_tokens);
      doc_starts_.push_back(doc_starts_.back() + e.num_docs);
      shards_.push_back(std::move(shard));
    }
    return Status::Ok();
  }

  const DatasetIndex& index() const { return index_; }
  uint64_t num_tokens() const { return token_starts_.back(); }
  uint64_t num_docs() const { return doc_starts_.back(); }
  size_t num_shards() const { return shards_.size(); }
  const ShardReader& shard(size_t i) const {
    AX_CHECK_LT(i, shards_.size());
    return *shards_[i];
  }

  Status read(uint64_t begin, std::span<uint32_t> out) const {
    const uint64_t n = num_tokens();
    if (begin > n || out.size() > n - begin) {
      return OutOfRange(dir_, ": tokens [", begin, ", ", begin + out.size(), ") are past the end (",
                        n, " tokens)");
    }
    // The last shard starting at or before `begin`: never an empty one, as
    // begin < its end.
    size_t s = std::upper_bound(token_starts_.begin(), token_starts_.end(), begin) -
               token_starts_.begin() - 1;
    uint64_t pos = begin;
    size_t done = 0;
    while (done < out.size()) {
      const uint64_t local = pos - token_starts_[s];
      const size_t take =
          std::min<uint64_t>(out.size() - done, token_starts_[s + 1] - token_starts_[s] - local);
      if (take > 0) AX_RETURN_IF_ERROR(shards_[s]->read(local, out.subspan(done, take)));
      done += take;
      pos += take;
      ++s;
    }
    return Status::Ok();
  }

  std::pair<uint64_t, uint64_t> doc_range(uint64_t d) const {
    AX_CHECK_LT(d, num_docs()) << "document index out of range";
    size_t s =
        std::upper_bound(doc_starts_.begin(), doc_starts_.end(), d) - doc_starts_.begin() - 1;
    const uint64_t local = d - doc_starts_[s];
    std::span<const uint64_t> ends = shards_[s]->doc_ends();
    const uint64_t begin = local == 0 ? 0 : ends[local - 1];
    return {token_starts_[s] + begin, token_starts_[s] + ends[local]};
  }

  Status verify() const {
    for (size_t i = 0; i < shards_.size(); ++i) {
      AX_RETURN_IF_ERROR(shards_[i]->verify());
      AX_RETURN_IF_ERROR(check_file_hash(index_.shards[i]));
    }
    return Status::Ok();
  }

 private:
  Status check_against_index(const std::string& path, const ShardReader& shard,
                             const ShardEntry& e) const {
    const ShardHeader& h = shard.header();
    if (h.kind != static_cast<uint32_t>(index_.kind)) {
      return DataLoss(path, ": shard kind ", h.kind, " differs from index.json's ",
                      static_cast<uint32_t>(index_.kind));
    }
    if (h.tokenizer_hash != index_.tokenizer.hash) {
      return DataLoss(path, ": tokenizer hash ", hex64(h.tokenizer_hash),
                      " differs from index.json's ", hex64(index_.tokenizer.hash));
    }
    if (h.num_tokens != e.num_tokens || h.num_docs != e.num_docs) {
      return DataLoss(path, ": holds ", h.num_tokens, " tokens and ", h.num_docs,
                      " documents, index.json says ", e.num_tokens, " and ", e.num_docs);
    }
    if (h.frame_tokens != index_.frame_tokens) {
      return DataLoss(path, ": ", h.frame_tokens, " tokens per frame, index.json says ",
                      index_.frame_tokens);
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return IoError(str_cat("stat ", path), errno);
    if (static_cast<uint64_t>(st.st_size) != e.bytes) {
      return DataLoss(path, ": file is ", st.st_size, " bytes, index.json says ", e.bytes);
    }
    return Status::Ok();
  }

  Status check_file_hash(const ShardEntry& e) const {
    const std::string path = join_path(dir_, e.file);
    AX_ASSIGN_OR_RETURN(FileDigest got, xxh64_file(path));
    if (got.size != e.bytes) {
      return DataLoss(path, ": file is ", got.size, " bytes, index.json says ", e.bytes);
    }
    if (got.xxh64 != e.xxh64) {
      return DataLoss(path, ": XXH64 of the file is ", hex64(got.xxh64), ", index.json says ",
                      hex64(e.xxh64));
    }
    return Status::Ok();
  }

  const std::string dir_;
  DatasetIndex index_;
  std::vector<std::unique_ptr<ShardReader>> shards_;
  std::vector<uint64_t> token_starts_;  // num_shards + 1 cumulative token counts
  std::vector<uint64_t> doc_starts_;    // num_shards + 1 cumulative document counts
};

ShardSet::ShardSet(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardSet::~ShardSet() = default;

StatusOr<std::shared_ptr<ShardSet>> ShardSet::open(const std::string& dir,
                                                   std::optional<uint64_t> expected_tokenizer_hash,
                                                   size_t cache_frames) {
  auto impl = std::make_unique<Impl>(dir);
  AX_RETURN_IF_ERROR(impl->open(expected_tokenizer_hash, cache_frames));
  return std::shared_ptr<ShardSet>(new ShardSet(std::move(impl)));
}

const DatasetIndex& ShardSet::index() const { return impl_->index(); }
uint64_t ShardSet::num_tokens() const { return impl_->num_tokens(); }
uint64_t ShardSet::num_docs() const { return impl_->num_docs(); }
const ShardReader& ShardSet::shard(size_t i) const { return impl_->shard(i); }
size_t ShardSet::num_shards() const { return impl_->num_shards(); }
Status ShardSet::read(uint64_t begin, std::span<uint32_t> out) const {
  return impl_->read(begin, out);
}
std::pair<uint64_t, uint64_t> ShardSet::doc_range(uint64_t d) const { return impl_->doc_range(d); }
Status ShardSet::verify() const { return impl_->verify(); }

}  // namespace ax::data
