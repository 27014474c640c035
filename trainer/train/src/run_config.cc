// Everything the loop needs before its first step that does not depend on the loop itself:
// the resolved config, the backend, stop signals and the micro-batch split.
#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <thread>

#include "ax/common/env.h"
#include "ax/common/strings.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/comm/activity.h"
#include "ax/trainer/train/train_loop.h"
#include "ax/trainer/train/train_state.h"

namespace ax::train {
namespace {

const EnvKnob<int64_t> kCpuThreads("AX_CPU_THREADS", 0,
                                   "threads of the CPU backend (0 = all cores, shared among the "
                                   "node's ranks); a run resumes bit-exactly only with the same "
                                   "count",
                                   0, 4096);

std::atomic<int> g_stop_signal{0};

// Keeps the highest signal number asked for: scancel's TERM (15) is what the stop line names
// even when the batch script's forwarded USR1 (10, sbatch/lib/preemption.sh) comes after it.
void note_stop(int signal_number) {
  int seen = g_stop_signal.load();
  while (seen < signal_number && !g_stop_signal.compare_exchange_weak(seen, signal_number)) {
  }
}

// The first signal asks for a checkpoint at the next step boundary; a second SIGINT (an
// impatient Ctrl-C) ends the process at once.
extern "C" void on_stop_signal(int signal_number) {
  if (signal_number == SIGINT && g_stop_signal.load() != 0) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  note_stop(signal_number);
}

std::string absolute_path(const std::string& path) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(path, ec);
  return ec ? path : p.lexically_normal().string();
}

// Runs forward over the rows in micro-batches of model->batch() rows; after each,
// `then(loss, targets)` returns what to add to the sum this returns.
template <typename Then>
double for_each_micro_batch(Model* model, const StepRows& rows, Then then) {
  const int64_t B = model->batch();
  AX_CHECK(rows.rows > 0 && rows.rows % B == 0) << rows.rows << " rows in micro-batches of " << B;
  AX_CHECK_EQ(rows.length, model->seq_len());
  double sum = 0;
  for (int64_t first = 0; first < rows.rows; first += B) {
    const float loss = model->forward(rows.micro_batch(first, B));
    sum += then(loss, model->num_targets());
  }
  return sum;
}

// train.init_from: the checkpoint's model replaces the experiment's; an override of model.* must
// agree with it. Dropout and the initialisation knobs stay the run's own choice. A Hugging Face
// directory's tokenizer (tokenizer.json, tokenizer.model or spiece.model) is the run's when none
// was given.
Status adopt_init_model(const std::vector<std::string>& overrides, Config* config) {
  const std::string& path = config->train.init_from;
  AX_ASSIGN_OR_RETURN(InitSource source, open_init_source(path));
  if (config->data.tokenizer.empty() && source.kind == InitSource::Kind::kHuggingFace &&
      data::Tokenizer::resolve_path(source.dir).ok()) {
    config->data.tokenizer = source.dir;
  }
  if (config->train.init_from_keep_step && source.kind != InitSource::Kind::kAx) {
    return InvalidArgument("train.init_from_keep_step=true continues an ax checkpoint's step; ",
                           path, " is a Hugging Face directory, which has no step count");
  }
  Config merged = *config;
  merged.model = source.model;
  merged.model.dropout = config->model.dropout;
  merged.model.init_std = config->model.init_std;
  merged.model.vocab_multiple = config->model.vocab_multiple;
  for (const std::string& assignment : overrides) {
    if (!assignment.starts_with("model.")) continue;
    Config probe = merged;
    AX_RETURN_IF_ERROR(apply_override(&probe, assignment));
    const ConfigDifference diff = first_model_difference(merged, probe);
    if (!diff.key.empty()) {
      return InvalidArgument("--set ", assignment, " contradicts --init-from ", path,
                             ", whose model has ", diff.key, "=", diff.old_value);
    }
  }
  *config = merged;
  return Status::Ok();
}

}  // namespace

