// --init-from: what a path is (an ax run or step directory, a Hugging Face directory), its model
// config, and the reading of a rank's regions of params/* from it. Hugging Face tensors are read
// through the table of hf_format.h, the one the export writes with; each region costs only the
// byte ranges it covers. docs/fine-tuning.md.

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "checkpoint_internal.h"
#include "hf_format.h"
#include "safetensors.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;
using ckpt::join_path;

constexpr const char* kIndexName = "model.safetensors.index.json";

using ckpt::shape_text;

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

StatusOr<Json> read_json(const std::string& path) {
  AX_ASSIGN_OR_RETURN(std::string text, ckpt::read_file(path));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path, ": not a JSON object");
  return j;
}

// The safetensors files of a Hugging Face directory (headers only) and where each tensor is.
class HfFiles {
 public:
  static StatusOr<HfFiles> open(const std::string& dir) {
    HfFiles out;
    std::vector<std::string> names;
    const std::string index_path = join_path(dir, kIndexName);
    if (is_file(index_path)) {
      AX_ASSIGN_OR_RETURN(Json index, read_json(index_path));
      if (!index.contains("weight_map") || !index["weight_map"].is_object()) {
        return InvalidArgument(index_path, ": has no \"weight_map\" object");
      }
      std::set<std::string> files;
      for (const auto& [tensor, file] : index["weight_map"].items()) {
        const std::string name = file.is_string() ? file.get<std::string>() : "";
        if (name.empty() || name.find('/') != std::string::npos) {
          return InvalidArgument(index_path, ": weight_map[\"", tensor, "\"] = ", file.dump(),
                                 " is not a file name of the directory");
        }
        files.insert(name);
      }
      names.assign(files.begin(), files.end());
    } else {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        if (e.path().extension() == ".safetensors") names.push_back(e.path().filename().string());
      }
      if (ec) return IoError(str_cat("list ", dir), ec.value());
      std::sort(names.begin(), names.end());
    }
    if (names.empty()) {
      return NotFound(dir,
                      ": no *.safetensors file (a Hugging Face directory holds config.json "
                      "and model.safetensors or ",
                      kIndexName, ")");
    }
    for (const std::string& name : names) {
      AX_ASSIGN_OR_RETURN(ckpt::SafetensorsReader reader,
                          ckpt::SafetensorsReader::open(join_path(dir, name)));
      out.files_.push_back(std::make_unique<ckpt::SafetensorsReader>(std::move(reader)));
      const ckpt::SafetensorsReader* file = out.files_.back().get();
      for (const ckpt::SafetensorsEntry& e : file->entries()) {
        auto [it, added] = out.where_.emplace(e.key, Where{file, &e});
        if (!added) {
          return InvalidArgument("tensor '", e.key, "' is in both ", it->second.file->path(),
                                 " and ", file->path());
        }
      }
    }
    return out;
  }

  struct Where {
    const ckpt::SafetensorsReader* file = nullptr;
    const ckpt::SafetensorsEntry* entry = nullptr;
  };
  // The tensor `name`; GPT-2 files saved from GPT2Model have no "transformer." prefix.
  const Where* find(const std::string& name) const {
    constexpr std::string_view kGpt2Prefix = "transformer.";
    auto it = where_.find(name);
    if (it == where_.end() && name.starts_with(kGpt2Prefix)) {
      it = where_.find(name.substr(kGpt2Prefix.size()));
    }
    return it == where_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, Where>& tensors() const { return where_; }

 private:
  std::vector<std::unique_ptr<ckpt::SafetensorsReader>> files_;
  std::map<std::string, Where> where_;
};

// Tensors a Hugging Face file may hold that carry no weights of their own: tied copies of the
// embedding, GPT-2's causal-mask buffers, a saved RoPE frequency table, and the cross-attention
// position-bias table that transformers before 4.0 gave T5's first decoder block (T5 uses no
// position bias in cross-attention; transformers ignores it on load, and checkpoints saved then,
// such as google/t5-v1_1-*, still hold it).
bool is_alias_or_buffer(const std::string& name, const ModelConfig& m) {
  if (name == "lm_head.weight" && m.tied_embeddings) return true;
  if (name == "encoder.embed_tokens.weight" || name == "decoder.embed_tokens.weight" ||
      name == "decoder.block.0.layer.1.EncDecAttention.relative_attention_bias.weight") {
    return m.family == ModelFamily::kT5;
  }
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias") ||
         name.ends_with("rotary_emb.inv_freq");
}

