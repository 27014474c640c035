#include "ax/datasets/text/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "ax/common/file_io.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/datasets/shards/shard_format.h"
#include "ax/datasets/text/hf_tokenizer.h"
#include "ax/datasets/text/text_source.h"

namespace ax::data {

namespace {

// Sentences with the characters seams meet in real text: words, digits, punctuation, accents.
constexpr const char* kSeamProbes[] = {
    "The river runs to the sea, and yet the sea is not full.",
    "In 1611 the 6th edition cost 12.50 pounds; naïve café owners paid (in part) half.",
    "Er sagte: „Grüß dich“ – und ging. Ça coûte 3 €, n'est-ce pas? Voilà tout. 東京 と 大阪",
    "x = f(a, b) + g[c] * 2; if (x > 0) { return y; } // done",
};

std::vector<uint32_t> probe_ids(const Tokenizer& tok, std::string_view s) {
  std::vector<uint32_t> ids;
  if (!tok.encode(s, &ids).ok()) ids.assign(1, UINT32_MAX);
  return ids;
}

// Whether every probe encodes the same cut at each lone space (in `style`) as whole.
bool seams_match(const Tokenizer& tok, SeamStyle style) {
  for (std::string_view probe : kSeamProbes) {
    const std::vector<uint32_t> whole = probe_ids(tok, probe);
    for (size_t p = 1; p + 1 < probe.size(); ++p) {
      if (probe[p] != ' ' || probe[p - 1] == ' ' || probe[p + 1] == ' ') continue;
      const size_t end = style == SeamStyle::kSpaceToPrevious ? p + 1 : p;
      const size_t next = style == SeamStyle::kSpaceToNext ? p : p + 1;
      std::vector<uint32_t> joined = probe_ids(tok, probe.substr(0, end));
      const std::vector<uint32_t> rest = probe_ids(tok, probe.substr(next));
      joined.insert(joined.end(), rest.begin(), rest.end());
      if (joined != whole) return false;
    }
  }
  return true;
}

class SentencePieceTokenizer : public Tokenizer {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& model_path) {
    std::error_code ec;
    if (!std::filesystem::exists(model_path, ec)) {
      return NotFound("tokenizer model ", model_path, " does not exist");
    }
    AX_ASSIGN_OR_RETURN(std::string bytes, read_file(model_path));
    std::unique_ptr<SentencePieceTokenizer> tok(new SentencePieceTokenizer());
    tok->hash_ = hash64(bytes.data(), bytes.size());
    sentencepiece::util::Status st = tok->sp_.LoadFromSerializedProto(bytes);
    if (!st.ok() || tok->sp_.GetPieceSize() <= 0) {
      return DataLoss(model_path, " is not a SentencePiece model (",
                      st.ok() ? "no pieces" : st.message(), ")");
    }
    tok->finish_loading(model_path);
    return std::unique_ptr<Tokenizer>(std::move(tok));
  }

  uint64_t hash() const override { return hash_; }
  std::string_view kind() const override { return kSentencePiece; }
  uint32_t vocab_size() const override { return static_cast<uint32_t>(sp_.GetPieceSize()); }
  int32_t eos_id() const override { return sp_.eos_id(); }
  int32_t pad_id() const override { return sp_.pad_id(); }
  int32_t unk_id() const override { return sp_.unk_id(); }
  int32_t bos_id() const override { return sp_.bos_id(); }

  Status encode(std::string_view text, std::vector<uint32_t>* out) const override {
    // SentencePiece keeps no per-call state in the processor (its RNG is thread-local), so one
    // processor serves every thread.
    std::vector<int> ids;
    sentencepiece::util::Status st = sp_.Encode(text, &ids);
    if (!st.ok()) return Internal("SentencePiece encode failed: ", st.message());
    out->insert(out->end(), ids.begin(), ids.end());
    return Status::Ok();
  }

  StatusOr<std::string> decode(std::span<const uint32_t> ids) const override {
    const uint32_t n = vocab_size();
    std::vector<int> v;
    v.reserve(ids.size());
    for (uint32_t id : ids) {
      if (id >= n) return OutOfRange("token id ", id, " is outside the vocabulary (size ", n, ")");
      v.push_back(static_cast<int>(id));
    }
    std::string text;
    sentencepiece::util::Status st = sp_.Decode(v, &text);
    if (!st.ok()) return Internal("SentencePiece decode failed: ", st.message());
    return text;
  }

  std::string id_to_piece(uint32_t id) const override {
    if (id >= vocab_size()) return str_cat("<invalid id ", id, ">");
    return sp_.IdToPiece(static_cast<int>(id));
  }

 private:
  SentencePieceTokenizer() = default;
  sentencepiece::SentencePieceProcessor sp_;
  uint64_t hash_ = 0;
};

}  // namespace

