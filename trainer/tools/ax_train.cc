// ax-train: trains GPT, Llama-style and T5 models (resuming from the run directory's newest
// checkpoint, or starting from --init-from), evaluates a run on a task (eval), samples text from
// it (sample) and exports it to Hugging Face's format (export).
// Exit status: 0 done, 1 the run failed (the message says why), 2 the command line or config is
// wrong, 75 stopped by SIGTERM/SIGINT/SIGUSR1 after writing a checkpoint (requeue to resume).
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/env.h"
#include "ax/common/strings.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/topology/topology.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/plan/plan.h"
#include "ax/trainer/train/eval_command.h"
#include "ax/trainer/train/export_command.h"
#include "ax/trainer/train/pipeline_trace.h"
#include "ax/trainer/train/sampler.h"
#include "ax/trainer/train/train_loop.h"

namespace ax::train {
namespace {

constexpr const char* kDescription =
    "Trains the named experiment on token shards made by `ax-data tokenize`. The config is the\n"
    "experiment, then every --set in order (keys: --help-config; the Pax names\n"
    "PERCORE_BATCH_SIZE, NUM_MICROBATCHES, ICI_MESH_SHAPE, DCN_MESH_SHAPE, MAX_STEPS and\n"
    "FPROP_DTYPE work too), then --data, --tokenizer and --max-steps. The resolved config is\n"
    "printed and saved as RUN_DIR/config.json. A run directory that holds a checkpoint is resumed\n"
    "from its newest one (bit-exact on CPU); otherwise --init-from starts from an ax checkpoint's\n"
    "or a Hugging Face directory's weights (docs/fine-tuning.md). Validation: "
    "data.validation_dir,\n"
    "or a sibling `val` or `validation` of the --data directory. `ax-train sample --help` and\n"
    "`ax-train export --help` describe the subcommands.\n";

constexpr const char* kDevice =
    "auto (CUDA device 0 when built and present, else the CPU), cpu,\n"
    "cpu-bf16 (the CPU in the CUDA backend's bf16 dtype plan), cuda,\n"
    "cuda:N; train.precision=float32|bfloat16 picks the dtype\n"
    "(train.allow_tf32=true: float32 GEMMs on TF32 tensor cores)";

constexpr const char* kFooter =
    "exit status: 0 done, 1 the run failed, 2 bad command line or config, 75 stopped by\n"
    "SIGTERM, SIGINT or SIGUSR1 after a checkpoint (run the same command to resume).\n";

int failed(const Status& status) {
  std::string msg = status.message();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::cerr << "ax-train: " << msg << "\n";
  return kExitFailed;
}

CLI::Option* add_device(CLI::App& app, std::string* device) {
  return app.add_option("--device", *device, kDevice)
      ->type_name("D")
      ->check(cli::status_check(parse_device));
}

void add_eval_options(CLI::App& eval, EvalCommandOptions* o) {
  eval.add_option("--run-dir", o->run_dir, "the run to evaluate")->type_name("DIR")->required();
  eval.add_option("--step", o->step, "the checkpoint's step (default: the newest)")
      ->type_name("N")
      ->check(cli::in_range(0));
  eval.add_option("--task", o->task,
                  "mnli (accuracy), squad (exact match, F1) or lambada "
                  "(last-word accuracy, perplexity; decoder-only models)")
      ->type_name("NAME")
      ->required()
      ->check(CLI::IsMember({"mnli", "squad", "lambada"}));
  eval.add_option("--data", o->data, "the task's examples: the jsonl of `ax-data convert-task`")
      ->type_name("FILE")
      ->required();
  eval.add_option("--max-examples", o->max_examples, "the first N examples (default: all)")
      ->type_name("N")
      ->check(cli::in_range(0));
  eval.add_option("--batch", o->batch, "examples decoded together (default 16)")
      ->type_name("B")
      ->check(cli::in_range(1));
  eval.add_option("--max-new-tokens", o->max_new_tokens,
                  "new tokens per answer at most (default: mnli 8, squad 32)")
      ->type_name("N")
      ->check(cli::in_range(1));
  eval.add_option("--predictions", o->predictions,
                  "where the predictions go (default RUN_DIR/predictions/TASK_step_N.jsonl)")
      ->type_name("PATH");
  eval.add_option("--tokenizer", o->tokenizer,
                  "a tokenizer to use instead of the run's data.tokenizer (a .model, a\n"
                  "tokenizer.json or a directory holding one)")
      ->type_name("FILE|DIR");
  add_device(eval, &o->device);
}

int run_eval(const EvalCommandOptions& options) {
  StatusOr<TaskEvalResult> result = run_eval_command(options, std::cout);
  if (!result.ok()) return failed(result.status());
  return kExitOk;
}

void add_sample_options(CLI::App& sample, SampleOptions* o) {
  sample.add_option("--run-dir", o->run_dir, "the run to sample from (its newest checkpoint)")
      ->type_name("DIR")
      ->required();
  sample
      .add_option("--prompt", o->prompts,
                  "the start of a text (default: a new document); t5: its encoder's input. "
                  "Repeatable: the prompts are decoded together, one answer each")
      ->type_name("TEXT")
      ->allow_extra_args(false);
  sample
      .add_option("--tokens", o->tokens,
                  "new tokens at most (default 128; stops at end of document)")
      ->type_name("N")
      ->check(cli::in_range(0));
  sample.add_option("--temperature", o->temperature, "0 = greedy (default 0.8)")
      ->type_name("T")
      ->check(cli::in_range(0));
  sample
      .add_option("--top-k", o->top_k,
                  "sample among the K most likely tokens, 0 = all (default 40)")
      ->type_name("K")
      ->check(cli::in_range(0));
  sample.add_option("--seed", o->seed, "sampling seed (default 1)")->type_name("S");
  sample.add_flag("--no-cache{false}", o->use_cache,
                  "run the whole model again for every new token (no key/value cache), to compare");
  sample
      .add_option("--tokenizer", o->tokenizer,
                  "a tokenizer to use instead of the run's data.tokenizer (a .model, a\n"
                  "tokenizer.json or a directory holding one)")
      ->type_name("FILE|DIR");
  add_device(sample, &o->device);
}

struct ExportArgs {
  std::string run_dir, output;
  std::optional<int64_t> step;
};

void add_export_options(CLI::App& exporter, ExportArgs* a) {
  exporter.add_option("--run-dir", a->run_dir, "the run whose checkpoint to export")
      ->type_name("DIR")
      ->required();
  exporter.add_option("--step", a->step, "the checkpoint's step (default: the newest)")
      ->type_name("N")
      ->check(cli::in_range(0));
  exporter
      .add_option("--output", a->output,
                  "the Hugging Face directory to write (config.json, model.safetensors and\n"
                  "the run's tokenizer: tokenizer.json, or tokenizer.model / spiece.model)")
      ->type_name("DIR")
      ->required();
}

int run_export(const ExportArgs& a) {
  StatusOr<ExportResult> done = export_run_with_tokenizer(a.run_dir, a.step, a.output);
  if (!done.ok()) return failed(done.status());
  std::cout << "exported step " << done->step << " of " << a.run_dir << " to " << a.output << "\n";
  if (!done->tokenizer.empty()) std::cout << "tokenizer: " << done->tokenizer << "\n";
  if (!done->note.empty()) std::cout << "tokenizer: " << done->note << "\n";
  return kExitOk;
}

struct PlanArgs {
  std::string experiment, gpu, ici, dcn, tokenizer, topology, cpu, format = "table";
  std::vector<std::string> overrides;
  int nodes = 0, gpus_per_node = 0;
  int64_t vocab = 0;
  size_t rows = 20;
};

void add_plan_options(CLI::App& plan, PlanArgs* a) {
  plan.add_option("--experiment", a->experiment, "a named config (--list-experiments)")
      ->type_name("NAME")
      ->required();
  plan.add_option("--set", a->overrides, "a config override; repeatable")
      ->type_name("key=value")
      ->allow_extra_args(false);
  plan.add_option("--nodes", a->nodes, "nodes of the cluster")
      ->type_name("N")
      ->required()
      ->check(cli::in_range(1, 65536));
  plan.add_option("--gpus-per-node", a->gpus_per_node,
                  "GPUs of each node (one NVLink domain); required without --topology")
      ->type_name("G")
      ->check(cli::in_range(1, 72));
  plan.add_option("--gpu", a->gpu,
                  "H100-80GB, H200 or A100-80GB (or the driver's name of one, as nvidia-smi\n"
                  "prints it); required without --topology")
      ->type_name("NAME");
  plan.add_option("--topology", a->topology,
                  "a node's hwloc XML (lstopo --of xml) or ax-topo JSON: its GPUs (count and\n"
                  "kind), NVLink and NICs describe every node")
      ->type_name("FILE");
  plan.add_option("--cpu", a->cpu,
                  "plan CPU ranks of this machine instead of GPUs (one node, --gpus-per-node\n"
                  "ranks), with rates measured here: gemm=GFLOP/s,attention=GFLOP/s,memory=GB/s,\n"
                  "link=GB/s,latency=us (bench/plan_cpu_bench.sh)")
      ->type_name("RATES");
  plan.add_option("--vocab", a->vocab,
                  "the tokenizer's size when model.vocab_size is 0 (default 50257, the Pax GPT\n"
                  "recipes' SentencePiece model)")
      ->type_name("V")
      ->check(cli::in_range(1));
  plan.add_option("--tokenizer", a->tokenizer,
                  "the tokenizer (SentencePiece model or tokenizer.json) whose size sizes the\n"
                  "vocabulary when model.vocab_size is 0, instead of --vocab")
      ->type_name("FILE");
  plan.add_option("--format", a->format,
                  "table (default), or env: KEY=VALUE lines for the job scripts (AX_PLAN_ICI,\n"
                  "AX_PLAN_DCN, AX_PLAN_TRAIN_ARGS, AX_PLAN_LINE; docs/plan.md)")
      ->type_name("table|env")
      ->check(CLI::IsMember({"table", "env"}));
  plan.add_option("--ici", a->ici,
                  "plan this ICI_MESH_SHAPE only (data,fsdp,tensor, or the five axes\n"
                  "pipeline,data,fsdp,seq,tensor; default with --dcn: 1,-1,1)")
      ->type_name("D,F,T|P,D,F,S,T");
  plan.add_option("--dcn", a->dcn,
                  "plan this DCN_MESH_SHAPE only (default with --ici: -1,1,1); exit 1 with\n"
                  "the smallest change that fits when it does not")
      ->type_name("D,F,T|P,D,F,S,T");
  plan.add_option("--top", a->rows, "rows of the table (default 20)")
      ->type_name("K")
      ->check(cli::in_range(1));
}

// The job's own choices among the plan's (docs/plan.md "The job scripts"): NUM_MICROBATCHES
// and train.recompute when an override gives them.
void fixed_choices(const std::vector<std::string>& overrides, const Config& config,
                   plan::PlanRequest* request) {
  for (const std::string& o : overrides) {
    const std::string key = o.substr(0, o.find('='));
    if (key == "NUM_MICROBATCHES" || key == "train.num_microbatches") {
      request->microbatches = config.train.num_microbatches;
    }
    if (key == "train.recompute") request->recompute = config.train.recompute == "layer";
  }
}

// The options a job adds to train as `c` says, less those the job fixed itself.
std::string plan_train_args(const plan::PlanRequest& request, const plan::Candidate& c) {
  std::string args;
  if (!request.microbatches) args += str_cat("--set NUM_MICROBATCHES=", c.microbatches);
  if (!request.recompute && c.recompute) args += " --set train.recompute=layer";
  return std::string(str_trim(args));
}

// For --format=env: what the job scripts read (no quoting: each value is the rest of its line).
void print_env(const plan::Layout& lay, const std::string& train_args, const std::string& line) {
  std::cout << "AX_PLAN_ICI=" << lay.ici_string() << "\nAX_PLAN_DCN=" << lay.dcn_string()
            << "\nAX_PLAN_TRAIN_ARGS=" << train_args << "\nAX_PLAN_LINE=" << line << "\n";
}

// An explicit layout that fits in none of its micro-batch and recomputation choices: its least
// memory, and the fastest layout that fits with the same tensor size (else any).
int explicit_layout_misfit(const plan::PlanRequest& request, const plan::Plan& mine, bool env) {
  const plan::Layout& lay = *request.only;
  const plan::Cluster& cl = request.cluster;
  std::string line =
      str_cat("ICI_MESH_SHAPE=[", lay.ici_string(), "] DCN_MESH_SHAPE=[", lay.dcn_string(),
              "] does not fit on ", cl.nodes, " x ", cl.gpus_per_node, " ", cl.gpu.name);
  if (!mine.candidates.empty()) {
    const plan::Candidate* least = &mine.candidates.front();
    for (const plan::Candidate& c : mine.candidates) {
      if (c.memory.total() < least->memory.total()) least = &c;
    }
    line += str_cat(": it needs ", human_bytes(least->memory.total()), " per GPU at least (",
                    least->microbatches, " micro-batches, recompute ",
                    least->recompute ? "layer" : "none", "), a GPU has ",
                    human_bytes(cl.gpu.memory_bytes));
  } else {
    line += ": no micro-batch split or model split works there (the notes say why)";
  }
  plan::PlanRequest all = request;
  all.only.reset();
  StatusOr<plan::Plan> full = plan::make_plan(all);
  if (full.ok() && full->any_fits()) {
    const plan::Candidate* pick = &full->candidates.front();
    for (const plan::Candidate& c : full->candidates) {
      if (c.fits && c.layout.tensor() == lay.tensor()) {
        pick = &c;
        break;
      }
    }
    if (env) {
      const std::string args = plan_train_args(request, *pick);
      std::cout << "AX_PLAN_LINE=" << line << "; the smallest change that fits: ICI_MESH_SHAPE=["
                << pick->layout.ici_string() << "] DCN_MESH_SHAPE=[" << pick->layout.dcn_string()
                << "]" << (args.empty() ? "" : str_cat(" AX_TRAIN_ARGS=\"", args, "\"")) << " ("
                << human_bytes(pick->memory.total()) << " per GPU)\n";
    } else {
      std::cout << line << "; the smallest change that fits:\n"
                << plan::format_choice(*full, *pick);
    }
  } else {
    const int nodes = plan::smallest_fitting_nodes(all);
    std::cout << (env ? "AX_PLAN_LINE=" : "") << line << "; no layout fits; "
              << (nodes > 0 ? str_cat("the smallest cluster that fits is ", nodes, " x ",
                                      cl.gpus_per_node, " ", cl.gpu.name)
                            : std::string("nor on up to 1024 such nodes"))
              << "\n";
  }
  return kExitFailed;
}

// The cluster of --nodes nodes: --gpus-per-node and --gpu, or a node's --topology file.
StatusOr<plan::Cluster> plan_cluster(const PlanArgs& a, std::string* summary,
                                     plan::CostConstants* constants) {
  if (!a.cpu.empty()) {
    if (a.gpus_per_node < 1) return InvalidArgument("--cpu needs --gpus-per-node (ranks)");
    const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
    StatusOr<plan::Device> d = plan::cpu_device(a.cpu, memory);
    if (!d.ok()) return d.status();
    *constants = d->constants;
    return plan::Cluster{a.nodes, a.gpus_per_node, d->gpu};
  }
  if (a.topology.empty()) {
    if (a.gpus_per_node < 1 || a.gpu.empty()) {
      return InvalidArgument("--gpus-per-node and --gpu are required without --topology");
    }
    StatusOr<plan::GpuSpec> gpu = plan::find_gpu(a.gpu);
    if (!gpu.ok()) return InvalidArgument("--gpu: ", gpu.status().message());
    return plan::Cluster{a.nodes, a.gpus_per_node, *gpu};
  }
  StatusOr<topo::Topology> topology = topo::load_topology(a.topology);
  if (!topology.ok()) {
    return InvalidArgument("--topology ", a.topology, ": ", topology.status().message());
  }
  StatusOr<plan::Cluster> cl = plan::cluster_from_topology(*topology, a.nodes, a.gpu, summary);
  if (!cl.ok()) return InvalidArgument("--topology ", a.topology, ": ", cl.status().message());
  if (a.gpus_per_node > 0 && a.gpus_per_node != cl->gpus_per_node) {
    return InvalidArgument("--gpus-per-node ", a.gpus_per_node, " but --topology ", a.topology,
                           " has ", cl->gpus_per_node, " GPUs");
  }
  return cl;
}

int run_plan(const CLI::App& app, const PlanArgs& a) {
  std::string topology_line;
  plan::CostConstants constants;
  StatusOr<plan::Cluster> cluster = plan_cluster(a, &topology_line, &constants);
  if (!cluster.ok()) return cli::usage_error(app, cluster.status().message());
  StatusOr<Config> config = make_experiment(a.experiment);
  if (!config.ok()) return cli::usage_error(app, config.status().message());
  for (const std::string& o : a.overrides) {
    Status s = apply_override(&*config, o);
    if (!s.ok()) return cli::usage_error(app, s.message());
  }
  if (Status s = validate(*config); !s.ok()) return cli::usage_error(app, s.message());
  plan::PlanRequest request;
  request.config = *config;
  request.vocab = config->model.vocab_size > 0 ? config->model.vocab_size
                  : a.vocab > 0                ? a.vocab
                                               : 50257;
  if (config->model.vocab_size <= 0 && !a.tokenizer.empty()) {
    StatusOr<std::unique_ptr<data::Tokenizer>> tok = data::Tokenizer::load(a.tokenizer);
    if (!tok.ok()) return cli::usage_error(app, str_cat("--tokenizer: ", tok.status().message()));
    request.vocab = (*tok)->vocab_size();
  }
  request.cluster = *cluster;
  request.constants = constants;
  fixed_choices(a.overrides, *config, &request);
  if (!a.ici.empty() || !a.dcn.empty()) {
    StatusOr<plan::Layout> only = plan::parse_layout(
        a.ici.empty() ? "1,-1,1" : a.ici, a.dcn.empty() ? "-1,1,1" : a.dcn, request.cluster);
    if (!only.ok()) return cli::usage_error(app, only.status().message());
    request.only = *only;
  }
  StatusOr<plan::Plan> result = plan::make_plan(request);
  if (!result.ok()) return cli::usage_error(app, result.status().message());
  const bool env = a.format == "env";
  if (!env) std::cout << topology_line << plan::format_table(*result, a.rows);
  const plan::Cluster& cl = request.cluster;
  if (result->any_fits()) {
    const plan::Candidate& best = result->candidates.front();
    if (!env) {
      std::cout << plan::format_best(*result);
    } else {
      const auto fit = std::count_if(result->candidates.begin(), result->candidates.end(),
                                     [](const plan::Candidate& c) { return c.fits; });
      print_env(
          best.layout, plan_train_args(request, best),
          str_cat(plan::summary_line(*result, best), " (",
                  request.only ? "the given mesh's fastest choice that fits, of "
                               : "the fastest that fits, of ",
                  fit, " that fit on ", cl.nodes, " x ", cl.gpus_per_node, " ", cl.gpu.name, ")"));
    }
    return kExitOk;
  }
  if (request.only) return explicit_layout_misfit(request, *result, env);
  const int nodes = plan::smallest_fitting_nodes(request);
  std::cout << (env ? "AX_PLAN_LINE=" : "")
            << (nodes > 0 ? str_cat("fits nowhere on ", cl.nodes, " x ", cl.gpus_per_node, " ",
                                    cl.gpu.name, ": the smallest cluster that fits is ", nodes,
                                    " x ", cl.gpus_per_node, " ", cl.gpu.name, "\n")
                          : str_cat("fits nowhere on ", cl.nodes, " x ", cl.gpus_per_node, " ",
                                    cl.gpu.name, " nor on up to 1024 such nodes\n"));
  return kExitFailed;
}

struct TrainArgs {
  RunRequest request;
  std::string run_dir;
  std::string device = "auto";
  bool help_config = false, help_env = false, list_experiments = false;
};

void add_train_options(CLI::App& app, TrainArgs* a) {
  app.add_option("--experiment", a->request.experiment, "a named config (--list-experiments)")
      ->type_name("NAME");
  app.add_option("--data", a->request.data_dir, "training shards (data.train_dir)")
      ->type_name("DIR");
  app.add_option("--tokenizer", a->request.tokenizer,
                 "the tokenizer the shards were made with: a SentencePiece .model, a\n"
                 "Hugging Face tokenizer.json, or a directory holding one (default with\n"
                 "--init-from HF_DIR: that directory's)")
      ->type_name("FILE|DIR");
  app.add_option("--run-dir", a->run_dir,
                 "checkpoints, config.json, metrics.jsonl, TensorBoard events")
      ->type_name("DIR");
  app.add_option("--set", a->request.overrides, "a config override; repeatable")
      ->type_name("key=value")
      ->allow_extra_args(false);
  add_device(app, &a->device);
  app.add_option("--max-steps", a->request.max_steps, "train.max_steps")
      ->type_name("N")
      ->check(cli::in_range(1));
  app.add_option("--init-from", a->request.init_from,
                 "weights and model config to start from (train.init_from): an ax run or\n"
                 "checkpoint, or a Hugging Face GPT-2 / Llama / T5 v1.1 directory")
      ->type_name("PATH");
  app.add_flag("--help-config", a->help_config, "the config keys, their defaults and meaning");
  app.add_flag("--help-env", a->help_env, "the environment variables ax reads");
  app.add_flag("--list-experiments", a->list_experiments, "the named configs");
}

void add_timeline_options(CLI::App& timeline, TimelineOptions* o) {
  timeline.add_option("run_dir", o->run_dir, "the run directory")->required()->type_name("RUN_DIR");
  timeline.add_option("--step", o->step, "the traced step (default: the newest)")
      ->check(cli::in_range(1));
  timeline.add_option("--width", o->width, "columns of the text drawing (default 100)")
      ->check(cli::in_range(10));
  timeline.add_option("--svg", o->svg_path, "also write the drawing as an SVG picture here")
      ->type_name("FILE");
}

int run_timeline(const TimelineOptions& options) {
  Status s = draw_pipeline_trace(options, std::cout);
  return s.ok() ? kExitOk : failed(s);
}

int run_sample(const SampleOptions& options) {
  StatusOr<std::vector<std::string>> texts = sample_text(options, std::cerr);
  if (!texts.ok()) return failed(texts.status());
  for (const std::string& text : *texts) std::cout << text << "\n";
  return kExitOk;
}

int run_train(const CLI::App& app, const TrainArgs& a) {
  for (const char* required : {"--experiment", "--run-dir"}) {
    if (app.count(required) == 0) return cli::usage_error(app, str_cat(required, " is required"));
  }
  StatusOr<Config> config = resolve_config(a.request);
  if (!config.ok()) {
    if (config.status().code() == StatusCode::kInvalidArgument) {
      return cli::usage_error(app, config.status().message());
    }
    return failed(config.status());
  }
  install_stop_handlers();
  TrainOptions options;
  options.device = a.device;
  StatusOr<TrainOutcome> outcome = train(*config, a.run_dir, options);
  if (!outcome.ok()) return failed(outcome.status());
  return *outcome == TrainOutcome::kStopped ? kExitStopped : kExitOk;
}

int main_impl(int argc, char** argv) {
  CLI::App app{kDescription, "ax-train"};
  cli::configure(app);
  app.footer(kFooter);
  TrainArgs train_args;
  add_train_options(app, &train_args);
  EvalCommandOptions eval_options;
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Evaluates a run's checkpoint on a task (MNLI, SQuAD v1.1, Lambada): greedy decoding with "
      "the key/value cache, metrics to RUN_DIR/metrics.jsonl and TensorBoard, one prediction per "
      "example to a jsonl. Under ax-launch or srun --ax-mesh the ranks share the examples. The "
      "texts are encoded with the run's tokenizer (data.tokenizer: a SentencePiece .model or a "
      "tokenizer.json).");
  add_eval_options(*eval, &eval_options);
  SampleOptions sample_options;
  CLI::App* sample = app.add_subcommand(
      "sample",
      "Prints the prompt and a continuation drawn from a run's newest checkpoint, encoded and\n"
      "decoded with the run's tokenizer (data.tokenizer: a .model or a tokenizer.json).");
  add_sample_options(*sample, &sample_options);
  ExportArgs export_args;
  CLI::App* exporter = app.add_subcommand(
      "export", "Writes a run's checkpoint as a Hugging Face directory (GPT-2, Llama, T5).");
  add_export_options(*exporter, &export_args);
  PlanArgs plan_args;
  CLI::App* planner = app.add_subcommand(
      "plan",
      "Plans a config on a cluster before it is queued (docs/plan.md): every data x fsdp x tensor\n"
      "layout over ICI and DCN with its micro-batches and recomputation, the memory per GPU\n"
      "(the model's own dry-run plan, nothing allocated) and the step time of a cost model,\n"
      "ranked; the best as job-script variables and an --ax-mesh spec. Exit 1 when nothing fits.");
  add_plan_options(*planner, &plan_args);
  TimelineOptions timeline_options;
  CLI::App* timeline = app.add_subcommand(
      "timeline",
      "Draws the pipeline stages of a pipelined run's traced step (train.pipeline_trace_step=N)\n"
      "one row each: every forward and backward pass by micro-batch and the time spent waiting on\n"
      "a neighbour, with each stage's waiting fraction (docs/sharding.md \"Seeing the bubble\").");
  add_timeline_options(*timeline, &timeline_options);
  if (argc < 2) return cli::usage_error(app, "--experiment NAME and --run-dir DIR are required");
  if (std::optional<int> exit = cli::parse_or_exit(app, argc, argv)) return *exit;
  if (train_args.help_config) {
    std::cout << describe_keys();
    return kExitOk;
  }
  if (train_args.help_env) {
    print_env_help(std::cout);
    return kExitOk;
  }
  if (train_args.list_experiments) {
    for (const std::string& name : experiment_names()) std::cout << name << "\n";
    return kExitOk;
  }
  if (eval->parsed()) return run_eval(eval_options);
  if (sample->parsed()) return run_sample(sample_options);
  if (exporter->parsed()) return run_export(export_args);
  if (planner->parsed()) return run_plan(*planner, plan_args);
  if (timeline->parsed()) return run_timeline(timeline_options);
  return run_train(app, train_args);
}

}  // namespace
}  // namespace ax::train

int main(int argc, char** argv) { return ax::train::main_impl(argc, argv); }
