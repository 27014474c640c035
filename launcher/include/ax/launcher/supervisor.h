// Starts one child per local rank (own process group, its environment, CPU and memory binding),
// forwards their output line by line ("[r3] ..." on the console, raw to run-dir/logs/rank_3.log),
// forwards SIGTERM/SIGINT/SIGUSR1, tears the set down when one child fails, and restarts it when
// allowed.
#pragma once

#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/launcher/rank_plan.h"

namespace ax::launcher {

struct SuperviseOptions {
  std::vector<std::string> command;
  std::string run_dir;
  std::string host;  // named in failure messages and error.json
  int max_restarts = 0;
  double grace_seconds = 10;
};

// Exit status for the launcher: 0 when a set finished with every child 0; 75 when a forwarded
// signal made every child exit 75 (or 0); else the first failed child's status (128+signal when
// killed). A Status error means the launcher itself could not run (run-dir, fork, pipes).
StatusOr<int> supervise(const std::vector<RankPlan>& ranks, const SuperviseOptions& options);

// NUMA memory binding, also used by spank_ax.so (docs/launch.md "Memory binding"); raw system
// calls, no libnuma. The nodes this process may allocate on (get_mempolicy with
// MPOL_F_MEMS_ALLOWED: the machine's nodes as narrowed by a cpuset cgroup); empty when the
// kernel has no NUMA policy support.
std::vector<int> allowed_memory_nodes();
// Makes `node` the preferred node of this process's new allocations (set_mempolicy with
// MPOL_PREFERRED: other nodes when it is full). Only the system call, so it is safe between fork
// and exec. Returns 0 or an errno value.
int prefer_memory_node(int node);

}  // namespace ax::launcher
