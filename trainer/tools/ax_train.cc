// ax-train: trains GPT and Llama-style models (resuming from the run directory's newest
// checkpoint) and samples text from a trained run.
// Exit status: 0 done, 1 the run failed (the message says why), 2 the command line or config is
// wrong, 75 stopped by SIGTERM/SIGINT/SIGUSR1 after writing a checkpoint (requeue to resume).
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ax/common/env.h"
#include "ax/common/strings.h"
#include "ax/trainer/config.h"
#include "ax/trainer/sampler.h"
#include "ax/trainer/train_loop.h"

namespace ax::train {
namespace {

constexpr const char* kUsage =
    "usage: ax-train --experiment NAME --data DIR --tokenizer spm.model --run-dir DIR\n"
    "                [--set key=value]... [--device D] [--max-steps N]\n"
    "       ax-train sample --run-dir DIR [--prompt TEXT] [--tokens N] [--temperature T]\n"
    "                [--top-k K] [--seed S] [--device D]\n"
    "       ax-train --help | --help-config | --help-env | --list-experiments\n";

constexpr const char* kHelp =
    "\n"
    "Trains the named experiment on token shards made by `ax-data tokenize`. The config is the\n"
    "experiment, then every --set in order (keys: --help-config; the Pax names\n"
    "PERCORE_BATCH_SIZE, NUM_MICROBATCHES, ICI_MESH_SHAPE, DCN_MESH_SHAPE, MAX_STEPS and\n"
    "FPROP_DTYPE work too), then --data, --tokenizer and --max-steps. The resolved config is printed and saved as RUN_DIR/config.json. A run\n"
    "directory that holds a checkpoint is resumed from its newest one (bit-exact on CPU).\n"
    "Validation: data.validation_dir, or a sibling `val` or `validation` of the --data directory.\n"
    "\n"
    "options:\n"
    "  --experiment NAME      a named config (--list-experiments)\n"
    "  --data DIR             training shards (data.train_dir)\n"
    "  --tokenizer FILE       the SentencePiece model the shards were made with\n"
    "  --run-dir DIR          checkpoints, config.json, metrics.jsonl, TensorBoard events\n"
    "  --set key=value        a config override; repeatable\n"
    "  --device D             auto (CUDA device 0 when built and present, else the CPU), cpu,\n"
    "                         cpu-bf16 (the CPU in the CUDA backend's bf16 dtype plan), cuda,\n"
    "                         cuda:N; train.precision=float32|bfloat16 picks the dtype\n"
    "                         (train.allow_tf32=true: float32 GEMMs on TF32 tensor cores)\n"
    "  --max-steps N          train.max_steps\n"
    "\n"
    "sample: prints the prompt and a continuation drawn from the newest checkpoint\n"
    "  --prompt TEXT          the start of the text (default: a new document)\n"
    "  --tokens N             new tokens at most (default 128; stops at end of document)\n"
    "  --temperature T        0 = greedy (default 0.8)\n"
    "  --top-k K              sample among the K most likely tokens, 0 = all (default 40)\n"
    "  --seed S               sampling seed (default 1)\n"
    "\n"
    "exit status: 0 done, 1 the run failed, 2 bad command line or config, 75 stopped by\n"
    "SIGTERM, SIGINT or SIGUSR1 after a checkpoint (run the same command to resume).\n";

// --name value / --name=value options; repeatable ones keep every value.
struct Args {
  std::map<std::string, std::vector<std::string>> values;
  std::string error;

