#include "ax/trainer/optimizer.h"

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
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

AdamW::AdamW(const OptimConfig& optim, int64_t max_steps, Model* model)
    : optim_(optim), max_steps_(max_steps), model_(model) {}

AdamW::~AdamW() {
  Backend* be = model_->backend();
  if (m_ != nullptr) be->free(m_);
  if (v_ != nullptr) be->free(v_);
}

StatusOr<std::unique_ptr<AdamW>> AdamW::create(const OptimConfig& optim, int64_t max_steps,
                                               Model* model) {
  std::unique_ptr<AdamW> opt(new AdamW(optim, max_steps, model));
  const size_t bytes = static_cast<size_t>(model->layout().total()) * sizeof(float);
  AX_ASSIGN_OR_RETURN(opt->m_, model->backend()->alloc(bytes));
  AX_ASSIGN_OR_RETURN(opt->v_, model->backend()->alloc(bytes));
  return opt;
}

Tensor AdamW::m() const { return Tensor(m_, DType::kF32, {model_->layout().total()}); }
Tensor AdamW::v() const { return Tensor(v_, DType::kF32, {model_->layout().total()}); }

double AdamW::grad_norm() const {
  return std::sqrt(model_->backend()->sum_squares(model_->grads()));
}

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
  const ParamLayout& layout = model_->layout();
  const Tensor p = model_->params(), g = model_->grads(), m = this->m(), v = this->v();
  Backend* be = model_->backend();
  struct Group {
    int64_t begin, end;
    float weight_decay;
  };
  const Group groups[] = {{0, layout.decay_end(), static_cast<float>(optim_.weight_decay)},
                          {layout.decay_end(), layout.total(), 0.f}};
  for (const Group& group : groups) {
    if (group.end == group.begin) continue;
    args.weight_decay = group.weight_decay;
    be->adamw_update(range(p, group.begin, group.end), range(g, group.begin, group.end),
                     range(m, group.begin, group.end), range(v, group.begin, group.end), args);
  }
  model_->sync_compute_weights();
  return args.lr;
}

}  // namespace ax::train
