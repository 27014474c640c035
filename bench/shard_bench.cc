// Sharded training on CPU ranks: the step time of each mesh layout against one process, the share
// of it spent in collectives, and the bytes each rank hands to collectives per step against the
// theoretical volume (data: the gradients once; FSDP: 3 × the parameters; tensor: 4 activation
// all-reduces per layer). Ranks are forked processes talking Gloo over the TCP store, each with
// one CPU thread; the 1-process peer gets as many threads as the layout has ranks, so both sides
// use the same cores. Results: docs/benchmarks-sharding.md.
//
//   ax-shard-bench [--experiment bench-a] [--steps 6] [--global-batch 8] [--seq 128]
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ax/common/cli.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/optim/optimizer.h"
#include "ax/trainer/train/train_loop.h"

namespace ax::train {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Forwards to a communicator and adds up the wall time spent in it.
class TimedComm : public comm::Communicator {
 public:
  TimedComm(comm::Communicator* inner, double* seconds) : inner_(inner), seconds_(seconds) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return inner_->name(); }
  Status all_reduce(Tensor buf, comm::ReduceOp op) override {
    return timed([&] { return inner_->all_reduce(buf, op); });
  }
  Status reduce_scatter(Tensor out, Tensor in) override {
    return timed([&] { return inner_->reduce_scatter(out, in); });
  }
  Status all_gather(Tensor out, Tensor in) override {
    return timed([&] { return inner_->all_gather(out, in); });
  }
  Status broadcast(Tensor buf, int root) override {
    return timed([&] { return inner_->broadcast(buf, root); });
  }
  Status barrier() override {
    return timed([&] { return inner_->barrier(); });
  }
  Status exchange(const std::vector<comm::P2POp>& ops) override {
    return timed([&] { return inner_->exchange(ops); });
  }
  int64_t bytes_moved() const override { return inner_->bytes_moved(); }

 private:
  template <typename F>
  Status timed(F f) {
    const auto t0 = Clock::now();
    Status s = f();
    *seconds_ += seconds_since(t0);
    return s;
  }
  comm::Communicator* inner_;
  double* seconds_;
};

struct Layout {
  int data, fsdp, tensor;
  int world() const { return data * fsdp * tensor; }
};

struct Options {
  std::string experiment = "bench-a";
  int steps = 6;
  int64_t global_batch = 8;
  int64_t seq = 128;
};

// What rank 0 reports back through a pipe.
struct Report {
  double step_s = 0;          // mean over the timed steps (the first is a warm-up)
  double comm_s = 0;          // per step
  double bytes_per_step = 0;  // handed to collectives by this rank
  double params = 0;          // logical parameters
  double final_loss = 0;
  int ok = 0;
};

int free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

