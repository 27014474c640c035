// The Trainer's data wiring (trainer.h): the tokenizer and the training shards, the global batch
// over replicas and micro-batches, the loader (or, for seq2seq shards, the example packer), the
// validation set beside it, and the rows each step trains on.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "ax/common/strings.h"
#include "trainer.h"

namespace ax::train::internal {
namespace {

namespace fs = std::filesystem;

bool has_index(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "index.json", ec);
}

// data.validation_dir, else a sibling `val` or `validation` of the training shards, else "".
std::string find_validation_dir(const DataConfig& data) {
  if (!data.validation_dir.empty()) return data.validation_dir;
  const fs::path parent = fs::path(data.train_dir).parent_path();
  for (const char* name : {"val", "validation"}) {
    if (has_index(parent / name) && (parent / name) != fs::path(data.train_dir)) {
      return (parent / name).string();
    }
  }
  return "";
}

}  // namespace

Status Trainer::open_data() {
  // The tokenizer was loaded by setup (the plan of an auto mesh needs its size).
  StatusOr<std::shared_ptr<data::ShardSet>> train =
      data::ShardSet::open(config_.data.train_dir, tokenizer_->hash());
  if (!train.ok()) return train.status().with_context("training data");
  train_set_ = *train;

  const int64_t devices = ctx_.world;
  const double global = config_.train.global_batch > 0
                            ? static_cast<double>(config_.train.global_batch)
                            : config_.train.percore_batch_size * static_cast<double>(devices);
  const std::string how = config_.train.global_batch > 0
                              ? std::string("train.global_batch")
                              : str_cat("PERCORE_BATCH_SIZE ", config_.train.percore_batch_size,
                                        " x ", devices, " device(s)");
  if (global < 1 || global != std::floor(global)) {
    return InvalidArgument("GLOBAL_BATCH = ", how, " must be a whole number of sequences");
  }
  global_batch_ = static_cast<int64_t>(global);
  const int64_t replicas = dist_->replicas();
  if (global_batch_ % replicas != 0) {
    return InvalidArgument("GLOBAL_BATCH = ", global_batch_, " (", how,
                           ") must divide evenly over the ", replicas,
                           " data-parallel replicas (data x fsdp of the mesh)");
  }
  replica_rows_ = global_batch_ / replicas;
  const int64_t micro = config_.train.num_microbatches;
  if (micro < 1 || replica_rows_ % micro != 0) {
    return InvalidArgument("NUM_MICROBATCHES (train.num_microbatches = ", micro,
                           ") must divide the ", replica_rows_,
                           " sequences each replica trains on (GLOBAL_BATCH = ", global_batch_,
                           ": ", how, ", over ", replicas, " replica(s))");
  }
  micro_batch_ = replica_rows_ / micro;

  data::LoaderOptions lo;
  lo.seq_len = static_cast<uint64_t>(config_.train.seq_len);
  lo.seed = config_.train.seed;
  lo.global_batch = static_cast<uint64_t>(global_batch_);
  lo.replica = static_cast<uint64_t>(dist_->replica());
  lo.num_replicas = static_cast<uint64_t>(replicas);
  if (train_set_->index().kind == data::ShardKind::kSeq2Seq) return open_examples(lo);
  if (t5()) {
    AX_RETURN_IF_ERROR(setup_span_corruption());
    lo.seq_len = static_cast<uint64_t>(spans_->raw_length() - 1);  // a window is seq_len + 1
  }
  StatusOr<std::unique_ptr<data::TokenLoader>> loader = data::TokenLoader::create(train_set_, lo);
  if (!loader.ok()) return loader.status().with_context("training data");
  loader_ = std::move(*loader);

  if (config_.train.eval_every > 0) {
    val_dir_ = find_validation_dir(config_.data);
    if (!val_dir_.empty()) {
      StatusOr<std::shared_ptr<data::ShardSet>> val =
          data::ShardSet::open(val_dir_, tokenizer_->hash());
      if (!val.ok()) return val.status().with_context("validation data");
      val_set_ = *val;
      if (val_set_->index().kind != data::ShardKind::kLm) {
        return FailedPrecondition("validation data ", val_dir_, " is seq2seq, the training data ",
                                  config_.data.train_dir,
                                  " is text: give data.validation_dir of the same kind");
      }
      // Micro-batches in storage order, the same on every rank; created now so that a set too
      // small fails early.
      lo.global_batch = static_cast<uint64_t>(micro_batch_);
      lo.replica = 0;
      lo.num_replicas = 1;
      lo.shuffle = false;
      lo.prefetch_batches = 0;
      StatusOr<std::unique_ptr<data::TokenLoader>> val_loader =
          data::TokenLoader::create(val_set_, lo);
      if (!val_loader.ok()) {
        return val_loader.status().with_context(str_cat("validation data ", val_dir_));
      }
      val_loader_ = std::move(*val_loader);
    }
  }
  return Status::Ok();
}

