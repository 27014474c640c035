// The models: layout table, initialisation, causality, whole-model gradients against finite
// differences, and gradient accumulation over micro-batches.
#include "ax/trainer/models/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <set>

#include "ax/trainer/models/flops.h"
#include "ax/trainer/train/train_loop.h"
#include "model_test_util.h"

namespace ax::train {
namespace {

// Small enough for finite differences; vocabulary 37 padded to 48 so padded columns exist.
constexpr int64_t kVocab = 37;
constexpr int64_t kRows = 48;  // the table's rows: the softmax covers all of them

ModelConfig small_config(bool llama) {
  ModelConfig m;
  m.num_layers = 2;
  m.model_dim = 16;
  m.num_heads = 4;
  m.num_kv_heads = llama ? 2 : 4;
  m.hidden_dim = 24;
  m.vocab_size = 0;
  m.vocab_multiple = 16;
  m.max_seq_len = 8;
  if (llama) {
    m.family = ModelFamily::kLlama;
    m.norm = NormKind::kRmsNorm;
    m.activation = Activation::kSwiglu;
    m.position = PositionKind::kRope;
    m.tied_embeddings = false;
    m.bias = false;
  }
  return m;
}

std::unique_ptr<Model> make_model(const ModelConfig& config, Backend* be, int64_t batch,
                                  int64_t seq, int64_t vocab = kVocab,
                                  const ModelOptions& options = {}) {
  auto model = Model::create(config, vocab, batch, seq, be, {}, options);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  return model.ok() ? std::move(*model) : nullptr;
}

// Ids are checked by the model for every backend before any op sees them (the GPU's kernels read
// them unchecked; a vocabulary split over tensor ranks would silently drop such a target).
TEST(ModelDeathTest, IdsOutsideTheVocabularyAbortBeforeAnyOp) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto be = make_cpu_bf16_backend(1);
  auto model = make_model(small_config(true), be.get(), 1, 4);
  ASSERT_TRUE(model);
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  EXPECT_DEATH(model->forward(tokens, std::vector<int32_t>{2, 3, kRows, 5}),
               "target 48 outside the vocabulary \\[0, 48\\)");
  EXPECT_DEATH(model->forward(std::vector<int32_t>{1, 2, -3, 4}, {}),
               "token -3 outside the vocabulary \\[0, 48\\)");
  EXPECT_GT(model->forward(tokens, std::vector<int32_t>{2, -1, 36, -100}), 0.f);
}

// Issue 28: the softmax covers every row of the table, the tokenizer's 37 ids and the 11 rows
// that pad them to 48, as a Hugging Face config.json with vocab_size 48 defines it. The loss is
// recomputed here in double from the 48 logits; over the first 37 alone it would differ.
TEST(Model, SoftmaxCoversThePaddedRows) {
  for (bool llama : {false, true}) {
    auto be = make_cpu_backend(1);
    auto model = make_model(small_config(llama), be.get(), 1, 6);
    ASSERT_TRUE(model);
    model->init(3);
    EXPECT_EQ(model->vocab(), kRows);
    const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6}, targets = {7, 8, 36, -1, 0, 20};
    const float loss = model->forward(tokens, targets);
    double all = 0, real_only = 0;
    for (int64_t t = 0; t < 6; ++t) {
      if (targets[t] < 0) continue;
      const std::vector<float> logits = model->logits(0, t);
      ASSERT_EQ(std::ssize(logits), kRows);
      double max = logits[0], sum = 0, sum_real = 0;
      for (float x : logits) max = std::max<double>(max, x);
      for (int64_t v = 0; v < kRows; ++v) {
        const double e = std::exp(logits[v] - max);
        sum += e;
        sum_real += v < kVocab ? e : 0;
      }
      all += std::log(sum) + max - logits[targets[t]];
      real_only += std::log(sum_real) + max - logits[targets[t]];
    }
    EXPECT_NEAR(loss, all / 5, 1e-5 * all / 5) << "llama=" << llama;
    EXPECT_GT(std::abs(all - real_only) / 5, 1e-3) << "the padded rows must carry probability";
  }
}

