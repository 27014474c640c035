#include "ax/trainer/train/eval_command.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "ax/common/strings.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/comm/store.h"
#include "ax/trainer/metrics/metrics.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/parallel/distributed.h"
#include "ax/trainer/train/train_loop.h"
#include "ax/trainer/train/train_state.h"

namespace ax::train {
namespace {

// Only the parameters of the checkpoint, whole.
std::vector<TensorRegion> parameter_regions(const ParamStore& store) {
  std::vector<TensorRegion> out;
  for (TensorRegion& r : owned_regions(store)) {
    if (starts_with(r.name, "params/")) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

StatusOr<TaskEvalResult> run_eval_command(const EvalCommandOptions& o, std::ostream& console) {
  job::JobContext ctx;
  if (o.context) {
    ctx = *o.context;
  } else {
    AX_ASSIGN_OR_RETURN(ctx, job::job_context(job::process_env()));
  }
  std::ostream null_out(nullptr);  // discards the console lines of ranks other than 0
  std::ostream& log = ctx.rank == 0 ? console : null_out;
  AX_ASSIGN_OR_RETURN(EvalTask task, parse_eval_task(o.task));
  if (o.batch < 1) return InvalidArgument("--batch must be >= 1");

  CheckpointManager checkpoints(o.run_dir, 1);
  int64_t step = 0;
  if (o.step) {
    step = *o.step;
  } else {
    AX_ASSIGN_OR_RETURN(std::optional<int64_t> latest, checkpoints.latest());
    if (!latest) return NotFound("no checkpoint in ", o.run_dir, " (train first with ax-train)");
    step = *latest;
  }
  AX_ASSIGN_OR_RETURN(CheckpointState blobs, checkpoints.load(step, {}));
  auto blob = blobs.blobs.find("config.json");
  if (blob == blobs.blobs.end()) return DataLoss(checkpoints.step_dir(step), " has no config.json");
  AX_ASSIGN_OR_RETURN(Config config, from_json(blob->second));
  const bool t5 = config.model.family == ModelFamily::kT5;
  StatusOr<std::unique_ptr<data::Tokenizer>> loaded =
      data::Tokenizer::load(o.tokenizer.empty() ? config.data.tokenizer : o.tokenizer);
  if (!loaded.ok()) {
    return loaded.status().with_context(o.tokenizer.empty() ? "the run's data.tokenizer"
                                                            : "--tokenizer");
  }
  const data::Tokenizer& tokenizer = **loaded;
  if (tokenizer.vocab_size() > config.model.vocab_size) {
    return FailedPrecondition("the tokenizer ",
                              o.tokenizer.empty() ? config.data.tokenizer : o.tokenizer, " has ",
                              tokenizer.vocab_size(), " ids, more than the ",
                              config.model.vocab_size, " rows of the model's embedding");
  }

  AX_ASSIGN_OR_RETURN(std::vector<TaskExample> examples,
                      read_task_examples(task, o.data, o.max_examples));
  TaskShape shape;
  shape.t5 = t5;
  shape.window = t5 ? config.train.encoder_seq_len : config.train.seq_len;
  shape.max_new_tokens = o.max_new_tokens > 0 ? o.max_new_tokens : default_max_new_tokens(task);
  AX_ASSIGN_OR_RETURN(TaskRows rows, tokenize_task(tokenizer, task, examples, shape));

  std::shared_ptr<comm::TcpStore> store;
  const comm::Millis timeout(static_cast<int64_t>(config.train.comm_timeout_s * 1000));
  if (ctx.world > 1) {
    AX_ASSIGN_OR_RETURN(store, connect_job_store(ctx, timeout));
  }

  int threads = o.threads;
  if (threads == 0) {
    AX_ASSIGN_OR_RETURN(threads, cpu_threads(ctx.local_world));
  }
  std::string device = o.device;
  if (device == "auto" && parse_int64(ctx.device).has_value() && cuda_device_count() > 0) {
    device = "cuda:" + ctx.device;
  }
  AX_ASSIGN_OR_RETURN(auto backend, make_backend(device, threads, log, config.train.precision,
                                                 config.train.allow_tf32));
  // Decoding plans its own buffers; Lambada's forward passes take rows of the longest text.
  const bool lambada = task == EvalTask::kLambada;
  AX_ASSIGN_OR_RETURN(
      auto model, Model::create(config.model, tokenizer.vocab_size(), lambada ? o.batch : 1,
                                lambada ? std::max<int64_t>(1, rows.longest) : 1, backend.get(), {},
                                {.encoder_seq_len = t5 ? 1 : 0}));
  {
    AX_ASSIGN_OR_RETURN(CheckpointState state,
                        checkpoints.load(step, parameter_regions(model->store())));
    AX_RETURN_IF_ERROR(restore_parameters(state, &model->store()));
  }
  log << "evaluating " << checkpoints.step_dir(step) << " on " << examples.size() << " " << o.task
      << " examples of " << o.data << " (" << rows.truncated << " cut to "
      << (t5 ? "train.encoder_seq_len" : "train.seq_len") << " = " << shape.window << ")"
      << (ctx.world > 1 ? str_cat(", split over ", ctx.world, " ranks") : std::string()) << "\n";

  const auto t0 = std::chrono::steady_clock::now();
  const TaskEvalOptions options{.batch = o.batch, .rank = ctx.rank, .world = ctx.world};
  AX_ASSIGN_OR_RETURN(TaskEvalResult local,
                      evaluate_task(model.get(), tokenizer, task, examples, rows, shape, options));
  TaskEvalResult result = local;
  if (store) {
    AX_ASSIGN_OR_RETURN(result, combine_task_results(local, [&](const std::string& value) {
                          return comm::store_all_gather(*store, "eval/results", ctx.rank, ctx.world,
                                                        value, timeout);
                        }));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char timing[96];
  std::snprintf(timing, sizeof timing, " in %.2f s (%.1f examples/s)", seconds,
                seconds > 0 ? static_cast<double>(examples.size()) / seconds : 0.0);
  log << describe_scores(result) << timing << "\n";
  if (ctx.rank != 0) return result;

  const std::string predictions = !o.predictions.empty()
                                      ? o.predictions
                                      : (std::filesystem::path(o.run_dir) / "predictions" /
                                         str_cat(o.task, "_step_", step, ".jsonl"))
                                            .string();
  AX_RETURN_IF_ERROR(write_predictions(predictions, examples, result));
  log << "predictions: " << predictions << "\n";
  AX_ASSIGN_OR_RETURN(std::unique_ptr<MetricsLogger> metrics, MetricsLogger::open(o.run_dir));
  AX_RETURN_IF_ERROR(metrics->log_task(step, o.task, result.scores()));
  AX_RETURN_IF_ERROR(metrics->flush());
  return result;
}

}  // namespace ax::train
