#include "config.h"

#include <set>

#include "ax/topology/mesh.h"

namespace ax::spank {

StatusOr<Config> parse_config(const std::vector<std::string>& args) {
  Config config;
  std::set<std::string> seen;
  for (const std::string& arg : args) {
    if (arg.size() > kMaxArgLength) {
      return InvalidArgument("plugstack argument longer than ", kMaxArgLength, " characters");
    }
    size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      return InvalidArgument("plugstack argument '", arg, "' is not key=value");
    }
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (!seen.insert(key).second) {
      return InvalidArgument("plugstack argument '", key, "' given twice");
    }
    if (key == "default") {
      StatusOr<topo::MeshSpec> spec = topo::parse_mesh_spec(value);
      if (!spec.ok()) return InvalidArgument("default=", value, ": ", spec.status().message());
      config.default_spec = value;
    } else if (key == "bind") {
      if (value == "none") {
        config.bind = Bind::kNone;
      } else if (value == "numa") {
        config.bind = Bind::kNuma;
      } else if (value == "cores") {
        config.bind = Bind::kCores;
      } else {
        return InvalidArgument("bind=", value, ": expected none, numa or cores");
      }
    } else if (key == "nic") {
      if (value == "nearest") {
        config.nic = NicChoice::kNearest;
      } else if (value == "all") {
        config.nic = NicChoice::kAll;
      } else {
        return InvalidArgument("nic=", value, ": expected nearest or all");
      }
    } else if (key == "topology") {
      if (value.empty() || value[0] != '/') {
        return InvalidArgument("topology=", value, ": expected an absolute path");
      }
      config.topology_file = value;
    } else {
      return InvalidArgument("unknown plugstack argument '", key,
                             "' (expected default=, bind=, nic=, topology=)");
    }
  }
  return config;
}

}  // namespace ax::spank