// MFU divides model FLOPs by a GEMM rate, so the model FLOPs of a step must not exceed what the
// backend's matrix products execute, or MFU can read above 100 %. PaLM's whole attention count
// did (a causal kernel skips the masked half): with attention-heavy shapes it counted more than
// the CPU backend ran. Causal attention is counted half, as MaxText counts it.
TEST(ModelFlops, NeverExceedTheMatrixProductsTheBackendExecutes) {
  for (bool llama : {false, true}) {
    ModelConfig config = small_config(llama);
    config.model_dim = 32;
    config.num_heads = 2;
    config.num_kv_heads = llama ? 1 : 2;
    config.max_seq_len = 256;
    auto be = make_cpu_backend(2);
    const int64_t B = 2, T = 256;
    auto model = make_model(config, be.get(), B, T);
    ASSERT_TRUE(model);
    std::mt19937 rng(5);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>(rng() % kVocab);
      targets[i] = static_cast<int32_t>(rng() % kVocab);
    }
    const double before = be->executed_matmul_flops();
    model->forward(tokens, targets);
    model->backward(1.f);
    const double executed = be->executed_matmul_flops() - before;
    const int64_t N = model->layout().num_matmul_parameters();
    auto counted = [&](bool causal) {
      return flops_per_token(N, config.num_layers, config.num_heads, config.head_dim(), T, causal) *
             static_cast<double>(B * T);
    };
    EXPECT_LE(counted(true), executed) << (llama ? "llama" : "gpt");
    // The shapes are attention-heavy enough that the whole count would exceed it.
    EXPECT_GT(counted(false), executed) << (llama ? "llama" : "gpt");
  }
}

// T5's count: 6 FLOPs per matmul parameter per token of its stack, the encoder's whole Te² and
// the decoder's causal half of Td² and whole Td·Te attention products (docs/t5.md), written out
// from the config here; and no more than the matrix products the backend executes.
TEST(ModelFlops, T5CountsBothStacksAndNeverExceedsWhatRuns) {
  StatusOr<Config> c = make_experiment("tiny-t5");
  ASSERT_TRUE(c.ok());
  const ModelConfig& m = c->model;
  auto be = make_cpu_backend(2);
  const int64_t B = 2, Te = 96, Td = 32;
  auto model = make_model(m, be.get(), B, Td, 500, {.encoder_seq_len = Te});
  ASSERT_TRUE(model);
  const double C = static_cast<double>(m.model_dim), F = static_cast<double>(m.hidden_dim);
  const double Q = static_cast<double>(m.num_heads * m.head_dim());
  const double Vp = static_cast<double>(model->config().vocab_size);
  const double E = static_cast<double>(m.num_layers), D = static_cast<double>(m.num_decoder_layers);
  const double enc_layer = 3 * Q * C + C * Q + 2 * F * C + C * F;
  const double dec_layer = enc_layer + Q * C + 2 * Q * C + C * Q;
  const double want = 6 * (E * enc_layer * Te + (D * dec_layer + Vp * C) * Td) +
                      12 * E * Q * Te * Te + 6 * D * Q * Td * Td + 12 * D * Q * Td * Te;
  EXPECT_DOUBLE_EQ(model->flops_per_row(), want);

  std::mt19937 rng(9);
  std::vector<int32_t> enc(B * Te), tokens(B * Td), targets(B * Td);
  for (int32_t& t : enc) t = static_cast<int32_t>(rng() % 500);
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % 500);
  for (int32_t& t : targets) t = static_cast<int32_t>(rng() % 500);
  const double before = be->executed_matmul_flops();
  model->forward({.tokens = tokens, .targets = targets, .encoder_tokens = enc});
  model->backward(1.f);
  const double executed = be->executed_matmul_flops() - before;
  EXPECT_LE(model->flops_per_row() * B, executed);
}

