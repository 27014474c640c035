#include "ax/trainer/eval/task_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "ax/common/file_io.h"
#include "ax/common/strings.h"
#include "ax/trainer/eval/decoding.h"

namespace ax::train {
namespace {

using Json = nlohmann::ordered_json;

// The string field `key` of a converted line, or an error naming the file, line and field.
StatusOr<std::string> string_field(const Json& line, const char* key, const std::string& where,
                                   EvalTask task) {
  auto it = line.find(key);
  if (it == line.end() || !it->is_string()) {
    return InvalidArgument(where, ": no string field '", key, "' (expected the output of `ax-data ",
                           "convert-task --task ", eval_task_name(task), "`)");
  }
  return it->get<std::string>();
}

// A line's id: squad's "id", mnli's "idx" (a number) or "pair_id", else the line number.
std::string example_id(const Json& line, int64_t line_index) {
  for (const char* key : {"id", "idx", "pair_id"}) {
    auto it = line.find(key);
    if (it == line.end()) continue;
    if (it->is_string()) return it->get<std::string>();
    if (it->is_number_integer()) return std::to_string(it->get<int64_t>());
  }
  return std::to_string(line_index);
}

std::vector<int32_t> to_int32(const std::vector<uint32_t>& ids) {
  return std::vector<int32_t>(ids.begin(), ids.end());
}

// The log-probability of `target` under a row of logits, in double.
double log_prob(const std::vector<float>& logits, int32_t target) {
  double top = -std::numeric_limits<double>::infinity();
  for (float v : logits) top = std::max(top, static_cast<double>(v));
  double sum = 0;
  for (float v : logits) sum += std::exp(static_cast<double>(v) - top);
  return static_cast<double>(logits[static_cast<size_t>(target)]) - top - std::log(sum);
}

// The batches of this rank: batch j holds order[j·B, (j+1)·B) and belongs to rank j mod world.
std::vector<std::vector<int64_t>> my_batches(const TaskRows& rows, int64_t batch, int rank,
                                             int world) {
  std::vector<std::vector<int64_t>> out;
  const int64_t n = static_cast<int64_t>(rows.order.size());
  for (int64_t j = 0; j * batch < n; ++j) {
    if (j % world != rank) continue;
    const int64_t end = std::min(n, (j + 1) * batch);
    out.emplace_back(rows.order.begin() + j * batch, rows.order.begin() + end);
  }
  return out;
}

Status decode_batches(const Model& model, const data::Tokenizer& tokenizer, EvalTask task,
                      std::span<const TaskExample> examples, const TaskRows& rows,
                      const TaskShape& shape, const TaskEvalOptions& options,
                      TaskEvalResult* result) {
  const DecodeOptions decode_options{.max_new_tokens = shape.max_new_tokens,
                                     .temperature = 0,
                                     .stop_token = tokenizer.eos_id(),
                                     .pick_below = tokenizer.vocab_size()};
  for (const std::vector<int64_t>& batch :
       my_batches(rows, options.batch, options.rank, options.world)) {
    std::vector<std::vector<int32_t>> inputs;
    for (int64_t i : batch) inputs.push_back(rows.tokens[static_cast<size_t>(i)]);
    AX_ASSIGN_OR_RETURN(Decoded decoded, decode(model, inputs, decode_options));
    for (size_t b = 0; b < batch.size(); ++b) {
      const TaskExample& ex = examples[static_cast<size_t>(batch[b])];
      std::vector<uint32_t> ids(decoded.tokens[b].begin(), decoded.tokens[b].end());
      AX_ASSIGN_OR_RETURN(std::string text, tokenizer.decode(ids));
      TaskPrediction p{.index = batch[b], .prediction = std::move(text)};
      if (task == EvalTask::kMnli) {
        p.correct = p.prediction == ex.targets.front();
        result->accuracy.add(p.prediction, ex.targets.front());
      } else {
        p.correct = std::any_of(ex.targets.begin(), ex.targets.end(), [&](const std::string& t) {
          return squad_exact_match(p.prediction, t);
        });
        result->squad.add(p.prediction, ex.targets);
        result->squad_official.add(p.prediction,
                                   ex.raw_targets.empty() ? ex.targets : ex.raw_targets);
      }
      result->predictions.push_back(std::move(p));
    }
  }
  return Status::Ok();
}

Status score_lambada(Model* model, const data::Tokenizer& tokenizer, const TaskRows& rows,
                     const TaskEvalOptions& options, TaskEvalResult* result) {
  const int64_t B = model->batch(), T = model->seq_len();
  if (rows.longest > T) {
    return InvalidArgument("a Lambada text is ", rows.longest, " tokens, the model's rows ", T);
  }
  const int32_t pad = std::max(0, tokenizer.pad_id());
  for (const std::vector<int64_t>& batch : my_batches(rows, B, options.rank, options.world)) {
    std::vector<int32_t> tokens(static_cast<size_t>(B * T), pad);  // (B, T)
    for (size_t b = 0; b < batch.size(); ++b) {
      const std::vector<int32_t>& row = rows.tokens[static_cast<size_t>(batch[b])];
      std::copy(row.begin(), row.end() - 1, tokens.begin() + static_cast<int64_t>(b) * T);
    }
    model->forward(Batch{.tokens = tokens});
    for (size_t b = 0; b < batch.size(); ++b) {
      const std::vector<int32_t>& row = rows.tokens[static_cast<size_t>(batch[b])];
      const int64_t start = rows.word_start[static_cast<size_t>(batch[b])];
      std::vector<int32_t> target(row.begin() + start, row.end());
      std::vector<int32_t> greedy;
      double nll = 0;
      for (int64_t j = start; j < static_cast<int64_t>(row.size()); ++j) {
        // Token j is predicted at position j - 1.
        // The probability is the whole softmax's (padded rows included, as Hugging Face's);
        // the greedy choice is among the ids the tokenizer decodes.
        const std::vector<float> logits = model->logits(static_cast<int64_t>(b), j - 1);
        const auto decodable =
            logits.begin() + std::min<int64_t>(tokenizer.vocab_size(), std::ssize(logits));
        greedy.push_back(
            static_cast<int32_t>(std::max_element(logits.begin(), decodable) - logits.begin()));
        nll -= log_prob(logits, row[static_cast<size_t>(j)]);
      }
      std::vector<uint32_t> ids(greedy.begin(), greedy.end());
      AX_ASSIGN_OR_RETURN(std::string text, tokenizer.decode(ids));
      result->lambada.add(target, greedy, nll);
      result->predictions.push_back({.index = batch[b],
                                     .prediction = std::move(text),
                                     .correct = last_word_correct(target, greedy),
                                     .nll = nll});
    }
  }
  return Status::Ok();
}

std::string percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

}  // namespace

StatusOr<EvalTask> parse_eval_task(std::string_view name) {
  if (name == "mnli") return EvalTask::kMnli;
  if (name == "squad") return EvalTask::kSquad;
  if (name == "lambada") return EvalTask::kLambada;
  return InvalidArgument("unknown task '", name, "' (known: mnli, squad, lambada)");
}

const char* eval_task_name(EvalTask task) {
  switch (task) {
    case EvalTask::kMnli:
      return "mnli";
    case EvalTask::kSquad:
      return "squad";
    case EvalTask::kLambada:
      return "lambada";
  }
  return "?";
}

int64_t default_max_new_tokens(EvalTask task) {
  return task == EvalTask::kMnli ? 8 : task == EvalTask::kSquad ? 32 : 0;
}

StatusOr<std::vector<TaskExample>> read_task_examples(EvalTask task, const std::string& path,
                                                      int64_t max_examples) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound("cannot open ", path);
  std::vector<TaskExample> out;
  std::string text;
  int64_t line_number = 0;
  while ((max_examples == 0 || static_cast<int64_t>(out.size()) < max_examples) &&
         std::getline(in, text)) {
    ++line_number;
    if (str_trim(text).empty()) continue;
    const std::string where = str_cat(path, ":", line_number);
    const Json line = Json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_discarded() || !line.is_object()) {
      return InvalidArgument(where, ": not a JSON object");
    }
    TaskExample ex;
    ex.id = example_id(line, static_cast<int64_t>(out.size()));
    if (task == EvalTask::kLambada) {
      AX_ASSIGN_OR_RETURN(ex.input, string_field(line, "context", where, task));
      AX_ASSIGN_OR_RETURN(std::string word, string_field(line, "last_word", where, task));
      if (word.empty()) return InvalidArgument(where, ": empty last_word");
      ex.targets.push_back(std::move(word));
    } else {
      AX_ASSIGN_OR_RETURN(ex.input, string_field(line, "inputs", where, task));
      if (task == EvalTask::kMnli) {
        AX_ASSIGN_OR_RETURN(std::string target, string_field(line, "targets", where, task));
        ex.targets.push_back(std::move(target));
      } else {
        auto it = line.find("answers");
        if (it == line.end() || !it->is_array()) {
          return InvalidArgument(where, ": no list field 'answers' (expected the output of ",
                                 "`ax-data convert-task --task squad`)");
        }
        for (const Json& a : *it) {
          if (!a.is_string()) return InvalidArgument(where, ": an answer is not a string");
          ex.targets.push_back(a.get<std::string>());
        }
        if (auto raw = line.find("raw_answers"); raw != line.end() && raw->is_array()) {
          for (const Json& a : *raw) {
            if (!a.is_string()) return InvalidArgument(where, ": a raw answer is not a string");
            ex.raw_targets.push_back(a.get<std::string>());
          }
        }
      }
    }
    out.push_back(std::move(ex));
  }
  if (in.bad()) return Status(StatusCode::kIoError, str_cat("reading ", path));
  if (out.empty()) return InvalidArgument(path, " holds no examples");
  return out;
}

