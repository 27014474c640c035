// What a checkpoint of a run holds and how it maps to the parameter store, the optimizer and
// the loader:
// params/<name>, adam_m/<name>, adam_v/<name> tensors and the blobs config.json, loader.json,
// rng.json and trainer.json (docs/trainer.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/loader/token_loader.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/optim/optimizer.h"
#include "ax/trainer/parallel/param_store.h"

namespace ax::train {

// The loop's own counters.
struct TrainProgress {
  int64_t step = 0;  // updates applied
  int64_t tokens_seen = 0;
  data::LoaderState loader;
};

// Host buffers in the sizes capture_state asks for, to pass it as `reuse`: allocated and touched
// ahead of the first checkpoint (on a thread of its own), so that no checkpoint pays for them.
CheckpointState host_buffers(const ParamStore& store);

// This rank's part of the parameters and AdamW state (host copies) and the blobs. `reuse`, an
// earlier capture of the same store, lends its host buffers (background checkpoints keep one).
CheckpointState capture_state(const Config& config, const ParamStore& store, const AdamW& optimizer,
                              const TrainProgress& progress, CheckpointState reuse = {});

// Checks everything in `state` first (every tensor present with its shape, the blobs parse, the
// model config matches) and only then writes into store, optimizer and progress: an error leaves
// them untouched.
Status restore_state(const CheckpointState& state, const Config& config, ParamStore* store,
                     AdamW* optimizer, TrainProgress* progress);

// The regions of params/*, adam_m/* and adam_v/* this rank needs to resume (its own parts of
// the logical tensors, whatever mesh wrote them): what CheckpointManager::load(step, regions)
// reads.
std::vector<TensorRegion> owned_regions(const ParamStore& store);

// Only the parameters (for sampling and evaluation), with the same all-or-nothing checks.
Status restore_parameters(const CheckpointState& state, ParamStore* store);

// This rank's parameters from `reader` (--init-from), one owned range (a parameter's part) at a
// time, so host memory holds one parameter's part, never the model. On an error the parameters
// are partly written; the caller stops.
Status stream_parameters(InitReader* reader, ParamStore* store);

// The first model.* key whose value differs between two configs ("" when none), with both
// values as JSON text.
struct ConfigDifference {
  std::string key, old_value, new_value;
};
ConfigDifference first_model_difference(const Config& old_config, const Config& new_config);

}  // namespace ax::train
