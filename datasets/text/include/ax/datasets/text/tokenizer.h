// A SentencePiece model, loaded once and shared: encode/decode are const and safe from many
// threads at once (one processor, as SentencePiece's maintainers recommend).
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
  // Fails with NotFound for a missing file and DataLoss for one that is not a SentencePiece model.
  static StatusOr<std::unique_ptr<Tokenizer>> load(const std::string& model_path);
  ~Tokenizer();

  uint64_t hash() const;  // XXH64 of the .model file bytes (recorded in shards and index.json)
  uint32_t vocab_size() const;
  int32_t eos_id() const;  // -1 when the model has none
  int32_t pad_id() const;
  int32_t unk_id() const;
  int32_t bos_id() const;
  const std::string& path() const;
  // T5's sentinels: how many ids at the top of the vocabulary are <extra_id_k>, k = 0 at the
  // highest id and counting down (what `ax-data train-tokenizer --extra-ids N` adds); 0 if none.
  uint32_t num_sentinels() const;

  // Appends the ids of text to out (no EOS).
  Status encode(std::string_view text, std::vector<uint32_t>* out) const;
  // Where a long document is cut at a space (DocSplitter): the first style under which this
  // model encodes probe sentences cut at each of their spaces exactly as whole; seams_exact()
  // says whether one did (else kDropSpace, and a seam may change the tokens next to it).
  SeamStyle seam_style() const;
  bool seams_exact() const;
  StatusOr<std::string> decode(std::span<const uint32_t> ids) const;
  // For inspecting: the piece of one id.
  std::string id_to_piece(uint32_t id) const;

 private:
  class Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
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
