// Mesh derivation: from the nodes' topologies and the job's shape to ICI (inside an NVLink domain)
// and DCN (across domains) shapes over [data, fsdp, tensor], and the placement of every rank.
// Rules (docs/architecture.md "Mesh"): ICI = one NVLink domain (an NVL72 clique when fabric info
// says so, else the NVLink-connected GPUs of a node, else one node); consecutive ranks share a
// domain, tensor fastest, then fsdp, then data; `auto` = FSDP inside the domain, data parallel
// across domains; `auto:tp=N` = N-way tensor parallel inside the domain (FSDP over the rest of it);
// explicit `ici=d,f,t;dcn=d,f,t` with at most one -1 per vector; tensor parallelism across DCN is
// refused unless `force` is given. Every rejection names the numbers that disagree.
#pragma once

#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/topology/topology.h"

namespace ax::topo {

struct MeshShape {
  int data = 1, fsdp = 1, tensor = 1;
  int size() const { return data * fsdp * tensor; }
  bool operator==(const MeshShape&) const = default;
  std::string to_string() const;  // "1,8,1"
};

struct MeshSpec {
  enum class Kind { kAuto, kExplicit } kind = Kind::kAuto;
  int auto_tp = 1;     // auto:tp=N
  MeshShape ici, dcn;  // explicit; -1 allowed once per vector before resolution
  bool force = false;  // allow tensor > 1 in dcn
};
// "auto", "auto:tp=4", "ici=1,8,1;dcn=2,1,1", "ici=1,-1,1;dcn=-1,1,1", optional ";force".
// InvalidArgument names what is wrong; this runs on user input inside slurmstepd, so it must
// accept nothing else (bounded length, digits only, no overflow).
StatusOr<MeshSpec> parse_mesh_spec(const std::string& spec);

struct Placement {
  int rank = 0;
  int node = 0;        // node index in the job (SLURM_NODEID order)
  int local_rank = 0;  // task index on the node
  int gpu = -1;        // GPU index in that node's Topology (-1: CPU rank)
  int domain = 0;      // which ICI domain (DCN coordinate, flattened)
};

struct Mesh {
  MeshShape ici, dcn;
  int num_nodes = 0;
  int tasks_per_node = 0;
  int domain_size = 0;               // ranks per ICI domain
  std::vector<Placement> placement;  // by rank
  std::string explanation;           // one line: why these shapes
  MeshShape global() const {
    return {ici.data * dcn.data, ici.fsdp * dcn.fsdp, ici.tensor * dcn.tensor};
  }
};

// nodes: one topology per node (nodes.size() == num_nodes), or a single one shared by all nodes.
// tasks_per_node: ranks per node; it must equal the node's GPU count, or be any count >= 1 on a
// node without GPUs (CPU ranks: each node is its own domain).
StatusOr<Mesh> derive_mesh(const std::vector<Topology>& nodes, int num_nodes, int tasks_per_node,
                           const MeshSpec& spec);

}  // namespace ax::topo
