// Task evaluation of a model (docs/evaluation.md "Evaluating a model"): MNLI and SQuAD by greedy
// decoding with the key/value cache (decoding.h), Lambada by one teacher-forced pass per text.
// Reads the jsonl that `ax-data convert-task` writes, scores with task_metrics.h, and splits the
// work over the ranks of a job by batches, so that the combined sums are exactly those of one
// process. Used by `ax-train eval` (eval_command.h) and by the train loop (train.eval_task).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/text/tokenizer.h"
#include "ax/trainer/eval/task_metrics.h"
#include "ax/trainer/models/model.h"

namespace ax::train {

enum class EvalTask : uint8_t { kMnli, kSquad, kLambada };

// "mnli", "squad", "lambada"; InvalidArgument names the known ones.
StatusOr<EvalTask> parse_eval_task(std::string_view name);
const char* eval_task_name(EvalTask task);
// New tokens decoded per example when not given: mnli 8 (a label word), squad 32; lambada none.
int64_t default_max_new_tokens(EvalTask task);

// One line of convert-task's output.
struct TaskExample {
  std::string id;                    // mnli: idx (or pair_id), squad: id, lambada: the line number
  std::string input;                 // mnli, squad: inputs; lambada: context
  std::vector<std::string> targets;  // mnli: {targets}; squad: answers; lambada: {last_word}
  // squad: the file's own answers ("raw_answers", before T5's punctuation padding), which the
  // official v1.1 script scores against; empty when the line has none (then `targets`).
  std::vector<std::string> raw_targets;
};

// The first `max_examples` lines (0 = all) of `path`. Errors name the file, the line and the
// field (a converter's output for another task says so).
StatusOr<std::vector<TaskExample>> read_task_examples(EvalTask task, const std::string& path,
                                                      int64_t max_examples = 0);

// How the examples become rows of token ids.
struct TaskShape {
  bool t5 = false;  // inputs feed the encoder (with EOS); decoder-only: the prompt (without)
  // t5: the encoder's input is cut to this many tokens (train.encoder_seq_len, as training cuts
  // it). Decoder-only: the tokens a row may hold (train.seq_len): a prompt keeps its first
  // window + 1 - max_new_tokens tokens; a Lambada text its last window + 1.
  int64_t window = 0;
  int64_t max_new_tokens = 0;  // mnli, squad
};

// The examples as token rows, and the order batches take them in.
struct TaskRows {
  std::vector<std::vector<int32_t>> tokens;  // per example: prompt, encoder input, or Lambada text
  std::vector<int64_t> word_start;           // lambada: where the last word's tokens start
  std::vector<int64_t> order;                // example indices, shortest row first (stable)
  int64_t truncated = 0;                     // rows cut to the window
  int64_t longest = 0;                       // tokens of the longest row
};
StatusOr<TaskRows> tokenize_task(const data::Tokenizer& tokenizer, EvalTask task,
                                 std::span<const TaskExample> examples, const TaskShape& shape);

struct TaskPrediction {
  int64_t index = 0;       // the example's line in the file (0-based)
  std::string prediction;  // the decoded answer; lambada: the greedy tokens at the word's places
  bool correct = false;    // mnli, lambada: as the metric counts it; squad: exact match
  double nll = 0;          // lambada: the word's summed negative log-likelihood (nats)
};

// Integer sums (task_metrics.h) and this rank's predictions. Sums of several ranks add exactly.
struct TaskEvalResult {
  EvalTask task = EvalTask::kMnli;
  AccuracySums accuracy;     // mnli
  SquadSums squad;           // T5's convention: the padded answers (as T5's paper reports)
  SquadSums squad_official;  // the official v1.1 script's: the raw answers
  LambadaSums lambada;
  std::vector<TaskPrediction> predictions;  // by index

  void merge(const TaskEvalResult& other);
  // The metrics.jsonl fields, in order: mnli accuracy, correct, examples; squad exact_match, f1
  // (T5's convention), official_exact_match, official_f1 (the v1.1 script's), examples; lambada
  // accuracy, ppl (lm-evaluation-harness's), token_ppl, correct, examples.
  std::vector<std::pair<std::string, double>> scores() const;
  // A text form for moving a rank's result to the others (exact: integers and %.17g doubles).
  std::string serialize() const;
  static StatusOr<TaskEvalResult> parse(std::string_view text);
};

struct TaskEvalOptions {
  int64_t batch = 16;  // rows decoded together (lambada: the model's batch)
  int rank = 0;        // batch j of the ordered rows is decoded by rank j mod world
  int world = 1;
};

// Runs this rank's batches with `model`'s weights. MNLI and SQuAD decode greedily (any model
// shape; stops each row at EOS). Lambada (decoder-only models only) runs model->forward over rows
// of model->seq_len() tokens, model->batch() at a time; every row must fit. The model must not be
// sharded.
StatusOr<TaskEvalResult> evaluate_task(Model* model, const data::Tokenizer& tokenizer,
                                       EvalTask task, std::span<const TaskExample> examples,
                                       const TaskRows& rows, const TaskShape& shape,
                                       const TaskEvalOptions& options);

// Adds every rank's result: `all_gather` returns each rank's string in rank order.
using StringAllGather = std::function<StatusOr<std::vector<std::string>>(const std::string& value)>;
StatusOr<TaskEvalResult> combine_task_results(const TaskEvalResult& local,
                                              const StringAllGather& all_gather);

// One JSON object per example, in file order: {"id", "input", "prediction", "target" (mnli,
// lambada) or "answers" (squad), "correct"}, squad adds "f1", lambada "nll". Creates the
// directory; written to a temporary name and renamed.
Status write_predictions(const std::string& path, std::span<const TaskExample> examples,
                         const TaskEvalResult& result);

// "mnli accuracy 81.25 % (13 of 16)" and the like, for the console.
std::string describe_scores(const TaskEvalResult& result);

}  // namespace ax::train
