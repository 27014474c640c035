#include "lm_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ax/trainer/comm/communicator.h"

namespace ax::train::layers {

VocabShard VocabShard::of(int64_t vocab, int64_t padded, const TensorGroup& tp) {
  VocabShard v;
  v.V = vocab;
  v.Vp = padded;
  v.Vl = padded / tp.size;
  v.v_begin = tp.rank * v.Vl;
  v.v_count = std::clamp<int64_t>(vocab - v.v_begin, 0, v.Vl);
  return v;
}

ParamSpec VocabShard::table(const std::string& name, int64_t C, double init_std, bool matmul,
                            const TensorGroup& tp) const {
  ParamSpec spec;
  spec.name = name;
  spec.shape = {Vp, C};
  spec.weight_decay = true;
  spec.matmul = matmul;
  spec.init_std = init_std;
  if (tp.size > 1) {
    spec.logical_shape = {Vp, C};
    spec.split_dim = 0;
    spec.pieces = {{0, v_begin, Vl}};
    spec.shape = {Vl, C};
  }
  return spec;
}

void VocabShard::upload_ids(Backend& be, Tensor dst, std::span<const int32_t> ids) const {
  if (Vl == Vp) {
    be.copy_from_host(dst, ids.data());
    return;
  }
  std::vector<int32_t> local(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i] - v_begin;
    local[i] = (id >= 0 && id < Vl) ? static_cast<int32_t>(id) : -1;
  }
  be.copy_from_host(dst, local.data());
}

std::vector<float> logits_row(Backend& be, Tensor logits, Tensor row_f32, const VocabShard& vocab,
                              int64_t row) {
  AX_CHECK(vocab.Vl == vocab.Vp) << "logits of a vocabulary split over tensor-parallel ranks";
  const size_t offset = static_cast<size_t>(row) * static_cast<size_t>(vocab.Vp);
  Tensor src(static_cast<char*>(logits.data) + offset * dtype_size(logits.dtype), logits.dtype,
             {vocab.Vp});
  std::vector<float> out(static_cast<size_t>(vocab.Vp));
  if (src.dtype == DType::kF32) {
    be.copy_to_host(out.data(), src);
  } else {
    be.copy(row_f32, src);
    be.copy_to_host(out.data(), row_f32);
  }
  out.resize(static_cast<size_t>(vocab.V));
  return out;
}

void LmLoss::plan(Arena* arena, int64_t rows) {
  targets = arena->take(DType::kI32, {rows});
  losses = arena->take(DType::kF32, {rows});
  if (tp.size > 1) {
    rowmax = arena->take(DType::kF32, {rows});
    sums = arena->take(DType::kF32, {rows, 2});
    lse = arena->take(DType::kF32, {rows});
  }
}

double LmLoss::forward(Backend& be, Tensor logits, std::span<const int32_t> host_targets) {
  be.copy_from_host(targets, host_targets.data());
  if (tp.size > 1) return split_forward(be, logits, host_targets);
  be.cross_entropy_forward(losses, logits, targets, vocab.V, z_loss);
  std::vector<float> host(host_targets.size());
  be.copy_to_host(host.data(), losses);
  double sum = 0;
  for (size_t i = 0; i < host.size(); ++i) {
    if (host_targets[i] >= 0) sum += host[i];
  }
  return sum;
}

// The shards combine their partial maxima and sums over the group; the loss of each row is then
// known on every rank, and lse stays on the device for backward.
double LmLoss::split_forward(Backend& be, Tensor logits, std::span<const int32_t> host_targets) {
  const size_t N = host_targets.size();
  be.ce_shard_max(rowmax, logits, vocab.v_count);
  comm::collective_or_die(tp.comm->all_reduce(rowmax, comm::ReduceOp::kMax),
                          "tensor-parallel cross-entropy (max)");
  be.ce_shard_sums(sums, logits, rowmax, targets, vocab.v_begin, vocab.v_count);
  comm::collective_or_die(tp.comm->all_reduce(sums, comm::ReduceOp::kSum),
                          "tensor-parallel cross-entropy (sums)");
  std::vector<float> m(N), sm(2 * N), l(N);
  be.copy_to_host(m.data(), rowmax);
  be.copy_to_host(sm.data(), sums);
  double total = 0;
  for (size_t n = 0; n < N; ++n) {
    l[n] = m[n] + std::log(sm[2 * n]);
    if (host_targets[n] < 0) continue;
    total += static_cast<double>(l[n]) - sm[2 * n + 1];
    if (z_loss != 0) total += static_cast<double>(z_loss) * l[n] * l[n];
  }
  be.copy_from_host(lse, l.data());
  return total;
}

void LmLoss::backward(Backend& be, Tensor logits, float dloss) const {
  if (tp.size > 1) {
    be.ce_shard_backward(logits, logits, lse, targets, vocab.v_begin, vocab.v_count, dloss, z_loss);
  } else {
    be.cross_entropy_backward(logits, logits, targets, vocab.V, dloss, z_loss);
  }
}

}  // namespace ax::train::layers
