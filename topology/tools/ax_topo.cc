// ax-topo: shows a node's topology (GPU/NIC matrix like `nvidia-smi topo -m`, NUMA, cores, nearest
// NIC) and the mesh ax would derive for N such nodes.
// Exit status: 0 done, 1 the work failed (the message says why), 2 the command line is wrong.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/status.h"
#include "ax/common/strings.h"
#include "ax/topology/mesh.h"
#include "ax/topology/topology.h"

namespace ax::topo {
namespace {

constexpr int kExitFailed = 1;
constexpr int kMaxNodes = 65536;
constexpr int kPlacementsShown = 16;

constexpr const char* kDescription =
    R"(Shows this node's topology (or FILE's: a JSON dump or an hwloc XML file; AX_TOPOLOGY_FILE also
replaces discovery) as a GPU/NIC matrix like `nvidia-smi topo -m`, with each GPU's NUMA node, local
cores and nearest NIC; with --nodes or --mesh, the mesh ax derives for N such nodes.)";

constexpr const char* kFooter =
    R"(Matrix cells: X self, NV# NVLink (# links), PIX same PCIe switch, PHB through a host bridge,
NODE within a NUMA node, SYS across sockets. GPU-GPU cells and each GPU's nearest NIC come from
discovery; the other GPU-NIC and NIC-NIC cells are NODE or SYS from their NUMA nodes.
exit status: 0 done, 1 the work failed, 2 the command line is wrong.)";

struct Options {
  std::string topology_file;
  int nodes = 1;
  std::optional<int> tasks_per_node;
  std::string mesh = "auto";
  bool want_mesh = false;
  bool json = false;
};

void add_options(CLI::App& app, Options* o) {
  app.add_option("--topology", o->topology_file, "read FILE instead of discovering this node")
      ->type_name("FILE");
  app.add_option("--nodes", o->nodes, "number of identical nodes (default 1)")
      ->type_name("N")
      ->check(CLI::Range(1, kMaxNodes));
  app.add_option("--tasks-per-node", o->tasks_per_node,
                 "ranks per node (default: the GPU count, or 1 on a node without GPUs)")
      ->type_name("N")
      ->check(CLI::Range(1, kMaxNodes));
  app.add_option("--mesh", o->mesh,
                 "auto | auto:tp=N,sp=N,pp=N | ici=d,f,t;dcn=d,f,t[;force] (or five "
                 "numbers p,d,f,s,t per vector; default auto)")
      ->type_name("SPEC");
  app.add_flag("--json", o->json, R"(print {"topology": ..., "mesh": ...} as JSON)");
}

// "0-55,112-167".
std::string cpu_ranges(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  cpus.erase(std::unique(cpus.begin(), cpus.end()), cpus.end());
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out.empty() ? "N/A" : out;
}

std::string numa_path(int a, int b) { return a >= 0 && a == b ? "NODE" : "SYS"; }

std::string gpu_gpu_cell(const Topology& t, int i, int j) {
  if (i == j) return "X";
  if (i < static_cast<int>(t.nvlinks.size()) && j < static_cast<int>(t.nvlinks[i].size()) &&
      t.nvlinks[i][j] > 0) {
    return "NV" + std::to_string(t.nvlinks[i][j]);
  }
  if (i < static_cast<int>(t.gpu_paths.size()) && j < static_cast<int>(t.gpu_paths[i].size())) {
    return path_kind_name(t.gpu_paths[i][j]);
  }
  return "?";
}

std::string gpu_nic_cell(const Topology& t, int g, int n) {
  const Gpu& gpu = t.gpus[g];
  if (gpu.nearest_nic == n) return path_kind_name(gpu.nic_path);
  return numa_path(gpu.numa_node, t.nics[n].numa_node);
}

