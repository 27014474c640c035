// The node model: NVLink islands, the JSON dump format, loading fixtures, and discover().
#include "ax/topology/topology.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

#include "ax/common/env.h"
#include "ax/common/file_io.h"
#include "discover.h"

namespace ax::topo {
namespace {

using nlohmann::json;

constexpr int kJsonVersion = 1;
constexpr const char* kSelf = "X";  // the diagonal of gpu_paths, as nvidia-smi topo -m writes it

const EnvKnob<std::string> kTopologyFile(
    "AX_TOPOLOGY_FILE", "",
    "a topology fixture (JSON dump from ax-topo, or hwloc XML) used instead of discovery");

StatusOr<PathKind> path_kind_from_name(const std::string& name) {
  for (PathKind kind : {PathKind::kNvLink, PathKind::kPcieSwitch, PathKind::kHostBridge,
                        PathKind::kSameSocket, PathKind::kCrossSocket}) {
    if (name == path_kind_name(kind)) return kind;
  }
  if (name == "PXB") return PathKind::kPcieSwitch;
  if (name == kSelf) return PathKind::kNvLink;
  return InvalidArgument("unknown path kind \"", name, "\" (NV, PIX, PXB, PHB, NODE, SYS)");
}

// Field access that reports the missing or mistyped field instead of throwing.
template <typename T>
Status get_field(const json& object, const char* key, T& out) {
  auto it = object.find(key);
  if (it == object.end()) return InvalidArgument("missing field \"", key, "\"");
  try {
    out = it->get<T>();
  } catch (const json::exception&) {
    return InvalidArgument("field \"", key, "\" has the wrong type");
  }
  return Status::Ok();
}

Status check_matrix_size(const char* name, size_t rows, size_t cols, size_t n) {
  if (rows != n) return InvalidArgument(name, " has ", rows, " rows for ", n, " GPUs");
  if (cols != n) return InvalidArgument(name, " has a row of ", cols, " entries for ", n, " GPUs");
  return Status::Ok();
}

StatusOr<Topology> topology_from_object(const json& j) {
  if (!j.is_object()) return InvalidArgument("not a JSON object");
  int version = 0;
  AX_RETURN_IF_ERROR(get_field(j, "version", version));
  if (version != kJsonVersion) {
    return InvalidArgument("topology JSON version ", version, ", this build reads ", kJsonVersion);
  }
  Topology t;
  AX_RETURN_IF_ERROR(get_field(j, "hostname", t.hostname));
  AX_RETURN_IF_ERROR(get_field(j, "source", t.source));
  AX_RETURN_IF_ERROR(get_field(j, "packages", t.packages));
  AX_RETURN_IF_ERROR(get_field(j, "cores", t.cores));
  AX_RETURN_IF_ERROR(get_field(j, "warnings", t.warnings));
  json numa, gpus, nics, paths;
  AX_RETURN_IF_ERROR(get_field(j, "numa_nodes", numa));
  AX_RETURN_IF_ERROR(get_field(j, "gpus", gpus));
  AX_RETURN_IF_ERROR(get_field(j, "nics", nics));
  AX_RETURN_IF_ERROR(get_field(j, "gpu_paths", paths));
  AX_RETURN_IF_ERROR(get_field(j, "nvlinks", t.nvlinks));
  if (!numa.is_array() || !gpus.is_array() || !nics.is_array() || !paths.is_array()) {
    return InvalidArgument("numa_nodes, gpus, nics and gpu_paths must be arrays");
  }
  for (const json& n : numa) {
    NumaNode node;
    AX_RETURN_IF_ERROR(get_field(n, "id", node.id));
    AX_RETURN_IF_ERROR(get_field(n, "package", node.package));
    AX_RETURN_IF_ERROR(get_field(n, "cpus", node.cpus));
    t.numa_nodes.push_back(std::move(node));
  }
  for (const json& n : nics) {
    Nic nic;
    AX_RETURN_IF_ERROR(get_field(n, "name", nic.name));
    AX_RETURN_IF_ERROR(get_field(n, "netdev", nic.netdev));
    AX_RETURN_IF_ERROR(get_field(n, "pci_bus_id", nic.pci_bus_id));
    AX_RETURN_IF_ERROR(get_field(n, "numa_node", nic.numa_node));
    t.nics.push_back(std::move(nic));
  }
  for (const json& g : gpus) {
    Gpu gpu;
    std::string nic_path;
    AX_RETURN_IF_ERROR(get_field(g, "index", gpu.index));
    AX_RETURN_IF_ERROR(get_field(g, "pci_bus_id", gpu.pci_bus_id));
    AX_RETURN_IF_ERROR(get_field(g, "name", gpu.name));
    AX_RETURN_IF_ERROR(get_field(g, "uuid", gpu.uuid));
    AX_RETURN_IF_ERROR(get_field(g, "numa_node", gpu.numa_node));
    AX_RETURN_IF_ERROR(get_field(g, "cpus", gpu.cpus));
    AX_RETURN_IF_ERROR(get_field(g, "nearest_nic", gpu.nearest_nic));
    AX_RETURN_IF_ERROR(get_field(g, "nic_path", nic_path));
    AX_RETURN_IF_ERROR(get_field(g, "fabric_cluster_uuid", gpu.fabric_cluster_uuid));
    AX_RETURN_IF_ERROR(get_field(g, "fabric_clique_id", gpu.fabric_clique_id));
    AX_ASSIGN_OR_RETURN(gpu.nic_path, path_kind_from_name(nic_path));
    if (gpu.index != static_cast<int>(t.gpus.size())) {
      return InvalidArgument("GPU ", t.gpus.size(), " has index ", gpu.index);
    }
    if (gpu.nearest_nic < -1 || gpu.nearest_nic >= static_cast<int>(t.nics.size())) {
      return InvalidArgument("GPU ", gpu.index, " names NIC ", gpu.nearest_nic, " of ",
                             t.nics.size());
    }
    t.gpus.push_back(std::move(gpu));
  }
  const size_t n = t.gpus.size();
  AX_RETURN_IF_ERROR(check_matrix_size("gpu_paths", paths.size(), n, n));
  for (const json& row : paths) {
    if (!row.is_array()) return InvalidArgument("gpu_paths rows must be arrays");
    AX_RETURN_IF_ERROR(check_matrix_size("gpu_paths", n, row.size(), n));
    std::vector<PathKind> kinds;
    for (const json& name : row) {
      if (!name.is_string()) return InvalidArgument("gpu_paths entries must be strings");
      AX_ASSIGN_OR_RETURN(PathKind kind, path_kind_from_name(name.get<std::string>()));
      kinds.push_back(kind);
    }
    t.gpu_paths.push_back(std::move(kinds));
  }
  for (const auto& row : t.nvlinks) {
    AX_RETURN_IF_ERROR(check_matrix_size("nvlinks", t.nvlinks.size(), row.size(), n));
  }
  if (n > 0 || !t.nvlinks.empty()) {
    AX_RETURN_IF_ERROR(check_matrix_size("nvlinks", t.nvlinks.size(), n, n));
  }
  return t;
}

// The first non-blank character decides: '<' is hwloc XML, anything else JSON.
bool looks_like_xml(const std::string& text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  return first != std::string::npos && text[first] == '<';
}

std::string base_name(const std::string& path) {
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

const char* path_kind_name(PathKind kind) {
  switch (kind) {
    case PathKind::kNvLink:
      return "NV";
    case PathKind::kPcieSwitch:
      return "PIX";
    case PathKind::kHostBridge:
      return "PHB";
    case PathKind::kSameSocket:
      return "NODE";
    case PathKind::kCrossSocket:
      return "SYS";
  }
  return "?";
}

std::vector<std::vector<int>> Topology::nvlink_islands() const {
  const int n = static_cast<int>(gpus.size());
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  auto root = [&](int i) {
    while (parent[i] != i) i = parent[i] = parent[parent[i]];
    return i;
  };
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) {
      bool linked =
          (i < static_cast<int>(nvlinks.size()) && j < static_cast<int>(nvlinks[i].size()) &&
           nvlinks[i][j] > 0) ||
          (i < static_cast<int>(gpu_paths.size()) && j < static_cast<int>(gpu_paths[i].size()) &&
           gpu_paths[i][j] == PathKind::kNvLink);
      if (linked) parent[root(j)] = root(i);
    }
  }
  std::vector<std::vector<int>> by_root(n);
  for (int i = 0; i < n; ++i) by_root[root(i)].push_back(i);
  std::vector<std::vector<int>> islands;
  for (auto& island : by_root) {
    if (!island.empty()) islands.push_back(std::move(island));
  }
  // Largest first; equal sizes keep GPU order (each island is already sorted).
  std::stable_sort(islands.begin(), islands.end(),
                   [](const auto& a, const auto& b) { return a.size() > b.size(); });
  return islands;
}

std::string to_json(const Topology& t) {
  json j = json::object();
  j["version"] = kJsonVersion;
  j["hostname"] = t.hostname;
  j["source"] = t.source;
  j["packages"] = t.packages;
  j["cores"] = t.cores;
  j["numa_nodes"] = json::array();
  for (const NumaNode& n : t.numa_nodes) {
    j["numa_nodes"].push_back({{"id", n.id}, {"package", n.package}, {"cpus", n.cpus}});
  }
  j["gpus"] = json::array();
  for (const Gpu& g : t.gpus) {
    j["gpus"].push_back({{"index", g.index},
                         {"pci_bus_id", g.pci_bus_id},
                         {"name", g.name},
                         {"uuid", g.uuid},
                         {"numa_node", g.numa_node},
                         {"cpus", g.cpus},
                         {"nearest_nic", g.nearest_nic},
                         {"nic_path", path_kind_name(g.nic_path)},
                         {"fabric_cluster_uuid", g.fabric_cluster_uuid},
                         {"fabric_clique_id", g.fabric_clique_id}});
  }
  j["nics"] = json::array();
  for (const Nic& n : t.nics) {
    j["nics"].push_back({{"name", n.name},
                         {"netdev", n.netdev},
                         {"pci_bus_id", n.pci_bus_id},
                         {"numa_node", n.numa_node}});
  }
  j["gpu_paths"] = json::array();
  for (size_t i = 0; i < t.gpu_paths.size(); ++i) {
    json row = json::array();
    for (size_t k = 0; k < t.gpu_paths[i].size(); ++k) {
      row.push_back(i == k ? kSelf : path_kind_name(t.gpu_paths[i][k]));
    }
    j["gpu_paths"].push_back(std::move(row));
  }
  j["nvlinks"] = t.nvlinks;
  j["warnings"] = t.warnings;
  return j.dump(1) + "\n";
}

StatusOr<Topology> topology_from_json(const std::string& text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss("topology JSON does not parse");
  return topology_from_object(j);
}

StatusOr<Topology> load_topology(const std::string& path) {
  AX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  if (looks_like_xml(text)) {
    StatusOr<Topology> t = internal::discover_hwloc(path);
    if (!t.ok()) return t.status().with_context("hwloc XML " + path);
    t->source += " " + base_name(path);
    return t;
  }
  StatusOr<Topology> t = topology_from_json(text);
  if (!t.ok()) return t.status().with_context(path);
  return t;
}

StatusOr<Topology> discover() {
  AX_ASSIGN_OR_RETURN(std::string file, kTopologyFile.get());
  if (!file.empty()) return load_topology(file);
  AX_ASSIGN_OR_RETURN(Topology t, internal::discover_hwloc(""));
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0) t.hostname = host;
  internal::add_nvml_info(t);
  return t;
}

namespace internal {

void apply_nvlinks_to_paths(Topology& t) {
  for (size_t i = 0; i < t.nvlinks.size() && i < t.gpu_paths.size(); ++i) {
    for (size_t k = 0; k < t.nvlinks[i].size() && k < t.gpu_paths[i].size(); ++k) {
      if (t.nvlinks[i][k] > 0) t.gpu_paths[i][k] = PathKind::kNvLink;
    }
  }
}

std::string normalize_pci_bus_id(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  char end = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &end) != 4) {
    return bus_id;
  }
  char out[32];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", domain & 0xffff, bus, device, function);
  return out;
}

}  // namespace internal
}  // namespace ax::topo
