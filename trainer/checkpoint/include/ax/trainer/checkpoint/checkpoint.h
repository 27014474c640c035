// Checkpoints: one directory per step under <run_dir>/checkpoints/, written under a temporary
// name, renamed, and made visible by a COMMIT marker only when complete; the newest K are kept.
// Tensors are stored in logical (unsharded) layout: each rank writes the slices it owns into its
// own safetensors file and tensors.json maps every logical tensor to its slices, so a checkpoint
// restores onto any mesh. Layout: docs/checkpoint-format.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/config/config.h"

namespace ax::train {

// An f32 tensor in host memory. With sharding, `data` is the slice at `offset` of a logical
// tensor of shape `logical_shape` (both empty = the whole tensor, shape `shape`).
struct HostTensor {
  std::string name;  // "params/h.0.attn.qkv.weight", "adam_m/...", "adam_v/..."
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::vector<int64_t> logical_shape;
  std::vector<int64_t> offset;
};

struct CheckpointState {
  int64_t step = 0;
  std::vector<HostTensor> tensors;
  // Small JSON documents saved beside the tensors: "config.json" (the resolved config),
  // "loader.json" (data loader state), "rng.json", "trainer.json" (step, tokens seen, ...).
  std::map<std::string, std::string> blobs;
};

// The ranks of a sharded save, and how they talk: all_gather gives every rank every rank's value
// in rank order (the train loop passes the store's; a failure or timeout is an error).
struct CheckpointGroup {
  int rank = 0;
  int world = 1;
  std::function<StatusOr<std::vector<std::string>>(const std::string& value)> all_gather;
};

// A region of a logical tensor to load: elements [offset, offset + shape).
struct TensorRegion {
  std::string name;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
};

// What resume() does when a checkpoint fails verification (train.resume_on_corrupt).
enum class OnCorruptCheckpoint : uint8_t { kFallback, kRefuse };

// Where resume() landed.
struct ResumeChoice {
  std::optional<int64_t> step;           // nullopt: the run directory holds no checkpoint
  std::vector<std::string> moved_aside;  // directories renamed aside on the way, newest first
};

// A save begun by CheckpointManager::begin_save and not yet finished.
struct PendingSave {
  int64_t step = -1;
  std::string tmp_dir;           // where every rank writes its files
  int64_t budget_bytes = -1;     // the full-disk test hook's bytes left (-1: no limit)
  int64_t delay_ms_per_mib = 0;  // the slow-disk test hook (AX_CHECKPOINT_WRITE_DELAY_MS)
};

class CheckpointManager {
 public:
  CheckpointManager(std::string run_dir, int64_t keep);

  // Writes the checkpoint of state.step. On any failure (a full disk included) the partial
  // directory is removed and the previous checkpoints stay valid and visible.
  Status save(const CheckpointState& state);
  // Sharded: every rank calls it with the slices it owns (rank 0 also with the blobs). Rank 0
  // names the temporary directory, every rank writes its file, rank 0 commits once all have
  // reported, and every rank returns rank 0's verdict; a rank's failure fails the save on all.
  Status save(const CheckpointState& state, const CheckpointGroup& group);
  // save() in its three parts, so that the slow middle one can run beside training
  // (train.checkpoint_async, docs/checkpoint-format.md "Background checkpoints"):
  // begin_save is collective (rank 0 makes the temporary directory, everyone learns its name);
  // write_files writes this rank's files and talks to nobody, so it may run on another thread
  // (its result is the report finish_save sends); finish_save is collective again (every rank's
  // report, rank 0's commit, its verdict to everyone, retention). Until finish_save commits, a
  // crash leaves the previous checkpoint the newest valid one.
  StatusOr<PendingSave> begin_save(int64_t step, const CheckpointGroup& group) const;
  StatusOr<std::string> write_files(PendingSave* pending, int rank,
                                    const CheckpointState& state) const;
  Status finish_save(const PendingSave& pending, const StatusOr<std::string>& written,
                     const CheckpointGroup& group) const;
  // The newest committed step, or nullopt when there is none.
  StatusOr<std::optional<int64_t>> latest() const;
  // Loads a committed checkpoint, checking every file's size and checksum; any problem is
  // DataLoss naming the file, and nothing partial is returned.
  StatusOr<CheckpointState> load(int64_t step) const;
  // The same checks, then only the given regions (a sharded rank's own parts, on whatever mesh
  // the checkpoint was written from); each comes back as a slice (offset, logical_shape set).
  StatusOr<CheckpointState> load(int64_t step, const std::vector<TensorRegion>& regions) const;
  std::string step_dir(int64_t step) const;