StatusOr<TaskRows> tokenize_task(const data::Tokenizer& tokenizer, EvalTask task,
                                 std::span<const TaskExample> examples, const TaskShape& shape) {
  TaskRows rows;
  const int32_t eos = tokenizer.eos_id();
  if (task == EvalTask::kLambada && shape.t5) {
    return InvalidArgument(
        "Lambada scores a language model's next-word predictions and needs a decoder-only model "
        "(gpt, llama); model.family=t5 has no such objective (evaluate it on mnli or squad)");
  }
  const int64_t prompt_limit = shape.window + 1 - shape.max_new_tokens;
  if (task != EvalTask::kLambada && !shape.t5 && prompt_limit < 1) {
    return InvalidArgument("--max-new-tokens ", shape.max_new_tokens,
                           " leaves no room for a prompt in train.seq_len = ", shape.window);
  }
  for (size_t i = 0; i < examples.size(); ++i) {
    const TaskExample& ex = examples[i];
    std::vector<uint32_t> ids;
    AX_RETURN_IF_ERROR(tokenizer.encode(ex.input, &ids));
    std::vector<int32_t> row = to_int32(ids);
    if (task == EvalTask::kLambada) {
      // lm-evaluation-harness's _encode_pair: the word's tokens are those of context + " " +
      // word after the context's; an empty context starts after an end of document.
      std::vector<uint32_t> whole;
      AX_RETURN_IF_ERROR(tokenizer.encode(str_cat(ex.input, " ", ex.targets.front()), &whole));
      int64_t start = static_cast<int64_t>(std::min(ids.size(), whole.size()));
      row = to_int32(whole);
      if (start == 0) {
        row.insert(row.begin(), std::max(eos, 0));
        start = 1;
      }
      if (start >= static_cast<int64_t>(row.size())) {
        return InvalidArgument("example ", ex.id, ": the last word '", ex.targets.front(),
                               "' adds no tokens after its context");
      }
      // A text longer than the window keeps its last window + 1 tokens.
      const int64_t excess = static_cast<int64_t>(row.size()) - (shape.window + 1);
      if (excess > 0) {
        if (start - excess < 1) {
          return InvalidArgument("example ", ex.id, ": its last word alone is longer than ",
                                 "train.seq_len = ", shape.window, " tokens");
        }
        row.erase(row.begin(), row.begin() + excess);
        start -= excess;
        ++rows.truncated;
      }
      rows.word_start.push_back(start);
      rows.longest = std::max<int64_t>(rows.longest, static_cast<int64_t>(row.size()) - 1);
    } else {
      if (shape.t5) row.push_back(std::max(eos, 0));  // T5's inputs end with EOS, as in training
      const int64_t limit = shape.t5 ? shape.window : prompt_limit;
      if (static_cast<int64_t>(row.size()) > limit) {
        row.resize(static_cast<size_t>(limit));
        ++rows.truncated;
      }
      if (row.empty()) row.push_back(std::max(eos, 0));
      rows.longest = std::max<int64_t>(rows.longest, static_cast<int64_t>(row.size()));
    }
    rows.tokens.push_back(std::move(row));
  }
  rows.order.resize(examples.size());
  std::iota(rows.order.begin(), rows.order.end(), 0);
  std::stable_sort(rows.order.begin(), rows.order.end(), [&](int64_t a, int64_t b) {
    return rows.tokens[static_cast<size_t>(a)].size() < rows.tokens[static_cast<size_t>(b)].size();
  });
  return rows;
}

