// The Trainer that train() runs, private to this folder. Its methods live in three files:
// train_loop.cc (setup, resume, the loop, evaluation, logs), checkpointing.cc (saving, in the
// background or not) and train_data.cc (the data wiring: loaders or packers, the rows of a step,
// the validation data).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ax/datasets/loader/token_loader.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/eval/task_eval.h"
#include "ax/trainer/metrics/metrics.h"
#include "ax/trainer/optim/optimizer.h"
#include "ax/trainer/parallel/distributed.h"
#include "ax/trainer/train/example_rows.h"
#include "ax/trainer/train/train_loop.h"
#include "ax/trainer/train/train_state.h"
#include "rank_timing.h"

namespace ax::train::internal {

// One process's run: setup(), then run() steps until max_steps, a stop request or an error.
class Trainer {
 public:
  Trainer(const Config& config, std::string run_dir, const TrainOptions& options,
          const job::JobContext& ctx)
      : config_(config),
        run_dir_(std::move(run_dir)),
        options_(options),
        ctx_(ctx),
        out_(ctx.rank != 0            ? null_out_
             : options.out != nullptr ? *options.out
                                      : std::cout),
        checkpoints_(run_dir_, config.train.keep_checkpoints) {}

  Status setup();
  StatusOr<TrainOutcome> run();

 private:
  Status check_run_dir();
  Status plan_mesh();
  Status open_data();
  Status resume();
  // A run directory without a checkpoint and train.init_from: weights from there.
  Status init_from();
  Status step(int64_t step, StepResult* result);
  Status check_tokens(const data::TokenBatch& batch) const;
  // The objective's rows from a batch of the loader's windows: next-token rows, or T5's span
  // corruption.
  StatusOr<StepRows> rows_of(const data::TokenBatch& batch) const;
  // The rows of the next step: from the packer (seq2seq shards) or the loader's windows.
  StatusOr<StepRows> next_rows();
  // What span corruption needs from the tokenizer and the config (t5).
  Status setup_span_corruption();
  // Fine-tuning on seq2seq shards: the packers of the training and validation examples.
  Status open_examples(const data::LoaderOptions& lo);
  bool t5() const { return config_.model.family == ModelFamily::kT5; }
  // Tokens a row feeds the model (the encoder's and the decoder's for t5).
  int64_t tokens_per_row() const {
    return config_.train.seq_len + (t5() ? config_.train.encoder_seq_len : 0);
  }
  // The error that stops a run when the loss or the gradient norm is NaN or inf.
  Status non_finite(const char* what, double value, int64_t step) const;
  Status evaluate(int64_t step);
  // train.eval_task: the examples, read once; then the task's metrics at every evaluation.
  Status open_task_eval();
  Status evaluate_task_metrics(int64_t step);
  // Checkpoints (checkpointing.cc): save_checkpoint captures the state into host memory and,
  // with train.checkpoint_async, starts writing it on a thread; poll_checkpoint commits that
  // write once every rank has finished its files (one reduction per step while a write is
  // pending); finish_checkpoint waits for it and commits.
  void prepare_checkpoint_buffers();
  Status save_checkpoint();
  Status poll_checkpoint();
  Status finish_checkpoint();
  Status log_step(const StepResult& result, double step_time_s);
  void print_summary() const;

  bool leader() const { return ctx_.rank == 0; }

  Config config_;
  std::string run_dir_;
  TrainOptions options_;
  job::JobContext ctx_;
  std::ostream null_out_{nullptr};  // discards the progress lines of ranks other than 0
  std::ostream& out_;
  CheckpointManager checkpoints_;

  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Distributed> dist_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::shared_ptr<data::ShardSet> train_set_, val_set_;
  std::string val_dir_;
  std::unique_ptr<data::TokenLoader> loader_, val_loader_;
  std::unique_ptr<ExamplePacker> packer_, val_packer_;  // seq2seq shards instead of the loaders
  std::unique_ptr<Model> model_;
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<MetricsLogger> metrics_;
  int64_t global_batch_ = 0, micro_batch_ = 0;
  int64_t replica_rows_ = 0;  // rows of the global batch this rank's replica trains on
  TrainProgress progress_;
  int64_t saved_step_ = -1;
  bool resumed_ = false;
  std::vector<std::string> moved_aside_;  // checkpoints that failed verification on resume
  std::string initialised_from_;          // what init_from() read, for the summary
  bool logged_any_ = false;
  data::TokenBatch batch_;
  std::optional<SpanCorruptionRows> spans_;  // t5
  std::optional<EvalTask> task_;             // train.eval_task
  std::vector<TaskExample> task_examples_;
  TaskShape task_shape_;
  TaskRows task_rows_;
  int64_t last_task_eval_ = -1;  // the step of the previous task evaluation (its store keys)
  // Step times since the last progress line.
  double window_time_s_ = 0;
  int64_t window_steps_ = 0;
  // A pipelined run: the stage's passes and transfers of the current step, and since the last
  // progress line the seconds it computed and its schedules' seconds (metrics' pipeline_wait).
  PipelineSchedule schedule_ = PipelineSchedule::k1F1B;  // train.pipeline_schedule, set up once
  PipelineRecorder pipeline_recorder_;
  double window_busy_s_ = 0;
  double window_schedule_s_ = 0;
  // Several ranks: each one's data, compute and collective times per step, gathered at every
  // progress line to name a straggler (rank_timing.h, docs/reliability.md "Stragglers").
  std::unique_ptr<RankTiming> timing_;
  // One save whose files a thread is writing (train.checkpoint_async). Everything the thread
  // touches is owned here (the state, the pending save) or outlives it (checkpoints_), and the
  // destructor joins.
  struct BackgroundWrite {
    PendingSave pending;
    CheckpointGroup group;  // its round counter spans begin_save and finish_save
    CheckpointState state;
    StatusOr<std::string> written = Status(StatusCode::kInternal, "not written yet");
    std::atomic<bool> done{false};
    std::chrono::steady_clock::time_point started, finished;
    double copy_s = 0;   // the loop's wait for the host copy of the state
    double begin_s = 0;  // and for begin_save
    std::thread thread;

    ~BackgroundWrite() {
      if (thread.joinable()) thread.join();
    }
  };
  // The host copy of the last background write, whose buffers the next capture reuses; before
  // the first, buffers_thread_ allocates them beside the first steps (setup, checkpointing.cc).
  CheckpointState spare_state_;
  std::thread buffers_thread_;
  // Last, so that it is destroyed (its thread joined) before everything it reads.
  std::unique_ptr<BackgroundWrite> writing_;
  struct JoinOnExit {
    std::thread* t;
    ~JoinOnExit() {
      if (t->joinable()) t->join();
    }
  } join_buffers_thread_{&buffers_thread_};
};

}  // namespace ax::train::internal
