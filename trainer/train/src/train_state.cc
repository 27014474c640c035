#include "ax/trainer/train/train_state.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "ax/trainer/parallel/param_boxes.h"

namespace ax::train {
namespace {

using Json = nlohmann::json;

constexpr const char* kGroups[] = {"params", "adam_m", "adam_v"};

std::string dims_text(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(dims[i]);
  }
  return out + "]";
}

// Host buffers of an earlier capture, handed out again in the same order (a capture of the same
// store asks for the same sizes): no allocation, no page faults, no zero fill.
class BufferPool {
 public:
  explicit BufferPool(CheckpointState&& old) {
    for (HostTensor& t : old.tensors) buffers_.push_back(std::move(t.data));
  }
  std::vector<float> take(size_t n) {
    if (next_ < buffers_.size() && buffers_[next_].size() == n) return std::move(buffers_[next_++]);
    ++next_;
    return std::vector<float>(n);
  }

 private:
  std::vector<std::vector<float>> buffers_;
  size_t next_ = 0;
};

// Appends this rank's part of one group (params, adam_m or adam_v), read from `flat` (a shard
// buffer), as slices of the logical tensors. A whole tensor keeps an empty offset.
void append_group(const std::string& group, const ParamStore& store, Tensor flat,
                  bool skip_replicated, BufferPool* pool, std::vector<HostTensor>* out) {
  Backend* be = store.backend();
  std::vector<float> run;
  for (const OwnedRange& r : store.owned()) {
    if (skip_replicated && r.spec->split_dim < 0) continue;
    const Tensor source(static_cast<float*>(flat.data) + r.shard_offset, DType::kF32, {r.length});
    const std::vector<LogicalBox> boxes = logical_boxes(*r.spec, r.local_begin, r.length);
    const bool one_box =
        boxes.size() == 1 && boxes[0].data_offset == 0 && boxes[0].length == r.length;
    if (!one_box) {
      run.resize(static_cast<size_t>(r.length));
      be->copy_to_host(run.data(), source);
    }
    for (const LogicalBox& box : boxes) {
      HostTensor t;
      t.name = group + "/" + r.spec->name;
      t.shape = box.shape;
      t.data = pool->take(static_cast<size_t>(box.length));
      if (one_box) {
        be->copy_to_host(t.data.data(), source);  // straight into the tensor: the common case
      } else {
        std::copy(run.begin() + box.data_offset, run.begin() + box.data_offset + box.length,
                  t.data.begin());
      }
      if (box.shape != r.spec->logical_shape) {
        t.logical_shape = r.spec->logical_shape;
        t.offset = box.offset;
      }
      out->push_back(std::move(t));
    }
  }
}

// Copies the box [offset, offset + shape) of a logical tensor out of `t` (the whole tensor or a
// slice of it), or returns false when `t` does not contain the box.
bool extract_box(const HostTensor& t, const std::vector<int64_t>& logical_shape,
                 const LogicalBox& box, float* dst) {
  const std::vector<int64_t> t_offset =
      t.offset.empty() ? std::vector<int64_t>(logical_shape.size(), 0) : t.offset;
  if (t.shape.size() != box.shape.size() || t_offset.size() != box.shape.size()) return false;
  if (!t.logical_shape.empty() && t.logical_shape != logical_shape) return false;
  if (t.logical_shape.empty() && t.shape != logical_shape) return false;
  for (size_t k = 0; k < box.shape.size(); ++k) {
    if (box.offset[k] < t_offset[k] || box.offset[k] + box.shape[k] > t_offset[k] + t.shape[k]) {
      return false;
    }
  }
  if (box.shape.size() == 1) {
    std::copy_n(t.data.begin() + (box.offset[0] - t_offset[0]), box.shape[0], dst);
    return true;
  }
  const int64_t cols = t.shape[1];
  for (int64_t r = 0; r < box.shape[0]; ++r) {
    const int64_t src = (box.offset[0] - t_offset[0] + r) * cols + (box.offset[1] - t_offset[1]);
    std::copy_n(t.data.begin() + src, box.shape[1], dst + r * box.shape[1]);
  }
  return true;
}

// This rank's part of one group, assembled on the host in shard order (index = shard offset).
// DataLoss when a box is in none of the state's tensors.
Status gather_group(const CheckpointState& state, const ParamStore& store, const char* group,
                    std::vector<float>* shard) {
  std::map<std::string, std::vector<const HostTensor*>> by_name;
  for (const HostTensor& t : state.tensors) by_name[t.name].push_back(&t);
  shard->assign(static_cast<size_t>(store.params().numel()), 0.f);
  for (const OwnedRange& r : store.owned()) {
    const std::string name = str_cat(group, "/", r.spec->name);
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return DataLoss("checkpoint of step ", state.step, " has no tensor ", name);
    }
    for (const LogicalBox& box : logical_boxes(*r.spec, r.local_begin, r.length)) {
      float* dst = shard->data() + r.shard_offset + box.data_offset;
      bool found = false;
      for (const HostTensor* t : it->second) {
        if (extract_box(*t, r.spec->logical_shape, box, dst)) {
          found = true;
          break;
        }
      }
      if (!found) {
        return DataLoss("checkpoint of step ", state.step, ": tensor ", name,
                        " does not have the model's shape or lacks the part at ",
                        dims_text(box.offset), " of shape ", dims_text(box.shape));
      }
    }
  }
  return Status::Ok();
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

}  // namespace