StatusOr<TaskEvalResult> evaluate_task(Model* model, const data::Tokenizer& tokenizer,
                                       EvalTask task, std::span<const TaskExample> examples,
                                       const TaskRows& rows, const TaskShape& shape,
                                       const TaskEvalOptions& options) {
  if (model->sharded()) {
    return FailedPrecondition(
        "task evaluation needs the whole model on each rank; this one is "
        "sharded (FSDP or tensor parallel)");
  }
  if (options.batch < 1 || options.world < 1 || options.rank < 0 || options.rank >= options.world) {
    return InvalidArgument("task evaluation: batch ", options.batch, ", rank ", options.rank,
                           " of ", options.world);
  }
  TaskEvalResult result;
  result.task = task;
  if (task == EvalTask::kLambada) {
    AX_RETURN_IF_ERROR(score_lambada(model, tokenizer, rows, options, &result));
  } else {
    AX_RETURN_IF_ERROR(
        decode_batches(*model, tokenizer, task, examples, rows, shape, options, &result));
  }
  std::sort(result.predictions.begin(), result.predictions.end(),
            [](const TaskPrediction& a, const TaskPrediction& b) { return a.index < b.index; });
  return result;
}

void TaskEvalResult::merge(const TaskEvalResult& other) {
  accuracy += other.accuracy;
  squad += other.squad;
  squad_official += other.squad_official;
  lambada += other.lambada;
  predictions.insert(predictions.end(), other.predictions.begin(), other.predictions.end());
  std::sort(predictions.begin(), predictions.end(),
            [](const TaskPrediction& a, const TaskPrediction& b) { return a.index < b.index; });
}

