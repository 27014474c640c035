// NVML, loaded with dlopen so ax runs (and builds) where no NVIDIA driver is installed. The few
// types and entry points used are declared here from the public NVML API (nvml.h).
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include "discover.h"

namespace ax::topo::internal {
namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;         // nvmlEnableState_t
constexpr unsigned kNvmlMaxNvLinks = 18;       // NVML_NVLINK_MAX_LINKS
constexpr unsigned char kFabricCompleted = 3;  // NVML_GPU_FABRIC_STATE_COMPLETED

struct nvmlPciInfo_t {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct nvmlGpuFabricInfo_t {
  unsigned char clusterUuid[16];
  nvmlReturn_t status;
  unsigned cliqueId;
  unsigned char state;
};

struct Nvml {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*by_bus_id)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*link_remote)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*fabric)(nvmlDevice_t, nvmlGpuFabricInfo_t*) = nullptr;  // Hopper+ drivers only

  ~Nvml() {
    if (lib == nullptr) return;
    if (shutdown != nullptr) shutdown();
    dlclose(lib);
  }
};

template <typename F>
void bind(void* lib, const char* symbol, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
}

// Loads and initializes NVML; false (with the reason in `why`) when it is absent or fails.
bool open_nvml(Nvml& nvml, std::string& why) {
  nvml.lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (nvml.lib == nullptr) {
    why = "NVML not found: NVLink from PCI information only";
    return false;
  }
  bind(nvml.lib, "nvmlInit_v2", nvml.init);
  bind(nvml.lib, "nvmlShutdown", nvml.shutdown);
  bind(nvml.lib, "nvmlDeviceGetCount_v2", nvml.count);
  bind(nvml.lib, "nvmlDeviceGetHandleByPciBusId_v2", nvml.by_bus_id);
  bind(nvml.lib, "nvmlDeviceGetName", nvml.name);
  bind(nvml.lib, "nvmlDeviceGetUUID", nvml.uuid);
  bind(nvml.lib, "nvmlDeviceGetNvLinkState", nvml.link_state);
  bind(nvml.lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2", nvml.link_remote);
  bind(nvml.lib, "nvmlDeviceGetGpuFabricInfo", nvml.fabric);
  if (!nvml.init || !nvml.shutdown || !nvml.count || !nvml.by_bus_id || !nvml.name || !nvml.uuid ||
      !nvml.link_state || !nvml.link_remote) {
    why = "NVML too old (missing entry points): NVLink from PCI information only";
    return false;
  }
  if (nvml.init() != kNvmlSuccess) {
    nvml.shutdown = nullptr;  // nothing to shut down
    why = "NVML did not initialize: NVLink from PCI information only";
    return false;
  }
  return true;
}

std::string uuid_text(const unsigned char (&bytes)[16]) {
  std::string out;
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    std::snprintf(hex, sizeof(hex), "%02x", bytes[i]);
    out += hex;
  }
  return out;
}

}  // namespace

void add_nvml_info(Topology& t) {
  if (t.gpus.empty()) return;  // a node without GPUs loses nothing without NVML
  Nvml nvml;
  std::string why;
  if (!open_nvml(nvml, why)) {
    t.warnings.push_back(why);
    return;
  }
  unsigned count = 0;
  if (nvml.count(&count) == kNvmlSuccess && count != t.gpus.size()) {
    t.warnings.push_back("NVML sees " + std::to_string(count) + " GPUs, hwloc " +
                         std::to_string(t.gpus.size()));
  }
  const size_t n = t.gpus.size();
  std::vector<std::vector<int>> links(n, std::vector<int>(n, 0));
  std::vector<int> switch_links(n, 0);
  bool answered = false;
  for (size_t i = 0; i < n; ++i) {
    Gpu& gpu = t.gpus[i];
    nvmlDevice_t dev = nullptr;
    if (nvml.by_bus_id(gpu.pci_bus_id.c_str(), &dev) != kNvmlSuccess) {
      t.warnings.push_back("NVML does not know GPU " + gpu.pci_bus_id);
      continue;
    }
    answered = true;
    char text[96] = {};
    if (nvml.name(dev, text, sizeof(text)) == kNvmlSuccess) gpu.name = text;
    if (nvml.uuid(dev, text, sizeof(text)) == kNvmlSuccess) gpu.uuid = text;
    for (unsigned link = 0; link < kNvmlMaxNvLinks; ++link) {
      int active = 0;
      nvmlPciInfo_t remote = {};
      if (nvml.link_state(dev, link, &active) != kNvmlSuccess || active != kNvmlFeatureEnabled ||
          nvml.link_remote(dev, link, &remote) != kNvmlSuccess) {
        continue;
      }
      std::string peer = normalize_pci_bus_id(remote.busId);
      auto it = std::find_if(t.gpus.begin(), t.gpus.end(),
                             [&](const Gpu& g) { return g.pci_bus_id == peer; });
      // A link to anything but a GPU of this node goes to an NVSwitch (as NCCL assumes).
      if (it == t.gpus.end()) {
        ++switch_links[i];
      } else {
        ++links[i][it - t.gpus.begin()];
      }
    }
    nvmlGpuFabricInfo_t fabric = {};
    if (nvml.fabric != nullptr && nvml.fabric(dev, &fabric) == kNvmlSuccess &&
        fabric.state == kFabricCompleted && fabric.status == kNvmlSuccess &&
        std::any_of(std::begin(fabric.clusterUuid), std::end(fabric.clusterUuid),
                    [](unsigned char b) { return b != 0; })) {
      gpu.fabric_cluster_uuid = uuid_text(fabric.clusterUuid);
      gpu.fabric_clique_id = static_cast<int>(fabric.cliqueId);
    }
  }
  if (!answered) return;
  // Through NVSwitches every pair of switch-attached GPUs gets the smaller of their link counts.
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      if (i != j) links[i][j] += std::min(switch_links[i], switch_links[j]);
    }
  }
  t.nvlinks = std::move(links);
  apply_nvlinks_to_paths(t);
  t.source += " + NVML";
}

}  // namespace ax::topo::internal
