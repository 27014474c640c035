// Documents from text files: plain text (one document per line, or per blank-line-separated
// paragraph, or per file), JSON lines (a configurable string field, default "text"), and
// zstd-compressed JSON lines (The Pile's layout: {"text": ..., "meta": {"pile_set_name": ...}}).
// The format is chosen by the file name: *.jsonl.zst / *.jsonl.zstd, *.jsonl / *.json, else text.
//
// Memory stays bounded whatever the input: lines are read in pieces, and a document larger than
// `doc_memory_bytes` waits in an unlinked temporary file until its record is known to be good
// (docs/tokenization.md). next_part() hands documents on in parts; next() joins them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax::data {

enum class TextUnit { kLine, kParagraph, kFile };

// What happens to a document longer than TextSourceOptions::max_doc_bytes.
enum class LongDocs { kSkip, kTruncate, kFail };

struct TextSourceOptions {
  std::string json_field = "text";  // for jsonl; "a.b" reaches into nested objects
  // For --format seq2seq: the input and target fields of each jsonl object.
  std::string inputs_field = "inputs";
  std::string targets_field = "targets";
  bool seq2seq = false;
  TextUnit text_unit = TextUnit::kLine;
  // Count and skip bad records (invalid JSON, missing field, non-UTF-8) instead of failing.
  bool skip_bad = false;
  // Documents (each field of a seq2seq pair) longer than this many bytes are skipped, truncated
  // (at a character boundary) or an error; 0 = no limit. Counted in skipped_long() /
  // truncated_long().
  uint64_t max_doc_bytes = 0;
  LongDocs long_docs = LongDocs::kSkip;
  // A document beyond this size waits in a temporary file in spill_dir (empty: $TMPDIR or /tmp).
  size_t doc_memory_bytes = size_t{8} << 20;
  std::string spill_dir;
  // next_part() hands on at most this many bytes at a time.
  size_t part_bytes = size_t{1} << 20;
};

// A piece of a document, in order; a document is one or more parts.
struct DocPart {
  std::string text;
  bool first = false;    // the document's first part
  bool last = false;     // the document's last part
  bool targets = false;  // seq2seq: a part of the targets document (the inputs come first)
  std::string set_name;  // meta.pile_set_name when present
  std::string where;     // "file:line" for messages
};

struct Document {
  std::string text;      // for seq2seq: the inputs
  std::string targets;   // seq2seq only
  std::string set_name;  // meta.pile_set_name when present
  std::string where;     // "file:line" for messages
};

class TextSource {
 public:
  // Expands globs; fails with NotFound naming a pattern that matches nothing.
  static StatusOr<std::unique_ptr<TextSource>> open(const std::vector<std::string>& inputs,
                                                    const TextSourceOptions& options);
  ~TextSource();

  // Fills doc and returns true, or returns false at the end of the last file. Empty documents
  // are skipped and counted. Errors name file:line. Not thread-safe (one reader thread).
  StatusOr<bool> next(Document* doc);
  // The next part of the current or the next document; false after the last. Do not mix with
  // next() inside one document.
  StatusOr<bool> next_part(DocPart* part);

  const std::vector<std::string>& files() const;
  uint64_t total_bytes() const;  // sum of the input file sizes (compressed size for .zst)
  uint64_t bytes_read() const;   // of those bytes, how many were consumed so far
  uint64_t skipped_empty() const;
  uint64_t skipped_bad() const;
  uint64_t skipped_long() const;    // over max_doc_bytes, skipped
  uint64_t truncated_long() const;  // over max_doc_bytes, truncated

 private:
  class Impl;
  explicit TextSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when s is valid UTF-8.
bool is_valid_utf8(std::string_view s);
// Appends the UTF-8 bytes of code point cp (at most U+10FFFF) to *out.
void append_utf8(char32_t cp, std::string* out);

}  // namespace ax::data