// Packing (Batch::segment_ids): a token never attends to another segment's. With RoPE attention
// depends only on relative positions, so an example's logits are the same wherever it sits in a
// row; without the segments its logits depend on what precedes it.
TEST(Packing, SegmentsKeepPackedExamplesApart) {
  auto be = make_cpu_backend(2);
  ModelConfig config = small_config(true);
  auto model = make_model(config, be.get(), 2, 8);
  ASSERT_TRUE(model);
  model->init(3);
  // Row 0: A (3 tokens) then B (5 tokens); row 1: B then C (3 tokens).
  const std::vector<int32_t> A = {5, 9, 2}, Bx = {11, 4, 30, 7, 19}, Cx = {1, 8, 22};
  std::vector<int32_t> tokens = A;
  tokens.insert(tokens.end(), Bx.begin(), Bx.end());
  tokens.insert(tokens.end(), Bx.begin(), Bx.end());
  tokens.insert(tokens.end(), Cx.begin(), Cx.end());
  const std::vector<int32_t> segments = {1, 1, 1, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 2, 2, 2};
  auto b_logits = [&](bool packed) {
    Batch batch{tokens, {}};
    if (packed) batch.segment_ids = segments;
    model->forward(batch);
    std::vector<std::vector<float>> rows[2];
    for (int64_t t = 0; t < 5; ++t) {
      rows[0].push_back(model->logits(0, 3 + t));
      rows[1].push_back(model->logits(1, t));
    }
    double worst = 0;
    for (size_t t = 0; t < 5; ++t) {
      for (size_t v = 0; v < rows[0][t].size(); ++v) {
        worst = std::max(worst, static_cast<double>(std::abs(rows[0][t][v] - rows[1][t][v])));
      }
    }
    return worst;
  };
  EXPECT_LT(b_logits(true), 1e-5);
  EXPECT_GT(b_logits(false), 1e-3);
}

TEST(ParamLayout, GptNamesShapesAndWeightDecay) {
  auto be = make_cpu_backend(2);
  ModelConfig config = small_config(false);
  auto model = make_model(config, be.get(), 2, 6);
  ASSERT_TRUE(model);
  const ParamLayout& layout = model->layout();
  const int64_t C = 16, F = 24, Vp = 48;
  struct Expect {
    const char* name;
    std::vector<int64_t> shape;
    bool decay;
  };
  const Expect expected[] = {
      {"wte", {Vp, C}, true},
      {"wpe", {8, C}, true},
      {"h.0.ln1.weight", {C}, false},
      {"h.0.ln1.bias", {C}, false},
      {"h.0.attn.qkv.weight", {3 * C, C}, true},
      {"h.0.attn.qkv.bias", {3 * C}, false},
      {"h.0.attn.proj.weight", {C, C}, true},
      {"h.0.attn.proj.bias", {C}, false},
      {"h.1.ln2.weight", {C}, false},
      {"h.1.ln2.bias", {C}, false},
      {"h.1.mlp.fc.weight", {F, C}, true},
      {"h.1.mlp.fc.bias", {F}, false},
      {"h.1.mlp.proj.weight", {C, F}, true},
      {"h.1.mlp.proj.bias", {C}, false},
      {"lnf.weight", {C}, false},
      {"lnf.bias", {C}, false},
  };
  for (const Expect& e : expected) {
    const ParamSpec* spec = layout.find(e.name);
    ASSERT_NE(spec, nullptr) << e.name;
    EXPECT_EQ(spec->shape, e.shape) << e.name;
    EXPECT_EQ(spec->weight_decay, e.decay) << e.name;
    // Decayed parameters occupy [0, decay_end), the others [decay_end, total).
    EXPECT_EQ(spec->offset < layout.decay_end(), e.decay) << e.name;
  }
  EXPECT_EQ(layout.find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(layout.specs().size(), 2u + 2 * 12 + 2);

  // Non-overlapping, aligned, inside the allocation.
  std::vector<const ParamSpec*> by_offset;
  for (const ParamSpec& s : layout.specs()) by_offset.push_back(&s);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 0; i < by_offset.size(); ++i) {
    EXPECT_EQ(by_offset[i]->offset % 16, 0);
    const int64_t end = by_offset[i]->offset + by_offset[i]->numel;
    EXPECT_LE(end, i + 1 < by_offset.size() ? by_offset[i + 1]->offset : layout.total());
  }

  const int64_t L = 2, maxT = 8;
  const int64_t per_layer = 4 * C + (3 * C * C + 3 * C) + (C * C + C) + (F * C + F) + (C * F + C);
  EXPECT_EQ(layout.num_parameters(), Vp * C + maxT * C + L * per_layer + 2 * C);
  // PaLM's N: the tied head once, the linear weights; not positions, norms or biases.
  EXPECT_EQ(layout.num_matmul_parameters(), Vp * C + L * (3 * C * C + C * C + 2 * F * C));
}

