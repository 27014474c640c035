// A tokenizer, loaded once and shared: encode/decode are const and safe from many threads at
// once. Two kinds sit behind this interface: a SentencePiece model (one processor, as
// SentencePiece's maintainers recommend) and a Hugging Face tokenizer.json (HfTokenizer,
// hf_tokenizer.h; docs/tokenization.md "Hugging Face tokenizer.json").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/text/doc_splitter.h"

namespace ax::data {

class Tokenizer {
 public:
  // A SentencePiece model, or a Hugging Face tokenizer.json (a path ending in .json:
  // HfTokenizer::load), or a directory holding one (a Hugging Face model's: its tokenizer.json,
  // else a SentencePiece tokenizer.model or spiece.model). Fails with NotFound for a missing file
  // (or a directory holding none of the three), DataLoss for one that is not a tokenizer,
  // Unimplemented for a tokenizer.json component ax does not support.
  static StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& model_path);
  // The file Tokenizer::load reads for `path`: `path` itself, or the tokenizer file inside a
  // directory (NotFound naming the three names when it holds none).
  static StatusOr<std::string> resolve_path(const std::string& path);
  virtual ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // XXH64 of the model file's bytes (.model or tokenizer.json; recorded in shards and index.json).
  virtual uint64_t hash() const = 0;
  // What kind of file it is: kSentencePiece or kTokenizerJson (recorded in index.json).
  virtual std::string_view kind() const = 0;
  static constexpr std::string_view kSentencePiece = "sentencepiece";
  static constexpr std::string_view kTokenizerJson = "tokenizer.json";
  // One past the highest id.
  virtual uint32_t vocab_size() const = 0;
  virtual int32_t eos_id() const = 0;  // -1 when the model has none
  virtual int32_t pad_id() const = 0;
  virtual int32_t unk_id() const = 0;
  virtual int32_t bos_id() const = 0;
  const std::string& path() const { return path_; }
  // T5's sentinels: how many ids at the top of the vocabulary are <extra_id_k>, k = 0 at the
  // highest id and counting down (what `ax-data train-tokenizer --extra-ids N` adds); 0 if none.
  uint32_t num_sentinels() const;

  // Appends the ids of text to out (no BOS, no EOS).
  virtual Status encode(std::string_view text, std::vector<uint32_t>* out) const = 0;
  // Where a long document is cut at a space (DocSplitter): the first style under which this
  // model encodes probe sentences cut at each of their spaces exactly as whole; seams_exact()
  // says whether one did (else kDropSpace, and a seam may change the tokens next to it).
  SeamStyle seam_style() const { return seam_style_; }
  bool seams_exact() const { return seams_exact_; }
  virtual StatusOr<std::string> decode(std::span<const uint32_t> ids) const = 0;
  // For inspecting: the piece of one id.
  virtual std::string id_to_piece(uint32_t id) const = 0;

 protected:
  Tokenizer() = default;
  // The last step of loading: records the path and probes the seam style with encode().
  void finish_loading(std::string path);

 private:
  std::string path_;
  SeamStyle seam_style_ = SeamStyle::kDropSpace;
  bool seams_exact_ = false;
};

struct TrainTokenizerOptions {
  std::vector<std::string> inputs;  // files (txt, jsonl, jsonl.zst) or globs
  std::string output;               // model path, e.g. out/spm.model (".vocab" written beside)
  uint32_t vocab_size = 8000;
  std::string model_type = "bpe";  // bpe | unigram
  bool byte_fallback = true;
  std::vector<std::string> user_symbols;
  // T5's sentinels <extra_id_0> ... <extra_id_{n-1}> as the top n ids of vocab_size, highest
  // first, as T5 lays them out; text containing "<extra_id_k>" encodes to that one id.
  int extra_ids = 0;
  double character_coverage = 0.9995;
  bool split_digits = true;
  uint64_t max_sentences = 2000000;  // sentences sampled for training (0 = all)
  std::string json_field = "text";
  int threads = 0;  // 0 = all cores
  // Ids as in Pax/T5: pad 0, eos 1, unk 2, no bos.
};

Status train_tokenizer(const TrainTokenizerOptions& options);

}  // namespace ax::data
