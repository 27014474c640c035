// spank_ax.so: the slurm_spank_* callbacks, dispatching on spank_context(). Client contexts
// (srun, sbatch, salloc) register and check --ax-mesh, and srun makes the step's job secret in
// local_user_init; slurmstepd discovers the node in user_init and sets every task's AX_*
// environment and binding in task_init (docs/spank-plugin.md).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "ax/topology/numa_binding.h"
#include "ax/topology/topology.h"
#include "config.h"
#include "env.h"
#include "options.h"

#define AX_SPANK_EXPORT __attribute__((visibility("default")))

// SPANK_PLUGIN's namespace-scope consts would have internal linkage in C++: define them by hand.
extern "C" {
AX_SPANK_EXPORT extern const char plugin_name[] = "ax";
AX_SPANK_EXPORT extern const char plugin_type[] = "spank";
AX_SPANK_EXPORT extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
AX_SPANK_EXPORT extern const unsigned int spank_plugin_version = 1;
}

namespace ax::spank {
namespace {

constexpr uint32_t kFirstSpecialStep = 0xFFFFFFF0;  // batch, extern, interactive steps

// What slurmstepd keeps between user_init and task_init (one step per process).
struct StepState {
  Config config;
  std::string spec;
  std::optional<topo::Topology> node;
  int nnodes = 0, node_id = 0, tasks_per_node = 0;
  std::string coordinator;
  // An error of user_init, raised again by every task_init: slurmstepd does not report a
  // user_init failure to srun, a task_init failure it does (pyxis does the same).
  Status user_init_error;
};

StepState& state() {
  static StepState s;
  return s;
}

std::vector<std::string> args_of(int ac, char** av) {
  std::vector<std::string> out;
  for (int i = 0; i < ac; ++i) out.emplace_back(av[i] ? av[i] : "");
  return out;
}

template <typename T>
StatusOr<T> item(spank_t sp, spank_item_t what, const char* name) {
  T value{};
  if (spank_get_item(sp, what, &value) != ESPANK_SUCCESS) {
    return Unavailable("cannot read ", name);
  }
  return value;
}

std::optional<std::string> getenv_of(spank_t sp, const char* name) {
  std::vector<char> buf(kMaxArgLength + 1);
  if (spank_getenv(sp, name, buf.data(), static_cast<int>(buf.size())) != ESPANK_SUCCESS) {
    return std::nullopt;
  }
  return std::string(buf.data());
}

Status init(spank_t sp, int ac, char** av) {
  StatusOr<Config> config = parse_config(args_of(ac, av));
  if (!config.ok()) return config.status();
  state().config = std::move(config).value();
  spank_context_t ctx = spank_context();
  if (ctx == S_CTX_LOCAL || ctx == S_CTX_ALLOCATOR || ctx == S_CTX_REMOTE) {
    if (register_options(sp) != ESPANK_SUCCESS) return Internal("cannot register --ax-mesh");
  }
  return Status::Ok();
}

Status user_init(spank_t sp) {
  StepState& s = state();
  if (mesh_option()) {
    s.spec = *mesh_option();
  } else if (s.config.default_spec) {
    s.spec = *s.config.default_spec;
  } else {
    return Status::Ok();
  }
  StatusOr<uint32_t> step = item<uint32_t>(sp, S_JOB_STEPID, "S_JOB_STEPID");
  if (!step.ok()) return step.status();
  if (*step >= kFirstSpecialStep) {  // the batch script is not a rank (S_JOB_NNODES is 0 there)
    s.spec.clear();
    return Status::Ok();
  }
  StatusOr<uint32_t> job = item<uint32_t>(sp, S_JOB_ID, "S_JOB_ID");
  StatusOr<uint32_t> nnodes = item<uint32_t>(sp, S_JOB_NNODES, "S_JOB_NNODES");
  StatusOr<uint32_t> node_id = item<uint32_t>(sp, S_JOB_NODEID, "S_JOB_NODEID");
  StatusOr<uint32_t> tasks = item<uint32_t>(sp, S_JOB_LOCAL_TASK_COUNT, "S_JOB_LOCAL_TASK_COUNT");
  for (const Status& st : {job.status(), nnodes.status(), node_id.status(), tasks.status()}) {
    if (!st.ok()) return st;
  }
  s.nnodes = static_cast<int>(*nnodes);
  s.node_id = static_cast<int>(*node_id);
  s.tasks_per_node = static_cast<int>(*tasks);

  std::optional<std::string> nodelist = getenv_of(sp, "SLURM_STEP_NODELIST");
  if (!nodelist) nodelist = getenv_of(sp, "SLURM_JOB_NODELIST");
  if (!nodelist) return Unavailable("neither SLURM_STEP_NODELIST nor SLURM_JOB_NODELIST is set");
  StatusOr<std::string> host = first_host(*nodelist);
  if (!host.ok()) return host.status();
  s.coordinator = *host + ":" + std::to_string(coordinator_port(*job, *step));

  StatusOr<topo::Topology> node = s.config.topology_file.empty()
                                      ? topo::discover()
                                      : topo::load_topology(s.config.topology_file);
  if (!node.ok()) return node.status().with_context("topology: ");
  s.node = std::move(node).value();
  return Status::Ok();
}

// srun, after the allocation and before any task starts: the step's job secret, then, with a
// topology file configured, a mesh that cannot fit the step is refused here, in one line
// (check_step_mesh says when).
Status local_user_init(spank_t sp) {
  Status secret = export_job_secret();
  if (!secret.ok()) return secret.with_context("local_user_init");
  StepState& s = state();
  std::optional<std::string> spec = mesh_option() ? mesh_option() : s.config.default_spec;
  if (!spec || s.config.topology_file.empty()) return Status::Ok();
  StatusOr<uint32_t> nnodes = item<uint32_t>(sp, S_JOB_NNODES, "S_JOB_NNODES");
  StatusOr<uint32_t> tasks = item<uint32_t>(sp, S_JOB_TOTAL_TASK_COUNT, "S_JOB_TOTAL_TASK_COUNT");
  if (!nnodes.ok() || !tasks.ok()) return Status::Ok();  // slurmstepd checks
  StatusOr<topo::Topology> node = topo::load_topology(s.config.topology_file);
  if (!node.ok()) return Status::Ok();  // slurmstepd reports it
  return check_step_mesh(*node, *spec, static_cast<int>(*nnodes), static_cast<int>(*tasks));
}

std::vector<int> available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

// The exit status of a task the plugin refused (the task never ran): 2, as ax-launch's for a bad
// command line or a mesh that does not fit.
constexpr int kRefusedTaskExit = 2;

// Ends a task whose step cannot be set up (user_init's error, or a mesh that does not fit): every
// task of the node computed the same error, so only local task 0 reports it, once per node, and
// every task ends here, before exec. Returning the error from task_init instead would add
// slurmstepd's own two lines for every task ("task_init() failed with rc=-1", "Failed to invoke
// spank plugin stack"). This runs in the task's process, forked from slurmstepd for it: _exit
// leaves slurmstepd's state alone, as the exec it replaces would.
[[noreturn]] void refuse_task(int local_id, const Status& why) {
  if (local_id == 0) slurm_error("ax: %s", why.message().c_str());
  _exit(kRefusedTaskExit);
}

Status task_init(spank_t sp) {
  StepState& s = state();
  if (s.user_init_error.ok() && (s.spec.empty() || !s.node)) return Status::Ok();
  StatusOr<int> local = item<int>(sp, S_TASK_ID, "S_TASK_ID");
  StatusOr<uint32_t> global = item<uint32_t>(sp, S_TASK_GLOBAL_ID, "S_TASK_GLOBAL_ID");
  if (!local.ok()) return local.status();
  if (!global.ok()) return global.status();
  if (!s.user_init_error.ok()) refuse_task(*local, s.user_init_error);
  TaskInput in;
  in.nnodes = s.nnodes;
  in.node_id = s.node_id;
  in.tasks_per_node = s.tasks_per_node;
  in.local_id = *local;
  in.global_id = static_cast<int>(*global);
  in.mesh_spec = s.spec;
  in.coordinator = s.coordinator;
  in.cuda_visible_devices = getenv_of(sp, "CUDA_VISIBLE_DEVICES");
  in.user_nccl_ib_hca = getenv_of(sp, "NCCL_IB_HCA").has_value();
  in.available_cpus = available_cpus();
  StatusOr<TaskEnv> env = task_env(*s.node, s.config, in);
  if (!env.ok()) refuse_task(*local, env.status());
  for (const auto& [name, value] : env->env) {
    if (spank_setenv(sp, name.c_str(), value.c_str(), 1) != ESPANK_SUCCESS) {
      return Internal("cannot set ", name);
    }
  }
  if (!env->note.empty()) slurm_verbose("ax: task %d: %s", *local, env->note.c_str());
  if (!env->cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : env->cpus) {
      if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
    }
    if (sched_setaffinity(0, sizeof(set), &set) != 0) {
      return IoError("sched_setaffinity", errno);
    }
  }
  // Memory binding degrades instead of failing the task: a node the task may not allocate on
  // (fixture of another machine, cpuset cgroup) or a refused policy only leaves it unbound.
  if (env->mem_node >= 0) {
    std::vector<int> allowed = topo::allowed_memory_nodes();
    if (std::find(allowed.begin(), allowed.end(), env->mem_node) == allowed.end()) {
      slurm_verbose(
          "ax: task %d: NUMA node %d is not one the task may allocate on; memory not "
          "bound",
          *local, env->mem_node);
    } else if (int err = topo::prefer_memory_node(env->mem_node); err != 0) {
      slurm_info("ax: task %d: set_mempolicy(NUMA node %d): %s; memory not bound", *local,
                 env->mem_node, strerror(err));
    }
  }
  return Status::Ok();
}

// Runs one callback body: no exception crosses the C ABI; errors are logged as "ax: <what>: ..."
// ("ax: ..." when `what` is empty) and returned as -1. slurmstepd treats only a NEGATIVE return as
// a failure (ESPANK_ERROR is a positive error code: returning it would let the tasks start without
// their AX_* environment).
template <typename F>
int guarded(const char* what, F&& body) {
  try {
    Status st = body();
    if (st.ok()) return ESPANK_SUCCESS;
    slurm_error("ax: %s%s%s", what, *what ? ": " : "", st.message().c_str());
  } catch (const std::exception& e) {
    slurm_error("ax: %s%s%s", what, *what ? ": " : "", e.what());
  } catch (...) {
    slurm_error("ax: %s%sunexpected error", what, *what ? ": " : "");
  }
  return -1;
}

}  // namespace
}  // namespace ax::spank

