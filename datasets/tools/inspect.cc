// ax-data inspect's printer (inspect.h): counts, decoded documents and span-corrupted windows of
// a shard set.
#include "inspect.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "ax/common/rng.h"
#include "ax/common/strings.h"
#include "ax/datasets/loader/span_corruption.h"

namespace ax::data {
namespace {

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

}  // namespace

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

// The first windows of the token stream span-corrupted as the T5 trainer does (its loader's
// window i starts at token i·(raw - 1) and holds raw tokens; SpanCorruptionRows seeds it with
// mix64(seed ^ mix64(i))), decoded: exactly what training example i is.
Status print_span_corruption(const ShardSet& set, const Tokenizer& tok, uint64_t samples,
                             int64_t encoder_length, uint64_t seed) {
  if (tok.num_sentinels() == 0) {
    return FailedPrecondition("--span-corruption: ", tok.path(),
                              " has no sentinels (train one "
                              "with `ax-data train-tokenizer --extra-ids 100`)");
  }
  AX_ASSIGN_OR_RETURN(SpanLengths lengths, span_lengths(encoder_length));
  std::cout << "span corruption (ENC_SL " << encoder_length << ": windows of " << lengths.raw
            << " tokens -> " << lengths.inputs << " inputs, " << lengths.targets
            << " targets; seed " << seed << "):\n";
  std::vector<uint32_t> raw(static_cast<size_t>(lengths.raw)), inputs, targets;
  for (uint64_t i = 0; i < samples; ++i) {
    const uint64_t begin = i * static_cast<uint64_t>(lengths.raw - 1);
    if (begin + raw.size() > set.num_tokens()) break;
    AX_RETURN_IF_ERROR(set.read(begin, raw));
    AX_RETURN_IF_ERROR(span_corrupt(
        raw, SpanCorruption{}, mix64(seed ^ mix64(i)), tok.vocab_size() - 1, tok.num_sentinels(),
        static_cast<uint32_t>(std::max(0, tok.eos_id())), &inputs, &targets));
    AX_ASSIGN_OR_RETURN(std::string in, tok.decode(inputs));
    AX_ASSIGN_OR_RETURN(std::string out, tok.decode(targets));
    std::cout << "  [" << i << "] inputs  (" << inputs.size() << ") " << one_line(in, 300) << "\n"
              << "      targets (" << targets.size() << ") " << one_line(out, 300) << "\n";
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
  const std::string tokenizer_name =
      idx.tokenizer.kind.empty() ? idx.tokenizer.model_file
                                 : str_cat(idx.tokenizer.model_file, " (", idx.tokenizer.kind, ")");
  std::snprintf(line, sizeof line, "tokenizer   %s, hash %016llx, vocab %u, eos %d, pad %d",
                tokenizer_name.c_str(), static_cast<unsigned long long>(idx.tokenizer.hash),
                idx.tokenizer.vocab_size, idx.tokenizer.eos_id, idx.tokenizer.pad_id);
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

}  // namespace ax::data