  bool has(const std::string& name) const { return values.count(name) > 0; }
  std::string get(const std::string& name, const std::string& def = "") const {
    auto it = values.find(name);
    return it == values.end() ? def : it->second.back();
  }
};

Args parse(int argc, char** argv, int first, const std::vector<std::string>& known) {
  Args args;
  for (int i = first; i < argc && args.error.empty(); ++i) {
    std::string arg = argv[i];
    if (!starts_with(arg, "--")) {
      args.error = str_cat("unexpected argument '", arg, "'");
      break;
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    bool is_known = false;
    for (const std::string& k : known) is_known |= (k == name);
    if (!is_known) {
      args.error = str_cat("unknown option --", name);
      break;
    }
    if (!inline_value) {
      if (i + 1 >= argc) {
        args.error = str_cat("--", name, " needs a value");
        break;
      }
      value = argv[++i];
    }
    args.values[name].push_back(value);
  }
  return args;
}

int usage_error(const std::string& what) {
  std::cerr << "ax-train: " << what << " (see ax-train --help)\n";
  return kExitUsage;
}

int failed(const Status& status) {
  std::string msg = status.message();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::cerr << "ax-train: " << msg << "\n";
  return kExitFailed;
}

std::optional<int64_t> int_option(const Args& args, const std::string& name, int64_t lo,
                                  std::string* error) {
  if (!args.has(name)) return std::nullopt;
  std::optional<int64_t> v = parse_int64(args.get(name));
  if (!v || *v < lo) {
    *error = str_cat("--", name, " expects an integer >= ", lo, ", got '", args.get(name), "'");
  }
  return v;
}

// "" when the --device value is one ax-train knows (parse_device, the one parser of it).
std::string device_error(const std::string& device) {
  StatusOr<DeviceSpec> spec = parse_device(device);
  return spec.ok() ? "" : spec.status().message();
}

int run_sample(int argc, char** argv) {
  Args args = parse(argc, argv, 2,
                    {"run-dir", "prompt", "tokens", "temperature", "top-k", "seed", "device"});
  if (!args.error.empty()) return usage_error(args.error);
  if (!args.has("run-dir")) return usage_error("sample: --run-dir DIR is required");
  SampleOptions options;
  options.run_dir = args.get("run-dir");
  options.prompt = args.get("prompt");
  options.device = args.get("device", "auto");
  std::string error;
  options.tokens = int_option(args, "tokens", 0, &error).value_or(options.tokens);
  options.top_k = int_option(args, "top-k", 0, &error).value_or(options.top_k);
  options.seed = static_cast<uint64_t>(int_option(args, "seed", 0, &error).value_or(1));
  if (args.has("temperature")) {
    std::optional<double> t = parse_double(args.get("temperature"));
    if (!t || *t < 0) error = "--temperature expects a number >= 0";
    options.temperature = t.value_or(0);
  }
  if (error.empty()) error = device_error(options.device);
  if (!error.empty()) return usage_error(error);
  StatusOr<std::string> text = sample_text(options, std::cerr);
  if (!text.ok()) return failed(text.status());
  std::cout << *text << "\n";
  return kExitOk;
}

int run_train(int argc, char** argv) {
  Args args = parse(argc, argv, 1,
                    {"experiment", "data", "tokenizer", "run-dir", "set", "device", "max-steps"});
  if (!args.error.empty()) return usage_error(args.error);
  for (const char* required : {"experiment", "run-dir"}) {
    if (!args.has(required)) return usage_error(str_cat("--", required, " is required"));
  }
  RunRequest request;
  request.experiment = args.get("experiment");
  request.data_dir = args.get("data");
  request.tokenizer = args.get("tokenizer");
  if (args.has("set")) request.overrides = args.values.at("set");
  std::string error;
  request.max_steps = int_option(args, "max-steps", 1, &error);
  if (!error.empty()) return usage_error(error);
  const std::string device = args.get("device", "auto");
  if (!device_error(device).empty()) return usage_error(device_error(device));

  StatusOr<Config> config = resolve_config(request);
  if (!config.ok()) {
    if (config.status().code() == StatusCode::kInvalidArgument) {
      return usage_error(config.status().message());
    }
    return failed(config.status());
  }
  install_stop_handlers();
  TrainOptions options;
  options.device = device;
  StatusOr<TrainOutcome> outcome = train(*config, args.get("run-dir"), options);
  if (!outcome.ok()) return failed(outcome.status());
  return *outcome == TrainOutcome::kStopped ? kExitStopped : kExitOk;
}

int main_impl(int argc, char** argv) {
  if (argc < 2) return usage_error("--experiment NAME and --run-dir DIR are required");
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage << kHelp;
      return kExitOk;
    }
  }
  const std::string first = argv[1];
  if (first == "--help-config") {
    std::cout << describe_keys();
    return kExitOk;
  }
  if (first == "--help-env") {
    print_env_help(std::cout);
    return kExitOk;
  }
  if (first == "--list-experiments") {
    for (const std::string& name : experiment_names()) std::cout << name << "\n";
    return kExitOk;
  }
  if (first == "sample") return run_sample(argc, argv);
  return run_train(argc, argv);
}

}  // namespace
}  // namespace ax::train

int main(int argc, char** argv) { return ax::train::main_impl(argc, argv); }
