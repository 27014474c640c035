// Export of the params/* tensors to Hugging Face names and layouts (GPT-2, Llama, T5). The mapping
// is in docs/parameter-names.md and docs/checkpoint-format.md.

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "checkpoint_internal.h"
#include "checkpoint_io.h"
#include "hf_format.h"
#include "safetensors.h"

namespace ax::train {
namespace {

using OrderedJson = nlohmann::ordered_json;
constexpr int64_t kAny = -1;  // a dimension take() does not check

using ckpt::shape_text;

// The params/* tensors of a state, by ax name. take() checks the documented shape and marks the
// tensor used, so that a tensor without a Hugging Face name is an error rather than dropped.
class Params {
 public:
  explicit Params(const CheckpointState& state) {
    for (const HostTensor& t : state.tensors) {
      if (starts_with(t.name, "params/")) tensors_[t.name.substr(7)] = &t;
    }
  }

  StatusOr<const HostTensor*> take(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return NotFound("Hugging Face export: no tensor params/", name);
    const HostTensor& t = *it->second;
    bool match = t.shape.size() == shape.size();
    for (size_t k = 0; match && k < shape.size(); ++k) {
      match = shape[k] == kAny || shape[k] == t.shape[k];
    }
    if (!match) {
      return FailedPrecondition("Hugging Face export: params/", name, " has shape ",
                                shape_text(t.shape), ", the config implies ", shape_text(shape));
    }
    if (!t.logical_shape.empty() && t.logical_shape != t.shape) {
      return FailedPrecondition("Hugging Face export: params/", name,
                                " is a slice; export the whole tensors of a loaded checkpoint");
    }
    used_.insert(name);
    return &t;
  }

  Status check_all_used() const {
    for (const auto& [name, t] : tensors_) {
      if (!used_.count(name)) {
        return FailedPrecondition("Hugging Face export: params/", name,
                                  " has no Hugging Face name for this model config");
      }
    }
    return Status::Ok();
  }

 private:
  std::map<std::string, const HostTensor*> tensors_;
  std::set<std::string> used_;
};

// The tensors to write; the ones made here (transposes, scaled queries, zeros) are owned.
struct Exported {
  std::vector<ckpt::TensorRef> refs;
  std::deque<std::vector<float>> owned;

  void add(const std::string& name, std::vector<int64_t> shape, const float* data) {
    refs.push_back({name, std::move(shape), data});
  }
  void add_owned(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    owned.push_back(std::move(data));
    add(name, std::move(shape), owned.back().data());
  }
};

// One Hugging Face tensor from rows of the ax tensor `t`, as the table says.
void export_part(const ckpt::HfTensor& spec, const ckpt::HfPart& part, const HostTensor& t,
                 float query_scale, Exported* out) {
  const int64_t cols = t.shape.size() == 2 ? t.shape[1] : 1;
  const float* rows = t.data.data() + part.row * cols;
  std::vector<int64_t> shape = ckpt::hf_shape(spec, part);
  switch (part.layout) {
    case ckpt::HfLayout::kSame:
      out->add(part.name, std::move(shape), rows);
      return;
    case ckpt::HfLayout::kQuery: {
      std::vector<float> q(rows, rows + part.rows * cols);
      for (float& x : q) x *= query_scale;
      out->add_owned(part.name, std::move(shape), std::move(q));
      return;
    }
    case ckpt::HfLayout::kTransposed: {
      std::vector<float> transposed(static_cast<size_t>(part.rows * cols));
      for (int64_t r = 0; r < part.rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) transposed[c * part.rows + r] = rows[r * cols + c];
      }
      out->add_owned(part.name, std::move(shape), std::move(transposed));
      return;
    }
  }
}

}  // namespace

Status export_hugging_face(const CheckpointState& state, const Config& config,
                           const std::string& out_dir) {
  const ModelConfig& m = config.model;
  Params params(state);
  AX_ASSIGN_OR_RETURN(const HostTensor* wte, params.take("wte", {kAny, m.model_dim}));
  const int64_t vocab = wte->shape[0];
  AX_ASSIGN_OR_RETURN(std::vector<ckpt::HfTensor> table, ckpt::hf_tensors(m, vocab));
  // T5's queries: ax divides the logits by sqrt(d_kv), Hugging Face does not (exact for d_kv a
  // power of 4, such as 64 and 16).
  const float query_scale = static_cast<float>(1.0 / ckpt::t5_query_scale(m));
  Exported exported;
  for (const ckpt::HfTensor& t : table) {
    if (t.ax.empty()) {
      const int64_t n = t.shape[0];
      exported.add_owned(t.parts[0].name, {n}, std::vector<float>(static_cast<size_t>(n), 0.0f));
      continue;
    }
    AX_ASSIGN_OR_RETURN(const HostTensor* h, params.take(t.ax, t.shape));
    for (const ckpt::HfPart& part : t.parts) export_part(t, part, *h, query_scale, &exported);
  }
  AX_RETURN_IF_ERROR(params.check_all_used());
  const OrderedJson hf_config = ckpt::hf_config(m, vocab);

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return IoError(str_cat("create ", out_dir), ec.value());
  // Each file under a temporary name first, so an interrupted export leaves no half file.
  const std::string weights = "model.safetensors", config_json = "config.json";
  AX_RETURN_IF_ERROR(
      ckpt::write_safetensors(out_dir, weights + ".tmp", exported.refs, {{"format", "pt"}}, nullptr)
          .status());
  AX_RETURN_IF_ERROR(
      ckpt::write_file(out_dir, config_json + ".tmp", hf_config.dump(2) + "\n", nullptr).status());
  for (const std::string& name : {weights, config_json}) {
    const std::string path = ckpt::join_path(out_dir, name);
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
      return IoError(str_cat("rename ", path, ".tmp"), errno);
    }
  }
  return ckpt::fsync_dir(out_dir);
}

StatusOr<int64_t> export_run(const std::string& run_dir, std::optional<int64_t> step,
                             const std::string& out_dir) {
  CheckpointManager run(run_dir, 1);
  if (!step) {
    AX_ASSIGN_OR_RETURN(step, run.latest());
    if (!step) return NotFound("no checkpoint in ", run_dir, " (train first with ax-train)");
  }
  // The config first, so that only the parameters are read (not the optimizer's moments).
  const std::string config_path = ckpt::join_path(run.step_dir(*step), "config.json");
  StatusOr<std::string> text = ckpt::read_file(config_path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return NotFound("no checkpoint of step ", *step, " in ", run_dir);
    }
    return text.status();
  }
  StatusOr<Config> config = from_json(*text);
  if (!config.ok()) return config.status().with_context(config_path);
  AX_ASSIGN_OR_RETURN(std::vector<ckpt::HfTensor> table,
                      ckpt::hf_tensors(config->model, config->model.vocab_size));
  std::vector<TensorRegion> regions;
  for (const ckpt::HfTensor& t : table) {
    if (!t.ax.empty()) {
      regions.push_back({"params/" + t.ax, std::vector<int64_t>(t.shape.size(), 0), t.shape});
    }
  }
  AX_ASSIGN_OR_RETURN(CheckpointState state, run.load(*step, regions));
  AX_RETURN_IF_ERROR(export_hugging_face(state, *config, out_dir));
  return *step;
}

}  // namespace ax::train
