// ax-data-bench: tokenization against Debian's spm_encode on the same text and
// model, reader throughput, and compressed bytes per token (first table); then
// MB/s and peak memory of `ax-data tokenize` and spm_encode, each a process of
// its own, on three inputs made from the text: ordinary lines, one long line,
// and Pile-layout jsonl.zst (second table). docs/benchmarks-data.md records a
// run and how to reproduce it.
//
//   ax-data-bench --text kjv-train.txt [--tokenizer spm.model] [--threads N]
//   [--seconds S] [--line-mb N] [--jsonl-mb N]
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/logging.h"
#include "ax/common/status.h"
#include "ax/common/strings.h"
#include "ax/datasets/loader/token_loader.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/shards/shard_writer.h"
#include "ax/datasets/text/tokenize.h"
#include "ax/datasets/text/tokenizer.h"

namespace ax::data {
namespace {

constexpr const char* kSpmEncode = "/usr/bin/spm_encode";
constexpr const char* kTime = "/usr/bin/time";  // Debian package time (scripts/setup.sh)
constexpr uint64_t kSeqLen = 2048;
constexpr uint64_t kGlobalBatch = 8;
constexpr uint64_t kWindowBlocks = 64;
// The text's own shard set is a few frames, all cached; the reader is also
// measured on this many copies of its documents, more frames than the cache
// holds.
constexpr int kCopies = 120;

struct Args {
  std::string text;
  std::string tokenizer;
  int threads = 0;
  double seconds = 2.5;
  int64_t line_mb = 100;    // the one-line input (0: left out)
  int64_t jsonl_mb = 1000;  // the jsonl.zst input, in MB of jsonl before compression (0: left out)
};

void add_options(CLI::App& app, Args* args) {
  app.add_option("--text", args->text,
                 "plain text, one document per line, e.g. kjv-train.txt from\n"
                 "`scripts/corpus.sh DIR` (needs the bible-kjv package)")
      ->type_name("FILE")
      ->required();
  app.add_option("--tokenizer", args->tokenizer,
                 "a SentencePiece model; default: train an 8k BPE on --text")
      ->type_name("MODEL");
  app.add_option("--threads", args->threads,
                 "threads for the multi-threaded rows (default: all cores)")
      ->type_name("N")
      ->check(cli::in_range(1));
  app.add_option("--seconds", args->seconds,
                 "minimum duration of each timed measurement (default 2.5)")
      ->type_name("S")
      ->check(cli::in_range(1e-6));
  app.add_option("--line-mb", args->line_mb,
                 "size of the one-line input in MB (default 100; 0 leaves it out)")
      ->type_name("N")
      ->check(cli::in_range(0));
  app.add_option("--jsonl-mb", args->jsonl_mb,
                 "size of the Pile-layout input in MB of jsonl (default 1000; 0: out)")
      ->type_name("N")
      ->check(cli::in_range(0));
}

// What the parser cannot check: the text exists.
Status finish_args(Args* args) {
  if (!std::filesystem::is_regular_file(args->text)) {
    return NotFound(args->text,
                    " does not exist; make it with `scripts/corpus.sh DIR` "
                    "(writes DIR/kjv-train.txt)");
  }
  if (args->threads == 0)
    args->threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return Status::Ok();
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Timing {
  int runs = 0;
  double total_s = 0;
  double best_s = 0;  // the fastest run
};

// Runs `once` until at least `seconds` have passed (at least twice).
StatusOr<Timing> repeat_for(double seconds, const std::function<Status()>& once) {
  Timing t;
  const double start = now();
  do {
    const double t0 = now();
    AX_RETURN_IF_ERROR(once());
    const double run = now() - t0;
    t.best_s = t.runs == 0 ? run : std::min(t.best_s, run);
    ++t.runs;
    t.total_s = now() - start;
  } while (t.total_s < seconds || t.runs < 2);
  return t;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(std::move(line));
  return lines;
}

// Tokenizer::encode over every line, the lines split into `threads` contiguous
// parts.
Status encode_lines(const Tokenizer& tokenizer, const std::vector<std::string>& lines,
                    int threads) {
  std::vector<Status> status(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::vector<uint32_t> ids;
      const size_t begin = lines.size() * t / threads, end = lines.size() * (t + 1) / threads;
      for (size_t i = begin; i < end && status[t].ok(); ++i) {
        ids.clear();
        status[t] = tokenizer.encode(lines[i], &ids);
      }
    });
  }
  for (auto& th : pool) th.join();
  for (const auto& s : status) AX_RETURN_IF_ERROR(s);
  return Status::Ok();
}

// One program run: wall time and the peak resident memory the kernel recorded for it.
struct ProcessRun {
  double seconds = 0;
  double cpu_seconds = 0;  // user + system, all threads
  uint64_t peak_rss = 0;   // bytes
};

// Runs argv (output discarded) under GNU time, which reports its peak memory: wait4() here would
// report this process's own peak, which a child spawned from it inherits at exec. An error
// unless it exits 0.
StatusOr<ProcessRun> run_process(std::vector<std::string> command) {
  const std::string rss_file =
      (std::filesystem::temp_directory_path() / ("ax-data-bench-rss-" + std::to_string(getpid())))
          .string();
  std::vector<std::string> argv_s = {kTime, "-f", "%M %U %S", "-o", rss_file};
  argv_s.insert(argv_s.end(), command.begin(), command.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const double t0 = now();
  const int err = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (err != 0) return IoError(str_cat("spawning ", argv_s[0]), err);
  int wstatus = 0;
  if (waitpid(pid, &wstatus, 0) < 0) return IoError(str_cat("wait for ", command[0]), errno);
  ProcessRun run;
  run.seconds = now() - t0;
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return Internal(command[0], " failed (status ", wstatus, ")");
  }
  std::ifstream in(rss_file);
  uint64_t kib = 0;
  double user = 0, system = 0;
  if (!(in >> kib >> user >> system)) {
    return Internal(kTime, " wrote no peak memory and CPU time to ", rss_file);
  }
  std::filesystem::remove(rss_file);
  run.peak_rss = kib * 1024;
  run.cpu_seconds = user + system;
  return run;
}

// Debian's spm_encode over a text file (one sentence per line), output discarded.
StatusOr<ProcessRun> spm_encode_run(const std::string& model, const std::string& text) {
  return run_process({kSpmEncode, "--model=" + model, "--output_format=id", "--input=" + text,
                      "--output=/dev/null"});
}

Status run_spm_encode(const std::string& model, const std::string& text) {
  return spm_encode_run(model, text).status();
}

StatusOr<double> tokenize_pipeline(const Args& args, const std::string& model,
                                   const std::string& out_dir, int threads) {
  TokenizeOptions options;
  options.inputs = {args.text};
  options.tokenizer_path = model;
  options.output_dir = out_dir;
  options.threads = threads;
  options.overwrite = true;
  options.progress_seconds = 0;
  AX_ASSIGN_OR_RETURN(
      auto timed, repeat_for(args.seconds, [&]() -> Status { return tokenize(options).status(); }));
  return timed.best_s;
}

// Tokens (seq_len per sample, the training tokens) per second of one
// TokenLoader.
StatusOr<double> loader_tokens_per_s(const std::string& dir, size_t cache_frames, double seconds) {
  AX_ASSIGN_OR_RETURN(std::shared_ptr<const ShardSet> set,
                      ShardSet::open(dir, std::nullopt, cache_frames));
  LoaderOptions options;
  options.seq_len = kSeqLen;
  options.global_batch = kGlobalBatch;
  options.window_blocks = kWindowBlocks;
  options.prefetch_batches = 4;
  AX_ASSIGN_OR_RETURN(auto loader, TokenLoader::create(set, options));
  uint64_t batches = 0;
  TokenBatch batch;
  AX_ASSIGN_OR_RETURN(auto timed, repeat_for(seconds, [&]() -> Status {
                        for (int i = 0; i < 16; ++i, ++batches)
                          AX_RETURN_IF_ERROR(loader->next(&batch));
                        return Status::Ok();
                      }));
  return static_cast<double>(batches * kGlobalBatch * kSeqLen) / timed.total_s;
}

// ShardSet::read front to back in 64 Ki-token pieces; with one cached frame per
// shard every frame is decompressed and checked once per pass.
StatusOr<double> sequential_tokens_per_s(const std::string& dir, double seconds) {
  AX_ASSIGN_OR_RETURN(auto set, ShardSet::open(dir, std::nullopt, 1));
  std::vector<uint32_t> buf(65536);
  AX_ASSIGN_OR_RETURN(auto timed, repeat_for(seconds, [&]() -> Status {
                        for (uint64_t at = 0; at < set->num_tokens(); at += buf.size()) {
                          const uint64_t n = std::min<uint64_t>(buf.size(), set->num_tokens() - at);
                          AX_RETURN_IF_ERROR(set->read(at, std::span(buf.data(), n)));
                        }
                        return Status::Ok();
                      }));
  return static_cast<double>(set->num_tokens()) * timed.runs / timed.total_s;
}

// A shard set holding `copies` copies of every document of `from`, with the
// same frame size.
Status write_copies(const ShardSet& from, int copies, const std::string& dir) {
  std::filesystem::create_directories(dir);
  ShardSetWriterOptions options;
  options.shard.frame_tokens = from.index().frame_tokens;
  options.shard.tokenizer_hash = from.index().tokenizer.hash;
  options.tokenizer = from.index().tokenizer;
  AX_ASSIGN_OR_RETURN(auto writer, ShardSetWriter::create(dir, options));
  std::vector<uint32_t> tokens(from.num_tokens());
  AX_RETURN_IF_ERROR(from.read(0, tokens));
  for (int c = 0; c < copies; ++c) {
    for (uint64_t d = 0; d < from.num_docs(); ++d) {
      const auto [begin, end] = from.doc_range(d);
      AX_RETURN_IF_ERROR(writer->add_document(std::span(tokens.data() + begin, end - begin)));
    }
  }
  return writer->finish().status();
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(digits);
  os << v;
  return os.str();
}

void row(const std::string& what, const std::string& value, const std::string& goal = "",
         const std::string& met = "") {
  std::printf("| %-58s | %9s | %-7s | %-4s |\n", what.c_str(), value.c_str(), goal.c_str(),
              met.c_str());
}

std::string yes_no(bool ok) { return ok ? "yes" : "NO"; }

struct Results {
  std::string model;
  double train_s = 0;  // 0: the model was given
  uint32_t vocab = 0;
  double text_mb = 0;
  size_t lines = 0;
  double spm = 0, encode_1 = 0, encode_n = 0, pipe_1 = 0, pipe_n = 0;  // MB/s
  uint64_t tokens = 0, copies_tokens = 0, compressed_bytes = 0;
  uint32_t frame_tokens = 0;
  double loader = 0, loader_copies = 0, loader_copies_default = 0,
         sequential = 0;  // tokens/s
};

StatusOr<std::string> train_bpe(const Args& args, const std::string& work) {
  TrainTokenizerOptions train;
  train.inputs = {args.text};
  train.output = work + "/bpe8k.model";
  train.vocab_size = 8000;
  train.model_type = "bpe";
  train.threads = args.threads;
  AX_RETURN_IF_ERROR(train_tokenizer(train));
  return train.output;
}

// (1) tokenization on the text, (2) reading its shards, (3) their size.
StatusOr<Results> measure(const Args& args, const std::string& work) {
  Results r;
  r.text_mb = static_cast<double>(std::filesystem::file_size(args.text)) / 1e6;
  r.model = args.tokenizer;
  if (r.model.empty()) {
    const double t0 = now();
    AX_ASSIGN_OR_RETURN(r.model, train_bpe(args, work));
    r.train_s = now() - t0;
  }
  AX_ASSIGN_OR_RETURN(auto tokenizer, Tokenizer::load(r.model));
  r.vocab = tokenizer->vocab_size();
  const std::vector<std::string> lines = read_lines(args.text);
  r.lines = lines.size();

  AX_ASSIGN_OR_RETURN(auto spm,
                      repeat_for(args.seconds, [&] { return run_spm_encode(r.model, args.text); }));
  r.spm = r.text_mb / spm.best_s;
  auto encode_mbs = [&](int threads) -> StatusOr<double> {
    AX_ASSIGN_OR_RETURN(
        auto t, repeat_for(args.seconds, [&] { return encode_lines(*tokenizer, lines, threads); }));
    return r.text_mb / t.best_s;
  };
  AX_ASSIGN_OR_RETURN(r.encode_1, encode_mbs(1));
  AX_ASSIGN_OR_RETURN(r.encode_n, encode_mbs(args.threads));
  const std::string shards = work + "/shards";
  AX_ASSIGN_OR_RETURN(const double pipe_1_s, tokenize_pipeline(args, r.model, shards, 1));
  AX_ASSIGN_OR_RETURN(const double pipe_n_s,
                      tokenize_pipeline(args, r.model, shards, args.threads));
  r.pipe_1 = r.text_mb / pipe_1_s;
  r.pipe_n = r.text_mb / pipe_n_s;

  // The shards were just written, so they are in the page cache.
  AX_ASSIGN_OR_RETURN(auto set, ShardSet::open(shards));
  r.tokens = set->num_tokens();
  r.frame_tokens = set->index().frame_tokens;
  for (const auto& s : set->index().shards) r.compressed_bytes += s.bytes;
  const std::string copies = work + "/copies";
  AX_RETURN_IF_ERROR(write_copies(*set, kCopies, copies));
  AX_ASSIGN_OR_RETURN(auto copies_set, ShardSet::open(copies));
  r.copies_tokens = copies_set->num_tokens();
  AX_ASSIGN_OR_RETURN(r.loader, loader_tokens_per_s(shards, kDefaultSetCacheFrames, args.seconds));
  AX_ASSIGN_OR_RETURN(r.loader_copies,
                      loader_tokens_per_s(copies, kDefaultSetCacheFrames, args.seconds));
  AX_ASSIGN_OR_RETURN(r.loader_copies_default, loader_tokens_per_s(copies, 4, args.seconds));
  AX_ASSIGN_OR_RETURN(r.sequential, sequential_tokens_per_s(copies, args.seconds));
  return r;
}

void print_table(const Args& args, const Results& r) {
  const std::string n = std::to_string(args.threads);
  const std::string copies = std::to_string(kCopies) + "x copies";
  auto frames = [&](uint64_t tokens) {
    return std::to_string((tokens + r.frame_tokens - 1) / r.frame_tokens);
  };
  const std::string trained =
      r.train_s > 0 ? str_cat(", trained here in ", fixed(r.train_s, 1), " s") : "";
  std::printf(
      "ax-data-bench: %s (%.2f MB, %zu lines), tokenizer %s (vocab "
      "%u%s), %d threads\n",
      args.text.c_str(), r.text_mb, r.lines, r.model.c_str(), r.vocab, trained.c_str(),
      args.threads);
  std::printf("shard set: %llu tokens, frame %u tokens\n\n",
              static_cast<unsigned long long>(r.tokens), r.frame_tokens);
  row("measurement", "value", "goal", "met");
  row(std::string(58, '-'), std::string(9, '-'), std::string(7, '-'), "----");
  row("spm_encode --output_format=id (1 thread), MB/s", fixed(r.spm, 2));
  row("ax Tokenizer::encode per line, 1 thread, MB/s", fixed(r.encode_1, 2));
  row("ax Tokenizer::encode per line, " + n + " threads, MB/s", fixed(r.encode_n, 2));
  row("ax tokenize() pipeline to shards, 1 thread, MB/s", fixed(r.pipe_1, 2));
  row("ax tokenize() pipeline to shards, " + n + " threads, MB/s", fixed(r.pipe_n, 2));
  auto ratio = [&](const std::string& what, double mbs, double goal) {
    row("  " + what + " / spm", fixed(mbs / r.spm, 3) + "x", ">= " + fixed(goal, 1) + "x",
        yes_no(mbs / r.spm >= goal));
  };
  ratio("encode 1 thread (per core)", r.encode_1, 1.0);
  ratio("encode " + n + " threads", r.encode_n, 1.8);
  ratio("pipeline 1 thread (per core)", r.pipe_1, 1.0);
  ratio("pipeline " + n + " threads", r.pipe_n, 1.8);
  row("TokenLoader, text's set (" + frames(r.tokens) + " frames, all cached), M tok/s",
      fixed(r.loader / 1e6, 1));
  row("TokenLoader, " + copies + " (" + frames(r.copies_tokens) +
          " frames), default cache, M tok/s",
      fixed(r.loader_copies / 1e6, 1), ">= 50", yes_no(r.loader_copies >= 50e6));
  row("TokenLoader, " + copies + ", cache 4, M tok/s", fixed(r.loader_copies_default / 1e6, 1));
  row("ShardSet::read sequential, " + copies + ", M tok/s", fixed(r.sequential / 1e6, 1));
  const double bytes_per_token = static_cast<double>(r.compressed_bytes) / r.tokens;
  row("shard bytes per token (zstd -3, uint32 tokens)", fixed(bytes_per_token, 3));
  row("  vs raw uint16 (2 bytes)", fixed(bytes_per_token / 2, 3) + "x");
  row("  vs raw uint32 (4 bytes)", fixed(bytes_per_token / 4, 3) + "x");
  std::printf(
      "\nTokenization: fastest of >= 2 full passes over the file (MB = "
      "10^6 bytes of text). "
      "Reader: mean over %.1f s,\ntokens = seq_len per sample, "
      "prefetch 4, shard files in the "
      "page cache.\n",
      args.seconds);
}

// --- the second table: whole programs on ordinary and long inputs -----------------------------

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

// The text's lines joined by spaces and repeated until `bytes`: one document on one line.
Status write_line_input(const std::vector<std::string>& lines, uint64_t bytes,
                        const std::string& path) {
  std::ofstream out(path, std::ios::binary);
  uint64_t written = 0;
  for (size_t i = 0; written < bytes; i = (i + 1) % lines.size()) {
    out << lines[i] << ' ';
    written += lines[i].size() + 1;
  }
  out << '\n';
  return out.good() ? Status::Ok() : IoError(str_cat("write ", path), EIO);
}

// The Pile's layout: {"text": ..., "meta": {"pile_set_name": ...}}, documents of 3 to 80 of the
// text's lines, zstd -3, until `jsonl_bytes` of jsonl; beside it the same documents as plain
// text, one per line, for spm_encode (which reads neither JSON nor zstd). Returns the text bytes.
StatusOr<uint64_t> write_pile_input(const std::vector<std::string>& lines, uint64_t jsonl_bytes,
                                    const std::string& zst_path, const std::string& txt_path) {
  static const char* const kSets[] = {"Pile-CC", "Books3", "Github", "ArXiv", "Wikipedia (en)"};
  std::ofstream zst(zst_path, std::ios::binary), txt(txt_path, std::ios::binary);
  std::unique_ptr<ZSTD_CCtx, size_t (*)(ZSTD_CCtx*)> cctx(ZSTD_createCCtx(), ZSTD_freeCCtx);
  ZSTD_CCtx_setParameter(cctx.get(), ZSTD_c_compressionLevel, 3);
  std::vector<char> buf(ZSTD_CStreamOutSize());
  auto compress = [&](const std::string& in, ZSTD_EndDirective mode) -> Status {
    ZSTD_inBuffer input{in.data(), in.size(), 0};
    size_t left = 0;
    do {
      ZSTD_outBuffer output{buf.data(), buf.size(), 0};
      left = ZSTD_compressStream2(cctx.get(), &output, &input, mode);
      if (ZSTD_isError(left)) return Internal("zstd: ", ZSTD_getErrorName(left));
      zst.write(buf.data(), static_cast<std::streamsize>(output.pos));
    } while (mode == ZSTD_e_end ? left != 0 : input.pos < input.size);
    return Status::Ok();
  };
  uint64_t written = 0, text_bytes = 0;
  size_t at = 0;
  for (uint64_t doc = 0; written < jsonl_bytes; ++doc) {
    std::string text;
    for (size_t n = 3 + doc * 7 % 78; n > 0; --n, at = (at + 1) % lines.size()) {
      text += (text.empty() ? "" : " ") + lines[at];
    }
    const std::string record =
        str_cat("{\"text\": \"", json_escape(text), "\", \"meta\": {\"pile_set_name\": \"",
                kSets[doc % 5], "\"}}\n");
    AX_RETURN_IF_ERROR(compress(record, ZSTD_e_continue));
    txt << text << '\n';
    written += record.size();
    text_bytes += text.size() + 1;
  }
  AX_RETURN_IF_ERROR(compress("", ZSTD_e_end));
  if (!zst.good() || !txt.good()) return IoError(str_cat("write ", zst_path), EIO);
  return text_bytes;
}

StatusOr<ProcessRun> ax_data_run(const std::string& model, const std::string& input,
                                 const std::string& out, int threads) {
  return run_process({AX_DATA_BIN, "tokenize", "--tokenizer", model, "--input", input, "--output",
                      out, "--threads", std::to_string(threads), "--overwrite",
                      "--progress-seconds", "0"});
}

// One row per program run, printed at once (a long input's runs take many minutes each).
class ProgramTable {
 public:
  explicit ProgramTable(int threads) : threads_(threads) {}