void print_matrix(const Topology& t, std::ostream& os) {
  const int gpus = static_cast<int>(t.gpus.size());
  const int nics = static_cast<int>(t.nics.size());
  std::string line;
  auto cell = [&](const std::string& s, size_t width = 8) {
    line += s;
    if (s.size() < width) line.append(width - s.size(), ' ');
  };
  auto end_line = [&] {
    while (!line.empty() && line.back() == ' ') line.pop_back();
    os << line << "\n";
    line.clear();
  };
  cell("");
  for (int g = 0; g < gpus; ++g) cell("GPU" + std::to_string(g));
  for (int n = 0; n < nics; ++n) cell("NIC" + std::to_string(n));
  if (gpus > 0) line += "CPU Affinity    NUMA  Nearest NIC";
  end_line();
  for (int g = 0; g < gpus; ++g) {
    const Gpu& gpu = t.gpus[g];
    cell("GPU" + std::to_string(g));
    for (int h = 0; h < gpus; ++h) cell(gpu_gpu_cell(t, g, h));
    for (int n = 0; n < nics; ++n) cell(gpu_nic_cell(t, g, n));
    cell(cpu_ranges(gpu.cpus), 16);
    cell(gpu.numa_node >= 0 ? std::to_string(gpu.numa_node) : "N/A", 6);
    if (gpu.nearest_nic >= 0 && gpu.nearest_nic < nics) {
      line += str_cat("NIC", gpu.nearest_nic, " (", path_kind_name(gpu.nic_path), ")");
    } else {
      line += "none";
    }
    end_line();
  }
  for (int n = 0; n < nics; ++n) {
    cell("NIC" + std::to_string(n));
    for (int g = 0; g < gpus; ++g) cell(gpu_nic_cell(t, g, n));
    for (int m = 0; m < nics; ++m) {
      cell(n == m ? "X" : numa_path(t.nics[n].numa_node, t.nics[m].numa_node));
    }
    end_line();
  }
  if (nics > 0) {
    os << "\nNIC Legend:\n";
    for (int n = 0; n < nics; ++n) {
      os << "  NIC" << n << ": " << t.nics[n].name;
      if (!t.nics[n].netdev.empty() && t.nics[n].netdev != t.nics[n].name) {
        os << " (" << t.nics[n].netdev << ")";
      }
      os << "\n";
    }
  }
}

void print_topology(const Topology& t, std::ostream& os) {
  os << "host " << (t.hostname.empty() ? "?" : t.hostname) << " (" << t.source
     << "): " << t.packages << " sockets, " << t.numa_nodes.size() << " NUMA nodes, " << t.cores
     << " cores, " << t.gpus.size() << " GPUs, " << t.nics.size() << " NICs\n";
  for (const NumaNode& n : t.numa_nodes) {
    os << "  NUMA " << n.id << " (socket " << n.package << "): CPUs " << cpu_ranges(n.cpus) << "\n";
  }
  for (const Gpu& g : t.gpus) {
    os << "  GPU" << g.index << " " << g.pci_bus_id;
    if (!g.name.empty()) os << " " << g.name;
    if (!g.fabric_cluster_uuid.empty()) {
      os << " fabric " << g.fabric_cluster_uuid << "/" << g.fabric_clique_id;
    }
    os << "\n";
  }
  for (const std::string& w : t.warnings) os << "  warning: " << w << "\n";
  os << "\n";
  if (t.gpus.empty() && t.nics.empty()) {
    os << "(no GPUs or NICs)\n";
  } else {
    print_matrix(t, os);
  }
}

