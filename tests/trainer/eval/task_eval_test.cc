// Task evaluation end to end on tiny models trained here for a few steps: official-format MNLI,
// SQuAD and Lambada files made from real text and converted with ax-data's converter, evaluated
// by `ax-train eval`'s library function. The predictions file and the metrics.jsonl record agree
// with counts recomputed from the predictions; two forked ranks give the numbers (and the
// predictions file) of one process; evaluation during training writes its records, equal to
// `ax-train eval` on the same checkpoint.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "ax/datasets/text/task_convert.h"
#include "ax/trainer/eval/task_metrics.h"
#include "ax/trainer/train/eval_command.h"
#include "ax/trainer/train/train_loop.h"
#include "model_test_util.h"
#include "test_files.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (!line.empty()) out.push_back(Json::parse(line));
  }
  return out;
}

// The lines of real text with at least `min_words` words.
std::vector<std::string> text_lines(size_t count, size_t min_words) {
  std::vector<std::string> out;
  std::istringstream in(testing::english_text(120000));
  std::string line;
  while (out.size() < count && std::getline(in, line)) {
    std::istringstream words(line);
    size_t n = 0;
    for (std::string w; words >> w;) ++n;
    if (n >= min_words && line.find_first_of("\"\\\t") == std::string::npos) out.push_back(line);
  }
  return out;
}

std::string first_word(const std::string& line) {
  std::istringstream in(line);
  std::string w;
  in >> w;
  return w;
}

// The official files, converted once: MultiNLI jsonl, SQuAD v1.1 JSON, OpenAI's Lambada jsonl.
struct TaskFiles {
  std::string dir, mnli, squad, lambada;
};

const TaskFiles& task_files() {
  static const TaskFiles files = [] {
    TaskFiles f;
    f.dir = testing::corpus().train_dir + "/../../tasks";
    fs::create_directories(f.dir);
    const std::vector<std::string> lines = text_lines(60, 6);
    const char* labels[] = {"entailment", "neutral", "contradiction"};
    {
      std::ofstream out(f.dir + "/multinli.jsonl");
      for (size_t i = 0; i + 1 < 25; ++i) {
        Json j = {{"gold_label", labels[i % 3]},
                  {"pairID", std::to_string(1000 + i) + "e"},
                  {"sentence1", lines[i]},
                  {"sentence2", lines[i + 1]}};
        out << j.dump() << "\n";
      }
    }
    {
      // One paragraph per question, its line, so that answer_start 0 is where the answer is
      // (convert-task checks it).
      Json paragraphs = Json::array();
      for (size_t i = 0; i < 20; ++i) {
        const std::string answer = first_word(lines[30 + i]);
        Json qa = {{"question", "What starts the line " + std::to_string(i) + "?"},
                   {"id", "q" + std::to_string(i)},
                   {"answers", {{{"text", answer}, {"answer_start", 0}}}}};
        paragraphs.push_back({{"context", lines[30 + i]}, {"qas", Json::array({qa})}});
      }
      Json doc = {{"version", "1.1"},
                  {"data", {{{"title", "fortunes"}, {"paragraphs", paragraphs}}}}};
      std::ofstream(f.dir + "/squad.json") << doc.dump();
    }
    {
      std::ofstream out(f.dir + "/lambada_test.jsonl");
      for (size_t i = 0; i < 22; ++i) out << Json({{"text", lines[i]}}).dump() << "\n";
    }
    for (auto [task, in, out] :
         {std::tuple{data::TaskName::kMnli, "/multinli.jsonl", &f.mnli},
          std::tuple{data::TaskName::kSquad, "/squad.json", &f.squad},
          std::tuple{data::TaskName::kLambada, "/lambada_test.jsonl", &f.lambada}}) {
      *out = f.dir + std::string(in) + ".converted.jsonl";
      StatusOr<data::ConvertTaskSummary> s =
          data::convert_task({.task = task, .input = f.dir + in, .output = *out});
      EXPECT_TRUE(s.ok()) << s.status().to_string();
    }
    return f;
  }();
  return files;
}

const std::vector<std::string> kCommon = {"train.global_batch=4", "train.log_every=100",
                                          "train.checkpoint_every=0", "train.eval_every=0"};

