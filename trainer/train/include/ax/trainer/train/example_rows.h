// Fine-tuning rows from the (inputs, targets) examples of a seq2seq shard set (`ax-data tokenize
// --format seq2seq | prompt-response | chat`): T5 reads the inputs in its encoder and the targets
// in its decoder; a decoder-only model reads prompt and response as one sequence with the loss
// on the response. Examples are truncated to the row lengths and, by default, packed greedily
// into rows with segment ids (docs/fine-tuning.md "Fine-tuning data").
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/loader/seq2seq_loader.h"
#include "ax/trainer/train/step_rows.h"

namespace ax::train {

// How examples become rows.
//
// Encoder-decoder (encoder_length > 0): the inputs, cut to ENC_SL, fill the encoder row; the
// targets, cut to DEC_SL, are the decoder's targets, and its input is the targets shifted right
// with `pad` (T5's decoder_start) first in each example.
//
// Decoder-only (encoder_length == 0): the sequence is the prompt without its final EOS, then
// the response (ending in EOS), cut to length + 1 tokens; a row holds its tokens [0, n-1) as
// inputs and [1, n) as targets, the targets inside the prompt ignored (< 0).
//
// Both: examples follow each other in a row with segment ids 1, 2, ... (no attention across
// examples); the rest of the row is padding (token pad, target ignored, segment 0). Unpacked
// decoder-only rows carry no segment ids (causal attention never reaches the padding).
struct ExampleRows {
  int64_t encoder_length = 0;  // ENC_SL; 0: decoder-only rows
  int64_t length = 0;          // DEC_SL, or the decoder-only row length
  bool pack = true;            // train.pack_seq2seq
  int32_t pad = 0;
  int64_t eos = -1;  // decoder-only: dropped from the end of a prompt (-1: none)

  // What one example takes of a row.
  struct Size {
    int64_t encoder = 0, decoder = 0;  // positions
    int64_t targets = 0;               // non-ignored targets
    bool truncated = false;            // inputs or targets cut to fit
  };
  Size size(const data::Seq2SeqExample& example) const;
  // Whether an example of size `next` joins a row whose examples so far take `used`: never when
  // not packing or when it takes no decoder position, else when both lengths still fit.
  bool fits(const Size& used, const Size& next) const;
  // Rows of consecutive examples: row r holds examples [ends[r-1], ends[r]) (ends[-1] = 0).
  // num_targets and global_targets are the rows' own count.
  StepRows make(std::span<const data::Seq2SeqExample> examples, std::span<const size_t> ends) const;
};

struct ExamplePackerOptions {
  ExampleRows layout;
  uint64_t seed = 1234;
  uint64_t global_rows = 8;  // rows per global batch (all replicas)
  uint64_t replica = 0;
  uint64_t num_replicas = 1;
  bool shuffle = true;  // false: storage order (evaluation)
  int prefetch_batches = 4;
  uint32_t vocab = 0;  // every token id must be below
  // Fill StepRows::row_ids (dropout's key) with each row's place in the data: the global
  // position of its first example, the same on every layout and after resume.
  bool row_ids = false;
};

// The rows of successive global batches. Every rank reads the examples of the whole global
// batch in the loader's global order and packs them the same way, so the packing, and the
// number of targets that normalises the loss, do not depend on the number of ranks; a replica
// then keeps its slice of the rows. The state is the global position of the first example not
// yet in a row, as a LoaderState, so a run resumes exactly on any layout.
class ExamplePacker {
 public:
  // FailedPrecondition for an LM shard set; InvalidArgument for bad slicing.
  static StatusOr<std::unique_ptr<ExamplePacker>> create(std::shared_ptr<const data::ShardSet> set,
                                                         const ExamplePackerOptions& options);
  // This replica's rows of the next global batch; global_targets counts every replica's.
  // DataLoss for a token id outside the vocabulary.
  Status next(StepRows* rows);
  data::LoaderState state() const;
  Status restore(const data::LoaderState& state);

  // Over the global batches since create() or restore(): rows made, examples packed into them,
  // how many of those were truncated, and how many were left without a target (a prompt as long
  // as the row).
  int64_t rows() const { return rows_; }
  int64_t examples() const { return examples_; }
  int64_t truncated() const { return truncated_; }
  int64_t without_targets() const { return without_targets_; }

 private:
  ExamplePacker(std::unique_ptr<data::Seq2SeqLoader> loader, const ExamplePackerOptions& options);
  // The next example in the global order.
  Status pull(data::Seq2SeqExample* example);

  std::unique_ptr<data::Seq2SeqLoader> loader_;
  ExamplePackerOptions options_;
  std::deque<data::Seq2SeqExample> pending_;  // read from the loader, not yet in a row
  uint64_t loader_position_ = 0;              // the loader's global position (examples read)
  int64_t rows_ = 0, examples_ = 0, truncated_ = 0, without_targets_ = 0;
};

}  // namespace ax::train
