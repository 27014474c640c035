// The split of an `auto` mesh from the plan (docs/plan.md "srun --ax-mesh=auto and ax-launch"):
// `srun --ax-mesh=auto` and `ax-launch --mesh auto` derive the mesh's shape from the topology
// alone (the ranks of an ICI domain, the domains), with the topology's split (fsdp inside a
// domain, data across). ax-train, which has the model, replaces that split with the fastest
// layout of `ax-train plan` on those domains that fits on the job's GPU, keeping what the spec
// fixed (`auto:tp=N,sp=S,pp=P`) and the config's micro-batches and recomputation. Every rank
// plans the same inputs (the config, the tokenizer's size, the shapes, the GPU kind) with the
// same pure function, so all of them choose the same layout without talking.
#pragma once

#include <cstdint>
#include <string>

#include "ax/common/status.h"
#include "ax/trainer/config/config.h"

namespace ax::train {

struct AutoMeshInput {
  Config config;
  int64_t vocab = 0;     // the tokenizer's size (model.vocab_size when that is set)
  std::string spec;      // AX_MESH_SPEC: the spec the launcher or plugin was given
  std::string ici, dcn;  // AX_ICI_MESH / AX_DCN_MESH: the shapes it derived
  int world = 1;
  // The GPU kind to plan for: AX_PLAN_GPU, else the CUDA device's model; empty: a CPU rank.
  std::string gpu;
  bool enabled = true;  // AX_PLAN
};

struct AutoMeshChoice {
  bool planned = false;
  std::string ici, dcn;  // the shapes to train on: the plan's, else the input's
  // One line for the log: which layout and why, or why the mesh was not planned; empty when
  // the spec was not `auto` (an explicit mesh, or no launcher).
  std::string line;
};

// InvalidArgument, one line, when no layout of the domains fits with the config's micro-batches
// and recomputation: what would fit (other micro-batches, recomputation, or the smallest
// cluster), and AX_PLAN=0 to train on the topology's split regardless.
StatusOr<AutoMeshChoice> plan_auto_mesh(const AutoMeshInput& in);

// The knobs (--help-env): AX_PLAN and AX_PLAN_GPU, which the job scripts read too.
StatusOr<bool> auto_mesh_enabled();
StatusOr<std::string> auto_mesh_gpu();

}  // namespace ax::train
