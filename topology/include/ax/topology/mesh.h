// Mesh derivation: from the nodes' topologies and the job's shape to ICI (inside an NVLink domain)
// and DCN (across domains) shapes over AXLearn's axes [pipeline, data, fsdp, seq, tensor] (its
// `expert` axis has no counterpart in ax), and the placement of every rank.
// Rules (docs/topology-and-mesh.md): ICI = one NVLink domain (an NVL72 clique when fabric info
// says so, else the NVLink-connected GPUs of a node, else one node); consecutive ranks share a
// domain, tensor fastest, then seq, fsdp, data, pipeline slowest; `auto` = FSDP inside the domain,
// data parallel across domains; `auto:tp=N,sp=S,pp=P` = N-way tensor and S-way sequence parallel
// inside the domain, P pipeline stages across domains (FSDP over the rest of the domain);
// explicit `ici=...;dcn=...` (three numbers data,fsdp,tensor or five pipeline,data,fsdp,seq,tensor)
// with at most one -1 per vector; tensor or seq parallelism across DCN is refused unless `force` is
// given. Every rejection names the numbers that disagree.
#pragma once

#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/topology/topology.h"

namespace ax::topo {

// Axis sizes in AXLearn's order. The three-number form data,fsdp,tensor means pipeline 1, seq 1.
struct MeshShape {
  int pipeline = 1, data = 1, fsdp = 1, seq = 1, tensor = 1;
  MeshShape() = default;
  MeshShape(int d, int f, int t) : data(d), fsdp(f), tensor(t) {}
  MeshShape(int p, int d, int f, int s, int t) : pipeline(p), data(d), fsdp(f), seq(s), tensor(t) {}
  int size() const { return pipeline * data * fsdp * seq * tensor; }
  bool operator==(const MeshShape&) const = default;
  // "1,8,1" while pipeline and seq are 1 (what AX_ICI_MESH always said), else "2,1,4,1,1"; both
  // forms parse back.
  std::string to_string() const;
  std::string full_string() const;  // always five numbers: "1,1,8,1,1"
  // "pipeline=2 data=1 fsdp=4 seq=1 tensor=1"
  std::string named() const;
};

struct MeshSpec {
  enum class Kind { kAuto, kExplicit } kind = Kind::kAuto;
  int auto_tp = 1;     // auto:tp=N
  int auto_sp = 1;     // auto:sp=N (a seq group stays inside an ICI domain)
  int auto_pp = 1;     // auto:pp=N (stages across ICI domains first)
  MeshShape ici, dcn;  // explicit; -1 allowed once per vector before resolution
  bool force = false;  // allow tensor or seq > 1 in dcn
};
// "auto", "auto:tp=4", "auto:pp=2,tp=4", "ici=1,8,1;dcn=2,1,1", "ici=1,-1,1;dcn=-1,1,1",
// "ici=1,1,-1,1,1;dcn=2,-1,1,1,1", optional ";force".
// InvalidArgument names what is wrong; this runs on user input inside slurmstepd, so it must
// accept nothing else (bounded length, digits only, no overflow).
StatusOr<MeshSpec> parse_mesh_spec(const std::string& spec);

struct Placement {
  int rank = 0;
  int node = 0;        // node index in the job (SLURM_NODEID order)
  int local_rank = 0;  // task index on the node
  int gpu = -1;        // GPU index in that node's Topology (-1: CPU rank)
  int domain = 0;      // which ICI domain (DCN coordinate, flattened)
  // The rank's coordinate on each axis of the global mesh (0 .. size-1), laid out as JAX's
  // create_hybrid_device_mesh does: per axis, DCN coordinate x ICI size + ICI coordinate, the ICI
  // coordinate the rank's row-major index inside its domain, the DCN one the domain's. When the
  // axes that are > 1 in DCN come before those > 1 in ICI (every auto mesh), this is rank =
  // (((pipeline * D + data) * F + fsdp) * S + seq) * T + tensor, the trainer's numbering.
  MeshShape coord{0, 0, 0, 0, 0};
};

struct Mesh {
  MeshShape ici, dcn;
  int num_nodes = 0;
  int tasks_per_node = 0;
  int domain_size = 0;               // ranks per ICI domain
  std::vector<Placement> placement;  // by rank
  std::string explanation;           // one line: why these shapes
  MeshShape global() const {
    return {ici.pipeline * dcn.pipeline, ici.data * dcn.data, ici.fsdp * dcn.fsdp,
            ici.seq * dcn.seq, ici.tensor * dcn.tensor};
  }
};

// nodes: one topology per node (nodes.size() == num_nodes), or a single one shared by all nodes.
// tasks_per_node: ranks per node; it must equal the node's GPU count, or be any count >= 1 on a
// node without GPUs (CPU ranks: each node is its own domain).
StatusOr<Mesh> derive_mesh(const std::vector<Topology>& nodes, int num_nodes, int tasks_per_node,
                           const MeshSpec& spec);

}  // namespace ax::topo