// A run of `steps` steps of `experiment` (t5 and gpt on the fine-tuning examples), made once.
std::string trained_run(const std::string& experiment, int steps,
                        const std::vector<std::string>& extra = {}) {
  const std::string run_dir =
      task_files().dir + "/../runs/" + experiment + "_" + std::to_string(steps) +
      (extra.empty() ? std::string() : "_" + std::to_string(std::hash<std::string>{}(extra[0])));
  if (fs::exists(run_dir + "/checkpoints")) return run_dir;
  std::vector<std::string> overrides = kCommon;
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  overrides.push_back("train.max_steps=" + std::to_string(steps));
  const Config config = testing::seq2seq_config(experiment, overrides);
  std::ostringstream out;
  TrainOptions options;
  options.device = "cpu";
  options.threads = 1;
  options.out = &out;
  StatusOr<TrainOutcome> outcome = train(config, run_dir, options);
  EXPECT_TRUE(outcome.ok()) << outcome.status().to_string() << "\n" << out.str();
  return run_dir;
}

EvalCommandOptions eval_options(const std::string& run_dir, const std::string& task,
                                const std::string& data, const std::string& predictions) {
  EvalCommandOptions o;
  o.run_dir = run_dir;
  o.task = task;
  o.data = data;
  o.batch = 4;
  o.max_new_tokens = 6;
  o.predictions = predictions;
  o.device = "cpu";
  o.threads = 1;
  return o;
}

// The last metrics.jsonl record of `task`.
Json last_task_record(const std::string& run_dir, const std::string& task) {
  Json last;
  for (const Json& j : read_jsonl(run_dir + "/metrics.jsonl")) {
    if (j.contains("task") && j["task"] == task) last = j;
  }
  return last;
}

TEST(TaskEval, MnliOnT5AccuracyIsTheCountOfCorrectPredictions) {
  const std::string run = trained_run("tiny-t5", 3);
  const std::string preds = run + "/mnli.predictions.jsonl";
  std::ostringstream log;
  StatusOr<TaskEvalResult> r =
      run_eval_command(eval_options(run, "mnli", task_files().mnli, preds), log);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_NE(log.str().find("mnli accuracy"), std::string::npos) << log.str();
  const std::vector<Json> lines = read_jsonl(preds);
  const std::vector<Json> examples = read_jsonl(task_files().mnli);
  ASSERT_EQ(lines.size(), 24u);
  ASSERT_EQ(examples.size(), 24u);
  int64_t correct = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const Json& p = lines[i];
    EXPECT_EQ(p["id"], std::to_string(examples[i]["idx"].get<int64_t>()));
    EXPECT_EQ(p["input"], examples[i]["inputs"]);
    EXPECT_EQ(p["target"], examples[i]["targets"]);
    EXPECT_EQ(p["correct"].get<bool>(), p["prediction"] == p["target"]);
    correct += p["correct"].get<bool>() ? 1 : 0;
  }
  const Json record = last_task_record(run, "mnli");
  ASSERT_FALSE(record.is_null());
  EXPECT_EQ(record["step"], 3);
  EXPECT_EQ(record["examples"], 24);
  EXPECT_EQ(record["correct"], correct);
  EXPECT_NEAR(record["accuracy"].get<double>(), 100.0 * static_cast<double>(correct) / 24, 1e-12);
}

TEST(TaskEval, SquadOnGptScoresEveryQuestionAgainstItsAnswers) {
  const std::string run = trained_run("tiny-gpt", 3);
  const std::string preds = run + "/squad.predictions.jsonl";
  std::ostringstream log;
  EvalCommandOptions o = eval_options(run, "squad", task_files().squad, preds);
  o.max_examples = 15;
  StatusOr<TaskEvalResult> r = run_eval_command(o, log);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::vector<Json> lines = read_jsonl(preds);
  ASSERT_EQ(lines.size(), 15u);
  int64_t exact = 0;
  double f1 = 0, official_f1 = 0;
  const std::vector<Json> examples = read_jsonl(task_files().squad);
  for (size_t i = 0; i < lines.size(); ++i) {
    const Json& p = lines[i];
    const std::vector<std::string> answers = p["answers"].get<std::vector<std::string>>();
    ASSERT_FALSE(answers.empty());
    double best = 0, best_raw = 0;
    bool match = false;
    for (const std::string& a : answers) {
      best = std::max(best, squad_f1(p["prediction"].get<std::string>(), a));
      match = match || squad_exact_match(p["prediction"].get<std::string>(), a);
    }
    // The official v1.1 script's F1: against the file's raw answers, not T5's padded ones.
    for (const std::string& a : examples[i]["raw_answers"].get<std::vector<std::string>>()) {
      best_raw = std::max(best_raw, squad_f1(p["prediction"].get<std::string>(), a));
    }
    EXPECT_EQ(p["correct"].get<bool>(), match);
    EXPECT_DOUBLE_EQ(p["f1"].get<double>(), best);
    EXPECT_DOUBLE_EQ(p["official_f1"].get<double>(), best_raw);
    exact += match ? 1 : 0;
    f1 += best;
    official_f1 += best_raw;
  }
  const Json record = last_task_record(run, "squad");
  ASSERT_FALSE(record.is_null());
  EXPECT_EQ(record["examples"], 15);
  EXPECT_NEAR(record["exact_match"].get<double>(), 100.0 * static_cast<double>(exact) / 15, 1e-9);
  EXPECT_NEAR(record["f1"].get<double>(), 100.0 * f1 / 15, 1e-9);
  EXPECT_NEAR(record["official_f1"].get<double>(), 100.0 * official_f1 / 15, 1e-9);
  EXPECT_TRUE(record.contains("official_exact_match"));
  EXPECT_NE(log.str().find("(T5's convention: padded answers); official v1.1 script: exact match"),
            std::string::npos)
      << log.str();
}

