// What one task of a step gets: the AX_* contract of docs/launch.md (the same as ax-launch's, built
// with ax::launcher::plan_node), NCCL_IB_HCA, the cores to bind it to and the NUMA node its memory
// is preferred on. Pure computation, so tests run it on topology fixtures. And the job secret
// that srun exports for the whole step.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ax/common/status.h"
#include "ax/topology/topology.h"
#include "config.h"

namespace ax::spank {

struct TaskInput {
  int nnodes = 1;          // S_JOB_NNODES
  int node_id = 0;         // S_JOB_NODEID
  int tasks_per_node = 1;  // S_JOB_LOCAL_TASK_COUNT
  int local_id = 0;        // S_TASK_ID
  int global_id = 0;       // S_TASK_GLOBAL_ID (only checked against the placement)
  std::string mesh_spec;
  std::string coordinator;  // host:port
  // CUDA_VISIBLE_DEVICES in the task's environment, when set.
  std::optional<std::string> cuda_visible_devices;
  bool user_nccl_ib_hca = false;    // NCCL_IB_HCA already set by the user: kept
  std::vector<int> available_cpus;  // cores the task may run on
};

struct TaskEnv {
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<int> cpus;  // empty = no binding
  int mem_node = -1;      // the GPU's NUMA node (bind=numa|cores); -1 = memory not bound
  std::string note;       // why it is not bound, or the rank differs from Slurm's task id
};

// A mesh that does not fit is InvalidArgument "--ax-mesh=<spec>: <why and what to use instead>".
StatusOr<TaskEnv> task_env(const topo::Topology& node, const Config& config, const TaskInput& in);

// The mesh check srun can make before any task starts, from the node description every
// slurmstepd of the step would use (plugstack `topology=FILE`): possible when the step's tasks per
// node equal that node's GPU count, or the node has none (CPU ranks), since the tasks then plan
// over exactly that node. Ok when the mesh fits or this cannot be decided here (slurmstepd
// decides), else the same InvalidArgument as task_env.
Status check_step_mesh(const topo::Topology& node, const std::string& spec, int nnodes,
                       int total_tasks);

// srun's part, in its local context before the step starts: a fresh AX_JOB_SECRET in srun's own
// environment, which srun copies into every task of the step (spank_setenv works only in
// slurmstepd). It replaces any value srun was started with: each step gets its own.
Status export_job_secret();

// The first host of a Slurm host list: "n[1-4,7],m2" -> "n1", "gpu[007-009]" -> "gpu007".
// Rejects anything but hostname characters, brackets, commas and ranges.
StatusOr<std::string> first_host(const std::string& nodelist);

// The coordinator's port for a step: 20000 + (job_id * 64 + step_id mod 64) mod 12000, below
// Linux's ephemeral range (32768-60999) and different for consecutive steps of one job.
int coordinator_port(uint32_t job_id, uint32_t step_id);

}  // namespace ax::spank
