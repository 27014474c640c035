// `ax-train eval`: a task evaluation (task_eval.h) of a run's checkpoint, in one process or
// split over the ranks of a job (ax-launch, srun --ax-mesh): every rank loads the whole model,
// decodes its batches, and the ranks' integer sums meet through the job's store, so the numbers
// are those of one process. Rank 0 writes the predictions and the metrics (docs/evaluation.md).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "ax/common/status.h"
#include "ax/job_context/job_context.h"
#include "ax/trainer/eval/task_eval.h"

namespace ax::train {

struct EvalCommandOptions {
  std::string run_dir;
  std::optional<int64_t> step;  // nullopt: the newest checkpoint
  std::string task;             // mnli | squad | lambada
  std::string data;             // convert-task's jsonl
  int64_t max_examples = 0;     // 0 = all
  int64_t batch = 16;
  int64_t max_new_tokens = 0;  // 0 = the task's default
  std::string predictions;     // "" = RUN_DIR/predictions/<task>_step_<N>.jsonl
  std::string device = "auto";
  int threads = 0;
  std::string tokenizer;  // "" = the run's data.tokenizer; else used instead (as SampleOptions)
  // Where this process sits in the job; nullopt = read from the environment.
  std::optional<job::JobContext> context;
};

// Evaluates and returns the combined result (on every rank). Rank 0 appends
// {"step", "task", scores...} to RUN_DIR/metrics.jsonl and TensorBoard and writes the
// predictions; progress and the scores go to `log` (rank 0 only).
StatusOr<TaskEvalResult> run_eval_command(const EvalCommandOptions& options, std::ostream& log);

}  // namespace ax::train
