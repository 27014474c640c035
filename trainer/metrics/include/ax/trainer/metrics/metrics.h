// What users look at during a run: a progress line every train.log_every steps, metrics.jsonl
// (one JSON object per logged step) and a TensorBoard event file, all in the run directory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ax/common/status.h"

namespace ax::train {

struct StepMetrics {
  int64_t step = 0;
  int64_t max_steps = 0;
  double loss = 0;
  double lr = 0;
  double grad_norm = 0;
  double step_time_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;         // fraction of peak_flops (PaLM formula); 0 when the peak is unknown
  double peak_flops = 0;  // the device peak used for mfu
  double eta_s = 0;
};

// "step   120/2000 | loss 4.1234 | lr 5.99e-04 | gnorm 0.812 | 412 ms | 9.9k tok/s |
//  MFU 41.2% of 989 TFLOP/s | ETA 12m50s"
std::string format_progress(const StepMetrics& m);

// TFRecord-framed tf.Event records (scalar summaries) in
// <dir>/events.out.tfevents.<unix time>.<host>.
class TensorBoardWriter {
 public:
  static StatusOr<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir);
  ~TensorBoardWriter();
  Status add_scalar(const std::string& tag, int64_t step, double value);
  Status flush();
  const std::string& path() const;

 private:
  class Impl;
  explicit TensorBoardWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// metrics.jsonl + TensorBoard, appending when a run resumes.
class MetricsLogger {
 public:
  static StatusOr<std::unique_ptr<MetricsLogger>> open(const std::string& run_dir);
  ~MetricsLogger();
  // Writes {"step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mfu"} and the
  // same scalars under train/.
  Status log_train(const StepMetrics& m);
  // {"step", "val_loss", "val_ppl"} and eval/loss, eval/ppl.
  Status log_eval(int64_t step, double val_loss);
  // A task evaluation (task_eval.h): {"step", "task", then each score} (whole numbers as
  // integers) and the scalars eval/<task>/<name>.
  Status log_task(int64_t step, const std::string& task,
                  const std::vector<std::pair<std::string, double>>& scores);
  Status flush();

 private:
  class Impl;
  explicit MetricsLogger(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ax::train
