#include "ax/datasets/text_source.h"

#include <glob.h>
#include <sys/stat.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "ax/common/logging.h"
#include "ax/common/strings.h"

namespace ax::data {
namespace {

enum class FileFormat { kText, kJsonl, kJsonlZst };

FileFormat format_of(const std::string& path) {
  if (ends_with(path, ".jsonl.zst") || ends_with(path, ".jsonl.zstd")) return FileFormat::kJsonlZst;
  if (ends_with(path, ".jsonl") || ends_with(path, ".json")) return FileFormat::kJsonl;
  return FileFormat::kText;
}

bool is_blank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos;
}

// Bytes of one input file, raw or decompressed. `consumed` counts bytes taken from the file
// itself (compressed bytes for .zst), for progress.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Returns the number of bytes written to buf, 0 at the end.
  virtual StatusOr<size_t> read(char* buf, size_t n) = 0;
};

class FileStream : public ByteStream {
 public:
  FileStream(std::FILE* f, std::string path, std::atomic<uint64_t>* consumed)
      : f_(f), path_(std::move(path)), consumed_(consumed) {}
  ~FileStream() override { std::fclose(f_); }

  StatusOr<size_t> read(char* buf, size_t n) override {
    size_t got = std::fread(buf, 1, n, f_);
    if (got < n && std::ferror(f_)) return IoError(str_cat("read ", path_), errno);
    consumed_->fetch_add(got, std::memory_order_relaxed);
    return got;
  }

 private:
  std::FILE* f_;
  std::string path_;
  std::atomic<uint64_t>* consumed_;
};

// Streaming zstd decompression (any number of concatenated frames), reading the file in chunks.
class ZstdStream : public ByteStream {
 public:
  ZstdStream(std::unique_ptr<FileStream> file, std::string path)
      : file_(std::move(file)),
        path_(std::move(path)),
        dctx_(ZSTD_createDCtx()),
        in_buf_(ZSTD_DStreamInSize()) {}
  ~ZstdStream() override { ZSTD_freeDCtx(dctx_); }

  StatusOr<size_t> read(char* buf, size_t n) override {
    while (true) {
      if (in_.pos == in_.size && !eof_) {
        AX_ASSIGN_OR_RETURN(size_t got, file_->read(in_buf_.data(), in_buf_.size()));
        in_ = ZSTD_inBuffer{in_buf_.data(), got, 0};
        eof_ = got == 0;
      }
      ZSTD_outBuffer out{buf, n, 0};
      size_t in_before = in_.pos;
      size_t ret = ZSTD_decompressStream(dctx_, &out, &in_);
      if (ZSTD_isError(ret)) {
        return DataLoss(path_, ": corrupt zstd data: ", ZSTD_getErrorName(ret));
      }
      if (ret == 0) {
        frame_open_ = false;
      } else if (in_.pos > in_before) {
        frame_open_ = true;
      }
      if (out.pos > 0) return out.pos;
      if (eof_ && in_.pos == in_.size) {
        if (frame_open_) {
          return DataLoss(path_, ": truncated zstd stream (the file ends inside a frame)");
        }
        return size_t{0};
      }
    }
  }

 private:
  std::unique_ptr<FileStream> file_;
  std::string path_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool eof_ = false;
  bool frame_open_ = false;
};

// Splits a byte stream into lines (without "\n" and a trailing "\r").
class LineReader {
 public:
  explicit LineReader(std::unique_ptr<ByteStream> stream) : stream_(std::move(stream)) {}

  // Returns false at the end of the stream.
  StatusOr<bool> next(std::string* line) {
    while (true) {
      const char* begin = buf_.data() + pos_;
      // A long line spans many reads: scan only the bytes not scanned yet.
      const void* nl = std::memchr(begin + scanned_, '\n', buf_.size() - pos_ - scanned_);
      if (nl != nullptr) {
        size_t len = static_cast<const char*>(nl) - begin;
        line->assign(begin, len);
        pos_ += len + 1;
        scanned_ = 0;
        strip_cr(line);
        return true;
      }
      scanned_ = buf_.size() - pos_;
      if (eof_) {
        if (pos_ == buf_.size()) return false;
        line->assign(begin, buf_.size() - pos_);
        pos_ = buf_.size();
        scanned_ = 0;
        strip_cr(line);
        return true;
      }
      buf_.erase(0, pos_);
      pos_ = 0;
      size_t old = buf_.size();
      buf_.resize(old + kReadSize);
      AX_ASSIGN_OR_RETURN(size_t got, stream_->read(buf_.data() + old, kReadSize));
      buf_.resize(old + got);
      eof_ = got == 0;
    }
  }

