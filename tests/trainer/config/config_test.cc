#include "ax/trainer/config/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace ax::train {
namespace {

Config experiment(const std::string& name) {
  StatusOr<Config> c = make_experiment(name);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : Config();
}

// The error message of a Status that must have failed with InvalidArgument.
std::string invalid(const Status& s) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
  return s.message();
}

std::string override_error(const std::string& assignment) {
  Config c = experiment("tiny-gpt");
  return invalid(apply_override(&c, assignment));
}

// Parameters of the model a config describes, counted from the layout of
// docs/parameter-names.md:
//   wte V·C, wpe maxT·C (learned positions), per layer two norms, qkv (NH + 2·KVH)·HD·C,
//   proj C·NH·HD, MLP fc (F, or 2F for the gated swiglu and geglu)·C and proj C·F, biases when
//   model.bias; final norm; an untied LM head V·C. A norm has C weights, plus C biases for
//   LayerNorm with bias.
int64_t parameter_count(const ModelConfig& m) {
  const int64_t C = m.model_dim, L = m.num_layers, NH = m.num_heads, KVH = m.num_kv_heads;
  const int64_t HD = m.head_dim(), F = m.hidden_dim, V = m.vocab_size;
  const int64_t norm = (m.norm == NormKind::kLayerNorm && m.bias) ? 2 * C : C;
  const int64_t qkv = (NH + 2 * KVH) * HD;
  const int64_t attn = qkv * C + C * NH * HD + (m.bias ? qkv + C : 0);
  const int64_t fc = m.activation == Activation::kGelu ? F : 2 * F;
  const int64_t mlp = fc * C + C * F + (m.bias ? fc + C : 0);
  const int64_t positions = m.position == PositionKind::kLearned ? m.max_seq_len * C : 0;
  return V * C + positions + L * (2 * norm + attn + mlp) + norm + (m.tied_embeddings ? 0 : V * C);
}

void expect_same(const Config& a, const Config& b) {
  EXPECT_EQ(a.experiment, b.experiment);
  EXPECT_EQ(a.model.family, b.model.family);
  EXPECT_EQ(a.model.num_layers, b.model.num_layers);
  EXPECT_EQ(a.model.model_dim, b.model.model_dim);
  EXPECT_EQ(a.model.num_heads, b.model.num_heads);
  EXPECT_EQ(a.model.num_kv_heads, b.model.num_kv_heads);
  EXPECT_EQ(a.model.hidden_dim, b.model.hidden_dim);
  EXPECT_EQ(a.model.vocab_size, b.model.vocab_size);
  EXPECT_EQ(a.model.vocab_multiple, b.model.vocab_multiple);
  EXPECT_EQ(a.model.max_seq_len, b.model.max_seq_len);
  EXPECT_EQ(a.model.norm, b.model.norm);
  EXPECT_EQ(a.model.activation, b.model.activation);
  EXPECT_EQ(a.model.position, b.model.position);
  EXPECT_EQ(a.model.rope_theta, b.model.rope_theta);
  EXPECT_EQ(a.model.rope_scaling, b.model.rope_scaling);
  EXPECT_EQ(a.model.rope_scaling_factor, b.model.rope_scaling_factor);
  EXPECT_EQ(a.model.rope_low_freq_factor, b.model.rope_low_freq_factor);
  EXPECT_EQ(a.model.rope_high_freq_factor, b.model.rope_high_freq_factor);
  EXPECT_EQ(a.model.rope_original_max_positions, b.model.rope_original_max_positions);
  EXPECT_EQ(a.model.tied_embeddings, b.model.tied_embeddings);
  EXPECT_EQ(a.model.bias, b.model.bias);
  EXPECT_EQ(a.model.norm_eps, b.model.norm_eps);
  EXPECT_EQ(a.model.init_std, b.model.init_std);
  EXPECT_EQ(a.optim.lr, b.optim.lr);
  EXPECT_EQ(a.optim.warmup_steps, b.optim.warmup_steps);
  EXPECT_EQ(a.optim.decay_steps, b.optim.decay_steps);
  EXPECT_EQ(a.optim.min_lr_ratio, b.optim.min_lr_ratio);
  EXPECT_EQ(a.optim.beta1, b.optim.beta1);
  EXPECT_EQ(a.optim.beta2, b.optim.beta2);
  EXPECT_EQ(a.optim.eps, b.optim.eps);
  EXPECT_EQ(a.optim.weight_decay, b.optim.weight_decay);
  EXPECT_EQ(a.optim.grad_clip, b.optim.grad_clip);
  EXPECT_EQ(a.train.max_steps, b.train.max_steps);
  EXPECT_EQ(a.train.percore_batch_size, b.train.percore_batch_size);
  EXPECT_EQ(a.train.num_microbatches, b.train.num_microbatches);
  EXPECT_EQ(a.train.seq_len, b.train.seq_len);
  EXPECT_EQ(a.train.seed, b.train.seed);
  EXPECT_EQ(a.train.log_every, b.train.log_every);
  EXPECT_EQ(a.train.eval_every, b.train.eval_every);
  EXPECT_EQ(a.train.eval_batches, b.train.eval_batches);
  EXPECT_EQ(a.train.checkpoint_every, b.train.checkpoint_every);
  EXPECT_EQ(a.train.keep_checkpoints, b.train.keep_checkpoints);
  EXPECT_EQ(a.train.resume_on_corrupt, b.train.resume_on_corrupt);
  EXPECT_EQ(a.data.train_dir, b.data.train_dir);
  EXPECT_EQ(a.data.validation_dir, b.data.validation_dir);
  EXPECT_EQ(a.data.tokenizer, b.data.tokenizer);
  EXPECT_EQ(a.mesh.ici, b.mesh.ici);
  EXPECT_EQ(a.mesh.dcn, b.mesh.dcn);
}

