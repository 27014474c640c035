// Discovery with hwloc 2.x: the machine (or an hwloc XML file) with its I/O objects. GPUs are
// NVIDIA display/3D PCI devices plus the PCI parents of CUDA/NVML OS devices; NICs are OpenFabrics
// OS devices and network OS devices on a PCI device. Paths follow nvidia-smi topo -m from the
// common ancestor in the PCI tree; NVLink counts come from hwloc's NVLinkBandwidth distances when
// an NVML-enabled hwloc recorded them (Debian's does not; NVML itself fills them, nvml.cc).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ax/common/build_config.h"
#include "discover.h"

#if AX_HAVE_HWLOC
#include <hwloc.h>
#endif

namespace ax::topo::internal {

#if AX_HAVE_HWLOC
namespace {

constexpr unsigned kNvidiaVendor = 0x10de;

class HwlocTopology {
 public:
  HwlocTopology() { hwloc_topology_init(&topo_); }
  ~HwlocTopology() { hwloc_topology_destroy(topo_); }
  HwlocTopology(const HwlocTopology&) = delete;
  HwlocTopology& operator=(const HwlocTopology&) = delete;
  hwloc_topology_t get() const { return topo_; }

 private:
  hwloc_topology_t topo_ = nullptr;
};

std::string bus_id(hwloc_obj_t pci) {
  char out[32];
  std::snprintf(out, sizeof(out), "%04x:%02x:%02x.%x", pci->attr->pcidev.domain,
                pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  return out;
}

std::string info(hwloc_obj_t obj, const char* name) {
  const char* value = hwloc_obj_get_info_by_name(obj, name);
  return value ? value : "";
}

// OS indices of the first hardware thread of each core inside `set` (PUs when there are no cores).
std::vector<int> first_threads(hwloc_topology_t topo, hwloc_const_cpuset_t set) {
  std::vector<int> cpus;
  hwloc_obj_type_t type =
      hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  hwloc_obj_t obj = nullptr;
  while ((obj = hwloc_get_next_obj_inside_cpuset_by_type(topo, set, type, obj)) != nullptr) {
    cpus.push_back(hwloc_bitmap_first(obj->cpuset));
  }
  std::sort(cpus.begin(), cpus.end());
  return cpus;
}

// The NUMA node of an I/O object: that of its first non-I/O ancestor when it has exactly one.
int numa_of(hwloc_topology_t topo, hwloc_obj_t io) {
  hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, io);
  if (anc == nullptr || anc->nodeset == nullptr || hwloc_bitmap_weight(anc->nodeset) != 1) {
    return -1;
  }
  return hwloc_bitmap_first(anc->nodeset);
}

bool inside_package(hwloc_obj_t obj) {
  for (; obj != nullptr; obj = obj->parent) {
    if (obj->type == HWLOC_OBJ_PACKAGE) return true;
  }
  return false;
}

// The nvidia-smi class of the path between two PCI devices, and the depth of their common
// ancestor (deeper = nearer, to break ties between NICs of one class).
std::pair<PathKind, int> pci_path(hwloc_topology_t topo, hwloc_obj_t a, hwloc_obj_t b) {
  hwloc_obj_t c = hwloc_get_common_ancestor_obj(topo, a, b);
  if (c->type == HWLOC_OBJ_PCI_DEVICE) return {PathKind::kPcieSwitch, c->depth};
  if (c->type == HWLOC_OBJ_BRIDGE) {
    bool host = c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST;
    return {host ? PathKind::kHostBridge : PathKind::kPcieSwitch, c->depth};
  }
  bool one_socket = inside_package(c) || hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE) <= 1;
  return {one_socket ? PathKind::kSameSocket : PathKind::kCrossSocket, c->depth};
}

bool is_nvidia_gpu(hwloc_obj_t pci) {
  unsigned cls = pci->attr->pcidev.class_id;
  return pci->attr->pcidev.vendor_id == kNvidiaVendor && (cls == 0x0302 || cls == 0x0300);
}

bool is_gpu_osdev(hwloc_obj_t osdev) {
  const char* subtype = osdev->subtype ? osdev->subtype : "";
  auto type = osdev->attr->osdev.type;
  return (type == HWLOC_OBJ_OSDEV_COPROC && std::string(subtype) == "CUDA") ||
         (type == HWLOC_OBJ_OSDEV_GPU && std::string(subtype) == "NVML");
}

hwloc_obj_t pci_parent(hwloc_obj_t obj) {
  hwloc_obj_t parent = obj->parent;
  return parent != nullptr && parent->type == HWLOC_OBJ_PCI_DEVICE ? parent : nullptr;
}

// Bandwidth of one NVLink in MB/s as hwloc's NVML backend counts it (v1 20000, v2-v4 25000,
// v5 50000), guessed from the GPU model.
double nvlink_mbps(const std::string& gpu_name) {
  for (const char* v5 : {"B100", "B200", "B300"}) {
    if (gpu_name.find(v5) != std::string::npos) return 50000;
  }
  return gpu_name.find("P100") != std::string::npos ? 20000 : 25000;
}

// NVLink counts from the NVLinkBandwidth matrix; through NVSwitches (heterogeneous matrix) the
// switch ports are merged and the closure taken so every GPU pair gets its bottleneck bandwidth.
void read_nvlink_distances(hwloc_topology_t topo, const std::vector<hwloc_obj_t>& gpu_pcis,
                           Topology& t) {
  unsigned nr = 1;
  hwloc_distances_s* d = nullptr;
  if (hwloc_distances_get_by_name(topo, "NVLinkBandwidth", &nr, &d, 0) != 0 || nr == 0) return;
  bool through_switch = false;
  for (unsigned k = 0; k < d->nbobjs; ++k) {
    through_switch |= d->objs[k]->type != HWLOC_OBJ_OS_DEVICE;
  }
  if (through_switch) {
    hwloc_distances_transform(topo, d, HWLOC_DISTANCES_TRANSFORM_MERGE_SWITCH_PORTS, nullptr, 0);
    hwloc_distances_transform(topo, d, HWLOC_DISTANCES_TRANSFORM_TRANSITIVE_CLOSURE, nullptr, 0);
  }
  std::vector<int> gpu_of(d->nbobjs, -1);
  for (unsigned k = 0; k < d->nbobjs; ++k) {
    if (d->objs[k] == nullptr || d->objs[k]->type != HWLOC_OBJ_OS_DEVICE) continue;
    auto it = std::find(gpu_pcis.begin(), gpu_pcis.end(), pci_parent(d->objs[k]));
    if (it != gpu_pcis.end()) gpu_of[k] = static_cast<int>(it - gpu_pcis.begin());
  }
  for (unsigned a = 0; a < d->nbobjs; ++a) {
    for (unsigned b = 0; b < d->nbobjs; ++b) {
      int i = gpu_of[a], j = gpu_of[b];
      if (i < 0 || j < 0 || i == j) continue;
      double mbps = static_cast<double>(d->values[a * d->nbobjs + b]);
      t.nvlinks[i][j] = static_cast<int>(std::lround(mbps / nvlink_mbps(t.gpus[i].name)));
    }
  }
  hwloc_distances_release(topo, d);
}

}  // namespace