  void header() const {
    std::printf(
        "\nWhole programs, one run each (peak RSS and CPU time from GNU time). MB/s = MB of "
        "document text per second of wall time; MB/CPU-s per second of CPU time (all threads), "
        "\nwhich a busy machine disturbs less. spm_encode reads the Pile input's documents as "
        "plain text, one per line.\n\n");
    std::printf("| %-23s | %7s | %-23s | %7s | %8s | %10s | %-16s |\n", "input", "text MB",
                "program", "MB/s", "MB/CPU-s", "peak RSS", "MB/CPU-s / spm's");
    std::printf("| %s | %s | %s | %s | %s | %s | %s |\n", std::string(23, '-').c_str(),
                std::string(7, '-').c_str(), std::string(23, '-').c_str(),
                std::string(7, '-').c_str(), std::string(8, '-').c_str(),
                std::string(10, '-').c_str(), std::string(16, '-').c_str());
    std::fflush(stdout);
  }

  // Runs spm_encode on spm_input and ax-data on ax_input (1 and all threads), a row each.
  Status measure(const std::string& model, const std::string& name, const std::string& ax_input,
                 const std::string& spm_input, uint64_t text_bytes, const std::string& out) {
    const double mb = static_cast<double>(text_bytes) / 1e6;
    AX_ASSIGN_OR_RETURN(ProcessRun spm, spm_encode_run(model, spm_input));
    const double spm_per_cpu = mb / spm.cpu_seconds;
    row(name, mb, "spm_encode", spm, spm_per_cpu);
    for (int threads : {1, threads_}) {
      AX_ASSIGN_OR_RETURN(ProcessRun ax, ax_data_run(model, ax_input, out, threads));
      row(name, mb, str_cat("ax-data tokenize, ", threads, " thr"), ax, spm_per_cpu);
    }
    return Status::Ok();
  }

