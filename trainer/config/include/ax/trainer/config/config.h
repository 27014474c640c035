// Experiment configuration: a named experiment plus `--set key=value` overrides. Keys are grouped
// (model.*, optim.*, train.*, data.*, mesh.*); the Pax knobs PERCORE_BATCH_SIZE,
// NUM_MICROBATCHES, ICI_MESH_SHAPE, DCN_MESH_SHAPE, MAX_STEPS and FPROP_DTYPE are accepted by
// those names.
// An unknown key or a bad value is an error naming the key and the allowed values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ax/common/status.h"

namespace ax::train {

// The typed choices of a model config; each enum's values in the order of its names (as config
// keys and config.json spell them: name_of()).
enum class ModelFamily : uint8_t { kGpt, kLlama, kT5 };            // gpt | llama | t5
enum class NormKind : uint8_t { kLayerNorm, kRmsNorm };            // layernorm | rmsnorm
enum class Activation : uint8_t { kGelu, kSwiglu, kGeglu };        // gelu | swiglu | geglu
enum class PositionKind : uint8_t { kLearned, kRope, kRelative };  // learned | rope | relative
enum class RopeScalingKind : uint8_t { kNone, kLlama3 };           // none | llama3
std::string_view name_of(ModelFamily v);
std::string_view name_of(NormKind v);
std::string_view name_of(Activation v);
std::string_view name_of(PositionKind v);
std::string_view name_of(RopeScalingKind v);

struct ModelConfig {
  ModelFamily family = ModelFamily::kGpt;
  int64_t num_layers = 2;          // the encoder's layers for t5
  int64_t num_decoder_layers = 0;  // t5: the decoder's layers (0 = num_layers)
  int64_t model_dim = 64;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 4;      // < num_heads: grouped-query attention
  int64_t kv_channels = 0;       // per-head dimension (T5's d_kv); 0 = model_dim / num_heads
  int64_t hidden_dim = 256;      // MLP inner width (per branch of a gated MLP: swiglu, geglu)
  int64_t vocab_size = 0;        // 0: the tokenizer's size rounded up to vocab_multiple
  int64_t vocab_multiple = 128;  // padding of the embedding table
  int64_t max_seq_len = 256;     // learned position table size (gpt)
  NormKind norm = NormKind::kLayerNorm;
  Activation activation = Activation::kGelu;
  PositionKind position = PositionKind::kLearned;
  double rope_theta = 10000.0;
  // RoPE's frequency scaling for a longer context: llama3 is Llama 3.1's (Hugging Face's
  // rope_scaling {"rope_type": "llama3", ...}); the four numbers below are its, read with llama3
  // only, their defaults Llama 3.1's.
  RopeScalingKind rope_scaling = RopeScalingKind::kNone;
  double rope_scaling_factor = 8;
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int64_t rope_original_max_positions = 8192;
  int64_t relative_buckets = 32;  // T5's relative position bias (position = relative)
  int64_t relative_max_distance = 128;
  double dropout = 0;
  bool tied_embeddings = true;
  bool bias = true;  // biases in linear layers and norms
  double norm_eps = 1e-5;
  double init_std = 0.02;  // residual projections get init_std / sqrt(2 * num_layers)

  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : model_dim / num_heads; }
  int64_t decoder_layers() const {
    return num_decoder_layers > 0 ? num_decoder_layers : num_layers;
  }
};

struct OptimConfig {
  double lr = 6e-4;
  int64_t warmup_steps = 100;
  std::string schedule = "cosine";  // after warmup: cosine | linear (T5x's linear_decay)
  int64_t decay_steps = 0;          // the decay ends here (0: train.max_steps)
  double min_lr_ratio = 0.1;        // lr at the end of the decay, as a fraction of lr
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // not applied to norms and biases
  double grad_clip = 1.0;     // global-norm clipping; 0 = off
};

