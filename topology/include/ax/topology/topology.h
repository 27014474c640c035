// What one node has: sockets, NUMA nodes, cores, GPUs, NICs, and how they connect (NVLink, or the
// PCI path classes NCCL uses). Discovered with hwloc (+ NVML loaded at run time), or loaded from a
// JSON dump / an hwloc XML file, so every test runs on fixtures (topology/fixtures/).
#pragma once

#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax::topo {

// How far two PCI devices are, nearest first (NCCL's classes; nvidia-smi topo -m names).
enum class PathKind {
  kNvLink,       // NV#: direct NVLink (or through NVSwitch)
  kPcieSwitch,   // PIX/PXB: behind the same PCIe switch(es)
  kHostBridge,   // PHB: through one CPU host bridge
  kSameSocket,   // NODE: across host bridges within one NUMA node / socket
  kCrossSocket,  // SYS: across the inter-socket link
};
const char* path_kind_name(PathKind kind);  // "NV", "PIX", "PHB", "NODE", "SYS"

struct NumaNode {
  int id = 0;
  int package = 0;        // socket
  std::vector<int> cpus;  // OS indices of the cores' first hardware threads
};

struct Gpu {
  int index = 0;           // position in the node's GPU list (PCI bus order)
  std::string pci_bus_id;  // "0000:18:00.0"
  std::string name;        // "NVIDIA H100 80GB HBM3" when known
  std::string uuid;        // "GPU-..." when NVML answered
  int numa_node = -1;
  std::vector<int> cpus;  // cores local to the GPU
  int nearest_nic = -1;   // index into Topology::nics, -1 = none
  PathKind nic_path = PathKind::kCrossSocket;
  // Multi-node NVLink (GB200 NVL72): GPUs with the same non-empty cluster_uuid and clique_id
  // share one NVLink domain across nodes.
  std::string fabric_cluster_uuid;
  int fabric_clique_id = -1;
};

struct Nic {
  std::string name;    // "mlx5_0" (OpenFabrics) or the netdev name
  std::string netdev;  // "ib0", "eth0"
  std::string pci_bus_id;
  int numa_node = -1;
};

struct Topology {
  std::string hostname;
  std::string source;  // "hwloc 2.9.0 + NVML", "fixture dgx-h100.json", ...
  int packages = 0;
  int cores = 0;
  std::vector<NumaNode> numa_nodes;
  std::vector<Gpu> gpus;
  std::vector<Nic> nics;
  // gpu_paths[i][j]: the path between GPU i and GPU j (i != j); nvlinks[i][j]: NVLink count
  // (0 when none; through an NVSwitch every pair counts the GPU's links).
  std::vector<std::vector<PathKind>> gpu_paths;
  std::vector<std::vector<int>> nvlinks;
  std::vector<std::string> warnings;  // e.g. "NVML not found: NVLink from PCI information only"

  // Groups of GPU indices connected by NVLink inside this node (transitive), largest first; a GPU
  // without NVLink is a group of its own.
  std::vector<std::vector<int>> nvlink_islands() const;
};

// Discovers this node. A fixture named by AX_TOPOLOGY_FILE (JSON or hwloc XML) replaces discovery.
StatusOr<Topology> discover();
// Loads a JSON dump (to_json) or an hwloc XML file (decided by content).
StatusOr<Topology> load_topology(const std::string& path);
std::string to_json(const Topology& topology);
StatusOr<Topology> topology_from_json(const std::string& json);

}  // namespace ax::topo