CheckpointState host_buffers(const ParamStore& store) {
  CheckpointState state;
  const bool skip_replicated = store.parallel().tensor_rank != 0;
  for (int g = 0; g < 3; ++g) {
    for (const OwnedRange& r : store.owned()) {
      if (skip_replicated && r.spec->split_dim < 0) continue;
      for (const LogicalBox& box : logical_boxes(*r.spec, r.local_begin, r.length)) {
        HostTensor t;
        t.data.assign(static_cast<size_t>(box.length), 0.0f);  // touches every page
        state.tensors.push_back(std::move(t));
      }
    }
  }
  return state;
}

CheckpointState capture_state(const Config& config, const ParamStore& store, const AdamW& optimizer,
                              const TrainProgress& progress, CheckpointState reuse) {
  BufferPool pool(std::move(reuse));
  CheckpointState state;
  state.step = progress.step;
  // Tensor ranks other than 0 hold copies of the parameters that are not split.
  const bool skip_replicated = store.parallel().tensor_rank != 0;
  const Tensor flats[] = {store.params(), optimizer.m(), optimizer.v()};
  for (int g = 0; g < 3; ++g) {
    append_group(kGroups[g], store, flats[g], skip_replicated, &pool, &state.tensors);
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

Status restore_state(const CheckpointState& state, const Config& config, ParamStore* store,
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

  std::vector<float> shards[3];
  for (int g = 0; g < 3; ++g) {
    AX_RETURN_IF_ERROR(gather_group(state, *store, kGroups[g], &shards[g]));
  }

  // 2. Apply.
  const Tensor flats[] = {store->params(), optimizer->m(), optimizer->v()};
  for (int g = 0; g < 3; ++g) store->backend()->copy_from_host(flats[g], shards[g].data());
  store->sync_compute_weights();
  *progress = restored;
  return Status::Ok();
}

Status restore_parameters(const CheckpointState& state, ParamStore* store) {
  std::vector<float> shard;
  AX_RETURN_IF_ERROR(gather_group(state, *store, "params", &shard));
  store->backend()->copy_from_host(store->params(), shard.data());
  store->sync_compute_weights();
  return Status::Ok();
}

Status stream_parameters(InitReader* reader, ParamStore* store) {
  Backend* be = store->backend();
  std::vector<float> run;
  for (const OwnedRange& r : store->owned()) {
    const std::vector<LogicalBox> boxes = logical_boxes(*r.spec, r.local_begin, r.length);
    std::vector<TensorRegion> regions;
    for (const LogicalBox& box : boxes) {
      regions.push_back({str_cat("params/", r.spec->name), box.offset, box.shape});
    }
    AX_ASSIGN_OR_RETURN(std::vector<HostTensor> parts, reader->read(regions));
    run.assign(static_cast<size_t>(r.length), 0.f);
    for (size_t i = 0; i < boxes.size(); ++i) {
      AX_CHECK_EQ(static_cast<int64_t>(parts[i].data.size()), boxes[i].length);
      std::copy(parts[i].data.begin(), parts[i].data.end(), run.begin() + boxes[i].data_offset);
    }
    be->copy_from_host(
        Tensor(static_cast<float*>(store->params().data) + r.shard_offset, DType::kF32, {r.length}),
        run.data());
  }
  store->sync_compute_weights();
  return Status::Ok();
}

std::vector<TensorRegion> owned_regions(const ParamStore& store) {
  std::vector<TensorRegion> out;
  for (const char* group : kGroups) {
    for (const OwnedRange& r : store.owned()) {
      for (const LogicalBox& box : logical_boxes(*r.spec, r.local_begin, r.length)) {
        out.push_back({str_cat(group, "/", r.spec->name), box.offset, box.shape});
      }
    }
  }
  return out;
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
