// ax-data: train a tokenizer, tokenize text into shards (alone or as the tasks of a job, then
// merge), follow a job's progress, verify and inspect shard sets, convert task files to jsonl.
// Exit status: 0 done, 1 the work failed (the message says why), 2 the command line is wrong,
// 75 tokenize was stopped by a signal (run it again to go on).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/env.h"
#include "ax/common/status.h"
#include "ax/common/strings.h"
#include "ax/datasets/shards/dataset_index.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/text/chat_template.h"
#include "ax/datasets/text/task_convert.h"
#include "ax/datasets/text/tokenize.h"
#include "ax/datasets/text/tokenize_job.h"
#include "ax/datasets/text/tokenizer.h"
#include "inspect.h"

namespace ax::data {
namespace {

constexpr int kExitFailed = 1;

int failed(const CLI::App& cmd, const Status& status) {
  std::string msg = status.message();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::cerr << cli::full_name(cmd) << ": " << msg << "\n";
  return kExitFailed;
}

// --- train-tokenizer -------------------------------------------------------------------------

struct TrainTokenizerArgs {
  TrainTokenizerOptions o;
  bool no_byte_fallback = false;
};

void add_train_tokenizer(CLI::App& app, TrainTokenizerArgs* a) {
  TrainTokenizerOptions& o = a->o;
  app.add_option("--input", o.inputs, "input files or globs (repeatable)")
      ->type_name("FILE")
      ->required();
  app.add_option("--vocab-size", o.vocab_size, "number of pieces")
      ->type_name("N")
      ->required()
      ->check(cli::in_range(8, std::numeric_limits<int32_t>::max()));
  app.add_option("--output", o.output, "model to write (spm.vocab is written beside it)")
      ->type_name("spm.model")
      ->required();
  cli::one_of(app.add_option("--model-type", o.model_type, "algorithm (default bpe)"),
              {"bpe", "unigram"});
  CLI::Option* byte_fallback =
      app.add_flag("--byte-fallback", o.byte_fallback, "unknown characters become bytes (default)");
  app.add_flag("--no-byte-fallback", a->no_byte_fallback, "unknown characters become <unk>")
      ->excludes(byte_fallback);
  app.add_option("--user-symbols", o.user_symbols, "pieces kept whole")
      ->type_name("a,b,...")
      ->delimiter(',')
      ->allow_extra_args(false);
  app.add_option("--extra-ids", o.extra_ids,
                 "T5 sentinels: the top N ids of --vocab-size are <extra_id_0> (highest) ..\n"
                 "<extra_id_N-1>")
      ->type_name("N")
      ->check(cli::in_range(0, 100000));
  app.add_option("--character-coverage", o.character_coverage,
                 "share of characters covered (default 0.9995)")
      ->type_name("F")
      ->check(cli::in_range(0.5, 1.0));
  app.add_option("--max-sentences", o.max_sentences,
                 "sentences sampled for training (0 = all; 2000000)")
      ->type_name("N")
      ->check(cli::in_range(0));
  app.add_option("--field", o.json_field, "JSON field holding the text (default text; a.b nests)")
      ->type_name("NAME");
  app.add_option("--threads", o.threads, "trainer threads (default: all cores)")
      ->type_name("N")
      ->check(cli::in_range(0, 4096));
}

int run_train_tokenizer(const CLI::App& cmd, const TrainTokenizerArgs& a) {
  TrainTokenizerOptions o = a.o;
  o.byte_fallback = !a.no_byte_fallback;
  std::erase(o.user_symbols, "");
  Status st = train_tokenizer(o);
  if (!st.ok()) return failed(cmd, st);
  return 0;
}

// --- tokenize --------------------------------------------------------------------------------

constexpr int kExitStopped = 75;  // a signal stopped the run; finished files are kept

// Set by SIGUSR1 (what job scripts forward before a time limit) and SIGINT (Ctrl-C): tokenize
// stops within about a second and exits 75. SIGTERM keeps its default: srun ends the other tasks
// of a step with it when one task fails, and that must not read as a clean stop.
std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int) { g_stop.store(true); }

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);
}

