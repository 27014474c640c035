#include "json_line.h"

#include "ax/common/strings.h"
#include "ax/datasets/text/text_source.h"  // append_utf8

namespace ax::data {
namespace {

constexpr size_t kMaxDepth = 10000;      // deeper nesting is refused (the stack stays small)
constexpr size_t kMaxKeyBytes = 1024;    // longer keys are checked but match no path
constexpr size_t kFlushBytes = 1 << 16;  // decoded bytes gathered before a sink append

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

JsonLineParser::JsonLineParser(const std::vector<std::string>& paths,
                               std::vector<DocBuffer*> sinks) {
  for (size_t i = 0; i < paths.size(); ++i) {
    Target t;
    t.exact = paths[i];
    t.nested = str_split(paths[i], '.');
    t.sink = sinks[i];
    targets_.push_back(std::move(t));
  }
  reset();
}

const char* JsonLineParser::type_name(Type t) {
  switch (t) {
    case Type::kNull:
      return "null";
    case Type::kBoolean:
      return "boolean";
    case Type::kNumber:
      return "number";
    case Type::kString:
      return "string";
    case Type::kArray:
      return "array";
    case Type::kObject:
      return "object";
    case Type::kNone:
      break;
  }
  return "nothing";
}

void JsonLineParser::reset() {
  for (Target& t : targets_) {
    t.type = Type::kNone;
    t.priority = 0;
    t.sink->clear();
  }
  capture_.clear();
  levels_.clear();
  state_ = State::kValue;
  num_ = Num::kMinus;
  top_type_ = Type::kNone;
  in_key_ = false;
  low_surrogate_ = false;
  hex_digits_ = 0;
  literal_ = nullptr;
  first_feed_ = true;
  offset_ = 0;
  pending_.clear();
  error_.clear();
}

void JsonLineParser::fail(const char* what) {
  if (state_ == State::kError) return;
  state_ = State::kError;
  error_ = str_cat(what, " at byte ", offset_ + 1);
  capture_.clear();
  pending_.clear();
}

// Which targets the value starting here is, given the keys that lead to it.
void JsonLineParser::begin_value(Type type) {
  const size_t depth = levels_.size();
  if (depth == 0) top_type_ = type;
  capture_.clear();
  bool objects = true;  // every level on the way is an object with a usable key
  for (const Level& l : levels_) objects = objects && l.object && !l.long_key;
  for (Target& t : targets_) {
    if (!objects || depth == 0) continue;
    bool prefix = depth <= t.nested.size();
    for (size_t i = 0; prefix && i < depth; ++i) prefix = levels_[i].key == t.nested[i];
    int priority = 0;
    if (depth == 1 && levels_[0].key == t.exact) {
      priority = 2;
    } else if (prefix && depth == t.nested.size()) {
      priority = 1;
    } else if (prefix && t.priority == 1) {
      // This value replaces an object on the nested path (the later duplicate key wins).
      t.type = Type::kNone;
      t.priority = 0;
      t.sink->clear();
    }
    if (priority == 0 || priority < t.priority) continue;
    t.priority = priority;
    t.type = type;
    t.sink->clear();
    if (type == Type::kString) capture_.push_back(t.sink);
  }
}

void JsonLineParser::end_value() { state_ = levels_.empty() ? State::kEnd : State::kCommaOrClose; }

Status JsonLineParser::flush() {
  if (pending_.empty()) return Status::Ok();
  for (DocBuffer* sink : capture_) AX_RETURN_IF_ERROR(sink->append(pending_));
  pending_.clear();
  return Status::Ok();
}

void JsonLineParser::emit(std::string_view bytes) {
  if (in_key_) {
    std::string& key = levels_.back().key;
    if (key.size() + bytes.size() > kMaxKeyBytes) {
      levels_.back().long_key = true;
    } else {
      key.append(bytes);
    }
  } else if (!capture_.empty()) {
    pending_.append(bytes);
  }
}

void JsonLineParser::code_point(uint32_t cp) {
  std::string utf8;
  append_utf8(cp, &utf8);
  emit(utf8);
}

// Plain string bytes from i on: up to a quote, a backslash or a control character.
size_t JsonLineParser::string_run(std::string_view bytes, size_t i) {
  size_t j = i;
  while (j < bytes.size()) {
    const auto c = static_cast<unsigned char>(bytes[j]);
    if (c == '"' || c == '\\' || c < 0x20) break;
    ++j;
  }
  if (j > i) emit(bytes.substr(i, j - i));
  return j;
}

void JsonLineParser::escape(char c) {
  state_ = State::kString;
  switch (c) {
    case '"':
    case '\\':
    case '/':
      emit(std::string_view(&c, 1));
      return;
    case 'b':
      return emit("\b");
    case 'f':
      return emit("\f");
    case 'n':
      return emit("\n");
    case 'r':
      return emit("\r");
    case 't':
      return emit("\t");
    case 'u':
      state_ = State::kUnicode;
      hex_digits_ = 0;
      code_ = 0;
      return;
    default:
      return fail("invalid escape");
  }
}

void JsonLineParser::number(char c) {
  const bool digit = c >= '0' && c <= '9';
  switch (num_) {
    case Num::kMinus:
      if (!digit) return fail("invalid number");
      num_ = c == '0' ? Num::kZero : Num::kInt;
      return;
    case Num::kInt:
      if (digit) return;
      [[fallthrough]];
    case Num::kZero:
      if (c == '.') {
        num_ = Num::kDot;
      } else if (c == 'e' || c == 'E') {
        num_ = Num::kExp;
      } else {
        break;
      }
      return;
    case Num::kDot:
      if (!digit) return fail("invalid number");
      num_ = Num::kFrac;
      return;
    case Num::kFrac:
      if (digit) return;
      if (c == 'e' || c == 'E') {
        num_ = Num::kExp;
        return;
      }
      break;
    case Num::kExp:
      if (c == '+' || c == '-') {
        num_ = Num::kExpSign;
        return;
      }
      [[fallthrough]];
    case Num::kExpSign:
      if (!digit) return fail("invalid number");
      num_ = Num::kExpDigits;
      return;
    case Num::kExpDigits:
      if (digit) return;
      break;
  }
  // c ends a complete number and is read again as structure.
  end_value();
  structural(c);
}

void JsonLineParser::structural(char c) {
  if (is_ws(c)) return;  // only structural states come here
  const bool in_object = !levels_.empty() && levels_.back().object;
  switch (state_) {
    case State::kKeyOrClose:
    case State::kKey:
      if (c == '"') {
        in_key_ = true;
        levels_.back().key.clear();
        levels_.back().long_key = false;
        state_ = State::kString;
        return;
      }
      if (c == '}' && state_ == State::kKeyOrClose) {
        levels_.pop_back();
        end_value();
        return;
      }
      return fail("expected a key");
    case State::kColon:
      if (c != ':') return fail("expected ':'");
      state_ = State::kValue;
      return;
    case State::kCommaOrClose:
      if (c == ',') {
        state_ = in_object ? State::kKey : State::kValue;
        return;
      }
      if (c == (in_object ? '}' : ']')) {
        levels_.pop_back();
        end_value();
        return;
      }
      return fail("expected ',' or a closing bracket");
    case State::kValueOrClose:
      if (c == ']') {
        levels_.pop_back();
        end_value();
        return;
      }
      [[fallthrough]];
    case State::kValue:
      break;
    case State::kEnd:
      return fail("unexpected text after the value");
    default:
      return;
  }
  start_value(c);
}

// The first byte of a value.
void JsonLineParser::start_value(char c) {
  if (c == '{' || c == '[') {
    if (levels_.size() >= kMaxDepth) return fail("nested too deep");
    begin_value(c == '{' ? Type::kObject : Type::kArray);
    levels_.push_back(Level{c == '{', false, {}});
    state_ = c == '{' ? State::kKeyOrClose : State::kValueOrClose;
  } else if (c == '"') {
    begin_value(Type::kString);
    in_key_ = false;
    state_ = State::kString;
  } else if (c == '-' || (c >= '0' && c <= '9')) {
    begin_value(Type::kNumber);
    state_ = State::kNumber;
    num_ = Num::kMinus;
    if (c != '-') number(c);
  } else if (c == 't' || c == 'f' || c == 'n') {
    begin_value(c == 'n' ? Type::kNull : Type::kBoolean);
    literal_ = c == 't' ? "true" : c == 'f' ? "false" : "null";
    literal_pos_ = 1;
    state_ = State::kLiteral;
  } else {
    return fail("expected a value");
  }
}

// The closing quote of a string, or the backslash of an escape (plain bytes went to string_run).
Status JsonLineParser::string_byte(char c) {
  if (c == '\\') {
    state_ = State::kEscape;
  } else if (c != '"') {
    fail("control character in a string");
  } else if (in_key_) {
    in_key_ = false;
    state_ = State::kColon;
  } else {
    AX_RETURN_IF_ERROR(flush());
    capture_.clear();
    end_value();
  }
  return Status::Ok();
}

// One hex digit of a \uXXXX escape; the fourth completes a code point or a surrogate pair.
void JsonLineParser::unicode_digit(char c) {
  const int h = hex_value(c);
  if (h < 0) return fail("invalid \\u escape");
  code_ = code_ << 4 | static_cast<uint32_t>(h);
  if (++hex_digits_ < 4) return;
  state_ = State::kString;
  if (low_surrogate_) {
    low_surrogate_ = false;
    if (code_ < 0xDC00 || code_ > 0xDFFF) return fail("a high surrogate without its low surrogate");
    return code_point(0x10000 + ((high_ - 0xD800) << 10) + (code_ - 0xDC00));
  }
  if (code_ >= 0xD800 && code_ <= 0xDBFF) {
    high_ = code_;
    state_ = State::kSurrogateBackslash;
  } else if (code_ >= 0xDC00 && code_ <= 0xDFFF) {
    fail("a low surrogate without its high surrogate");
  } else {
    code_point(code_);
  }
}

// One byte in any state but kString.
void JsonLineParser::step(char c) {
  switch (state_) {
    case State::kEscape:
      return escape(c);
    case State::kUnicode:
      return unicode_digit(c);
    case State::kSurrogateBackslash:
      if (c != '\\') return fail("a high surrogate without its low surrogate");
      state_ = State::kSurrogateU;
      return;
    case State::kSurrogateU:
      if (c != 'u') return fail("a high surrogate without its low surrogate");
      state_ = State::kUnicode;
      low_surrogate_ = true;
      hex_digits_ = 0;
      code_ = 0;
      return;
    case State::kNumber:
      return number(c);
    case State::kLiteral:
      if (literal_[literal_pos_] != c) return fail("invalid literal");
      if (literal_[++literal_pos_] == '\0') end_value();
      return;
    default:
      structural(c);
      return;
  }
}

Status JsonLineParser::feed(std::string_view bytes) {
  if (first_feed_ && !bytes.empty()) {
    first_feed_ = false;
    if (bytes.substr(0, 3) == "\xEF\xBB\xBF") {
      bytes.remove_prefix(3);
      offset_ += 3;
    }
  }
  size_t i = 0;
  while (i < bytes.size() && state_ != State::kError) {
    if (state_ == State::kString) {
      const size_t j = string_run(bytes, i);
      if (j > i) {
        offset_ += j - i;
        i = j;
        continue;
      }
      AX_RETURN_IF_ERROR(string_byte(bytes[i]));
    } else {
      step(bytes[i]);
    }
    ++i;
    ++offset_;
    if (pending_.size() >= kFlushBytes) AX_RETURN_IF_ERROR(flush());
  }
  return flush();
}

Status JsonLineParser::finish() {
  if (state_ == State::kNumber &&
      (num_ == Num::kZero || num_ == Num::kInt || num_ == Num::kFrac || num_ == Num::kExpDigits)) {
    end_value();
  }
  if (state_ != State::kEnd && state_ != State::kError) {
    fail(top_type_ == Type::kNone ? "no value" : "unexpected end of the line");
  }
  return Status::Ok();
}

}  // namespace ax::data