TEST(ParamLayout, LlamaHasNoBiasesAndAnUntiedHead) {
  auto be = make_cpu_backend(2);
  auto model = make_model(small_config(true), be.get(), 2, 6);
  ASSERT_TRUE(model);
  const ParamLayout& layout = model->layout();
  const int64_t C = 16, F = 24, HD = 4, NH = 4, KVH = 2, Vp = 48;
  EXPECT_EQ(layout.find("wpe"), nullptr);
  ASSERT_NE(layout.find("lm_head.weight"), nullptr);
  EXPECT_TRUE(layout.find("lm_head.weight")->weight_decay);
  EXPECT_EQ(layout.find("lm_head.weight")->shape, (std::vector<int64_t>{Vp, C}));
  EXPECT_EQ(layout.find("h.0.attn.qkv.weight")->shape,
            (std::vector<int64_t>{(NH + 2 * KVH) * HD, C}));
  EXPECT_EQ(layout.find("h.1.mlp.fc.weight")->shape, (std::vector<int64_t>{2 * F, C}));
  EXPECT_FALSE(layout.find("lnf.weight")->weight_decay);
  for (const ParamSpec& s : layout.specs()) {
    EXPECT_EQ(s.name.find(".bias"), std::string::npos) << s.name;
  }
  // The untied input embedding is a lookup, not a matmul.
  EXPECT_FALSE(layout.find("wte")->matmul);
  EXPECT_TRUE(layout.find("lm_head.weight")->matmul);
}

// FSDP inside pipeline stages: the first stage's unit 0 holds the tied table and the positions,
// the last stage's the table and the final norm. The table comes first, in a head of its own
// padded to 16 × shards, so fsdp rank f of both ends owns the same elements of it; a layout
// without pipeline-shared parameters keeps its declaration order and no head.
TEST(ParamLayout, PipelineSharedTablesGetTheSameHeadOnBothEnds) {
  auto spec = [](const char* name, std::vector<int64_t> shape) {
    ParamSpec s;
    s.name = name;
    s.shape = std::move(shape);
    return s;
  };
  auto end = [&](bool first, bool shared) {
    ParamLayout layout;
    layout.set_unit(0);
    if (!first) layout.add(spec("lnf.weight", {5}));
    ParamSpec table = spec("wte", {7, 3});
    if (shared) table.pipeline_stages = {0, 3};
    layout.add(table);
    if (first) layout.add(spec("wpe", {9, 3}));
    layout.set_unit(1);
    layout.add(spec("h.0.w", {4, 4}));
    layout.finalize(4);
    return layout;
  };
  const ParamLayout a = end(true, true), b = end(false, true);
  ASSERT_EQ(a.units().size(), 2u);
  ASSERT_EQ(b.units().size(), 2u);
  EXPECT_EQ(a.units()[0].head, 64);  // 21 elements padded to 16 × 4
  EXPECT_EQ(b.units()[0].head, 64);
  EXPECT_EQ(a.find("wte")->offset, 0);
  EXPECT_EQ(b.find("wte")->offset, 0);
  EXPECT_EQ(a.find("wpe")->offset, 64);
  EXPECT_EQ(b.find("lnf.weight")->offset, 64);
  EXPECT_EQ(a.units()[0].size, 128);
  EXPECT_EQ(a.units()[1].head, 0);
  // Without the flag (no pipeline): declaration order, no head.
  const ParamLayout plain = end(false, false);
  EXPECT_EQ(plain.units()[0].head, 0);
  EXPECT_EQ(plain.find("lnf.weight")->offset, 0);
  EXPECT_EQ(plain.find("wte")->offset, 16);
  EXPECT_EQ(plain.units()[0].size, 64);
}