struct TokenizeArgs {
  TokenizeOptions o;
  std::string format = "text", unit = "line", long_docs = "skip";
  std::string prompt_field = "prompt", response_field = "response";
  std::string messages_field = "messages", chat_template = "simple";
  int tasks = 0, task = 0;
  bool plan_only = false;
};

void add_tokenize_inputs(CLI::App& app, TokenizeArgs* a) {
  TokenizeOptions& o = a->o;
  app.add_option("--tokenizer", o.tokenizer_path,
                 "a SentencePiece .model, a Hugging Face tokenizer.json, or a model\n"
                 "directory holding one (docs/tokenization.md)")
      ->type_name("FILE|DIR")
      ->required();
  app.add_option("--input", o.inputs, "txt, jsonl or jsonl.zst files or globs (repeatable)")
      ->type_name("FILE")
      ->required();
  app.add_option("--output", o.output_dir, "output directory (created when missing)")
      ->type_name("DIR")
      ->required();
  cli::one_of(app.add_option("--format", a->format,
                             "documents, or (inputs, targets) / (prompt, response) pairs from\n"
                             "jsonl, or chat conversations rendered by --template into\n"
                             "(prompt, response) pairs (default text; docs/fine-tuning.md)"),
              {"text", "seq2seq", "prompt-response", "chat"});
  app.add_option("--threads", o.threads, "encoder threads (default: all cores)")
      ->type_name("N")
      ->check(cli::in_range(0, 4096));
  app.add_option("--field", o.source.json_field,
                 "JSON field holding the text (default text; a.b nests)")
      ->type_name("NAME");
  app.add_option("--inputs-field", o.source.inputs_field, "seq2seq input field (default inputs)")
      ->type_name("NAME");
  app.add_option("--targets-field", o.source.targets_field,
                 "seq2seq target field (default targets)")
      ->type_name("NAME");
  app.add_option("--prompt-field", a->prompt_field,
                 "prompt-response: prompt field (default prompt)")
      ->type_name("NAME");
  app.add_option("--response-field", a->response_field,
                 "prompt-response: response field (default response)")
      ->type_name("NAME");
  app.add_option("--messages-field", a->messages_field,
                 "chat: the list of {role, content} messages (default messages)")
      ->type_name("NAME");
  app.add_option("--template", a->chat_template,
                 "chat: simple | llama3 | chatml | a JSON template file | a Hugging Face\n"
                 "model's tokenizer_config.json or directory, its chat_template matched to\n"
                 "one of the three (default simple)")
      ->type_name("NAME|FILE|DIR");
  cli::one_of(
      app.add_option("--text-unit", a->unit, "what one document of a text file is (default line)"),
      {"line", "paragraph", "file"});
  app.add_flag("--skip-bad", o.source.skip_bad, "count and skip bad records instead of failing");
}

void add_tokenize(CLI::App& app, TokenizeArgs* a) {
  TokenizeOptions& o = a->o;
  add_tokenize_inputs(app, a);
  app.add_option("--split-bytes", o.split_bytes,
                 "encode longer documents in pieces of N/2..N bytes (default 4096)")
      ->type_name("N")
      ->check(cli::in_range(kMinSplitBytes, double{1 << 30}));
  app.add_option("--max-doc-bytes", o.source.max_doc_bytes,
                 "documents longer than N bytes: see --long-docs")
      ->type_name("N")
      ->check(cli::in_range(1));
  cli::one_of(app.add_option("--long-docs", a->long_docs,
                             "what happens to them (default skip); counted in the summary"),
              {"skip", "truncate", "fail"});
  app.add_option("--shard-tokens", o.shard_tokens,
                 "start a new shard after N tokens (default 64 Mi)")
      ->type_name("N")
      ->check(cli::in_range(1));
  app.add_option("--zstd-level", o.zstd_level, "compression level 1..19 (default 3)")
      ->type_name("N")
      ->check(cli::in_range(1, 19));
  app.add_flag("--overwrite", o.overwrite, "replace a complete shard set in DIR");
  app.add_option("--progress-seconds", o.progress_seconds,
                 "seconds between progress lines (0 = none; 10)")
      ->type_name("S")
      ->check(cli::in_range(0, 1e9));
  app.add_option("--tasks", a->tasks, "the job's number of tasks (files shared out by bytes)")
      ->type_name("N")
      ->check(cli::in_range(1, 1 << 20));
  app.add_option("--task", a->task, "this task, 0..N-1")
      ->type_name("I")
      ->check(cli::in_range(0, (1 << 20) - 1));
  app.add_flag("--plan-only", a->plan_only,
               "with --tasks: write or check DIR/parts/plan.json, print each task's share,\n"
               "tokenize nothing");
}