StatusOr<Topology> discover_hwloc(const std::string& xml_path) {
  HwlocTopology holder;
  hwloc_topology_t topo = holder.get();
  // Without this every I/O object, and with them the GPUs and NICs, is filtered out.
  hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (!xml_path.empty() && hwloc_topology_set_xml(topo, xml_path.c_str()) != 0) {
    return InvalidArgument("not a well-formed hwloc XML topology (or hwloc has no XML component)");
  }
  if (hwloc_topology_load(topo) != 0) {
    return xml_path.empty() ? Internal("hwloc_topology_load failed")
                            : DataLoss("hwloc cannot load it (malformed XML?)");
  }
  Topology t;
  t.source = std::string("hwloc ") + HWLOC_VERSION + (xml_path.empty() ? "" : " XML");
  t.packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  if (t.cores == 0) t.cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  t.hostname = info(hwloc_get_root_obj(topo), "HostName");

  for (hwloc_obj_t n = nullptr;
       (n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) != nullptr;) {
    hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, n);
    t.numa_nodes.push_back({static_cast<int>(n->os_index),
                            package ? static_cast<int>(package->logical_index) : 0,
                            first_threads(topo, n->cpuset)});
  }

  // GPUs in PCI bus order, each with the OS devices that name it.
  std::map<std::string, hwloc_obj_t> gpu_by_bus;
  std::map<std::string, std::pair<std::vector<std::string>, std::vector<std::string>>> nic_devs;
  std::map<std::string, hwloc_obj_t> nic_pci;
  for (hwloc_obj_t pci = nullptr; (pci = hwloc_get_next_pcidev(topo, pci)) != nullptr;) {
    if (is_nvidia_gpu(pci)) gpu_by_bus[bus_id(pci)] = pci;
  }
  for (hwloc_obj_t os = nullptr; (os = hwloc_get_next_osdev(topo, os)) != nullptr;) {
    hwloc_obj_t pci = pci_parent(os);
    if (pci == nullptr) continue;
    if (is_gpu_osdev(os)) gpu_by_bus[bus_id(pci)] = pci;
    if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS) {
      nic_devs[bus_id(pci)].first.push_back(os->name);
      nic_pci[bus_id(pci)] = pci;
    } else if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK) {
      nic_devs[bus_id(pci)].second.push_back(os->name);
      nic_pci[bus_id(pci)] = pci;
    }
  }

  std::vector<hwloc_obj_t> nic_objs;
  for (const auto& [bus, devs] : nic_devs) {
    const auto& [fabrics, netdevs] = devs;
    std::string netdev = netdevs.empty() ? "" : netdevs.front();
    int numa = numa_of(topo, nic_pci[bus]);
    for (const std::string& name : fabrics) {
      t.nics.push_back({name, netdev, bus, numa});
      nic_objs.push_back(nic_pci[bus]);
    }
    if (fabrics.empty()) {
      for (const std::string& name : netdevs) {
        t.nics.push_back({name, name, bus, numa});
        nic_objs.push_back(nic_pci[bus]);
      }
    }
  }

  std::vector<hwloc_obj_t> gpu_pcis;
  for (const auto& [bus, pci] : gpu_by_bus) {
    Gpu gpu;
    gpu.index = static_cast<int>(t.gpus.size());
    gpu.pci_bus_id = bus;
    gpu.name = info(pci, "PCIDevice");
    for (hwloc_obj_t child = pci->io_first_child; child != nullptr; child = child->next_sibling) {
      if (child->type != HWLOC_OBJ_OS_DEVICE || !is_gpu_osdev(child)) continue;
      if (!info(child, "GPUModel").empty()) gpu.name = info(child, "GPUModel");
      if (!info(child, "NVIDIAUUID").empty()) gpu.uuid = info(child, "NVIDIAUUID");
    }
    gpu.numa_node = numa_of(topo, pci);
    hwloc_obj_t anc = hwloc_get_non_io_ancestor_obj(topo, pci);
    if (anc != nullptr) gpu.cpus = first_threads(topo, anc->cpuset);
    std::pair<PathKind, int> best{PathKind::kCrossSocket, -1};
    for (size_t k = 0; k < nic_objs.size(); ++k) {
      auto path = pci_path(topo, pci, nic_objs[k]);
      if (gpu.nearest_nic < 0 || path.first < best.first ||
          (path.first == best.first && path.second > best.second)) {
        best = path;
        gpu.nearest_nic = static_cast<int>(k);
      }
    }
    gpu.nic_path = best.first;
    t.gpus.push_back(std::move(gpu));
    gpu_pcis.push_back(pci);
  }

  const size_t n = t.gpus.size();
  t.gpu_paths.assign(n, std::vector<PathKind>(n, PathKind::kNvLink));
  t.nvlinks.assign(n, std::vector<int>(n, 0));
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j) t.gpu_paths[i][j] = pci_path(topo, gpu_pcis[i], gpu_pcis[j]).first;
    }
  }
  read_nvlink_distances(topo, gpu_pcis, t);
  apply_nvlinks_to_paths(t);
  return t;
}

#else  // !AX_HAVE_HWLOC

// Without hwloc: the cores the OS reports, in one socket and one NUMA node, and no devices.
StatusOr<Topology> discover_hwloc(const std::string& xml_path) {
  if (!xml_path.empty()) return Unimplemented("built without hwloc: cannot read hwloc XML");
  Topology t;
  t.source = "no hwloc";
  t.packages = 1;
  t.cores = static_cast<int>(std::thread::hardware_concurrency());
  NumaNode node;
  for (int i = 0; i < t.cores; ++i) node.cpus.push_back(i);
  t.numa_nodes.push_back(std::move(node));
  t.warnings.push_back("built without hwloc: cores counted as hardware threads, no devices");
  return t;
}

#endif

}  // namespace ax::topo::internal
