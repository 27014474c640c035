// ax-store-check: checks the bootstrap path of a job. Every rank takes its JobContext, opens a
// store, publishes "hostname:rank", syncs and reads every other rank's value back; rank 0 prints
// one line per rank and "ok N ranks". With --store pmix it also starts a TCP store on rank 0
// (port 0), publishes its address through PMIx, connects every rank to it and runs a barrier
// over TCP: PMIx discovers the coordinator, and hands out the store's secret when the launch
// gave none (as ax-train does under srun --mpi=pmix).
//
//   srun --mpi=pmix -N 2 -n 4 ax-store-check --store pmix
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/job_context/job_context.h"
#include "ax/trainer/comm/store.h"

namespace {

using ax::Status;
using ax::StatusOr;
using ax::train::comm::Millis;
using ax::train::comm::Store;

struct Args {
  std::string store;  // empty = default
  std::string dir;
  Millis timeout{60000};
};

void add_options(CLI::App& app, Args* args) {
  ax::cli::one_of(app.add_option("--store", args->store,
                                 "pmix when started by srun --mpi=pmix, else tcp at the job's\n"
                                 "coordinator (AX_COORDINATOR, or derived from the Slurm step)"),
                  {"tcp", "file", "pmix"});
  app.add_option("--dir", args->dir,
                 "the file store's directory (shared by every rank; use a fresh one per job)")
      ->type_name("DIR");
  app.add_option_function<double>(
         "--timeout",
         [args](double seconds) { args->timeout = Millis(static_cast<int64_t>(seconds * 1000)); },
         "seconds for connecting, each sync and each lookup (default 60)")
      ->type_name("SECONDS")
      ->check(ax::cli::in_range(0.001, 86400));
}

StatusOr<std::shared_ptr<ax::train::comm::TcpStore>> open_tcp(const std::string& host_port,
                                                              const ax::job::JobContext& ctx,
                                                              Millis timeout) {
  ax::train::comm::TcpStoreOptions options;
  options.host_port = host_port;
  options.is_server = ctx.rank == 0;
  options.rank = ctx.rank;
  options.world = ctx.world;
  options.connect_timeout = timeout;
  AX_ASSIGN_OR_RETURN(options.secret, ax::train::comm::job_store_secret(ctx, timeout));
  return ax::train::comm::make_tcp_store(options);
}

StatusOr<std::shared_ptr<Store>> open_store(const std::string& kind, const Args& args,
                                            const ax::job::JobContext& ctx) {
  if (kind == "pmix") return ax::train::comm::make_pmix_store();
  if (kind == "file") {
    if (args.dir.empty()) return ax::InvalidArgument("--store file needs --dir DIR");
    return ax::train::comm::make_file_store(args.dir, ctx.rank, ctx.world);
  }
  std::string coordinator = ctx.coordinator;
  if (coordinator.empty()) {
    if (ctx.world > 1) {
      return ax::InvalidArgument("no coordinator for the TCP store: set AX_COORDINATOR=host:port ",
                                 "or run under srun");
    }
    coordinator = "127.0.0.1:0";
  }
  AX_ASSIGN_OR_RETURN(auto tcp, open_tcp(coordinator, ctx, args.timeout));
  return std::shared_ptr<Store>(tcp);
}

// PMIx finds the coordinator: rank 0 hosts a TCP store on a free port and publishes its address.
Status pmix_bootstraps_tcp(Store& pmix, const ax::job::JobContext& ctx, Millis timeout) {
  const std::string key = "ax-store-check/coordinator";
  std::shared_ptr<ax::train::comm::TcpStore> tcp;
  if (ctx.rank == 0) {
    AX_ASSIGN_OR_RETURN(tcp, open_tcp(ctx.hostname + ":0", ctx, timeout));
    AX_RETURN_IF_ERROR(pmix.set(key, tcp->bound_address()));
  }
  AX_RETURN_IF_ERROR(pmix.sync(timeout));
  AX_ASSIGN_OR_RETURN(std::string address, pmix.get(key, timeout));
  if (ctx.rank != 0) {
    AX_ASSIGN_OR_RETURN(tcp, open_tcp(address, ctx, timeout));
  }
  AX_RETURN_IF_ERROR(
      ax::train::comm::store_barrier(*tcp, "ax-store-check/tcp", ctx.rank, ctx.world, timeout));
  if (ctx.rank == 0) std::cout << "tcp store at " << address << " found through pmix: ok\n";
  return Status::Ok();
}

Status run(const Args& args, const ax::job::JobContext& ctx) {
  std::string kind = !args.store.empty() ? args.store : ctx.pmix ? "pmix" : "tcp";
  AX_ASSIGN_OR_RETURN(std::shared_ptr<Store> store, open_store(kind, args, ctx));
  AX_RETURN_IF_ERROR(store->set(ax::str_cat("ax-store-check/", ctx.rank),
                                ax::str_cat(ctx.hostname, ":", ctx.rank)));
  AX_RETURN_IF_ERROR(store->sync(args.timeout));
  std::vector<std::string> lines;
  for (int r = 0; r < ctx.world; ++r) {
    AX_ASSIGN_OR_RETURN(std::string value,
                        store->get(ax::str_cat("ax-store-check/", r), args.timeout));
    size_t colon = value.rfind(':');
    if (colon == 0 || colon == std::string::npos || value.substr(colon + 1) != std::to_string(r)) {
      return ax::DataLoss("rank ", ctx.rank, " read '", value, "' for rank ", r,
                          " (expected '<hostname>:", r, "') from ", store->describe());
    }
    lines.push_back(ax::str_cat("rank ", r, " ", value.substr(0, colon)));
  }
  if (kind == "pmix") AX_RETURN_IF_ERROR(pmix_bootstraps_tcp(*store, ctx, args.timeout));
  // Nobody leaves before everyone has read: rank 0 may host the store.
  AX_RETURN_IF_ERROR(store->sync(args.timeout));
  if (ctx.rank == 0) {
    for (const std::string& line : lines) std::cout << line << "\n";
    std::cout << "ok " << ctx.world << " ranks (" << store->describe() << ")\n";
  }
  return Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Every rank of the job publishes hostname:rank through the store, syncs, and checks every\n"
      "other rank's value; rank 0 prints one line per rank and 'ok N ranks'.",
      "ax-store-check"};
  ax::cli::configure(app);
  app.footer("exit status: 0 every rank checked, 1 the check failed, 2 bad command line or job.");
  Args args;
  add_options(app, &args);
  if (std::optional<int> exit = ax::cli::parse_or_exit(app, argc, argv)) return *exit;
  StatusOr<ax::job::JobContext> ctx = ax::job::job_context(ax::job::process_env());
  if (!ctx.ok()) {
    std::cerr << "ax-store-check: job context: " << ctx.status().message() << "\n";
    return 2;
  }
  ax::set_log_rank(ctx->rank);
  Status st = run(args, *ctx);
  if (!st.ok()) {
    std::cerr << "ax-store-check: rank " << ctx->rank << " on " << ctx->hostname << ": "
              << st.to_string() << "\n";
    return 1;
  }
  return 0;
}