// The tokenize options of the command line, with the choices made typed.
TokenizeOptions tokenize_options(const TokenizeArgs& a) {
  TokenizeOptions o = a.o;
  // A prompt-response set is a seq2seq set: the pairs are (prompt, response).
  o.source.seq2seq = a.format != "text";
  if (a.format == "prompt-response" || a.format == "chat") {
    o.source.inputs_field = a.prompt_field;
    o.source.targets_field = a.response_field;
  }
  o.source.text_unit = a.unit == "paragraph" ? TextUnit::kParagraph
                       : a.unit == "file"    ? TextUnit::kFile
                                             : TextUnit::kLine;
  o.source.long_docs = a.long_docs == "truncate" ? LongDocs::kTruncate
                       : a.long_docs == "fail"   ? LongDocs::kFail
                                                 : LongDocs::kSkip;
  o.stop = &g_stop;
  return o;
}

int stopped_or_failed(const CLI::App& cmd, const Status& status) {
  if (status.code() != StatusCode::kAborted) return failed(cmd, status);
  std::cerr << cli::full_name(cmd)
            << ": stopped by a signal; files finished so far are kept, run it again to go on\n";
  return kExitStopped;
}

// --tasks: one task of a job, or (--plan-only) the job's plan.
int run_tokenize_task(const CLI::App& cmd, const TokenizeArgs& a, const TokenizeOptions& o) {
  const int tasks = a.tasks, task = a.task;
  if ((cmd.count("--task") > 0) == a.plan_only) {
    return cli::usage_error(cmd, "--tasks needs either --task I or --plan-only");
  }
  if (task >= tasks) return cli::usage_error(cmd, "--task must be below --tasks");
  if (o.overwrite) return cli::usage_error(cmd, "--overwrite does not go with --tasks");
  if (a.plan_only) {
    StatusOr<JobPlan> plan = prepare_job(o);
    if (!plan.ok()) return failed(cmd, plan.status());
    const auto shares = assign_files(plan->sizes, tasks);
    std::cout << o.output_dir << ": " << plan->files.size() << " input file(s) over " << tasks
              << " task(s)\n";
    for (size_t t = 0; t < shares.size(); ++t) {
      uint64_t bytes = 0;
      for (size_t f : shares[t]) bytes += plan->sizes[f];
      std::cout << "  task " << t << ": " << shares[t].size() << " file(s), "
                << human_bytes(static_cast<double>(bytes)) << "\n";
    }
    return 0;
  }
  catch_stop_signals();
  StatusOr<TaskResult> r = run_task(o, task, tasks);
  if (!r.ok()) return stopped_or_failed(cmd, r.status());
  if (r->merged) {
    std::cout << o.output_dir << ": the job is merged already\n";
  } else {
    std::cout << o.output_dir << ": task " << task << " of " << tasks << " done: " << r->files
              << " file(s), " << r->kept << " of them finished before\n";
  }
  return 0;
}

