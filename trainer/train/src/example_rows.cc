#include "ax/trainer/train/example_rows.h"

#include <algorithm>
#include <utility>

#include "ax/common/strings.h"

namespace ax::train {
namespace {

int64_t ssize(const std::vector<uint32_t>& v) { return static_cast<int64_t>(v.size()); }

// The prompt's tokens a decoder-only row reads: without its final EOS.
int64_t prompt_length(const data::Seq2SeqExample& e, int64_t eos) {
  const int64_t n = ssize(e.inputs);
  return n > 0 && static_cast<int64_t>(e.inputs.back()) == eos ? n - 1 : n;
}

}  // namespace

ExampleRows::Size ExampleRows::size(const data::Seq2SeqExample& e) const {
  Size s;
  if (encoder_length > 0) {
    s.encoder = std::min(ssize(e.inputs), encoder_length);
    s.decoder = std::min(ssize(e.targets), length);
    s.targets = s.decoder;
    s.truncated = s.encoder < ssize(e.inputs) || s.decoder < ssize(e.targets);
    return s;
  }
  const int64_t prompt = prompt_length(e, eos);
  const int64_t whole = prompt + ssize(e.targets);
  const int64_t n = std::min(whole, length + 1);
  s.decoder = std::max<int64_t>(0, n - 1);
  // Position t predicts token t + 1, a response token when t + 1 >= prompt.
  s.targets = std::max<int64_t>(0, s.decoder - std::max<int64_t>(0, prompt - 1));
  s.truncated = n < whole;
  return s;
}

bool ExampleRows::fits(const Size& used, const Size& next) const {
  // An example without positions (a lone EOS) would join every row and never fill one.
  return pack && next.decoder > 0 && used.encoder + next.encoder <= encoder_length &&
         used.decoder + next.decoder <= length;
}

StepRows ExampleRows::make(std::span<const data::Seq2SeqExample> examples,
                           std::span<const size_t> ends) const {
  const int64_t rows = static_cast<int64_t>(ends.size());
  const int64_t Te = encoder_length, T = length;
  StepRows r;
  r.rows = rows;
  r.length = T;
  r.encoder_length = Te;
  r.tokens.assign(static_cast<size_t>(rows * T), pad);
  r.targets.assign(r.tokens.size(), -1);
  if (Te > 0 || pack) r.segment_ids.assign(r.tokens.size(), 0);
  if (Te > 0) {
    r.encoder_tokens.assign(static_cast<size_t>(rows * Te), pad);
    r.encoder_segment_ids.assign(r.encoder_tokens.size(), 0);
  }
  size_t first = 0;
  for (int64_t row = 0; row < rows; ++row) {
    Size used;
    for (size_t k = first; k < ends[static_cast<size_t>(row)]; ++k) {
      const data::Seq2SeqExample& e = examples[k];
      const Size s = size(e);
      AX_CHECK(k == first || fits(used, s)) << "example " << e.id << " does not fit its row";
      const int32_t segment = static_cast<int32_t>(k - first + 1);
      const size_t dec = static_cast<size_t>(row * T + used.decoder);
      if (Te > 0) {
        const size_t enc = static_cast<size_t>(row * Te + used.encoder);
        for (int64_t i = 0; i < s.encoder; ++i) {
          r.encoder_tokens[enc + i] = static_cast<int32_t>(e.inputs[static_cast<size_t>(i)]);
          r.encoder_segment_ids[enc + i] = segment;
        }
        for (int64_t i = 0; i < s.decoder; ++i) {
          r.targets[dec + i] = static_cast<int32_t>(e.targets[static_cast<size_t>(i)]);
          r.tokens[dec + i] = i == 0 ? pad : static_cast<int32_t>(e.targets[i - 1]);
          r.segment_ids[dec + i] = segment;
        }
      } else {
        const int64_t prompt = prompt_length(e, eos);
        auto token = [&](int64_t t) {
          return static_cast<int32_t>(t < prompt ? e.inputs[static_cast<size_t>(t)]
                                                 : e.targets[static_cast<size_t>(t - prompt)]);
        };
        for (int64_t t = 0; t < s.decoder; ++t) {
          r.tokens[dec + t] = token(t);
          if (t + 1 >= prompt) r.targets[dec + t] = token(t + 1);
          if (!r.segment_ids.empty()) r.segment_ids[dec + t] = segment;
        }
      }
      used.encoder += s.encoder;
      used.decoder += s.decoder;
      r.num_targets += s.targets;
    }
    first = ends[static_cast<size_t>(row)];
  }
  r.global_targets = r.num_targets;
  return r;
}

StatusOr<std::unique_ptr<ExamplePacker>> ExamplePacker::create(
    std::shared_ptr<const data::ShardSet> set, const ExamplePackerOptions& options) {
  if (options.global_rows < 1 || options.num_replicas < 1 ||
      options.global_rows % options.num_replicas != 0 || options.replica >= options.num_replicas) {
    return InvalidArgument("global batch of ", options.global_rows, " rows over ",
                           options.num_replicas, " replicas (this one ", options.replica,
                           "): the replicas must divide the rows");
  }
  // Each rank reads the whole global order: one replica of one.
  data::Seq2SeqLoaderOptions lo;
  lo.seed = options.seed;
  lo.global_batch = options.global_rows;
  lo.shuffle = options.shuffle;
  lo.prefetch_batches = options.prefetch_batches;
  AX_ASSIGN_OR_RETURN(std::unique_ptr<data::Seq2SeqLoader> loader,
                      data::Seq2SeqLoader::create(std::move(set), lo));
  return std::unique_ptr<ExamplePacker>(new ExamplePacker(std::move(loader), options));
}

ExamplePacker::ExamplePacker(std::unique_ptr<data::Seq2SeqLoader> loader,
                             const ExamplePackerOptions& options)
    : loader_(std::move(loader)), options_(options) {}

Status ExamplePacker::pull(data::Seq2SeqExample* example) {
  if (pending_.empty()) {
    data::Seq2SeqBatch batch;
    AX_RETURN_IF_ERROR(loader_->next(&batch));
    loader_position_ += batch.examples.size();
    for (data::Seq2SeqExample& e : batch.examples) {
      for (const std::vector<uint32_t>* v : {&e.inputs, &e.targets}) {
        for (uint32_t t : *v) {
          if (t >= options_.vocab) {
            return DataLoss("fine-tuning data: token id ", t, " in example ", e.id,
                            " is outside the tokenizer's vocabulary (", options_.vocab, ")");
          }
        }
      }
      pending_.push_back(std::move(e));
    }
  }
  *example = std::move(pending_.front());
  pending_.pop_front();
  return Status::Ok();
}

Status ExamplePacker::next(StepRows* rows) {
  const ExampleRows& layout = options_.layout;
  const uint64_t per_replica = options_.global_rows / options_.num_replicas;
  const uint64_t mine = options_.replica * per_replica;
  std::vector<data::Seq2SeqExample> examples;  // this replica's
  std::vector<size_t> ends;
  std::vector<uint64_t> row_ids;
  int64_t global_targets = 0;
  for (uint64_t row = 0; row < options_.global_rows; ++row) {
    const bool kept = row >= mine && row < mine + per_replica;
    if (kept && options_.row_ids) row_ids.push_back(loader_position_ - pending_.size());
    ExampleRows::Size used;
    for (bool first = true;; first = false) {
      data::Seq2SeqExample e;
      AX_RETURN_IF_ERROR(pull(&e));
      const ExampleRows::Size s = layout.size(e);
      if (!first && !layout.fits(used, s)) {
        pending_.push_front(std::move(e));  // it starts the next row
        break;
      }
      used.encoder += s.encoder;
      used.decoder += s.decoder;
      global_targets += s.targets;
      ++examples_;
      if (s.truncated) ++truncated_;
      if (s.targets == 0) ++without_targets_;
      if (kept) examples.push_back(std::move(e));
      if (!layout.pack) break;
    }
    if (kept) ends.push_back(examples.size());
  }
  *rows = layout.make(examples, ends);
  rows->global_targets = global_targets;
  rows->row_ids = std::move(row_ids);
  rows_ += static_cast<int64_t>(options_.global_rows);
  return Status::Ok();
}

data::LoaderState ExamplePacker::state() const {
  const uint64_t position = loader_position_ - pending_.size();
  const uint64_t n = loader_->examples_per_epoch();
  return data::LoaderState{position / n, position % n};
}

Status ExamplePacker::restore(const data::LoaderState& state) {
  AX_RETURN_IF_ERROR(loader_->restore(state));
  pending_.clear();
  loader_position_ = state.epoch * loader_->examples_per_epoch() + state.sample_in_epoch;
  rows_ = 0;
  examples_ = 0;
  truncated_ = 0;
  without_targets_ = 0;
  return Status::Ok();
}

}  // namespace ax::train
