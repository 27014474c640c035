#include "ax/common/env.h"

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <mutex>

namespace ax {
namespace {

std::vector<EnvKnobInfo>& registry() {
  static std::vector<EnvKnobInfo> knobs;
  return knobs;
}

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

Status bad_value(const std::string& name, const std::string& value, std::string_view expected) {
  return InvalidArgument("environment variable ", name, "='", value, "' is not valid: expected ",
                         expected);
}

}  // namespace

namespace internal {

void register_env_knob(EnvKnobInfo info) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& knobs = registry();
  auto it = std::find_if(knobs.begin(), knobs.end(),
                         [&](const EnvKnobInfo& k) { return k.name == info.name; });
  if (it == knobs.end()) knobs.push_back(std::move(info));
}

std::optional<std::string> env_raw(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace internal

const std::vector<EnvKnobInfo>& env_knobs() { return registry(); }

void print_env_help(std::ostream& os) {
  std::vector<EnvKnobInfo> knobs;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    knobs = registry();
  }
  std::sort(knobs.begin(), knobs.end(),
            [](const EnvKnobInfo& a, const EnvKnobInfo& b) { return a.name < b.name; });
  os << "Environment variables:\n";
  for (const auto& k : knobs) {
    os << "  " << std::left << std::setw(26) << k.name << " " << k.type << ", default '"
       << k.default_value << "'";
    if (auto v = internal::env_raw(k.name)) os << ", now '" << *v << "'";
    os << "\n      " << k.description << "\n";
  }
}

EnvKnob<int64_t>::EnvKnob(std::string name, int64_t def, std::string description, int64_t min,
                          int64_t max)
    : name_(std::move(name)), def_(def), min_(min), max_(max) {
  internal::register_env_knob({name_, "int", std::to_string(def), std::move(description)});
}

StatusOr<int64_t> EnvKnob<int64_t>::get() const {
  auto raw = internal::env_raw(name_);
  if (!raw) return def_;
  auto v = parse_int64(*raw);
  if (!v) return bad_value(name_, *raw, "an integer");
  if (*v < min_ || *v > max_) {
    return bad_value(name_, *raw, str_cat("an integer in [", min_, ", ", max_, "]"));
  }
  return *v;
}

EnvKnob<double>::EnvKnob(std::string name, double def, std::string description)
    : name_(std::move(name)), def_(def) {
  internal::register_env_knob({name_, "float", str_cat(def), std::move(description)});
}

StatusOr<double> EnvKnob<double>::get() const {
  auto raw = internal::env_raw(name_);
  if (!raw) return def_;
  auto v = parse_double(*raw);
  if (!v) return bad_value(name_, *raw, "a number");
  return *v;
}

EnvKnob<bool>::EnvKnob(std::string name, bool def, std::string description)
    : name_(std::move(name)), def_(def) {
  internal::register_env_knob({name_, "bool", def ? "true" : "false", std::move(description)});
}

StatusOr<bool> EnvKnob<bool>::get() const {
  auto raw = internal::env_raw(name_);
  if (!raw) return def_;
  auto v = parse_bool(*raw);
  if (!v) return bad_value(name_, *raw, "one of 1|0|true|false|yes|no|on|off");
  return *v;
}

EnvKnob<std::string>::EnvKnob(std::string name, std::string def, std::string description,
                              std::vector<std::string> choices)
    : name_(std::move(name)), def_(std::move(def)), choices_(std::move(choices)) {
  std::string type = "string";
  if (!choices_.empty()) {
    type = "one of ";
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (i) type += "|";
      type += choices_[i];
    }
  }
  internal::register_env_knob({name_, type, def_, std::move(description)});
}

StatusOr<std::string> EnvKnob<std::string>::get() const {
  auto raw = internal::env_raw(name_);
  if (!raw) return def_;
  if (!choices_.empty() && std::find(choices_.begin(), choices_.end(), *raw) == choices_.end()) {
    std::string expected = "one of ";
    for (size_t i = 0; i < choices_.size(); ++i) {
      if (i) expected += "|";
      expected += choices_[i];
    }
    return bad_value(name_, *raw, expected);
  }
  return *raw;
}

}  // namespace ax
