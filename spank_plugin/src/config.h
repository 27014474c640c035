// plugstack.conf arguments of spank_ax.so, parsed strictly: anything unknown or malformed is an
// error at init, so a typo in the cluster's configuration never silently changes behaviour.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax::spank {

enum class Bind { kNone, kNuma, kCores };
enum class NicChoice { kNearest, kAll };

struct Config {
  std::optional<std::string> default_spec;  // default=<spec>: used when --ax-mesh is not given
  Bind bind = Bind::kCores;                 // bind=none|numa|cores
  NicChoice nic = NicChoice::kNearest;      // nic=nearest|all
  std::string topology_file;                // topology=<file>: replaces discovery (tests)
};

// Longest plugstack argument or user string the plugin accepts.
inline constexpr size_t kMaxArgLength = 4096;

StatusOr<Config> parse_config(const std::vector<std::string>& args);

}  // namespace ax::spank