 private:
  static constexpr size_t kReadSize = size_t{1} << 20;
  static void strip_cr(std::string* line) {
    if (!line->empty() && line->back() == '\r') line->pop_back();
  }

  std::unique_ptr<ByteStream> stream_;
  std::string buf_;
  size_t pos_ = 0;      // start of the next line in buf_
  size_t scanned_ = 0;  // bytes after pos_ known to hold no newline
  bool eof_ = false;
};

// The start of a line for messages, cut at a character boundary.
std::string snippet(std::string_view line) {
  constexpr size_t kMax = 40;
  if (line.size() <= kMax) return std::string(line);
  size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(line[n]) & 0xC0) == 0x80) --n;
  return str_cat(line.substr(0, n), "...");
}

std::string json_type_name(const nlohmann::json& v) { return v.type_name(); }

// obj[path], where "a.b" reaches into nested objects (an exact key with a dot wins).
const nlohmann::json* find_field(const nlohmann::json& obj, const std::string& path) {
  if (!obj.is_object()) return nullptr;
  if (auto it = obj.find(path); it != obj.end()) return &*it;
  const nlohmann::json* cur = &obj;
  for (const std::string& part : str_split(path, '.')) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(part);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

}  // namespace

bool is_valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const unsigned char* end = p + s.size();
  while (p < end) {
    unsigned char c = *p;
    if (c < 0x80) {
      ++p;
      continue;
    }
    int n;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      n = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      n = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      n = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (end - p <= n) return false;
    for (int i = 1; i <= n; ++i) {
      if ((p[i] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i] & 0x3F);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p += n + 1;
  }
  return true;
}

class TextSource::Impl {
 public:
  Impl(std::vector<std::string> files, std::vector<uint64_t> sizes, TextSourceOptions options)
      : files_(std::move(files)), sizes_(std::move(sizes)), options_(std::move(options)) {
    for (uint64_t s : sizes_) total_bytes_ += s;
  }

  StatusOr<bool> next(Document* doc) {
    while (true) {
      if (!reader_) {
        if (file_index_ == files_.size()) return false;
        AX_RETURN_IF_ERROR(open_file());
      }
      AX_ASSIGN_OR_RETURN(bool got, next_in_file(doc));
      if (got) return true;
      close_file();
    }
  }

  std::vector<std::string> files_;
  std::vector<uint64_t> sizes_;
  TextSourceOptions options_;
  uint64_t total_bytes_ = 0;
  // Written by the reader, read by progress lines on another thread.
  std::atomic<uint64_t> done_bytes_{0};  // sizes of the files already finished
  std::atomic<uint64_t> file_bytes_{0};  // consumed from the current file
  std::atomic<uint64_t> skipped_empty_{0};
  std::atomic<uint64_t> skipped_bad_{0};