StatusOr<Config> resolve_config(const RunRequest& request) {
  AX_ASSIGN_OR_RETURN(Config config, make_experiment(request.experiment));
  for (const std::string& assignment : request.overrides) {
    AX_RETURN_IF_ERROR(apply_override(&config, assignment));
  }
  if (!request.data_dir.empty()) config.data.train_dir = request.data_dir;
  if (!request.tokenizer.empty()) config.data.tokenizer = request.tokenizer;
  if (request.max_steps) {
    AX_RETURN_IF_ERROR(
        apply_override(&config, "train.max_steps", std::to_string(*request.max_steps)));
  }
  if (!request.init_from.empty()) config.train.init_from = request.init_from;
  if (!config.train.init_from.empty()) {
    config.train.init_from = absolute_path(config.train.init_from);
    AX_RETURN_IF_ERROR(adopt_init_model(request.overrides, &config));
  }
  if (config.data.train_dir.empty()) {
    return InvalidArgument(
        "no training data: pass --data DIR (a directory made by ax-data "
        "tokenize)");
  }
  if (config.data.tokenizer.empty()) {
    return InvalidArgument(
        "no tokenizer: pass --tokenizer FILE|DIR (the one the shards were made with: a "
        "SentencePiece .model or a tokenizer.json)",
        config.train.init_from.empty()
            ? ""
            : str_cat("; --init-from ", config.train.init_from,
                      " holds no tokenizer.json, tokenizer.model or spiece.model"));
  }
  config.data.train_dir = absolute_path(config.data.train_dir);
  config.data.tokenizer = absolute_path(config.data.tokenizer);
  if (!config.data.validation_dir.empty()) {
    config.data.validation_dir = absolute_path(config.data.validation_dir);
  }
  if (!config.train.eval_task_data.empty()) {
    config.train.eval_task_data = absolute_path(config.train.eval_task_data);
  }
  AX_ASSIGN_OR_RETURN(auto tokenizer, data::Tokenizer::load(config.data.tokenizer));
  if (!config.train.init_from.empty() && tokenizer->vocab_size() > config.model.vocab_size) {
    return FailedPrecondition("the tokenizer ", config.data.tokenizer, " has ",
                              tokenizer->vocab_size(), " ids, more than the ",
                              config.model.vocab_size, " rows of the embedding of --init-from ",
                              config.train.init_from,
                              " (model.vocab_size): use the model's own "
                              "tokenizer or one with at most that many ids");
  }
  AX_ASSIGN_OR_RETURN(config.model.vocab_size,
                      padded_vocab_size(config.model, tokenizer->vocab_size()));
  AX_RETURN_IF_ERROR(validate(config));
  return config;
}

StatusOr<DeviceSpec> parse_device(const std::string& device) {
  if (device == "auto") return DeviceSpec{DeviceSpec::Kind::kAuto};
  if (device == "cpu") return DeviceSpec{DeviceSpec::Kind::kCpu};
  if (device == "cpu-bf16") return DeviceSpec{DeviceSpec::Kind::kCpuBf16};
  if (device == "cuda") return DeviceSpec{DeviceSpec::Kind::kCuda, 0};
  if (device.starts_with("cuda:")) {
    std::optional<int64_t> ordinal = parse_int64(device.substr(5));
    if (!ordinal || *ordinal < 0 || *ordinal > INT32_MAX) {
      return InvalidArgument("'", device, "': expected cuda:N with a device ordinal N");
    }
    return DeviceSpec{DeviceSpec::Kind::kCuda, static_cast<int>(*ordinal)};
  }
  return InvalidArgument("expected auto|cpu|cpu-bf16|cuda|cuda:N, got '", device, "'");
}

StatusOr<int> cpu_threads(int local_ranks) {
  AX_ASSIGN_OR_RETURN(int64_t from_env, kCpuThreads.get());
  if (from_env > 0 || local_ranks <= 1) return static_cast<int>(from_env);
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks);
}

