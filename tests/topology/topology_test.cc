// The node model on fixtures (load, JSON round trip, NVLink islands, nearest NICs), discovery on
// this machine, AX_TOPOLOGY_FILE, and the errors for missing or malformed files.
#include "ax/topology/topology.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ax/common/build_config.h"
#include "test_files.h"

namespace ax::topo {
namespace {

using ax::testing::temp_dir;
using ax::testing::write_file;

std::string fixture(const std::string& name) {
  return std::string(AX_TOPOLOGY_FIXTURES) + "/" + name + ".json";
}

void expect_same(const Topology& a, const Topology& b) {
  EXPECT_EQ(a.hostname, b.hostname);
  EXPECT_EQ(a.source, b.source);
  EXPECT_EQ(a.packages, b.packages);
  EXPECT_EQ(a.cores, b.cores);
  ASSERT_EQ(a.numa_nodes.size(), b.numa_nodes.size());
  for (size_t i = 0; i < a.numa_nodes.size(); ++i) {
    EXPECT_EQ(a.numa_nodes[i].id, b.numa_nodes[i].id);
    EXPECT_EQ(a.numa_nodes[i].package, b.numa_nodes[i].package);
    EXPECT_EQ(a.numa_nodes[i].cpus, b.numa_nodes[i].cpus);
  }
  ASSERT_EQ(a.gpus.size(), b.gpus.size());
  for (size_t i = 0; i < a.gpus.size(); ++i) {
    const Gpu& x = a.gpus[i];
    const Gpu& y = b.gpus[i];
    EXPECT_EQ(x.index, y.index);
    EXPECT_EQ(x.pci_bus_id, y.pci_bus_id);
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.uuid, y.uuid);
    EXPECT_EQ(x.numa_node, y.numa_node);
    EXPECT_EQ(x.cpus, y.cpus);
    EXPECT_EQ(x.nearest_nic, y.nearest_nic);
    EXPECT_EQ(x.nic_path, y.nic_path);
    EXPECT_EQ(x.fabric_cluster_uuid, y.fabric_cluster_uuid);
    EXPECT_EQ(x.fabric_clique_id, y.fabric_clique_id);
  }
  ASSERT_EQ(a.nics.size(), b.nics.size());
  for (size_t i = 0; i < a.nics.size(); ++i) {
    EXPECT_EQ(a.nics[i].name, b.nics[i].name);
    EXPECT_EQ(a.nics[i].netdev, b.nics[i].netdev);
    EXPECT_EQ(a.nics[i].pci_bus_id, b.nics[i].pci_bus_id);
    EXPECT_EQ(a.nics[i].numa_node, b.nics[i].numa_node);
  }
  EXPECT_EQ(a.gpu_paths, b.gpu_paths);
  EXPECT_EQ(a.nvlinks, b.nvlinks);
  EXPECT_EQ(a.warnings, b.warnings);
}

// Sets an environment variable for one test and restores the old value.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

struct FixtureCase {
  std::string name;
  size_t gpus;
  std::vector<std::vector<int>> islands;
};

class FixtureTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(FixtureTest, LoadsRoundTripsAndGroupsNvLinkIslands) {
  const FixtureCase& c = GetParam();
  StatusOr<Topology> t = load_topology(fixture(c.name));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->source, "fixture " + c.name + ".json");
  EXPECT_EQ(t->gpus.size(), c.gpus);
  EXPECT_EQ(t->nvlink_islands(), c.islands);

  size_t numa_cpus = 0;
  for (const NumaNode& n : t->numa_nodes) numa_cpus += n.cpus.size();
  EXPECT_EQ(numa_cpus, static_cast<size_t>(t->cores));
  for (const Gpu& g : t->gpus) {
    EXPECT_FALSE(g.cpus.empty()) << g.pci_bus_id;
    EXPECT_GE(g.nearest_nic, 0) << g.pci_bus_id;
  }

