#include "ax/datasets/text/text_source.h"

#include <glob.h>
#include <sys/stat.h>
#include <zstd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "ax/common/check.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "doc_buffer.h"
#include "json_line.h"

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
// Errors name no file: the line reader's caller adds "file:line".
class ZstdStream : public ByteStream {
 public:
  explicit ZstdStream(std::unique_ptr<FileStream> file)
      : file_(std::move(file)), dctx_(ZSTD_createDCtx()), in_buf_(ZSTD_DStreamInSize()) {}
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
        return DataLoss("corrupt zstd data: ", ZSTD_getErrorName(ret));
      }
      if (ret == 0) {
        frame_open_ = false;
      } else if (in_.pos > in_before) {
        frame_open_ = true;
      }
      if (out.pos > 0) return out.pos;
      if (eof_ && in_.pos == in_.size) {
        if (frame_open_) {
          return DataLoss("truncated zstd stream (the file ends inside a frame)");
        }
        return size_t{0};
      }
    }
  }

 private:
  std::unique_ptr<FileStream> file_;
  ZSTD_DCtx* dctx_;
  std::vector<char> in_buf_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  bool eof_ = false;
  bool frame_open_ = false;
};

// Splits a byte stream into lines (without "\n" and a trailing "\r"), handed over in pieces so
// that a line of any length needs no more than a few MiB.
class LineReader {
 public:
  explicit LineReader(std::unique_ptr<ByteStream> stream) : stream_(std::move(stream)) {}

  // The next piece of the current line: up to about kPieceBytes, ending at a UTF-8 character
  // boundary except at the line's end (an incomplete character there is passed on for the
  // validator to reject). *end is set on the line's last piece. Returns false when no line is
  // left. The piece stays valid until the next call.
  StatusOr<bool> next(std::string_view* piece, bool* end) {
    while (true) {
      const char* begin = buf_.data() + pos_;
      const size_t avail = buf_.size() - pos_;
      // A long line spans many reads: scan only the bytes not scanned yet.
      const void* nl = std::memchr(begin + scanned_, '\n', avail - scanned_);
      if (nl != nullptr) {
        const size_t len = static_cast<const char*>(nl) - begin;
        *piece = strip_cr(std::string_view(begin, len));
        pos_ += len + 1;
        return line_end(end);
      }
      scanned_ = avail;
      if (eof_) {
        if (avail == 0 && !in_line_) return false;
        *piece = strip_cr(std::string_view(begin, avail));
        pos_ = buf_.size();
        return line_end(end);
      }
      if (avail >= kPieceBytes) {
        const size_t n = whole_characters(std::string_view(begin, avail));
        *piece = std::string_view(begin, n);
        pos_ += n;
        scanned_ = avail - n;
        in_line_ = true;
        *end = false;
        return true;
      }
      buf_.erase(0, pos_);
      pos_ = 0;
      const size_t old = buf_.size();
      buf_.resize(old + kReadSize);
      AX_ASSIGN_OR_RETURN(size_t got, stream_->read(buf_.data() + old, kReadSize));
      buf_.resize(old + got);
      eof_ = got == 0;
    }
  }

 private:
  static constexpr size_t kReadSize = size_t{1} << 20;
  static constexpr size_t kPieceBytes = size_t{1} << 18;

  bool line_end(bool* end) {
    scanned_ = 0;
    in_line_ = false;
    *end = true;
    return true;
  }
  static std::string_view strip_cr(std::string_view line) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  }
  // The length of s without a final "\r" (it may precede the "\n") and without an incomplete
  // character at its end.
  static size_t whole_characters(std::string_view s) {
    size_t n = s.size();
    if (s[n - 1] == '\r') --n;
    for (size_t k = 1; k <= 3 && k <= n; ++k) {
      const auto c = static_cast<unsigned char>(s[n - k]);
      if ((c & 0xC0) == 0x80) continue;  // a continuation byte: look further back
      const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
      if (len > k) n -= k;
      break;
    }
    return n;
  }

  std::unique_ptr<ByteStream> stream_;
  std::string buf_;
  size_t pos_ = 0;      // start of the unread bytes in buf_
  size_t scanned_ = 0;  // bytes after pos_ known to hold no newline
  bool eof_ = false;
  bool in_line_ = false;  // pieces of the current line were handed out
};