Report run_rank(const Config& config, const Layout& layout, int rank, int threads,
                const std::string& coordinator, const std::string& secret, const Options& o,
                bool prefetch) {
  Report rep;
  auto be = make_cpu_backend(threads);
  comm::MeshCoords coords = comm::MeshCoords::of(rank, layout.data, layout.fsdp, layout.tensor);
  std::shared_ptr<comm::Store> store;
  comm::MeshGroups groups;
  double comm_s = 0;
  std::unique_ptr<TimedComm> tensor, fsdp, data, replica_comm;
  ModelParallel par;
  if (layout.world() > 1) {
    comm::TcpStoreOptions so;
    so.host_port = coordinator;
    so.is_server = rank == 0;
    so.rank = rank;
    so.world = layout.world();
    so.secret = secret;
    auto s = comm::make_tcp_store(so);
    if (!s.ok()) return rep;
    store = *s;
    comm::CommOptions co;
    co.timeout = comm::Millis(60000);
    co.coordinator = coordinator;
    auto g = comm::make_mesh_groups(store, coords, comm::CommBackend::kGloo, co);
    if (!g.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, g.status().to_string().c_str());
      return rep;
    }
    groups = std::move(*g);
    tensor = std::make_unique<TimedComm>(groups.tensor.get(), &comm_s);
    fsdp = std::make_unique<TimedComm>(groups.fsdp.get(), &comm_s);
    data = std::make_unique<TimedComm>(groups.data.get(), &comm_s);
    replica_comm = std::make_unique<TimedComm>(groups.replica.get(), &comm_s);
    par = ModelParallel{.tensor_rank = coords.t,
                        .tensor_size = layout.tensor,
                        .fsdp_rank = coords.f,
                        .fsdp_size = layout.fsdp,
                        .tensor = tensor.get(),
                        .fsdp = fsdp.get(),
                        .data = data.get(),
                        .fsdp_prefetch = prefetch ? groups.fsdp_prefetch.get() : nullptr};
  }
  const int64_t replicas = layout.data * layout.fsdp;
  const int64_t rows = o.global_batch / replicas;
  auto model = Model::create(config.model, config.model.vocab_size, rows, o.seq, be.get(), par);
  if (!model.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, model.status().to_string().c_str());
    return rep;
  }
  (*model)->init(config.train.seed);
  auto opt = AdamW::create(config.optim, o.steps, &(*model)->store());
  // The global batch of every step from one generator; each replica takes its rows.
  std::mt19937_64 rng(7);
  const int64_t replica = coords.d * layout.fsdp + coords.f;
  std::vector<uint32_t> all(static_cast<size_t>(o.global_batch * (o.seq + 1)));
  double timed_s = 0;
  double comm_start = 0;
  int64_t bytes_start = 0;
  auto bytes = [&] {
    int64_t b = 0;
    for (auto* c : {groups.tensor.get(), groups.fsdp.get(), groups.data.get(), groups.replica.get(),
                    groups.fsdp_prefetch.get()}) {
      if (c != nullptr) b += c->bytes_moved();
    }
    return b;
  };
  for (int step = 1; step <= o.steps; ++step) {
    for (uint32_t& t : all) t = static_cast<uint32_t>(rng() % config.model.vocab_size);
    std::span<const uint32_t> mine(all.data() + replica * rows * (o.seq + 1),
                                   static_cast<size_t>(rows * (o.seq + 1)));
    if (step == 2) {
      comm_start = comm_s;
      bytes_start = bytes();
    }
    const auto t0 = Clock::now();
    double loss = forward_backward(model->get(), mine, rows, o.global_batch);
    if (replica_comm) {
      float v = static_cast<float>(loss);
      Tensor t(&v, DType::kF32, {1});
      (void)replica_comm->all_reduce(t, comm::ReduceOp::kSum);
      loss = v;
    }
    const double norm = (*opt)->grad_norm();
    (*opt)->apply(step, norm);
    if (step >= 2) timed_s += seconds_since(t0);
    rep.final_loss = loss;
  }
  const int timed = o.steps - 1;
  rep.step_s = timed_s / timed;
  rep.comm_s = (comm_s - comm_start) / timed;
  rep.bytes_per_step = static_cast<double>(bytes() - bytes_start) / timed;
  rep.params = static_cast<double>((*model)->layout().num_parameters()) * layout.tensor;
  rep.ok = 1;
  return rep;
}

Report run_layout(const Config& config, const Layout& layout, int threads_single, const Options& o,
                  bool prefetch = true) {
  const std::string coordinator = "127.0.0.1:" + std::to_string(free_port());
  StatusOr<std::string> secret = job::new_job_secret();
  if (!secret.ok()) return {};
  int fds[2];
  if (::pipe(fds) != 0) return {};
  std::vector<pid_t> pids;
  for (int rank = 0; rank < layout.world(); ++rank) {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(fds[0]);
      const int threads = layout.world() == 1 ? threads_single : 1;
      Report r = run_rank(config, layout, rank, threads, coordinator, *secret, o, prefetch);
      if (rank == 0) (void)!::write(fds[1], &r, sizeof r);
      ::_exit(r.ok ? 0 : 1);
    }
    pids.push_back(pid);
  }
  ::close(fds[1]);
  Report r;
  if (::read(fds[0], &r, sizeof r) != sizeof r) r.ok = 0;
  ::close(fds[0]);
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) r.ok = 0;
  }
  return r;
}

// Bytes a rank hands to collectives per step in theory (payload definitions of communicator.h).
double theoretical_bytes(const Config& c, const Layout& l, double params, const Options& o) {
  const double local_params = params / l.tensor;  // this rank's tensor-parallel part
  double b = 0;
  if (l.data > 1) b += local_params / l.fsdp * 4;  // gradient all-reduce of the shard
  if (l.fsdp > 1) b += 3 * local_params * 4;       // gather fwd + gather bwd + reduce-scatter
  if (l.tensor > 1) {
    const double act = static_cast<double>(o.global_batch / (l.data * l.fsdp)) *
                       static_cast<double>(o.seq) * static_cast<double>(c.model.model_dim) * 4;
    // 2 per layer forward + 2 backward, the embedding (fwd) and the LM head's input gradient.
    b += act * (4.0 * static_cast<double>(c.model.num_layers) + 2);
  }
  return b;
}

