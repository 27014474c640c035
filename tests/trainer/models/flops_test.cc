#include "ax/trainer/models/flops.h"

#include <gtest/gtest.h>

#include "ax/trainer/config/config.h"

namespace ax::train {
namespace {

// The matmul parameters N of the PaLM formula: every layer's attention and MLP weights and the LM
// head once (an untied input embedding is a lookup, not a matmul).
double matmul_params(const ModelConfig& m) {
  const double C = static_cast<double>(m.model_dim);
  const double HD = static_cast<double>(m.head_dim());
  const double NH = static_cast<double>(m.num_heads), KVH = static_cast<double>(m.num_kv_heads);
  const double F = static_cast<double>(m.hidden_dim);
  const double mlp = (m.activation == Activation::kGelu ? 2 : 3) * C * F;
  const double attn = C * (NH + 2 * KVH) * HD + NH * HD * C;
  return static_cast<double>(m.num_layers) * (attn + mlp) + static_cast<double>(m.vocab_size) * C;
}

TEST(FlopsPerToken, Gpt3At2048TokensIsNvidiasFigure) {
  StatusOr<Config> c = make_experiment("GPT175B");
  ASSERT_TRUE(c.ok());
  c->model.vocab_size = 50257;
  const ModelConfig& m = c->model;
  double per_token = flops_per_token(static_cast<int64_t>(matmul_params(m)), m.num_layers,
                                     m.num_heads, m.head_dim(), 2048, /*causal=*/false);
  // dgxc-benchmarking (PaLM's whole attention count): 2.20e15 FLOPs per 2048-token sequence.
  EXPECT_NEAR(per_token * 2048 / 2.20e15, 1.0, 0.02);
}

TEST(FlopsPerToken, Llama31_8BAt8192Tokens) {
  ModelConfig m;
  m.num_layers = 32;
  m.model_dim = 4096;
  m.num_heads = 32;
  m.num_kv_heads = 8;
  m.hidden_dim = 14336;
  m.vocab_size = 128256;
  m.activation = Activation::kSwiglu;
  double per_token = flops_per_token(static_cast<int64_t>(matmul_params(m)), m.num_layers,
                                     m.num_heads, m.head_dim(), 8192, /*causal=*/false);
  // dgxc-benchmarking (PaLM's whole attention count): 4.74e14 FLOPs per 8192-token sequence.
  EXPECT_NEAR(per_token * 8192 / 4.74e14, 1.0, 0.02);
}

TEST(FlopsPerToken, Formula) {
  EXPECT_DOUBLE_EQ(flops_per_token(1000, 2, 3, 4, 5, false), 6.0 * 1000 + 12.0 * 2 * 3 * 4 * 5);
  EXPECT_DOUBLE_EQ(flops_per_token(1000, 2, 3, 4, 5, true), 6.0 * 1000 + 6.0 * 2 * 3 * 4 * 5);
}

}  // namespace
}  // namespace ax::train
