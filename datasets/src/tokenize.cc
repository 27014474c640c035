// The tokenize pipeline: one reader thread cuts the input into chunks of documents, N workers
// encode chunks with the one shared tokenizer, and the calling thread writes finished chunks
// strictly in input order. A fixed number of chunks is in flight at any time, so memory stays
// flat however large the input.
#include "ax/datasets/tokenize.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <span>
#include <thread>

#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/datasets/shard_writer.h"
#include "ax/datasets/tokenizer.h"

namespace ax::data {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkTextBytes = size_t{1} << 20;
constexpr size_t kChunkDocs = 1000;

struct Chunk {
  uint64_t seq = 0;
  std::vector<Document> docs;
  uint64_t text_bytes = 0;
  std::vector<uint32_t> tokens;  // every output document of the chunk, EOS included
  std::vector<size_t> ends;      // end offset in tokens of each output document
};

// State shared by the reader, the workers and the writer, under one mutex. Chunks move a few
// times a second, so one condition variable for all waits is cheap enough.
struct Shared {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::unique_ptr<Chunk>> todo;
  std::map<uint64_t, std::unique_ptr<Chunk>> done;
  size_t in_flight = 0;  // chunks taken by the reader and not yet written
  size_t max_in_flight = 0;
  bool reader_done = false;
  bool stop = false;
  Status error;

  void fail(Status status) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (error.ok()) error = std::move(status);
      stop = true;
    }
    cv.notify_all();
  }
};

void read_chunks(Shared* sh, TextSource* source, std::map<std::string, uint64_t>* docs_per_set) {
  for (uint64_t seq = 0;; ++seq) {
    {
      std::unique_lock<std::mutex> lock(sh->mu);
      sh->cv.wait(lock, [&] { return sh->stop || sh->in_flight < sh->max_in_flight; });
      if (sh->stop) return;
      ++sh->in_flight;
    }
    auto chunk = std::make_unique<Chunk>();
    chunk->seq = seq;
    bool end = false;
    while (chunk->docs.size() < kChunkDocs && chunk->text_bytes < kChunkTextBytes) {
      Document doc;
      StatusOr<bool> got = source->next(&doc);
      if (!got.ok()) return sh->fail(got.status());
      if (!*got) {
        end = true;
        break;
      }
      if (!doc.set_name.empty()) ++(*docs_per_set)[doc.set_name];
      chunk->text_bytes += doc.text.size() + doc.targets.size();
      chunk->docs.push_back(std::move(doc));
    }
    {
      std::lock_guard<std::mutex> lock(sh->mu);
      if (chunk->docs.empty()) {
        --sh->in_flight;
      } else {
        sh->todo.push_back(std::move(chunk));
      }
      if (end) sh->reader_done = true;
    }
    sh->cv.notify_all();
    if (end) return;
  }
}

Status encode_chunk(const Tokenizer& tok, bool seq2seq, Chunk* chunk) {
  const auto eos = static_cast<uint32_t>(tok.eos_id());
  auto add = [&](const std::string& text, const std::string& where) -> Status {
    Status st = tok.encode(text, &chunk->tokens);
    if (!st.ok()) return st.with_context(where);
    chunk->tokens.push_back(eos);
    chunk->ends.push_back(chunk->tokens.size());
    return Status::Ok();
  };
  chunk->tokens.reserve(chunk->text_bytes / 3 + chunk->docs.size() * 2);
  for (const Document& doc : chunk->docs) {
    AX_RETURN_IF_ERROR(add(doc.text, doc.where));
    if (seq2seq) AX_RETURN_IF_ERROR(add(doc.targets, doc.where));
  }
  chunk->docs = {};  // the text is no longer needed
  return Status::Ok();
}

