#include "ax/datasets/shards/shard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "ax/common/check.h"
#include "ax/common/file_io.h"
#include "shard_internal.h"

namespace ax::data {
namespace {

using internal::kHeaderFrameBytes;
using internal::kSeekDescriptor;

static_assert(std::endian::native == std::endian::little,
              "the shard format is little-endian and written with plain memcpy");

// The seekable format's reference limit (ZSTD_SEEKABLE_MAXFRAMES); also keeps the seek table's
// frame size within its u32.
constexpr size_t kMaxFrames = 0x8000000;

struct SeekEntry {
  uint32_t compressed;
  uint32_t raw;
  uint32_t checksum;
};

void put_u32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void put_u64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string dir_name(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};

}  // namespace

class ShardWriter::Impl {
 public:
  Impl(std::string path, const ShardWriterOptions& options)
      : path_(std::move(path)), tmp_(path_ + ".tmp"), options_(options) {}

  ~Impl() { discard(); }

  Status open() {
    if (options_.frame_tokens == 0 || options_.frame_tokens > kMaxFrameTokens) {
      return InvalidArgument(base_name(path_), ": frame_tokens ", options_.frame_tokens,
                             " is outside [1, ", kMaxFrameTokens, "]");
    }
    if (options_.kind != ShardKind::kLm && options_.kind != ShardKind::kSeq2Seq) {
      return InvalidArgument(base_name(path_), ": unknown shard kind ",
                             static_cast<uint32_t>(options_.kind));
    }
    cctx_.reset(ZSTD_createCCtx());
    AX_CHECK(cctx_ != nullptr) << "ZSTD_createCCtx failed";
    size_t rc = ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_compressionLevel, options_.zstd_level);
    if (ZSTD_isError(rc)) {
      return InvalidArgument(base_name(path_), ": zstd level ", options_.zstd_level, ": ",
                             ZSTD_getErrorName(rc));
    }
    // zstd's own content checksum lets `zstd -t` / `zstd -dc` check a shard without ax.
    AX_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_checksumFlag, 1)));
    AX_CHECK(!ZSTD_isError(ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_contentSizeFlag, 1)));
    frame_.reserve(options_.frame_tokens);
    compressed_.resize(ZSTD_compressBound(size_t{options_.frame_tokens} * 4));

    fd_ = ::open(tmp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return IoError(str_cat("create ", tmp_), errno);
    // A placeholder until finish() knows the counts; a zero header never validates.
    const char zeros[kHeaderFrameBytes] = {};
    return append(zeros, sizeof(zeros));
  }

  Status add_tokens(std::span<const uint32_t> tokens, bool end_of_document) {
    if (finished_) return FailedPrecondition(base_name(path_), ": add_document after finish");
    AX_RETURN_IF_ERROR(error_);
    // Readers rely on doc ends being strictly increasing.
    const uint64_t doc_start = doc_ends_.empty() ? 0 : doc_ends_.back();
    if (end_of_document && tokens.empty() && num_tokens() == doc_start) {
      return InvalidArgument(base_name(path_), ": empty document");
    }
    while (!tokens.empty()) {
      size_t take = std::min(tokens.size(), options_.frame_tokens - frame_.size());
      frame_.insert(frame_.end(), tokens.begin(), tokens.begin() + take);
      tokens = tokens.subspan(take);
      if (frame_.size() == options_.frame_tokens) AX_RETURN_IF_ERROR(flush_frame());
    }
    if (end_of_document) doc_ends_.push_back(num_tokens());
    return Status::Ok();
  }

  StatusOr<ShardEntry> finish() {
    if (finished_) return FailedPrecondition(base_name(path_), ": finish called twice");
    AX_RETURN_IF_ERROR(error_);
    if (options_.kind == ShardKind::kSeq2Seq && doc_ends_.size() % 2 != 0) {
      return FailedPrecondition(base_name(path_), ": seq2seq shard with an odd number (",
                                doc_ends_.size(), ") of documents");
    }
    if (num_tokens() != (doc_ends_.empty() ? 0 : doc_ends_.back())) {
      return FailedPrecondition(base_name(path_), ": finish inside a document");
    }
    if (!frame_.empty()) AX_RETURN_IF_ERROR(flush_frame());
    AX_RETURN_IF_ERROR(write_doc_table());
    AX_RETURN_IF_ERROR(write_seek_table());
    AX_RETURN_IF_ERROR(write_header());
    AX_RETURN_IF_ERROR(commit());
    finished_ = true;
    ShardEntry entry;
    entry.file = base_name(path_);
    entry.num_tokens = num_tokens();
    entry.num_docs = doc_ends_.size();
    entry.bytes = file_bytes_;
    entry.xxh64 = file_hash_;
    return entry;
  }

  uint64_t num_tokens() const { return flushed_tokens_ + frame_.size(); }
  uint64_t num_docs() const { return doc_ends_.size(); }

 private:
  // Every failure goes through here: the temporary file is removed at once and later calls
  // return the same error.
  Status fail(Status s) {
    error_ = s;
    discard();
    return s;
  }

  void discard() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (!finished_ && !tmp_removed_) {
      ::unlink(tmp_.c_str());
      tmp_removed_ = true;
    }
  }

  Status append(const void* data, size_t size) {
    Status s = write_all(fd_, data, size, tmp_);
    if (!s.ok()) return fail(std::move(s));
    file_bytes_ += size;
    return Status::Ok();
  }

  StatusOr<size_t> compress(const void* src, size_t size) {
    size_t bound = ZSTD_compressBound(size);
    if (compressed_.size() < bound) compressed_.resize(bound);
    size_t n = ZSTD_compress2(cctx_.get(), compressed_.data(), compressed_.size(), src, size);
    if (ZSTD_isError(n)) {
      return fail(Internal(base_name(path_), ": zstd compression failed: ", ZSTD_getErrorName(n)));
    }
    return n;
  }

  Status flush_frame() {
    if (seek_.size() >= kMaxFrames) {
      return fail(InvalidArgument(base_name(path_), ": more than ", kMaxFrames,
                                  " frames; use smaller shards"));
    }
    const size_t raw = frame_.size() * sizeof(uint32_t);
    AX_ASSIGN_OR_RETURN(size_t n, compress(frame_.data(), raw));
    AX_RETURN_IF_ERROR(append(compressed_.data(), n));
    seek_.push_back(
        {static_cast<uint32_t>(n), static_cast<uint32_t>(raw), checksum32(frame_.data(), raw)});
    flushed_tokens_ += frame_.size();
    frame_.clear();
    return Status::Ok();
  }

  Status write_doc_table() {
    const size_t raw = doc_ends_.size() * sizeof(uint64_t);
    AX_ASSIGN_OR_RETURN(size_t n, compress(doc_ends_.data(), raw));
    if (n > UINT32_MAX - 16) {
      return fail(InvalidArgument(base_name(path_), ": doc table too large; use smaller shards"));
    }
    std::string head;
    put_u32(&head, kDocTableMagic);
    put_u32(&head, static_cast<uint32_t>(16 + n));
    put_u64(&head, doc_ends_.size());
    put_u32(&head, checksum32(doc_ends_.data(), raw));
    put_u32(&head, 0);
    AX_RETURN_IF_ERROR(append(head.data(), head.size()));
    return append(compressed_.data(), n);
  }

  Status write_seek_table() {
    std::string table;
    table.reserve(8 + seek_.size() * 12 + 9);
    put_u32(&table, kSeekTableMagic);
    put_u32(&table, static_cast<uint32_t>(seek_.size() * 12 + 9));
    for (const SeekEntry& e : seek_) {
      put_u32(&table, e.compressed);
      put_u32(&table, e.raw);
      put_u32(&table, e.checksum);
    }
    put_u32(&table, static_cast<uint32_t>(seek_.size()));
    table.push_back(static_cast<char>(kSeekDescriptor));
    put_u32(&table, kSeekableFooterMagic);
    return append(table.data(), table.size());
  }

  Status write_header() {
    ShardHeader h{};
    std::memcpy(h.magic, kShardMagic, sizeof(h.magic));
    h.version = kShardVersion;
    h.kind = static_cast<uint32_t>(options_.kind);
    h.token_bytes = sizeof(uint32_t);
    h.frame_tokens = options_.frame_tokens;
    h.num_tokens = num_tokens();
    h.num_docs = doc_ends_.size();
    h.tokenizer_hash = options_.tokenizer_hash;
    h.num_frames = static_cast<uint32_t>(seek_.size());
    h.header_checksum = checksum32(&h, offsetof(ShardHeader, header_checksum));
    std::string frame;
    put_u32(&frame, kHeaderMagic);
    put_u32(&frame, kHeaderPayloadBytes);
    frame.append(reinterpret_cast<const char*>(&h), sizeof(h));
    size_t done = 0;
    while (done < frame.size()) {
      ssize_t n = ::pwrite(fd_, frame.data() + done, frame.size() - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return fail(IoError(str_cat("write header of ", tmp_), errno));
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  // fsync, hash, rename, fsync the directory: only a complete, durable file gets the final name.
  Status commit() {
    if (::fsync(fd_) != 0) return fail(IoError(str_cat("fsync ", tmp_), errno));
    // Read back from the page cache: the header is written last, at the front, so the file's
    // hash cannot be streamed while writing.
    XXH64_state_t* state = XXH64_createState();
    AX_CHECK(state != nullptr);
    XXH64_reset(state, 0);
    std::vector<char> buf(size_t{1} << 20);
    uint64_t off = 0;
    while (off < file_bytes_) {
      ssize_t n = ::pread(fd_, buf.data(), buf.size(), static_cast<off_t>(off));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = n < 0 ? errno : EIO;
        XXH64_freeState(state);
        return fail(IoError(str_cat("read back ", tmp_), err));
      }
      XXH64_update(state, buf.data(), static_cast<size_t>(n));
      off += static_cast<uint64_t>(n);
    }
    file_hash_ = XXH64_digest(state);
    XXH64_freeState(state);
    if (::close(fd_) != 0) {
      fd_ = -1;
      return fail(IoError(str_cat("close ", tmp_), errno));
    }
    fd_ = -1;
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      return fail(IoError(str_cat("rename ", tmp_, " to ", base_name(path_)), errno));
    }
    tmp_removed_ = true;
    Status s = fsync_dir(dir_name(path_));
    if (!s.ok()) {
      ::unlink(path_.c_str());
      return fail(s);
    }
    return Status::Ok();
  }

  const std::string path_;
  const std::string tmp_;
  const ShardWriterOptions options_;
  int fd_ = -1;
  bool finished_ = false;
  bool tmp_removed_ = false;
  Status error_;
  std::unique_ptr<ZSTD_CCtx, CCtxDeleter> cctx_;
  std::vector<uint32_t> frame_;   // tokens of the frame being filled
  std::vector<char> compressed_;  // reused output buffer
  std::vector<SeekEntry> seek_;   // one per written frame
  std::vector<uint64_t> doc_ends_;
  uint64_t flushed_tokens_ = 0;
  uint64_t file_bytes_ = 0;
  uint64_t file_hash_ = 0;
};