int main_impl(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Sharded training on CPU ranks: each mesh layout's step time, collective share and\n"
      "bytes against one process; docs/benchmarks-sharding.md.",
      "ax-shard-bench"};
  cli::configure(app);
  app.add_option("--experiment", o.experiment, "the model (default bench-a)")->type_name("E");
  app.add_option("--steps", o.steps, "steps per run, the first not timed (default 6)")
      ->type_name("N")
      ->check(cli::in_range(2, 1e6));
  app.add_option("--global-batch", o.global_batch, "rows per step (default 8)")
      ->type_name("B")
      ->check(cli::in_range(1));
  app.add_option("--seq", o.seq, "tokens per row (default 128)")
      ->type_name("T")
      ->check(cli::in_range(1));
  if (std::optional<int> exit = cli::parse_or_exit(app, argc, argv)) return *exit;
  auto config = make_experiment(o.experiment);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().to_string().c_str());
    return 2;
  }
  if (config->model.vocab_size <= 0) config->model.vocab_size = 8192;
  config->model.max_seq_len = std::max<int64_t>(config->model.max_seq_len, o.seq);
  std::printf(
      "ax-shard-bench: %s (%d layers, width %lld), global batch %lld x %lld tokens, "
      "%d steps (first not timed), CPU ranks with 1 thread each\n",
      o.experiment.c_str(), static_cast<int>(config->model.num_layers),
      static_cast<long long>(config->model.model_dim), static_cast<long long>(o.global_batch),
      static_cast<long long>(o.seq), o.steps);
  std::printf("%-22s %9s %9s %8s %7s %12s %12s %7s %10s %13s\n", "layout", "step ms", "1-proc ms",
              "ratio", "comm %", "MB/step", "theory MB", "ratio", "loss", "no-prefetch ms");
  const std::vector<Layout> layouts = {{2, 1, 1}, {1, 2, 1}, {1, 1, 2}, {4, 1, 1}, {1, 4, 1},
                                       {2, 2, 1}, {2, 1, 2}, {1, 2, 2}, {1, 1, 4}};
  int failures = 0;
  std::vector<std::pair<int, Report>> single;  // by thread count
  for (const Layout& l : layouts) {
    const int threads = l.world();
    Report* one = nullptr;
    for (auto& [t, r] : single) {
      if (t == threads) one = &r;
    }
    if (one == nullptr) {
      single.emplace_back(threads, run_layout(*config, {1, 1, 1}, threads, o));
      one = &single.back().second;
    }
    Report r = run_layout(*config, l, 1, o);
    char name[64];
    std::snprintf(name, sizeof name, "data=%d fsdp=%d tp=%d", l.data, l.fsdp, l.tensor);
    if (!r.ok || !one->ok) {
      std::printf("%-22s failed\n", name);
      ++failures;
      continue;
    }
    const double theory = theoretical_bytes(*config, l, r.params, o);
    // FSDP layouts again without the prefetch thread: every gather waits.
    std::string no_prefetch = "-";
    if (l.fsdp > 1) {
      Report n = run_layout(*config, l, 1, o, /*prefetch=*/false);
      no_prefetch = n.ok ? std::to_string(n.step_s * 1e3).substr(0, 6) : "failed";
      failures += n.ok ? 0 : 1;
    }
    std::printf("%-22s %9.1f %9.1f %8.2f %6.1f%% %12.2f %12.2f %7.2f %10.5f %13s\n", name,
                r.step_s * 1e3, one->step_s * 1e3, one->step_s / r.step_s,
                100 * r.comm_s / r.step_s, r.bytes_per_step / 1e6, theory / 1e6,
                r.bytes_per_step / theory, r.final_loss, no_prefetch.c_str());
  }
  std::printf(
      "ratio = 1-process step time (with as many threads as the layout has ranks) / "
      "layout step time; MB/step = bytes rank 0 handed to collectives per step; comm %% = "
      "main-thread time inside collectives (the FSDP prefetch thread's gathers overlap "
      "compute and are not counted)\n");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ax::train

int main(int argc, char** argv) { return ax::train::main_impl(argc, argv); }
