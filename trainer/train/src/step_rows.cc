#include "ax/trainer/train/step_rows.h"

#include "ax/common/rng.h"
#include "ax/common/strings.h"

namespace ax::train {
namespace {

std::span<const int32_t> rows_of(const std::vector<int32_t>& v, int64_t width, int64_t first,
                                 int64_t count) {
  if (v.empty()) return {};
  return std::span<const int32_t>(v).subspan(static_cast<size_t>(first * width),
                                             static_cast<size_t>(count * width));
}

}  // namespace

Batch StepRows::micro_batch(int64_t first, int64_t count) const {
  AX_CHECK(first >= 0 && count > 0 && first + count <= rows);
  Batch b;
  b.tokens = rows_of(tokens, length, first, count);
  b.targets = rows_of(targets, length, first, count);
  b.segment_ids = rows_of(segment_ids, length, first, count);
  b.encoder_tokens = rows_of(encoder_tokens, encoder_length, first, count);
  b.encoder_segment_ids = rows_of(encoder_segment_ids, encoder_length, first, count);
  if (!row_ids.empty()) {
    b.row_ids = std::span<const uint64_t>(row_ids).subspan(static_cast<size_t>(first),
                                                           static_cast<size_t>(count));
    b.dropout_seed = dropout_seed;
  }
  return b;
}

StepRows seq_slice_rows(StepRows whole, int rank, int size) {
  if (size == 1) return whole;
  AX_CHECK(whole.encoder_length == 0) << "a seq axis slices decoder-only rows";
  AX_CHECK(rank >= 0 && rank < size && whole.length % size == 0)
      << "rows of " << whole.length << " over a seq axis of " << size;
  const int64_t T = whole.length, Tl = T / size, first = rank * Tl;
  const auto slice = [&](const std::vector<int32_t>& v) {
    std::vector<int32_t> out;
    if (v.empty()) return out;
    out.reserve(static_cast<size_t>(whole.rows * Tl));
    for (int64_t row = 0; row < whole.rows; ++row) {
      const auto at = v.begin() + row * T + first;
      out.insert(out.end(), at, at + Tl);
    }
    return out;
  };
  StepRows r = std::move(whole);
  r.tokens = slice(r.tokens);
  r.targets = slice(r.targets);
  r.segment_ids = slice(r.segment_ids);
  r.length = Tl;
  r.num_targets = 0;
  for (int32_t t : r.targets) r.num_targets += t >= 0 ? 1 : 0;
  return r;
}

StepRows lm_rows(std::span<const uint32_t> windows, int64_t rows, int64_t length) {
  AX_CHECK_EQ(static_cast<int64_t>(windows.size()), rows * (length + 1));
  StepRows r;
  r.rows = rows;
  r.length = length;
  r.num_targets = rows * length;
  r.global_targets = r.num_targets;
  r.tokens.resize(static_cast<size_t>(rows * length));
  r.targets.resize(r.tokens.size());
  for (int64_t row = 0; row < rows; ++row) {
    const uint32_t* w = windows.data() + row * (length + 1);
    for (int64_t t = 0; t < length; ++t) {
      r.tokens[static_cast<size_t>(row * length + t)] = static_cast<int32_t>(w[t]);
      r.targets[static_cast<size_t>(row * length + t)] = static_cast<int32_t>(w[t + 1]);
    }
  }
  return r;
}

StatusOr<data::SpanLengths> SpanCorruptionRows::lengths() const {
  if (pack < 1 || encoder_length % pack != 0) {
    return InvalidArgument("train.pack_examples=", pack, " must divide ENC_SL (", encoder_length,
                           ")");
  }
  StatusOr<data::SpanLengths> one = data::span_lengths(encoder_length / pack, corruption);
  if (!one.ok()) {
    return one.status().with_context(
        str_cat("ENC_SL=", encoder_length, pack > 1 ? str_cat(" over ", pack, " examples") : ""));
  }
  if (one->targets * pack > decoder_length) {
    return InvalidArgument(
        "DEC_SL (train.seq_len) = ", decoder_length,
        " is shorter than the span-corruption targets of ENC_SL=", encoder_length, ": ", pack,
        " x ", one->targets, " = ", one->targets * pack, " tokens");
  }
  return one;
}

int64_t SpanCorruptionRows::raw_length() const {
  StatusOr<data::SpanLengths> one = lengths();
  AX_CHECK(one.ok()) << one.status().message();
  return one->raw * pack;
}

StatusOr<StepRows> SpanCorruptionRows::make(std::span<const uint32_t> windows,
                                            std::span<const uint64_t> sample_ids) const {
  AX_ASSIGN_OR_RETURN(data::SpanLengths one, lengths());
  const int64_t rows = static_cast<int64_t>(sample_ids.size());
  const int64_t raw = one.raw * pack;
  AX_CHECK_EQ(static_cast<int64_t>(windows.size()), rows * raw);
  const int64_t Te = encoder_length, Td = decoder_length;
  StepRows r;
  r.rows = rows;
  r.length = Td;
  r.encoder_length = Te;
  r.num_targets = rows * one.targets * pack;
  r.global_targets = r.num_targets;
  r.tokens.assign(static_cast<size_t>(rows * Td), pad);
  r.targets.assign(r.tokens.size(), -1);
  r.segment_ids.assign(r.tokens.size(), 0);
  r.encoder_tokens.resize(static_cast<size_t>(rows * Te));
  r.encoder_segment_ids.resize(r.encoder_tokens.size());
  std::vector<uint32_t> inputs, targets;
  for (int64_t row = 0; row < rows; ++row) {
    for (int64_t k = 0; k < pack; ++k) {
      const uint64_t example = sample_ids[static_cast<size_t>(row)] * static_cast<uint64_t>(pack) +
                               static_cast<uint64_t>(k);
      const std::span<const uint32_t> tokens = windows.subspan(
          static_cast<size_t>(row * raw + k * one.raw), static_cast<size_t>(one.raw));
      Status s = data::span_corrupt(tokens, corruption, mix64(seed ^ mix64(example)), sentinel_top,
                                    num_sentinels, eos, &inputs, &targets);
      if (!s.ok()) return s.with_context(str_cat("span corruption of sample ", example));
      AX_CHECK_EQ(static_cast<int64_t>(inputs.size()), one.inputs);
      AX_CHECK_EQ(static_cast<int64_t>(targets.size()), one.targets);
      const int32_t segment = static_cast<int32_t>(k + 1);
      const size_t enc_at = static_cast<size_t>(row * Te + k * one.inputs);
      for (size_t i = 0; i < inputs.size(); ++i) {
        r.encoder_tokens[enc_at + i] = static_cast<int32_t>(inputs[i]);
        r.encoder_segment_ids[enc_at + i] = segment;
      }
      const size_t dec_at = static_cast<size_t>(row * Td + k * one.targets);
      for (size_t i = 0; i < targets.size(); ++i) {
        r.targets[dec_at + i] = static_cast<int32_t>(targets[i]);
        r.tokens[dec_at + i] = i == 0 ? pad : static_cast<int32_t>(targets[i - 1]);
        r.segment_ids[dec_at + i] = segment;
      }
    }
  }
  return r;
}

}  // namespace ax::train
