// ax-train-bench: trains the CPU benchmark models in ax and in plain PyTorch with the same thread
// count, alternating the two over a few rounds, and prints per config the median tokens/s of
// each, the ratio ax/torch and the peak RSS of each. Every run is a child process, so the peak
// RSS is that run's alone. The GPTs bench-a and bench-b (4 layers d256 4 heads / 6 layers d384 6
// heads, seq 256, batch 8, vocab 8192, fp32) run against bench/torch_peer.py, the T5s bench-t5-a
// and bench-t5-b (2+2 layers d256 / 4+4 layers d384, ENC_SL 256, DEC_SL 64, batch 8) against
// bench/torch_t5_peer.py. Method and measured numbers: docs/benchmarks-train.md.
//
//   ax-train-bench [--configs bench-a,bench-b] [--rounds 3] [--warmup 3] [--steps 10]
//                  [--threads 2] [--python /usr/bin/python3] [--peer bench/torch_peer.py]
//                  [--t5-peer bench/torch_t5_peer.py]
//
// `--worker NAME` (internal) runs ax's side once and prints one JSON line. bench/gpu_bench.sh
// runs it on a GPU: `--worker Pile126M --device cuda --batch 64 --max-seconds 30`; a batch that
// does not fit exits with status 4. `--worker NAME --count-params` prints the parameter counts
// without training (a CPU model of batch 1, no optimizer).
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/metrics/metrics.h"
#include "ax/trainer/models/flops.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/optim/optimizer.h"
#include "ax/trainer/train/step_rows.h"
#include "ax/trainer/train/train_loop.h"

namespace {

using Json = nlohmann::json;
using ax::train::Config;

// Above this much CPU used by other processes during a run, the table gets a warning.
constexpr double kBusyCores = 0.2;
// The worker's exit status when the model or its optimizer state does not fit in memory.
constexpr int kExitDoesNotFit = 4;
// The real vocabulary of configs that take theirs from the tokenizer (model.vocab_size 0): the
// GPT-2 tokenizer's 50257 pieces that Pax's GPT126M (Pile126M) trains with, padded to 50304.
constexpr int64_t kGpt2Vocab = 50257;
// The T5 configs' sentinels <extra_id_0..99> at the top of the vocabulary, as
// `ax-data train-tokenizer --extra-ids 100` makes them; EOS and pad (= decoder start) as in
// T5's SentencePiece model.
constexpr uint32_t kSentinels = 100;
constexpr uint32_t kEos = 1;

struct Options {
  std::vector<std::string> configs = {"bench-a", "bench-b"};
  int rounds = 3;
  int warmup = 3;
  int steps = 10;
  int threads = 2;
  std::string python = "/usr/bin/python3";
  std::string peer = AX_TORCH_PEER;
  std::string t5_peer = AX_TORCH_T5_PEER;
  std::string worker;  // set: run ax's side of this config and exit
  // The worker's options beyond the CPU benchmark's (bench/gpu_bench.sh).
  std::string device = "cpu";  // cpu | cuda | cuda:N
  int batch = 0;               // sequences per step; 0 = the config's PERCORE_BATCH_SIZE
  int max_seconds = 0;         // > 0: stop timing after this many seconds (at least 3 steps)
  bool count_params = false;   // print the parameter counts only
};

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "ax-train-bench: %s\n", message.c_str());
  std::exit(1);
}

Config experiment(const std::string& name) {
  auto config = ax::train::make_experiment(name);
  if (!config.ok()) die(config.status().to_string());
  return *config;
}

// ---- ax's side: what ax-train's loop does per step, on random tokens ---------------------------

[[noreturn]] void die_status(const ax::Status& status) {
  std::fprintf(stderr, "ax-train-bench: %s\n", status.to_string().c_str());
  std::exit(status.code() == ax::StatusCode::kResourceExhausted ? kExitDoesNotFit : 1);
}

int64_t vocab_of(const Config& config) {
  return config.model.vocab_size > 0 ? config.model.vocab_size : kGpt2Vocab;
}

