// One JSON value (a jsonl record) read in pieces: validated as RFC 8259 text (what nlohmann's
// strict parser accepts, a leading UTF-8 BOM included), with the string values at chosen paths
// decoded straight into DocBuffers. Hand-written because every JSON library packaged for Debian
// (nlohmann, RapidJSON, simdjson, yajl, json-c) holds a string value whole before handing it
// over, and a jsonl field can be larger than memory (docs/tokenization.md).
//
// Path rules are those of the whole-record lookup it replaces: "a.b" is the top-level key "a.b"
// when present, else key "b" of the object at key "a"; a duplicate key's last value wins.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"
#include "doc_buffer.h"

namespace ax::data {

class JsonLineParser {
 public:
  enum class Type : uint8_t { kNone, kNull, kBoolean, kNumber, kString, kArray, kObject };

  // sinks[i] receives the string at paths[i] (cleared first); sinks may repeat a path.
  JsonLineParser(const std::vector<std::string>& paths, std::vector<DocBuffer*> sinks);

  // A new line. The input must be valid UTF-8, fed in pieces that end at character boundaries.
  void reset();
  // Errors are only the sinks' (writing a spill file); syntax errors end in ok() == false.
  Status feed(std::string_view bytes);
  // The end of the line.
  Status finish();

  bool ok() const { return state_ == State::kEnd; }
  const std::string& error() const { return error_; }  // why not ok(), e.g. "at byte 12"
  Type top_type() const { return top_type_; }
  // What paths[i] held in the record (kNone: not there). Meaningful once ok().
  Type field_type(size_t i) const { return targets_[i].type; }
  static const char* type_name(Type t);

 private:
  enum class State : uint8_t {
    kValue,         // a value must come
    kValueOrClose,  // after '['
    kKeyOrClose,    // after '{'
    kKey,           // after ',' in an object
    kColon,
    kCommaOrClose,  // after a value inside a container
    kEnd,           // after the top-level value: only white space
    kString,
    kEscape,
    kUnicode,
    kSurrogateBackslash,  // a high surrogate was read: "\" must follow
    kSurrogateU,          // ... then "u"
    kNumber,
    kLiteral,
    kError,
  };
  enum class Num : uint8_t { kMinus, kZero, kInt, kDot, kFrac, kExp, kExpSign, kExpDigits };
  struct Level {
    bool object = false;
    bool long_key = false;  // the key was longer than kMaxKeyBytes: it matches no path
    std::string key;
  };
  struct Target {
    std::string exact;                // the whole path as one top-level key
    std::vector<std::string> nested;  // the path's parts
    DocBuffer* sink = nullptr;
    Type type = Type::kNone;
    int priority = 0;  // 2: found as the exact key, 1: as the nested path
  };

  void fail(const char* what);
  void begin_value(Type type);
  void end_value();
  void structural(char c);  // one byte outside strings, numbers and literals
  void start_value(char c);
  void step(char c);
  Status string_byte(char c);
  size_t string_run(std::string_view bytes, size_t i);
  void escape(char c);
  void unicode_digit(char c);
  void code_point(uint32_t cp);
  void emit(std::string_view bytes);
  void number(char c);
  Status flush();

  std::vector<Target> targets_;
  std::vector<DocBuffer*> capture_;  // sinks of the string being read
  std::vector<Level> levels_;
  State state_ = State::kValue;
  Num num_ = Num::kMinus;
  Type top_type_ = Type::kNone;
  bool in_key_ = false;
  bool low_surrogate_ = false;
  bool first_feed_ = true;
  int hex_digits_ = 0;
  uint32_t code_ = 0, high_ = 0;
  const char* literal_ = nullptr;
  size_t literal_pos_ = 0;
  uint64_t offset_ = 0;  // bytes of the line fed so far
  std::string pending_;  // decoded bytes of a captured string, not yet in the sinks
  std::string error_;
};

}  // namespace ax::data