// --format chat: each input rendered by the template into DIR/rendered/NNNNN-<name>, a
// (prompt, response) jsonl kept for inspection, which is what gets tokenized.
Status render_chat_inputs(const TokenizeArgs& a, TokenizeOptions* o) {
  AX_ASSIGN_OR_RETURN(ChatTemplate chat, ChatTemplate::load(a.chat_template));
  if (!o->overwrite && std::filesystem::exists(std::filesystem::path(o->output_dir) / kIndexFile)) {
    return AlreadyExists(o->output_dir,
                         " already holds a complete shard set; pass --overwrite to replace it");
  }
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TextSource> source, TextSource::open(o->inputs, o->source));
  const std::filesystem::path dir = std::filesystem::path(o->output_dir) / "rendered";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(str_cat("create directory ", dir.string()), ec.value());
  std::vector<std::string> rendered;
  RenderChatStats stats;
  for (const std::string& file : source->files()) {
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%05zu-", rendered.size());
    const std::string out =
        (dir / (prefix + std::filesystem::path(file).filename().string())).string();
    AX_RETURN_IF_ERROR(
        render_chat_file(file, out, chat, a.messages_field, o->source.skip_bad, &stats));
    rendered.push_back(out);
  }
  std::cout << dir.string() << ": " << stats.records << " conversation(s) rendered with template "
            << a.chat_template << ", " << stats.skipped_bad << " bad record(s) skipped\n";
  o->inputs = rendered;
  return Status::Ok();
}

int run_tokenize(const CLI::App& cmd, const TokenizeArgs& a) {
  if (cmd.count("--long-docs") > 0 && cmd.count("--max-doc-bytes") == 0) {
    return cli::usage_error(cmd, "--long-docs needs --max-doc-bytes");
  }
  TokenizeOptions o = tokenize_options(a);
  if (a.format == "chat" && cmd.count("--tasks") > 0) {
    return cli::usage_error(cmd, "--format chat runs as one task (no --tasks)");
  }
  if (cmd.count("--tasks") > 0) return run_tokenize_task(cmd, a, o);
  if (cmd.count("--task") > 0 || a.plan_only) {
    return cli::usage_error(cmd, "--task and --plan-only need --tasks");
  }
  if (a.format == "chat") {
    Status s = render_chat_inputs(a, &o);
    if (!s.ok()) return failed(cmd, s);
  }
  catch_stop_signals();
  StatusOr<DatasetIndex> index = tokenize(o);
  if (!index.ok()) return stopped_or_failed(cmd, index.status());
  std::cout << o.output_dir << ": " << index->shards.size() << " shard(s), " << index->num_docs
            << " docs, " << index->num_tokens << " tokens\n";
  return 0;
}

// --- merge, progress -------------------------------------------------------------------------

constexpr const char* kMergeHelp =
    "Joins the parts a tokenize job's tasks wrote (DIR/parts/) into one shard set in DIR, in\n"
    "input order: index.json lists every shard. Fails, naming a file, while a part is missing.\n"
    "Running it again, or twice at once, is safe.";

int run_merge(const CLI::App& cmd, const std::string& dir) {
  StatusOr<DatasetIndex> index = merge_job(dir);
  if (!index.ok()) return failed(cmd, index.status());
  std::cout << dir << ": " << index->inputs.size() << " input file(s), " << index->shards.size()
            << " shard(s), " << index->num_docs << " docs, " << index->num_tokens << " tokens\n";
  return 0;
}

constexpr const char* kProgressHelp =
    "Where the tokenize job writing DIR stands: bytes done / total, files, and (--watch) rate\n"
    "and ETA every S seconds until every file is done.";

std::string progress_line(const JobProgress& p, double rate, bool with_rate) {
  if (p.merged) return str_cat("merged (", p.files, " input file(s))");
  const double total = static_cast<double>(p.total_bytes), done = static_cast<double>(p.done_bytes);
  char pct[16];
  std::snprintf(pct, sizeof pct, "%.1f%%", total > 0 ? 100.0 * done / total : 100.0);
  std::string line = str_cat(human_bytes(done), " / ", human_bytes(total), " (", pct, "), ",
                             p.files_done, " / ", p.files, " files");
  if (with_rate) {
    char r[32];
    std::snprintf(r, sizeof r, "%.2f MB/s", rate / 1e6);
    line += str_cat(", ", r, ", ETA ", rate > 0 ? human_duration((total - done) / rate) : "?");
  }
  return line;
}