void encode_chunks(Shared* sh, const Tokenizer* tok, bool seq2seq) {
  while (true) {
    std::unique_ptr<Chunk> chunk;
    {
      std::unique_lock<std::mutex> lock(sh->mu);
      sh->cv.wait(lock, [&] { return sh->stop || !sh->todo.empty() || sh->reader_done; });
      if (sh->stop || sh->todo.empty()) return;
      chunk = std::move(sh->todo.front());
      sh->todo.pop_front();
    }
    Status st = encode_chunk(*tok, seq2seq, chunk.get());
    if (!st.ok()) return sh->fail(std::move(st));
    {
      std::lock_guard<std::mutex> lock(sh->mu);
      const uint64_t seq = chunk->seq;
      sh->done.emplace(seq, std::move(chunk));
    }
    sh->cv.notify_all();
  }
}

// Creates DIR, or empties it of a complete earlier shard set when overwrite is on. Leftovers of
// an interrupted run are ShardSetWriter::create's to clean.
Status prepare_output_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return IoError(str_cat("create directory ", dir), ec.value());
  const fs::path index = fs::path(dir) / kIndexFile;
  if (!fs::exists(index, ec)) return Status::Ok();
  if (!overwrite) {
    return AlreadyExists(dir,
                         " already holds a complete shard set; pass --overwrite to replace it");
  }
  // The index goes first: a crash in between leaves an incomplete set, never an index naming
  // deleted shards.
  if (!fs::remove(index, ec) && ec) return IoError(str_cat("remove ", index.string()), ec.value());
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !(ends_with(name, kShardSuffix) || ends_with(name, ".tmp"))) {
      continue;
    }
    if (!fs::remove(entry.path(), ec) && ec) {
      return IoError(str_cat("remove ", entry.path().string()), ec.value());
    }
  }
  if (ec) return IoError(str_cat("list ", dir), ec.value());
  return Status::Ok();
}

struct Progress {
  Clock::time_point start = Clock::now();
  Clock::time_point last = start;
  uint64_t docs = 0;
  uint64_t tokens = 0;
  uint64_t text_bytes = 0;

  double elapsed() const { return std::chrono::duration<double>(Clock::now() - start).count(); }

  void log(const TextSource& source) {
    const double t = std::max(elapsed(), 1e-9);
    const uint64_t read = source.bytes_read(), total = source.total_bytes();
    const double frac = total > 0 ? static_cast<double>(read) / static_cast<double>(total) : 1.0;
    const double eta = frac > 0 ? t * (1.0 - frac) / frac : 0.0;
    char line[256];
    std::snprintf(line, sizeof line,
                  "%s / %s (%.1f%%), %llu docs, %llu tokens, %.0f tokens/s, %.2f MB/s, ETA %s",
                  human_bytes(static_cast<double>(read)).c_str(),
                  human_bytes(static_cast<double>(total)).c_str(), 100.0 * frac,
                  static_cast<unsigned long long>(docs), static_cast<unsigned long long>(tokens),
                  static_cast<double>(tokens) / t, static_cast<double>(text_bytes) / t / 1e6,
                  human_duration(eta).c_str());
    AX_LOG(kInfo, "data") << "tokenize: " << line;
  }
};

// The writer: takes encoded chunks strictly in input order, so the shards are the same for any
// number of workers, and prints progress lines while it waits or writes.
void write_chunks(Shared* sh, ShardSetWriter* writer, const TokenizeOptions& options,
                  const TextSource& source, Progress* progress) {
  const auto period = std::chrono::duration<double>(
      options.progress_seconds > 0 ? options.progress_seconds : 3600.0);
  for (uint64_t next = 0;;) {
    std::unique_ptr<Chunk> chunk;
    {
      std::unique_lock<std::mutex> lock(sh->mu);
      auto ready = [&] {
        return sh->stop || sh->done.count(next) > 0 ||
               (sh->reader_done && sh->todo.empty() && sh->in_flight == 0);
      };
      sh->cv.wait_until(lock, progress->last + period, ready);
      if (sh->stop) return;
      if (auto it = sh->done.find(next); it != sh->done.end()) {
        chunk = std::move(it->second);
        sh->done.erase(it);
      } else if (ready()) {
        return;  // everything read has been written
      }
    }
    if (chunk) {
      size_t begin = 0;
      std::span<const uint32_t> tokens(chunk->tokens);
      for (size_t end : chunk->ends) {
        Status st = writer->add_document(tokens.subspan(begin, end - begin));
        if (!st.ok()) return sh->fail(std::move(st));
        begin = end;
      }
      progress->docs += options.source.seq2seq ? chunk->ends.size() / 2 : chunk->ends.size();
      progress->tokens += chunk->tokens.size();
      progress->text_bytes += chunk->text_bytes;
      ++next;
      {
        std::lock_guard<std::mutex> lock(sh->mu);
        --sh->in_flight;
      }
      sh->cv.notify_all();
    }
    if (options.progress_seconds > 0 && Clock::now() >= progress->last + period) {
      progress->log(source);
      progress->last = Clock::now();
    }
  }
}

}  // namespace

