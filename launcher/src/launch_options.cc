#include "ax/launcher/launch_options.h"

#include <cstdlib>
#include <optional>

#include "ax/common/strings.h"
#include "ax/topology/mesh.h"

namespace ax::launcher {

const char kLaunchUsage[] =
    R"(usage: ax-launch [options] -- COMMAND [ARGS...]
Starts one COMMAND per local rank (one per GPU, or --nproc CPU ranks) with the AX_* environment
(docs/launch.md), binds each to its GPU's cores, and supervises them: the first child to fail
ends the others and the launcher exits with its status.
  --nproc auto|N        ranks on this node (auto: one per GPU, 1 without GPUs)
  --mesh SPEC           mesh spec: auto, auto:tp=N, ici=d,f,t;dcn=d,f,t (default auto)
  --max-restarts N      restart the whole set up to N times after a failure (default 0)
  --run-dir DIR         logs/rank_<r>.log and error.json go here (default .)
  --nnodes N            nodes in the job (default $AX_NNODES or 1)
  --node-rank R         this node's index (default $AX_NODE_RANK or 0)
  --coordinator H:P     rank 0's store address (default $AX_COORDINATOR; one node: 127.0.0.1:<free>)
  --grace-seconds S     SIGTERM to SIGKILL delay when tearing down (default 10)
Every child gets AX_JOB_SECRET (docs/threat-model.md): the launcher's own, else a fresh one;
with --nnodes above 1 every node's launcher must be given the same one in its environment.
)";

namespace {

StatusOr<int64_t> parse_count(const std::string& flag, const std::string& value, int64_t min,
                              int64_t max) {
  std::optional<int64_t> v = parse_int64(value);
  if (!v || *v < min || *v > max) {
    return InvalidArgument(flag, " wants an integer in [", min, ", ", max, "], got '", value, "'");
  }
  return *v;
}

std::optional<std::string> env_value(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Status check_coordinator(const std::string& c) {
  size_t colon = c.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return InvalidArgument("coordinator '", c, "' is not HOST:PORT");
  }
  std::optional<int64_t> port = parse_int64(c.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) {
    return InvalidArgument("coordinator '", c, "' has no valid port (1-65535)");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<LaunchOptions> parse_launch_options(const std::vector<std::string>& args) {
  LaunchOptions o;
  std::optional<std::string> nnodes = env_value("AX_NNODES");
  std::optional<std::string> node_rank = env_value("AX_NODE_RANK");
  if (std::optional<std::string> c = env_value("AX_COORDINATOR")) o.coordinator = *c;
  std::optional<std::string> nproc;
  std::optional<std::string> restarts;
  std::optional<std::string> grace;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h" || a == "--help") {
      o.help = true;
      return o;
    }
    std::string flag = a;
    std::optional<std::string> value;
    if (size_t eq = a.find('='); starts_with(a, "--") && eq != std::string::npos) {
      flag = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    std::string* target = nullptr;
    std::optional<std::string>* opt_target = nullptr;
    if (flag == "--nproc") {
      opt_target = &nproc;
    } else if (flag == "--mesh") {
      target = &o.mesh;
    } else if (flag == "--max-restarts") {
      opt_target = &restarts;
    } else if (flag == "--run-dir") {
      target = &o.run_dir;
    } else if (flag == "--nnodes") {
      opt_target = &nnodes;
    } else if (flag == "--node-rank") {
      opt_target = &node_rank;
    } else if (flag == "--coordinator") {
      target = &o.coordinator;
    } else if (flag == "--grace-seconds") {
      opt_target = &grace;
    } else {
      return InvalidArgument("unknown option '", a, "' (the command goes after --; see --help)");
    }
    if (!value) {
      if (i + 1 >= args.size()) return InvalidArgument(flag, " needs a value");
      value = args[++i];
    }
    if (target != nullptr) *target = *value;
    if (opt_target != nullptr) *opt_target = *value;
  }
  o.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.command.empty()) return InvalidArgument("no command: write it after --");
  if (o.command[0].empty()) return InvalidArgument("the command after -- is empty");

  if (nproc && *nproc != "auto") {
    StatusOr<int64_t> n = parse_count("--nproc", *nproc, 1, 4096);
    if (!n.ok()) return n.status();
    o.nproc = static_cast<int>(*n);
  }
  if (restarts) {
    StatusOr<int64_t> n = parse_count("--max-restarts", *restarts, 0, 1000000);
    if (!n.ok()) return n.status();
    o.max_restarts = static_cast<int>(*n);
  }
  if (nnodes) {
    StatusOr<int64_t> n = parse_count("--nnodes (or AX_NNODES)", *nnodes, 1, 1 << 20);
    if (!n.ok()) return n.status();
    o.nnodes = static_cast<int>(*n);
  }
  if (node_rank) {
    StatusOr<int64_t> r = parse_count("--node-rank (or AX_NODE_RANK)", *node_rank, 0, o.nnodes - 1);
    if (!r.ok()) return r.status();
    o.node_rank = static_cast<int>(*r);
  }
  if (grace) {
    std::optional<double> g = parse_double(*grace);
    if (!g || !(*g >= 0 && *g <= 86400)) {
      return InvalidArgument("--grace-seconds wants seconds in [0, 86400], got '", *grace, "'");
    }
    o.grace_seconds = *g;
  }
  StatusOr<topo::MeshSpec> spec = topo::parse_mesh_spec(o.mesh);
  if (!spec.ok()) return spec.status().with_context("--mesh");
  if (o.run_dir.empty()) return InvalidArgument("--run-dir is empty");
  if (!o.coordinator.empty()) {
    if (Status s = check_coordinator(o.coordinator); !s.ok()) return s;
  } else if (o.nnodes > 1) {
    return InvalidArgument("--coordinator HOST:PORT (or AX_COORDINATOR) is needed with ", o.nnodes,
                           " nodes");
  }
  return o;
}

}  // namespace ax::launcher