// T5 on a pipeline: a stage's unit 0 can hold several parameters other stages hold too (the
// encoder's bias table, the token table), each held by its own set of stages. Each is a block of
// its own, padded to 16 × shards, so fsdp rank f of every holder owns the same elements of it
// whatever else the holders' unit 0 has; the rest of the unit is one more block.
TEST(ParamLayout, EachPipelineSharedParameterIsABlockOfItsOwn) {
  ParamLayout layout;
  auto add = [&](const char* name, std::vector<int64_t> shape) {
    ParamSpec s;
    s.name = name;
    s.shape = std::move(shape);
    layout.add(s);
  };
  layout.set_unit(0);
  add("wte", {7, 3});
  add("enc.rel_bias.weight", {3, 2});
  add("enc.lnf.weight", {5});
  layout.set_unit(1);
  add("enc.h.3.w", {4, 4});
  layout.share("wte", {0, 3});
  layout.share("enc.rel_bias.weight", {0, 1, 2, 3});
  layout.finalize(4);
  EXPECT_EQ(layout.find("wte")->offset, 0);
  EXPECT_EQ(layout.find("enc.rel_bias.weight")->offset, 64);  // 21 elements padded to 16 × 4
  EXPECT_EQ(layout.find("enc.lnf.weight")->offset, 128);      // 6 padded to 64: its own block
  EXPECT_EQ(layout.units()[0].head, 128);
  const std::vector<ParamLayout::Unit> blocks = layout.blocks(0);
  ASSERT_EQ(blocks.size(), 3u);
  EXPECT_EQ(blocks[0].begin, 0);
  EXPECT_EQ(blocks[0].size, 64);
  EXPECT_EQ(blocks[1].begin, 64);
  EXPECT_EQ(blocks[1].size, 64);
  EXPECT_EQ(blocks[2].begin, 128);
  EXPECT_EQ(blocks[2].size, 64);
  EXPECT_EQ(layout.block_of(*layout.find("enc.lnf.weight")).begin, 128);
  EXPECT_EQ(layout.block_of(*layout.find("enc.rel_bias.weight")).size, 64);
  ASSERT_EQ(layout.blocks(1).size(), 1u);
  EXPECT_EQ(layout.blocks(1)[0].begin, 192);
}

// T5's stages cut its E + D layers as one sequence balanced by FLOPs (docs/sharding.md "T5 on a
// pipeline"): tiny-t5 with 6 decoder layers on 3 stages, where an encoder layer (64 positions)
// costs about three decoder layers (16 positions), is encoder layer 0 | encoder layer 1 and decoder
// layers 0-1 | decoder layers 2-5. The middle stage ends the encoder and embeds the decoder's
// tokens; each table is shared by exactly the stages that use it.
TEST(EncoderDecoderStages, LayersAreSplitByCostAndTablesLiveWhereTheyAreUsed) {
  StatusOr<Config> c = make_experiment("tiny-t5");
  ASSERT_TRUE(c.ok());
  c->model.num_decoder_layers = 6;
  ModelOptions options;
  options.encoder_seq_len = c->train.encoder_seq_len;
  const std::vector<std::vector<std::string>> want = {
      {"enc.h.0", "enc.rel_bias.weight", "wte"},
      {"dec.h.0", "dec.h.1", "dec.rel_bias.weight", "enc.h.1", "enc.lnf.weight",
       "enc.rel_bias.weight", "wte"},
      {"dec.h.2", "dec.h.3", "dec.h.4", "dec.h.5", "dec.lnf.weight", "dec.rel_bias.weight",
       "lm_head.weight"}};
  const std::map<std::string, std::vector<int>> shared = {
      {"wte", {0, 1}}, {"enc.rel_bias.weight", {0, 1}}, {"dec.rel_bias.weight", {1, 2}}};
  for (int s = 0; s < 3; ++s) {
    ModelParallel par;
    par.pipeline_size = 3;
    par.pipeline_rank = s;
    StatusOr<std::unique_ptr<Model>> m =
        Model::plan(c->model, 500, 1, c->train.seq_len, par, options);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    std::set<std::string> held;
    for (const ParamSpec& spec : (*m)->layout().specs()) {
      // A layer's parameters by their layer ("enc.h.1"), the ends by name.
      const bool layer = spec.name.starts_with("enc.h.") || spec.name.starts_with("dec.h.");
      held.insert(layer ? spec.name.substr(0, spec.name.find('.', 6)) : spec.name);
      const auto it = shared.find(spec.name);
      EXPECT_EQ(spec.pipeline_stages, it == shared.end() ? std::vector<int>{} : it->second)
          << "stage " << s << ": " << spec.name;
    }
    EXPECT_EQ(std::vector<std::string>(held.begin(), held.end()), want[static_cast<size_t>(s)])
        << "stage " << s;
  }
}

