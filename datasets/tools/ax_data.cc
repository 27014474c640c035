// ax-data: train a tokenizer, tokenize text into shards (alone or as the tasks of a job, then
// merge), follow a job's progress, verify and inspect shard sets.
// Exit status: 0 done, 1 the work failed (the message says why), 2 the command line is wrong,
// 75 tokenize was stopped by a signal (run it again to go on).
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ax/common/env.h"
#include "ax/common/status.h"
#include "ax/common/strings.h"
#include "ax/datasets/dataset_index.h"
#include "ax/datasets/shard_reader.h"
#include "ax/datasets/tokenize.h"
#include "ax/datasets/tokenize_job.h"
#include "ax/datasets/tokenizer.h"

namespace ax::data {
namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

enum class Arity { kFlag, kValue, kList };

struct OptionSpec {
  const char* name;  // without the leading "--"
  Arity arity;
  const char* metavar;
  const char* help;
};

struct CommandSpec {
  const char* name;
  const char* synopsis;
  const char* summary;
  int positionals;  // exactly this many positional arguments
  std::vector<OptionSpec> options;
};

// The parsed command line of one command. `error` is set when it is wrong.
struct Args {
  std::map<std::string, std::vector<std::string>> values;
  std::vector<std::string> positional;
  std::string error;

  bool has(const std::string& name) const { return values.count(name) > 0; }
  std::string get(const std::string& name, const std::string& def = "") const {
    auto it = values.find(name);
    return it == values.end() || it->second.empty() ? def : it->second.back();
  }
  std::vector<std::string> list(const std::string& name) const {
    auto it = values.find(name);
    return it == values.end() ? std::vector<std::string>{} : it->second;
  }
  void require(const std::string& name, const char* metavar) {
    if (error.empty() && !has(name)) error = str_cat("--", name, " ", metavar, " is required");
  }
  // Integer option in [lo, hi].
  template <typename T>
  void integer(const std::string& name, T* out, int64_t lo, int64_t hi) {
    if (!error.empty() || !has(name)) return;
    std::string v = get(name);
    std::optional<int64_t> n = parse_int64(v);
    if (!n || *n < lo || *n > hi) {
      error = str_cat("--", name, " expects an integer in [", lo, ", ", hi, "], got '", v, "'");
      return;
    }
    *out = static_cast<T>(*n);
  }
  void real(const std::string& name, double* out, double lo, double hi) {
    if (!error.empty() || !has(name)) return;
    std::string v = get(name);
    std::optional<double> x = parse_double(v);
    if (!x || !(*x >= lo && *x <= hi)) {
      error = str_cat("--", name, " expects a number in [", lo, ", ", hi, "], got '", v, "'");
      return;
    }
    *out = *x;
  }
  void choice(const std::string& name, std::string* out, const std::vector<std::string>& allowed) {
    if (!error.empty() || !has(name)) return;
    std::string v = get(name);
    for (const std::string& a : allowed) {
      if (v == a) {
        *out = v;
        return;
      }
    }
    std::string all;
    for (const std::string& a : allowed) all += (all.empty() ? "" : "|") + a;
    error = str_cat("--", name, " expects ", all, ", got '", v, "'");
  }
};

void print_help(const CommandSpec& cmd) {
  std::cout << "usage: ax-data " << cmd.name << " " << cmd.synopsis << "\n\n"
            << cmd.summary << "\n\noptions:\n";
  for (const OptionSpec& o : cmd.options) {
    std::string head = str_cat("  --", o.name, o.arity == Arity::kFlag ? "" : " ", o.metavar);
    std::printf("%-34s %s\n", head.c_str(), o.help);
  }
  std::printf("%-34s %s\n", "  --help", "this text");
}

// Parses argv[first..] for cmd. Returns nullopt after printing --help.
std::optional<Args> parse(const CommandSpec& cmd, int argc, char** argv, int first) {
  Args args;
  for (int i = first; i < argc && args.error.empty(); ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      print_help(cmd);
      return std::nullopt;
    }
    if (!starts_with(arg, "--")) {
      args.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::optional<std::string> inline_value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name.resize(eq);
    }
    const OptionSpec* spec = nullptr;
    for (const OptionSpec& o : cmd.options) {
      if (name == o.name) spec = &o;
    }
    if (spec == nullptr) {
      args.error = str_cat("unknown option '", arg, "' (see ax-data ", cmd.name, " --help)");
      break;
    }
    std::vector<std::string>& vals = args.values[name];
    if (spec->arity == Arity::kFlag) {
      if (inline_value) args.error = str_cat("--", name, " takes no value");
      continue;
    }
    if (inline_value) {
      vals.push_back(*inline_value);
      continue;
    }
    size_t before = vals.size();
    while (i + 1 < argc && !starts_with(argv[i + 1], "--")) {
      vals.emplace_back(argv[++i]);
      if (spec->arity == Arity::kValue) break;
    }
    if (vals.size() == before)
      args.error = str_cat("--", name, " needs a value (", spec->metavar, ")");
  }
  if (args.error.empty() && static_cast<int>(args.positional.size()) != cmd.positionals) {
    args.error = cmd.positionals == 0
                     ? str_cat("unexpected argument '", args.positional.front(), "'")
                     : str_cat("expects ", cmd.synopsis);
  }
  return args;
}

