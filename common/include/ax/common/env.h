// Environment knobs, each declared once with its name, type, default and description. All known
// knobs are listed by `--help-env`. A value that does not parse is an error naming the variable,
// never a silent fallback to the default.
//
//   static const ax::EnvKnob<int64_t> kPrefetch("AX_DATA_PREFETCH", 4, "batches read ahead");
//   AX_ASSIGN_OR_RETURN(int64_t depth, kPrefetch.get());
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax {

struct EnvKnobInfo {
  std::string name;
  std::string type;           // "int", "float", "bool", "string", "one of a|b|c"
  std::string default_value;  // as text
  std::string description;
};

// Every knob constructed so far (knobs are static objects, so all of them by main()).
const std::vector<EnvKnobInfo>& env_knobs();
// A table for --help-env: name, type, default, description, and the current value when set.
void print_env_help(std::ostream& os);

namespace internal {
void register_env_knob(EnvKnobInfo info);
// The raw value, or nullopt when unset or empty.
std::optional<std::string> env_raw(const std::string& name);
}  // namespace internal

template <typename T>
class EnvKnob;

template <>
class EnvKnob<int64_t> {
 public:
  EnvKnob(std::string name, int64_t def, std::string description, int64_t min = INT64_MIN,
          int64_t max = INT64_MAX);
  StatusOr<int64_t> get() const;
  const std::string& name() const { return name_; }

 private:
  std::string name_;
  int64_t def_, min_, max_;
};

template <>
class EnvKnob<double> {
 public:
  EnvKnob(std::string name, double def, std::string description);
  StatusOr<double> get() const;

 private:
  std::string name_;
  double def_;
};

template <>
class EnvKnob<bool> {
 public:
  EnvKnob(std::string name, bool def, std::string description);
  StatusOr<bool> get() const;

 private:
  std::string name_;
  bool def_;
};

template <>
class EnvKnob<std::string> {
 public:
  // choices empty = any string; otherwise the value must be one of them.
  EnvKnob(std::string name, std::string def, std::string description,
          std::vector<std::string> choices = {});
  StatusOr<std::string> get() const;
  bool is_set() const { return internal::env_raw(name_).has_value(); }

 private:
  std::string name_;
  std::string def_;
  std::vector<std::string> choices_;
};

}  // namespace ax
