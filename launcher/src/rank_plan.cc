#include "ax/launcher/rank_plan.h"

#include <algorithm>
#include <optional>
#include <set>
#include <string>

#include "ax/common/logging.h"
#include "ax/common/strings.h"

namespace ax::launcher {

namespace {

// One CUDA_VISIBLE_DEVICES entry: a GPU index in PCI order or a (prefix of a) GPU UUID.
StatusOr<int> find_gpu(const topo::Topology& node, const std::string& entry) {
  if (std::optional<int64_t> index = parse_int64(entry)) {
    if (*index < 0 || *index >= static_cast<int64_t>(node.gpus.size())) {
      return InvalidArgument("CUDA_VISIBLE_DEVICES names GPU ", *index, " but this node has ",
                             node.gpus.size(), " GPUs");
    }
    return static_cast<int>(*index);
  }
  int found = -1;
  for (const topo::Gpu& gpu : node.gpus) {
    if (!gpu.uuid.empty() && starts_with(gpu.uuid, entry)) {
      if (found >= 0) {
        return InvalidArgument("CUDA_VISIBLE_DEVICES entry '", entry, "' matches several GPUs");
      }
      found = gpu.index;
    }
  }
  if (found < 0) {
    return InvalidArgument("CUDA_VISIBLE_DEVICES entry '", entry,
                           "' is neither a GPU index nor the UUID of a GPU on this node");
  }
  return found;
}

bool all_available(const std::vector<int>& cpus, const std::vector<int>& available) {
  std::set<int> have(available.begin(), available.end());
  return !cpus.empty() &&
         std::all_of(cpus.begin(), cpus.end(), [&](int c) { return have.count(c) > 0; });
}

}  // namespace

StatusOr<topo::Topology> visible_topology(const topo::Topology& node, const std::string& cvd) {
  std::vector<int> chosen;
  if (!str_trim(cvd).empty()) {
    for (const std::string& raw : str_split(cvd, ',')) {
      std::string entry(str_trim(raw));
      StatusOr<int> gpu = find_gpu(node, entry);
      if (!gpu.ok()) return gpu.status();
      if (std::find(chosen.begin(), chosen.end(), *gpu) != chosen.end()) {
        return InvalidArgument("CUDA_VISIBLE_DEVICES names GPU '", entry, "' twice");
      }
      chosen.push_back(*gpu);
    }
  }
  topo::Topology out = node;
  out.gpus.clear();
  out.gpu_paths.assign(chosen.size(), std::vector<topo::PathKind>(chosen.size()));
  out.nvlinks.assign(chosen.size(), std::vector<int>(chosen.size(), 0));
  for (size_t i = 0; i < chosen.size(); ++i) {
    topo::Gpu gpu = node.gpus[static_cast<size_t>(chosen[i])];
    gpu.index = static_cast<int>(i);
    out.gpus.push_back(gpu);
    for (size_t j = 0; j < chosen.size(); ++j) {
      size_t a = static_cast<size_t>(chosen[i]), b = static_cast<size_t>(chosen[j]);
      if (a < node.gpu_paths.size() && b < node.gpu_paths[a].size()) {
        out.gpu_paths[i][j] = node.gpu_paths[a][b];
      }
      if (a < node.nvlinks.size() && b < node.nvlinks[a].size()) {
        out.nvlinks[i][j] = node.nvlinks[a][b];
      }
    }
  }
  return out;
}

StatusOr<NodePlan> plan_node(const topo::Topology& node, const PlanInput& in) {
  topo::Topology visible = node;
  if (in.cuda_visible_devices && !node.gpus.empty()) {
    StatusOr<topo::Topology> narrowed = visible_topology(node, *in.cuda_visible_devices);
    if (!narrowed.ok()) return narrowed.status();
    visible = std::move(narrowed).value();
  }
  int tasks = in.nproc > 0 ? in.nproc : std::max<int>(1, static_cast<int>(visible.gpus.size()));
  StatusOr<topo::MeshSpec> spec = topo::parse_mesh_spec(in.mesh_spec);
  if (!spec.ok()) return spec.status();
  StatusOr<topo::Mesh> mesh = topo::derive_mesh({visible}, in.nnodes, tasks, *spec);
  if (!mesh.ok()) {
    return in.mesh_flag.empty()
               ? mesh.status()
               : Status(mesh.status().code(), str_cat(in.mesh_flag, ": ", mesh.status().message()));
  }

  NodePlan plan;
  plan.mesh = std::move(mesh).value();
  plan.ranks.resize(static_cast<size_t>(tasks));
  std::vector<bool> seen(static_cast<size_t>(tasks), false);
  for (const topo::Placement& p : plan.mesh.placement) {
    if (p.node != in.node_rank) continue;
    if (p.local_rank < 0 || p.local_rank >= tasks) {
      return Internal("mesh placement has local rank ", p.local_rank, " of ", tasks);
    }
    RankPlan& r = plan.ranks[static_cast<size_t>(p.local_rank)];
    seen[static_cast<size_t>(p.local_rank)] = true;
    r.rank = p.rank;
    r.local_rank = p.local_rank;
    r.gpu = p.gpu;
    r.device = p.gpu >= 0 ? std::to_string(p.gpu) : "cpu";
    std::string nic;
    if (p.gpu >= 0) {
      const topo::Gpu& gpu = visible.gpus.at(static_cast<size_t>(p.gpu));
      r.mem_node = gpu.numa_node;
      if (all_available(gpu.cpus, in.available_cpus)) {
        r.cpus = gpu.cpus;
      } else {
        AX_LOG(kDebug, "launch") << "rank " << p.rank << ": GPU " << p.gpu
                                 << "'s cores are not all on this machine; not binding";
      }
      if (gpu.nearest_nic >= 0 && static_cast<size_t>(gpu.nearest_nic) < visible.nics.size()) {
        nic = visible.nics[static_cast<size_t>(gpu.nearest_nic)].name;
      }
    }
    r.env = {
        {"AX_RANK", std::to_string(p.rank)},
        {"AX_WORLD_SIZE", std::to_string(plan.mesh.placement.size())},
        {"AX_LOCAL_RANK", std::to_string(p.local_rank)},
        {"AX_LOCAL_WORLD_SIZE", std::to_string(tasks)},
        {"AX_NODE_RANK", std::to_string(in.node_rank)},
        {"AX_NNODES", std::to_string(in.nnodes)},
        {"AX_ICI_MESH", plan.mesh.ici.to_string()},
        {"AX_DCN_MESH", plan.mesh.dcn.to_string()},
        {"AX_MESH_SPEC", in.mesh_spec},
        {"AX_DEVICE", r.device},
        {"AX_COORDINATOR", in.coordinator},
    };
    if (!nic.empty() && !in.keep_nccl_ib_hca) r.env.emplace_back("NCCL_IB_HCA", nic);
  }
  for (int l = 0; l < tasks; ++l) {
    if (!seen[static_cast<size_t>(l)]) {
      return Internal("mesh placement has no rank for node ", in.node_rank, " local rank ", l);
    }
  }
  return plan;
}

}  // namespace ax::launcher
