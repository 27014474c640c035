// Small string helpers (GCC 12 has no <format>).
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace ax {

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

std::vector<std::string> str_split(std::string_view s, char sep);
std::string_view str_trim(std::string_view s);
bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

// Strict parsers: the whole string must be the number, no trailing characters.
std::optional<int64_t> parse_int64(std::string_view s);
std::optional<double> parse_double(std::string_view s);
std::optional<bool> parse_bool(std::string_view s);  // 1/0, true/false, yes/no, on/off

// "1.50 GiB", "12.0 MiB", "512 B".
std::string human_bytes(double bytes);
// "1h02m", "3m05s", "12s".
std::string human_duration(double seconds);

}  // namespace ax