// auto takes CUDA device 0 when one answers (a GPU that answers but then fails is an error,
// never a silent fall-back to the CPU), else the CPU; the choice is printed either way.
// `precision` is train.precision: auto keeps the device's own activation dtype.
StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device, int threads,
                                                std::ostream& log, const std::string& precision,
                                                bool allow_tf32) {
  StatusOr<DeviceSpec> parsed = parse_device(device);
  if (!parsed.ok()) return parsed.status().with_context("--device");
  const DeviceSpec spec = *parsed;
  if (precision != "auto" && precision != "bfloat16" && precision != "float32") {
    return InvalidArgument("train.precision='", precision, "': expected auto|bfloat16|float32");
  }
  if (spec.kind == DeviceSpec::Kind::kCpuBf16 && precision == "float32") {
    return InvalidArgument("--device cpu-bf16 computes in bfloat16, but train.precision=float32");
  }
  if (spec.kind == DeviceSpec::Kind::kCuda ||
      (spec.kind == DeviceSpec::Kind::kAuto && cuda_device_count() > 0)) {
    auto cuda = make_cuda_backend(
        spec.ordinal, {precision == "float32" ? DType::kF32 : DType::kBF16, allow_tf32});
    if (!cuda.ok()) return cuda.status().with_context("--device " + device);
    log << "device: " << (*cuda)->name() << "\n";
    return cuda;
  }
  if (threads == 0) {
    AX_ASSIGN_OR_RETURN(threads, cpu_threads(1));
  }
  const bool bf16 = spec.kind == DeviceSpec::Kind::kCpuBf16 || precision == "bfloat16";
  std::unique_ptr<Backend> cpu = bf16 ? make_cpu_bf16_backend(threads) : make_cpu_backend(threads);
  log << "device: " << (bf16 ? "cpu-bf16" : "cpu");
  if (spec.kind == DeviceSpec::Kind::kAuto) {
    log << " (no GPU answered: " << make_cuda_backend(0).status().message() << ")";
  }
  log << "\n";
  return cpu;
}

double forward_backward(Model* model, const StepRows& rows, PipelineSchedule schedule,
                        PipelineRecorder* recorder) {
  if (model->parallel().pipeline_size > 1) {
    return pipeline_forward_backward(model, rows, schedule, recorder);
  }
  // The phases a stuck rank is reported in (comm/activity.h).
  comm::set_phase(comm::Phase::kForward);
  model->zero_grad();
  // Each micro-batch's mean loss is weighted by its share of the targets of the global batch, so
  // that the sum of the micro-batch gradients (over this rank's micro-batches, then over the
  // replicas) is the gradient of the mean over the whole batch. A batch without targets (all
  // prompts cut away) has no loss and no gradient.
  const double total = static_cast<double>(std::max<int64_t>(1, rows.global_targets));
  const double loss =
      for_each_micro_batch(
          model, rows,
          [&](float loss, int64_t targets) {
            comm::set_phase(comm::Phase::kBackward);
            model->backward(static_cast<float>(static_cast<double>(targets) / total));
            comm::set_phase(comm::Phase::kForward);  // the next micro-batch's
            return static_cast<double>(loss) * static_cast<double>(targets);
          }) /
      total;
  comm::set_phase(comm::Phase::kBackward);
  model->reduce_gradients();
  return loss;
}

double forward_backward(Model* model, std::span<const uint32_t> windows, int64_t rows,
                        int64_t global_rows) {
  StepRows r = lm_rows(windows, rows, model->seq_len());
  r.global_targets = (global_rows > 0 ? global_rows : rows) * model->seq_len();
  return forward_backward(model, r);
}

double evaluate_loss(Model* model, const StepRows& rows) {
  if (model->parallel().pipeline_size > 1) return pipeline_evaluate_loss(model, rows);
  const double total = static_cast<double>(std::max<int64_t>(1, rows.num_targets));
  return for_each_micro_batch(model, rows,
                              [](float loss, int64_t targets) {
                                return static_cast<double>(loss) * static_cast<double>(targets);
                              }) /
         total;
}

double evaluate_loss(Model* model, std::span<const uint32_t> windows, int64_t rows) {
  return evaluate_loss(model, lm_rows(windows, rows, model->seq_len()));
}

void install_stop_handlers() {
  struct sigaction action = {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;  // the loader's reads carry on; the loop polls the flag
  sigemptyset(&action.sa_mask);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) sigaction(s, &action, nullptr);
}

void request_stop(int signal_number) { note_stop(signal_number); }
int stop_signal() { return g_stop_signal.load(); }

}  // namespace ax::train