ShardWriter::ShardWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardWriter::~ShardWriter() = default;

StatusOr<std::unique_ptr<ShardWriter>> ShardWriter::create(const std::string& path,
                                                           const ShardWriterOptions& options) {
  auto impl = std::make_unique<Impl>(path, options);
  AX_RETURN_IF_ERROR(impl->open());
  return std::unique_ptr<ShardWriter>(new ShardWriter(std::move(impl)));
}

Status ShardWriter::add_document(std::span<const uint32_t> tokens) {
  return impl_->add_tokens(tokens, /*end_of_document=*/true);
}
Status ShardWriter::add_tokens(std::span<const uint32_t> tokens, bool end_of_document) {
  return impl_->add_tokens(tokens, end_of_document);
}
StatusOr<ShardEntry> ShardWriter::finish() { return impl_->finish(); }
uint64_t ShardWriter::num_tokens() const { return impl_->num_tokens(); }
uint64_t ShardWriter::num_docs() const { return impl_->num_docs(); }

class ShardSetWriter::Impl {
 public:
  Impl(std::string dir, const ShardSetWriterOptions& options)
      : dir_(std::move(dir)), options_(options) {}

  // An unfinished set leaves nothing behind: the open shard removes its temporary file, and the
  // finished shards are useless without an index.
  ~Impl() {
    if (finished_) return;
    current_.reset();
    for (const ShardEntry& e : shards_) ::unlink(join_path(dir_, e.file).c_str());
  }