bool is_t5(const Config& config) { return config.model.family == ax::train::ModelFamily::kT5; }

// What the train loop's span corruption would be with a tokenizer of `vocab` pieces whose top
// kSentinels are the sentinels (Trainer::setup_span_corruption).
ax::train::SpanCorruptionRows span_rows(const Config& config, int64_t vocab) {
  ax::train::SpanCorruptionRows sc;
  sc.encoder_length = config.train.encoder_seq_len;
  sc.decoder_length = config.train.seq_len;
  sc.pack = config.train.pack_examples;
  sc.seed = config.train.seed;
  sc.sentinel_top = static_cast<uint32_t>(vocab - 1);
  sc.num_sentinels = kSentinels;
  sc.eos = kEos;
  sc.pad = 0;
  ax::StatusOr<ax::data::SpanLengths> lengths = sc.lengths();
  if (!lengths.ok()) die_status(lengths.status());
  return sc;
}

// One step's rows of random tokens, made as the train loop makes them from its loader's
// windows: next-token rows (seq_len + 1 tokens a window), or T5's span corruption of raw_length
// windows (tokens below the sentinels and above EOS, as text is).
ax::train::StepRows bench_rows(const Config& config, int64_t rows, int64_t vocab) {
  std::mt19937_64 rng(config.train.seed);
  if (!is_t5(config)) {
    const int64_t seq = config.train.seq_len;
    std::uniform_int_distribution<uint32_t> token(0, static_cast<uint32_t>(vocab - 1));
    std::vector<uint32_t> windows(static_cast<size_t>(rows * (seq + 1)));
    for (uint32_t& t : windows) t = token(rng);
    return ax::train::lm_rows(windows, rows, seq);
  }
  const ax::train::SpanCorruptionRows sc = span_rows(config, vocab);
  std::uniform_int_distribution<uint32_t> token(kEos + 1,
                                                static_cast<uint32_t>(vocab) - kSentinels - 1);
  std::vector<uint32_t> windows(static_cast<size_t>(rows * sc.raw_length()));
  for (uint32_t& t : windows) t = token(rng);
  std::vector<uint64_t> sample_ids(static_cast<size_t>(rows));
  for (size_t i = 0; i < sample_ids.size(); ++i) sample_ids[i] = i;
  ax::StatusOr<ax::train::StepRows> made = sc.make(windows, sample_ids);
  if (!made.ok()) die_status(made.status());
  return std::move(*made);
}

// FLOPs per token of the model at the worker's lengths (encoder + decoder tokens for T5).
double model_flops_per_token(const Config& config, const ax::train::Model& model) {
  const auto& m = config.model;
  if (is_t5(config)) {
    return model.flops_per_row() /
           static_cast<double>(config.train.encoder_seq_len + config.train.seq_len);
  }
  return ax::train::flops_per_token(model.layout().num_matmul_parameters(), m.num_layers,
                                    m.num_heads, m.head_dim(), config.train.seq_len,
                                    /*causal=*/true);
}

// Prints the parameter counts and FLOPs per token of `config` without training: a CPU model of
// batch 1 (parameters and gradients allocated; the activations of one row are negligible), one
// token for a decoder-only model (its FLOPs are a formula of the config), the config's encoder
// and decoder lengths for T5 (its flops_per_row depends on both), with the real targets a row
// that its span corruption gives (bench/gpu_bench.sh --check compares them with the peer's).
void count_parameters(const Config& config, int64_t vocab) {
  auto backend = ax::train::make_cpu_backend(1);
  ax::train::ModelOptions options;
  options.encoder_seq_len = config.train.encoder_seq_len;
  const int64_t seq = is_t5(config) ? config.train.seq_len : 1;
  auto model = ax::train::Model::create(config.model, vocab, 1, seq, backend.get(), {}, options);
  if (!model.ok()) die_status(model.status());
  const ax::train::ParamLayout& layout = (*model)->layout();
  Json out = {{"params", layout.num_parameters()},
              {"matmul_params", layout.num_matmul_parameters()},
              {"flops_per_token", model_flops_per_token(config, **model)}};
  if (is_t5(config)) {
    out["encoder_seq"] = config.train.encoder_seq_len;
    out["targets_per_row"] =
        span_rows(config, vocab).lengths()->targets * config.train.pack_examples;
  }
  std::printf("%s\n", out.dump().c_str());
}