// ---- Experiments -------------------------------------------------------------------------------

TEST(ConfigExperiments, EveryExperimentValidates) {
  std::vector<std::string> names = experiment_names();
  EXPECT_GE(names.size(), 20u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    Config c = experiment(name);
    EXPECT_EQ(c.experiment, name);
    Status s = validate(c);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
}

TEST(ConfigExperiments, UnknownNameListsTheKnownOnes) {
  StatusOr<Config> c = make_experiment("Pile125M");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_NE(c.status().message().find("Pile126M"), std::string::npos);
  EXPECT_NE(c.status().message().find("fuji-70B-v3"), std::string::npos);
}

TEST(ConfigExperiments, Pile126MIsPaxGpt126M) {
  Config c = experiment("Pile126M");
  const ModelConfig& m = c.model;
  EXPECT_EQ(m.family, ModelFamily::kGpt);
  EXPECT_EQ(m.num_layers, 12);
  EXPECT_EQ(m.model_dim, 768);
  EXPECT_EQ(m.num_heads, 12);
  EXPECT_EQ(m.num_kv_heads, 12);
  EXPECT_EQ(m.hidden_dim, 3072);
  EXPECT_EQ(m.head_dim(), 64);
  EXPECT_EQ(m.vocab_size, 0);  // from the tokenizer, padded to 128 (50257 -> 50304)
  EXPECT_EQ(m.vocab_multiple, 128);
  EXPECT_EQ(m.max_seq_len, 2048);
  EXPECT_EQ(m.norm, NormKind::kLayerNorm);
  EXPECT_EQ(m.activation, Activation::kGelu);
  EXPECT_EQ(m.position, PositionKind::kLearned);
  EXPECT_TRUE(m.tied_embeddings);
  EXPECT_TRUE(m.bias);
  EXPECT_DOUBLE_EQ(m.init_std, 0.023);
  EXPECT_DOUBLE_EQ(c.optim.lr, 6e-4);
  EXPECT_EQ(c.optim.warmup_steps, 636);
  EXPECT_EQ(c.optim.decay_steps, 500000);
  EXPECT_DOUBLE_EQ(c.optim.min_lr_ratio, 0.1);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 0.1);
  EXPECT_DOUBLE_EQ(c.optim.grad_clip, 1.0);
  EXPECT_DOUBLE_EQ(c.optim.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optim.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optim.eps, 1e-8);
  EXPECT_EQ(c.train.max_steps, 600000);
  EXPECT_EQ(c.train.seq_len, 2048);
  EXPECT_DOUBLE_EQ(c.train.percore_batch_size, 4);
}

TEST(ConfigExperiments, PaxGpt5BAnd175B) {
  Config b5 = experiment("GPT5B");
  EXPECT_EQ(b5.model.num_layers, 24);
  EXPECT_EQ(b5.model.model_dim, 4096);
  EXPECT_EQ(b5.model.num_heads, 32);
  EXPECT_EQ(b5.model.hidden_dim, 16384);
  EXPECT_DOUBLE_EQ(b5.optim.lr, 1.6e-4);
  EXPECT_EQ(b5.optim.warmup_steps, 115);
  EXPECT_EQ(b5.optim.decay_steps, 62500);
  EXPECT_EQ(b5.train.max_steps, 75000);
  EXPECT_DOUBLE_EQ(b5.model.init_std, 0.01);
  EXPECT_DOUBLE_EQ(b5.train.percore_batch_size, 8);

  Config b175 = experiment("GPT175B");
  EXPECT_EQ(b175.model.num_layers, 96);
  EXPECT_EQ(b175.model.model_dim, 12288);
  EXPECT_EQ(b175.model.num_heads, 96);
  EXPECT_EQ(b175.model.head_dim(), 128);
  EXPECT_EQ(b175.model.hidden_dim, 49152);
  EXPECT_DOUBLE_EQ(b175.optim.lr, 2e-5);
  EXPECT_EQ(b175.optim.warmup_steps, 265);
  EXPECT_EQ(b175.optim.decay_steps, 108600);
  EXPECT_DOUBLE_EQ(b175.model.init_std, 0.006);
  EXPECT_DOUBLE_EQ(b175.train.percore_batch_size, 6);
}

