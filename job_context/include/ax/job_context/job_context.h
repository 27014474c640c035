// Where a process sits in the job (docs/architecture.md: "Exactly one part reads SLURM_*/PMIX_*
// variables"). Sources, first match wins:
//   1. AX_* (set by ax-launch or spank_ax.so; docs/launch.md has the table): AX_RANK,
//      AX_WORLD_SIZE, AX_LOCAL_RANK, AX_LOCAL_WORLD_SIZE, AX_NODE_RANK, AX_NNODES, AX_ICI_MESH,
//      AX_DCN_MESH, AX_MESH_SPEC, AX_DEVICE, AX_COORDINATOR;
//   2. PMIx (PMIX_RANK and PMIX_NAMESPACE present: `srun --mpi=pmix` without the plugin): the
//      rank is PMIX_RANK, the rest comes from the step's SLURM_* variables as in 3 (a PMIx
//      launcher other than srun must export AX_* instead);
//   3. SLURM_* of a step (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//      SLURM_STEP_NUM_NODES / SLURM_NNODES, SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE,
//      SLURM_STEP_NODELIST / SLURM_JOB_NODELIST, SLURM_JOB_ID, SLURM_STEP_ID). Only a task of
//      a step counts (SLURM_PROCID and SLURM_STEP_ID set): a batch script or an salloc shell is
//      a single process;
//   4. a single process (rank 0 of 1).
// AX_JOB_SECRET, the key of the TCP store's handshake (docs/threat-model.md), is read whatever the
// source. Everything else receives these plain values. Malformed variables are InvalidArgument
// naming the variable and what it expects (never repeating the secret).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "ax/common/status.h"

namespace ax::job {

enum class ContextSource { kAx, kPmix, kSlurm, kSingle };
const char* context_source_name(ContextSource source);  // "ax", "pmix", "slurm", "single"

struct JobContext {
  ContextSource source = ContextSource::kSingle;
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  int local_world = 1;
  int node_rank = 0;
  int num_nodes = 1;
  // "data,fsdp,tensor" or "pipeline,data,fsdp,seq,tensor" shapes when the launcher or plugin
  // derived a mesh (AX_ICI_MESH / AX_DCN_MESH), else empty: the trainer then uses its config's
  // mesh.
  std::string ici_mesh;
  std::string dcn_mesh;
  // AX_MESH_SPEC: the spec those shapes were derived from ("auto", "auto:pp=2",
  // "ici=1,8,1;dcn=2,1,1"), as the user gave it to ax-launch or the plugin; empty when none was
  // given with them. An `auto` spec leaves the split to the trainer's plan (docs/plan.md).
  std::string mesh_spec;
  // AX_DEVICE: "cpu", a CUDA ordinal ("3"), or empty when nobody chose (the trainer decides).
  std::string device;
  // host:port of the TCP store. From AX_COORDINATOR, else derived under Slurm from the first
  // host of the step's node list and a port from the job and step ids (the rule spank_ax.so
  // uses: 20000 + (job_id * 64 + step_id % 64) % 12000), else empty (single process).
  std::string coordinator;
  std::string job_id;  // SLURM_JOB_ID or empty
  // SLURM_RESTART_COUNT: how many times Slurm requeued this job (preemption, `scontrol requeue`
  // by the job script after a stop at a checkpoint); 0 on the first run and outside Slurm.
  int restart_count = 0;
  std::string hostname;
  // A PMIx server started this process (PMIX_RANK and PMIX_NAMESPACE set), whatever the source:
  // under `srun --mpi=pmix --ax-mesh=...` the source is kAx but the PMIx store still works.
  bool pmix = false;
  // AX_JOB_SECRET: what the launch path made for this job step (ax-launch, spank_ax.so, the job
  // scripts), empty when none was given. Never log it or write it to a file.
  std::string secret;
};

// The variable through which every launch path hands the job secret to its ranks.
inline constexpr char kJobSecretVar[] = "AX_JOB_SECRET";
// A fresh job secret: 32 bytes from getrandom(2) as 64 lowercase hexadecimal digits.
StatusOr<std::string> new_job_secret();
// OK for 32 to 128 hexadecimal digits; the error names AX_JOB_SECRET but not its value.
Status check_job_secret(const std::string& value);

// The environment as a lookup (tests pass a map); nullopt = unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

StatusOr<JobContext> job_context(const EnvLookup& env);
// One line for logs: "rank 3/8 (local 3/4, node 0/2) from ax, coordinator n1:20064, device cpu"
// (", restart 2" is appended when the job was requeued).
std::string describe(const JobContext& ctx);

// The first host of a Slurm hostlist expression: "n[1-4,7]" → "n1", "gpu-a,gpu-b" → "gpu-a",
// "rack1-[003-005]" → "rack1-003". InvalidArgument for a malformed list.
StatusOr<std::string> first_host(const std::string& nodelist);

// The coordinator's port for a Slurm step: 20000 + (job_id * 64 + step_id mod 64) mod 12000,
// below Linux's ephemeral range (32768-60999) and different for consecutive steps of one job.
// spank_ax.so and the job context both use it, so every rank of a step agrees.
int coordinator_port(uint32_t job_id, uint32_t step_id);

}  // namespace ax::job
