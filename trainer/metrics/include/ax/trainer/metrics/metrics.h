// What users look at during a run: a progress line every train.log_every steps, metrics.jsonl
// (one JSON object per logged step) and a TensorBoard event file, all in the run directory.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ax/common/status.h"

namespace ax::train {

// One rank's mean times per step over the steps since the previous progress line
// (docs/reliability.md "Stragglers"): waiting for its data, computing (the rest of the step:
// forward, backward, optimizer, whatever is not a wait), and waiting in collectives.
struct RankTimes {
  double data_s = 0;
  double compute_s = 0;
  double comm_s = 0;
};

// One phase over the ranks.
struct PhaseSpread {
  double median_s = 0;
  double max_s = 0;
  int max_rank = 0;  // the slowest (the lowest rank among equals)
};

// The ranks' times of one progress line, and the straggler they name, if any.
struct RankSpread {
  PhaseSpread data, compute, comm;
  // The rank whose data or compute time exceeds the median by the most, when by more than the
  // margin; -1 = none. Waits in collectives never name a rank: they are where the others wait
  // for a slow one, so the slow rank's are the shortest.
  int candidate = -1;
  std::string candidate_phase;  // "data" or "compute"
  double candidate_s = 0;       // its time per step in that phase
  double candidate_median_s = 0;
  int other_candidates = 0;  // further (rank, phase) pairs past the margin
  // The candidate, when it was the previous line's candidate too: a rank is named once it is
  // slow on two progress lines running, not for one hiccup (a page-cache flush, a preempted
  // core). -1 = none.
  int straggler = -1;
};

// The spread of `ranks` (by rank) and its candidate: a (rank, phase) whose time exceeds the
// phase's median by more than `margin` × the median and by more than `min_excess_s`; the
// largest excess wins. It is the straggler when it is `previous_candidate` too. margin 0 names
// nobody. The median of an even count is the mean of the middle two.
RankSpread rank_spread(const std::vector<RankTimes>& ranks, double margin, double min_excess_s,
                       int previous_candidate = -1);

// The candidate: "compute 161 ms/step, +49% over the median 108 ms" (and " (+1 more)").
std::string describe_straggler(const RankSpread& spread);

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
  // Several ranks: their times since the previous line (absent on the first line of a process
  // and for one rank), and where the straggler runs ("host n1, local rank 2, cuda:2 ...").
  std::optional<RankSpread> ranks;
  std::string straggler_where;
  // A pipelined run: the measured bubble since the previous line — the part of the stages' time
  // over the longest stage's schedule (its forward and backward passes and the transfers between
  // them) in which they did not compute: waiting on a neighbour, or done before the others.
  std::optional<double> pipeline_wait;
};

// "step   120/2000 | loss 4.1234 | lr 5.99e-04 | gnorm 0.812 | 412 ms | 9.9k tok/s |
//  MFU 41.2% of 989 TFLOP/s | ETA 12m50s", then, when the ranks name a straggler,
// " | straggler: rank 2 (host n1, ...) compute 161 ms/step, +49% over the median 108 ms".
std::string format_progress(const StepMetrics& m);

// TFRecord-framed tf.Event records (scalar summaries) in
// <dir>/events.out.tfevents.<unix time>.<host>.
class TensorBoardWriter {
 public:
  static StatusOr<std::unique_ptr<TensorBoardWriter>> open(const std::string& dir);
  ~TensorBoardWriter();
  Status add_scalar(const std::string& tag, int64_t step, double value);
  // A SessionLog START event at `step`: TensorBoard then drops what earlier files hold for this
  // step and later ones (its purge of orphaned data), i.e. the steps a resumed run redoes.
  Status add_session_start(int64_t step);
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
  // resumed_step: the step the run starts after (its checkpoint's, 0 for a fresh start). The
  // records of later steps in an existing metrics.jsonl, which the run is about to redo, are
  // dropped first (the file is rewritten atomically), so that no step is counted twice by a
  // reader; without it (ax-train eval) the file is only appended to.
  static StatusOr<std::unique_ptr<MetricsLogger>> open(
      const std::string& run_dir, std::optional<int64_t> resumed_step = std::nullopt);
  ~MetricsLogger();
  // Writes {"step", "loss", "lr", "grad_norm", "step_time_s", "tokens_per_s", "mfu"} and the
  // same scalars under train/; with m.ranks also "ranks": {"data_s", "compute_s", "comm_s":
  // {"median", "max", "max_rank"}} and "straggler": {"rank", "phase", "s", "median_s"} (rank -1
  // when none named), and the scalars ranks/<phase>_s_median, ranks/<phase>_s_max,
  // ranks/straggler.
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
