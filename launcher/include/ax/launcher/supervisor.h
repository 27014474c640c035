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

// Blocks, in the calling thread, the signals supervise() reads through a signalfd (SIGCHLD,
// SIGTERM, SIGINT, SIGUSR1). A thread that does not block them takes them instead: a SIGCHLD
// it takes is lost (its default action ignores it), a SIGTERM ends the launcher without
// forwarding it. Threads inherit the mask of the thread that creates them, so ax-launch calls
// this first, before libraries it loads (hwloc's plugins, NVML, the CUDA driver under them)
// start threads of their own. supervise() also reaps its children at least once a second, so a
// SIGCHLD taken elsewhere all the same delays it by a second instead of forever.
void block_supervised_signals();

}  // namespace ax::launcher