std::vector<std::pair<std::string, double>> TaskEvalResult::scores() const {
  auto d = [](int64_t v) { return static_cast<double>(v); };
  switch (task) {
    case EvalTask::kMnli:
      return {{"accuracy", accuracy.accuracy()},
              {"correct", d(accuracy.correct)},
              {"examples", d(accuracy.total)}};
    case EvalTask::kSquad: {
      const SquadScores s = squad.finalize(), o = squad_official.finalize();
      return {{"exact_match", s.exact_match},
              {"f1", s.f1},
              {"official_exact_match", o.exact_match},
              {"official_f1", o.f1},
              {"examples", d(s.count)}};
    }
    case EvalTask::kLambada: {
      const LambadaScores s = lambada.finalize();
      return {{"accuracy", s.accuracy},
              {"ppl", s.doc_perplexity},
              {"token_ppl", s.token_perplexity},
              {"correct", d(lambada.correct)},
              {"examples", d(s.count)}};
    }
  }
  return {};
}

std::string TaskEvalResult::serialize() const {
  Json j;
  j["task"] = eval_task_name(task);
  j["sums"] = {accuracy.correct,  accuracy.total,
               squad.exact_match, squad.f1,
               squad.count,       lambada.correct,
               lambada.count,     lambada.tokens,
               lambada.nll,       squad_official.exact_match,
               squad_official.f1, squad_official.count};
  Json preds = Json::array();
  for (const TaskPrediction& p : predictions) {
    preds.push_back({p.index, p.prediction, p.correct, p.nll});
  }
  j["predictions"] = std::move(preds);
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

StatusOr<TaskEvalResult> TaskEvalResult::parse(std::string_view text) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [] { return DataLoss("a rank's task evaluation result is malformed"); };
  if (j.is_discarded() || !j.is_object() || !j.contains("task") || !j["task"].is_string() ||
      !j.contains("sums") || !j["sums"].is_array() || j["sums"].size() != 12 ||
      !j.contains("predictions") || !j["predictions"].is_array()) {
    return bad();
  }
  TaskEvalResult r;
  AX_ASSIGN_OR_RETURN(r.task, parse_eval_task(j["task"].get<std::string>()));
  int64_t* fields[] = {&r.accuracy.correct,  &r.accuracy.total,
                       &r.squad.exact_match, &r.squad.f1,
                       &r.squad.count,       &r.lambada.correct,
                       &r.lambada.count,     &r.lambada.tokens,
                       &r.lambada.nll,       &r.squad_official.exact_match,
                       &r.squad_official.f1, &r.squad_official.count};
  for (size_t i = 0; i < std::size(fields); ++i) {
    if (!j["sums"][i].is_number_integer()) return bad();
    *fields[i] = j["sums"][i].get<int64_t>();
  }
  for (const Json& p : j["predictions"]) {
    if (!p.is_array() || p.size() != 4 || !p[0].is_number_integer() || !p[1].is_string() ||
        !p[2].is_boolean() || !p[3].is_number()) {
      return bad();
    }
    r.predictions.push_back({.index = p[0].get<int64_t>(),
                             .prediction = p[1].get<std::string>(),
                             .correct = p[2].get<bool>(),
                             .nll = p[3].get<double>()});
  }
  return r;
}

