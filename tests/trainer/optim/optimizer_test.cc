// The learning-rate schedule, AdamW's parameter groups and global-norm clipping.
#include "ax/trainer/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "ax/trainer/train/train_loop.h"
#include "model_test_util.h"

namespace ax::train {
namespace {

TEST(LearningRate, WarmupCosineThenConstant) {
  OptimConfig o;
  o.lr = 1.0;
  o.warmup_steps = 10;
  o.decay_steps = 110;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000, 1), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000, 10), 1.0);
  EXPECT_NEAR(learning_rate(o, 1000, 60), 0.55, 1e-12);  // half way: (1 + 0.1) / 2
  EXPECT_NEAR(learning_rate(o, 1000, 35), 0.1 + 0.45 * (1 + std::cos(M_PI / 4)), 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000, 110), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate(o, 1000, 500), 0.1);
  // decay_steps 0: the decay ends at max_steps.
  o.decay_steps = 0;
  EXPECT_NEAR(learning_rate(o, 210, 110), 0.55, 1e-12);
  EXPECT_DOUBLE_EQ(learning_rate(o, 210, 210), 0.1);
  // No warm-up: full rate at once.
  o.warmup_steps = 0;
  EXPECT_NEAR(learning_rate(o, 1000000, 1), 1.0, 1e-9);
}

std::unique_ptr<Model> tiny_model(Backend* be, int64_t vocab = 64) {
  ModelConfig m;
  m.num_layers = 2;
  m.model_dim = 16;
  m.num_heads = 2;
  m.num_kv_heads = 2;
  m.hidden_dim = 32;
  m.max_seq_len = 8;
  auto model = Model::create(m, vocab, 2, 8, be);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  (*model)->init(3);
  return std::move(*model);
}

OptimConfig constant_lr(double lr) {
  OptimConfig o;
  o.lr = lr;
  o.warmup_steps = 0;
  o.min_lr_ratio = 1.0;
  return o;
}

// With zero gradients an AdamW step only decays: matrices and embeddings shrink by
// (1 - lr·wd), norms and biases do not move.
TEST(AdamW, NoWeightDecayOnNormsAndBiases) {
  auto be = make_cpu_backend(2);
  auto model = tiny_model(be.get());
  OptimConfig o = constant_lr(0.1);
  o.weight_decay = 0.5;
  auto opt = AdamW::create(o, 100, &model->store());
  ASSERT_TRUE(opt.ok());
  std::map<std::string, std::vector<float>> before;
  for (const ParamSpec& s : model->layout().specs()) {
    std::vector<float> v = param(*model, s.name);
    for (float& x : v) x += 0.5f;  // biases away from 0 so a decay would show
    ASSERT_TRUE(model->set_parameter(s.name, v).ok());
    before[s.name] = v;
  }
  model->zero_grad();
  EXPECT_EQ((*opt)->grad_norm(), 0.0);
  EXPECT_NEAR((*opt)->apply(1, 0.0), 0.1, 1e-7);
  for (const ParamSpec& s : model->layout().specs()) {
    const bool norm = s.name.find(".ln") != std::string::npos || s.name.rfind("lnf.", 0) == 0;
    const bool decays =
        s.name == "wte" || s.name == "wpe" || (!norm && s.name.find(".bias") == std::string::npos);
    EXPECT_EQ(s.weight_decay, decays) << s.name;
    const std::vector<float> after = param(*model, s.name);
    for (size_t i = 0; i < after.size(); ++i) {
      const float expect = decays ? before[s.name][i] * (1.f - 0.05f) : before[s.name][i];
      ASSERT_NEAR(after[i], expect, 1e-6f * std::fabs(expect) + 1e-7f) << s.name << "[" << i << "]";
    }
  }
}

// grad_norm is sqrt(Σ g²) over every tensor; apply() scales the gradients by clip / norm. With
// eps = 1 the first Adam step g·s / (|g·s| + 1) shows the scale s.
TEST(AdamW, GlobalNormClipping) {
  auto be = make_cpu_backend(2);
  auto model = tiny_model(be.get());
  const auto windows = testing::random_windows(5, 2, 8, 64);
  forward_backward(model.get(), windows, 2);
  double sum = 0;
  for (const ParamSpec& s : model->layout().specs()) {
    for (float g : grad(*model, s.name)) sum += static_cast<double>(g) * g;
  }
  OptimConfig o = constant_lr(0.01);
  o.eps = 1.0;
  o.weight_decay = 0;
  auto opt = AdamW::create(o, 100, &model->store());
  ASSERT_TRUE(opt.ok());
  const double norm = (*opt)->grad_norm();
  EXPECT_NEAR(norm, std::sqrt(sum), 1e-6 * norm);

  o.grad_clip = norm / 4;  // scale 1/4
  auto clipped = AdamW::create(o, 100, &model->store());
  ASSERT_TRUE(clipped.ok());
  std::map<std::string, std::vector<float>> p0, g;
  for (const ParamSpec& s : model->layout().specs()) {
    p0[s.name] = param(*model, s.name);
    g[s.name] = grad(*model, s.name);
  }
  (*clipped)->apply(1, norm);
  for (const char* name : {"wte", "h.1.attn.qkv.weight", "lnf.bias"}) {
    const std::vector<float> p1 = param(*model, name);
    for (size_t i = 0; i < p1.size(); ++i) {
      const double gs = g[name][i] * 0.25;
      const double expect = p0[name][i] - 0.01 * gs / (std::fabs(gs) + 1.0);
      ASSERT_NEAR(p1[i], expect, 1e-6) << name << "[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace ax::train