// Checks the whole directory against the table before anything is read: every part present
// with its shape, no tensor left over.
Status check_hf_tensors(const std::string& dir, const HfFiles& files,
                        const std::vector<ckpt::HfTensor>& table, const ModelConfig& m) {
  std::set<std::string> used;
  for (const ckpt::HfTensor& t : table) {
    if (t.ax.empty()) continue;  // only a model without biases has these; never an import
    for (const ckpt::HfPart& part : t.parts) {
      const HfFiles::Where* w = files.find(part.name);
      if (w == nullptr) {
        return NotFound(dir, ": no tensor '", part.name, "' (ax's params/", t.ax,
                        "), which config.json's model needs");
      }
      const std::vector<int64_t> want = ckpt::hf_shape(t, part);
      if (w->entry->shape != want) {
        return InvalidArgument(w->file->path(), ": tensor '", part.name, "' has shape ",
                               shape_text(w->entry->shape), ", config.json implies ",
                               shape_text(want));
      }
      used.insert(w->entry->key);
    }
  }
  for (const auto& [name, w] : files.tensors()) {
    if (!used.count(name) && !is_alias_or_buffer(name, m)) {
      return InvalidArgument(w.file->path(), ": tensor '", name, "' has no place in ax's ",
                             name_of(m.family), " model of config.json (another architecture?)");
    }
  }
  return Status::Ok();
}

// Fills the region [offset, offset + shape) of ax tensor `t` from the Hugging Face parts.
Status read_hf_region(const HfFiles& files, const ckpt::HfTensor& t, const TensorRegion& region,
                      double query_scale, float* out) {
  const bool matrix = t.shape.size() == 2;
  const int64_t r0 = region.offset[0], nr = region.shape[0];
  const int64_t c0 = matrix ? region.offset[1] : 0, nc = matrix ? region.shape[1] : 1;
  std::vector<float> buf;
  for (const ckpt::HfPart& part : t.parts) {
    const int64_t a = std::max(r0, part.row), b = std::min(r0 + nr, part.row + part.rows);
    if (a >= b) continue;
    const HfFiles::Where& w = *files.find(part.name);
    float* dst = out + (a - r0) * nc;
    const int64_t local = a - part.row, n = b - a;
    if (!matrix) {
      AX_RETURN_IF_ERROR(w.file->read_box(*w.entry, {local}, {n}, dst));
    } else if (part.layout != ckpt::HfLayout::kTransposed) {
      AX_RETURN_IF_ERROR(w.file->read_box(*w.entry, {local, c0}, {n, nc}, dst));
    } else {  // Conv1D (in, out): the region's columns are its rows
      buf.resize(static_cast<size_t>(n * nc));
      AX_RETURN_IF_ERROR(w.file->read_box(*w.entry, {c0, local}, {nc, n}, buf.data()));
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < nc; ++j) dst[i * nc + j] = buf[j * n + i];
      }
    }
    if (part.layout == ckpt::HfLayout::kQuery) {
      for (int64_t i = 0; i < n * nc; ++i) {
        dst[i] = static_cast<float>(static_cast<double>(dst[i]) * query_scale);
      }
    }
  }
  return Status::Ok();
}

// A Hugging Face directory: headers and the table, checked at open().
class HfReader : public InitReader {
 public:
  static StatusOr<std::unique_ptr<InitReader>> open(const InitSource& source) {
    AX_ASSIGN_OR_RETURN(HfFiles files, HfFiles::open(source.dir));
    AX_ASSIGN_OR_RETURN(std::vector<ckpt::HfTensor> table,
                        ckpt::hf_tensors(source.model, source.model.vocab_size));
    AX_RETURN_IF_ERROR(check_hf_tensors(source.dir, files, table, source.model));
    return std::unique_ptr<InitReader>(new HfReader(source, std::move(files), std::move(table)));
  }

  StatusOr<std::vector<HostTensor>> read(const std::vector<TensorRegion>& regions) override {
    std::vector<HostTensor> out;
    for (const TensorRegion& region : regions) {
      auto it = by_name_.find(region.name);
      if (it == by_name_.end()) {
        return NotFound(source_.description, " has no ", region.name, " for this model");
      }
      const ckpt::HfTensor& t = *it->second;
      bool inside = region.offset.size() == t.shape.size() && region.shape.size() == t.shape.size();
      for (size_t k = 0; inside && k < t.shape.size(); ++k) {
        inside = region.offset[k] >= 0 && region.offset[k] + region.shape[k] <= t.shape[k];
      }
      if (!inside) {
        return InvalidArgument(region.name, " of ", source_.description, " has shape ",
                               shape_text(t.shape), ", the model asks for the part at ",
                               shape_text(region.offset), " of shape ", shape_text(region.shape));
      }
      HostTensor h;
      h.name = region.name;
      h.shape = region.shape;
      h.offset = region.offset;
      h.logical_shape = t.shape;
      int64_t n = 1;
      for (int64_t d : region.shape) n *= d;
      h.data.resize(static_cast<size_t>(n));
      AX_RETURN_IF_ERROR(read_hf_region(files_, t, region, query_scale_, h.data.data()));
      out.push_back(std::move(h));
    }
    return out;
  }