StatusOr<TaskEvalResult> combine_task_results(const TaskEvalResult& local,
                                              const StringAllGather& all_gather) {
  AX_ASSIGN_OR_RETURN(std::vector<std::string> all, all_gather(local.serialize()));
  TaskEvalResult total;
  total.task = local.task;
  for (const std::string& text : all) {
    AX_ASSIGN_OR_RETURN(TaskEvalResult r, TaskEvalResult::parse(text));
    total.merge(r);
  }
  return total;
}

Status write_predictions(const std::string& path, std::span<const TaskExample> examples,
                         const TaskEvalResult& result) {
  std::string out;
  for (const TaskPrediction& p : result.predictions) {
    if (p.index < 0 || p.index >= static_cast<int64_t>(examples.size())) {
      return Internal("prediction for example ", p.index, " of ", examples.size());
    }
    const TaskExample& ex = examples[static_cast<size_t>(p.index)];
    Json line;
    line["id"] = ex.id;
    line["input"] = ex.input;
    line["prediction"] = p.prediction;
    if (result.task == EvalTask::kSquad) {
      line["answers"] = ex.targets;
      double f1 = 0, official_f1 = 0;
      for (const std::string& t : ex.targets) f1 = std::max(f1, squad_f1(p.prediction, t));
      for (const std::string& t : ex.raw_targets.empty() ? ex.targets : ex.raw_targets) {
        official_f1 = std::max(official_f1, squad_f1(p.prediction, t));
      }
      line["f1"] = f1;
      line["official_f1"] = official_f1;
    } else {
      line["target"] = ex.targets.front();
    }
    line["correct"] = p.correct;
    if (result.task == EvalTask::kLambada) line["nll"] = p.nll;
    out += line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  }
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  if (ec)
    return Status(StatusCode::kIoError, str_cat("creating ", parent.string(), ": ", ec.message()));
  return write_file_atomically(path, out);
}

std::string describe_scores(const TaskEvalResult& result) {
  switch (result.task) {
    case EvalTask::kMnli:
      return str_cat("mnli accuracy ", percent(result.accuracy.accuracy()), " % (",
                     result.accuracy.correct, " of ", result.accuracy.total, ")");
    case EvalTask::kSquad: {
      const SquadScores s = result.squad.finalize(), o = result.squad_official.finalize();
      return str_cat("squad exact match ", percent(s.exact_match), " %, F1 ", percent(s.f1),
                     " % (T5's convention: padded answers); official v1.1 script: exact match ",
                     percent(o.exact_match), " %, F1 ", percent(o.f1), " % (raw answers; ", s.count,
                     " questions)");
    }
    case EvalTask::kLambada: {
      const LambadaScores s = result.lambada.finalize();
      return str_cat("lambada accuracy ", percent(s.accuracy), " % (", result.lambada.correct,
                     " of ", s.count, "), perplexity ", percent(s.doc_perplexity), " (per token ",
                     percent(s.token_perplexity), ")");
    }
  }
  return "";
}

}  // namespace ax::train