// forward_backward (forward, cross-entropy, backward over the global batch), the global
// gradient norm, and AdamW with clipping and the schedule: Trainer::step without the data
// loader, which would add reading shards to ax's side only. The rows are made once, before the
// timed steps (the loader's thread makes them in ax-train).
void run_worker(const Options& o) {
  const Config config = experiment(o.worker);
  const int64_t rows =
      o.batch > 0 ? o.batch : static_cast<int64_t>(config.train.percore_batch_size);
  const int64_t seq = config.train.seq_len;
  const int64_t vocab = vocab_of(config);
  if (o.count_params) {
    count_parameters(config, vocab);
    return;
  }
  std::unique_ptr<ax::train::Backend> backend;
  if (o.device == "cpu") {
    backend = ax::train::make_cpu_backend(o.threads);
  } else {
    auto made = ax::train::make_backend(o.device, o.threads, std::cerr);
    if (!made.ok()) die_status(made.status());
    backend = std::move(*made);
  }
  ax::train::ModelOptions options;
  options.encoder_seq_len = config.train.encoder_seq_len;
  options.z_loss = static_cast<float>(config.train.z_loss);
  auto model = ax::train::Model::create(config.model, vocab, rows, seq, backend.get(), {}, options);
  if (!model.ok()) die_status(model.status());
  auto optimizer =
      ax::train::AdamW::create(config.optim, config.train.max_steps, &(*model)->store());
  if (!optimizer.ok()) die_status(optimizer.status());
  const auto t_init = std::chrono::steady_clock::now();
  (*model)->init(config.train.seed);
  backend->synchronize();
  const double init_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t_init).count();
  const ax::train::StepRows step_rows = bench_rows(config, rows, vocab);

  Json times = Json::array(), losses = Json::array();
  double timed = 0;
  for (int step = 1; step <= o.warmup + o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const double loss = ax::train::forward_backward(model->get(), step_rows);
    const double norm = (*optimizer)->grad_norm();
    (*optimizer)->apply(step, norm);
    backend->synchronize();  // the update is asynchronous on a GPU
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    losses.push_back(loss);
    if (step > o.warmup) {
      times.push_back(seconds);
      timed += seconds;
      if (o.max_seconds > 0 && timed > o.max_seconds && times.size() >= 3) break;
    }
  }
  // Tokens a row: T5 counts its encoder and decoder tokens (padding included: both are computed).
  Json out = {{"step_seconds", times},
              {"losses", losses},
              {"params", (*model)->layout().num_parameters()},
              {"backend", backend->name()},
              {"batch", rows},
              {"seq", step_rows.encoder_length + step_rows.length},
              {"encoder_seq", step_rows.encoder_length},
              {"targets_per_row", step_rows.num_targets / step_rows.rows},
              {"peak_flops", backend->peak_flops()},
              {"flops_per_token", model_flops_per_token(config, **model)},
              {"activation_bytes", (*model)->activation_bytes()},
              {"backend_peak_bytes", backend->peak_bytes_in_use()},
              {"init_seconds", init_seconds}};
  std::printf("%s\n", out.dump().c_str());
}

// ---- the driver --------------------------------------------------------------------------------

struct ChildResult {
  Json report;
  double peak_rss_mib = 0;
  double other_cores = 0;  // CPU time of everything else on the machine during the run / wall
};

// Busy CPU seconds of the whole machine so far (/proc/stat: every state but idle and iowait).
double machine_busy_seconds() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  f >> cpu;
  double busy = 0, v = 0;
  for (int field = 0; field < 8 && f >> v; ++field) {
    if (field != 3 && field != 4) busy += v;
  }
  return busy / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * t.tv_usec; }

