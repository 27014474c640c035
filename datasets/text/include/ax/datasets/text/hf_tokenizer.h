// A Hugging Face tokenizer.json (GPT-2, Llama 2 and 3, Mistral, Qwen2, T5 and the like) behind
// ax's Tokenizer interface: the same ids as the Rust `tokenizers` crate (0.22) for the subset of
// components docs/tokenization.md "Hugging Face tokenizer.json" lists; any other component is
// refused at load, naming it and listing what is supported.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/text/tokenizer.h"

namespace ax::data {

class HfTokenizer : public Tokenizer {
 public:
  // `path`: a tokenizer.json, or a directory holding one. A tokenizer_config.json beside it names
  // the EOS, BOS, pad and unknown tokens; without one they come from the post-processor's
  // template and the usual names (docs/tokenization.md). NotFound for a missing file, DataLoss
  // for malformed JSON (with its byte offset) or a broken tokenizer, Unimplemented for a
  // component ax does not support.
  static StatusOr<std::unique_ptr<HfTokenizer>> load(const std::string& path);
  ~HfTokenizer() override;

  uint64_t hash() const override;
  std::string_view kind() const override { return kTokenizerJson; }
  uint32_t vocab_size() const override;
  int32_t eos_id() const override;
  int32_t pad_id() const override;
  int32_t unk_id() const override;
  int32_t bos_id() const override;

  // The ids Hugging Face's encode(text, add_special_tokens=False) gives. Text that is not valid
  // UTF-8 is refused (InvalidArgument naming the byte).
  Status encode(std::string_view text, std::vector<uint32_t>* out) const override;
  // encode(text, add_special_tokens=True): with the post-processor's special tokens (the BOS
  // and EOS of a TemplateProcessing).
  Status encode_with_special_tokens(std::string_view text, std::vector<uint32_t>* out) const;
  // Hugging Face's decode(ids) (skip_special_tokens=False): every token's text.
  StatusOr<std::string> decode(std::span<const uint32_t> ids) const override;
  StatusOr<std::string> decode(std::span<const uint32_t> ids, bool skip_special_tokens) const;
  std::string id_to_piece(uint32_t id) const override;

  // The special tokens the post-processor puts before and after a text.
  const std::vector<uint32_t>& prefix_ids() const;
  const std::vector<uint32_t>& suffix_ids() const;

 private:
  class Impl;
  explicit HfTokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ax::data
