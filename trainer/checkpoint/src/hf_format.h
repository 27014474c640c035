// The one table between ax's params/* tensors and Hugging Face checkpoints (GPT-2, Llama, T5
// v1.1), used by the export and by the import (--init-from), and the two translations of the
// model config (ax ModelConfig <-> Hugging Face config.json). Private to trainer/checkpoint/src/.
// The mapping is in docs/parameter-names.md and docs/checkpoint-format.md.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/config/config.h"

namespace ax::train::ckpt {

// How a Hugging Face tensor holds rows of an ax tensor.
enum class HfLayout : uint8_t {
  kSame,        // the rows as they are
  kTransposed,  // GPT-2's Conv1D: (in, out), the transpose of ax's (out, in)
  kQuery,       // T5's queries: Hugging Face = ax / sqrt(d_kv) (ax scales the logits, HF not)
};

// Rows [row, row + rows) of an ax tensor stored as the Hugging Face tensor `name`.
struct HfPart {
  std::string name;
  int64_t row = 0;
  int64_t rows = 0;
  HfLayout layout = HfLayout::kSame;
};

// One ax parameter (`ax` without the params/ prefix, of `shape`) and the Hugging Face tensors
// its rows are stored in. `ax` empty: a Hugging Face tensor ax does not have (GPT-2's biases of
// a model without biases), one part, exported as zeros of `shape`.
struct HfTensor {
  std::string ax;
  std::vector<int64_t> shape;
  std::vector<HfPart> parts;
};

// The Hugging Face shape of a part of `t`.
std::vector<int64_t> hf_shape(const HfTensor& t, const HfPart& part);

// Every tensor of a model with this config and `vocab` embedding rows, in the order the export
// writes them. FailedPrecondition when Hugging Face has no such model (GPT-2 with grouped-query
// attention, T5 with biases, ...).
StatusOr<std::vector<HfTensor>> hf_tensors(const ModelConfig& m, int64_t vocab);

// config.json of the export.
nlohmann::ordered_json hf_config(const ModelConfig& m, int64_t vocab);

// The model a Hugging Face config.json describes (`where` names the file in errors): family
// from `architectures` / `model_type`, the shape, and vocab_size = the embedding rows. An
// architecture or an option ax does not implement (a rope_scaling, T5 v1.0's relu, ...) is
// FailedPrecondition naming the key.
StatusOr<ModelConfig> model_from_hf_config(const nlohmann::json& config, const std::string& where);

// sqrt(d_kv) as T5's query weights are scaled by (exact for d_kv a power of 4).
double t5_query_scale(const ModelConfig& m);

}  // namespace ax::train::ckpt