int usage_error(const CommandSpec& cmd, const std::string& what) {
  std::cerr << "ax-data " << cmd.name << ": " << what << "\n";
  return kExitUsage;
}

int failed(const CommandSpec& cmd, const Status& status) {
  std::string msg = status.message();
  for (char& c : msg) {
    if (c == '\n') c = ' ';
  }
  std::cerr << "ax-data " << cmd.name << ": " << msg << "\n";
  return kExitFailed;
}

// --- train-tokenizer -------------------------------------------------------------------------

const CommandSpec kTrainTokenizer = {
    "train-tokenizer",
    "--input FILE... --vocab-size N [--model-type bpe|unigram] --output spm.model",
    "Trains a SentencePiece tokenizer (ids: pad 0, eos 1, unk 2, no bos) on text, JSON lines or\n"
    "zstd-compressed JSON lines (one sentence per line of each document).",
    0,
    {
        {"input", Arity::kList, "FILE...", "input files or globs (repeatable)"},
        {"vocab-size", Arity::kValue, "N", "number of pieces"},
        {"output", Arity::kValue, "spm.model", "model to write (spm.vocab is written beside it)"},
        {"model-type", Arity::kValue, "bpe|unigram", "algorithm (default bpe)"},
        {"byte-fallback", Arity::kFlag, "", "unknown characters become bytes (default)"},
        {"no-byte-fallback", Arity::kFlag, "", "unknown characters become <unk>"},
        {"user-symbols", Arity::kValue, "a,b,...", "pieces kept whole"},
        {"extra-ids", Arity::kValue, "N",
         "T5 sentinels: the top N ids of --vocab-size are <extra_id_0> (highest) .. "
         "<extra_id_N-1>"},
        {"character-coverage", Arity::kValue, "F", "share of characters covered (default 0.9995)"},
        {"max-sentences", Arity::kValue, "N", "sentences sampled for training (0 = all; 2000000)"},
        {"field", Arity::kValue, "NAME", "JSON field holding the text (default text; a.b nests)"},
        {"threads", Arity::kValue, "N", "trainer threads (default: all cores)"},
    }};