// Runs argv with extra environment variables, parses the last line of its stdout as JSON and
// takes its peak RSS from wait4.
ChildResult run_child(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& env) {
  const double busy0 = machine_busy_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  int fds[2];
  if (pipe(fds) != 0) die("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) die("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "ax-train-bench: cannot run %s\n", args[0]);
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double others =
      machine_busy_seconds() - busy0 - seconds(usage.ru_utime) - seconds(usage.ru_stime);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    die(ax::str_cat(argv[0], " ", argv.size() > 1 ? argv[1] : "", " failed (status ", status,
                    "); its output:\n", out));
  }
  const size_t start = out.find_last_of('\n', out.size() >= 2 ? out.size() - 2 : 0);
  Json report = Json::parse(out.substr(start == std::string::npos ? 0 : start + 1), nullptr,
                            /*allow_exceptions=*/false);
  if (report.is_discarded()) die(ax::str_cat(argv[0], " printed no JSON line:\n", out));
  // ru_maxrss is in KiB.
  return {report, static_cast<double>(usage.ru_maxrss) / 1024.0, std::max(0.0, others / wall)};
}

struct Side {
  std::vector<double> step_seconds;  // timed steps of every round
  double peak_rss_mib = 0;
  double first_loss = 0, last_loss = 0;
  double other_cores = 0;  // the most any of its runs saw
  int64_t params = 0;
  std::string what;
};

void add_run(Side* side, const ChildResult& r) {
  for (double s : r.report["step_seconds"]) side->step_seconds.push_back(s);
  side->peak_rss_mib = std::max(side->peak_rss_mib, r.peak_rss_mib);
  side->other_cores = std::max(side->other_cores, r.other_cores);
  side->first_loss = r.report["losses"].front();
  side->last_loss = r.report["losses"].back();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return ax::str_cat(one, " ", five, " ", fifteen);
}

// The peer's optimizer and schedule options, the same for both peers.
std::vector<std::string> optimizer_args(const Options& o, const Config& c) {
  const int64_t decay_end = c.optim.decay_steps > 0 ? c.optim.decay_steps : c.train.max_steps;
  auto arg = [](auto v) { return ax::str_cat(v); };
  return {"--warmup",       arg(o.warmup),
          "--steps",        arg(o.steps),
          "--threads",      arg(o.threads),
          "--lr",           arg(c.optim.lr),
          "--warmup-steps", arg(c.optim.warmup_steps),
          "--decay-end",    arg(decay_end),
          "--schedule",     c.optim.schedule,
          "--min-lr-ratio", arg(c.optim.min_lr_ratio),
          "--beta2",        arg(c.optim.beta2),
          "--weight-decay", arg(c.optim.weight_decay),
          "--clip",         arg(c.optim.grad_clip),
          "--seed",         arg(c.train.seed)};
}

// torch_peer.py (GPT) or torch_t5_peer.py (T5) with the config's model, batch and optimizer
// settings.
std::vector<std::string> peer_command(const Options& o, const Config& c) {
  const auto& m = c.model;
  auto arg = [](auto v) { return ax::str_cat(v); };
  const std::string batch = arg(static_cast<int64_t>(c.train.percore_batch_size));
  std::vector<std::string> cmd;
  if (is_t5(c)) {
    const int64_t vocab = vocab_of(c);
    const int64_t targets = span_rows(c, vocab).lengths()->targets * c.train.pack_examples;
    const int64_t decoder_layers = m.num_decoder_layers > 0 ? m.num_decoder_layers : m.num_layers;
    // clang-format off: flag and value pairs
    cmd = {o.python,
           o.t5_peer,
           "--layers",
           arg(m.num_layers),
           "--decoder-layers",
           arg(decoder_layers),
           "--dim",
           arg(m.model_dim),
           "--heads",
           arg(m.num_heads),
           "--d-kv",
           arg(m.head_dim()),
           "--ff",
           arg(m.hidden_dim),
           "--encoder-seq",
           arg(c.train.encoder_seq_len),
           "--seq",
           arg(c.train.seq_len),
           "--targets",
           arg(targets),
           "--batch",
           batch,
           "--vocab",
           arg(vocab),
           "--buckets",
           arg(m.relative_buckets),
           "--max-distance",
           arg(m.relative_max_distance),
           "--norm-eps",
           arg(m.norm_eps),
           "--z-loss",
           arg(c.train.z_loss)};
    // clang-format on
  } else {
    cmd = {o.python,   o.peer,
           "--layers", arg(m.num_layers),
           "--dim",    arg(m.model_dim),
           "--heads",  arg(m.num_heads),
           "--hidden", arg(m.hidden_dim),
           "--seq",    arg(c.train.seq_len),
           "--batch",  batch,
           "--vocab",  arg(m.vocab_size)};
  }
  for (std::string& a : optimizer_args(o, c)) cmd.push_back(std::move(a));
  return cmd;
}