void print_mesh(const Mesh& m, std::ostream& os) {
  os << "\nmesh for " << m.num_nodes << " node(s) x " << m.tasks_per_node << " task(s):\n"
     << "  axes          pipeline,data,fsdp,seq,tensor\n"
     << "  ici           " << m.ici.full_string() << "\n"
     << "  dcn           " << m.dcn.full_string() << "\n"
     << "  global        " << m.global().full_string() << "\n"
     << "  domain size   " << m.domain_size << "\n"
     << "  why           " << m.explanation << "\n"
     << "  rank  node  local  gpu  domain  pipeline  data  fsdp  seq  tensor\n";
  const int shown = std::min<int>(kPlacementsShown, static_cast<int>(m.placement.size()));
  char line[128];
  for (int r = 0; r < shown; ++r) {
    const Placement& p = m.placement[r];
    std::snprintf(line, sizeof(line), "  %4d  %4d  %5d  %3s  %6d  %8d  %4d  %4d  %3d  %6d\n",
                  p.rank, p.node, p.local_rank, p.gpu >= 0 ? std::to_string(p.gpu).c_str() : "cpu",
                  p.domain, p.coord.pipeline, p.coord.data, p.coord.fsdp, p.coord.seq,
                  p.coord.tensor);
    os << line;
  }
  if (shown < static_cast<int>(m.placement.size())) {
    os << "  ... " << m.placement.size() - shown << " more ranks\n";
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string json_shape(const MeshShape& s) { return str_cat("[", s.full_string(), "]"); }

std::string mesh_json(const Mesh& m) {
  std::ostringstream os;
  os << "{\"nodes\":" << m.num_nodes << ",\"tasks_per_node\":" << m.tasks_per_node
     << ",\"axes\":[\"pipeline\",\"data\",\"fsdp\",\"seq\",\"tensor\"]"
     << ",\"ici\":" << json_shape(m.ici) << ",\"dcn\":" << json_shape(m.dcn)
     << ",\"global\":" << json_shape(m.global()) << ",\"domain_size\":" << m.domain_size
     << ",\"explanation\":" << json_string(m.explanation) << ",\"placement\":[";
  for (size_t r = 0; r < m.placement.size(); ++r) {
    const Placement& p = m.placement[r];
    os << (r ? "," : "") << "{\"rank\":" << p.rank << ",\"node\":" << p.node
       << ",\"local_rank\":" << p.local_rank << ",\"gpu\":" << p.gpu << ",\"domain\":" << p.domain
       << ",\"coord\":" << json_shape(p.coord) << "}";
  }
  os << "]}";
  return os.str();
}

int run(int argc, char** argv) {
  Options o;
  CLI::App app{kDescription, "ax-topo"};
  cli::configure(app);
  add_options(app, &o);
  app.footer(kFooter);
  if (std::optional<int> exit = cli::parse_or_exit(app, argc, argv)) return *exit;
  if (o.topology_file.empty() && app.count("--topology") > 0) {
    return cli::usage_error(app, "--topology needs a file name");
  }
  o.want_mesh = app.count("--nodes") + app.count("--tasks-per-node") + app.count("--mesh") > 0;
  StatusOr<MeshSpec> spec = parse_mesh_spec(o.mesh);
  if (!spec.ok()) {
    std::cerr << "ax-topo: --mesh: " << spec.status().message() << "\n";
    return cli::kExitUsage;
  }
  StatusOr<Topology> topology =
      o.topology_file.empty() ? discover() : load_topology(o.topology_file);
  if (!topology.ok()) {
    std::cerr << "ax-topo: " << topology.status().message() << "\n";
    return kExitFailed;
  }
  std::optional<Mesh> mesh;
  if (o.want_mesh) {
    const int gpus = static_cast<int>(topology->gpus.size());
    const int tasks = o.tasks_per_node.value_or(gpus > 0 ? gpus : 1);
    StatusOr<Mesh> m = derive_mesh({*topology}, o.nodes, tasks, *spec);
    if (!m.ok()) {
      std::cerr << "ax-topo: --mesh " << o.mesh << ": " << m.status().message() << "\n";
      return kExitFailed;
    }
    mesh = std::move(*m);
  }
  if (o.json) {
    std::string topo_json = to_json(*topology);
    while (!topo_json.empty() && (topo_json.back() == '\n' || topo_json.back() == ' ')) {
      topo_json.pop_back();
    }
    std::cout << "{\"topology\":" << topo_json << ",\"mesh\":" << (mesh ? mesh_json(*mesh) : "null")
              << "}\n";
  } else {
    print_topology(*topology, std::cout);
    if (mesh) print_mesh(*mesh, std::cout);
  }
  return std::cout.good() ? 0 : kExitFailed;
}

}  // namespace
}  // namespace ax::topo

int main(int argc, char** argv) { return ax::topo::run(argc, argv); }