  std::string json = to_json(*t);
  StatusOr<Topology> back = topology_from_json(json);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*t, *back);
  EXPECT_EQ(to_json(*back), json);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FixtureTest,
                         ::testing::Values(FixtureCase{"dgx-h100", 8, {{0, 1, 2, 3, 4, 5, 6, 7}}},
                                           FixtureCase{"dgx-a100", 8, {{0, 1, 2, 3, 4, 5, 6, 7}}},
                                           FixtureCase{"pcie-4gpu", 4, {{0}, {1}, {2}, {3}}},
                                           FixtureCase{
                                               "two-islands", 8, {{0, 1, 2, 3}, {4, 5, 6, 7}}},
                                           FixtureCase{"gb200-nvl72-tray", 4, {{0, 1, 2, 3}}},
                                           FixtureCase{"no-gpu", 0, {}}),
                         [](const ::testing::TestParamInfo<FixtureCase>& info) {
                           std::string name = info.param.name;
                           for (char& ch : name) {
                             if (ch == '-') ch = '_';
                           }
                           return name;
                         });

TEST(Topology, DgxH100NearestNicSharesEachGpusSwitch) {
  StatusOr<Topology> t = load_topology(fixture("dgx-h100"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->nics.size(), 8u);
  EXPECT_EQ(t->packages, 2);
  EXPECT_EQ(t->cores, 112);
  for (const Gpu& g : t->gpus) {
    EXPECT_EQ(g.nearest_nic, g.index);
    EXPECT_EQ(t->nics[g.nearest_nic].name, "mlx5_" + std::to_string(g.index));
    EXPECT_EQ(g.nic_path, PathKind::kPcieSwitch);
    EXPECT_EQ(t->nics[g.nearest_nic].numa_node, g.numa_node);
    EXPECT_EQ(g.numa_node, g.index / 4);
    for (const Gpu& h : t->gpus) {
      if (h.index != g.index) {
        EXPECT_EQ(t->nvlinks[g.index][h.index], 18);
      }
    }
  }
}

TEST(Topology, DgxA100HasFourNumaNodesPerSocket) {
  StatusOr<Topology> t = load_topology(fixture("dgx-a100"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->numa_nodes.size(), 8u);
  EXPECT_EQ(t->cores, 128);
  EXPECT_EQ(t->nvlinks[0][7], 12);
}

TEST(Topology, PcieNodeKeepsPciPathClasses) {
  StatusOr<Topology> t = load_topology(fixture("pcie-4gpu"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->gpu_paths[0][1], PathKind::kHostBridge);
  EXPECT_EQ(t->gpu_paths[1][2], PathKind::kCrossSocket);
  EXPECT_EQ(t->gpus[3].nic_path, PathKind::kCrossSocket);
  EXPECT_STREQ(path_kind_name(t->gpu_paths[1][2]), "SYS");
}

TEST(Topology, Gb200TrayGpusShareOneFabricClique) {
  StatusOr<Topology> t = load_topology(fixture("gb200-nvl72-tray"));
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->gpus.size(), 4u);
  for (const Gpu& g : t->gpus) {
    EXPECT_FALSE(g.fabric_cluster_uuid.empty());
    EXPECT_EQ(g.fabric_cluster_uuid, t->gpus[0].fabric_cluster_uuid);
    EXPECT_EQ(g.fabric_clique_id, 0);
  }
}

TEST(Topology, IslandsFollowNvLinkTransitively) {
  Topology t;
  t.gpus.resize(5);
  t.nvlinks.assign(5, std::vector<int>(5, 0));
  t.gpu_paths.assign(5, std::vector<PathKind>(5, PathKind::kCrossSocket));
  t.nvlinks[3][4] = t.nvlinks[4][3] = 2;  // 3-4, then 4-1 (paths only): one island {1, 3, 4}
  t.gpu_paths[1][4] = t.gpu_paths[4][1] = PathKind::kNvLink;
  EXPECT_EQ(t.nvlink_islands(), (std::vector<std::vector<int>>{{1, 3, 4}, {0}, {2}}));
}

#if AX_HAVE_HWLOC
// The hwloc path on a fake 2-socket node (fake-4gpu.hwloc.xml, see make_fixtures.py).
TEST(Topology, LoadsHwlocXml) {
  std::string path = std::string(AX_TOPOLOGY_FIXTURES) + "/fake-4gpu.hwloc.xml";
  StatusOr<Topology> t = load_topology(path);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->hostname, "fake-xml-4gpu");
  EXPECT_EQ(t->source.rfind("hwloc ", 0), 0u) << t->source;
  EXPECT_TRUE(t->source.ends_with(" XML fake-4gpu.hwloc.xml")) << t->source;
  EXPECT_EQ(t->packages, 2);
  EXPECT_EQ(t->cores, 8);
  ASSERT_EQ(t->numa_nodes.size(), 2u);
  EXPECT_EQ(t->numa_nodes[1].package, 1);
  EXPECT_EQ(t->numa_nodes[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  ASSERT_EQ(t->gpus.size(), 4u);
  ASSERT_EQ(t->nics.size(), 4u);
  for (const Gpu& g : t->gpus) {
    EXPECT_EQ(g.name, "NVIDIA H100 80GB HBM3");
    EXPECT_EQ(g.uuid.rfind("GPU-", 0), 0u);
    EXPECT_EQ(g.numa_node, g.index / 2);
    EXPECT_EQ(g.cpus, t->numa_nodes[g.numa_node].cpus);
    EXPECT_EQ(g.nearest_nic, g.index);
    EXPECT_EQ(g.nic_path, PathKind::kPcieSwitch);
  }
  EXPECT_EQ(t->gpus[2].pci_bus_id, "0000:91:00.0");
  EXPECT_EQ(t->nics[2].name, "mlx5_2");
  EXPECT_EQ(t->nics[2].netdev, "ibp146s0");
  EXPECT_EQ(t->nics[2].numa_node, 1);
  EXPECT_EQ(t->nvlinks[0][1], 12);
  EXPECT_EQ(t->gpu_paths[0][1], PathKind::kNvLink);
  EXPECT_EQ(t->gpu_paths[2][3], PathKind::kHostBridge);
  EXPECT_EQ(t->gpu_paths[1][2], PathKind::kCrossSocket);
  EXPECT_EQ(t->nvlink_islands(), (std::vector<std::vector<int>>{{0, 1}, {2}, {3}}));

  StatusOr<Topology> back = topology_from_json(to_json(*t));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*t, *back);

  ScopedEnv file("AX_TOPOLOGY_FILE", path.c_str());
  StatusOr<Topology> discovered = discover();
  ASSERT_TRUE(discovered.ok()) << discovered.status().to_string();
  EXPECT_EQ(discovered->gpus.size(), 4u);
}
#endif

// Distinct (physical id, core id) pairs in /proc/cpuinfo; 0 when it does not say.
int cores_in_proc_cpuinfo() {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, package = "0";
  while (std::getline(in, line)) {
    std::string value = line.substr(line.find(':') == std::string::npos ? 0 : line.find(':') + 1);
    if (line.rfind("physical id", 0) == 0) package = value;
    if (line.rfind("core id", 0) == 0) cores.insert({package, value});
  }
  return static_cast<int>(cores.size());
}

TEST(Topology, DiscoversThisMachine) {
  ScopedEnv no_file("AX_TOPOLOGY_FILE", nullptr);
  StatusOr<Topology> t = discover();
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_FALSE(t->hostname.empty());
  EXPECT_GE(t->packages, 1);
  ASSERT_GE(t->cores, 1);
  EXPECT_LE(t->cores, static_cast<int>(std::thread::hardware_concurrency()));
  int cpuinfo_cores = cores_in_proc_cpuinfo();
  if (cpuinfo_cores > 0 && AX_HAVE_HWLOC) {
    EXPECT_EQ(t->cores, cpuinfo_cores);
  }
  size_t numa_cpus = 0;
  for (const NumaNode& n : t->numa_nodes) numa_cpus += n.cpus.size();
  EXPECT_EQ(numa_cpus, static_cast<size_t>(t->cores));
  if (!std::filesystem::exists("/proc/driver/nvidia")) {
    EXPECT_TRUE(t->gpus.empty());
    EXPECT_TRUE(t->gpu_paths.empty());
  }
  if (AX_HAVE_HWLOC) {
    EXPECT_EQ(t->source.rfind("hwloc ", 0), 0u) << t->source;
  }

  StatusOr<Topology> back = topology_from_json(to_json(*t));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(*t, *back);
}

TEST(Topology, TopologyFileReplacesDiscovery) {
  ScopedEnv file("AX_TOPOLOGY_FILE", fixture("two-islands").c_str());
  StatusOr<Topology> t = discover();
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->hostname, "two-islands");
  EXPECT_EQ(t->gpus.size(), 8u);
}

TEST(Topology, MissingFileIsNotFound) {
  std::string path = temp_dir("topology_missing") + "/nope.json";
  StatusOr<Topology> t = load_topology(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
  EXPECT_NE(t.status().message().find(path), std::string::npos) << t.status().to_string();

  ScopedEnv file("AX_TOPOLOGY_FILE", path.c_str());
  EXPECT_EQ(discover().status().code(), StatusCode::kNotFound);
}

TEST(Topology, MalformedJsonIsDataLossNamingTheFile) {
  std::string path = temp_dir("topology_bad_json") + "/bad.json";
  write_file(path, "{\"version\": 1, \"gpus\": [");
  StatusOr<Topology> t = load_topology(path);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(t.status().message().find(path), std::string::npos) << t.status().to_string();
}

TEST(Topology, WrongShapeIsInvalidArgumentNamingTheFile) {
  std::string dir = temp_dir("topology_bad_shape");
  StatusOr<Topology> good = load_topology(fixture("pcie-4gpu"));
  ASSERT_TRUE(good.ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"missing.json", "{\"version\": 1}"},
      {"version.json", "{\"version\": 99}"},
      {"array.json", "[1, 2]"},
  };
  for (const auto& [name, text] : cases) {
    std::string path = dir + "/" + name;
    write_file(path, text);
    StatusOr<Topology> t = load_topology(path);
    ASSERT_FALSE(t.ok()) << name;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument) << t.status().to_string();
    EXPECT_NE(t.status().message().find(path), std::string::npos) << t.status().to_string();
  }
  // A matrix that does not match the GPU count, and a NIC index out of range.
  Topology t = *good;
  t.gpu_paths.pop_back();
  EXPECT_EQ(topology_from_json(to_json(t)).status().code(), StatusCode::kInvalidArgument);
  t = *good;
  t.gpus[0].nearest_nic = 5;
  EXPECT_EQ(topology_from_json(to_json(t)).status().code(), StatusCode::kInvalidArgument);
  t = *good;
  t.nvlinks[1].push_back(0);
  EXPECT_EQ(topology_from_json(to_json(t)).status().code(), StatusCode::kInvalidArgument);
}

TEST(Topology, MalformedXmlIsAnErrorNamingTheFile) {
  std::string path = temp_dir("topology_bad_xml") + "/bad.xml";
  write_file(path, "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n  <object type=\"Mach");
  StatusOr<Topology> t = load_topology(path);
  ASSERT_FALSE(t.ok());
  StatusCode code = t.status().code();
  EXPECT_TRUE(code == StatusCode::kDataLoss || code == StatusCode::kInvalidArgument ||
              code == StatusCode::kUnimplemented)
      << t.status().to_string();
  EXPECT_NE(t.status().message().find(path), std::string::npos) << t.status().to_string();
}

}  // namespace
}  // namespace ax::topo
