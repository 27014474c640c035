#include "ax/trainer/train/auto_mesh.h"

#include <optional>

#include "ax/common/env.h"
#include "ax/common/strings.h"
#include "ax/topology/mesh.h"
#include "ax/trainer/plan/plan.h"

namespace ax::train {
namespace {

const EnvKnob<bool> kPlan("AX_PLAN", true,
                          "plan the split of an `auto` mesh (srun --ax-mesh=auto, ax-launch "
                          "--mesh auto) from the model, and in the job scripts plan the mesh "
                          "before srun; 0: the topology's split (docs/plan.md)");
const EnvKnob<std::string> kPlanGpu(
    "AX_PLAN_GPU", "",
    "the GPU kind an `auto` mesh is planned for (H100-80GB, H200, A100-80GB or the driver's "
    "name); default: the CUDA device's own model; a CPU rank is planned only when this is set");

struct Fixed {
  std::optional<int> tensor, seq, pipeline;
  bool allows(const plan::Layout& l) const {
    return (!tensor || l.tensor() == *tensor) && (!seq || l.seq() == *seq) &&
           (!pipeline || l.pipeline() == *pipeline);
  }
  std::string describe() const {
    std::string s;
    if (pipeline) s += str_cat(" pipeline ", *pipeline);
    if (seq) s += str_cat(" seq ", *seq);
    if (tensor) s += str_cat(" tensor ", *tensor);
    return s.empty() ? s : str_cat(" with", s);
  }
};

const plan::Candidate* fastest_fitting(const plan::Plan& p, const Fixed& fixed) {
  for (const plan::Candidate& c : p.candidates) {  // feasible first, fastest first
    if (c.fits && fixed.allows(c.layout)) return &c;
  }
  return nullptr;
}

}  // namespace

StatusOr<bool> auto_mesh_enabled() { return kPlan.get(); }
StatusOr<std::string> auto_mesh_gpu() { return kPlanGpu.get(); }

StatusOr<AutoMeshChoice> plan_auto_mesh(const AutoMeshInput& in) {
  AutoMeshChoice out;
  out.ici = in.ici;
  out.dcn = in.dcn;
  if (in.spec.empty() || in.ici.empty() || in.dcn.empty()) return out;
  StatusOr<topo::MeshSpec> spec = topo::parse_mesh_spec(in.spec);
  if (!spec.ok()) return spec.status().with_context("AX_MESH_SPEC");
  if (spec->kind != topo::MeshSpec::Kind::kAuto) return out;
  const std::string topology_split = str_cat("ici=", in.ici, ";dcn=", in.dcn);
  const std::string head = str_cat("mesh ", in.spec, ": ");
  if (!in.enabled) {
    out.line = str_cat(head, "not planned (AX_PLAN=0), the topology's split ", topology_split);
    return out;
  }
  if (in.gpu.empty()) {
    out.line = str_cat(head, "not planned (CPU ranks; AX_PLAN_GPU=H100-80GB|H200|A100-80GB ",
                       "plans as if on that GPU), the topology's split ", topology_split);
    return out;
  }
  StatusOr<plan::GpuSpec> gpu = plan::find_gpu(in.gpu);
  if (!gpu.ok()) {
    out.line = str_cat(head, "not planned (", gpu.status().message(), "), the topology's split ",
                       topology_split);
    return out;
  }
  StatusOr<topo::MeshSpec> shapes =
      topo::parse_mesh_spec(str_cat(topology_split, ";force"));  // the launcher checked them
  if (!shapes.ok()) return shapes.status().with_context("AX_ICI_MESH/AX_DCN_MESH");
  const int domain = shapes->ici.size(), domains = shapes->dcn.size();
  if (domain < 1 || domains < 1 || domain * domains != in.world) {
    return InvalidArgument("AX_ICI_MESH=", in.ici, " x AX_DCN_MESH=", in.dcn, " is not the ",
                           in.world, " ranks of the job");
  }
  Fixed fixed;
  if (in.spec.find("tp=") != std::string::npos) fixed.tensor = spec->auto_tp;
  if (in.spec.find("sp=") != std::string::npos) fixed.seq = spec->auto_sp;
  if (in.spec.find("pp=") != std::string::npos) fixed.pipeline = spec->auto_pp;

  plan::PlanRequest request;
  request.config = in.config;
  request.vocab = in.vocab;
  request.cluster = plan::Cluster{domains, domain, *gpu};
  request.microbatches = in.config.train.num_microbatches;
  request.recompute = in.config.train.recompute == "layer";
  const std::string cluster = str_cat(domains, " x ", domain, " ", gpu->name);
  StatusOr<plan::Plan> p = plan::make_plan(request);
  if (!p.ok()) {
    out.line = str_cat(head, "not planned (", p.status().message(), "), the topology's split ",
                       topology_split);
    return out;
  }
  if (const plan::Candidate* c = fastest_fitting(*p, fixed)) {
    out.planned = true;
    out.ici = c->layout.ici_string();
    out.dcn = c->layout.dcn_string();
    out.line = str_cat(head, "planned ", plan::summary_line(*p, *c), " (the fastest that fits on ",
                       cluster, fixed.describe(),
                       " at train.num_microbatches=", in.config.train.num_microbatches,
                       " and train.recompute=", in.config.train.recompute,
                       "; the topology's split was ", topology_split, ")");
    return out;
  }
  // Nothing fits with the config's own choices: say what would.
  std::string fix;
  plan::PlanRequest free = request;
  free.microbatches.reset();
  free.recompute.reset();
  StatusOr<plan::Plan> any = plan::make_plan(free);
  const plan::Candidate* c = any.ok() ? fastest_fitting(*any, fixed) : nullptr;
  if (c != nullptr) {
    fix = str_cat("it fits with --set train.num_microbatches=", c->microbatches,
                  c->recompute ? " train.recompute=layer" : "", " (", plan::summary_line(*any, *c),
                  ")");
  } else {
    const int nodes = plan::smallest_fitting_nodes(free);
    fix = nodes > 0
              ? str_cat("the smallest cluster that fits is ", nodes, " x ", domain, " ", gpu->name)
              : std::string("it fits on no cluster of up to 1024 such domains");
  }
  return InvalidArgument(head, "no layout of ", cluster, fixed.describe(),
                         " fits at train.num_microbatches=", in.config.train.num_microbatches,
                         " and train.recompute=", in.config.train.recompute, ": ", fix,
                         " (AX_PLAN=0 trains on the topology's split ", topology_split,
                         " regardless)");
}

}  // namespace ax::train
