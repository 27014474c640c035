// Documents from text files: plain text (one document per line, or per blank-line-separated
// paragraph, or per file), JSON lines (a configurable string field, default "text"), and
// zstd-compressed JSON lines (The Pile's layout: {"text": ..., "meta": {"pile_set_name": ...}}).
// The format is chosen by the file name: *.jsonl.zst / *.jsonl.zstd, *.jsonl / *.json, else text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax::data {

enum class TextUnit { kLine, kParagraph, kFile };

struct TextSourceOptions {
  std::string json_field = "text";  // for jsonl; "a.b" reaches into nested objects
  // For --format seq2seq: the input and target fields of each jsonl object.
  std::string inputs_field = "inputs";
  std::string targets_field = "targets";
  bool seq2seq = false;
  TextUnit text_unit = TextUnit::kLine;
  // Count and skip bad records (invalid JSON, missing field, non-UTF-8) instead of failing.
  bool skip_bad = false;
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

  const std::vector<std::string>& files() const;
  uint64_t total_bytes() const;  // sum of the input file sizes (compressed size for .zst)
  uint64_t bytes_read() const;   // of those bytes, how many were consumed so far
  uint64_t skipped_empty() const;
  uint64_t skipped_bad() const;

 private:
  class Impl;
  explicit TextSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// True when s is valid UTF-8.
bool is_valid_utf8(std::string_view s);

}  // namespace ax::data
