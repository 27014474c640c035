// The experiment registry: the Pax GPT and AXLearn Fuji recipes (numbers from
// /work/shared/reference/models-and-numbers.md §3), plus small configs for tests, the demo and
// the CPU benchmark.
#include <cstdint>
#include <string>
#include <vector>

#include "ax/trainer/config/config.h"

namespace ax::train {
namespace {

// ---- Pax GPT (paxml/contrib/gpu/scripts_gpu/configs.py) ---------------------------------------

// What GPT126M, GPT5B and GPT175B share: pre-LN GPT with LayerNorm, tanh-GELU, learned
// positions, tied embeddings, biases; Adam 0.9/0.95/1e-8, wd 0.1, clip 1.0, cosine to 0.1.
// The vocabulary comes from the tokenizer padded to 128: Pax's 50304 for its 50257-piece model
// (GPT175B used 50257 unpadded; padding only adds rows that are never the target).
Config pax_gpt(int64_t layers, int64_t dim, int64_t heads, int64_t hidden) {
  Config c;
  ModelConfig& m = c.model;
  m.family = ModelFamily::kGpt;
  m.num_layers = layers;
  m.model_dim = dim;
  m.num_heads = heads;
  m.num_kv_heads = heads;
  m.hidden_dim = hidden;
  m.vocab_size = 0;
  m.vocab_multiple = 128;
  m.max_seq_len = 2048;
  m.norm = NormKind::kLayerNorm;
  m.activation = Activation::kGelu;
  m.position = PositionKind::kLearned;
  m.tied_embeddings = true;
  m.bias = true;
  m.norm_eps = 1e-5;
  c.optim.beta1 = 0.9;
  c.optim.beta2 = 0.95;
  c.optim.eps = 1e-8;
  c.optim.weight_decay = 0.1;
  c.optim.grad_clip = 1.0;
  c.optim.min_lr_ratio = 0.1;
  c.train.seq_len = 2048;
  c.train.num_microbatches = 1;
  c.train.log_every = 100;
  c.train.eval_every = 1000;
  c.train.checkpoint_every = 1000;
  return c;
}

Config pile_126m() {
  Config c = pax_gpt(12, 768, 12, 3072);
  c.model.init_std = 0.023;
  c.optim.lr = 6e-4;
  c.optim.warmup_steps = 636;
  c.optim.decay_steps = 500000;
  c.train.max_steps = 600000;
  c.train.percore_batch_size = 4;  // x 64 GPUs = Pax's global batch of 256
  // "126M trained with pure data parallel": every device on the data axis.
  c.mesh.ici = "-1,1,1";
  c.mesh.dcn = "-1,1,1";
  return c;
}

Config gpt_5b() {
  Config c = pax_gpt(24, 4096, 32, 16384);
  c.model.init_std = 0.01;
  c.optim.lr = 1.6e-4;
  c.optim.warmup_steps = 115;
  c.optim.decay_steps = 62500;
  c.train.max_steps = 75000;
  c.train.percore_batch_size = 8;
  // Pax: ICI [1,8,1], DCN [1,32,1], i.e. FSDP over all 256 GPUs; -1 keeps that for any count.
  c.mesh.ici = "1,-1,1";
  c.mesh.dcn = "1,-1,1";
  return c;
}

Config gpt_175b() {
  Config c = pax_gpt(96, 12288, 96, 49152);
  c.model.init_std = 0.006;
  c.optim.lr = 2e-5;  // as configs.py has it (its comment: "steps for BS1.5k")
  c.optim.warmup_steps = 265;
  c.optim.decay_steps = 108600;
  c.train.max_steps = 75000;
  c.train.percore_batch_size = 6;
  c.mesh.ici = "1,-1,1";
  c.mesh.dcn = "1,-1,1";
  return c;
}

// ---- AXLearn Fuji (axlearn/experiments/text/gpt/fuji.py) ---------------------------------------

enum class FujiSize { k1B, k3B, k7B, k70B };
enum class FujiVersion { kV1, kV2, kV3 };

Config fuji(FujiSize size, FujiVersion version) {
  Config c;
  ModelConfig& m = c.model;
  m.family = ModelFamily::kLlama;
  m.norm = NormKind::kRmsNorm;
  m.activation = Activation::kSwiglu;
  m.position = PositionKind::kRope;
  m.bias = false;
  m.norm_eps = 1e-5;
  // The reference gives no init std for Fuji; 0.02 is the usual GPT/LLaMA choice.
  m.init_std = 0.02;
  m.vocab_multiple = 128;

  const bool v3 = version == FujiVersion::kV3;
  m.vocab_size = v3 ? 131072 : 32768;
  m.rope_theta = v3 ? 5e5 : 1e4;
  const int64_t seq = version == FujiVersion::kV1   ? 2048
                      : version == FujiVersion::kV2 ? 4096
                                                    : 8192;
  m.max_seq_len = seq;
  c.train.seq_len = seq;

  // {layers, width, heads, KV heads, FFN, tied}. The reference lists 1B and 3B only for v3;
  // their v1/v2 use the same table values (8 KV heads). 7B is MHA before v3, 70B before v2.
  struct Shape {
    int64_t layers, dim, heads, kv_heads, hidden;
    bool tied;
  };
  Shape s{};
  switch (size) {
    case FujiSize::k1B:
      s = {16, 2048, 32, 8, 8192, true};
      break;
    case FujiSize::k3B:
      s = {28, 3072, 24, 8, 8192, true};
      break;
    case FujiSize::k7B:
      s = {32, 4096, 32, v3 ? 8 : 32, 11008, true};
      break;
    case FujiSize::k70B:
      s = {80, 8192, 64, version == FujiVersion::kV1 ? 64 : 8, 28672, false};
      break;
  }
  m.num_layers = s.layers;
  m.model_dim = s.dim;
  m.num_heads = s.heads;
  m.num_kv_heads = s.kv_heads;
  m.hidden_dim = s.hidden;
  m.tied_embeddings = s.tied;

  // adamw_decoupled_learner_config: b1 0.9, b2 0.95, eps 1e-8, wd 0.1, clip 1.0, warmup 2000,
  // cosine to 0.1 over the whole run (decay_steps 0 = max_steps).
  OptimConfig& o = c.optim;
  o.lr = size == FujiSize::k70B ? 1.5e-4 : 3e-4;
  o.warmup_steps = 2000;
  o.decay_steps = 0;
  o.min_lr_ratio = 0.1;
  o.beta1 = 0.9;
  o.beta2 = 0.95;
  o.eps = 1e-8;
  o.weight_decay = 0.1;
  o.grad_clip = 1.0;

  // max_step = total tokens // tokens per batch, in fuji.py's 1024-based units: v1 1T (70B
  // 1.4T; the reference gives v1 totals only for 7B and 70B, 1B/3B take 7B's) and 4M per batch,
  // v2 2T and 4M, v3 15T and 16M.
  constexpr int64_t kT = int64_t{1} << 40;
  constexpr int64_t kM = int64_t{1} << 20;
  int64_t total = 0;
  int64_t per_batch = 0;
  switch (version) {
    case FujiVersion::kV1:
      total = size == FujiSize::k70B ? kT * 14 / 10 : kT;
      per_batch = 4 * kM;
      break;
    case FujiVersion::kV2:
      total = 2 * kT;
      per_batch = 4 * kM;
      break;
    case FujiVersion::kV3:
      total = 15 * kT;
      per_batch = 16 * kM;
      break;
  }
  c.train.max_steps = total / per_batch;

  // The global batch (v1 2048, v2 1024, v3 2048 sequences) spread over the reference's H100 runs:
  // 256 GPUs (32 p5 nodes) for 1B-7B, 512 (8x64) for 70B.
  const int64_t global_batch = version == FujiVersion::kV2 ? 1024 : 2048;
  const int64_t gpus = size == FujiSize::k70B ? 512 : 256;
  c.train.percore_batch_size = static_cast<double>(global_batch) / static_cast<double>(gpus);
  c.train.log_every = 100;
  c.train.eval_every = 5000;
  c.train.checkpoint_every = 5000;

  // fuji.py on GPUs: data=-1, fsdp=8 (FSDP inside a node, data parallel across nodes); 70B
  // fsdp=128, i.e. FSDP across nodes as well.
  c.mesh.ici = "1,-1,1";
  c.mesh.dcn = size == FujiSize::k70B ? "1,-1,1" : "-1,1,1";
  return c;
}

// ---- T5 v1.1 (T5x's GPU recipes) ---------------------------------------------------------------

enum class T5Size { kSmall, kBase, kLarge, kXl, kXxl };

// t5x/contrib/gpu/t5/t5_1_1/{size}.gin and the Pile pretraining recipe
// (examples/{size}_pile_pretrain.gin, adamw_opt.gin): shared token table, untied head, RMSNorm
// 1e-6, gated GELU, no biases, relative position bias (32 buckets, distance 128), d_kv 64,
// vocabulary 32128, z-loss 1e-4; AdamW lr 1e-4 (weight decay 0.01, clip 1.0), 10k warmup, linear
// decay to 1e-5 (decay_factor 9.0909e-7 per step: 99k steps), ENC_SL 512, DEC_SL 128, batch 2048
// (xxl 2304) over the recipe's 1M steps. Dropout (0.1 for small) is not implemented yet: 0 here.
Config t5(T5Size size) {
  struct Dims {
    int64_t dim, ff, heads, layers;
  };
  const Dims d = size == T5Size::kSmall   ? Dims{512, 1024, 6, 8}
                 : size == T5Size::kBase  ? Dims{768, 2048, 12, 12}
                 : size == T5Size::kLarge ? Dims{1024, 2816, 16, 24}
                 : size == T5Size::kXl    ? Dims{2048, 5120, 32, 24}
                                          : Dims{4096, 10240, 64, 24};
  Config c;
  ModelConfig& m = c.model;
  m.family = ModelFamily::kT5;
  m.num_layers = d.layers;
  m.num_decoder_layers = d.layers;
  m.model_dim = d.dim;
  m.num_heads = d.heads;
  m.num_kv_heads = d.heads;
  m.kv_channels = 64;
  m.hidden_dim = d.ff;
  m.vocab_size = 32128;
  m.vocab_multiple = 128;
  m.norm = NormKind::kRmsNorm;
  m.norm_eps = 1e-6;
  m.activation = Activation::kGeglu;
  m.position = PositionKind::kRelative;
  m.relative_buckets = 32;
  m.relative_max_distance = 128;
  m.tied_embeddings = false;
  m.bias = false;
  m.dropout = size == T5Size::kSmall ? 0.1 : 0.0;  // the Pile recipe: 0.1 for small only
  c.optim.lr = 1e-4;
  c.optim.warmup_steps = 10000;
  c.optim.schedule = "linear";
  // T5x's linear_decay: lr · (1 − 9.0909e-7 · (step − 10k)) reaches the 1e-5 floor (0.1 · lr)
  // after 0.9 / 9.0909e-7 = 990k decay steps, at step 1M.
  c.optim.decay_steps = 10000 + 990000;
  c.optim.min_lr_ratio = 0.1;
  c.optim.beta1 = 0.9;
  c.optim.beta2 = 0.999;
  c.optim.eps = 1e-8;
  c.optim.weight_decay = 0.01;
  c.optim.grad_clip = 1.0;
  c.train.seq_len = 128;
  c.train.encoder_seq_len = 512;
  c.train.z_loss = 1e-4;
  c.train.max_steps = 1000000;
  c.train.global_batch = size == T5Size::kXxl ? 2304 : 2048;
  c.train.log_every = 100;
  c.train.eval_every = 1000;
  c.train.checkpoint_every = 6000;
  c.train.keep_checkpoints = 2;
  return c;
}

// The t5 code paths at test size: 2+2 layers, GQA-free heads of d_kv 16, the real bucket count.
Config tiny_t5() {
  Config c = t5(T5Size::kSmall);
  ModelConfig& m = c.model;
  m.num_layers = 2;
  m.num_decoder_layers = 2;
  m.model_dim = 64;
  m.num_heads = 4;
  m.num_kv_heads = 4;
  m.kv_channels = 16;
  m.hidden_dim = 128;
  m.vocab_size = 0;
  m.dropout = 0;  // tests turn it on where they test it
  c.optim.lr = 1e-3;
  c.optim.warmup_steps = 2;
  c.optim.decay_steps = 0;
  c.train.seq_len = 16;
  c.train.encoder_seq_len = 64;
  c.train.global_batch = 0;
  c.train.max_steps = 20;
  c.train.percore_batch_size = 4;
  c.train.log_every = 1;
  c.train.eval_every = 10;
  c.train.eval_batches = 2;
  c.train.checkpoint_every = 10;
  c.train.keep_checkpoints = 3;
  return c;
}

// ---- Small configs -----------------------------------------------------------------------------

// Shared by the CPU-sized GPTs: the Pax recipe at toy scale.
Config small_gpt(int64_t layers, int64_t dim, int64_t heads, int64_t seq) {
  Config c = pax_gpt(layers, dim, heads, 4 * dim);
  c.model.max_seq_len = seq;
  c.model.init_std = 0.02;
  c.train.seq_len = seq;
  return c;
}

// Unit and integration tests: seconds per run.
Config tiny_gpt() {
  Config c = small_gpt(2, 64, 4, 64);
  c.model.vocab_size = 512;
  c.optim.lr = 1e-3;
  c.optim.warmup_steps = 2;
  c.train.max_steps = 20;
  c.train.percore_batch_size = 4;
  c.train.log_every = 1;
  c.train.eval_every = 10;
  c.train.eval_batches = 2;
  c.train.checkpoint_every = 10;
  return c;
}

// The llama code paths at test size: GQA (2 KV heads), SwiGLU, RoPE, RMSNorm, and an untied LM
// head so that the path Fuji 70B takes is tested too (tiny-gpt covers the tied one).
Config tiny_llama() {
  Config c = tiny_gpt();
  ModelConfig& m = c.model;
  m.family = ModelFamily::kLlama;
  m.num_kv_heads = 2;
  m.hidden_dim = 128;
  m.norm = NormKind::kRmsNorm;
  m.activation = Activation::kSwiglu;
  m.position = PositionKind::kRope;
  m.rope_theta = 1e4;
  m.tied_embeddings = false;
  m.bias = false;
  return c;
}

// The README's demo: a GPT that learns the KJV Bible on 2 CPU cores in a few minutes. The PyTorch
// peer trains Bench A's shape (4 layers, width 256) at 1.8-5.2k tok/s on such a machine; seq 128
// halves the attention work, and 600 steps x 8 x 128 tokens is about 0.6M tokens, most of one
// epoch of the KJV with an 8k tokenizer: enough for recognisable verses in 2-5 minutes.
Config demo_gpt() {
  Config c = small_gpt(4, 256, 4, 128);
  c.model.vocab_size = 0;  // the 8k tokenizer's size, padded to 128
  c.optim.lr = 1e-3;       // small models tolerate a higher lr than 126M's 6e-4
  c.optim.warmup_steps = 50;
  c.train.max_steps = 1500;  // about 2.5 minutes on 2 cores: 1.5M tokens, ~1.6 epochs of KJV
  c.train.percore_batch_size = 8;
  c.train.log_every = 25;
  c.train.eval_every = 250;
  c.train.eval_batches = 8;
  c.train.checkpoint_every = 500;
  return c;
}

// The CPU benchmark configs (models-and-numbers.md §4.7): the PyTorch peer's models A and B.
Config bench(int64_t layers, int64_t dim, int64_t heads) {
  Config c = small_gpt(layers, dim, heads, 256);
  c.model.vocab_size = 8192;
  c.optim.warmup_steps = 5;
  c.train.max_steps = 20;
  c.train.percore_batch_size = 8;
  c.train.log_every = 1;
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  return c;
}

// The CPU benchmark's T5s (docs/benchmarks-train.md "T5"): tiny-t5's code paths at bench-a's scale
// on a 2-core CPU: ENC_SL 256 (raw 284 tokens, 58 targets), DEC_SL 64, batch 8, vocabulary 8192
// (the top 100 ids are the sentinels), d_kv 64, T5's AdamW and linear decay over 20 steps.
Config bench_t5(int64_t layers, int64_t dim, int64_t heads, int64_t ff) {
  Config c = t5(T5Size::kSmall);
  ModelConfig& m = c.model;
  m.num_layers = layers;
  m.num_decoder_layers = layers;
  m.model_dim = dim;
  m.num_heads = heads;
  m.num_kv_heads = heads;
  m.hidden_dim = ff;
  m.vocab_size = 8192;
  m.dropout = 0;  // the PyTorch peer has none
  c.optim.lr = 1e-3;
  c.optim.warmup_steps = 5;
  c.optim.decay_steps = 0;
  c.train.seq_len = 64;
  c.train.encoder_seq_len = 256;
  c.train.global_batch = 0;
  c.train.max_steps = 20;
  c.train.percore_batch_size = 8;
  c.train.log_every = 1;
  c.train.eval_every = 0;
  c.train.checkpoint_every = 0;
  return c;
}

struct Experiment {
  const char* name;
  Config (*make)();
};

constexpr Experiment kExperiments[] = {
    {"Pile126M", pile_126m},
    {"GPT5B", gpt_5b},
    {"GPT175B", gpt_175b},
    {"fuji-1B-v1", [] { return fuji(FujiSize::k1B, FujiVersion::kV1); }},
    {"fuji-1B-v2", [] { return fuji(FujiSize::k1B, FujiVersion::kV2); }},
    {"fuji-1B-v3", [] { return fuji(FujiSize::k1B, FujiVersion::kV3); }},
    {"fuji-3B-v1", [] { return fuji(FujiSize::k3B, FujiVersion::kV1); }},
    {"fuji-3B-v2", [] { return fuji(FujiSize::k3B, FujiVersion::kV2); }},
    {"fuji-3B-v3", [] { return fuji(FujiSize::k3B, FujiVersion::kV3); }},
    {"fuji-7B-v1", [] { return fuji(FujiSize::k7B, FujiVersion::kV1); }},
    {"fuji-7B-v2", [] { return fuji(FujiSize::k7B, FujiVersion::kV2); }},
    {"fuji-7B-v3", [] { return fuji(FujiSize::k7B, FujiVersion::kV3); }},
    {"fuji-70B-v1", [] { return fuji(FujiSize::k70B, FujiVersion::kV1); }},
    {"fuji-70B-v2", [] { return fuji(FujiSize::k70B, FujiVersion::kV2); }},
    {"fuji-70B-v3", [] { return fuji(FujiSize::k70B, FujiVersion::kV3); }},
    {"tiny-gpt", tiny_gpt},
    {"tiny-llama", tiny_llama},
    {"t5-small", [] { return t5(T5Size::kSmall); }},
    {"t5-base", [] { return t5(T5Size::kBase); }},
    {"t5-large", [] { return t5(T5Size::kLarge); }},
    {"t5-xl", [] { return t5(T5Size::kXl); }},
    {"t5-xxl", [] { return t5(T5Size::kXxl); }},
    {"tiny-t5", tiny_t5},
    {"demo-gpt", demo_gpt},
    {"bench-a", [] { return bench(4, 256, 4); }},
    {"bench-b", [] { return bench(6, 384, 6); }},
    {"bench-t5-a", [] { return bench_t5(2, 256, 4, 1024); }},
    {"bench-t5-b", [] { return bench_t5(4, 384, 6, 1536); }},
};

}  // namespace

std::vector<std::string> experiment_names() {
  std::vector<std::string> names;
  for (const Experiment& e : kExperiments) names.emplace_back(e.name);
  return names;
}

StatusOr<Config> make_experiment(const std::string& name) {
  for (const Experiment& e : kExperiments) {
    if (name == e.name) {
      Config c = e.make();
      c.experiment = name;
      return c;
    }
  }
  std::string known;
  for (const Experiment& e : kExperiments) known += str_cat(known.empty() ? "" : ", ", e.name);
  return NotFound("unknown experiment '", name, "'; known: ", known);
}

}  // namespace ax::train