  // Resumes from the newest checkpoint that every rank can load: rank 0 names the candidate,
  // every rank loads its `regions` of it and hands them to `restore` (which checks, then
  // applies), and the ranks share their verdicts, so all of them land on the same step. A
  // DataLoss on any rank (a checksum, a missing file, bad metadata) fails the candidate on all:
  // kRefuse returns it, naming the directory; kFallback has rank 0 log why, rename the directory
  // to step_<N>.corrupt-<UTC time> (which nothing lists, prunes or loads again) and try the next
  // newest. Any other error fails every rank. With no checkpoint left the step is nullopt, unless
  // corrupt ones were moved aside (now or by an earlier start): that is DataLoss, naming them,
  // rather than a silent start from step 0. Layout: docs/checkpoint-format.md.
  StatusOr<ResumeChoice> resume(const std::vector<TensorRegion>& regions,
                                const CheckpointGroup& group, OnCorruptCheckpoint on_corrupt,
                                const std::function<Status(const CheckpointState&)>& restore) const;

 private:
  std::string run_dir_;
  int64_t keep_;
};

// Writes model.safetensors (+ config.json) with Hugging Face tensor names: GPT-2 names
// (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...) for the gpt family, Llama
// names (model.layers.0.self_attn.q_proj.weight, ...) for the llama family, T5's
// (T5ForConditionalGeneration) for t5.
Status export_hugging_face(const CheckpointState& state, const Config& config,
                           const std::string& out_dir);

// `ax-train export`: the parameters of a run's checkpoint of `step` (nullopt: the newest),
// with the model config saved in it, as a Hugging Face directory. Returns the step exported.
StatusOr<int64_t> export_run(const std::string& run_dir, std::optional<int64_t> step,
                             const std::string& out_dir);

// The weights --init-from (train.init_from) names: an ax run directory (its newest checkpoint),
// one ax step directory (checkpoints/step_N), or a Hugging Face directory (config.json and
// model.safetensors, or a sharded model.safetensors.index.json) of GPT-2, Llama or T5 v1.1.
// Import: docs/fine-tuning.md.
struct InitSource {
  enum class Kind : uint8_t { kAx, kHuggingFace };
  Kind kind = Kind::kAx;
  std::string dir;          // the ax step directory, or the Hugging Face directory
  int64_t step = 0;         // ax: the checkpoint's step; Hugging Face: 0
  ModelConfig model;        // the architecture of the weights; vocab_size = the embedding's rows
  std::string description;  // for the start of a run and for errors
};

// Finds what `path` is and reads its model config (config.json), nothing else. An unknown
// architecture or an option ax does not implement is an error naming the key.
StatusOr<InitSource> open_init_source(const std::string& path);

// Reads params/* regions from an InitSource. open() checks the source whole before anything is
// read: an ax checkpoint's files and checksums; for a Hugging Face directory, that every tensor
// the model needs is present with its shape and none is left over (errors name the tensor and
// the file). read() then costs only the byte ranges of the regions asked for, so a rank can
// stream its own parts (a slice of each logical tensor, whatever the mesh) one at a time.
class InitReader {
 public:
  static StatusOr<std::unique_ptr<InitReader>> open(const InitSource& source);
  virtual ~InitReader() = default;
  // The regions, in order, as slices (offset and logical_shape set).
  virtual StatusOr<std::vector<HostTensor>> read(const std::vector<TensorRegion>& regions) = 0;
};

// open() and read() in one: the regions as a CheckpointState of step source.step.
StatusOr<CheckpointState> load_init_parameters(const InitSource& source,
                                               const std::vector<TensorRegion>& regions);

}  // namespace ax::train