TEST(ConfigExperiments, FujiVersionsAndSizes) {
  Config c = experiment("fuji-7B-v3");
  EXPECT_EQ(c.model.family, ModelFamily::kLlama);
  EXPECT_EQ(c.model.num_layers, 32);
  EXPECT_EQ(c.model.model_dim, 4096);
  EXPECT_EQ(c.model.num_heads, 32);
  EXPECT_EQ(c.model.num_kv_heads, 8);
  EXPECT_EQ(c.model.hidden_dim, 11008);
  EXPECT_DOUBLE_EQ(c.model.rope_theta, 5e5);
  EXPECT_EQ(c.model.vocab_size, 131072);
  EXPECT_EQ(c.train.seq_len, 8192);
  EXPECT_EQ(c.model.norm, NormKind::kRmsNorm);
  EXPECT_EQ(c.model.activation, Activation::kSwiglu);
  EXPECT_EQ(c.model.position, PositionKind::kRope);
  EXPECT_FALSE(c.model.bias);
  EXPECT_TRUE(c.model.tied_embeddings);
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-4);
  EXPECT_EQ(c.optim.warmup_steps, 2000);
  EXPECT_DOUBLE_EQ(c.optim.min_lr_ratio, 0.1);

  Config v1 = experiment("fuji-7B-v1");
  EXPECT_EQ(v1.model.num_kv_heads, 32);
  EXPECT_DOUBLE_EQ(v1.model.rope_theta, 1e4);
  EXPECT_EQ(v1.model.vocab_size, 32768);
  EXPECT_EQ(v1.train.seq_len, 2048);
  EXPECT_EQ(experiment("fuji-7B-v2").train.seq_len, 4096);

  Config b70v1 = experiment("fuji-70B-v1");
  EXPECT_EQ(b70v1.model.num_layers, 80);
  EXPECT_EQ(b70v1.model.num_kv_heads, 64);
  EXPECT_FALSE(b70v1.model.tied_embeddings);
  EXPECT_DOUBLE_EQ(b70v1.optim.lr, 1.5e-4);
  EXPECT_EQ(experiment("fuji-70B-v2").model.num_kv_heads, 8);
  EXPECT_EQ(experiment("fuji-1B-v3").model.num_kv_heads, 8);
  EXPECT_EQ(experiment("fuji-3B-v3").model.num_heads, 24);
}

TEST(ConfigExperiments, SmallConfigs) {
  Config g = experiment("tiny-gpt");
  EXPECT_EQ(g.model.num_layers, 2);
  EXPECT_EQ(g.model.model_dim, 64);
  EXPECT_EQ(g.model.num_heads, 4);
  EXPECT_EQ(g.model.hidden_dim, 256);
  EXPECT_EQ(g.train.seq_len, 64);
  EXPECT_EQ(g.model.vocab_size, 512);

  Config l = experiment("tiny-llama");
  EXPECT_EQ(l.model.family, ModelFamily::kLlama);
  EXPECT_EQ(l.model.num_kv_heads, 2);
  EXPECT_EQ(l.model.hidden_dim, 128);
  EXPECT_EQ(l.model.position, PositionKind::kRope);

  Config a = experiment("bench-a");
  EXPECT_EQ(a.model.num_layers, 4);
  EXPECT_EQ(a.model.model_dim, 256);
  EXPECT_EQ(a.model.num_heads, 4);
  EXPECT_EQ(a.model.hidden_dim, 1024);
  EXPECT_EQ(a.model.vocab_size, 8192);
  EXPECT_EQ(a.train.seq_len, 256);
  EXPECT_DOUBLE_EQ(a.train.percore_batch_size, 8);
  Config b = experiment("bench-b");
  EXPECT_EQ(b.model.num_layers, 6);
  EXPECT_EQ(b.model.model_dim, 384);
  EXPECT_EQ(b.model.num_heads, 6);
  EXPECT_EQ(b.model.hidden_dim, 1536);
  // The PyTorch peer's parameter counts (models-and-numbers.md §4.7): 5.32M and 13.89M.
  EXPECT_NEAR(parameter_count(a.model) / 1e6, 5.32, 0.01);
  EXPECT_NEAR(parameter_count(b.model) / 1e6, 13.89, 0.01);
  // The T5 benchmark's models (docs/benchmarks-train.md "T5"; ax-train-bench checks at run time
  // that torch_t5_peer.py has ax's parameter count).
  Config ta = experiment("bench-t5-a");
  EXPECT_EQ(ta.model.family, ModelFamily::kT5);
  EXPECT_EQ(ta.model.num_layers, 2);
  EXPECT_EQ(ta.model.num_decoder_layers, 2);
  EXPECT_EQ(ta.model.model_dim, 256);
  EXPECT_EQ(ta.model.head_dim(), 64);
  EXPECT_EQ(ta.train.encoder_seq_len, 256);
  EXPECT_EQ(ta.train.seq_len, 64);
  Config tb = experiment("bench-t5-b");
  EXPECT_EQ(tb.model.num_layers, 4);
  EXPECT_EQ(tb.model.model_dim, 384);
  EXPECT_EQ(tb.model.hidden_dim, 1536);

  Config d = experiment("demo-gpt");
  EXPECT_EQ(d.model.family, ModelFamily::kGpt);
  EXPECT_EQ(d.model.vocab_size, 0);
  EXPECT_EQ(d.train.log_every, 25);
  EXPECT_EQ(d.train.eval_every, 250);
  EXPECT_EQ(d.train.checkpoint_every, 500);
}

