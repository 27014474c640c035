// The training loop behind `ax-train`: resolves the config, builds the backend, model, optimizer
// and data loaders, resumes from the newest checkpoint in the run directory, trains, evaluates,
// logs and checkpoints. Behaviour and file layout: docs/trainer.md.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/job_context/job_context.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/parallel/pipeline_schedule.h"
#include "ax/trainer/parallel/pipeline_timeline.h"
#include "ax/trainer/train/step_rows.h"

namespace ax::train {

// Exit statuses of ax-train.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;    // the run failed; the message says why
inline constexpr int kExitUsage = 2;     // the command line is wrong
inline constexpr int kExitStopped = 75;  // stopped by a signal after a checkpoint: requeue it
// A collective failed: this rank stops because another one failed or stopped answering (its
// message names that rank; ax-launch reports such exits as a consequence, not as the cause).
inline constexpr int kExitCollectiveFailed = comm::kExitCollectiveFailed;

// What the command line asks for.
struct RunRequest {
  std::string experiment;
  std::string data_dir;                // data.train_dir
  std::string tokenizer;               // data.tokenizer
  std::vector<std::string> overrides;  // "key=value", applied in order
  std::optional<int64_t> max_steps;
  std::string init_from;  // train.init_from
};

// The named experiment, then the overrides, then the command line's paths (made absolute) and
// --max-steps; model.vocab_size from the tokenizer when 0; validated. With train.init_from, the
// model config is the checkpoint's: a --set model.* that contradicts it is an error naming both
// values, and so is a tokenizer with more ids than the checkpoint's embedding has rows.
StatusOr<Config> resolve_config(const RunRequest& request);

// What --device names: auto (CUDA device 0 when one answers, else the CPU), cpu, cpu-bf16 (the
// CPU in the CUDA backend's bf16 dtype plan), cuda or cuda:N. The one parser of the option.
struct DeviceSpec {
  enum class Kind : uint8_t { kAuto, kCpu, kCpuBf16, kCuda };
  Kind kind = Kind::kAuto;
  int ordinal = 0;  // kCuda
};
StatusOr<DeviceSpec> parse_device(const std::string& device);

// CPU backend threads: AX_CPU_THREADS when set above 0, else all cores (0) for one rank on the
// node, or the node's cores shared among its `local_ranks` ranks.
StatusOr<int> cpu_threads(int local_ranks);

// The backend for --device and train.precision (auto|bfloat16|float32: the activations' dtype;
// auto = bfloat16 on CUDA, float32 on the CPU, and bfloat16 on the CPU is cpu-bf16);
// allow_tf32 is train.allow_tf32 (CUDA with float32 only). threads = 0: AX_CPU_THREADS, else all
// cores. Writes one line saying what was chosen to `log`.
StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& device, int threads,
                                                std::ostream& log,
                                                const std::string& precision = "auto",
                                                bool allow_tf32 = false);

struct StepResult {
  int64_t step = 0;  // 1-based: the update just applied
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
};

struct TrainOptions {
  std::string device = "auto";
  // Where this process sits in the job; nullopt = read from the environment (AX_* from ax-launch
  // or spank_ax.so, PMIx, SLURM_*, else a single process). With several ranks, ax-train trains
  // one model sharded over the mesh (docs/sharding.md).
  std::optional<job::JobContext> context;
  int threads = 0;              // CPU backend threads, 0 = AX_CPU_THREADS or all cores
  std::ostream* out = nullptr;  // progress lines (nullptr = std::cout)
  // Called after every step; returning false stops the run as SIGTERM does.
  std::function<bool(const StepResult&)> after_step;
};

enum class TrainOutcome { kFinished, kStopped };

// Trains `config` in run_dir (created if needed), resuming from its newest checkpoint.
// kStopped: a stop was requested (signal or after_step), and a checkpoint was written.
StatusOr<TrainOutcome> train(const Config& config, const std::string& run_dir,
                             const TrainOptions& options);

// Zeroes the gradients, then runs forward and backward over `rows` windows of seq_len + 1
// tokens (inputs [0, T), targets [1, T]) as micro-batches of model->batch() rows, and sums the
// gradients over the model's data group. The gradients are those of the mean loss over the
// global batch of `global_rows` windows (0 = rows: one replica), and the return value is this
// rank's share of that mean (the sum over the replicas is the mean).
double forward_backward(Model* model, std::span<const uint32_t> windows, int64_t rows,
                        int64_t global_rows = 0);
// The same without gradients: the mean loss over the windows.
double evaluate_loss(Model* model, std::span<const uint32_t> windows, int64_t rows);
// The same over rows of any family (step_rows.h): the mean over rows.num_targets, or for
// forward_backward the gradients of the mean over rows.global_targets and this rank's share.
// A pipeline stage (model->parallel().pipeline_size > 1) runs its part of `schedule` over the
// micro-batches, trading activations and gradients with its neighbours (pipeline_step.cc); the
// loss is the last stage's, 0 on the others (the sum over the pipeline group is the loss). With a
// `recorder`, the stage's passes and transfers are recorded (pipeline_timeline.h).
double forward_backward(Model* model, const StepRows& rows,
                        PipelineSchedule schedule = PipelineSchedule::k1F1B,
                        PipelineRecorder* recorder = nullptr);
double evaluate_loss(Model* model, const StepRows& rows);
// The pipelined passes behind the two above (the micro-batches are rows.rows / model->batch()).
double pipeline_forward_backward(Model* model, const StepRows& rows, PipelineSchedule schedule,
                                 PipelineRecorder* recorder = nullptr);
double pipeline_evaluate_loss(Model* model, const StepRows& rows);

// SIGTERM, SIGINT and SIGUSR1 ask the loop to stop at the next step boundary (a second SIGINT
// ends the process at once).
void install_stop_handlers();
void request_stop(int signal_number);
int stop_signal();  // 0 while no stop was requested, else the highest signal number so far

}  // namespace ax::train