// The files a Hugging Face model directory keeps its tokenizer in, in the order looked for:
// tokenizer.json (what transformers' fast tokenizers read), else the SentencePiece model of a
// Llama 2 / Mistral (tokenizer.model) or T5 (spiece.model) directory.
constexpr const char* kDirectoryTokenizers[] = {"tokenizer.json", "tokenizer.model",
                                                "spiece.model"};

StatusOr<std::string> Tokenizer::resolve_path(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  for (const char* name : kDirectoryTokenizers) {
    const std::string file = (fs::path(path) / name).string();
    if (fs::exists(file, ec)) return file;
  }
  return NotFound("tokenizer directory ", path,
                  " holds none of tokenizer.json, tokenizer.model, spiece.model");
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(const std::string& model_path) {
  AX_ASSIGN_OR_RETURN(const std::string file, resolve_path(model_path));
  if (ends_with(file, ".json")) {
    // The path as given (a directory's tokenizer_config.json is read beside the file either way).
    AX_ASSIGN_OR_RETURN(std::unique_ptr<HfTokenizer> hf,
                        HfTokenizer::load(file == model_path ? file : model_path));
    return std::unique_ptr<Tokenizer>(std::move(hf));
  }
  return SentencePieceTokenizer::load(file);
}

Tokenizer::~Tokenizer() = default;

void Tokenizer::finish_loading(std::string path) {
  path_ = std::move(path);
  for (SeamStyle style :
       {SeamStyle::kDropSpace, SeamStyle::kSpaceToNext, SeamStyle::kSpaceToPrevious}) {
    if (seams_match(*this, style)) {
      seam_style_ = style;
      seams_exact_ = true;
      return;
    }
  }
}

uint32_t Tokenizer::num_sentinels() const {
  const uint32_t size = vocab_size();
  uint32_t n = 0;
  while (n < size && id_to_piece(size - 1 - n) == str_cat("<extra_id_", n, ">")) ++n;
  return n;
}

namespace {

// Longer lines are skipped when training (SentencePiece's own limit, in bytes).
constexpr size_t kMaxSentenceBytes = 16384;

// Feeds the trainer one line at a time from the documents of a TextSource.
class DocumentLines : public sentencepiece::SentenceIterator {
 public:
  explicit DocumentLines(TextSource* source) : source_(source) { Next(); }

  bool done() const override { return done_; }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override {
    if (error_.ok()) return sentencepiece::util::Status();
    return sentencepiece::util::Status(sentencepiece::util::StatusCode::kInternal,
                                       error_.message());
  }
  void Next() override {
    while (!done_) {
      if (pos_ >= doc_.text.size()) {
        StatusOr<bool> got = source_->next(&doc_);
        if (!got.ok()) error_ = got.status();
        if (!got.ok() || !*got) {
          done_ = true;
          return;
        }
        pos_ = 0;
      }
      size_t nl = doc_.text.find('\n', pos_);
      if (nl == std::string::npos) nl = doc_.text.size();
      std::string_view line = str_trim(std::string_view(doc_.text).substr(pos_, nl - pos_));
      pos_ = nl + 1;
      if (line.empty()) continue;
      if (line.size() > kMaxSentenceBytes) {
        ++skipped_long_;
        continue;
      }
      line_.assign(line);
      ++lines_;
      return;
    }
  }

  const Status& error() const { return error_; }
  uint64_t lines() const { return lines_; }
  uint64_t skipped_long() const { return skipped_long_; }

 private:
  TextSource* source_;
  Document doc_;
  size_t pos_ = 0;
  std::string line_;
  bool done_ = false;
  Status error_;
  uint64_t lines_ = 0;
  uint64_t skipped_long_ = 0;
};

// Appends T5's sentinels to a trained model as user-defined pieces <extra_id_{n-1}> ...
// <extra_id_0>, so that <extra_id_0> is the highest id. SentencePiece's trainer places
// user-defined symbols right after the special ids, and Debian's package ships no header for the
// model's protobuf, so this writes the one field it needs by hand: ModelProto's `repeated
// SentencePiece pieces = 1` (a parser appends repeated entries in file order), each piece
// {string piece = 1; float score = 2; Type type = 3 (USER_DEFINED = 4)}. The .vocab beside it
// gets the same lines.
Status append_sentinels(const std::string& prefix, int count) {
  auto varint = [](uint64_t v, std::string* out) {
    for (; v >= 0x80; v >>= 7) out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    out->push_back(static_cast<char>(v));
  };
  std::string model_tail, vocab_tail;
  for (int k = count - 1; k >= 0; --k) {
    const std::string piece = str_cat("<extra_id_", k, ">");
    std::string message;
    message.push_back('\x0a');  // field 1, length-delimited: the piece
    varint(piece.size(), &message);
    message += piece;
    message.append("\x15\0\0\0\0", 5);  // field 2, fixed32: score 0.0f
    message.append("\x18\x04", 2);      // field 3, varint: type USER_DEFINED
    model_tail.push_back('\x0a');       // ModelProto field 1: one more piece
    varint(message.size(), &model_tail);
    model_tail += message;
    vocab_tail += str_cat(piece, "\t0\n");
  }
  for (const auto& [path, tail] :
       {std::pair{prefix + ".model", &model_tail}, std::pair{prefix + ".vocab", &vocab_tail}}) {
    std::ofstream f(path, std::ios::binary | std::ios::app);
    f << *tail;
    f.flush();
    if (!f) return IoError(str_cat("append sentinels to ", path), errno);
  }
  return Status::Ok();
}

}  // namespace

Status train_tokenizer(const TrainTokenizerOptions& options) {
  if (options.model_type != "bpe" && options.model_type != "unigram") {
    return InvalidArgument("model type must be bpe or unigram, not '", options.model_type, "'");
  }
  if (options.vocab_size < 8) {
    return InvalidArgument("vocabulary size ", options.vocab_size, " is too small");
  }
  if (!(options.character_coverage > 0.0 && options.character_coverage <= 1.0)) {
    return InvalidArgument("character coverage must be in (0, 1], not ",
                           options.character_coverage);
  }
  if (options.extra_ids < 0) return InvalidArgument("extra ids must be >= 0");
  if (!ends_with(options.output, ".model") || options.output.size() <= 6) {
    return InvalidArgument("the output must be a path ending in .model, not '", options.output,
                           "'");
  }
  if (options.vocab_size < 8 + static_cast<uint32_t>(options.extra_ids)) {
    return InvalidArgument("vocabulary size ", options.vocab_size, " leaves too few pieces beside ",
                           options.extra_ids, " extra ids");
  }
  const std::vector<std::string>& symbols = options.user_symbols;
  std::string symbol_list;
  for (const std::string& s : symbols) {
    if (s.empty() || s.find(',') != std::string::npos) {
      return InvalidArgument("user symbol '", s, "' must be non-empty and contain no comma");
    }
    if (!symbol_list.empty()) symbol_list += ',';
    symbol_list += s;
  }

  TextSourceOptions source_options;
  source_options.json_field = options.json_field;
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TextSource> source,
                      TextSource::open(options.inputs, source_options));

  const std::string prefix = options.output.substr(0, options.output.size() - 6);
  std::filesystem::path parent = std::filesystem::path(options.output).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) return IoError(str_cat("create directory ", parent.string()), ec.value());
  }
  int threads = options.threads > 0
                    ? options.threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::unordered_map<std::string, std::string> args = {
      {"model_prefix", prefix},
      {"vocab_size", std::to_string(options.vocab_size - options.extra_ids)},
      {"model_type", options.model_type},
      {"byte_fallback", options.byte_fallback ? "true" : "false"},
      {"character_coverage", str_cat(options.character_coverage)},
      {"split_digits", options.split_digits ? "true" : "false"},
      {"input_sentence_size", std::to_string(options.max_sentences)},
      {"shuffle_input_sentence", "true"},
      {"max_sentence_length", std::to_string(kMaxSentenceBytes)},
      {"num_threads", std::to_string(threads)},
      {"pad_id", "0"},
      {"eos_id", "1"},
      {"unk_id", "2"},
      {"bos_id", "-1"},
      // SentencePiece logs every step to stderr; keep errors only unless debugging.
      {"minloglevel", log_enabled(LogLevel::kDebug) ? "0" : "2"},
  };
  if (!symbol_list.empty()) args["user_defined_symbols"] = symbol_list;

  AX_LOG(kInfo, "data") << "training a " << options.vocab_size << "-piece " << options.model_type
                        << " tokenizer on " << source->files().size() << " file(s), "
                        << human_bytes(static_cast<double>(source->total_bytes()));
  DocumentLines lines(source.get());
  sentencepiece::util::Status st = sentencepiece::SentencePieceTrainer::Train(args, &lines);
  if (!lines.error().ok()) return lines.error();
  if (lines.lines() == 0) return InvalidArgument("the inputs hold no text to train on");
  if (!st.ok()) return InvalidArgument("SentencePiece training failed: ", st.message());
  if (options.extra_ids > 0) AX_RETURN_IF_ERROR(append_sentinels(prefix, options.extra_ids));

  AX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::load(options.output));
  AX_LOG(kInfo, "data") << "wrote " << options.output << " (" << tok->vocab_size()
                        << " pieces, trained on " << lines.lines() << " lines"
                        << (lines.skipped_long() > 0
                                ? str_cat(", ", lines.skipped_long(), " over-long lines skipped")
                                : std::string())
                        << ")";
  return Status::Ok();
}

}  // namespace ax::data
