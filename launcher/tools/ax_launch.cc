// ax-launch: one per node. Discovers the node, derives the mesh, starts one child per local rank
// with the AX_* environment and binding, and supervises them (docs/launch.md).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/job_context/job_context.h"
#include "ax/launcher/launch_options.h"
#include "ax/launcher/rank_plan.h"
#include "ax/launcher/supervisor.h"
#include "ax/topology/topology.h"

namespace {

constexpr int kUsageError = 2;

// A port the kernel just handed out on the loopback: free now; the TCP store binds it soon after.
ax::StatusOr<int> free_port() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ax::IoError("socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int rc = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  if (rc == 0) rc = getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int err = errno;
  close(fd);
  if (rc != 0) return ax::IoError("choosing a coordinator port", err);
  return static_cast<int>(ntohs(addr.sin_port));
}

std::vector<int> available_cpus() {
  std::vector<int> out;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

// The job secret every child inherits (docs/threat-model.md): the one in our environment (the
// job scripts and srun with spank_ax.so export one that every node's ax-launch shares), else,
// on a single node, a fresh one. Never on a command line, never logged.
ax::Status provide_job_secret(int nnodes) {
  const char* given = std::getenv(ax::job::kJobSecretVar);
  if (given != nullptr && *given != '\0') return ax::job::check_job_secret(given);
  if (nnodes > 1) {
    return ax::InvalidArgument(
        "--nnodes ", nnodes, ": every node's ax-launch needs the same ", ax::job::kJobSecretVar,
        " in its environment (the sbatch/ job scripts and srun with ",
        "spank_ax.so export one; docs/launch.md says how to make one by hand)");
  }
  ax::StatusOr<std::string> secret = ax::job::new_job_secret();
  if (!secret.ok()) return secret.status();
  if (setenv(ax::job::kJobSecretVar, secret->c_str(), 1) != 0) {
    return ax::IoError("setenv", errno);
  }
  return ax::Status::Ok();
}

int fail(const ax::Status& s, int code) {
  std::cerr << "ax-launch: " << s.message() << "\n";
  return code;
}

int run(int argc, char** argv) {
  // Before anything starts a thread (topology discovery loads hwloc's plugins and NVML): every
  // thread then blocks the signals the supervisor reads from its signalfd, so none of them takes
  // a rank's SIGCHLD (the launcher would wait for an exited rank forever) or a SIGTERM (it would
  // end the launcher without stopping the ranks).
  ax::launcher::block_supervised_signals();
  ax::StatusOr<ax::launcher::LaunchOptions> parsed =
      ax::launcher::parse_launch_options(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) return fail(parsed.status(), kUsageError);
  const ax::launcher::LaunchOptions& o = *parsed;
  if (!o.help.empty()) {
    std::cout << o.help;
    return 0;
  }
  if (!o.coordinator_port_of.empty()) {
    std::cout << ax::job::coordinator_port(o.coordinator_port_of[0], o.coordinator_port_of[1])
              << "\n";
    return 0;
  }
  if (ax::Status st = provide_job_secret(o.nnodes); !st.ok()) {
    return fail(st, st.code() == ax::StatusCode::kInvalidArgument ? kUsageError : 1);
  }
  ax::StatusOr<ax::topo::Topology> node = ax::topo::discover();
  if (!node.ok()) return fail(node.status().with_context("topology"), 1);

  ax::launcher::PlanInput in;
  in.nproc = o.nproc;
  in.mesh_spec = o.mesh;
  in.mesh_flag = ax::str_cat("--mesh ", o.mesh);
  in.nnodes = o.nnodes;
  in.node_rank = o.node_rank;
  in.coordinator = o.coordinator;
  if (in.coordinator.empty()) {
    ax::StatusOr<int> port = free_port();
    if (!port.ok()) return fail(port.status(), 1);
    in.coordinator = ax::str_cat("127.0.0.1:", *port);
  }
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) in.cuda_visible_devices = cvd;
  in.available_cpus = available_cpus();
  const char* hca = std::getenv("NCCL_IB_HCA");
  in.keep_nccl_ib_hca = hca != nullptr && *hca != '\0';
  ax::StatusOr<ax::launcher::NodePlan> plan = ax::launcher::plan_node(*node, in);
  if (!plan.ok()) {
    bool usage = plan.status().code() == ax::StatusCode::kInvalidArgument;
    return fail(plan.status(), usage ? kUsageError : 1);
  }

  ax::launcher::SuperviseOptions so;
  so.command = o.command;
  so.run_dir = o.run_dir;
  so.host = hostname();
  so.max_restarts = o.max_restarts;
  so.grace_seconds = o.grace_seconds;
  AX_LOG(kInfo, "launch") << plan->ranks.size() << " ranks on " << so.host << " (node "
                          << o.node_rank << "/" << o.nnodes << "), ici "
                          << plan->mesh.ici.full_string() << " dcn " << plan->mesh.dcn.full_string()
                          << " (pipeline,data,fsdp,seq,tensor)"
                          << ", coordinator " << in.coordinator << ", logs in " << o.run_dir
                          << "/logs";
  ax::StatusOr<int> status = ax::launcher::supervise(plan->ranks, so);
  if (!status.ok()) return fail(status.status(), 1);
  return *status;
}

}  // namespace

int main(int argc, char** argv) { return run(argc, argv); }