 private:
  HfReader(InitSource source, HfFiles files, std::vector<ckpt::HfTensor> table)
      : source_(std::move(source)),
        files_(std::move(files)),
        table_(std::move(table)),
        query_scale_(ckpt::t5_query_scale(source_.model)) {
    for (const ckpt::HfTensor& t : table_) {
      if (!t.ax.empty()) by_name_["params/" + t.ax] = &t;
    }
  }

  InitSource source_;
  HfFiles files_;
  std::vector<ckpt::HfTensor> table_;
  std::map<std::string, const ckpt::HfTensor*> by_name_;
  double query_scale_;
};

// An ax checkpoint: every file verified at open().
class AxReader : public InitReader {
 public:
  static StatusOr<std::unique_ptr<InitReader>> open(const InitSource& source) {
    AX_ASSIGN_OR_RETURN(ckpt::CheckpointReader reader,
                        ckpt::CheckpointReader::open(source.dir, source.step));
    return std::unique_ptr<InitReader>(new AxReader(source.dir, std::move(reader)));
  }
  StatusOr<std::vector<HostTensor>> read(const std::vector<TensorRegion>& regions) override {
    return ckpt::read_regions(reader_, dir_, regions);
  }

 private:
  AxReader(std::string dir, ckpt::CheckpointReader reader)
      : dir_(std::move(dir)), reader_(std::move(reader)) {}
  std::string dir_;
  ckpt::CheckpointReader reader_;
};

StatusOr<InitSource> open_ax(const std::string& step_dir, int64_t step) {
  InitSource source;
  source.kind = InitSource::Kind::kAx;
  source.dir = step_dir;
  source.step = step;
  source.description = str_cat("ax checkpoint ", step_dir);
  const std::string config_path = join_path(step_dir, "config.json");
  AX_ASSIGN_OR_RETURN(std::string text, ckpt::read_file(config_path));
  StatusOr<Config> config = from_json(text);
  if (!config.ok()) return config.status().with_context(config_path);
  source.model = config->model;
  return source;
}

}  // namespace

StatusOr<InitSource> open_init_source(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();  // "step_00000100/": the name without the slash
  if (!fs::is_directory(p, ec)) return NotFound("--init-from ", path, ": no such directory");
  if (fs::is_directory(p / "checkpoints", ec)) {
    CheckpointManager run(p.string(), 1);
    AX_ASSIGN_OR_RETURN(std::optional<int64_t> latest, run.latest());
    if (!latest) return NotFound("--init-from ", path, ": the run has no committed checkpoint");
    return open_ax(run.step_dir(*latest), *latest);
  }
  if (is_file(p / ckpt::kCommitFile)) {
    std::optional<int64_t> step = ckpt::parse_step_name(p.filename().string());
    if (!step) {
      return InvalidArgument("--init-from ", path,
                             ": an ax checkpoint directory is named step_<N>");
    }
    return open_ax(p.string(), *step);
  }
  const std::string config_path = (p / "config.json").string();
  if (!is_file(config_path)) {
    return NotFound("--init-from ", path,
                    ": neither an ax run directory (checkpoints/), an ax checkpoint (COMMIT) nor "
                    "a Hugging Face directory (config.json and *.safetensors)");
  }
  AX_ASSIGN_OR_RETURN(Json config, read_json(config_path));
  InitSource source;
  source.kind = InitSource::Kind::kHuggingFace;
  source.dir = p.string();
  AX_ASSIGN_OR_RETURN(source.model, ckpt::model_from_hf_config(config, config_path));
  source.description = str_cat("Hugging Face ", name_of(source.model.family), " ", source.dir);
  return source;
}

StatusOr<std::unique_ptr<InitReader>> InitReader::open(const InitSource& source) {
  StatusOr<std::unique_ptr<InitReader>> reader =
      source.kind == InitSource::Kind::kAx ? AxReader::open(source) : HfReader::open(source);
  if (!reader.ok()) return reader.status().with_context(str_cat("--init-from ", source.dir));
  return reader;
}

StatusOr<CheckpointState> load_init_parameters(const InitSource& source,
                                               const std::vector<TensorRegion>& regions) {
  AX_ASSIGN_OR_RETURN(std::unique_ptr<InitReader> reader, InitReader::open(source));
  CheckpointState state;
  state.step = source.step;
  StatusOr<std::vector<HostTensor>> tensors = reader->read(regions);
  if (!tensors.ok()) return tensors.status().with_context(str_cat("--init-from ", source.dir));
  state.tensors = std::move(*tensors);
  return state;
}

}  // namespace ax::train