// Issue 28: T5's convention scores the prediction against the punctuation-padded answers (what
// the model was trained to write), the official v1.1 script against the raw ones: "41 , 000" is
// an exact match for the first and not for the second ("41 000" against "41000"), and the two
// add up separately over ranks.
TEST(TaskEval, SquadReportsT5sConventionAndTheOfficialScriptsApart) {
  TaskEvalResult a, b;
  a.task = b.task = EvalTask::kSquad;
  const std::vector<std::string> padded = {"41 , 000"}, raw = {"41,000"};
  a.squad.add("41 , 000", padded);
  a.squad_official.add("41 , 000", raw);
  b.squad.add("the stadium", std::vector<std::string>{"stadium"});
  b.squad_official.add("the stadium", std::vector<std::string>{"Stadium"});
  StatusOr<TaskEvalResult> back = TaskEvalResult::parse(a.serialize());
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  back->merge(b);
  std::map<std::string, double> scores;
  for (const auto& [name, value] : back->scores()) scores[name] = value;
  EXPECT_DOUBLE_EQ(scores["exact_match"], 100);
  EXPECT_DOUBLE_EQ(scores["official_exact_match"], 50);
  EXPECT_DOUBLE_EQ(scores["f1"], 100);
  EXPECT_NEAR(scores["official_f1"], 50, 1e-9);
  EXPECT_EQ(scores["examples"], 2);
}

TEST(TaskEval, LambadaOnGptAccuracyAndPerplexityFromThePredictions) {
  const std::string run = trained_run("tiny-gpt", 3);
  const std::string preds = run + "/lambada.predictions.jsonl";
  std::ostringstream log;
  StatusOr<TaskEvalResult> r =
      run_eval_command(eval_options(run, "lambada", task_files().lambada, preds), log);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const std::vector<Json> lines = read_jsonl(preds);
  const std::vector<Json> examples = read_jsonl(task_files().lambada);
  ASSERT_EQ(lines.size(), examples.size());
  int64_t correct = 0;
  double nll = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["target"], examples[i]["last_word"]);
    EXPECT_EQ(lines[i]["input"], examples[i]["context"]);
    EXPECT_GT(lines[i]["nll"].get<double>(), 0);
    correct += lines[i]["correct"].get<bool>() ? 1 : 0;
    nll += lines[i]["nll"].get<double>();
  }
  const double n = static_cast<double>(lines.size());
  const Json record = last_task_record(run, "lambada");
  ASSERT_FALSE(record.is_null());
  EXPECT_EQ(record["correct"], correct);
  EXPECT_NEAR(record["accuracy"].get<double>(), 100.0 * static_cast<double>(correct) / n, 1e-12);
  EXPECT_NEAR(record["ppl"].get<double>(), std::exp(nll / n), 1e-6 * std::exp(nll / n));
}

TEST(TaskEval, LambadaOnT5IsRefused) {
  const std::string run = trained_run("tiny-t5", 3);
  std::ostringstream log;
  StatusOr<TaskEvalResult> r =
      run_eval_command(eval_options(run, "lambada", task_files().lambada, ""), log);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs a decoder-only model"), std::string::npos)
      << r.status().message();
}

TEST(TaskEval, AFileOfAnotherTaskIsRefusedNamingTheLineAndField) {
  const std::string run = trained_run("tiny-t5", 3);
  std::ostringstream log;
  StatusOr<TaskEvalResult> r =
      run_eval_command(eval_options(run, "mnli", task_files().lambada, ""), log);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(":1: no string field 'inputs'"), std::string::npos)
      << r.status().message();
}