void run_driver(const Options& o) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string threads = std::to_string(o.threads);
  const std::string warmup = std::to_string(o.warmup), steps = std::to_string(o.steps);
  // The peer's best settings on a 2-core AVX-512 machine (shared/reference/cpu-facts.md):
  // OpenMP threads that sleep instead of spinning beside OpenBLAS's, and the AVX-512 sgemm.
  const std::map<std::string, std::string> torch_env = {{"OMP_WAIT_POLICY", "PASSIVE"},
                                                        {"OPENBLAS_NUM_THREADS", threads},
                                                        {"OPENBLAS_CORETYPE", "SkylakeX"},
                                                        {"OMP_NUM_THREADS", threads}};
  // ax's start-up line (the OpenBLAS kernels) is in the backend's name already.
  std::map<std::string, std::string> ax_env;
  if (!ax::log_level_is_set()) ax_env["AX_LOG_LEVEL"] = "warn";
  std::printf(
      "ax-train-bench: %zu configs x %d rounds (ax, then torch), %d warm-up + %d timed "
      "steps per run, %d threads; load average %s\n",
      o.configs.size(), o.rounds, o.warmup, o.steps, o.threads, load_average().c_str());
  std::fflush(stdout);

  std::map<std::string, std::pair<Side, Side>> sides;  // config -> (ax, torch)
  for (int round = 1; round <= o.rounds; ++round) {
    for (const std::string& name : o.configs) {
      const Config c = experiment(name);
      auto& [ax_side, torch_side] = sides[name];
      if (c.model.family != ax::train::ModelFamily::kGpt && !is_t5(c)) {
        die(name + " is neither a GPT nor a T5: the PyTorch peers build only those");
      }
      ChildResult ax_run = run_child(
          {self, "--worker", name, "--threads", threads, "--warmup", warmup, "--steps", steps},
          ax_env);
      ax_side.what = ax_run.report["backend"];
      add_run(&ax_side, ax_run);
      ChildResult torch_run = run_child(peer_command(o, c), torch_env);
      torch_side.what = torch_run.report["torch"];
      add_run(&torch_side, torch_run);
      // The same architecture has the same parameter count: a cheap check that the peer is it.
      if (ax_run.report["params"] != torch_run.report["params"]) {
        die(ax::str_cat(name, ": ax has ", ax_run.report["params"].dump(), " parameters, the peer ",
                        torch_run.report["params"].dump()));
      }
      ax_side.params = ax_run.report["params"];
      std::printf(
          "round %d %s: ax %.0f ms, torch %.0f ms (medians of this round); other "
          "processes used %.2f / %.2f cores\n",
          round, name.c_str(),
          1e3 * median(ax_run.report["step_seconds"].get<std::vector<double>>()),
          1e3 * median(torch_run.report["step_seconds"].get<std::vector<double>>()),
          ax_run.other_cores, torch_run.other_cores);
      std::fflush(stdout);
    }
  }

  std::printf("\nax: %s\ntorch: %s\nload average at the end: %s\n\n",
              sides.begin()->second.first.what.c_str(), sides.begin()->second.second.what.c_str(),
              load_average().c_str());
  std::printf(
      "| config | params | tokens/step | ax ms/step | ax tok/s | torch ms/step | torch tok/s | "
      "ax/torch | ax peak RSS | torch peak RSS | loss ax | loss torch | other load |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  double busiest = 0;
  for (const std::string& name : o.configs) {
    const Config c = experiment(name);
    // Encoder + decoder tokens for T5 (the worker's "seq").
    const double tokens =
        c.train.percore_batch_size * static_cast<double>(c.train.encoder_seq_len + c.train.seq_len);
    const auto& [ax_side, torch_side] = sides[name];
    const double ax_s = median(ax_side.step_seconds), torch_s = median(torch_side.step_seconds);
    std::printf(
        "| %s | %.2fM | %.0f | %.0f | %.0f | %.0f | %.0f | %.2fx | %.0f MiB | %.0f MiB "
        "| %.2f -> %.2f | %.2f -> %.2f | %.2f |\n",
        name.c_str(), 1e-6 * static_cast<double>(ax_side.params), tokens, 1e3 * ax_s, tokens / ax_s,
        1e3 * torch_s, tokens / torch_s, torch_s / ax_s, ax_side.peak_rss_mib,
        torch_side.peak_rss_mib, ax_side.first_loss, ax_side.last_loss, torch_side.first_loss,
        torch_side.last_loss, std::max(ax_side.other_cores, torch_side.other_cores));
    busiest = std::max({busiest, ax_side.other_cores, torch_side.other_cores});
  }
  if (busiest > kBusyCores) {
    std::printf(
        "\nwarning: other processes used up to %.2f cores during a run: the numbers "
        "above are not a clean comparison; rerun on an idle machine\n",
        busiest);
  }
}

