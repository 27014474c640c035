// The discovery back ends behind topology.cc: hwloc (this machine or an hwloc XML file) and NVML
// (loaded at run time). Private to ax_topology.
#pragma once

#include <string>

#include "ax/common/status.h"
#include "ax/topology/topology.h"

namespace ax::topo::internal {

// Sockets, NUMA nodes, cores, GPUs, NICs and PCI paths from hwloc; NVLink counts from hwloc's
// NVLinkBandwidth distances when present. xml_path empty = this machine.
StatusOr<Topology> discover_hwloc(const std::string& xml_path);

// Adds what NVML knows to GPUs found by PCI bus id: name, UUID, NVLink counts (replacing those
// derived from hwloc), multi-node fabric cluster and clique. Without NVML adds a warning.
void add_nvml_info(Topology& topology);

// Sets gpu_paths[i][j] to kNvLink wherever nvlinks[i][j] > 0.
void apply_nvlinks_to_paths(Topology& topology);

// "0000:18:00.0" from any "domain:bus:device.function" spelling (NVML writes 8 domain digits);
// the input unchanged when it does not parse.
std::string normalize_pci_bus_id(const std::string& bus_id);

}  // namespace ax::topo::internal
