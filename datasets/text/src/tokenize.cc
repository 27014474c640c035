// The tokenize pipeline: one reader thread cuts the input into chunks of documents, N workers
// encode chunks with the one shared tokenizer, and the calling thread writes finished chunks
// strictly in input order. A fixed number of chunks is in flight at any time, so memory stays
// flat however large the input.
#include "ax/datasets/text/tokenize.h"

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

#include "ax/common/file_io.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/datasets/shards/shard_writer.h"
#include "ax/datasets/text/doc_splitter.h"
#include "ax/datasets/text/tokenizer.h"

namespace ax::data {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kChunkTextBytes = size_t{1} << 20;
constexpr size_t kChunkPieces = 1000;
// TextSource parts: a quarter of a chunk, so a long document spreads over many chunks.
constexpr size_t kPartBytes = kChunkTextBytes / 4;

// A document, or a piece of a long one.
struct Piece {
  std::string text;
  bool doc_end = false;  // the document's last piece: EOS follows
  std::string where;
};

struct Chunk {
  uint64_t seq = 0;
  std::vector<Piece> pieces;
  uint64_t text_bytes = 0;
  std::vector<uint32_t> tokens;  // every piece's tokens, EOS after each document
  std::vector<size_t> ends;      // end offset in tokens of each piece
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

Status stopped() { return Status(StatusCode::kAborted, "stopped by a signal"); }

// What the reader counts on its way.
struct ReadStats {
  std::map<std::string, uint64_t> docs_per_set;
  uint64_t split_docs = 0;  // documents cut into more than one piece
  uint64_t pieces = 0;
  uint64_t doc_pieces = 0;  // of the document being read
};

// Fills one chunk with pieces; returns false at the end of the input.
StatusOr<bool> fill_chunk(TextSource* source, DocSplitter* splitter, const std::atomic<bool>* stop,
                          ReadStats* stats, Chunk* chunk) {
  std::vector<std::string> pieces;
  while (chunk->pieces.size() < kChunkPieces && chunk->text_bytes < kChunkTextBytes) {
    if (stop != nullptr && stop->load()) return stopped();
    DocPart part;
    AX_ASSIGN_OR_RETURN(bool got, source->next_part(&part));
    if (!got) return false;
    if (part.first && !part.targets && !part.set_name.empty()) {
      ++stats->docs_per_set[part.set_name];
    }
    pieces.clear();
    splitter->add(part.text, part.last, &pieces);
    for (size_t i = 0; i < pieces.size(); ++i) {
      chunk->pieces.push_back(
          Piece{std::move(pieces[i]), part.last && i + 1 == pieces.size(), part.where});
    }
    chunk->text_bytes += part.text.size();
    stats->doc_pieces += pieces.size();
    if (part.last) {
      stats->pieces += stats->doc_pieces;
      if (stats->doc_pieces > 1) ++stats->split_docs;
      stats->doc_pieces = 0;
    }
  }
  return true;
}

void read_chunks(Shared* sh, TextSource* source, DocSplitter* splitter,
                 const std::atomic<bool>* stop, ReadStats* stats) {
  for (uint64_t seq = 0;; ++seq) {
    {
      std::unique_lock<std::mutex> lock(sh->mu);
      sh->cv.wait(lock, [&] { return sh->stop || sh->in_flight < sh->max_in_flight; });
      if (sh->stop) return;
      ++sh->in_flight;
    }
    auto chunk = std::make_unique<Chunk>();
    chunk->seq = seq;
    StatusOr<bool> more = fill_chunk(source, splitter, stop, stats, chunk.get());
    if (!more.ok()) return sh->fail(more.status());
    const bool end = !*more;
    {
      std::lock_guard<std::mutex> lock(sh->mu);
      if (chunk->pieces.empty()) {
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

Status encode_chunk(const Tokenizer& tok, Chunk* chunk) {
  const auto eos = static_cast<uint32_t>(tok.eos_id());
  chunk->tokens.reserve(chunk->text_bytes / 3 + chunk->pieces.size() * 2);
  for (Piece& piece : chunk->pieces) {
    Status st = tok.encode(piece.text, &chunk->tokens);
    if (!st.ok()) return st.with_context(piece.where);
    if (piece.doc_end) chunk->tokens.push_back(eos);
    chunk->ends.push_back(chunk->tokens.size());
    piece.text = {};  // the text is no longer needed
  }
  return Status::Ok();
}

void encode_chunks(Shared* sh, const Tokenizer* tok) {
  while (true) {
    std::unique_ptr<Chunk> chunk;
    {
      std::unique_lock<std::mutex> lock(sh->mu);
      sh->cv.wait(lock, [&] { return sh->stop || !sh->todo.empty() || sh->reader_done; });
      if (sh->stop || sh->todo.empty()) return;
      chunk = std::move(sh->todo.front());
      sh->todo.pop_front();
    }
    Status st = encode_chunk(*tok, chunk.get());
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
  Clock::time_point last_log = start, last_file = start;
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

// "<bytes read> <total bytes>\n" into `path`, replaced atomically (no fsync: it is only progress).
void write_progress_file(const std::string& path, const TextSource& source) {
  const std::string text = str_cat(source.bytes_read(), " ", source.total_bytes(), "\n");
  (void)write_file_atomically(path, text, Durability::kFast);  // best effort: only progress
}

// Hands a chunk's pieces to the shard writer; a document's pieces join into one document.
Status write_chunk(const Chunk& chunk, ShardSetWriter* writer) {
  size_t begin = 0;
  std::span<const uint32_t> tokens(chunk.tokens);
  for (size_t i = 0; i < chunk.pieces.size(); ++i) {
    const size_t end = chunk.ends[i];
    AX_RETURN_IF_ERROR(
        writer->add_tokens(tokens.subspan(begin, end - begin), chunk.pieces[i].doc_end));
    begin = end;
  }
  return Status::Ok();
}

// The writer: takes encoded chunks strictly in input order, so the shards are the same for any
// number of workers, and prints progress lines (and the progress file) while it waits or writes.
void write_chunks(Shared* sh, ShardSetWriter* writer, const TokenizeOptions& options,
                  const TextSource& source, Progress* progress) {
  using Seconds = std::chrono::duration<double>;
  const Seconds log_period(options.progress_seconds > 0 ? options.progress_seconds : 3600.0);
  const Seconds tick(1.0);  // the progress file and the stop flag
  for (uint64_t next = 0;;) {
    std::unique_ptr<Chunk> chunk;
    {
      std::unique_lock<std::mutex> lock(sh->mu);
      auto ready = [&] {
        return sh->stop || sh->done.count(next) > 0 ||
               (sh->reader_done && sh->todo.empty() && sh->in_flight == 0);
      };
      const auto wake = std::min(progress->last_log + log_period, progress->last_file + tick);
      sh->cv.wait_until(lock, std::chrono::time_point_cast<Clock::duration>(wake), ready);
      if (sh->stop) return;
      if (auto it = sh->done.find(next); it != sh->done.end()) {
        chunk = std::move(it->second);
        sh->done.erase(it);
      } else if (ready()) {
        return;  // everything read has been written
      }
    }
    if (chunk) {
      Status st = write_chunk(*chunk, writer);
      if (!st.ok()) return sh->fail(std::move(st));
      uint64_t docs = 0;
      for (const Piece& p : chunk->pieces) docs += p.doc_end ? 1 : 0;
      progress->docs += options.source.seq2seq ? docs / 2 : docs;
      progress->tokens += chunk->tokens.size();
      progress->text_bytes += chunk->text_bytes;
      ++next;
      {
        std::lock_guard<std::mutex> lock(sh->mu);
        --sh->in_flight;
      }
      sh->cv.notify_all();
    }
    const Clock::time_point now = Clock::now();
    if (options.progress_seconds > 0 && now >= progress->last_log + log_period) {
      progress->log(source);
      progress->last_log = now;
    }
    if (now >= progress->last_file + tick) {
      if (!options.progress_file.empty()) write_progress_file(options.progress_file, source);
      if (options.stop != nullptr && options.stop->load()) return sh->fail(stopped());
      progress->last_file = now;
    }
  }
}

ShardSetWriterOptions writer_options(const TokenizeOptions& options, const Tokenizer& tok) {
  ShardSetWriterOptions wopts;
  wopts.shard.kind = options.source.seq2seq ? ShardKind::kSeq2Seq : ShardKind::kLm;
  wopts.shard.tokenizer_hash = tok.hash();
  wopts.shard.zstd_level = options.zstd_level;
  wopts.shard_tokens = options.shard_tokens;
  wopts.tokenizer.hash = tok.hash();
  wopts.tokenizer.vocab_size = tok.vocab_size();
  wopts.tokenizer.eos_id = tok.eos_id();
  wopts.tokenizer.pad_id = tok.pad_id();
  wopts.tokenizer.model_file = fs::path(options.tokenizer_path).filename().string();
  wopts.tokenizer.kind = std::string(tok.kind());
  return wopts;
}

// The counts after "skipped": empty, bad, too long, truncated, and documents cut into pieces.
std::string summary_counts(const TokenizeOptions& options, const TextSource& source,
                           const ReadStats& stats, const DocSplitter& splitter,
                           const Tokenizer& tok) {
  std::string out = str_cat("skipped ", source.skipped_empty(), " empty, ", source.skipped_bad(),
                            " bad, ", source.skipped_long(), " over --max-doc-bytes");
  if (options.source.max_doc_bytes > 0 && options.source.long_docs == LongDocs::kTruncate) {
    out += str_cat("; truncated ", source.truncated_long(), " at --max-doc-bytes");
  }
  if (stats.split_docs > 0) {
    out += str_cat("; ", stats.split_docs, " document(s) over ", options.split_bytes,
                   " bytes encoded in pieces (seams: ", splitter.space_seams(), " at a space",
                   tok.seams_exact() ? " (exact)" : "", ", ", splitter.white_space_seams(),
                   " after white space, ", splitter.character_seams(), " between characters)");
  }
  return out;
}

}  // namespace

StatusOr<DatasetIndex> tokenize(const TokenizeOptions& options) {
  if (options.output_dir.empty()) return InvalidArgument("no output directory given");
  if (options.threads < 0) return InvalidArgument("threads must be >= 0");
  if (options.split_bytes < kMinSplitBytes) {
    return InvalidArgument("split bytes must be at least ", kMinSplitBytes);
  }
  AX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::load(options.tokenizer_path));
  if (tok->eos_id() < 0) {
    return FailedPrecondition("tokenizer ", options.tokenizer_path,
                              " has no EOS id, and every document ends with EOS: train one with "
                              "ax-data train-tokenizer (eos id 1)");
  }
  TextSourceOptions source_options = options.source;
  source_options.part_bytes = kPartBytes;
  // A long document waits beside the output (where there is room for data), not in /tmp.
  if (source_options.spill_dir.empty()) source_options.spill_dir = options.output_dir;
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TextSource> source,
                      TextSource::open(options.inputs, source_options));
  if (source->total_bytes() == 0) {
    const std::vector<std::string>& files = source->files();
    return InvalidArgument("nothing to tokenize: the input (", files.size(),
                           " file(s): ", files.empty() ? "" : files.front(),
                           files.size() > 1 ? ", ..." : "", ") is empty; no dataset written");
  }
  AX_RETURN_IF_ERROR(prepare_output_dir(options.output_dir, options.overwrite));
  AX_ASSIGN_OR_RETURN(std::unique_ptr<ShardSetWriter> writer,
                      ShardSetWriter::create(options.output_dir, writer_options(options, *tok)));

  const int workers = options.threads > 0
                          ? options.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  AX_LOG(kInfo, "data") << "tokenize: " << source->files().size() << " file(s), "
                        << human_bytes(static_cast<double>(source->total_bytes())) << ", "
                        << workers << " encoder thread(s) -> " << options.output_dir;

  Shared sh;
  sh.max_in_flight = 2 * static_cast<size_t>(workers) + 2;
  ReadStats stats;
  DocSplitter splitter(options.split_bytes, tok->seam_style());
  std::thread reader(read_chunks, &sh, source.get(), &splitter, options.stop, &stats);
  std::vector<std::thread> pool;
  for (int i = 0; i < workers; ++i) pool.emplace_back(encode_chunks, &sh, tok.get());

  Progress progress;
  write_chunks(&sh, writer.get(), options, *source, &progress);
  reader.join();
  for (std::thread& t : pool) t.join();
  if (!sh.error.ok()) return sh.error;
  // A dataset of no documents would only fail later, in training, without naming its cause.
  if (progress.docs == 0) {
    return InvalidArgument("no ", options.source.seq2seq ? "examples" : "documents", " in ",
                           source->files().size(), " input file(s) (",
                           summary_counts(options, *source, stats, splitter, *tok),
                           "); no dataset written to ", options.output_dir);
  }

  DatasetIndex& extras = writer->index_extras();
  extras.inputs = source->files();
  extras.skipped_empty = source->skipped_empty();
  extras.skipped_bad = source->skipped_bad();
  extras.skipped_long = source->skipped_long();
  extras.truncated_long = source->truncated_long();
  extras.split_docs = stats.split_docs;
  extras.docs_per_set = stats.docs_per_set;
  AX_ASSIGN_OR_RETURN(DatasetIndex index, writer->finish());
  if (!options.progress_file.empty()) write_progress_file(options.progress_file, *source);

  const double t = std::max(progress.elapsed(), 1e-9);
  char rates[96];
  std::snprintf(rates, sizeof rates, "%.0f tokens/s, %.2f MB/s",
                static_cast<double>(progress.tokens) / t,
                static_cast<double>(progress.text_bytes) / t / 1e6);
  AX_LOG(kInfo, "data") << "tokenize: done: " << progress.docs
                        << (options.source.seq2seq ? " examples, " : " docs, ") << index.num_tokens
                        << " tokens in " << index.shards.size() << " shard(s) in "
                        << human_duration(t) << " (" << rates << "); "
                        << summary_counts(options, *source, stats, splitter, *tok);
  return index;
}

}  // namespace ax::data