struct TrainConfig {
  int64_t max_steps = 1000;
  double percore_batch_size = 8;  // GLOBAL_BATCH = PERCORE_BATCH_SIZE × devices (Pax)
  int64_t num_microbatches = 1;   // gradient accumulation: a step is this many micro-batches
  int64_t global_batch = 0;       // sequences per step; 0 = PERCORE_BATCH_SIZE × devices
  double comm_timeout_s = 300;    // a collective or a bootstrap step that takes longer fails
  bool fsdp_prefetch = true;      // gather the next FSDP layer while the current one computes
  // Activations and compute weights: auto (the device's own: bfloat16 on CUDA, float32 on the
  // CPU) | bfloat16 | float32 (Pax's FPROP_DTYPE). Masters and optimizer state stay float32.
  std::string precision = "auto";
  // With float32 activations on CUDA, GEMMs may use TF32 tensor cores (inputs rounded to 10-bit
  // mantissas; PyTorch's allow_tf32). Off: f32 GEMMs multiply in full f32.
  bool allow_tf32 = false;
  std::string recompute = "none";  // none | layer: activation recomputation per layer
  // Pipeline parallelism (a mesh with pipeline > 1): gpipe | 1f1b | interleaved, over the step's
  // num_microbatches micro-batches (docs/sharding.md "Pipeline parallelism").
  std::string pipeline_schedule = "1f1b";
  // interleaved: model chunks per stage (Megatron's virtual pipeline stages); 1 otherwise.
  int64_t pipeline_virtual_stages = 1;
  // A pipelined run: every rank writes its stage's timeline of this step (0: none) to
  // RUN_DIR/pipeline_trace/step_<N>/ for `ax-train timeline` (docs/sharding.md "Seeing the
  // bubble").
  int64_t pipeline_trace_step = 0;
  int64_t seq_len = 256;        // decoder tokens per sequence (T5x's DEC_SL for t5)
  int64_t encoder_seq_len = 0;  // t5: encoder tokens per sequence (ENC_SL)
  double z_loss = 0;            // T5x's z-loss: z_loss · (log Σ exp logits)² per token
  int64_t pack_examples = 1;    // t5: span-corruption examples packed per row (segment ids)
  bool pack_seq2seq = true;     // seq2seq shards: examples packed greedily per row (segments)
  uint64_t seed = 1234;
  int64_t log_every = 10;
  // Stragglers (docs/reliability.md): at every progress line the ranks gather their data,
  // compute and collective-wait times per step; a rank whose data or compute time exceeds the
  // median of the ranks by more than straggler_margin (a fraction of the median) and by more
  // than straggler_min_ms is named on the line. margin 0 = no alarms (the figures stay).
  double straggler_margin = 0.2;
  double straggler_min_ms = 20;
  // For tests only: rank debug_slow_rank sleeps debug_slow_ms in debug_slow_phase (compute |
  // data) of every step (debug_slow_step 0) or of step debug_slow_step only. -1 = off.
  int64_t debug_slow_rank = -1;
  double debug_slow_ms = 0;
  std::string debug_slow_phase = "compute";
  int64_t debug_slow_step = 0;
  int64_t eval_every = 100;  // 0 = never
  int64_t eval_batches = 8;
  // Task evaluation after each validation (docs/evaluation.md): none | mnli | squad | lambada,
  // on eval_task_data (`ax-data convert-task` output), its first eval_task_examples lines (0 =
  // all), decoding at most eval_task_max_new_tokens tokens (0 = the task's default).
  std::string eval_task = "none";
  std::string eval_task_data;
  int64_t eval_task_examples = 0;
  int64_t eval_task_max_new_tokens = 0;
  int64_t checkpoint_every = 500;  // 0 = only at the end
  int64_t keep_checkpoints = 3;
  // Write checkpoints on a background thread from a host copy of the state while training goes
  // on (docs/trainer.md "Checkpoints"); false = the loop waits for each write.
  bool checkpoint_async = true;
  // fallback | refuse: when the newest checkpoint fails verification on resume, move it aside
  // and resume from the newest valid one, or stop as before (docs/trainer.md "Resume").
  std::string resume_on_corrupt = "fallback";
  // Weights only, from an ax checkpoint or a Hugging Face directory (--init-from); used when the
  // run directory has no checkpoint of its own. The model config comes from there.
  std::string init_from;
  bool init_from_keep_step = false;  // continue the step count of an ax checkpoint (T5x's FT)
};

struct DataConfig {
  std::string train_dir;       // shard set for training (--data)
  std::string validation_dir;  // held-out shard set ("" = <data>/../validation if present)
  std::string tokenizer;       // SentencePiece model (--tokenizer)
};

struct MeshConfig {
  std::string ici = "auto";  // ICI_MESH_SHAPE, e.g. "1,8,1" (data,fsdp,tensor)
  std::string dcn = "auto";  // DCN_MESH_SHAPE
};

struct Config {
  std::string experiment;
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
  DataConfig data;
  MeshConfig mesh;
};

// Names of every registered experiment (Pile126M, GPT5B, GPT175B, fuji-1B-v1 ..., tiny-gpt, ...).
std::vector<std::string> experiment_names();
// The named experiment's config; NotFound lists the known names.
StatusOr<Config> make_experiment(const std::string& name);
// Applies one "key=value" (or key, value). InvalidArgument for an unknown key (with the
// closest known keys) or a value of the wrong type / outside its allowed set.
Status apply_override(Config* config, const std::string& key, const std::string& value);
Status apply_override(Config* config, const std::string& assignment);
// Cross-field checks (heads divide model_dim, kv heads divide heads, rope needs even head_dim,
// seq_len <= max_seq_len for learned positions, ...), each error naming the keys.
Status validate(const Config& config);

// The resolved config as JSON text (saved as config.json in the run directory and in every
// checkpoint) and back. from_json rejects unknown keys the same way apply_override does.
std::string to_json(const Config& config);
StatusOr<Config> from_json(const std::string& json);
// Human-readable "key = value" lines, grouped, for the start of a run.
std::string to_text(const Config& config);
// Every key with its type and description, for `ax-train --help-config`.
std::string describe_keys();

}  // namespace ax::train
