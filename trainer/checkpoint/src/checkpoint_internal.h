// The checkpoint protocol in the two steps a multi-rank save needs, and the reader that assembles
// logical tensors from the slices of any number of rank files. CheckpointManager (one process)
// runs both steps itself; with several ranks, every rank runs write_rank_files into the same
// temporary directory, then after a barrier one rank gathers the RankWrites and runs
// commit_checkpoint. Private to trainer/checkpoint/src/ (and its tests); format:
// docs/checkpoint-format.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "checkpoint_io.h"
#include "safetensors.h"

namespace ax::train::ckpt {

// A shape as messages print it, JSON's compact form: [4,8].
inline std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// tensors.json and COMMIT carry {"format": kFormatName, "version": kFormatVersion}.
inline constexpr const char* kFormatName = "ax-checkpoint";
inline constexpr int kFormatVersion = 1;
inline constexpr const char* kCommitFile = "COMMIT";
inline constexpr const char* kIndexFile = "tensors.json";

// Stored elements [offset, offset + shape) of a logical tensor, under `key` in `file`.
struct SliceRecord {
  std::string file;
  std::string key;
  std::vector<int64_t> offset;
  std::vector<int64_t> shape;
};

// A logical (unsharded) F32 tensor and the slices it is stored in.
struct TensorRecord {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<SliceRecord> slices;
};

// What one rank wrote into the temporary directory.
struct RankWrite {
  std::vector<FileRecord> files;
  std::vector<TensorRecord> tensors;  // each with this rank's slices only
  std::vector<std::string> blobs;
};

// A RankWrite as JSON text and back (sent to the committing rank in a sharded save).
std::string rank_write_to_json(const RankWrite& write);
StatusOr<RankWrite> rank_write_from_json(const std::string& text);

// The step of a final step directory name ("step_00000120"), nullopt for anything else.
std::optional<int64_t> parse_step_name(const std::string& name);

// "rank_00003.safetensors".
std::string rank_file_name(int rank);

// Step 1, every rank: writes rank_<rank>.safetensors with the slices this rank holds (each
// HostTensor is one slice, stored under its logical name) and, on rank 0, the blobs.
StatusOr<RankWrite> write_rank_files(const std::string& tmp_dir, int rank,
                                     const CheckpointState& state, WriteBudget* budget);

// Step 2, one rank, once every rank's step 1 has returned: merges the slices into tensors.json,
// renames tmp_dir to final_dir (an existing directory of the same step, committed or left by a
// crash, is replaced) and writes COMMIT (tmp + rename), fsyncing as it goes. On failure the new
// final_dir is removed again and a replaced committed directory put back; tmp_dir, if it still
// exists, is the caller's to remove.
Status commit_checkpoint(const std::string& tmp_dir, const std::string& final_dir, int64_t step,
                         const std::vector<RankWrite>& ranks, WriteBudget* budget);

// A committed checkpoint directory. open() checks the COMMIT marker, every file's size and XXH64,
// tensors.json and every slice's key and shape in its rank file before anything is read.
class CheckpointReader {
 public:
  static StatusOr<CheckpointReader> open(const std::string& dir, int64_t step);

  // In tensors.json order.
  const std::vector<TensorRecord>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& blobs() const { return blobs_; }
  // Fills `out` (product(shape) floats) with the elements [offset, offset + shape) of the logical
  // tensor, from whichever slices intersect that region, however they are split. DataLoss when an
  // element is in no slice, or when overlapping slices disagree about it.
  Status read_region(const TensorRecord& tensor, const std::vector<int64_t>& offset,
                     const std::vector<int64_t>& shape, float* out) const;

 private:
  explicit CheckpointReader(std::string dir) : dir_(std::move(dir)) {}
  Status open_files(const std::map<std::string, FileRecord>& files);

  std::string dir_;
  std::vector<TensorRecord> tensors_;
  std::map<std::string, SafetensorsReader> rank_files_;  // by file name
  std::map<std::string, std::string> blobs_;
};

// The regions of a committed checkpoint (of directory `dir`, for errors) as slices: offset and
// logical_shape set. What CheckpointManager::load(step, regions) returns as its tensors.
StatusOr<std::vector<HostTensor>> read_regions(const CheckpointReader& reader,
                                               const std::string& dir,
                                               const std::vector<TensorRegion>& regions);

}  // namespace ax::train::ckpt