Status Trainer::open_examples(const data::LoaderOptions& lo) {
  ExamplePackerOptions po;
  po.layout.encoder_length = t5() ? config_.train.encoder_seq_len : 0;
  po.layout.length = config_.train.seq_len;
  po.layout.pack = config_.train.pack_seq2seq;
  po.layout.pad = std::max(0, tokenizer_->pad_id());
  po.layout.eos = t5() ? -1 : tokenizer_->eos_id();
  po.seed = lo.seed;
  po.global_rows = lo.global_batch;
  po.replica = lo.replica;
  po.num_replicas = lo.num_replicas;
  po.vocab = tokenizer_->vocab_size();
  po.row_ids = config_.model.dropout > 0;
  StatusOr<std::unique_ptr<ExamplePacker>> packer = ExamplePacker::create(train_set_, po);
  if (!packer.ok()) return packer.status().with_context("training data");
  packer_ = std::move(*packer);
  if (config_.train.eval_every == 0) return Status::Ok();
  val_dir_ = find_validation_dir(config_.data);
  if (val_dir_.empty()) return Status::Ok();
  StatusOr<std::shared_ptr<data::ShardSet>> val =
      data::ShardSet::open(val_dir_, tokenizer_->hash());
  if (!val.ok()) return val.status().with_context("validation data");
  val_set_ = *val;
  if (val_set_->index().kind != data::ShardKind::kSeq2Seq) {
    return FailedPrecondition("validation data ", val_dir_, " is text, the training data ",
                              config_.data.train_dir,
                              " is seq2seq: give data.validation_dir of the same kind");
  }
  // Micro-batches of rows in storage order, the same on every rank.
  po.global_rows = static_cast<uint64_t>(micro_batch_);
  po.replica = 0;
  po.num_replicas = 1;
  po.shuffle = false;
  po.prefetch_batches = 0;
  po.row_ids = false;  // no dropout in evaluation
  StatusOr<std::unique_ptr<ExamplePacker>> val_packer = ExamplePacker::create(val_set_, po);
  if (!val_packer.ok()) {
    return val_packer.status().with_context(str_cat("validation data ", val_dir_));
  }
  val_packer_ = std::move(*val_packer);
  return Status::Ok();
}

Status Trainer::setup_span_corruption() {
  const uint32_t sentinels = tokenizer_->num_sentinels();
  if (sentinels == 0) {
    return FailedPrecondition(
        "model.family=t5 trains on span corruption, which needs T5's sentinel tokens "
        "<extra_id_0..N>, and the tokenizer ",
        config_.data.tokenizer,
        " has none: train one with `ax-data train-tokenizer --extra-ids 100 ...` and tokenize "
        "the data with it (docs/t5.md)");
  }
  SpanCorruptionRows sc;
  sc.encoder_length = config_.train.encoder_seq_len;
  sc.decoder_length = config_.train.seq_len;
  sc.pack = config_.train.pack_examples;
  sc.seed = config_.train.seed;
  sc.sentinel_top = tokenizer_->vocab_size() - 1;
  sc.num_sentinels = sentinels;
  sc.eos = static_cast<uint32_t>(std::max(0, tokenizer_->eos_id()));
  sc.pad = std::max(0, tokenizer_->pad_id());
  StatusOr<data::SpanLengths> lengths = sc.lengths();
  if (!lengths.ok()) return lengths.status();
  const data::NoiseCounts counts = data::noise_counts(lengths->raw, sc.corruption);
  if (counts.spans > sentinels) {
    return FailedPrecondition("ENC_SL=", sc.encoder_length, " makes ", counts.spans,
                              " noise spans per example, more than the tokenizer's ", sentinels,
                              " sentinels");
  }
  spans_ = sc;
  return Status::Ok();
}

StatusOr<StepRows> Trainer::rows_of(const data::TokenBatch& batch) const {
  const int64_t rows = static_cast<int64_t>(batch.batch);
  if (!spans_) return lm_rows(batch.tokens, rows, config_.train.seq_len);
  return spans_->make(batch.tokens, batch.sample_ids);
}

StatusOr<StepRows> Trainer::next_rows() {
  StepRows rows;
  if (packer_) {
    AX_RETURN_IF_ERROR(packer_->next(&rows));
    progress_.loader = packer_->state();
    return seq_slice_rows(std::move(rows), dist_->coords.s, dist_->coords.seq);
  }
  AX_RETURN_IF_ERROR(loader_->next(&batch_));
  AX_RETURN_IF_ERROR(check_tokens(batch_));
  AX_ASSIGN_OR_RETURN(rows, rows_of(batch_));
  // Every replica's rows hold as many targets as these.
  rows.global_targets = rows.num_targets * dist_->replicas();
  if (config_.model.dropout > 0) rows.row_ids = batch_.sample_ids;
  progress_.loader = loader_->state();
  // With a seq axis every rank of a seq group reads the same rows and keeps its slice.
  return seq_slice_rows(std::move(rows), dist_->coords.s, dist_->coords.seq);
}

Status Trainer::check_tokens(const data::TokenBatch& batch) const {
  const uint32_t vocab = tokenizer_->vocab_size();
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    if (batch.tokens[i] >= vocab) {
      return DataLoss("training data: token id ", batch.tokens[i], " in sample ",
                      batch.sample_ids[i / (batch.seq_len + 1)],
                      " is outside the tokenizer's vocabulary (", vocab, ")");
    }
  }
  return Status::Ok();
}

}  // namespace ax::train::internal
