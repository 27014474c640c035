#include "env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <set>

#include "ax/common/strings.h"
#include "ax/job_context/job_context.h"
#include "ax/launcher/rank_plan.h"
#include "ax/topology/mesh.h"

namespace ax::spank {

namespace {

constexpr size_t kMaxHostname = 255;

bool all_available(const std::vector<int>& cpus, const std::vector<int>& available) {
  std::set<int> have(available.begin(), available.end());
  return !cpus.empty() &&
         std::all_of(cpus.begin(), cpus.end(), [&](int c) { return have.count(c) > 0; });
}

std::string all_nics(const topo::Topology& node) {
  std::string out;
  for (const topo::Nic& nic : node.nics) {
    if (nic.name.empty()) continue;
    if (!out.empty()) out += ',';
    out += nic.name;
  }
  return out;
}

void set_var(TaskEnv& out, const std::string& name, const std::string& value) {
  for (auto& [key, v] : out.env) {
    if (key == name) {
      v = value;
      return;
    }
  }
  out.env.emplace_back(name, value);
}

// Position of node GPU `gpu` in the task's CUDA_VISIBLE_DEVICES, -1 when absent.
StatusOr<int> ordinal_in(const topo::Topology& node, int gpu, const std::string& cvd) {
  StatusOr<topo::Topology> visible = launcher::visible_topology(node, cvd);
  if (!visible.ok()) return visible.status();
  const std::string& bus = node.gpus.at(static_cast<size_t>(gpu)).pci_bus_id;
  for (const topo::Gpu& g : visible->gpus) {
    if (g.pci_bus_id == bus) return g.index;
  }
  return -1;
}

}  // namespace

StatusOr<TaskEnv> task_env(const topo::Topology& node, const Config& config, const TaskInput& in) {
  if (in.local_id < 0 || in.local_id >= in.tasks_per_node) {
    return InvalidArgument("task ", in.local_id, " of ", in.tasks_per_node, " on this node");
  }
  launcher::PlanInput plan_in;
  plan_in.nproc = in.tasks_per_node;
  plan_in.mesh_spec = in.mesh_spec;
  plan_in.mesh_flag = str_cat("--ax-mesh=", in.mesh_spec);
  plan_in.nnodes = in.nnodes;
  plan_in.node_rank = in.node_id;
  plan_in.coordinator = in.coordinator;
  plan_in.available_cpus = in.available_cpus;
  plan_in.keep_nccl_ib_hca = in.user_nccl_ib_hca || config.nic == NicChoice::kAll;
  // A CUDA_VISIBLE_DEVICES naming one GPU per task on the node is the step's view (as ax-launch
  // sees it); otherwise Slurm bound GPUs per task and ordinals are found after planning.
  bool step_view = false;
  topo::Topology planned = node;  // the GPUs plan_node indexes
  if (in.cuda_visible_devices && !node.gpus.empty()) {
    StatusOr<topo::Topology> visible = launcher::visible_topology(node, *in.cuda_visible_devices);
    if (!visible.ok()) return visible.status();
    step_view = static_cast<int>(visible->gpus.size()) == in.tasks_per_node;
    if (step_view) {
      plan_in.cuda_visible_devices = in.cuda_visible_devices;
      planned = std::move(visible).value();
    }
  }
  StatusOr<launcher::NodePlan> plan = launcher::plan_node(node, plan_in);
  if (!plan.ok()) return plan.status();
  const launcher::RankPlan& rank = plan->ranks.at(static_cast<size_t>(in.local_id));

  TaskEnv out;
  out.env = rank.env;
  if (rank.gpu >= 0 && in.cuda_visible_devices && !step_view) {
    StatusOr<int> ordinal = ordinal_in(node, rank.gpu, *in.cuda_visible_devices);
    if (!ordinal.ok()) return ordinal.status();
    if (*ordinal < 0) {
      return FailedPrecondition("rank ", rank.rank, " is placed on GPU ", rank.gpu,
                                " but the task's CUDA_VISIBLE_DEVICES=", *in.cuda_visible_devices,
                                " does not name it");
    }
    set_var(out, "AX_DEVICE", std::to_string(*ordinal));
  }
  if (rank.gpu >= 0 && config.nic == NicChoice::kAll && !in.user_nccl_ib_hca) {
    std::string nics = all_nics(node);
    if (!nics.empty()) set_var(out, "NCCL_IB_HCA", nics);
  }
  if (rank.gpu >= 0 && config.bind != Bind::kNone) out.mem_node = rank.mem_node;
  if (rank.gpu >= 0 && config.bind == Bind::kCores) {
    out.cpus = rank.cpus;
    if (out.cpus.empty()) out.note = "the GPU's cores are not all available to the task";
  } else if (rank.gpu >= 0 && config.bind == Bind::kNuma) {
    int numa = planned.gpus.at(static_cast<size_t>(rank.gpu)).numa_node;
    for (const topo::NumaNode& n : node.numa_nodes) {
      if (n.id == numa && all_available(n.cpus, in.available_cpus)) out.cpus = n.cpus;
    }
    if (out.cpus.empty()) out.note = "the GPU's NUMA node cores are not all available to the task";
  }
  if (rank.rank != in.global_id) {
    out.note = str_cat("AX_RANK ", rank.rank, " differs from Slurm's task id ", in.global_id,
                       " (mesh placement order)");
  }
  return out;
}

Status check_step_mesh(const topo::Topology& node, const std::string& spec, int nnodes,
                       int total_tasks) {
  if (nnodes < 1 || total_tasks < nnodes || total_tasks % nnodes != 0) return Status::Ok();
  const int tasks_per_node = total_tasks / nnodes;
  if (!node.gpus.empty() && static_cast<int>(node.gpus.size()) != tasks_per_node) {
    return Status::Ok();  // the step's GPUs are a subset Slurm picks on the node
  }
  StatusOr<topo::MeshSpec> parsed = topo::parse_mesh_spec(spec);
  if (!parsed.ok()) return Status::Ok();  // the option's own check reports it
  StatusOr<topo::Mesh> mesh = topo::derive_mesh({node}, nnodes, tasks_per_node, *parsed);
  if (mesh.ok()) return Status::Ok();
  return Status(mesh.status().code(), str_cat("--ax-mesh=", spec, ": ", mesh.status().message()));
}

StatusOr<std::string> first_host(const std::string& nodelist) {
  // Bounded: this runs on user input inside slurmstepd.
  if (nodelist.size() > kMaxArgLength) {
    return InvalidArgument("node list longer than ", kMaxArgLength, " characters");
  }
  AX_ASSIGN_OR_RETURN(std::string host, job::first_host(nodelist));
  if (host.size() > kMaxHostname) {
    return InvalidArgument("node list '", nodelist, "': no valid first host name");
  }
  return host;
}

Status export_job_secret() {
  AX_ASSIGN_OR_RETURN(std::string secret, job::new_job_secret());
  if (::setenv(job::kJobSecretVar, secret.c_str(), 1) != 0) {
    return IoError(str_cat("setenv ", job::kJobSecretVar), errno);
  }
  return Status::Ok();
}

int coordinator_port(uint32_t job_id, uint32_t step_id) {
  return job::coordinator_port(job_id, step_id);
}

}  // namespace ax::spank