// Parameter counts from the configs against the reference's computed counts
// (models-and-numbers.md §3.3, §3.4).
TEST(ConfigExperiments, ParameterCountsMatchTheReference) {
  struct Case {
    const char* name;
    int64_t vocab;  // for configs whose vocabulary comes from the tokenizer
    double expected;
  };
  const Case cases[] = {
      // llm.c's GPT-2 124M is the same network with 1024 positions; Pile126M has 2048.
      {"Pile126M", 50304, 124475904.0}, {"fuji-1B-v3", 0, 1.24e9},  {"fuji-3B-v3", 0, 3.22e9},
      {"fuji-7B-v1", 0, 6.61e9},        {"fuji-7B-v3", 0, 6.21e9},  {"fuji-70B-v1", 0, 78.4e9},
      {"fuji-70B-v2", 0, 69.0e9},       {"fuji-70B-v3", 0, 70.6e9},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    Config c = experiment(k.name);
    if (k.vocab) c.model.vocab_size = k.vocab;
    double n = static_cast<double>(parameter_count(c.model));
    EXPECT_NEAR(n / k.expected, 1.0, 0.01) << n;
  }
  Config pile = experiment("Pile126M");
  pile.model.vocab_size = 50304;
  EXPECT_EQ(parameter_count(pile.model), 124475904 + 1024 * 768);
  EXPECT_EQ(parameter_count(experiment("fuji-1B-v3").model), 1241581568);
}

// ---- Overrides ---------------------------------------------------------------------------------

TEST(ConfigOverrides, EachType) {
  Config c = experiment("tiny-gpt");
  ASSERT_TRUE(apply_override(&c, "model.num_layers=6").ok());
  ASSERT_TRUE(apply_override(&c, "optim.lr=3e-4").ok());
  ASSERT_TRUE(apply_override(&c, "model.bias=false").ok());
  ASSERT_TRUE(apply_override(&c, "model.tied_embeddings", "0").ok());
  ASSERT_TRUE(apply_override(&c, "data.tokenizer=/data/spm.model").ok());
  ASSERT_TRUE(apply_override(&c, "model.norm=rmsnorm").ok());
  ASSERT_TRUE(apply_override(&c, "model.activation=geglu").ok());
  ASSERT_TRUE(apply_override(&c, "train.seed=18446744073709551615").ok());
  ASSERT_TRUE(apply_override(&c, " train.log_every = 5 ").ok());
  EXPECT_EQ(c.model.num_layers, 6);
  EXPECT_DOUBLE_EQ(c.optim.lr, 3e-4);
  EXPECT_FALSE(c.model.bias);
  EXPECT_FALSE(c.model.tied_embeddings);
  EXPECT_EQ(c.data.tokenizer, "/data/spm.model");
  EXPECT_EQ(c.model.norm, NormKind::kRmsNorm);
  EXPECT_EQ(c.model.activation, Activation::kGeglu);
  EXPECT_EQ(name_of(c.model.activation), "geglu");
  EXPECT_EQ(c.train.seed, 18446744073709551615ull);
  EXPECT_EQ(c.train.log_every, 5);
}

