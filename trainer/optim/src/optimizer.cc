#include "ax/trainer/optim/optimizer.h"

#include <algorithm>
#include <cmath>

namespace ax::train {
namespace {

// A contiguous range [begin, end) of a flat f32 buffer as a 1-D tensor.
Tensor range(const Tensor& flat, int64_t begin, int64_t end) {
  return Tensor(static_cast<float*>(flat.data) + begin, DType::kF32, {end - begin});
}

}  // namespace

double learning_rate(const OptimConfig& optim, int64_t max_steps, int64_t step) {
  const double peak = optim.lr;
  const double floor = optim.min_lr_ratio * peak;
  const int64_t warmup = std::max<int64_t>(0, optim.warmup_steps);
  const int64_t decay_end = optim.decay_steps > 0 ? optim.decay_steps : max_steps;
  if (step <= warmup) {
    return peak * static_cast<double>(step) / static_cast<double>(warmup);
  }
  if (step >= decay_end) return floor;
  const double progress =
      static_cast<double>(step - warmup) / static_cast<double>(decay_end - warmup);
  if (optim.schedule == "linear") return peak - (peak - floor) * progress;
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(const OptimConfig& optim, int64_t max_steps, ParamStore* store)
    : optim_(optim), max_steps_(max_steps), store_(store) {}

AdamW::~AdamW() {
  Backend* be = store_->backend();
  if (m_ != nullptr) be->free(m_);
  if (v_ != nullptr) be->free(v_);
}

StatusOr<std::unique_ptr<AdamW>> AdamW::create(const OptimConfig& optim, int64_t max_steps,
                                               ParamStore* store) {
  std::unique_ptr<AdamW> opt(new AdamW(optim, max_steps, store));
  // The ranges of this rank's shard with and without weight decay, in shard order; a gap of
  // less than one alignment (64 bytes) between two ranges of the same kind is padding, which
  // stays zero under AdamW, so they merge (an unsharded model has exactly two groups).
  std::vector<OwnedRange> owned = store->owned();
  std::sort(owned.begin(), owned.end(), [](const OwnedRange& a, const OwnedRange& b) {
    return a.shard_offset < b.shard_offset;
  });
  for (const OwnedRange& r : owned) {
    const bool decay = r.spec->weight_decay;
    if (!opt->groups_.empty() && opt->groups_.back().decay == decay &&
        r.shard_offset - opt->groups_.back().end < 16) {
      opt->groups_.back().end = r.shard_offset + r.length;
    } else {
      opt->groups_.push_back({r.shard_offset, r.shard_offset + r.length, decay});
    }
  }
  const size_t bytes = static_cast<size_t>(store->params().numel()) * sizeof(float);
  AX_ASSIGN_OR_RETURN(opt->m_, store->backend()->alloc(bytes));
  AX_ASSIGN_OR_RETURN(opt->v_, store->backend()->alloc(bytes));
  return opt;
}

Tensor AdamW::m() const { return Tensor(m_, DType::kF32, {store_->params().numel()}); }
Tensor AdamW::v() const { return Tensor(v_, DType::kF32, {store_->params().numel()}); }

double AdamW::grad_norm() const { return std::sqrt(store_->grad_sum_squares()); }

double AdamW::apply(int64_t step, double grad_norm) {
  AdamWArgs args;
  args.lr = static_cast<float>(learning_rate(optim_, max_steps_, step));
  args.beta1 = static_cast<float>(optim_.beta1);
  args.beta2 = static_cast<float>(optim_.beta2);
  args.eps = static_cast<float>(optim_.eps);
  args.step = step;
  args.grad_scale = 1.f;
  if (optim_.grad_clip > 0 && grad_norm > optim_.grad_clip) {
    args.grad_scale = static_cast<float>(optim_.grad_clip / grad_norm);
  }
  const Tensor p = store_->params(), g = store_->grads(), m = this->m(), v = this->v();
  Backend* be = store_->backend();
  for (const Group& group : groups_) {
    args.weight_decay = group.decay ? static_cast<float>(optim_.weight_decay) : 0.f;
    be->adamw_update(range(p, group.begin, group.end), range(g, group.begin, group.end),
                     range(m, group.begin, group.end), range(v, group.begin, group.end), args);
  }
  store_->sync_compute_weights();
  return args.lr;
}

}  // namespace ax::train