TEST(Model, InitFollowsTheParameterNamesDoc) {
  auto be = make_cpu_backend(2);
  ModelConfig config = small_config(false);
  config.model_dim = 64;
  config.hidden_dim = 128;
  config.num_layers = 8;
  config.init_std = 0.02;
  auto model = make_model(config, be.get(), 1, 4, 500);
  ASSERT_TRUE(model);
  model->init(1234);
  auto stddev = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += static_cast<double>(x) * x;
    return std::sqrt(s / static_cast<double>(v.size()));
  };
  EXPECT_NEAR(stddev(param(*model, "wte")), 0.02, 0.001);
  EXPECT_NEAR(stddev(param(*model, "h.3.mlp.fc.weight")), 0.02, 0.001);
  EXPECT_NEAR(stddev(param(*model, "h.3.attn.proj.weight")), 0.02 / 4.0, 0.0005);
  EXPECT_NEAR(stddev(param(*model, "h.3.mlp.proj.weight")), 0.02 / 4.0, 0.0005);
  for (float x : param(*model, "h.2.ln1.weight")) ASSERT_EQ(x, 1.f);
  for (float x : param(*model, "h.2.attn.qkv.bias")) ASSERT_EQ(x, 0.f);

  // Deterministic per seed and per name: another model (other layer count, batch, threads)
  // gets the same values for the parameters it shares.
  auto be1 = make_cpu_backend(1);
  config.num_layers = 4;
  auto other = make_model(config, be1.get(), 3, 2, 500);
  ASSERT_TRUE(other);
  other->init(1234);
  EXPECT_EQ(param(*other, "wte"), param(*model, "wte"));
  EXPECT_EQ(param(*other, "h.2.mlp.fc.weight"), param(*model, "h.2.mlp.fc.weight"));
  other->init(1235);
  EXPECT_NE(param(*other, "wte"), param(*model, "wte"));
}

TEST(Model, RejectsShapesItCannotRun) {
  auto be = make_cpu_backend(2);
  ModelConfig config = small_config(false);
  EXPECT_EQ(Model::create(config, kVocab, 1, 9, be.get()).status().code(),
            StatusCode::kInvalidArgument);  // longer than the position table
  config.vocab_size = 32;
  EXPECT_EQ(Model::create(config, kVocab, 1, 4, be.get()).status().code(),
            StatusCode::kInvalidArgument);  // table smaller than the vocabulary
  config = small_config(false);
  config.num_heads = 3;
  EXPECT_EQ(Model::create(config, kVocab, 1, 4, be.get()).status().code(),
            StatusCode::kInvalidArgument);
}