StatusOr<DatasetIndex> tokenize(const TokenizeOptions& options) {
  if (options.output_dir.empty()) return InvalidArgument("no output directory given");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0");
  AX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::load(options.tokenizer_path));
  if (tok->eos_id() < 0) {
    return FailedPrecondition("tokenizer ", options.tokenizer_path,
                              " has no EOS id, and every document ends with EOS: train one with "
                              "ax-data train-tokenizer (eos id 1)");
  }
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TextSource> source,
                      TextSource::open(options.inputs, options.source));
  AX_RETURN_IF_ERROR(prepare_output_dir(options.output_dir, options.overwrite));

  ShardSetWriterOptions wopts;
  wopts.shard.kind = options.source.seq2seq ? ShardKind::kSeq2Seq : ShardKind::kLm;
  wopts.shard.tokenizer_hash = tok->hash();
  wopts.shard.zstd_level = options.zstd_level;
  wopts.shard_tokens = options.shard_tokens;
  wopts.tokenizer.hash = tok->hash();
  wopts.tokenizer.vocab_size = tok->vocab_size();
  wopts.tokenizer.eos_id = tok->eos_id();
  wopts.tokenizer.pad_id = tok->pad_id();
  wopts.tokenizer.model_file = fs::path(options.tokenizer_path).filename().string();
  AX_ASSIGN_OR_RETURN(std::unique_ptr<ShardSetWriter> writer,
                      ShardSetWriter::create(options.output_dir, wopts));

  const int workers = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  AX_LOG(kInfo, "data") << "tokenize: " << source->files().size() << " file(s), "
                        << human_bytes(static_cast<double>(source->total_bytes())) << ", "
                        << workers << " encoder thread(s) -> " << options.output_dir;

  Shared sh;
  sh.max_in_flight = 2 * static_cast<size_t>(workers) + 2;
  std::map<std::string, uint64_t> docs_per_set;
  std::thread reader(read_chunks, &sh, source.get(), &docs_per_set);
  std::vector<std::thread> pool;
  for (int i = 0; i < workers; ++i) {
    pool.emplace_back(encode_chunks, &sh, tok.get(), options.source.seq2seq);
  }

  Progress progress;
  write_chunks(&sh, writer.get(), options, *source, &progress);
  reader.join();
  for (std::thread& t : pool) t.join();
  if (!sh.error.ok()) return sh.error;

  DatasetIndex& extras = writer->index_extras();
  extras.inputs = source->files();
  extras.skipped_empty = source->skipped_empty();
  extras.skipped_bad = source->skipped_bad();
  extras.docs_per_set = docs_per_set;
  AX_ASSIGN_OR_RETURN(DatasetIndex index, writer->finish());

  const double t = std::max(progress.elapsed(), 1e-9);
  char rates[96];
  std::snprintf(rates, sizeof rates, "%.0f tokens/s, %.2f MB/s",
                static_cast<double>(progress.tokens) / t,
                static_cast<double>(progress.text_bytes) / t / 1e6);
  AX_LOG(kInfo, "data") << "tokenize: done: " << progress.docs
                        << (options.source.seq2seq ? " examples, " : " docs, ") << index.num_tokens
                        << " tokens in " << index.shards.size() << " shard(s) in "
                        << human_duration(t) << " (" << rates << "); skipped "
                        << source->skipped_empty() << " empty, " << source->skipped_bad() << " bad";
  return index;
}

}  // namespace ax::data