int run_progress(const CLI::App& cmd, const std::string& dir, double watch) {
  using Clock = std::chrono::steady_clock;
  // The observation the rate is measured from: the first, or the last one after the bytes done
  // went down. They do when a stopped job runs again: a task stopped (or killed) mid-file left
  // that file's progress behind, and the new run tokenizes the file from its start.
  std::optional<std::pair<Clock::time_point, uint64_t>> base;
  uint64_t last_done = 0;
  while (true) {
    StatusOr<JobProgress> p = job_progress(dir);
    if (!p.ok() && (watch == 0 || p.status().code() != StatusCode::kNotFound)) {
      return failed(cmd, p.status());
    }
    if (p.ok()) {
      const Clock::time_point now = Clock::now();
      if (!base || p->done_bytes < last_done) base.emplace(now, p->done_bytes);
      last_done = p->done_bytes;
      const double dt = std::chrono::duration<double>(now - base->first).count();
      const double rate =
          dt > 0 ? static_cast<double>(p->done_bytes - base->second) / dt : 0;  // done >= base
      std::cout << "ax-data progress: " << dir << ": "
                << progress_line(*p, rate, watch > 0 && dt > 0) << std::endl;
      if (watch == 0 || p->merged || p->files_done == p->files) return 0;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
  }
}

// --- verify ----------------------------------------------------------------------------------

struct ShardSetArgs {
  std::string dir;
  std::string tokenizer;
  uint64_t samples = 3, encoder_length = 0, seed = 1234;
};

// Opens DIR, checking the tokenizer hash when --tokenizer is given.
StatusOr<std::shared_ptr<ShardSet>> open_set(const std::string& dir, const Tokenizer* tok) {
  std::optional<uint64_t> hash;
  if (tok != nullptr) hash = tok->hash();
  return ShardSet::open(dir, hash);
}

int run_verify(const CLI::App& cmd, const ShardSetArgs& a) {
  const std::string& dir = a.dir;
  std::unique_ptr<Tokenizer> tok;
  if (!a.tokenizer.empty()) {
    StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::load(a.tokenizer);
    if (!t.ok()) return failed(cmd, t.status());
    tok = std::move(t).value();
  }
  StatusOr<std::shared_ptr<ShardSet>> set = open_set(dir, tok.get());
  if (!set.ok()) return failed(cmd, set.status());
  Status st = (*set)->verify();
  if (!st.ok()) return failed(cmd, st);
  std::cout << dir << ": " << (*set)->num_shards() << " shard(s), " << (*set)->num_docs()
            << " docs, " << (*set)->num_tokens() << " tokens: OK\n";
  return 0;
}

// --- inspect (the printer: inspect.cc) -------------------------------------------------------

int run_inspect(const CLI::App& cmd, const ShardSetArgs& a) {
  if (cmd.count("--span-corruption") > 0 && a.tokenizer.empty()) {
    return cli::usage_error(cmd, "--span-corruption needs --tokenizer");
  }
  const std::string& dir = a.dir;
  const uint64_t samples = a.samples, encoder_length = a.encoder_length, seed = a.seed;
  StatusOr<DatasetIndex> idx = read_dataset_index(dir);
  if (!idx.ok()) return failed(cmd, idx.status());
  // With a tokenizer, a mismatch fails before anything is printed.
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<ShardSet> set;
  if (!a.tokenizer.empty()) {
    StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::load(a.tokenizer);
    if (!t.ok()) return failed(cmd, t.status());
    tok = std::move(t).value();
    StatusOr<std::shared_ptr<ShardSet>> s = open_set(dir, tok.get());
    if (!s.ok()) return failed(cmd, s.status());
    set = *s;
  }
  print_counts(dir, *idx);
  if (set && samples > 0) {
    Status st =
        encoder_length > 0
            ? print_span_corruption(*set, *tok, samples, static_cast<int64_t>(encoder_length), seed)
            : print_samples(*set, *tok, samples);
    if (!st.ok()) return failed(cmd, st);
  }
  return 0;
}

// --- convert-task ----------------------------------------------------------------------------

constexpr const char* kConvertTaskHelp =
    "Turns a task's official file into jsonl for 'ax-data tokenize' (docs/evaluation.md):\n"
    "  mnli     GLUE's MNLI tsv or MultiNLI's jsonl -> inputs 'mnli hypothesis: .. premise: ..',\n"
    "           targets entailment|neutral|contradiction (pairs without a gold label skipped)\n"
    "  squad    SQuAD v1.1 JSON -> inputs 'question: .. context: ..', targets the first answer\n"
    "           (T5's punctuation padding), with id, answers and raw_answers for evaluation\n"
    "  lambada  the OpenAI jsonl or LAMBADA plain text -> text, context, last_word\n"
    "Then: ax-data tokenize --format seq2seq (mnli, squad) or --format text (lambada).";

struct ConvertTaskArgs {
  ConvertTaskOptions o;
  std::string task;
};

void add_convert_task(CLI::App& app, ConvertTaskArgs* a) {
  cli::one_of(app.add_option("--task", a->task, "which task the file holds")->required(),
              {"mnli", "squad", "lambada"});
  app.add_option("--input", a->o.input, "the official file")->type_name("FILE")->required();
  app.add_option("--output", a->o.output, "jsonl to write (replaced atomically)")
      ->type_name("OUT.jsonl")
      ->required();
  app.add_flag("--ascii-quotes", a->o.ascii_quotes,
               "lambada: curly quotes become ASCII first, as Pax's Lambada reader does");
}

int run_convert_task(const CLI::App& cmd, const ConvertTaskArgs& a) {
  ConvertTaskOptions o = a.o;
  o.task = a.task == "squad"     ? TaskName::kSquad
           : a.task == "lambada" ? TaskName::kLambada
                                 : TaskName::kMnli;
  if (o.ascii_quotes && o.task != TaskName::kLambada) {
    return cli::usage_error(cmd, "--ascii-quotes goes only with --task lambada");
  }
  StatusOr<ConvertTaskSummary> r = convert_task(o);
  if (!r.ok()) return failed(cmd, r.status());
  std::cout << o.output << ": " << r->written << " examples from " << o.input << " ("
            << r->input_format << ")";
  if (r->skipped > 0) {
    std::cout << "; " << r->skipped
              << (o.task == TaskName::kSquad ? " questions without answers skipped"
                                             : " pairs without a gold label skipped");
  }
  std::cout << "\n";
  return 0;
}

// --- main ------------------------------------------------------------------------------------

// The shard-set commands' options: DIR, and the tokenizer the set was made with.
CLI::App* add_shard_set_command(CLI::App& app, const char* name, const char* help, ShardSetArgs* a,
                                const char* tokenizer_help) {
  CLI::App* cmd = app.add_subcommand(name, help);
  cmd->add_option("DIR", a->dir, "the shard set (index.json and shard-*.axs)")->required();
  cmd->add_option(
         "--tokenizer", a->tokenizer,
         str_cat(tokenizer_help, "\n(a .model, a tokenizer.json, or a directory holding one)"))
      ->type_name("FILE|DIR");
  return cmd;
}

void add_inspect_options(CLI::App& inspect, ShardSetArgs* a) {
  inspect.add_option("--samples", a->samples, "documents to decode (default 3)")
      ->type_name("N")
      ->check(cli::in_range(0, 1000000));
  inspect
      .add_option("--span-corruption", a->encoder_length,
                  "show T5 span corruption for this encoder length (needs a tokenizer with\n"
                  "sentinels)")
      ->type_name("ENC_SL")
      ->check(cli::in_range(0, 1 << 20));
  inspect.add_option("--seed", a->seed, "span-corruption seed, as train.seed (default 1234)")
      ->type_name("N");
}

int main_impl(int argc, char** argv) {
  CLI::App app{
      "Trains tokenizers, tokenizes text into shard sets (alone or as the tasks of a job), and\n"
      "follows, verifies and inspects them; converts task files (MNLI, SQuAD, Lambada) to jsonl.\n"
      "'ax-data COMMAND --help' describes a command.",
      "ax-data"};
  cli::configure(app);
  app.footer(
      "exit status: 0 done, 1 the work failed, 2 the command line is wrong, 75 tokenize was\n"
      "stopped by a signal (run it again to go on).");
  app.require_subcommand(0, 1);
  bool help_env = false;
  app.add_flag("--help-env", help_env, "the environment variables ax reads");

  TrainTokenizerArgs train_tokenizer;
  CLI::App* train_tokenizer_cmd = app.add_subcommand(
      "train-tokenizer",
      "Trains a SentencePiece tokenizer (ids: pad 0, eos 1, unk 2, no bos) on text, JSON lines or\n"
      "zstd-compressed JSON lines (one sentence per line of each document).");
  add_train_tokenizer(*train_tokenizer_cmd, &train_tokenizer);

  TokenizeArgs tokenize;
  CLI::App* tokenize_cmd = app.add_subcommand(
      "tokenize",
      "Encodes documents (EOS appended to each) into a shard set in DIR: shard-*.axs + "
      "index.json.\n"
      "The output is the same for any thread count. Documents longer than --split-bytes are\n"
      "encoded in pieces cut at spaces (docs/tokenization.md). With --tasks N --task I, this is\n"
      "task I of a job of N that tokenizes its share of the input files into DIR/parts/; then\n"
      "'ax-data merge DIR' joins the parts (sbatch/tokenize.sub runs both).");
  add_tokenize(*tokenize_cmd, &tokenize);

  std::string job_dir;
  CLI::App* merge_cmd = app.add_subcommand("merge", kMergeHelp);
  merge_cmd->add_option("DIR", job_dir, "the tokenize job's output directory")->required();

  double watch = 0;
  CLI::App* progress_cmd = app.add_subcommand("progress", kProgressHelp);
  progress_cmd->add_option("DIR", job_dir, "the tokenize job's output directory")->required();
  progress_cmd
      ->add_option("--watch", watch, "print a line every S seconds until the files are done")
      ->type_name("S")
      ->check(cli::in_range(0.1, 86400));

  ShardSetArgs shard_set;
  CLI::App* verify_cmd = add_shard_set_command(
      app, "verify",
      "Reads every frame of every shard in DIR and checks checksums, counts and index.json.",
      &shard_set, "also check the shards were made with it");
  CLI::App* inspect_cmd = add_shard_set_command(
      app, "inspect",
      "Prints the counts of a shard set from its index.json; with --tokenizer, also the first\n"
      "documents decoded back to text; with --span-corruption, the first windows of the token\n"
      "stream as T5 pretraining sees them (inputs and targets decoded, docs/t5.md).",
      &shard_set, "decode sample documents with this model");
  add_inspect_options(*inspect_cmd, &shard_set);

  ConvertTaskArgs convert_task;
  CLI::App* convert_task_cmd = app.add_subcommand("convert-task", kConvertTaskHelp);
  add_convert_task(*convert_task_cmd, &convert_task);

  if (argc < 2) {
    std::cerr << app.help();
    return cli::kExitUsage;
  }
  if (std::optional<int> exit = cli::parse_or_exit(app, argc, argv)) return *exit;
  if (help_env) {
    print_env_help(std::cout);
    return 0;
  }
  if (train_tokenizer_cmd->parsed())
    return run_train_tokenizer(*train_tokenizer_cmd, train_tokenizer);
  if (tokenize_cmd->parsed()) return run_tokenize(*tokenize_cmd, tokenize);
  if (merge_cmd->parsed()) return run_merge(*merge_cmd, job_dir);
  if (progress_cmd->parsed()) return run_progress(*progress_cmd, job_dir, watch);
  if (verify_cmd->parsed()) return run_verify(*verify_cmd, shard_set);
  if (inspect_cmd->parsed()) return run_inspect(*inspect_cmd, shard_set);
  if (convert_task_cmd->parsed()) return run_convert_task(*convert_task_cmd, convert_task);
  return cli::usage_error(app,
                          "a command is needed: train-tokenizer, tokenize, merge, progress, "
                          "verify, inspect or convert-task");
}

}  // namespace
}  // namespace ax::data

int main(int argc, char** argv) { return ax::data::main_impl(argc, argv); }