// Random values everywhere (norm weights around 1), so no gradient is special.
void randomize(Model* model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (const ParamSpec& spec : model->layout().specs()) {
    const bool norm_weight = spec.init == ParamInit::kOnes;
    std::vector<float> v(static_cast<size_t>(spec.numel));
    for (float& x : v) x = norm_weight ? 1.f + 0.2f * normal(rng) : 0.3f * normal(rng);
    ASSERT_TRUE(model->set_parameter(spec.name, v).ok());
  }
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

Batch random_batch(uint64_t seed, int64_t n, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
  Batch b;
  for (int64_t i = 0; i < n; ++i) {
    b.tokens.push_back(tok(rng));
    b.targets.push_back(tok(rng));
  }
  b.targets[3] = -1;  // an ignored target
  return b;
}

// Central differences for the largest gradients and a few random entries of every tensor. With
// config.dropout > 0 the rows carry ids and a seed, so every pass drops the same elements.
void check_gradients(const ModelConfig& config, const ModelOptions& options = {}) {
  auto be = make_cpu_backend(2);
  const int64_t B = 2, T = 6;
  auto model = make_model(config, be.get(), B, T, kVocab, options);
  ASSERT_TRUE(model);
  randomize(model.get(), 7);
  const Batch data = random_batch(11, B * T, kVocab);
  const std::vector<uint64_t> row_ids = {5, 9};
  ::ax::train::Batch batch{.tokens = data.tokens, .targets = data.targets};
  if (config.dropout > 0) {
    batch.row_ids = row_ids;
    batch.dropout_seed = 0x5eed;
  }
  model->zero_grad();
  model->forward(batch);
  model->backward(1.f);

  std::mt19937_64 rng(3);
  const float h = 1e-2f;
  int checked = 0;
  for (const ParamSpec& spec : model->layout().specs()) {
    const std::vector<float> g = grad(*model, spec.name);
    std::vector<float> values = param(*model, spec.name);
    std::vector<size_t> order(g.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 3, order.end(),
                      [&](size_t a, size_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    std::vector<size_t> picks(order.begin(), order.begin() + 3);
    for (int i = 0; i < 2; ++i) picks.push_back(rng() % g.size());
    for (size_t i : picks) {
      const float saved = values[i];
      values[i] = saved + h;
      ASSERT_TRUE(model->set_parameter(spec.name, values).ok());
      const double up = model->forward(batch);
      values[i] = saved - h;
      ASSERT_TRUE(model->set_parameter(spec.name, values).ok());
      const double down = model->forward(batch);
      values[i] = saved;
      ASSERT_TRUE(model->set_parameter(spec.name, values).ok());
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(g[i], numeric, 5e-4 + 2e-2 * std::fabs(numeric)) << spec.name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, 5 * static_cast<int>(model->layout().specs().size()));
}

TEST(ModelGradients, GptMatchesFiniteDifferences) { check_gradients(small_config(false)); }
TEST(ModelGradients, LlamaWithGqaMatchesFiniteDifferences) { check_gradients(small_config(true)); }
// Dropout on the embeddings, the attention output, the MLP's hidden units and output (each
// position its own mask): the gradient through the masks the forward pass drew.
TEST(ModelGradients, GptAndLlamaWithDropoutMatchFiniteDifferences) {
  for (bool llama : {false, true}) {
    ModelConfig config = small_config(llama);
    config.dropout = 0.1;
    check_gradients(config);
    // The masks drop something: rows with ids (training) lose differently from rows without.
    auto be = make_cpu_backend(1);
    auto model = make_model(config, be.get(), 2, 6);
    ASSERT_TRUE(model);
    randomize(model.get(), 7);
    const Batch data = random_batch(11, 12, kVocab);
    const std::vector<uint64_t> ids = {5, 9};
    const float kept = model->forward(data.tokens, data.targets);
    const float dropped = model->forward(
        {.tokens = data.tokens, .targets = data.targets, .row_ids = ids, .dropout_seed = 0x5eed});
    EXPECT_GT(std::abs(dropped - kept), 1e-3f * kept) << (llama ? "llama" : "gpt");
  }
}
// T5 v1.1's gated-GELU MLP (model.activation=geglu): a packed fc of 2F rows, as SwiGLU's.
TEST(ModelGradients, GegluMlpMatchesFiniteDifferences) {
  ModelConfig config = small_config(true);
  config.activation = Activation::kGeglu;
  check_gradients(config);
}
// T5x's z-loss (train.z_loss), large enough that its gradient is a good part of the whole.
TEST(ModelGradients, ZLossMatchesFiniteDifferences) {
  check_gradients(small_config(false), {.z_loss = 0.1f});
}

// The z-loss adds z · lse² per non-ignored target to the mean loss, lse = log Σ exp of the
// target's logits (read from the model without the term: the same parameters give the same
// logits); z = 0 gives the bits of a model without the option.
TEST(Model, ZLossAddsTheSquaredLogSumExpOfEachTarget) {
  auto be = make_cpu_backend(2);
  const int64_t B = 2, T = 6;
  const Batch batch = random_batch(21, B * T, kVocab);
  const float z = 0.1f;
  auto plain = make_model(small_config(true), be.get(), B, T);
  auto zero = make_model(small_config(true), be.get(), B, T, kVocab, {.z_loss = 0.0f});
  auto with = make_model(small_config(true), be.get(), B, T, kVocab, {.z_loss = z});
  ASSERT_TRUE(plain && zero && with);
  for (Model* m : {plain.get(), zero.get(), with.get()}) randomize(m, 5);
  const float with_loss = with->forward(batch.tokens, batch.targets);
  const float zero_loss = zero->forward(batch.tokens, batch.targets);
  const float plain_loss = plain->forward(batch.tokens, batch.targets);
  EXPECT_EQ(zero_loss, plain_loss);
  double sum_sq = 0;
  int count = 0;
  for (int64_t n = 0; n < B * T; ++n) {
    if (batch.targets[n] < 0) continue;
    const std::vector<float> row = plain->logits(n / T, n % T);
    double m = -1e300, s = 0;
    for (float x : row) m = std::max(m, static_cast<double>(x));
    for (float x : row) s += std::exp(x - m);
    const double lse = m + std::log(s);
    sum_sq += lse * lse;
    ++count;
  }
  const double want = plain_loss + z * sum_sq / count;
  EXPECT_GT(z * sum_sq / count, 1e-2) << "the term must be visible in the loss";
  EXPECT_NEAR(with_loss, want, 1e-5 * want);
}

TEST(Model, PositionsAreCausal) {
  for (bool llama : {false, true}) {
    auto be = make_cpu_backend(2);
    auto model = make_model(small_config(llama), be.get(), 1, 6);
    ASSERT_TRUE(model);
    model->init(5);
    std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};
    model->forward(tokens, {});
    const std::vector<float> at2 = model->logits(0, 2), at4 = model->logits(0, 4);
    EXPECT_EQ(at2.size(), static_cast<size_t>(kRows));
    tokens[4] = 9;
    model->forward(tokens, {});
    EXPECT_EQ(model->logits(0, 2), at2) << "llama=" << llama;  // earlier positions unaffected
    EXPECT_NE(model->logits(0, 4), at4) << "llama=" << llama;
    if (!llama) {
      // With learned positions the same context at another position gives other logits.
      std::vector<int32_t> same(6, 7);
      model->forward(same, {});
      EXPECT_NE(model->logits(0, 1), model->logits(0, 5));
    }
  }
}

// The gradients of a global batch of 8 are the same whether it runs as 1x8, 2x4 or 4x2.
TEST(GradientAccumulation, MicroBatchesGiveTheBatchMean) {
  auto be = make_cpu_backend(2);
  ModelConfig config = small_config(true);
  const int64_t T = 8, rows = 8;
  const std::vector<uint32_t> windows = testing::random_windows(21, rows, T, kVocab);
  std::vector<double> losses;
  std::vector<std::unique_ptr<Model>> models;
  for (int64_t micro : {8, 4, 2}) {
    models.push_back(make_model(config, be.get(), micro, T));
    ASSERT_TRUE(models.back());
    models.back()->init(99);
    losses.push_back(forward_backward(models.back().get(), windows, rows));
  }
  for (size_t m = 1; m < models.size(); ++m) {
    EXPECT_NEAR(losses[m], losses[0], 1e-6 * losses[0]);
    for (const ParamSpec& spec : models[0]->layout().specs()) {
      const std::vector<float> a = grad(*models[0], spec.name);
      const std::vector<float> b = grad(*models[m], spec.name);
      double scale = 0, diff = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
        diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
      }
      EXPECT_LE(diff, 1e-6 * scale) << spec.name << " micro-batches of " << models[m]->batch();
    }
  }
}

// Activation recomputation per layer gives the same loss and gradients bit for bit (the same ops
// on the same values) with less activation memory, for both families and 3 layers (so that a
// layer in the middle is recomputed too).
TEST(Recompute, SameLossAndGradientsWithLessMemory) {
  auto be = make_cpu_backend(2);
  for (bool llama : {false, true}) {
    ModelConfig config = small_config(llama);
    config.num_layers = 3;
    const int64_t T = 8, rows = 4;
    const std::vector<uint32_t> windows = testing::random_windows(5, rows, T, kVocab);
    auto plain = Model::create(config, kVocab, rows, T, be.get());
    auto recomputed = Model::create(config, kVocab, rows, T, be.get(), {}, {true});
    ASSERT_TRUE(plain.ok() && recomputed.ok());
    EXPECT_LT((*recomputed)->activation_bytes(), (*plain)->activation_bytes());
    (*plain)->init(7);
    (*recomputed)->init(7);
    const double a = forward_backward(plain->get(), windows, rows);
    const double b = forward_backward(recomputed->get(), windows, rows);
    EXPECT_EQ(a, b) << (llama ? "llama" : "gpt");
    for (const ParamSpec& spec : (*plain)->layout().specs()) {
      EXPECT_EQ(grad(**plain, spec.name), grad(**recomputed, spec.name)) << spec.name;
    }
  }
}

}  // namespace
}  // namespace ax::train