int run_train_tokenizer(const Args& parsed) {
  Args args = parsed;
  const CommandSpec& cmd = kTrainTokenizer;
  TrainTokenizerOptions o;
  args.require("input", "FILE...");
  args.require("vocab-size", "N");
  args.require("output", "spm.model");
  args.integer("vocab-size", &o.vocab_size, 8, std::numeric_limits<int32_t>::max());
  args.choice("model-type", &o.model_type, {"bpe", "unigram"});
  args.integer("extra-ids", &o.extra_ids, 0, 100000);
  args.real("character-coverage", &o.character_coverage, 0.5, 1.0);
  args.integer("max-sentences", &o.max_sentences, 0, std::numeric_limits<int64_t>::max());
  args.integer("threads", &o.threads, 0, 4096);
  if (args.has("byte-fallback") && args.has("no-byte-fallback")) {
    args.error = "--byte-fallback and --no-byte-fallback contradict each other";
  }
  if (!args.error.empty()) return usage_error(cmd, args.error);
  o.inputs = args.list("input");
  o.output = args.get("output");
  o.byte_fallback = !args.has("no-byte-fallback");
  o.json_field = args.get("field", o.json_field);
  if (args.has("user-symbols")) {
    for (const std::string& s : str_split(args.get("user-symbols"), ',')) {
      if (!s.empty()) o.user_symbols.push_back(s);
    }
  }
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

const CommandSpec kTokenize = {
    "tokenize",
    "--tokenizer spm.model --input FILE... --output DIR [--format text|seq2seq] [--threads N]",
    "Encodes documents (EOS appended to each) into a shard set in DIR: shard-*.axs + index.json.\n"
    "The output is the same for any thread count. Documents longer than --split-bytes are\n"
    "encoded in pieces cut at spaces (docs/tokenization.md). With --tasks N --task I, this is\n"
    "task I of a job of N that tokenizes its share of the input files into DIR/parts/; then\n"
    "'ax-data merge DIR' joins the parts (sbatch/tokenize.sub runs both).",
    0,
    {
        {"tokenizer", Arity::kValue, "spm.model", "SentencePiece model"},
        {"input", Arity::kList, "FILE...", "txt, jsonl or jsonl.zst files or globs (repeatable)"},
        {"output", Arity::kValue, "DIR", "output directory (created when missing)"},
        {"format", Arity::kValue, "text|seq2seq",
         "documents, or (inputs, targets) pairs from jsonl (default text)"},
        {"threads", Arity::kValue, "N", "encoder threads (default: all cores)"},
        {"field", Arity::kValue, "NAME", "JSON field holding the text (default text; a.b nests)"},
        {"inputs-field", Arity::kValue, "NAME", "seq2seq input field (default inputs)"},
        {"targets-field", Arity::kValue, "NAME", "seq2seq target field (default targets)"},
        {"text-unit", Arity::kValue, "line|paragraph|file",
         "what one document of a text file is (default line)"},
        {"skip-bad", Arity::kFlag, "", "count and skip bad records instead of failing"},
        {"split-bytes", Arity::kValue, "N",
         "encode longer documents in pieces of N/2..N bytes (default 4096)"},
        {"max-doc-bytes", Arity::kValue, "N", "documents longer than N bytes: see --long-docs"},
        {"long-docs", Arity::kValue, "skip|truncate|fail",
         "what happens to them (default skip); counted in the summary"},
        {"shard-tokens", Arity::kValue, "N", "start a new shard after N tokens (default 64 Mi)"},
        {"zstd-level", Arity::kValue, "N", "compression level 1..19 (default 3)"},
        {"overwrite", Arity::kFlag, "", "replace a complete shard set in DIR"},
        {"progress-seconds", Arity::kValue, "S", "seconds between progress lines (0 = none; 10)"},
        {"tasks", Arity::kValue, "N", "the job's number of tasks (files shared out by bytes)"},
        {"task", Arity::kValue, "I", "this task, 0..N-1"},
        {"plan-only", Arity::kFlag, "",
         "with --tasks: write or check DIR/parts/plan.json, print "
         "each task's share, tokenize nothing"},
    }};

// The tokenize options of the command line; args.error says what is wrong.
TokenizeOptions tokenize_options(Args* args) {
  TokenizeOptions o;
  args->require("tokenizer", "spm.model");
  args->require("input", "FILE...");
  args->require("output", "DIR");
  std::string format = "text", unit = "line", long_docs = "skip";
  args->choice("format", &format, {"text", "seq2seq"});
  args->choice("text-unit", &unit, {"line", "paragraph", "file"});
  args->choice("long-docs", &long_docs, {"skip", "truncate", "fail"});
  args->integer("threads", &o.threads, 0, 4096);
  args->integer("shard-tokens", &o.shard_tokens, 1, std::numeric_limits<int64_t>::max());
  args->integer("zstd-level", &o.zstd_level, 1, 19);
  args->integer("split-bytes", &o.split_bytes, kMinSplitBytes, int64_t{1} << 30);
  args->integer("max-doc-bytes", &o.source.max_doc_bytes, 1, std::numeric_limits<int64_t>::max());
  args->real("progress-seconds", &o.progress_seconds, 0.0, 1e9);
  if (args->has("long-docs") && !args->has("max-doc-bytes") && args->error.empty()) {
    args->error = "--long-docs needs --max-doc-bytes";
  }
  o.inputs = args->list("input");
  o.tokenizer_path = args->get("tokenizer");
  o.output_dir = args->get("output");
  o.overwrite = args->has("overwrite");
  o.source.seq2seq = format == "seq2seq";
  o.source.text_unit = unit == "paragraph" ? TextUnit::kParagraph
                       : unit == "file"    ? TextUnit::kFile
                                           : TextUnit::kLine;
  o.source.long_docs = long_docs == "truncate" ? LongDocs::kTruncate
                       : long_docs == "fail"   ? LongDocs::kFail
                                               : LongDocs::kSkip;
  o.source.skip_bad = args->has("skip-bad");
  o.source.json_field = args->get("field", o.source.json_field);
  o.source.inputs_field = args->get("inputs-field", o.source.inputs_field);
  o.source.targets_field = args->get("targets-field", o.source.targets_field);
  o.stop = &g_stop;
  return o;
}

int stopped_or_failed(const CommandSpec& cmd, const Status& status) {
  if (status.code() != StatusCode::kAborted) return failed(cmd, status);
  std::cerr << "ax-data " << cmd.name
            << ": stopped by a signal; files finished so far are kept, run it again to go on\n";
  return kExitStopped;
}

// --tasks: one task of a job, or (--plan-only) the job's plan.
int run_tokenize_task(const Args& args, const TokenizeOptions& o) {
  const CommandSpec& cmd = kTokenize;
  int tasks = 1, task = 0;
  Args a = args;
  a.integer("tasks", &tasks, 1, 1 << 20);
  a.integer("task", &task, 0, (1 << 20) - 1);
  if (a.error.empty() && a.has("task") == a.has("plan-only")) {
    a.error = "--tasks needs either --task I or --plan-only";
  }
  if (a.error.empty() && task >= tasks) a.error = "--task must be below --tasks";
  if (a.error.empty() && o.overwrite) a.error = "--overwrite does not go with --tasks";
  if (!a.error.empty()) return usage_error(cmd, a.error);
  if (a.has("plan-only")) {
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

int run_tokenize(const Args& parsed) {
  Args args = parsed;
  const CommandSpec& cmd = kTokenize;
  TokenizeOptions o = tokenize_options(&args);
  if (!args.error.empty()) return usage_error(cmd, args.error);
  if (args.has("tasks")) return run_tokenize_task(args, o);
  if (args.has("task") || args.has("plan-only")) {
    return usage_error(cmd, "--task and --plan-only need --tasks");
  }
  catch_stop_signals();
  StatusOr<DatasetIndex> index = tokenize(o);
  if (!index.ok()) return stopped_or_failed(cmd, index.status());
  std::cout << o.output_dir << ": " << index->shards.size() << " shard(s), " << index->num_docs
            << " docs, " << index->num_tokens << " tokens\n";
  return 0;
}

// --- merge, progress -------------------------------------------------------------------------

const CommandSpec kMerge = {
    "merge",
    "DIR",
    "Joins the parts a tokenize job's tasks wrote (DIR/parts/) into one shard set in DIR, in\n"
    "input order: index.json lists every shard. Fails, naming a file, while a part is missing.\n"
    "Running it again, or twice at once, is safe.",
    1,
    {}};

int run_merge(const Args& args) {
  const CommandSpec& cmd = kMerge;
  StatusOr<DatasetIndex> index = merge_job(args.positional[0]);
  if (!index.ok()) return failed(cmd, index.status());
  std::cout << args.positional[0] << ": " << index->inputs.size() << " input file(s), "
            << index->shards.size() << " shard(s), " << index->num_docs << " docs, "
            << index->num_tokens << " tokens\n";
  return 0;
}

const CommandSpec kProgress = {
    "progress",
    "DIR [--watch S]",
    "Where the tokenize job writing DIR stands: bytes done / total, files, and (--watch) rate\n"
    "and ETA every S seconds until every file is done.",
    1,
    {
        {"watch", Arity::kValue, "S", "print a line every S seconds until the files are done"},
    }};

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

int run_progress(const Args& parsed) {
  Args args = parsed;
  const CommandSpec& cmd = kProgress;
  double watch = 0;
  args.real("watch", &watch, 0.1, 86400);
  if (!args.error.empty()) return usage_error(cmd, args.error);
  const std::string& dir = args.positional[0];
  using Clock = std::chrono::steady_clock;
  std::optional<std::pair<Clock::time_point, uint64_t>> first;  // the first observation
  while (true) {
    StatusOr<JobProgress> p = job_progress(dir);
    if (!p.ok() && (watch == 0 || p.status().code() != StatusCode::kNotFound)) {
      return failed(cmd, p.status());
    }
    if (p.ok()) {
      const Clock::time_point now = Clock::now();
      if (!first) first.emplace(now, p->done_bytes);
      const double dt = std::chrono::duration<double>(now - first->first).count();
      const double rate = dt > 0 ? static_cast<double>(p->done_bytes - first->second) / dt : 0;
      std::cout << "ax-data progress: " << dir << ": "
                << progress_line(*p, rate, watch > 0 && dt > 0) << std::endl;
      if (watch == 0 || p->merged || p->files_done == p->files) return 0;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
  }
}

// --- verify ----------------------------------------------------------------------------------

const CommandSpec kVerify = {
    "verify",
    "DIR [--tokenizer spm.model]",
    "Reads every frame of every shard in DIR and checks checksums, counts and index.json.",
    1,
    {
        {"tokenizer", Arity::kValue, "spm.model", "also check the shards were made with it"},
    }};

// Opens DIR, checking the tokenizer hash when --tokenizer is given.
StatusOr<std::shared_ptr<ShardSet>> open_set(const std::string& dir, const Tokenizer* tok) {
  std::optional<uint64_t> hash;
  if (tok != nullptr) hash = tok->hash();
  return ShardSet::open(dir, hash);
}

int run_verify(const Args& args) {
  const CommandSpec& cmd = kVerify;
  const std::string& dir = args.positional[0];
  std::unique_ptr<Tokenizer> tok;
  if (args.has("tokenizer")) {
    StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::load(args.get("tokenizer"));
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

// --- inspect ---------------------------------------------------------------------------------

const CommandSpec kInspect = {
    "inspect",
    "DIR [--tokenizer spm.model] [--samples N]",
    "Prints the counts of a shard set from its index.json; with --tokenizer, also the first\n"
    "documents decoded back to text.",
    1,
    {
        {"tokenizer", Arity::kValue, "spm.model", "decode sample documents with this model"},
        {"samples", Arity::kValue, "N", "documents to decode (default 3)"},
    }};

// Text on one line, at most max_bytes, cut at a character boundary.
std::string one_line(std::string text, size_t max_bytes) {
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (text.size() <= max_bytes) return text;
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n) + "...";
}

StatusOr<std::string> decode_doc(const ShardSet& set, const Tokenizer& tok, uint64_t d) {
  auto [begin, end] = set.doc_range(d);
  std::vector<uint32_t> ids(end - begin);
  AX_RETURN_IF_ERROR(set.read(begin, ids));
  const size_t n = ids.size();
  if (!ids.empty() && ids.back() == static_cast<uint32_t>(tok.eos_id())) ids.pop_back();
  AX_ASSIGN_OR_RETURN(std::string text, tok.decode(ids));
  return str_cat("(", n, " tokens) ", one_line(text, 150));
}

Status print_samples(const ShardSet& set, const Tokenizer& tok, uint64_t samples) {
  const bool pairs = set.index().kind == ShardKind::kSeq2Seq;
  const uint64_t docs_per_sample = pairs ? 2 : 1;
  const uint64_t n = std::min(samples, set.num_docs() / docs_per_sample);
  std::cout << "samples (decoded with " << tok.path() << "):\n";
  for (uint64_t i = 0; i < n; ++i) {
    AX_ASSIGN_OR_RETURN(std::string text, decode_doc(set, tok, i * docs_per_sample));
    std::cout << "  [" << i << "] " << (pairs ? "inputs  " : "") << text << "\n";
    if (pairs) {
      AX_ASSIGN_OR_RETURN(std::string targets, decode_doc(set, tok, i * 2 + 1));
      std::cout << "      targets " << targets << "\n";
    }
  }
  return Status::Ok();
}

void print_counts(const std::string& dir, const DatasetIndex& idx) {
  uint64_t bytes = 0;
  for (const ShardEntry& s : idx.shards) bytes += s.bytes;
  const double tokens = static_cast<double>(idx.num_tokens);
  auto ratio = [&](double raw) { return bytes > 0 ? raw / static_cast<double>(bytes) : 0.0; };
  char line[256];
  std::cout << "dataset     " << dir << "\n"
            << "kind        " << (idx.kind == ShardKind::kSeq2Seq ? "seq2seq" : "lm") << "\n";
  std::snprintf(line, sizeof line, "tokenizer   %s, hash %016llx, vocab %u, eos %d, pad %d",
                idx.tokenizer.model_file.c_str(),
                static_cast<unsigned long long>(idx.tokenizer.hash), idx.tokenizer.vocab_size,
                idx.tokenizer.eos_id, idx.tokenizer.pad_id);
  std::cout << line << "\n"
            << "shards      " << idx.shards.size() << "\n"
            << "documents   " << idx.num_docs << "\n";
  std::snprintf(line, sizeof line, "tokens      %llu (%.1f per document)",
                static_cast<unsigned long long>(idx.num_tokens),
                idx.num_docs > 0 ? tokens / static_cast<double>(idx.num_docs) : 0.0);
  std::cout << line << "\n";
  std::snprintf(
      line, sizeof line,
      "bytes       %s on disk; %.2fx smaller than raw uint16 (%s), %.2fx than uint32 (%s)",
      human_bytes(static_cast<double>(bytes)).c_str(), ratio(2 * tokens),
      human_bytes(2 * tokens).c_str(), ratio(4 * tokens), human_bytes(4 * tokens).c_str());
  std::cout << line << "\n";
  std::cout << "skipped     " << idx.skipped_empty << " empty, " << idx.skipped_bad << " bad\n";
  if (!idx.inputs.empty()) {
    std::cout << "inputs      " << idx.inputs.front();
    if (idx.inputs.size() > 1) std::cout << " and " << idx.inputs.size() - 1 << " more";
    std::cout << "\n";
  }
  for (const auto& [name, count] : idx.docs_per_set) {
    std::cout << "set         " << name << ": " << count << " docs\n";
  }
}

int run_inspect(const Args& parsed) {
  Args args = parsed;
  const CommandSpec& cmd = kInspect;
  uint64_t samples = 3;
  args.integer("samples", &samples, 0, 1000000);
  if (!args.error.empty()) return usage_error(cmd, args.error);
  const std::string& dir = args.positional[0];
  StatusOr<DatasetIndex> idx = read_dataset_index(dir);
  if (!idx.ok()) return failed(cmd, idx.status());
  // With a tokenizer, a mismatch fails before anything is printed.
  std::unique_ptr<Tokenizer> tok;
  std::shared_ptr<ShardSet> set;
  if (args.has("tokenizer")) {
    StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::load(args.get("tokenizer"));
    if (!t.ok()) return failed(cmd, t.status());
    tok = std::move(t).value();
    StatusOr<std::shared_ptr<ShardSet>> s = open_set(dir, tok.get());
    if (!s.ok()) return failed(cmd, s.status());
    set = *s;
  }
  print_counts(dir, *idx);
  if (set && samples > 0) {
    Status st = print_samples(*set, *tok, samples);
    if (!st.ok()) return failed(cmd, st);
  }
  return 0;
}

// --- main ------------------------------------------------------------------------------------

struct Command {
  const CommandSpec* spec;
  int (*run)(const Args&);
};

const Command kCommands[] = {
    {&kTrainTokenizer, run_train_tokenizer},
    {&kTokenize, run_tokenize},
    {&kMerge, run_merge},
    {&kProgress, run_progress},
    {&kVerify, run_verify},
    {&kInspect, run_inspect},
};

void print_usage(std::ostream& os) {
  os << "usage: ax-data COMMAND [OPTIONS]\n\ncommands:\n";
  for (const Command& c : kCommands) {
    os << "  ax-data " << c.spec->name << " " << c.spec->synopsis << "\n";
  }
  os << "\n'ax-data COMMAND --help' describes a command; 'ax-data --help-env' lists the "
        "environment variables.\n";
}

int main_impl(int argc, char** argv) {
  if (argc < 2) {
    print_usage(std::cerr);
    return kExitUsage;
  }
  const std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    print_usage(std::cout);
    return 0;
  }
  if (first == "--help-env") {
    print_env_help(std::cout);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (first != c.spec->name) continue;
    std::optional<Args> args = parse(*c.spec, argc, argv, 2);
    if (!args) return 0;
    if (!args->error.empty()) return usage_error(*c.spec, args->error);
    return c.run(*args);
  }
  std::cerr << "ax-data: unknown command '" << first << "' (see ax-data --help)\n";
  return kExitUsage;
}

}  // namespace
}  // namespace ax::data

int main(int argc, char** argv) { return ax::data::main_impl(argc, argv); }
