#include "ax/datasets/shards/dataset_index.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "ax/common/file_io.h"
#include "shard_internal.h"

namespace ax::data {
namespace {

using internal::hex64;

// ordered_json keeps the fields in the order written, so index.json reads top-down.
using Json = nlohmann::ordered_json;

constexpr const char* kFormatName = "ax-shards";

std::optional<uint64_t> parse_hex64(const std::string& s) {
  if (s.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') {
      d = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      d = c - 'a' + 10;
    } else {
      return std::nullopt;
    }
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  return v;
}

// A shard name must stay inside the directory: a plain file name, nothing that walks out of it.
bool valid_shard_name(const std::string& name) {
  const std::string suffix = kShardSuffix;
  return name.size() > suffix.size() && ends_with(name, suffix) &&
         name.find('/') == std::string::npos && name.find("..") == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Reads typed fields of index.json; each error names the file and the field.
class FieldReader {
 public:
  explicit FieldReader(std::string file) : file_(std::move(file)) {}

  Status bad(const std::string& where, const char* what) const {
    return DataLoss(file_, ": field '", where, "' ", what);
  }

  StatusOr<const Json*> member(const Json& obj, const std::string& where, const char* key) const {
    auto it = obj.find(key);
    if (it == obj.end()) return bad(where, "is missing");
    return &*it;
  }

  Status get(const Json& obj, const std::string& where, const char* key, uint64_t* out) const {
    AX_ASSIGN_OR_RETURN(const Json* v, member(obj, where, key));
    if (!v->is_number_unsigned()) return bad(where, "is not an unsigned integer");
    *out = v->get<uint64_t>();
    return Status::Ok();
  }

  Status get(const Json& obj, const std::string& where, const char* key, uint32_t* out) const {
    uint64_t v = 0;
    AX_RETURN_IF_ERROR(get(obj, where, key, &v));
    if (v > std::numeric_limits<uint32_t>::max()) return bad(where, "is too large");
    *out = static_cast<uint32_t>(v);
    return Status::Ok();
  }

  Status get(const Json& obj, const std::string& where, const char* key, int32_t* out) const {
    AX_ASSIGN_OR_RETURN(const Json* v, member(obj, where, key));
    if (!v->is_number_integer()) return bad(where, "is not an integer");
    int64_t x = v->get<int64_t>();
    if (x < std::numeric_limits<int32_t>::min() || x > std::numeric_limits<int32_t>::max()) {
      return bad(where, "is out of range");
    }
    *out = static_cast<int32_t>(x);
    return Status::Ok();
  }

  Status get(const Json& obj, const std::string& where, const char* key, std::string* out) const {
    AX_ASSIGN_OR_RETURN(const Json* v, member(obj, where, key));
    if (!v->is_string()) return bad(where, "is not a string");
    *out = v->get<std::string>();
    return Status::Ok();
  }

  Status get_hash(const Json& obj, const std::string& where, const char* key, uint64_t* out) const {
    std::string s;
    AX_RETURN_IF_ERROR(get(obj, where, key, &s));
    std::optional<uint64_t> v = parse_hex64(s);
    if (!v) return bad(where, "is not a 16-digit lowercase hex hash");
    *out = *v;
    return Status::Ok();
  }

  const std::string& file() const { return file_; }

 private:
  std::string file_;
};

Status parse_tokenizer(const FieldReader& r, const Json& j, TokenizerInfo* t) {
  if (!j.is_object()) return r.bad("tokenizer", "is not an object");
  AX_RETURN_IF_ERROR(r.get_hash(j, "tokenizer.hash", "hash", &t->hash));
  AX_RETURN_IF_ERROR(r.get(j, "tokenizer.vocab_size", "vocab_size", &t->vocab_size));
  AX_RETURN_IF_ERROR(r.get(j, "tokenizer.eos_id", "eos_id", &t->eos_id));
  AX_RETURN_IF_ERROR(r.get(j, "tokenizer.pad_id", "pad_id", &t->pad_id));
  if (j.contains("model_file")) {
    AX_RETURN_IF_ERROR(r.get(j, "tokenizer.model_file", "model_file", &t->model_file));
  }
  if (j.contains("kind")) AX_RETURN_IF_ERROR(r.get(j, "tokenizer.kind", "kind", &t->kind));
  return Status::Ok();
}

Status parse_shards(const FieldReader& r, const Json& j, std::vector<ShardEntry>* shards) {
  if (!j.is_array()) return r.bad("shards", "is not an array");
  std::set<std::string> seen;
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& s = j[i];
    const std::string where = str_cat("shards[", i, "]");
    if (!s.is_object()) return r.bad(where, "is not an object");
    ShardEntry e;
    AX_RETURN_IF_ERROR(r.get(s, where + ".file", "file", &e.file));
    AX_RETURN_IF_ERROR(r.get(s, where + ".num_tokens", "num_tokens", &e.num_tokens));
    AX_RETURN_IF_ERROR(r.get(s, where + ".num_docs", "num_docs", &e.num_docs));
    AX_RETURN_IF_ERROR(r.get(s, where + ".bytes", "bytes", &e.bytes));
    AX_RETURN_IF_ERROR(r.get_hash(s, where + ".xxh64", "xxh64", &e.xxh64));
    if (!valid_shard_name(e.file)) {
      return DataLoss(r.file(), ": ", where, ".file \"", e.file,
                      "\" is not a plain file name ending in ", kShardSuffix);
    }
    if (!seen.insert(e.file).second) {
      return DataLoss(r.file(), ": shard file \"", e.file, "\" is listed twice");
    }
    shards->push_back(std::move(e));
  }
  return Status::Ok();
}

// Provenance: informational, so absent fields are fine, but present ones must be well-formed.
Status parse_extras(const FieldReader& r, const Json& j, DatasetIndex* index) {
  if (j.contains("inputs")) {
    const Json& in = j["inputs"];
    if (!in.is_array()) return r.bad("inputs", "is not an array");
    for (const Json& s : in) {
      if (!s.is_string()) return r.bad("inputs", "holds a non-string");
      index->inputs.push_back(s.get<std::string>());
    }
  }
  if (j.contains("skipped_empty")) {
    AX_RETURN_IF_ERROR(r.get(j, "skipped_empty", "skipped_empty", &index->skipped_empty));
  }
  for (auto [key, out] : {std::pair{"skipped_bad", &index->skipped_bad},
                          std::pair{"skipped_long", &index->skipped_long},
                          std::pair{"truncated_long", &index->truncated_long},
                          std::pair{"split_docs", &index->split_docs}}) {
    if (j.contains(key)) AX_RETURN_IF_ERROR(r.get(j, key, key, out));
  }
  if (j.contains("docs_per_set")) {
    const Json& d = j["docs_per_set"];
    if (!d.is_object()) return r.bad("docs_per_set", "is not an object");
    for (auto it = d.begin(); it != d.end(); ++it) {
      if (!it.value().is_number_unsigned()) return r.bad("docs_per_set", "holds a non-count");
      index->docs_per_set[it.key()] = it.value().get<uint64_t>();
    }
  }
  return Status::Ok();
}

StatusOr<DatasetIndex> parse_index(const std::string& file, const Json& j) {
  FieldReader r(file);
  if (!j.is_object()) return DataLoss(file, ": not a JSON object");
  DatasetIndex index;

  std::string format;
  AX_RETURN_IF_ERROR(r.get(j, "format", "format", &format));
  if (format != kFormatName) {
    return DataLoss(file, ": format is \"", format, "\", expected \"", kFormatName, "\"");
  }
  AX_ASSIGN_OR_RETURN(const Json* version, r.member(j, "format_version", "format_version"));
  if (!version->is_number_integer()) return r.bad("format_version", "is not an integer");
  if (version->get<int64_t>() != kIndexFormatVersion) {
    return FailedPrecondition(file, ": format_version ", version->get<int64_t>(),
                              " is not supported (this build reads version ", kIndexFormatVersion,
                              ")");
  }
  index.format_version = kIndexFormatVersion;

  std::string kind;
  AX_RETURN_IF_ERROR(r.get(j, "kind", "kind", &kind));
  if (kind == "lm") {
    index.kind = ShardKind::kLm;
  } else if (kind == "seq2seq") {
    index.kind = ShardKind::kSeq2Seq;
  } else {
    return DataLoss(file, ": kind \"", kind, "\" is neither \"lm\" nor \"seq2seq\"");
  }

  AX_ASSIGN_OR_RETURN(const Json* tokenizer, r.member(j, "tokenizer", "tokenizer"));
  AX_RETURN_IF_ERROR(parse_tokenizer(r, *tokenizer, &index.tokenizer));
  AX_RETURN_IF_ERROR(r.get(j, "frame_tokens", "frame_tokens", &index.frame_tokens));
  if (index.frame_tokens == 0 || index.frame_tokens > kMaxFrameTokens) {
    return DataLoss(file, ": frame_tokens ", index.frame_tokens, " is outside [1, ",
                    kMaxFrameTokens, "]");
  }
  AX_RETURN_IF_ERROR(r.get(j, "num_tokens", "num_tokens", &index.num_tokens));
  AX_RETURN_IF_ERROR(r.get(j, "num_docs", "num_docs", &index.num_docs));
  AX_ASSIGN_OR_RETURN(const Json* shards, r.member(j, "shards", "shards"));
  AX_RETURN_IF_ERROR(parse_shards(r, *shards, &index.shards));
  AX_RETURN_IF_ERROR(parse_extras(r, j, &index));

  uint64_t tokens = 0, docs = 0;
  for (const ShardEntry& e : index.shards) {
    if (__builtin_add_overflow(tokens, e.num_tokens, &tokens) ||
        __builtin_add_overflow(docs, e.num_docs, &docs)) {
      return DataLoss(file, ": shard counts overflow");
    }
    if (index.kind == ShardKind::kSeq2Seq && e.num_docs % 2 != 0) {
      return DataLoss(file, ": seq2seq shard ", e.file, " holds an odd number of documents (",
                      e.num_docs, ")");
    }
  }
  if (tokens != index.num_tokens || docs != index.num_docs) {
    return DataLoss(file, ": shards hold ", tokens, " tokens and ", docs,
                    " documents, but num_tokens is ", index.num_tokens, " and num_docs is ",
                    index.num_docs);
  }
  return index;
}

Json to_json(const DatasetIndex& index) {
  Json j;
  j["format"] = kFormatName;
  j["format_version"] = kIndexFormatVersion;
  j["kind"] = index.kind == ShardKind::kSeq2Seq ? "seq2seq" : "lm";
  j["tokenizer"] = Json{{"hash", hex64(index.tokenizer.hash)},
                        {"vocab_size", index.tokenizer.vocab_size},
                        {"eos_id", index.tokenizer.eos_id},
                        {"pad_id", index.tokenizer.pad_id},
                        {"model_file", index.tokenizer.model_file}};
  if (!index.tokenizer.kind.empty()) j["tokenizer"]["kind"] = index.tokenizer.kind;
  j["frame_tokens"] = index.frame_tokens;
  j["num_tokens"] = index.num_tokens;
  j["num_docs"] = index.num_docs;
  Json shards = Json::array();
  for (const ShardEntry& e : index.shards) {
    shards.push_back(Json{{"file", e.file},
                          {"num_tokens", e.num_tokens},
                          {"num_docs", e.num_docs},
                          {"bytes", e.bytes},
                          {"xxh64", hex64(e.xxh64)}});
  }
  j["shards"] = std::move(shards);
  j["inputs"] = index.inputs;
  j["skipped_empty"] = index.skipped_empty;
  j["skipped_bad"] = index.skipped_bad;
  j["skipped_long"] = index.skipped_long;
  j["truncated_long"] = index.truncated_long;
  j["split_docs"] = index.split_docs;
  Json sets = Json::object();
  for (const auto& [name, count] : index.docs_per_set) sets[name] = count;
  j["docs_per_set"] = std::move(sets);
  return j;
}

}  // namespace

StatusOr<DatasetIndex> read_dataset_index(const std::string& dir) {
  const std::string path = join_path(dir, kIndexFile);
  AX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  Json j;
  try {
    j = Json::parse(text);
  } catch (const Json::exception& e) {
    return DataLoss(path, ": invalid JSON: ", e.what());
  }
  return parse_index(path, j);
}

Status write_dataset_index(const std::string& dir, const DatasetIndex& index) {
  // Replace rather than throw on invalid UTF-8 (input file names come from the file system).
  const std::string text =
      to_json(index).dump(2, ' ', false, Json::error_handler_t::replace) + "\n";
  return write_file_atomically(join_path(dir, kIndexFile), text);
}

}  // namespace ax::data