Options parse(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Trains the CPU benchmark GPTs and T5s in ax and in PyTorch with the same threads and "
      "prints\n"
      "tokens/s, the ratio ax/torch and peak RSS (docs/benchmarks-train.md).",
      "ax-train-bench"};
  ax::cli::configure(app);
  app.add_option("--configs", o.configs, "experiments to compare (default bench-a,bench-b)")
      ->type_name("a,b")
      ->delimiter(',')
      ->allow_extra_args(false);
  const auto positive = [&](const char* name, int* value, const char* help) {
    app.add_option(name, *value, help)->type_name("N")->check(ax::cli::in_range(1));
  };
  positive("--rounds", &o.rounds, "runs of each side per config (default 3)");
  positive("--warmup", &o.warmup, "untimed steps per run (default 3)");
  positive("--steps", &o.steps, "timed steps per run (default 10)");
  positive("--threads", &o.threads, "threads of each side (default 2)");
  app.add_option("--python", o.python, "the peer's interpreter")->type_name("PATH");
  app.add_option("--peer", o.peer, "the PyTorch peer (bench/torch_peer.py)")->type_name("PATH");
  app.add_option("--t5-peer", o.t5_peer, "the PyTorch T5 peer (bench/torch_t5_peer.py)")
      ->type_name("PATH");
  app.add_option("--worker", o.worker,
                 "(bench/gpu_bench.sh) run ax's side of config NAME once, print one JSON line")
      ->type_name("NAME");
  app.add_option("--device", o.device, "the worker's device (default cpu)")
      ->type_name("D")
      ->check(ax::cli::status_check(ax::train::parse_device));
  positive("--batch", &o.batch, "the worker's sequences per step (default: the config's)");
  positive("--max-seconds", &o.max_seconds, "the worker stops timing after N seconds");
  app.add_flag("--count-params", o.count_params, "the worker prints the parameter counts only");
  if (std::optional<int> exit = ax::cli::parse_or_exit(app, argc, argv)) std::exit(*exit);
  for (const std::string& name : o.configs) experiment(name);  // an unknown name fails here
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.worker.empty()) {
    run_driver(o);
  } else {
    run_worker(o);
  }
  return 0;
}