// The start of a line for messages, cut at a character boundary.
std::string snippet(std::string_view line) {
  constexpr size_t kMax = 40;
  if (line.size() <= kMax) return std::string(line);
  size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(line[n]) & 0xC0) == 0x80) --n;
  return str_cat(line.substr(0, n), "...");
}

// What read_line saw of one line.
struct LineInfo {
  bool utf8_ok = true;
  bool blank = true;
  std::string head;  // the first bytes, for messages
};

}  // namespace

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

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
      : files_(std::move(files)),
        sizes_(std::move(sizes)),
        options_(std::move(options)),
        text_(options_.spill_dir, options_.doc_memory_bytes, keep_limit()),
        targets_(options_.spill_dir, options_.doc_memory_bytes, keep_limit()),
        set_name_buf_(options_.spill_dir, kMaxSetNameBytes, kMaxSetNameBytes),
        paths_(json_paths(options_)),
        set_name_index_(paths_.size() - 1),
        parser_(paths_, options_.seq2seq
                            ? std::vector<DocBuffer*>{&text_, &targets_, &set_name_buf_}
                            : std::vector<DocBuffer*>{&text_, &set_name_buf_}) {
    for (uint64_t s : sizes_) total_bytes_ += s;
  }

  StatusOr<bool> next_part(DocPart* part) {
    while (serving_ == Serving::kNone) {
      if (!reader_) {
        if (file_index_ == files_.size()) return false;
        AX_RETURN_IF_ERROR(open_file());
      }
      AX_ASSIGN_OR_RETURN(bool got, next_record());
      if (got) {
        serving_ = Serving::kText;
        first_ = true;
        text_.rewind();
        targets_.rewind();
      } else {
        close_file();
      }
    }
    DocBuffer& buf = serving_ == Serving::kText ? text_ : targets_;
    AX_ASSIGN_OR_RETURN(bool got, buf.read_part(&part->text, options_.part_bytes));
    AX_CHECK(got) << "a document of a good record has no text";
    part->first = first_;
    part->last = buf.at_end();
    part->targets = serving_ == Serving::kTargets;
    part->set_name = set_name_;
    part->where = where_;
    first_ = part->last;
    if (part->last) {
      serving_ =
          serving_ == Serving::kText && options_.seq2seq ? Serving::kTargets : Serving::kNone;
    }
    return true;
  }

  StatusOr<bool> next(Document* doc) {
    doc->text.clear();
    doc->targets.clear();
    DocPart part;
    while (true) {
      AX_ASSIGN_OR_RETURN(bool got, next_part(&part));
      if (!got) return false;
      (part.targets ? doc->targets : doc->text) += part.text;
      doc->set_name = part.set_name;
      doc->where = part.where;
      if (part.last && (part.targets || !options_.seq2seq)) return true;
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
  std::atomic<uint64_t> skipped_long_{0};
  std::atomic<uint64_t> truncated_long_{0};

 private:
  enum class Serving { kNone, kText, kTargets };
  static constexpr size_t kMaxSetNameBytes = 1024;
  static constexpr size_t kHeadBytes = 64;

  // Bytes of a document worth keeping: with --max-doc-bytes, what can be written.
  uint64_t keep_limit() const { return options_.max_doc_bytes; }

  // The JSON paths the parser captures: the text (or inputs and targets), then the set name.
  static std::vector<std::string> json_paths(const TextSourceOptions& o) {
    if (o.seq2seq) return {o.inputs_field, o.targets_field, "meta.pile_set_name"};
    return {o.json_field, "meta.pile_set_name"};
  }

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
      reader_ = std::make_unique<LineReader>(std::make_unique<ZstdStream>(std::move(file)));
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

  // Reads the next line, handing its pieces to `consume` while the line is valid UTF-8. Returns
  // false at the end of the file.
  StatusOr<bool> read_line(const std::function<Status(std::string_view)>& consume, LineInfo* info) {
    *info = LineInfo{};
    bool any = false;
    while (true) {
      std::string_view piece;
      bool end = false;
      StatusOr<bool> next = reader_->next(&piece, &end);
      // A read or decompression error names the line it cut short.
      if (!next.ok()) return next.status().with_context(where(any ? line_no_ : line_no_ + 1));
      const bool got = *next;
      if (!got) {
        if (!any) return false;
        break;
      }
      if (!any) ++line_no_;
      any = true;
      if (info->head.size() < kHeadBytes) {
        info->head.append(piece.substr(0, kHeadBytes - info->head.size()));
      }
      if (info->blank && !is_blank(piece)) info->blank = false;
      if (info->utf8_ok && !is_valid_utf8(piece)) info->utf8_ok = false;
      if (info->utf8_ok) AX_RETURN_IF_ERROR(consume(piece));
      if (end) break;
    }
    return true;
  }

  // Applies --max-doc-bytes to the record in the buffers; false when it is skipped.
  StatusOr<bool> within_limit(uint64_t line) {
    const uint64_t max = options_.max_doc_bytes;
    const uint64_t longest = std::max(text_.size(), options_.seq2seq ? targets_.size() : 0);
    if (max == 0 || longest <= max) return true;
    switch (options_.long_docs) {
      case LongDocs::kTruncate:
        truncated_long_.fetch_add(1, std::memory_order_relaxed);
        return true;
      case LongDocs::kSkip:
        skipped_long_.fetch_add(1, std::memory_order_relaxed);
        return false;
      case LongDocs::kFail:
        break;
    }
    return FailedPrecondition(where(line), ": a document of ", longest,
                              " bytes, more than --max-doc-bytes ", max,
                              " (--long-docs skip or truncate accepts it)");
  }

  // After the checks every format shares: the record in the buffers is served next.
  StatusOr<bool> accept(uint64_t line) {
    AX_ASSIGN_OR_RETURN(bool keep, within_limit(line));
    if (!keep) return false;
    if (text_.blank() || (options_.seq2seq && targets_.blank())) {
      skipped_empty_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    where_ = where(line);
    return true;
  }

  // Fills the buffers with the next good record of the file; false at its end.
  StatusOr<bool> next_record() {
    set_name_.clear();
    if (format_ != FileFormat::kText) return next_json();
    switch (options_.text_unit) {
      case TextUnit::kLine:
        return next_line();
      case TextUnit::kParagraph:
        return next_block(/*stop_at_blank=*/true);
      case TextUnit::kFile:
        return next_block(/*stop_at_blank=*/false);
    }
    return false;
  }

  StatusOr<bool> next_line() {
    while (true) {
      text_.clear();
      LineInfo info;
      AX_ASSIGN_OR_RETURN(bool got,
                          read_line([&](std::string_view s) { return text_.append(s); }, &info));
      if (!got) return false;
      if (!info.utf8_ok) {
        AX_RETURN_IF_ERROR(bad(line_no_, "text is not valid UTF-8"));
        continue;
      }
      AX_ASSIGN_OR_RETURN(bool ok, accept(line_no_));
      if (ok) return true;
    }
  }

  // A paragraph (lines up to a blank line) or the whole file, lines joined by "\n". A paragraph
  // with a bad line is skipped whole when skip_bad is on.
  StatusOr<bool> next_block(bool stop_at_blank) {
    while (!exhausted_) {
      text_.clear();
      uint64_t first_line = 0;
      bool any = false, bad_block = false;
      while (true) {
        const DocBuffer::Mark mark = text_.mark();
        if (any) AX_RETURN_IF_ERROR(text_.append("\n"));
        LineInfo info;
        AX_ASSIGN_OR_RETURN(bool got,
                            read_line([&](std::string_view s) { return text_.append(s); }, &info));
        if (!got) {
          text_.rollback(mark);
          exhausted_ = true;
          break;
        }
        if (!info.utf8_ok) {
          bad_block = true;
          AX_RETURN_IF_ERROR(bad(line_no_, "text is not valid UTF-8"));
        }
        if (stop_at_blank && info.blank) {
          text_.rollback(mark);
          if (any) break;
          continue;  // blank lines separate paragraphs, they are not documents
        }
        if (!any) first_line = line_no_;
        any = true;
      }
      if (bad_block) continue;
      if (!any) {
        // An empty (or blank) file is one empty document; the end of a paragraph file is none.
        if (!stop_at_blank) skipped_empty_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      AX_ASSIGN_OR_RETURN(bool ok, accept(first_line));
      if (ok) return true;
    }
    return false;
  }

  StatusOr<bool> next_json() {
    using Type = JsonLineParser::Type;
    while (true) {
      parser_.reset();
      LineInfo info;
      AX_ASSIGN_OR_RETURN(bool got,
                          read_line([&](std::string_view s) { return parser_.feed(s); }, &info));
      if (!got) return false;
      if (info.blank) continue;  // a blank line is no record
      if (!info.utf8_ok) {
        AX_RETURN_IF_ERROR(bad(line_no_, "text is not valid UTF-8"));
        continue;
      }
      AX_RETURN_IF_ERROR(parser_.finish());
      if (!parser_.ok()) {
        AX_RETURN_IF_ERROR(bad(
            line_no_, str_cat("invalid JSON: ", snippet(info.head), " (", parser_.error(), ")")));
        continue;
      }
      if (parser_.top_type() != Type::kObject) {
        AX_RETURN_IF_ERROR(bad(line_no_, str_cat("expected a JSON object, got a ",
                                                 JsonLineParser::type_name(parser_.top_type()))));
        continue;
      }
      AX_ASSIGN_OR_RETURN(bool ok, string_field(0));
      if (ok && options_.seq2seq) {
        AX_ASSIGN_OR_RETURN(ok, string_field(1));
      }
      if (!ok) continue;
      AX_ASSIGN_OR_RETURN(ok, accept(line_no_));
      if (!ok) continue;
      if (parser_.field_type(set_name_index_) == Type::kString) {
        AX_ASSIGN_OR_RETURN(set_name_, set_name_buf_.read_all());
      }
      return true;
    }
  }

  // Whether the record's field i is a string; false (record skipped) or an error when not.
  StatusOr<bool> string_field(size_t i) {
    const JsonLineParser::Type type = parser_.field_type(i);
    const std::string& field = paths_[i];
    if (type == JsonLineParser::Type::kString) return true;
    if (type == JsonLineParser::Type::kNone) {
      AX_RETURN_IF_ERROR(bad(line_no_, str_cat("no field '", field, "'")));
    } else {
      AX_RETURN_IF_ERROR(bad(line_no_, str_cat("field '", field, "' is a ",
                                               JsonLineParser::type_name(type), ", not a string")));
    }
    return false;
  }

  size_t file_index_ = 0;
  FileFormat format_ = FileFormat::kText;
  std::unique_ptr<LineReader> reader_;
  uint64_t line_no_ = 0;
  bool exhausted_ = false;  // the last block of the file was returned
  uint64_t bad_in_file_ = 0;
  std::string first_bad_;
  // The record being served: its documents, set name and place.
  DocBuffer text_, targets_, set_name_buf_;
  std::vector<std::string> paths_;
  size_t set_name_index_;
  JsonLineParser parser_;
  Serving serving_ = Serving::kNone;
  bool first_ = true;
  std::string set_name_;
  std::string where_;
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
StatusOr<bool> TextSource::next_part(DocPart* part) { return impl_->next_part(part); }
const std::vector<std::string>& TextSource::files() const { return impl_->files_; }
uint64_t TextSource::total_bytes() const { return impl_->total_bytes_; }
uint64_t TextSource::bytes_read() const {
  // Read from another thread for progress lines: a slightly stale value is fine.
  return std::min(impl_->total_bytes_, impl_->done_bytes_.load() + impl_->file_bytes_.load());
}
uint64_t TextSource::skipped_empty() const { return impl_->skipped_empty_.load(); }
uint64_t TextSource::skipped_bad() const { return impl_->skipped_bad_.load(); }
uint64_t TextSource::skipped_long() const { return impl_->skipped_long_.load(); }
uint64_t TextSource::truncated_long() const { return impl_->truncated_long_.load(); }

}  // namespace ax::data