  Status init() {
    if (dir_.empty()) return InvalidArgument("shard directory name is empty");
    struct stat st;
    if (::stat(dir_.c_str(), &st) != 0) return IoError(str_cat("shard directory ", dir_), errno);
    if (!S_ISDIR(st.st_mode)) return InvalidArgument(dir_, " is not a directory");
    if (::access(join_path(dir_, kIndexFile).c_str(), F_OK) == 0) {
      return AlreadyExists(dir_, " already holds a shard set (", kIndexFile,
                           "); delete it first to write a new one");
    }
    if (options_.shard_tokens == 0) return InvalidArgument("shard_tokens must be positive");
    uint64_t& shard_hash = options_.shard.tokenizer_hash;
    uint64_t& index_hash = options_.tokenizer.hash;
    if (shard_hash != 0 && index_hash != 0 && shard_hash != index_hash) {
      return InvalidArgument(
          "tokenizer hash differs between the shard options and the tokenizer info");
    }
    shard_hash = index_hash = index_hash != 0 ? index_hash : shard_hash;
    return remove_leftovers();
  }

  Status add_tokens(std::span<const uint32_t> tokens, bool end_of_document) {
    if (finished_) return FailedPrecondition(dir_, ": add_document after finish");
    AX_RETURN_IF_ERROR(error_);
    // Refused before anything is written, so the set stays usable.
    if (end_of_document && tokens.empty() && open_doc_tokens_ == 0) {
      return InvalidArgument(dir_, ": empty document");
    }
    open_doc_tokens_ = end_of_document ? 0 : open_doc_tokens_ + tokens.size();
    if (!current_) {
      char name[32];
      std::snprintf(name, sizeof(name), "shard-%05zu%s", shards_.size(), kShardSuffix);
      auto writer = ShardWriter::create(join_path(dir_, name), options_.shard);
      if (!writer.ok()) return error_ = writer.status();
      current_ = std::move(writer).value();
    }
    Status s = current_->add_tokens(tokens, end_of_document);
    if (!s.ok()) return error_ = s;
    if (!end_of_document) return Status::Ok();
    // seq2seq examples are (input, target) pairs, which must stay in one shard.
    bool boundary = options_.shard.kind != ShardKind::kSeq2Seq || current_->num_docs() % 2 == 0;
    if (boundary && current_->num_tokens() >= options_.shard_tokens) return finish_current();
    return Status::Ok();
  }