 private:
  Status open_file() {
    const std::string& path = files_[file_index_];
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) return IoError(str_cat("open ", path), errno);
    file_bytes_ = 0;
    auto file = std::make_unique<FileStream>(f, path, &file_bytes_);
    format_ = format_of(path);
    if (options_.seq2seq && format_ == FileFormat::kText) {
      return InvalidArgument(path,
                             ": seq2seq input must be JSON lines (.jsonl or .jsonl.zst) with '",
                             options_.inputs_field, "' and '", options_.targets_field, "' fields");
    }
    if (format_ == FileFormat::kJsonlZst) {
      reader_ = std::make_unique<LineReader>(std::make_unique<ZstdStream>(std::move(file), path));
    } else {
      reader_ = std::make_unique<LineReader>(std::move(file));
    }
    line_no_ = 0;
    exhausted_ = false;
    bad_in_file_ = 0;
    first_bad_.clear();
    return Status::Ok();
  }

  void close_file() {
    if (bad_in_file_ > 0) {
      AX_LOG(kWarn, "data") << files_[file_index_] << ": skipped " << bad_in_file_
                            << " bad records (first: " << first_bad_ << ")";
    }
    reader_.reset();
    done_bytes_ += sizes_[file_index_];
    file_bytes_ = 0;
    ++file_index_;
  }

  std::string where(uint64_t line) const { return str_cat(files_[file_index_], ":", line); }

  // A bad record: an error, or counted and skipped with --skip-bad.
  Status bad(uint64_t line, std::string_view what) {
    std::string msg = str_cat(where(line), ": ", what);
    if (!options_.skip_bad) return DataLoss(msg);
    if (bad_in_file_++ == 0) first_bad_ = msg;
    skipped_bad_.fetch_add(1, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status check_utf8(uint64_t line, const std::string& text, bool* ok) {
    *ok = is_valid_utf8(text);
    if (*ok) return Status::Ok();
    return bad(line, "text is not valid UTF-8");
  }

  // Returns false at the end of the current file.
  StatusOr<bool> next_in_file(Document* doc) {
    if (format_ != FileFormat::kText) return next_json(doc);
    switch (options_.text_unit) {
      case TextUnit::kLine:
        return next_line(doc);
      case TextUnit::kParagraph:
        return next_block(doc, /*stop_at_blank=*/true);
      case TextUnit::kFile:
        return next_block(doc, /*stop_at_blank=*/false);
    }
    return false;
  }

  StatusOr<bool> next_line(Document* doc) {
    while (true) {
      AX_ASSIGN_OR_RETURN(bool got, reader_->next(&line_));
      if (!got) return false;
      ++line_no_;
      bool ok;
      AX_RETURN_IF_ERROR(check_utf8(line_no_, line_, &ok));
      if (!ok) continue;
      if (is_blank(line_)) {
        skipped_empty_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      set(doc, std::move(line_), line_no_);
      return true;
    }
  }

  // A paragraph (lines up to a blank line) or the whole file. A paragraph with a bad line is
  // skipped whole when skip_bad is on.
  StatusOr<bool> next_block(Document* doc, bool stop_at_blank) {
    while (!exhausted_) {
      std::string text;
      uint64_t first_line = 0;
      bool any = false, bad_block = false;
      while (true) {
        AX_ASSIGN_OR_RETURN(bool got, reader_->next(&line_));
        if (!got) {
          exhausted_ = true;
          break;
        }
        ++line_no_;
        bool ok;
        AX_RETURN_IF_ERROR(check_utf8(line_no_, line_, &ok));
        if (!ok) bad_block = true;
        if (stop_at_blank && is_blank(line_)) {
          if (any) break;
          continue;  // blank lines separate paragraphs, they are not documents
        }
        if (!any) first_line = line_no_;
        if (any) text += '\n';
        text += line_;
        any = true;
      }
      if (bad_block) continue;
      if (any && !is_blank(text)) {
        set(doc, std::move(text), first_line);
        return true;
      }
      // An empty (or blank) file is one empty document; the end of a paragraph file is none.
      if (any || !stop_at_blank) skipped_empty_.fetch_add(1, std::memory_order_relaxed);
    }
    return false;
  }

  StatusOr<bool> next_json(Document* doc) {
    while (true) {
      AX_ASSIGN_OR_RETURN(bool got, reader_->next(&line_));
      if (!got) return false;
      ++line_no_;
      if (is_blank(line_)) continue;  // a blank line is no record
      bool ok;
      AX_RETURN_IF_ERROR(check_utf8(line_no_, line_, &ok));
      if (!ok) continue;
      nlohmann::json obj = nlohmann::json::parse(line_, nullptr, /*allow_exceptions=*/false);
      if (obj.is_discarded()) {
        AX_RETURN_IF_ERROR(bad(line_no_, str_cat("invalid JSON: ", snippet(line_))));
        continue;
      }
      if (!obj.is_object()) {
        AX_RETURN_IF_ERROR(
            bad(line_no_, str_cat("expected a JSON object, got a ", json_type_name(obj))));
        continue;
      }
      std::string text, targets;
      if (options_.seq2seq) {
        AX_ASSIGN_OR_RETURN(ok, string_field(obj, options_.inputs_field, &text));
        if (!ok) continue;
        AX_ASSIGN_OR_RETURN(ok, string_field(obj, options_.targets_field, &targets));
        if (!ok) continue;
      } else {
        AX_ASSIGN_OR_RETURN(ok, string_field(obj, options_.json_field, &text));
        if (!ok) continue;
      }
      if (is_blank(text) || (options_.seq2seq && is_blank(targets))) {
        skipped_empty_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      set(doc, std::move(text), line_no_);
      doc->targets = std::move(targets);
      const nlohmann::json* set_name = find_field(obj, "meta.pile_set_name");
      if (set_name != nullptr && set_name->is_string())
        doc->set_name = set_name->get<std::string>();
      return true;
    }
  }

  // Reads obj[field] into out; false (record skipped) or an error when it is missing or not a
  // string.
  StatusOr<bool> string_field(const nlohmann::json& obj, const std::string& field,
                              std::string* out) {
    const nlohmann::json* v = find_field(obj, field);
    if (v == nullptr) {
      AX_RETURN_IF_ERROR(bad(line_no_, str_cat("no field '", field, "'")));
      return false;
    }
    if (!v->is_string()) {
      AX_RETURN_IF_ERROR(bad(
          line_no_, str_cat("field '", field, "' is a ", json_type_name(*v), ", not a string")));
      return false;
    }
    *out = v->get<std::string>();
    return true;
  }

  void set(Document* doc, std::string text, uint64_t line) {
    doc->text = std::move(text);
    doc->targets.clear();
    doc->set_name.clear();
    doc->where = where(line);
  }

  size_t file_index_ = 0;
  FileFormat format_ = FileFormat::kText;
  std::unique_ptr<LineReader> reader_;
  uint64_t line_no_ = 0;
  bool exhausted_ = false;  // the last block of the file was returned
  uint64_t bad_in_file_ = 0;
  std::string first_bad_;
  std::string line_;
};

StatusOr<std::unique_ptr<TextSource>> TextSource::open(const std::vector<std::string>& inputs,
                                                       const TextSourceOptions& options) {
  if (inputs.empty()) return InvalidArgument("no input files given");
  std::vector<std::string> files;
  std::vector<uint64_t> sizes;
  for (const std::string& input : inputs) {
    std::vector<std::string> matched;
    if (input.find_first_of("*?[") != std::string::npos) {
      glob_t g{};
      int rc = ::glob(input.c_str(), 0, nullptr, &g);
      if (rc == 0) {
        for (size_t i = 0; i < g.gl_pathc; ++i) matched.emplace_back(g.gl_pathv[i]);
      }
      ::globfree(&g);
      if (rc == GLOB_NOMATCH || matched.empty()) {
        return NotFound("input pattern '", input, "' matches no file");
      }
      if (rc != 0) return IoError(str_cat("glob ", input), errno);
    } else {
      matched.push_back(input);
    }
    for (std::string& path : matched) {
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return NotFound("input file ", path, " does not exist");
        return IoError(str_cat("stat ", path), errno);
      }
      if (S_ISDIR(st.st_mode)) {
        return InvalidArgument("input ", path, " is a directory (give files or a glob)");
      }
      sizes.push_back(st.st_size);
      files.push_back(std::move(path));
    }
  }
  return std::unique_ptr<TextSource>(
      new TextSource(std::make_unique<Impl>(std::move(files), std::move(sizes), options)));
}

TextSource::TextSource(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextSource::~TextSource() = default;

StatusOr<bool> TextSource::next(Document* doc) { return impl_->next(doc); }
const std::vector<std::string>& TextSource::files() const { return impl_->files_; }
uint64_t TextSource::total_bytes() const { return impl_->total_bytes_; }
uint64_t TextSource::bytes_read() const {
  // Read from another thread for progress lines: a slightly stale value is fine.
  return std::min(impl_->total_bytes_, impl_->done_bytes_.load() + impl_->file_bytes_.load());
}
uint64_t TextSource::skipped_empty() const { return impl_->skipped_empty_.load(); }
uint64_t TextSource::skipped_bad() const { return impl_->skipped_bad_.load(); }

}  // namespace ax::data
