// The loop: set up (data, model, optimizer, resume), then step, log, evaluate and checkpoint
// until max_steps, a stop request or an error. The Trainer is declared in trainer.h; its data
// wiring (loaders, the rows of a step, validation data) is in train_data.cc.
#include "ax/trainer/train/train_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "ax/common/file_io.h"
#include "ax/common/rng.h"
#include "ax/common/strings.h"
#include "ax/trainer/comm/store.h"
#include "ax/trainer/train/auto_mesh.h"
#include "ax/trainer/train/pipeline_trace.h"
#include "trainer.h"

namespace ax::train {
namespace internal {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Separates the dropout seeds of the steps from the other streams drawn from train.seed.
constexpr uint64_t kDropoutStream = 0x64726f706f757400ULL;  // "dropout"

// What a rank puts into the stop reduction (max) for an after_step request: above "go on" (0),
// below every signal's number, which the stop line names instead.
constexpr double kStopRequested = 0.5;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Status Trainer::check_run_dir() {
  std::error_code ec;
  fs::create_directories(run_dir_, ec);
  if (ec) return Status(StatusCode::kIoError, str_cat("creating ", run_dir_, ": ", ec.message()));
  const fs::path saved_path = fs::path(run_dir_) / "config.json";
  if (!fs::exists(saved_path)) return Status::Ok();
  std::ifstream f(saved_path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  StatusOr<Config> saved = from_json(text);
  if (!saved.ok()) return saved.status().with_context(saved_path.string());
  ConfigDifference diff = first_model_difference(*saved, config_);
  if (!diff.key.empty()) {
    return FailedPrecondition("run directory ", run_dir_, " holds a run with ", diff.key, "=",
                              diff.old_value, ", the new config has ", diff.new_value,
                              ": use another --run-dir, or the run's model config");
  }
  return Status::Ok();
}

Status Trainer::resume() {
  // The ranks agree on the step through the job's store (keys resume/<round>: a few rounds per
  // start, left in the store).
  CheckpointGroup group;
  group.rank = ctx_.rank;
  group.world = ctx_.world;
  if (dist_->multi()) {
    group.all_gather = [this, round = std::make_shared<int>(0)](const std::string& value) {
      return comm::store_all_gather(*dist_->store, str_cat("resume/", (*round)++), ctx_.rank,
                                    ctx_.world, value, dist_->timeout);
    };
  }
  const bool refuse = config_.train.resume_on_corrupt == "refuse";
  StatusOr<ResumeChoice> choice = checkpoints_.resume(
      owned_regions(model_->store()), group,
      refuse ? OnCorruptCheckpoint::kRefuse : OnCorruptCheckpoint::kFallback,
      [this](const CheckpointState& state) -> Status {
        AX_RETURN_IF_ERROR(
            restore_state(state, config_, &model_->store(), optimizer_.get(), &progress_));
        return packer_ ? packer_->restore(progress_.loader) : loader_->restore(progress_.loader);
      });
  if (!choice.ok() && refuse && choice.status().code() == StatusCode::kDataLoss) {
    return choice.status().with_context(
        "train.resume_on_corrupt=refuse (remove that directory to resume from an older "
        "checkpoint, or set train.resume_on_corrupt=fallback)");
  }
  AX_RETURN_IF_ERROR(choice.status());
  moved_aside_ = choice->moved_aside;
  if (!choice->step) {
    if (!config_.train.init_from.empty()) return init_from();
    model_->init(config_.train.seed);
    return Status::Ok();
  }
  saved_step_ = progress_.step;
  resumed_ = true;
  return Status::Ok();
}

Status Trainer::init_from() {
  AX_ASSIGN_OR_RETURN(InitSource source, open_init_source(config_.train.init_from));
  AX_ASSIGN_OR_RETURN(std::unique_ptr<InitReader> reader, InitReader::open(source));
  Status streamed = stream_parameters(reader.get(), &model_->store());
  if (!streamed.ok()) return streamed.with_context(str_cat("--init-from ", source.dir));
  if (config_.train.init_from_keep_step) progress_.step = source.step;
  initialised_from_ = str_cat(source.description, source.kind == InitSource::Kind::kAx
                                                      ? str_cat(" (step ", source.step, ")")
                                                      : std::string());
  return Status::Ok();
}

// An `auto` mesh's split from the plan (auto_mesh.h); the rank's context then carries the
// planned shapes, which setup_distributed and everything after it read.
Status Trainer::plan_mesh() {
  AutoMeshInput in;
  in.config = config_;
  in.vocab = config_.model.vocab_size > 0 ? config_.model.vocab_size : tokenizer_->vocab_size();
  in.spec = ctx_.mesh_spec;
  in.ici = ctx_.ici_mesh;
  in.dcn = ctx_.dcn_mesh;
  in.world = ctx_.world;
  AX_ASSIGN_OR_RETURN(in.enabled, auto_mesh_enabled());
  AX_ASSIGN_OR_RETURN(in.gpu, auto_mesh_gpu());
  if (in.gpu.empty()) in.gpu = backend_->device_model();
  AX_ASSIGN_OR_RETURN(AutoMeshChoice choice, plan_auto_mesh(in));
  ctx_.ici_mesh = choice.ici;
  ctx_.dcn_mesh = choice.dcn;
  if (!choice.line.empty() && leader()) out_ << choice.line << "\n";
  return Status::Ok();
}

Status Trainer::setup() {
  comm::set_phase(comm::Phase::kSetup);  // this thread is the training thread (activity.h)
  AX_RETURN_IF_ERROR(check_run_dir());
  int threads = options_.threads;
  if (threads == 0) {
    AX_ASSIGN_OR_RETURN(threads, cpu_threads(ctx_.local_world));  // ranks of a node share it
  }
  // The launcher or plugin chose this rank's GPU (AX_DEVICE, an ordinal as the process sees
  // it): --device auto takes that one when a GPU answers.
  std::string device = options_.device;
  if (device == "auto" && parse_int64(ctx_.device).has_value() && cuda_device_count() > 0) {
    device = "cuda:" + ctx_.device;
  }
  AX_ASSIGN_OR_RETURN(backend_, make_backend(device, threads, out_, config_.train.precision,
                                             config_.train.allow_tf32));
  AX_ASSIGN_OR_RETURN(tokenizer_, data::Tokenizer::load(config_.data.tokenizer));
  AX_RETURN_IF_ERROR(plan_mesh());
  AX_ASSIGN_OR_RETURN(dist_, setup_distributed(config_, ctx_, backend_.get(), out_));
  AX_ASSIGN_OR_RETURN(schedule_, parse_pipeline_schedule(config_.train.pipeline_schedule));
  if (dist_->multi()) {
    AX_ASSIGN_OR_RETURN(timing_, RankTiming::create(*dist_, backend_.get(), ctx_));
  }
  AX_RETURN_IF_ERROR(open_data());
  AX_ASSIGN_OR_RETURN(
      model_,
      Model::create(config_.model, tokenizer_->vocab_size(), micro_batch_,
                    config_.train.seq_len / dist_->coords.seq, backend_.get(),
                    dist_->model_parallel(),
                    {.recompute_layers = config_.train.recompute == "layer",
                     .encoder_seq_len = config_.train.encoder_seq_len,
                     .z_loss = static_cast<float>(config_.train.z_loss),
                     .pipeline_chunks = static_cast<int>(config_.train.pipeline_virtual_stages)}));
  AX_ASSIGN_OR_RETURN(optimizer_,
                      AdamW::create(config_.optim, config_.train.max_steps, &model_->store()));
  AX_RETURN_IF_ERROR(resume());
  AX_RETURN_IF_ERROR(open_task_eval());
  if (leader()) {
    AX_RETURN_IF_ERROR(
        write_file_atomically((fs::path(run_dir_) / "config.json").string(), to_json(config_)));
    AX_ASSIGN_OR_RETURN(metrics_, MetricsLogger::open(run_dir_, progress_.step));
  }
  print_summary();
  prepare_checkpoint_buffers();
  return Status::Ok();
}

void Trainer::print_summary() const {
  const ParamLayout& layout = model_->layout();
  const ModelConfig& m = config_.model;
  out_ << to_text(config_);
  out_ << "backend: " << backend_->name() << "\n";
  const std::string layers =
      m.family == ModelFamily::kT5
          ? str_cat(m.num_layers, "+",
                    m.num_decoder_layers > 0 ? m.num_decoder_layers : m.num_layers,
                    " encoder+decoder layers")
          : str_cat(m.num_layers, " layers");
  out_ << "model: " << name_of(m.family) << ", " << layers << ", width " << m.model_dim << ", "
       << fixed(static_cast<double>(layout.num_parameters()) / 1e6, 2) << "M parameters ("
       << fixed(static_cast<double>(layout.num_matmul_parameters()) / 1e6, 2)
       << "M in matmuls), vocabulary " << tokenizer_->vocab_size() << " padded to " << m.vocab_size
       << ", activations " << human_bytes(static_cast<double>(model_->activation_bytes())) << "\n";
  out_ << "memory: " << human_bytes(static_cast<double>(backend_->bytes_in_use()))
       << " held by the backend on this rank (parameters, gradients, optimizer state, "
          "activations, scratch)\n";
  out_ << "data: " << train_set_->num_tokens() << " tokens"
       << (packer_ ? str_cat(" of (", t5() ? "inputs, targets" : "prompt, response", ") examples, ",
                             config_.train.pack_seq2seq ? "packed" : "one per row")
                   : std::string())
       << " in " << config_.data.train_dir << "; GLOBAL_BATCH " << global_batch_ << " = "
       << dist_->replicas() << " replica(s) x " << config_.train.num_microbatches
       << " micro-batch(es) of " << micro_batch_ << " x " << config_.train.seq_len << " tokens\n";
  if (dist_->coords.pipeline > 1) {
    out_ << "pipeline: stage " << dist_->coords.p << " of " << dist_->coords.pipeline << ", "
         << config_.train.pipeline_schedule << " schedule over " << config_.train.num_microbatches
         << " micro-batch(es) per step"
         << (model_->stage_chunks() > 1
                 ? str_cat(", ", model_->stage_chunks(), " model chunks per stage (a slot below: ",
                           "one micro-batch through one chunk)")
                 : std::string())
         << "\n";
  }
  if (config_.train.eval_every > 0) {
    out_ << (val_set_ ? "validation: " + val_dir_
                      : std::string("validation: none (no data.validation_dir and no sibling "
                                    "val/ or validation/ directory)"))
         << "\n";
  }
  if (ctx_.restart_count > 0) {
    out_ << "restart " << ctx_.restart_count << " of Slurm job " << ctx_.job_id
         << " (SLURM_RESTART_COUNT)\n";
  }
  if (!initialised_from_.empty()) {
    out_ << "initialised from " << initialised_from_ << "; optimizer state fresh, starting at step "
         << progress_.step << "\n";
  }
  if (resumed_) {
    out_ << "resumed from step " << progress_.step << " (" << checkpoints_.step_dir(progress_.step)
         << ")\n";
  }
  for (const std::string& dir : moved_aside_) {
    out_ << "moved aside (failed verification, see the warning above): " << dir << "\n";
  }
}

Status Trainer::step(int64_t step, StepResult* result) {
  comm::set_step(step);
  comm::set_phase(comm::Phase::kData);
  const auto data_start = Clock::now();
  debug_slow(config_.train, ctx_.rank, step, "data");
  AX_ASSIGN_OR_RETURN(StepRows rows, next_rows());
  if (timing_) timing_->add_data(seconds_since(data_start));
  comm::set_phase(comm::Phase::kForward);
  debug_slow(config_.train, ctx_.rank, step, "compute");
  if (config_.model.dropout > 0) {
    // Masks keyed by the step and each row's place in the data (row_ids): the same on every
    // mesh and on resume.
    rows.dropout_seed =
        mix64(config_.train.seed ^ mix64(kDropoutStream + static_cast<uint64_t>(step)));
  }
  const bool pipelined = dist_->coords.pipeline > 1;
  double loss = dist_->all_reduce(
      dist_->groups.replica.get(),
      forward_backward(model_.get(), rows, schedule_, pipelined ? &pipeline_recorder_ : nullptr),
      comm::ReduceOp::kSum);
  if (pipelined) {
    const StageTimeline timeline =
        pipeline_recorder_.timeline(step, ctx_.rank, dist_->coords.p, dist_->coords.pipeline);
    window_busy_s_ += busy_seconds(timeline);
    window_schedule_s_ += timeline.seconds;
    if (step == config_.train.pipeline_trace_step) {
      AX_RETURN_IF_ERROR(write_pipeline_trace(run_dir_, timeline));
    }
  }
  // A pipeline's loss is its last stage's (0 on the others): the sum tells every stage. Each
  // slice of a seq group holds its share of its rows' loss.
  loss = dist_->all_reduce(dist_->groups.pipeline.get(), loss, comm::ReduceOp::kSum);
  loss = dist_->all_reduce(dist_->groups.seq.get(), loss, comm::ReduceOp::kSum);
  if (!std::isfinite(loss)) return non_finite("loss", loss, step);
  comm::set_phase(comm::Phase::kOptimizer);
  const double norm = optimizer_->grad_norm();
  if (!std::isfinite(norm)) return non_finite("gradient norm", norm, step);
  result->step = step;
  result->loss = loss;
  result->grad_norm = norm;
  result->lr = optimizer_->apply(step, norm);
  progress_.step = step;
  progress_.tokens_seen += global_batch_ * tokens_per_row();
  return Status::Ok();
}

Status Trainer::non_finite(const char* what, double value, int64_t step) const {
  const std::string last = saved_step_ >= 0 ? str_cat("the last checkpoint is step ", saved_step_)
                                            : std::string("no checkpoint was written");
  return Status(
      StatusCode::kAborted,
      str_cat(what, " is ", std::isnan(value) ? "NaN" : (value > 0 ? "inf" : "-inf"), " at step ",
              step, "; stopping (", last, "). Lower optim.lr or check the data"));
}

Status Trainer::evaluate(int64_t step) {
  // Every evaluation reads the same first batches of the set.
  if (val_packer_) {
    AX_RETURN_IF_ERROR(val_packer_->restore(data::LoaderState{}));
  } else {
    AX_RETURN_IF_ERROR(val_loader_->restore(data::LoaderState{}));
  }
  double sum = 0;
  int64_t targets = 0;
  data::TokenBatch batch;
  for (int64_t i = 0; i < config_.train.eval_batches; ++i) {
    StepRows rows;
    if (val_packer_) {
      AX_RETURN_IF_ERROR(val_packer_->next(&rows));
    } else {
      AX_RETURN_IF_ERROR(val_loader_->next(&batch));
      AX_RETURN_IF_ERROR(check_tokens(batch));
      AX_ASSIGN_OR_RETURN(rows, rows_of(batch));
    }
    rows = seq_slice_rows(std::move(rows), dist_->coords.s, dist_->coords.seq);
    sum += evaluate_loss(model_.get(), rows) * static_cast<double>(rows.num_targets);
    targets += rows.num_targets;
  }
  if (dist_->coords.seq > 1) {
    // The slices' sums over the whole rows (a count < 2^24 stays exact as f32).
    sum = dist_->all_reduce(dist_->groups.seq.get(), sum, comm::ReduceOp::kSum);
    targets = static_cast<int64_t>(std::llround(dist_->all_reduce(
        dist_->groups.seq.get(), static_cast<double>(targets), comm::ReduceOp::kSum)));
  }
  const double val_loss = dist_->all_reduce(
      dist_->groups.pipeline.get(), sum / static_cast<double>(std::max<int64_t>(1, targets)),
      comm::ReduceOp::kSum);  // a pipeline's last stage has it, 0 the others
  out_ << "eval step " << step << " | val loss " << fixed(val_loss, 4) << " | ppl "
       << fixed(std::exp(val_loss), 2) << std::endl;
  return leader() ? metrics_->log_eval(step, val_loss) : Status::Ok();
}

Status Trainer::open_task_eval() {
  const TrainConfig& t = config_.train;
  if (t.eval_task == "none" || t.eval_every == 0) return Status::Ok();
  if (model_->sharded() || dist_->coords.seq > 1) {
    return FailedPrecondition(
        "train.eval_task=", t.eval_task, " evaluates the whole model on each rank, and this mesh ",
        "shards it (fsdp=", dist_->coords.fsdp,
        dist_->coords.seq > 1 ? str_cat(", seq=", dist_->coords.seq) : std::string(),
        ", tensor=", dist_->coords.tensor,
        "): train with a data-parallel mesh (mesh.ici=-1,1,1 mesh.dcn=-1,1,1), or set ",
        "train.eval_task=none and run `ax-train eval` on the checkpoints, which loads them whole");
  }
  AX_ASSIGN_OR_RETURN(task_, parse_eval_task(t.eval_task));
  StatusOr<std::vector<TaskExample>> examples =
      read_task_examples(*task_, t.eval_task_data, t.eval_task_examples);
  if (!examples.ok()) return examples.status().with_context("train.eval_task_data");
  task_examples_ = std::move(*examples);
  task_shape_.t5 = t5();
  task_shape_.window = t5() ? t.encoder_seq_len : t.seq_len;
  task_shape_.max_new_tokens =
      t.eval_task_max_new_tokens > 0 ? t.eval_task_max_new_tokens : default_max_new_tokens(*task_);
  AX_ASSIGN_OR_RETURN(task_rows_, tokenize_task(*tokenizer_, *task_, task_examples_, task_shape_));
  out_ << "task evaluation: " << t.eval_task << ", " << task_examples_.size() << " examples of "
       << t.eval_task_data << " (" << task_rows_.truncated << " cut to the window)\n";
  return Status::Ok();
}

Status Trainer::evaluate_task_metrics(int64_t step) {
  const TaskEvalOptions options{.batch = micro_batch_, .rank = ctx_.rank, .world = ctx_.world};
  AX_ASSIGN_OR_RETURN(TaskEvalResult local,
                      evaluate_task(model_.get(), *tokenizer_, *task_, task_examples_, task_rows_,
                                    task_shape_, options));
  TaskEvalResult result = local;
  if (dist_->multi()) {
    // The sums and predictions of every rank, through the job's store (exact: integers and text).
    if (leader() && last_task_eval_ >= 0) {
      // Every rank read the previous round before the steps since, whose reductions it joined.
      AX_RETURN_IF_ERROR(
          dist_->store->erase_prefix(str_cat("task_eval/", last_task_eval_, "/")).status());
    }
    AX_ASSIGN_OR_RETURN(result, combine_task_results(local, [&](const std::string& value) {
                          return comm::store_all_gather(*dist_->store, str_cat("task_eval/", step),
                                                        ctx_.rank, ctx_.world, value,
                                                        dist_->timeout);
                        }));
  }
  last_task_eval_ = step;
  out_ << "eval step " << step << " | " << describe_scores(result) << std::endl;
  if (!leader()) return Status::Ok();
  const fs::path path = fs::path(run_dir_) / "predictions" /
                        str_cat(config_.train.eval_task, "_step_", step, ".jsonl");
  AX_RETURN_IF_ERROR(write_predictions(path.string(), task_examples_, result));
  return metrics_->log_task(step, config_.train.eval_task, result.scores());
}

Status Trainer::log_step(const StepResult& r, double step_time_s) {
  window_time_s_ += step_time_s;
  ++window_steps_;
  const int64_t every = std::max<int64_t>(1, config_.train.log_every);
  // The first step of a process is logged too: it shows at once that the run works.
  const bool first = !logged_any_;
  if (r.step % every != 0 && r.step != config_.train.max_steps && !first) return Status::Ok();
  logged_any_ = true;
  std::optional<RankSpread> ranks;
  if (timing_ && first) timing_->restart_window();  // the first step of a process warms up
  if (timing_ && !first) {
    // Every rank, at the same steps: one all-gather of 3 floats per rank over the world.
    ranks =
        timing_->gather(config_.train.straggler_margin, config_.train.straggler_min_ms / 1000.0);
  }
  const double mean_time = window_time_s_ / static_cast<double>(window_steps_);
  StepMetrics m;
  m.step = r.step;
  m.max_steps = config_.train.max_steps;
  m.loss = r.loss;
  m.lr = r.lr;
  m.grad_norm = r.grad_norm;
  m.step_time_s = mean_time;
  m.tokens_per_s = static_cast<double>(global_batch_ * tokens_per_row()) / mean_time;
  m.peak_flops = backend_->peak_flops() * static_cast<double>(ctx_.world);
  if (m.peak_flops > 0) {
    const double rows_per_s = static_cast<double>(global_batch_) / mean_time;
    m.mfu = rows_per_s * model_->flops_per_row() / m.peak_flops;
  }
  m.eta_s = mean_time * static_cast<double>(config_.train.max_steps - r.step);
  m.ranks = ranks;
  if (dist_->coords.pipeline > 1) {
    // Every rank logs at the same steps. The bubble over the window: the part of the P stages'
    // time the longest stage's schedule took that they did not compute (a stage done early waits
    // for the others in the loss's reduction, outside its own schedule).
    comm::Communicator* stages = dist_->groups.pipeline.get();
    const double busy = dist_->all_reduce(stages, window_busy_s_, comm::ReduceOp::kSum);
    const double span = dist_->all_reduce(stages, window_schedule_s_, comm::ReduceOp::kMax);
    const double P = static_cast<double>(dist_->coords.pipeline);
    m.pipeline_wait = span > 0 ? std::clamp(1.0 - busy / (P * span), 0.0, 1.0) : 0.0;
    window_busy_s_ = 0;
    window_schedule_s_ = 0;
  }
  if (leader() && ranks && ranks->straggler >= 0) {
    m.straggler_where = timing_->where(ranks->straggler);  // host, local rank, GPU or cores
  }
  out_ << format_progress(m) << "\n";
  out_.flush();
  window_time_s_ = 0;
  window_steps_ = 0;
  return leader() ? metrics_->log_train(m) : Status::Ok();
}

StatusOr<TrainOutcome> Trainer::run() {
  const int64_t max_steps = config_.train.max_steps;
  if (progress_.step >= max_steps) {
    out_ << "the run is at step " << progress_.step << " of " << max_steps
         << ": nothing to do (raise train.max_steps / --max-steps to continue)\n";
    return TrainOutcome::kFinished;
  }
  for (int64_t k = progress_.step + 1; k <= max_steps; ++k) {
    const auto t0 = Clock::now();
    if (timing_) timing_->begin_step();
    StepResult result;
    Status s = step(k, &result);
    if (!s.ok()) {
      // The checkpoint being written holds a valid earlier state: commit it where every rank
      // meets the same error (one process; a non-finite loss or gradient norm, which every rank
      // computes from the same reduced value), so that it is there to resume from.
      if (writing_ && (ctx_.world == 1 || s.code() == StatusCode::kAborted)) {
        Status f = finish_checkpoint();
        if (!f.ok()) out_ << "warning: " << f.to_string() << std::endl;
      }
      if (metrics_) metrics_->flush().ignore();
      return s;
    }
    const double step_time = timing_ ? timing_->end_step(t0) : seconds_since(t0);
    comm::set_phase(comm::Phase::kLogging);
    AX_RETURN_IF_ERROR(log_step(result, step_time));
    const int64_t eval_every = config_.train.eval_every;
    comm::set_phase(comm::Phase::kEvaluation);
    if (val_set_ && eval_every > 0 && (k % eval_every == 0 || k == max_steps)) {
      AX_RETURN_IF_ERROR(evaluate(k));
    }
    if (task_ && eval_every > 0 && (k % eval_every == 0 || k == max_steps)) {
      AX_RETURN_IF_ERROR(evaluate_task_metrics(k));
    }
    comm::set_phase(comm::Phase::kCheckpoint);
    AX_RETURN_IF_ERROR(poll_checkpoint());  // commits a background write every rank finished
    const int64_t ckpt_every = config_.train.checkpoint_every;
    if ((ckpt_every > 0 && k % ckpt_every == 0) || k == max_steps) {
      AX_RETURN_IF_ERROR(save_checkpoint());
    }
    comm::set_phase(comm::Phase::kLogging);
    const bool keep_going = !options_.after_step || options_.after_step(result);
    // Every rank stops at the same step boundary: a signal that reached some ranks stops all.
    // The reduction carries the signal's number (kStopRequested for an after_step request, below
    // every signal), so that rank 0 names it even when it reached only other ranks so far: Slurm
    // delivers scancel's TERM node by node, seconds apart under load.
    const int local_sig = stop_signal();
    const double reason = dist_->all_reduce(dist_->groups.world.get(),
                                            local_sig != 0 ? static_cast<double>(local_sig)
                                            : keep_going   ? 0.0
                                                           : kStopRequested,
                                            comm::ReduceOp::kMax);
    if (reason > 0 && k < max_steps) {
      AX_RETURN_IF_ERROR(save_checkpoint());
      AX_RETURN_IF_ERROR(finish_checkpoint());  // the write ends before the process does
      if (metrics_) AX_RETURN_IF_ERROR(metrics_->flush());
      const int sig = reason >= 1 ? static_cast<int>(reason) : 0;
      out_ << "stopped after step " << k
           << (sig != 0 ? str_cat(" on signal ", sig) : std::string(" on request"))
           << "; checkpoint written, run the same command to resume" << std::endl;
      // `srun --kill-on-bad-exit` kills the whole step as soon as the first rank exits 75: no
      // rank leaves before every rank (the leader's metrics and its line above included) has
      // written everything. Ranks still exiting when that kill comes end by SIGKILL; the job
      // scripts treat a step that ends after a stop request as stopped (sbatch/lib/preemption.sh).
      dist_->all_reduce(dist_->groups.world.get(), 0.0, comm::ReduceOp::kMax);
      return TrainOutcome::kStopped;
    }
  }
  AX_RETURN_IF_ERROR(finish_checkpoint());
  if (metrics_) AX_RETURN_IF_ERROR(metrics_->flush());
  if (packer_) {
    out_ << "fine-tuning data: " << packer_->examples() << " examples in the " << packer_->rows()
         << " rows of this process's steps, " << packer_->truncated() << " of them truncated to "
         << (t5() ? str_cat("ENC_SL ", config_.train.encoder_seq_len, " / DEC_SL ",
                            config_.train.seq_len)
                  : str_cat("train.seq_len + 1 = ", config_.train.seq_len + 1))
         << " tokens, " << packer_->without_targets()
         << " left without a target (raise train.seq_len if that is many)\n";
  }
  out_ << "done: step " << max_steps << ", " << progress_.tokens_seen << " tokens; peak memory "
       << human_bytes(static_cast<double>(backend_->peak_bytes_in_use())) << " on this rank\n";
  if (dist_->coords.pipeline > 1) {
    // What the schedule kept alive on each stage (docs/sharding.md "Pipeline parallelism"), as
    // the first rank of each stage measured it, through the job's store.
    AX_ASSIGN_OR_RETURN(
        const std::vector<std::string> all,
        comm::store_all_gather(*dist_->store, "pipeline/memory", ctx_.rank, ctx_.world,
                               str_cat(model_->slots_allocated(), " ", model_->slot_bytes(), " ",
                                       backend_->peak_bytes_in_use()),
                               dist_->timeout));
    const int per_stage = ctx_.world / dist_->coords.pipeline;
    for (int p = 0; p < dist_->coords.pipeline; ++p) {
      std::istringstream fields(all[static_cast<size_t>(p * per_stage)]);
      long long slots = 0, slot_bytes = 0, peak = 0;
      fields >> slots >> slot_bytes >> peak;
      out_ << "pipeline stage " << p << ": activations of at most " << slots
           << " micro-batch(es) at once (a slot beyond the first is " << slot_bytes
           << " bytes); peak " << peak << " bytes held by the backend of rank " << p * per_stage
           << "\n";
    }
  }
  return TrainOutcome::kFinished;
}

}  // namespace internal

StatusOr<TrainOutcome> train(const Config& config, const std::string& run_dir,
                             const TrainOptions& options) {
  job::JobContext ctx;
  if (options.context) {
    ctx = *options.context;
  } else {
    AX_ASSIGN_OR_RETURN(ctx, job::job_context(job::process_env()));
  }
  internal::Trainer trainer(config, run_dir, options, ctx);
  AX_RETURN_IF_ERROR(trainer.setup());
  return trainer.run();
}

}  // namespace ax::train