// `ax-train eval` on `world` forked ranks of a job; rank 0 writes the predictions.
void run_sharded(const EvalCommandOptions& options, int world) {
  const std::string coordinator = "127.0.0.1:" + std::to_string(ax::testing::free_port());
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      EvalCommandOptions o = options;
      job::JobContext ctx;
      ctx.source = job::ContextSource::kAx;
      ctx.rank = rank;
      ctx.world = world;
      ctx.local_rank = rank;
      ctx.local_world = world;
      ctx.device = "cpu";
      ctx.coordinator = coordinator;
      ctx.secret = "task-eval-test-secret-0123456789abcdef";
      o.context = ctx;
      std::ostringstream log;
      StatusOr<TaskEvalResult> r = run_eval_command(o, log);
      if (!r.ok()) std::fprintf(stderr, "rank %d: %s\n", rank, r.status().to_string().c_str());
      std::fflush(nullptr);
      ::_exit(r.ok() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a rank failed";
  }
}

void expect_sharded_equals_one_process(const std::string& run, const std::string& task,
                                       const std::string& data) {
  const std::string one = run + "/" + task + ".one.jsonl";
  const std::string two = run + "/" + task + ".two.jsonl";
  std::ostringstream log;
  ASSERT_TRUE(run_eval_command(eval_options(run, task, data, one), log).ok());
  const Json single = last_task_record(run, task);
  const size_t records = read_jsonl(run + "/metrics.jsonl").size();
  run_sharded(eval_options(run, task, data, two), 2);
  EXPECT_EQ(read_jsonl(run + "/metrics.jsonl").size(), records + 1) << "rank 0 writes one record";
  const Json sharded = last_task_record(run, task);
  ASSERT_FALSE(single.is_null());
  EXPECT_EQ(single.dump(), sharded.dump());
  EXPECT_EQ(slurp(one), slurp(two));
  EXPECT_FALSE(slurp(one).empty());
}

TEST(TaskEval, TwoRanksGiveTheNumbersOfOneProcess) {
  expect_sharded_equals_one_process(trained_run("tiny-t5", 3), "mnli", task_files().mnli);
  expect_sharded_equals_one_process(trained_run("tiny-gpt", 3), "lambada", task_files().lambada);
}

TEST(TaskEval, DuringTrainingEveryEvalEveryStepsAsAxTrainEvalComputesIt) {
  const std::string run = trained_run(
      "tiny-t5", 4,
      {"train.eval_task=mnli", "train.eval_task_data=" + task_files().mnli, "train.eval_every=2",
       "train.eval_task_max_new_tokens=6", "train.checkpoint_every=2"});
  std::vector<int64_t> steps;
  Json in_training;
  for (const Json& j : read_jsonl(run + "/metrics.jsonl")) {
    if (j.contains("task")) {
      steps.push_back(j["step"].get<int64_t>());
      in_training = j;
    }
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{2, 4}));
  const std::string during = run + "/predictions/mnli_step_4.jsonl";
  ASSERT_TRUE(fs::exists(during));
  // The same checkpoint through ax-train eval, with the loop's batch (its micro-batch, 4 rows).
  EvalCommandOptions o = eval_options(run, "mnli", task_files().mnli, run + "/after.jsonl");
  o.step = 4;
  std::ostringstream log;
  ASSERT_TRUE(run_eval_command(o, log).ok());
  EXPECT_EQ(last_task_record(run, "mnli").dump(), in_training.dump());
  EXPECT_EQ(slurp(run + "/after.jsonl"), slurp(during));
}

TEST(TaskEval, DuringTrainingAFileOfAnotherTaskFailsBeforeTheFirstStep) {
  std::vector<std::string> overrides = kCommon;
  overrides.push_back("train.eval_every=2");
  overrides.push_back("train.eval_task=mnli");
  overrides.push_back("train.eval_task_data=" + task_files().lambada);
  const Config config = testing::seq2seq_config("tiny-t5", overrides);
  std::ostringstream out;
  TrainOptions options;
  options.device = "cpu";
  options.threads = 1;
  options.out = &out;
  StatusOr<TrainOutcome> outcome = train(config, task_files().dir + "/../runs/bad-task", options);
  ASSERT_FALSE(outcome.ok());
  EXPECT_NE(outcome.status().message().find("train.eval_task_data"), std::string::npos)
      << outcome.status().message();
  EXPECT_EQ(out.str().find("step "), std::string::npos);
}

}  // namespace
}  // namespace ax::train