  StatusOr<DatasetIndex> finish() {
    if (finished_) return FailedPrecondition(dir_, ": finish called twice");
    AX_RETURN_IF_ERROR(error_);
    if (current_) AX_RETURN_IF_ERROR(finish_current());
    DatasetIndex index = extras_;
    index.format_version = kIndexFormatVersion;
    index.kind = options_.shard.kind;
    index.tokenizer = options_.tokenizer;
    index.frame_tokens = options_.shard.frame_tokens;
    index.num_tokens = 0;
    index.num_docs = 0;
    for (const ShardEntry& e : shards_) {
      index.num_tokens += e.num_tokens;
      index.num_docs += e.num_docs;
    }
    index.shards = shards_;
    Status s = write_dataset_index(dir_, index);
    if (!s.ok()) return error_ = s;
    finished_ = true;
    return index;
  }

  DatasetIndex& extras() { return extras_; }

 private:
  Status finish_current() {
    StatusOr<ShardEntry> entry = current_->finish();
    current_.reset();
    if (!entry.ok()) return error_ = entry.status();
    shards_.push_back(std::move(entry).value());
    return Status::Ok();
  }

  // Without an index the directory holds an interrupted run: its shards and temporary files are
  // garbage and would otherwise be mistaken for (or collide with) the new ones.
  Status remove_leftovers() {
    std::error_code ec;
    std::vector<std::filesystem::path> doomed;
    // The error_code overloads throughout: a range-for would throw from operator++.
    std::filesystem::directory_iterator it(dir_, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (ends_with(name, ".tmp") || ends_with(name, kShardSuffix)) doomed.push_back(it->path());
    }
    if (ec) return IoError(str_cat("list ", dir_), ec.value());
    for (const auto& path : doomed) {
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
        return IoError(str_cat("remove leftover ", path.string()), errno);
      }
    }
    return Status::Ok();
  }

  const std::string dir_;
  ShardSetWriterOptions options_;
  DatasetIndex extras_;
  std::unique_ptr<ShardWriter> current_;
  std::vector<ShardEntry> shards_;
  uint64_t open_doc_tokens_ = 0;  // of the document not ended yet
  Status error_;
  bool finished_ = false;
};

ShardSetWriter::ShardSetWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ShardSetWriter::~ShardSetWriter() = default;

StatusOr<std::unique_ptr<ShardSetWriter>> ShardSetWriter::create(
    const std::string& dir, const ShardSetWriterOptions& options) {
  auto impl = std::make_unique<Impl>(dir, options);
  AX_RETURN_IF_ERROR(impl->init());
  return std::unique_ptr<ShardSetWriter>(new ShardSetWriter(std::move(impl)));
}

Status ShardSetWriter::add_document(std::span<const uint32_t> tokens) {
  return impl_->add_tokens(tokens, /*end_of_document=*/true);
}
Status ShardSetWriter::add_tokens(std::span<const uint32_t> tokens, bool end_of_document) {
  return impl_->add_tokens(tokens, end_of_document);
}
DatasetIndex& ShardSetWriter::index_extras() { return impl_->extras(); }
StatusOr<DatasetIndex> ShardSetWriter::finish() { return impl_->finish(); }

}  // namespace ax::data
