#include "train_state.h"

#include <map>
#include <nlohmann/json.hpp>

namespace ax::train {
namespace {

using Json = nlohmann::json;

constexpr const char* kGroups[] = {"params", "adam_m", "adam_v"};

HostTensor to_host(const std::string& group, const ParamSpec& spec, Backend* be, Tensor flat) {
  HostTensor t;
  t.name = group + "/" + spec.name;
  t.shape = spec.shape;
  t.data.resize(static_cast<size_t>(spec.numel));
  be->copy_to_host(t.data.data(), param_view(spec, flat.data));
  return t;
}

StatusOr<Json> parse_blob(const CheckpointState& state, const std::string& name) {
  auto it = state.blobs.find(name);
  if (it == state.blobs.end()) return DataLoss("checkpoint of step ", state.step, " has no ", name);
  Json j = Json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLoss("checkpoint of step ", state.step, ": ", name, " is not a JSON object");
  }
  return j;
}

StatusOr<uint64_t> get_uint(const Json& j, const char* key, const std::string& blob) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    return DataLoss(blob, ": '", key, "' is missing or not a non-negative integer");
  }
  return it->get<uint64_t>();
}

// "model.num_layers" -> value for every leaf of the nested config JSON.
void flatten(const Json& j, const std::string& prefix, std::map<std::string, Json>* out) {
  if (!j.is_object()) {
    (*out)[prefix] = j;
    return;
  }
  for (const auto& [key, value] : j.items()) {
    flatten(value, prefix.empty() ? key : prefix + "." + key, out);
  }
}

// Appends the tensors `group`/<name> of every parameter of the layout, checking that each is
// present, whole and of the parameter's shape.
Status collect_group(const CheckpointState& state, const ParamLayout& layout, const char* group,
                     std::vector<const HostTensor*>* out) {
  std::map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : state.tensors) by_name[t.name] = &t;
  for (const ParamSpec& spec : layout.specs()) {
    const std::string name = str_cat(group, "/", spec.name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return DataLoss("checkpoint of step ", state.step, " has no tensor ", name);
    }
    const HostTensor& t = *it->second;
    const bool whole = t.logical_shape.empty() || t.logical_shape == t.shape;
    if (t.shape != spec.shape || !whole || static_cast<int64_t>(t.data.size()) != spec.numel) {
      return DataLoss("checkpoint of step ", state.step, ": tensor ", name,
                      " does not have the model's shape");
    }
    out->push_back(&t);
  }
  return Status::Ok();
}

void copy_group(const Model& model, std::span<const HostTensor* const> sources, Tensor flat) {
  const std::vector<ParamSpec>& specs = model.layout().specs();
  for (size_t i = 0; i < specs.size(); ++i) {
    model.backend()->copy_from_host(param_view(specs[i], flat.data), sources[i]->data.data());
  }
}

}  // namespace

CheckpointState capture_state(const Config& config, const Model& model, const AdamW& optimizer,
                              const TrainProgress& progress) {
  CheckpointState state;
  state.step = progress.step;
  Backend* be = model.backend();
  const Tensor flats[] = {model.params(), optimizer.m(), optimizer.v()};
  for (int g = 0; g < 3; ++g) {
    for (const ParamSpec& spec : model.layout().specs()) {
      state.tensors.push_back(to_host(kGroups[g], spec, be, flats[g]));
    }
  }
  state.blobs["config.json"] = to_json(config);
  state.blobs["loader.json"] =
      Json{{"epoch", progress.loader.epoch}, {"sample_in_epoch", progress.loader.sample_in_epoch}}
          .dump(2);
  // Training draws no random numbers after the initialisation (no dropout); the seed is kept
  // so that a sampler or a later dropout stream can be derived from it.
  state.blobs["rng.json"] = Json{{"generator", "splitmix64"}, {"seed", config.train.seed}}.dump(2);
  state.blobs["trainer.json"] =
      Json{{"step", progress.step}, {"tokens_seen", progress.tokens_seen}}.dump(2);
  return state;
}

Status restore_state(const CheckpointState& state, const Config& config, Model* model,
                     AdamW* optimizer, TrainProgress* progress) {
  const std::string where = str_cat("checkpoint of step ", state.step);
  // 1. Check everything.
  AX_ASSIGN_OR_RETURN(Json config_json, parse_blob(state, "config.json"));
  AX_ASSIGN_OR_RETURN(Config saved, from_json(config_json.dump()));
  ConfigDifference diff = first_model_difference(saved, config);
  if (!diff.key.empty()) {
    return FailedPrecondition(where, " was trained with ", diff.key, "=", diff.old_value,
                              ", the config now has ", diff.new_value);
  }
  AX_ASSIGN_OR_RETURN(Json loader_json, parse_blob(state, "loader.json"));
  AX_ASSIGN_OR_RETURN(Json trainer_json, parse_blob(state, "trainer.json"));
  TrainProgress restored;
  AX_ASSIGN_OR_RETURN(restored.loader.epoch, get_uint(loader_json, "epoch", "loader.json"));
  AX_ASSIGN_OR_RETURN(restored.loader.sample_in_epoch,
                      get_uint(loader_json, "sample_in_epoch", "loader.json"));
  AX_ASSIGN_OR_RETURN(uint64_t step, get_uint(trainer_json, "step", "trainer.json"));
  AX_ASSIGN_OR_RETURN(uint64_t tokens, get_uint(trainer_json, "tokens_seen", "trainer.json"));
  restored.step = static_cast<int64_t>(step);
  restored.tokens_seen = static_cast<int64_t>(tokens);
  if (restored.step != state.step) {
    return DataLoss(where, ": trainer.json says step ", restored.step);
  }

  std::vector<const HostTensor*> sources;  // in (group, layout) order
  for (const char* group : kGroups) {
    AX_RETURN_IF_ERROR(collect_group(state, model->layout(), group, &sources));
  }

  // 2. Apply.
  const Tensor flats[] = {model->params(), optimizer->m(), optimizer->v()};
  const size_t per_group = model->layout().specs().size();
  for (size_t g = 0; g < 3; ++g) {
    copy_group(*model, std::span(sources).subspan(g * per_group, per_group), flats[g]);
  }
  model->sync_compute_weights();
  *progress = restored;
  return Status::Ok();
}

Status restore_parameters(const CheckpointState& state, Model* model) {
  std::vector<const HostTensor*> sources;
  AX_RETURN_IF_ERROR(collect_group(state, model->layout(), "params", &sources));
  copy_group(*model, sources, model->params());
  model->sync_compute_weights();
  return Status::Ok();
}

ConfigDifference first_model_difference(const Config& old_config, const Config& new_config) {
  std::map<std::string, Json> a, b;
  flatten(Json::parse(to_json(old_config)), "", &a);
  flatten(Json::parse(to_json(new_config)), "", &b);
  for (const auto& [key, value] : b) {
    if (key.rfind("model.", 0) != 0) continue;
    auto it = a.find(key);
    if (it == a.end() || it->second != value) {
      return {key, it == a.end() ? "(absent)" : it->second.dump(), value.dump()};
    }
  }
  return {};
}

}  // namespace ax::train