extern "C" {

AX_SPANK_EXPORT int slurm_spank_init(spank_t sp, int ac, char** av) {
  return ax::spank::guarded("init", [&] { return ax::spank::init(sp, ac, av); });
}

// srun, after its options, before it launches the step: every step gets a fresh secret, with or
// without --ax-mesh (a plain `srun ax-train` needs one too); then a mesh that cannot fit is
// refused ("ax: --ax-mesh=<spec>: <why>": the message names the option itself).
AX_SPANK_EXPORT int slurm_spank_local_user_init(spank_t sp, int ac, char** av) {
  if (spank_context() != S_CTX_LOCAL) return ESPANK_SUCCESS;
  return ax::spank::guarded("", [&] { return ax::spank::local_user_init(sp); });
}

AX_SPANK_EXPORT int slurm_spank_user_init(spank_t sp, int ac, char** av) {
  if (spank_context() != S_CTX_REMOTE) return ESPANK_SUCCESS;
  // Failures are kept and raised by task_init, where srun hears of them.
  return ax::spank::guarded("user_init", [&] {
    ax::spank::state().user_init_error = ax::spank::user_init(sp);
    return ax::Status::Ok();
  });
}

AX_SPANK_EXPORT int slurm_spank_task_init(spank_t sp, int ac, char** av) {
  if (spank_context() != S_CTX_REMOTE) return ESPANK_SUCCESS;
  return ax::spank::guarded("task_init", [&] { return ax::spank::task_init(sp); });
}

}  // extern "C"
