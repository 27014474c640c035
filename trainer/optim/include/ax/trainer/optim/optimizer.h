// AdamW over a parameter store's flat shard buffers: one Backend::adamw_update per group (with
// weight decay: matrices and embeddings; without: norms and biases — contiguous ranges of the
// layout), global-norm gradient clipping and the learning-rate schedule.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "ax/common/status.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/parallel/param_store.h"

namespace ax::train {

// The learning rate of update `step` (1-based): linear warm-up from lr/warmup_steps to lr at
// warmup_steps, cosine decay to min_lr_ratio·lr at decay_steps (0: max_steps), constant after.
double learning_rate(const OptimConfig& optim, int64_t max_steps, int64_t step);

class AdamW {
 public:
  // Allocates m and v (zeros) with the store's shard layout. The store must outlive the
  // optimizer.
  static StatusOr<std::unique_ptr<AdamW>> create(const OptimConfig& optim, int64_t max_steps,
                                                 ParamStore* store);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // sqrt(Σ g²) over every gradient of the whole model (collective when the model is sharded).
  double grad_norm() const;
  // Applies update `step` (1-based) with the gradients scaled by min(1, grad_clip / norm), then
  // refreshes the store's compute weights. Returns the learning rate used.
  double apply(int64_t step, double grad_norm);

  // First and second moments, flat, laid out as the store's shard buffers (f32).
  Tensor m() const;
  Tensor v() const;

 private:
  AdamW(const OptimConfig& optim, int64_t max_steps, ParamStore* store);
  OptimConfig optim_;
  int64_t max_steps_;
  ParamStore* store_;
  struct Group {
    int64_t begin, end;  // elements of the shard buffers
    bool decay;
  };
  std::vector<Group> groups_;
  void* m_ = nullptr;
  void* v_ = nullptr;
};

}  // namespace ax::train
