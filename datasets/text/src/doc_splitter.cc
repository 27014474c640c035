#include "ax/datasets/text/doc_splitter.h"

#include <algorithm>

#include "ax/common/check.h"
#include "utf8.h"

namespace ax::data {
namespace {

bool is_space_byte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

using internal::is_continuation;

}  // namespace

DocSplitter::DocSplitter(size_t max_bytes, SeamStyle style) : max_bytes_(max_bytes), style_(style) {
  AX_CHECK(max_bytes >= 16) << "pieces of " << max_bytes << " bytes are too small";
}

void DocSplitter::add(std::string_view text, bool last, std::vector<std::string>* out) {
  if (start_ > 0) {
    pending_.erase(0, start_);
    start_ = 0;
  }
  pending_.append(text);
  // One byte past a window is needed to see whether a space there stands alone.
  while (pending_.size() - start_ > max_bytes_ + 1 ||
         (last && pending_.size() - start_ > max_bytes_)) {
    cut(out);
  }
  if (last) {
    AX_CHECK(pending_.size() > start_) << "a document ended without text";
    out->push_back(pending_.substr(start_));
    pending_.clear();
    start_ = 0;
  }
}

void DocSplitter::cut(std::vector<std::string>* out) {
  const std::string_view s(pending_);
  const size_t lo = start_ + max_bytes_ / 2, hi = start_ + max_bytes_;  // the piece ends in here
  // 1. A lone space: s[p] == ' ', its neighbours are not spaces.
  for (size_t p = hi - 1; p >= lo && p > start_; --p) {
    if (s[p] != ' ' || s[p - 1] == ' ' || s[p + 1] == ' ') continue;
    ++seams_[0];
    switch (style_) {
      case SeamStyle::kDropSpace:
        out->emplace_back(s.substr(start_, p - start_));
        start_ = p + 1;
        return;
      case SeamStyle::kSpaceToNext:
        out->emplace_back(s.substr(start_, p - start_));
        start_ = p;
        return;
      case SeamStyle::kSpaceToPrevious:
        out->emplace_back(s.substr(start_, p + 1 - start_));
        start_ = p + 1;
        return;
    }
  }
  // 2. After any white space.
  for (size_t q = hi - 1; q >= lo; --q) {
    if (!is_space_byte(s[q])) continue;
    ++seams_[1];
    out->emplace_back(s.substr(start_, q + 1 - start_));
    start_ = q + 1;
    return;
  }
  // 3. Before the last character that starts in the window.
  size_t c = hi;
  while (c > lo && is_continuation(s[c])) --c;
  ++seams_[2];
  out->emplace_back(s.substr(start_, c - start_));
  start_ = c;
}

}  // namespace ax::data