// docs/reliability.md: the stragglers' margin and floor, and the test-only knob that slows a rank.
TEST(ConfigOverrides, StragglersAndTheDebugSlowKnob) {
  Config c = experiment("tiny-gpt");
  EXPECT_DOUBLE_EQ(c.train.straggler_margin, 0.2);
  EXPECT_DOUBLE_EQ(c.train.straggler_min_ms, 20);
  EXPECT_EQ(c.train.debug_slow_rank, -1);
  EXPECT_EQ(c.train.debug_slow_phase, "compute");
  for (const char* a :
       {"train.straggler_margin=0.5", "train.straggler_min_ms=5", "train.debug_slow_rank=2",
        "train.debug_slow_ms=150", "train.debug_slow_phase=data", "train.debug_slow_step=3"}) {
    ASSERT_TRUE(apply_override(&c, a).ok()) << a;
  }
  EXPECT_DOUBLE_EQ(c.train.straggler_margin, 0.5);
  EXPECT_DOUBLE_EQ(c.train.straggler_min_ms, 5);
  EXPECT_EQ(c.train.debug_slow_rank, 2);
  EXPECT_DOUBLE_EQ(c.train.debug_slow_ms, 150);
  EXPECT_EQ(c.train.debug_slow_phase, "data");
  EXPECT_EQ(c.train.debug_slow_step, 3);
  StatusOr<Config> back = from_json(to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->train.debug_slow_phase, "data");
  EXPECT_DOUBLE_EQ(back->train.straggler_margin, 0.5);
}

