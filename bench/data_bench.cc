// ax-data-bench: tokenization against Debian's spm_encode on the same text and
// model, reader throughput, and compressed bytes per token. Prints one table;
// docs/benchmarks-data.md records a run and how to reproduce it.
//
//   ax-data-bench --text kjv-train.txt [--tokenizer spm.model] [--threads N]
//   [--seconds S]
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

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

#include "ax/common/logging.h"
#include "ax/common/status.h"
#include "ax/common/strings.h"
#include "ax/datasets/shard_reader.h"
#include "ax/datasets/shard_writer.h"
#include "ax/datasets/token_loader.h"
#include "ax/datasets/tokenize.h"
#include "ax/datasets/tokenizer.h"

namespace ax::data {
namespace {

constexpr const char* kSpmEncode = "/usr/bin/spm_encode";
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
};

constexpr const char* kUsage =
    "usage: ax-data-bench --text FILE [--tokenizer MODEL] [--threads N] "
    "[--seconds S]\n"
    "  --text       plain text, one document per line, e.g. kjv-train.txt "
    "from\n"
    "               `scripts/corpus.sh DIR` (needs the bible-kjv package)\n"
    "  --tokenizer  a SentencePiece model; default: train an 8k BPE on --text\n"
    "  --threads    threads for the multi-threaded rows (default: all cores)\n"
    "  --seconds    minimum duration of each timed measurement (default 2.5)\n";

StatusOr<Args> parse_args(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") return InvalidArgument(kUsage);
    if (i + 1 >= argc) return InvalidArgument(flag, " needs a value\n", kUsage);
    const std::string value = argv[++i];
    if (flag == "--text") {
      args.text = value;
    } else if (flag == "--tokenizer") {
      args.tokenizer = value;
    } else if (flag == "--threads") {
      auto n = parse_int64(value);
      if (!n || *n < 1) return InvalidArgument("--threads must be a positive integer: ", value);
      args.threads = static_cast<int>(*n);
    } else if (flag == "--seconds") {
      auto s = parse_double(value);
      if (!s || *s <= 0) return InvalidArgument("--seconds must be positive: ", value);
      args.seconds = *s;
    } else {
      return InvalidArgument("unknown flag ", flag, "\n", kUsage);
    }
  }
  if (args.text.empty()) return InvalidArgument("--text is required\n", kUsage);
  if (!std::filesystem::is_regular_file(args.text)) {
    return NotFound(args.text,
                    " does not exist; make it with `scripts/corpus.sh DIR` "
                    "(writes DIR/kjv-train.txt)");
  }
  if (args.threads == 0)
    args.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return args;
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

// Debian's spm_encode over the same file, output discarded.
Status run_spm_encode(const std::string& model, const std::string& text) {
  std::vector<std::string> argv_s = {kSpmEncode, "--model=" + model, "--output_format=id",
                                     "--input=" + text, "--output=/dev/null"};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, kSpmEncode, nullptr, nullptr, argv.data(), environ);
  if (err != 0)
    return IoError(str_cat("spawning ", kSpmEncode, " (Debian package sentencepiece)"), err);
  int wstatus = 0;
  if (waitpid(pid, &wstatus, 0) < 0) return IoError("waitpid spm_encode", errno);
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return Internal(kSpmEncode, " failed (status ", wstatus, ")");
  }
  return Status::Ok();
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
  return Status::Ok();
}

}  // namespace
}  // namespace ax::data

int main(int argc, char** argv) {
  // One table on stdout; the library's progress lines only with AX_LOG_LEVEL
  // set.
  if (std::getenv("AX_LOG_LEVEL") == nullptr) ax::set_log_level(ax::LogLevel::kWarn);
  auto args = ax::data::parse_args(argc, argv);
  if (!args.ok()) {
    std::cerr << "ax-data-bench: " << args.status().message() << "\n";
    return 2;
  }
  const ax::Status status = ax::data::run(*args);
  if (!status.ok()) {
    std::cerr << "ax-data-bench: " << status.to_string() << "\n";
    return 1;
  }
  return 0;
}