 private:
  static void row(const std::string& name, double mb, const std::string& program,
                  const ProcessRun& run, double spm_per_cpu) {
    const double per_cpu = mb / run.cpu_seconds;
    std::printf("| %-23s | %7.1f | %-23s | %7.2f | %8.2f | %10s | %-16s |\n", name.c_str(), mb,
                program.c_str(), mb / run.seconds, per_cpu,
                human_bytes(static_cast<double>(run.peak_rss)).c_str(),
                (fixed(per_cpu / spm_per_cpu, 3) + "x").c_str());
    std::fflush(stdout);
  }

  int threads_;
};

// Ordinary lines (the text), one long line, Pile-layout jsonl.zst: as many as the sizes ask for.
Status measure_inputs(const Args& args, const std::string& model, const std::string& work) {
  const std::vector<std::string> lines = read_lines(args.text);
  ProgramTable table(args.threads);
  table.header();
  const std::string out = work + "/out";
  AX_RETURN_IF_ERROR(table.measure(model, "ordinary lines (--text)", args.text, args.text,
                                   std::filesystem::file_size(args.text), out));
  if (args.line_mb > 0) {
    const std::string line = work + "/one-line.txt";
    const uint64_t bytes = static_cast<uint64_t>(args.line_mb) * 1000000;
    AX_RETURN_IF_ERROR(write_line_input(lines, bytes, line));
    AX_RETURN_IF_ERROR(
        table.measure(model, "one line", line, line, std::filesystem::file_size(line), out));
    std::filesystem::remove(line);
  }
  if (args.jsonl_mb > 0) {
    const std::string zst = work + "/pile.jsonl.zst", txt = work + "/pile.txt";
    AX_ASSIGN_OR_RETURN(
        uint64_t text_bytes,
        write_pile_input(lines, static_cast<uint64_t>(args.jsonl_mb) * 1000000, zst, txt));
    AX_RETURN_IF_ERROR(table.measure(model, "Pile jsonl.zst", zst, txt, text_bytes, out));
  }
  return Status::Ok();
}

Status run(const Args& args) {
  const std::string work =
      std::filesystem::temp_directory_path() / ("ax-data-bench-" + std::to_string(getpid()));
  std::filesystem::create_directories(work);
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{work};
  AX_ASSIGN_OR_RETURN(const Results results, measure(args, work));
  print_table(args, results);
  std::fflush(stdout);
  return measure_inputs(args, results.model, work);
}

}  // namespace
}  // namespace ax::data

int main(int argc, char** argv) {
  // One table on stdout; the library's progress lines only with AX_LOG_LEVEL
  // set.
  ax::set_default_log_level(ax::LogLevel::kWarn);
  CLI::App app{
      "Measures tokenization and shard reading against their peers (spm_encode, raw\n"
      "token files); docs/benchmarks-data.md.",
      "ax-data-bench"};
  ax::cli::configure(app);
  ax::data::Args args;
  ax::data::add_options(app, &args);
  if (std::optional<int> exit = ax::cli::parse_or_exit(app, argc, argv)) return *exit;
  if (ax::Status st = ax::data::finish_args(&args); !st.ok()) {
    std::cerr << "ax-data-bench: " << st.message() << "\n";
    return 2;
  }
  const ax::Status status = ax::data::run(args);
  if (!status.ok()) {
    std::cerr << "ax-data-bench: " << status.to_string() << "\n";
    return 1;
  }
  return 0;
}