// Llama 3.1's RoPE scaling: off by default, its numbers Llama 3.1's until set.
TEST(ConfigOverrides, RopeScaling) {
  Config c = experiment("tiny-llama");
  EXPECT_EQ(c.model.rope_scaling, RopeScalingKind::kNone);
  EXPECT_EQ(c.model.rope_scaling_factor, 8);
  EXPECT_EQ(c.model.rope_low_freq_factor, 1);
  EXPECT_EQ(c.model.rope_high_freq_factor, 4);
  EXPECT_EQ(c.model.rope_original_max_positions, 8192);
  for (const char* o : {"model.rope_scaling=llama3", "model.rope_scaling_factor=32",
                        "model.rope_low_freq_factor=0.5", "model.rope_high_freq_factor=2.5",
                        "model.rope_original_max_positions=2048"}) {
    ASSERT_TRUE(apply_override(&c, o).ok()) << o;
  }
  EXPECT_EQ(c.model.rope_scaling, RopeScalingKind::kLlama3);
  EXPECT_EQ(name_of(c.model.rope_scaling), "llama3");
  EXPECT_EQ(c.model.rope_scaling_factor, 32);
  EXPECT_EQ(c.model.rope_low_freq_factor, 0.5);
  EXPECT_EQ(c.model.rope_high_freq_factor, 2.5);
  EXPECT_EQ(c.model.rope_original_max_positions, 2048);
  EXPECT_TRUE(validate(c).ok()) << validate(c).to_string();
  StatusOr<Config> back = from_json(to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(c, *back);
}

TEST(ConfigOverrides, SplitsAtTheFirstEquals) {
  Config c;
  ASSERT_TRUE(apply_override(&c, "data.train_dir=/runs/a=b").ok());
  EXPECT_EQ(c.data.train_dir, "/runs/a=b");
  std::string message = invalid(apply_override(&c, "model.num_layers"));
  EXPECT_NE(message.find("key=value"), std::string::npos) << message;
}

TEST(ConfigOverrides, BadValuesNameTheKey) {
  struct Case {
    const char* assignment;
    const char* expected;
  };
  const Case cases[] = {
      {"model.num_layers=1.5", "'model.num_layers' (int): '1.5' is not an integer"},
      {"model.num_layers=twelve", "is not an integer"},
      {"model.num_layers=0", "'model.num_layers': 0 must be > 0"},
      {"optim.lr=fast", "'optim.lr' (float): 'fast' is not a finite number"},
      {"optim.lr=nan", "is not a finite number"},
      {"optim.lr=-1e-3", "'optim.lr': -1e-3 must be > 0"},
      {"optim.beta2=1", "'optim.beta2': 1 must be in [0, 1)"},
      {"optim.min_lr_ratio=1.5", "must be in [0, 1]"},
      {"optim.warmup_steps=-1", "must be >= 0"},
      {"model.bias=maybe", "'model.bias' (bool): 'maybe' is not a boolean"},
      {"model.norm=batchnorm", "'model.norm': 'batchnorm' is not one of layernorm, rmsnorm"},
      {"model.family=bert", "is not one of gpt, llama, t5"},
      {"model.position=alibi", "is not one of learned, rope, relative"},
      {"model.activation=relu", "is not one of gelu, swiglu, geglu"},
      {"model.rope_scaling=yarn", "'model.rope_scaling': 'yarn' is not one of none, llama3"},
      {"model.rope_scaling_factor=0", "'model.rope_scaling_factor': 0 must be > 0"},
      {"model.rope_low_freq_factor=-1", "'model.rope_low_freq_factor': -1 must be > 0"},
      {"model.rope_high_freq_factor=0", "'model.rope_high_freq_factor': 0 must be > 0"},
      {"model.rope_original_max_positions=0", "'model.rope_original_max_positions': 0 must be"},
      {"train.seed=-1", "'train.seed' (int): '-1' is not a non-negative integer"},
      {"train.percore_batch_size=0", "'train.percore_batch_size': 0 must be > 0"},
      {"train.num_microbatches=0", "'train.num_microbatches': 0 must be > 0"},
      {"train.keep_checkpoints=0", "'train.keep_checkpoints': 0 must be > 0"},
      {"train.resume_on_corrupt=ignore",
       "'train.resume_on_corrupt': 'ignore' is not one of fallback, refuse"},
      {"train.straggler_margin=-0.1", "'train.straggler_margin': -0.1 must be >= 0"},
      {"train.straggler_min_ms=-5", "'train.straggler_min_ms': -5 must be >= 0"},
      {"train.debug_slow_phase=disk",
       "'train.debug_slow_phase': 'disk' is not one of compute, data"},
      {"train.debug_slow_step=-1", "must be >= 0"},
  };
  for (const Case& k : cases) {
    std::string message = override_error(k.assignment);
    EXPECT_NE(message.find(k.expected), std::string::npos) << k.assignment << " -> " << message;
  }
}

TEST(ConfigOverrides, PaxNames) {
  Config c = experiment("Pile126M");
  ASSERT_TRUE(apply_override(&c, "PERCORE_BATCH_SIZE=2.5").ok());
  ASSERT_TRUE(apply_override(&c, "NUM_MICROBATCHES=4").ok());
  ASSERT_TRUE(apply_override(&c, "ICI_MESH_SHAPE=[1,8,1]").ok());
  ASSERT_TRUE(apply_override(&c, "DCN_MESH_SHAPE", "4, -1, 1").ok());
  ASSERT_TRUE(apply_override(&c, "MAX_STEPS=100").ok());
  EXPECT_DOUBLE_EQ(c.train.percore_batch_size, 2.5);
  EXPECT_EQ(c.train.num_microbatches, 4);
  EXPECT_EQ(c.mesh.ici, "1,8,1");
  EXPECT_EQ(c.mesh.dcn, "4,-1,1");
  EXPECT_EQ(c.train.max_steps, 100);
  ASSERT_TRUE(apply_override(&c, "mesh.ici=auto").ok());
  EXPECT_EQ(c.mesh.ici, "auto");
  EXPECT_EQ(c.train.precision, "auto");
  ASSERT_TRUE(apply_override(&c, "FPROP_DTYPE=float32").ok());
  EXPECT_EQ(c.train.precision, "float32");
  ASSERT_TRUE(apply_override(&c, "train.precision=bfloat16").ok());
  EXPECT_EQ(c.train.precision, "bfloat16");
  EXPECT_FALSE(c.train.allow_tf32);  // f32 GEMMs stay f32 unless asked
  ASSERT_TRUE(apply_override(&c, "train.allow_tf32=true").ok());
  EXPECT_TRUE(c.train.allow_tf32);
  EXPECT_NE(override_error("FPROP_DTYPE=float16").find("auto, bfloat16, float32"),
            std::string::npos)
      << override_error("FPROP_DTYPE=float16");

  std::string message = override_error("NUM_MICROBATCHES=1.5");
  EXPECT_NE(message.find("'NUM_MICROBATCHES' (train.num_microbatches)"), std::string::npos)
      << message;
}

TEST(ConfigOverrides, BadMeshShapes) {
  for (const char* shape :
       {"[1,8]", "1,8,1,1", "1,-1,-1", "1,0,1", "a,b,c", "[1,8,1", "", "-2,1,1"}) {
    std::string message = override_error(std::string("ICI_MESH_SHAPE=") + shape);
    EXPECT_NE(message.find("'ICI_MESH_SHAPE' (mesh.ici)"), std::string::npos) << message;
    EXPECT_NE(message.find("data,fsdp,tensor"), std::string::npos) << message;
  }
}

TEST(ConfigOverrides, UnknownKeySuggestsTheNearest) {
  std::string message = override_error("model.num_layer=3");
  EXPECT_NE(message.find("unknown config key 'model.num_layer'; did you mean model.num_layers?"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("(keys in model.*: model.family, model.num_layers,"), std::string::npos)
      << message;

  message = override_error("num_layers=3");
  EXPECT_NE(message.find("did you mean model.num_layers?"), std::string::npos) << message;
  message = override_error("optim.learning_rate=1");
  EXPECT_NE(message.find("keys in optim.*"), std::string::npos) << message;
  message = override_error("PERCORE_BATCH=4");
  EXPECT_NE(message.find("did you mean PERCORE_BATCH_SIZE?"), std::string::npos) << message;
  message = override_error("xyzzy=1");
  EXPECT_EQ(message.find("did you mean"), std::string::npos) << message;
  EXPECT_NE(message.find("groups: model, optim, train, data, mesh"), std::string::npos) << message;
}

// ---- validate() --------------------------------------------------------------------------------

TEST(ConfigValidate, CrossFieldErrorsNameTheKeysAndNumbers) {
  struct Case {
    std::vector<std::string> overrides;
    std::vector<std::string> expected;
  };
  const Case cases[] = {
      {{"model.model_dim=66"}, {"model.model_dim (66)", "model.num_heads (4)"}},
      {{"model.num_kv_heads=3"}, {"model.num_heads (4)", "model.num_kv_heads (3)"}},
      {{"model.num_kv_heads=8"}, {"model.num_heads (4)", "model.num_kv_heads (8)"}},
      {{"model.position=rope", "model.model_dim=36", "model.num_heads=4"},
       {"model.position=rope", "it is 9", "model.model_dim (36)"}},
      {{"model.family=t5"}, {"model.position=relative", "model.family=t5"}},
      {{"model.position=relative"}, {"model.family=gpt"}},
      {{"model.family=t5", "model.position=relative"}, {"train.encoder_seq_len"}},
      {{"train.seq_len=128"}, {"train.seq_len (128)", "model.max_seq_len (64)"}},
      {{"optim.warmup_steps=30"}, {"optim.warmup_steps (30)", "train.max_steps = 20"}},
      {{"optim.warmup_steps=30", "optim.decay_steps=25"},
       {"optim.warmup_steps (30)", "optim.decay_steps = 25"}},
      {{"model.rope_scaling=llama3"},
       {"model.rope_scaling=llama3", "model.position=rope", "learned"}},
      {{"model.position=rope", "model.rope_scaling=llama3", "model.rope_high_freq_factor=1"},
       {"model.rope_high_freq_factor (1)", "model.rope_low_freq_factor (1)"}},
  };
  for (const Case& k : cases) {
    Config c = experiment("tiny-gpt");
    for (const std::string& o : k.overrides) ASSERT_TRUE(apply_override(&c, o).ok()) << o;
    std::string message = invalid(validate(c));
    for (const std::string& e : k.expected) {
      EXPECT_NE(message.find(e), std::string::npos) << message;
    }
  }
  // An explicit head dimension lifts the divisibility of model_dim by the heads.
  Config kv = experiment("tiny-gpt");
  ASSERT_TRUE(apply_override(&kv, "model.kv_channels=16").ok());
  ASSERT_TRUE(apply_override(&kv, "model.model_dim=66").ok());
  EXPECT_TRUE(validate(kv).ok()) << validate(kv).to_string();
  EXPECT_EQ(kv.model.head_dim(), 16);
  // A GPT with RoPE is allowed, and RoPE lifts the position-table limit.
  Config c = experiment("tiny-gpt");
  ASSERT_TRUE(apply_override(&c, "model.position=rope").ok());
  ASSERT_TRUE(apply_override(&c, "train.seq_len=128").ok());
  EXPECT_TRUE(validate(c).ok());
  // So is dropout on a decoder-only model (docs/t5.md "Dropout").
  ASSERT_TRUE(apply_override(&c, "model.dropout=0.1").ok());
  EXPECT_TRUE(validate(c).ok()) << validate(c).to_string();
}

TEST(ConfigValidate, ChecksEveryKeyRangeOfAStructBuiltInCode) {
  Config c = experiment("tiny-gpt");
  c.train.percore_batch_size = 0;
  EXPECT_NE(invalid(validate(c)).find("train.percore_batch_size"), std::string::npos);
  c = experiment("tiny-gpt");
  c.train.num_microbatches = 0;
  EXPECT_NE(invalid(validate(c)).find("train.num_microbatches"), std::string::npos);
  c = experiment("tiny-gpt");
  c.train.keep_checkpoints = 0;
  EXPECT_NE(invalid(validate(c)).find("train.keep_checkpoints"), std::string::npos);
  c = experiment("tiny-gpt");
  c.optim.lr = 0;
  EXPECT_NE(invalid(validate(c)).find("optim.lr"), std::string::npos);
  c = experiment("tiny-gpt");
  c.model.norm = static_cast<NormKind>(7);
  EXPECT_NE(invalid(validate(c)).find("model.norm"), std::string::npos);
  c = experiment("tiny-gpt");
  c.mesh.dcn = "1,1";
  EXPECT_NE(invalid(validate(c)).find("mesh.dcn"), std::string::npos);
  c = experiment("tiny-gpt");
  c.model.num_heads = 0;
  EXPECT_NE(invalid(validate(c)).find("model.num_heads"), std::string::npos);
}

// ---- JSON and text -----------------------------------------------------------------------------

TEST(ConfigJson, RoundTripsEveryExperiment) {
  for (const std::string& name : experiment_names()) {
    SCOPED_TRACE(name);
    Config c = experiment(name);
    StatusOr<Config> back = from_json(to_json(c));
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    expect_same(c, *back);
    EXPECT_EQ(to_json(*back), to_json(c));
  }
}

TEST(ConfigJson, RoundTripsEditedValues) {
  Config c = experiment("tiny-llama");
  for (const char* o : {"train.seed=18446744073709551615", "optim.lr=0.1234567890123",
                        "data.train_dir=/tmp/with \"quotes\" and \\", "mesh.ici=[2,-1,1]",
                        "train.percore_batch_size=0.5", "model.bias=true"}) {
    ASSERT_TRUE(apply_override(&c, o).ok()) << o;
  }
  StatusOr<Config> back = from_json(to_json(c));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  expect_same(c, *back);
}

TEST(ConfigJson, IsNestedByGroup) {
  std::string json = to_json(experiment("Pile126M"));
  EXPECT_NE(json.find("\"experiment\": \"Pile126M\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"model\": {"), std::string::npos) << json;
  EXPECT_NE(json.find("\"num_layers\": 12"), std::string::npos) << json;
  EXPECT_NE(json.find("\"mesh\": {"), std::string::npos) << json;
}

TEST(ConfigJson, RejectsUnknownKeysAndWrongTypes) {
  std::string message = invalid(from_json(R"({"model": {"num_layer": 3}})").status());
  EXPECT_NE(message.find("unknown config key 'model.num_layer'; did you mean model.num_layers?"),
            std::string::npos)
      << message;
  message = invalid(from_json(R"({"modle": {"num_layers": 3}})").status());
  EXPECT_NE(message.find("unknown config key 'modle.num_layers'"), std::string::npos) << message;
  message = invalid(from_json(R"({"extra": 1})").status());
  EXPECT_NE(message.find("unknown config key 'extra'"), std::string::npos) << message;
  message = invalid(from_json(R"({"model": {"num_layers": 1.5}})").status());
  EXPECT_NE(message.find("'model.num_layers' (int)"), std::string::npos) << message;
  message = invalid(from_json(R"({"model": {"num_layers": "12"}})").status());
  EXPECT_NE(message.find("'model.num_layers' (int)"), std::string::npos) << message;
  message = invalid(from_json(R"({"model": {"norm": "batchnorm"}})").status());
  EXPECT_NE(message.find("is not one of layernorm, rmsnorm"), std::string::npos) << message;
  message = invalid(from_json(R"({"train": {"seed": -3}})").status());
  EXPECT_NE(message.find("'train.seed'"), std::string::npos) << message;
  message = invalid(from_json(R"({"model": 3})").status());
  EXPECT_NE(message.find("'model' is not an object"), std::string::npos) << message;
  invalid(from_json("{not json").status());
  invalid(from_json("[1, 2]").status());

  // Keys left out keep the base Config's defaults.
  StatusOr<Config> partial = from_json(R"({"experiment": "x", "model": {"num_layers": 7}})");
  ASSERT_TRUE(partial.ok()) << partial.status().to_string();
  EXPECT_EQ(partial->model.num_layers, 7);
  EXPECT_EQ(partial->model.model_dim, Config().model.model_dim);
}

TEST(ConfigText, AlignedKeyValueLines) {
  std::string text = to_text(experiment("Pile126M"));
  std::istringstream in(text);
  std::string line;
  size_t column = std::string::npos;
  int lines = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    size_t eq = line.find(" = ");
    ASSERT_NE(eq, std::string::npos) << line;
    if (column == std::string::npos) column = eq;
    EXPECT_EQ(eq, column) << line;
    ++lines;
  }
  EXPECT_EQ(lines, 80);  // experiment + 79 keys
  EXPECT_NE(text.find("experiment "), std::string::npos);
  EXPECT_NE(text.find("model.num_layers "), std::string::npos);
  EXPECT_NE(text.find(" = 0.0006\n"), std::string::npos) << text;
  EXPECT_NE(text.find("mesh.ici"), std::string::npos);
}

TEST(ConfigText, DescribeKeysListsEveryKey) {
  std::string help = describe_keys();
  std::istringstream in(to_text(Config()));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line.rfind("experiment", 0) == 0) continue;
    std::string key = line.substr(0, line.find(' '));
    EXPECT_NE(help.find(key + " "), std::string::npos) << key;
  }
  EXPECT_NE(help.find("{gpt|llama|t5}"), std::string::npos) << help;
  EXPECT_NE(help.find("[Pax: PERCORE_BATCH_SIZE]"), std::string::npos) << help;
  EXPECT_NE(help.find("float"), std::string::npos);
  EXPECT_NE(help.find("bool"), std::string::npos);
}

}  // namespace
}  // namespace ax::train
