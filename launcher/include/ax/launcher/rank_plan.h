// What each local rank gets: its place in the mesh, the AX_* environment of docs/architecture.md's
// contract (docs/launch.md has the table), and the cores and NUMA memory node it is bound to. Pure
// computation over a Topology, so tests run it on fixtures.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ax/common/status.h"
#include "ax/topology/mesh.h"
#include "ax/topology/topology.h"

namespace ax::launcher {

struct RankPlan {
  int rank = 0;
  int local_rank = 0;
  int gpu = -1;           // index in the (visible) topology, -1 = CPU rank
  std::string device;     // AX_DEVICE: CUDA ordinal or "cpu"
  std::vector<int> cpus;  // cores to bind to; empty = no binding
  // NUMA node the rank's memory is preferred on (its GPU's); -1 = none (CPU rank, or unknown).
  // Whether this machine has that node is checked where the binding happens.
  int mem_node = -1;
  std::vector<std::pair<std::string, std::string>> env;  // variables to set for this rank
};

struct NodePlan {
  topo::Mesh mesh;
  std::vector<RankPlan> ranks;  // by local rank
};

struct PlanInput {
  int nproc = 0;  // 0 = auto
  std::string mesh_spec = "auto";
  // How the user gave the spec ("--mesh auto:tp=4", "--ax-mesh=auto:tp=4"): a mesh that does not
  // fit is reported as "<mesh_flag>: <why and what to use instead>".
  std::string mesh_flag;
  int nnodes = 1;
  int node_rank = 0;
  std::string coordinator;
  // The value of CUDA_VISIBLE_DEVICES, when set: only those GPUs are used, and a GPU's CUDA
  // ordinal is its position in that list. Ignored on a node without GPUs.
  std::optional<std::string> cuda_visible_devices;
  // Cores this process may run on; a GPU's cores are bound only when all of them are here
  // (fixtures describe other machines).
  std::vector<int> available_cpus;
  // NCCL_IB_HCA already chosen by the user is kept.
  bool keep_nccl_ib_hca = false;
};

// The node as the children see it: the GPUs named by CUDA_VISIBLE_DEVICES (by index or UUID
// prefix), in that order, so a GPU's index equals its CUDA ordinal.
StatusOr<topo::Topology> visible_topology(const topo::Topology& node, const std::string& cvd);

StatusOr<NodePlan> plan_node(const topo::Topology& node, const PlanInput& in);

}  // namespace ax::launcher
