// The ax-launch command line (docs/architecture.md "Command line"), parsed strictly: every
// malformed option is an InvalidArgument naming it, so the tool prints one line and exits 2.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ax/common/status.h"

namespace ax::launcher {

struct LaunchOptions {
  int nproc = 0;              // 0 = auto: one rank per GPU, or 1 on a node without GPUs
  std::string mesh = "auto";  // a mesh spec (ax/topology/mesh.h)
  int max_restarts = 0;
  std::string run_dir = ".";
  int nnodes = 1;
  int node_rank = 0;
  std::string coordinator;  // host:port; empty = 127.0.0.1:<free port> on a single node
  double grace_seconds = 10;
  std::vector<std::string> command;  // what each child runs (argv, looked up in PATH)
  std::string help;                  // set: --help asked for this text
  // --coordinator-port JOB_ID STEP_ID: print coordinator_port(JOB_ID, STEP_ID) and exit.
  std::vector<uint32_t> coordinator_port_of;
};

// argv without the program name. Node rank, node count and coordinator default to AX_NODE_RANK,
// AX_NNODES and AX_COORDINATOR when those are set (the command line wins).
StatusOr<LaunchOptions> parse_launch_options(const std::vector<std::string>& args);

}  // namespace ax::launcher
