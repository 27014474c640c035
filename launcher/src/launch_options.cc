#include "ax/launcher/launch_options.h"

#include <algorithm>
#include <cstdint>
#include <optional>

#include "ax/common/cli.h"
#include "ax/common/strings.h"
#include "ax/topology/mesh.h"

namespace ax::launcher {

namespace {

constexpr const char* kDescription =
    "ax-launch [OPTIONS] -- COMMAND [ARGS...] starts one COMMAND per local rank (one per GPU, or\n"
    "--nproc CPU ranks) with the AX_* environment (docs/launch.md), binds each to its GPU's\n"
    "cores, and supervises them: the first child to fail ends the others and the launcher exits\n"
    "with its status.";

constexpr const char* kFooter =
    "Every child gets AX_JOB_SECRET (docs/threat-model.md): the launcher's own, else a fresh one;\n"
    "with --nnodes above 1 every node's launcher must be given the same one in its environment.";

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

void add_options(CLI::App& app, LaunchOptions* o, std::string* nproc) {
  app.add_option("--nproc", *nproc, "ranks on this node (auto: one per GPU, 1 without GPUs)")
      ->type_name("auto|N")
      ->check(cli::status_check([](const std::string& v) -> Status {
        if (v == "auto") return Status::Ok();
        std::optional<int64_t> n = parse_int64(v);
        if (n && *n >= 1 && *n <= 4096) return Status::Ok();
        return InvalidArgument("expected auto or an integer in [1, 4096], got '", v, "'");
      }));
  app.add_option("--mesh", o->mesh,
                 "mesh spec: auto, auto:tp=N,sp=N,pp=N, ici=d,f,t;dcn=d,f,t or five numbers "
                 "p,d,f,s,t per vector (default auto)")
      ->type_name("SPEC")
      ->check(cli::status_check(topo::parse_mesh_spec));
  app.add_option("--max-restarts", o->max_restarts,
                 "restart the whole set up to N times after a failure (default 0)")
      ->type_name("N")
      ->check(cli::in_range(0, 1000000));
  app.add_option("--run-dir", o->run_dir, "logs/rank_<r>.log and error.json go here (default .)")
      ->type_name("DIR");
  app.add_option("--nnodes", o->nnodes, "nodes in the job (default 1)")
      ->type_name("N")
      ->envname("AX_NNODES")
      ->check(cli::in_range(1, 1 << 20));
  app.add_option("--node-rank", o->node_rank, "this node's index (default 0)")
      ->type_name("R")
      ->envname("AX_NODE_RANK")
      ->check(cli::in_range(0, (1 << 20) - 1));
  app.add_option("--coordinator", o->coordinator,
                 "rank 0's store address (one node: 127.0.0.1:<free port>)")
      ->type_name("H:P")
      ->envname("AX_COORDINATOR")
      ->check(cli::status_check(check_coordinator));
  app.add_option("--grace-seconds", o->grace_seconds,
                 "SIGTERM to SIGKILL delay when tearing down (default 10)")
      ->type_name("S")
      ->check(cli::in_range(0, 86400));
  app.add_option("--coordinator-port", o->coordinator_port_of,
                 "print the coordinator port of step STEP_ID of Slurm job JOB_ID (the rule of\n"
                 "spank_ax.so and the job scripts) and exit")
      ->type_name("ID")
      ->expected(2)
      ->allow_extra_args(false)
      ->check(cli::in_range(0, UINT32_MAX));
}

}  // namespace

StatusOr<LaunchOptions> parse_launch_options(const std::vector<std::string>& args) {
  LaunchOptions o;
  std::string nproc = "auto";
  CLI::App app{kDescription, "ax-launch"};
  cli::configure(app);
  app.footer(kFooter);
  add_options(app, &o, &nproc);
  // Everything after the first "--" is the command, never options of ours.
  auto dashes = std::find(args.begin(), args.end(), "--");
  cli::Outcome parsed = cli::parse(app, std::vector<std::string>(args.begin(), dashes));
  if (parsed.kind == cli::Outcome::Kind::kHelp) {
    o.help = parsed.text;
    return o;
  }
  if (parsed.kind == cli::Outcome::Kind::kUsageError) {
    return InvalidArgument(parsed.text, dashes == args.end() ? " (the command goes after --)" : "");
  }
  if (!o.coordinator_port_of.empty()) {
    if (o.coordinator_port_of.size() == 2) return o;
    return InvalidArgument("--coordinator-port needs JOB_ID and STEP_ID");
  }
  if (dashes != args.end()) o.command.assign(dashes + 1, args.end());
  if (o.command.empty()) return InvalidArgument("no command: write it after --");
  if (o.command[0].empty()) return InvalidArgument("the command after -- is empty");
  if (nproc != "auto") o.nproc = static_cast<int>(*parse_int64(nproc));
  if (o.node_rank >= o.nnodes) {
    return InvalidArgument("--node-rank (or AX_NODE_RANK) ", o.node_rank,
                           " is not below --nnodes (or AX_NNODES) ", o.nnodes);
  }
  if (o.run_dir.empty()) return InvalidArgument("--run-dir is empty");
  if (o.coordinator.empty() && o.nnodes > 1) {
    return InvalidArgument("--coordinator HOST:PORT (or AX_COORDINATOR) is needed with ", o.nnodes,
                           " nodes");
  }
  return o;
}

}  // namespace ax::launcher
