// The text of one document while its record is being read: in memory up to a limit, beyond it in
// an unlinked temporary file, so a record of any size (a 1 GB line, a huge JSON field, a binary
// file) costs bounded memory. A record is only handed on once it is known to be good, which is
// why it is buffered at all. Read back in parts cut at UTF-8 character boundaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ax/common/status.h"

namespace ax::data {

class DocBuffer {
 public:
  // spill_dir: where the temporary file goes (empty: $TMPDIR, else /tmp). memory_limit: bytes
  // kept in memory before spilling. keep_limit: bytes kept at all (0 = all); appends beyond it
  // are counted in size() but dropped, and what is kept ends at a character boundary.
  DocBuffer(std::string spill_dir, size_t memory_limit, uint64_t keep_limit = 0);
  ~DocBuffer();
  DocBuffer(const DocBuffer&) = delete;
  DocBuffer& operator=(const DocBuffer&) = delete;

  void clear();
  // Appends whole UTF-8 characters (every caller hands over complete characters).
  Status append(std::string_view bytes);
  // A point to come back to: a blank line that turned out not to belong to a paragraph.
  struct Mark {
    uint64_t kept = 0, size = 0;
    bool full = false, text = false;
  };
  Mark mark() const { return {kept(), size_, full_, text_}; }
  void rollback(const Mark& m);
  void set_keep_limit(uint64_t keep_limit) { keep_limit_ = keep_limit; }

  uint64_t size() const { return size_; }  // bytes appended, kept or not
  uint64_t kept() const { return file_bytes_ + mem_.size(); }
  bool blank() const { return !text_; }  // what is kept is only white space
  bool spilled() const { return file_bytes_ > 0; }
  bool at_end() const { return read_pos_ >= kept(); }

  // Reading back from the start: at most max_bytes per part (>= 4), ending at a character
  // boundary. Returns false after the last part.
  void rewind() { read_pos_ = 0; }
  StatusOr<bool> read_part(std::string* out, size_t max_bytes);
  // Everything kept, as one string (for callers that want whole documents).
  StatusOr<std::string> read_all();

 private:
  Status spill();
  Status read_at(uint64_t pos, char* out, size_t n);

  std::string spill_dir_;
  size_t memory_limit_;
  uint64_t keep_limit_;
  std::string mem_;          // everything (not spilled), or the bytes after file_bytes_
  uint64_t file_bytes_ = 0;  // bytes in the file
  uint64_t size_ = 0;
  uint64_t read_pos_ = 0;
  bool full_ = false;  // the keep limit cut an append: later ones are dropped too
  bool text_ = false;  // something other than white space was kept
  int fd_ = -1;
};

}  // namespace ax::data
