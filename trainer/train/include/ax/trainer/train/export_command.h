// `ax-train export`: a run's checkpoint as a Hugging Face directory (export_run, in
// trainer/checkpoint) with the run's tokenizer beside the weights, so that the directory is
// complete for Hugging Face and for `ax-train --init-from` (docs/checkpoint-format.md).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "ax/common/status.h"

namespace ax::train {

struct ExportResult {
  int64_t step = 0;
  std::string tokenizer;  // the tokenizer file written into the directory; "" when none
  std::string note;       // why no tokenizer was written, when none was
};

// Exports the checkpoint of `step` (nullopt: the newest), then copies the run's data.tokenizer
// (resolved as --tokenizer resolves it) under Hugging Face's name: a tokenizer.json as
// tokenizer.json, a SentencePiece model as tokenizer.model (spiece.model for t5), and a
// tokenizer_config.json beside it (its chat template) as well. A run without a tokenizer, or
// whose tokenizer file is gone, exports its weights and says so in `note`.
StatusOr<ExportResult> export_run_with_tokenizer(const std::string& run_dir,
                                                 std::optional<int64_t> step,
                                                 const std::string& out_dir);

}  // namespace ax::train
