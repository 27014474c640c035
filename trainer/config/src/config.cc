// The config keys, in one table: overrides, validation, JSON and the help text all walk it, so a
// key added here is settable, saved, checked and documented at once.
#include "ax/trainer/config/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <variant>

#include "ax/common/check.h"

namespace ax::train {
namespace {

// ordered_json keeps the table's order, so config.json reads like to_text().
using Json = nlohmann::ordered_json;

enum class KeyType { kInt, kFloat, kBool, kString, kEnum, kMesh };

// The range a numeric key must lie in; checked by apply_override, from_json and validate().
enum class Bound { kAny, kPositive, kNonNegative, kUnit, kUnitOpen };

// Where a key lives in Config. Readers reach it through a const_cast and never write. A typed
// enum (config.h) is reached as its one-byte value: the index of its name in KeyDef::allowed.
using FieldPtr = std::variant<int64_t*, uint64_t*, double*, bool*, std::string*, uint8_t*>;

struct KeyDef {
  std::string_view name;
  KeyType type;
  FieldPtr (*field)(Config&);
  Bound bound;
  std::vector<std::string_view> allowed;  // kEnum only
  std::string_view description;
};

struct Alias {
  std::string_view pax_name;
  std::string_view key;
};

// The knobs users of the Pax scripts already pass (rosetta-interface.md).
constexpr Alias kAliases[] = {
    {"PERCORE_BATCH_SIZE", "train.percore_batch_size"},
    {"NUM_MICROBATCHES", "train.num_microbatches"},
    {"ICI_MESH_SHAPE", "mesh.ici"},
    {"DCN_MESH_SHAPE", "mesh.dcn"},
    {"MAX_STEPS", "train.max_steps"},
    {"FPROP_DTYPE", "train.precision"},
};

#define AX_FIELD(path) [](Config& c) -> FieldPtr { return &c.path; }
#define AX_ENUM_FIELD(path)                     \
  [](Config& c) -> FieldPtr {                   \
    static_assert(sizeof(c.path) == 1);         \
    return reinterpret_cast<uint8_t*>(&c.path); \
  }

// The names of the typed enums, in the order of their values.
constexpr std::string_view kFamilyNames[] = {"gpt", "llama", "t5"};
constexpr std::string_view kNormNames[] = {"layernorm", "rmsnorm"};
constexpr std::string_view kActivationNames[] = {"gelu", "swiglu", "geglu"};
constexpr std::string_view kPositionNames[] = {"learned", "rope", "relative"};
constexpr std::string_view kRopeScalingNames[] = {"none", "llama3"};
std::vector<std::string_view> names(std::span<const std::string_view> all) {
  return {all.begin(), all.end()};
}

std::vector<KeyDef> build_key_table() {
  using K = KeyType;
  using B = Bound;
  // One key per entry reads better than clang-format's one field per line.
  // clang-format off
  std::vector<KeyDef> keys = {
      {"model.family", K::kEnum, AX_ENUM_FIELD(model.family), B::kAny, names(kFamilyNames),
       "architecture family (GPT-2/Pax style, LLaMA/Fuji style, or T5 v1.1 encoder-decoder)"},
      {"model.num_layers", K::kInt, AX_FIELD(model.num_layers), B::kPositive, {},
       "transformer blocks (t5: of the encoder)"},
      {"model.num_decoder_layers", K::kInt, AX_FIELD(model.num_decoder_layers), B::kNonNegative, {},
       "t5: decoder blocks; 0 = model.num_layers"},
      {"model.model_dim", K::kInt, AX_FIELD(model.model_dim), B::kPositive, {},
       "residual stream width"},
      {"model.num_heads", K::kInt, AX_FIELD(model.num_heads), B::kPositive, {},
       "attention (query) heads; head_dim = model_dim / num_heads"},
      {"model.num_kv_heads", K::kInt, AX_FIELD(model.num_kv_heads), B::kPositive, {},
       "key/value heads; fewer than num_heads is grouped-query attention"},
      {"model.kv_channels", K::kInt, AX_FIELD(model.kv_channels), B::kNonNegative, {},
       "dimension of each head (T5's d_kv); 0 = model_dim / num_heads"},
      {"model.hidden_dim", K::kInt, AX_FIELD(model.hidden_dim), B::kPositive, {},
       "MLP inner width (per branch of a gated MLP: swiglu, geglu)"},
      {"model.vocab_size", K::kInt, AX_FIELD(model.vocab_size), B::kNonNegative, {},
       "embedding rows; 0 = the tokenizer's size rounded up to vocab_multiple"},
      {"model.vocab_multiple", K::kInt, AX_FIELD(model.vocab_multiple), B::kPositive, {},
       "padding of the embedding table when vocab_size is 0"},
      {"model.max_seq_len", K::kInt, AX_FIELD(model.max_seq_len), B::kPositive, {},
       "rows of the learned position table"},
      {"model.norm", K::kEnum, AX_ENUM_FIELD(model.norm), B::kAny, names(kNormNames),
       "normalisation layer"},
      {"model.activation", K::kEnum, AX_ENUM_FIELD(model.activation), B::kAny,
       names(kActivationNames),
       "MLP activation: gelu (the tanh approximation), or the gated units swiglu (SiLU gate) and "
       "geglu (T5 v1.1's gated GELU, tanh approximation)"},
      {"model.position", K::kEnum, AX_ENUM_FIELD(model.position), B::kAny,
       names(kPositionNames),
       "position encoding"},
      {"model.rope_theta", K::kFloat, AX_FIELD(model.rope_theta), B::kPositive, {},
       "RoPE base frequency"},
      {"model.rope_scaling", K::kEnum, AX_ENUM_FIELD(model.rope_scaling), B::kAny,
       names(kRopeScalingNames),
       "RoPE frequency scaling for a longer context: llama3 = Llama 3.1's (Hugging Face's "
       "rope_type llama3; the rope_* keys below)"},
      {"model.rope_scaling_factor", K::kFloat, AX_FIELD(model.rope_scaling_factor), B::kPositive,
       {}, "rope_scaling=llama3: low frequencies turn this many times slower (factor)"},
      {"model.rope_low_freq_factor", K::kFloat, AX_FIELD(model.rope_low_freq_factor),
       B::kPositive, {},
       "rope_scaling=llama3: wavelengths above original_max_positions / this are scaled "
       "(low_freq_factor)"},
      {"model.rope_high_freq_factor", K::kFloat, AX_FIELD(model.rope_high_freq_factor),
       B::kPositive, {},
       "rope_scaling=llama3: wavelengths below original_max_positions / this are kept, those "
       "between blend (high_freq_factor, > low_freq_factor)"},
      {"model.rope_original_max_positions", K::kInt, AX_FIELD(model.rope_original_max_positions),
       B::kPositive, {},
       "rope_scaling=llama3: the context the model was pretrained at "
       "(original_max_position_embeddings)"},
      {"model.relative_buckets", K::kInt, AX_FIELD(model.relative_buckets), B::kPositive, {},
       "position=relative: buckets of T5's relative position bias"},
      {"model.relative_max_distance", K::kInt, AX_FIELD(model.relative_max_distance),
       B::kPositive, {}, "position=relative: distance at which the buckets end"},
      {"model.dropout", K::kFloat, AX_FIELD(model.dropout), B::kUnitOpen, {},
       "dropout probability in training (t5: T5x's sites; gpt and llama: GPT-2's and "
       "Megatron's, a mask per position; docs/t5.md \"Dropout\")"},
      {"model.tied_embeddings", K::kBool, AX_FIELD(model.tied_embeddings), B::kAny, {},
       "the LM head reuses the token embedding"},
      {"model.bias", K::kBool, AX_FIELD(model.bias), B::kAny, {},
       "biases in linear layers and norms"},
      {"model.norm_eps", K::kFloat, AX_FIELD(model.norm_eps), B::kPositive, {},
       "epsilon of the norms"},
      {"model.init_std", K::kFloat, AX_FIELD(model.init_std), B::kPositive, {},
       "std of the initial weights (residual projections / sqrt(2 num_layers))"},
      {"optim.lr", K::kFloat, AX_FIELD(optim.lr), B::kPositive, {},
       "peak learning rate"},
      {"optim.warmup_steps", K::kInt, AX_FIELD(optim.warmup_steps), B::kNonNegative, {},
       "linear warm-up from 0 to lr"},
      {"optim.schedule", K::kEnum, AX_FIELD(optim.schedule), B::kAny, {"cosine", "linear"},
       "learning-rate decay after warmup, down to lr * min_lr_ratio at decay_steps"},
      {"optim.decay_steps", K::kInt, AX_FIELD(optim.decay_steps), B::kNonNegative, {},
       "step where the cosine decay ends (0 = train.max_steps)"},
      {"optim.min_lr_ratio", K::kFloat, AX_FIELD(optim.min_lr_ratio), B::kUnit, {},
       "lr at the end of the decay, as a fraction of lr"},
      {"optim.beta1", K::kFloat, AX_FIELD(optim.beta1), B::kUnitOpen, {},
       "Adam beta1"},
      {"optim.beta2", K::kFloat, AX_FIELD(optim.beta2), B::kUnitOpen, {},
       "Adam beta2"},
      {"optim.eps", K::kFloat, AX_FIELD(optim.eps), B::kPositive, {},
       "Adam epsilon"},
      {"optim.weight_decay", K::kFloat, AX_FIELD(optim.weight_decay), B::kNonNegative, {},
       "decoupled weight decay (not on norms and biases)"},
      {"optim.grad_clip", K::kFloat, AX_FIELD(optim.grad_clip), B::kNonNegative, {},
       "global gradient-norm clip; 0 = off"},
      {"train.max_steps", K::kInt, AX_FIELD(train.max_steps), B::kPositive, {},
       "optimizer steps of the run"},
      {"train.percore_batch_size", K::kFloat, AX_FIELD(train.percore_batch_size), B::kPositive, {},
       "sequences per device per step; global batch = this x devices (fractional with TP)"},
      {"train.num_microbatches", K::kInt, AX_FIELD(train.num_microbatches), B::kPositive, {},
       "gradient accumulation: micro-batches per step"},
      {"train.global_batch", K::kInt, AX_FIELD(train.global_batch), B::kNonNegative, {},
       "sequences per step over all replicas; 0 = percore_batch_size x devices"},
      {"train.precision", K::kEnum, AX_FIELD(train.precision), B::kAny,
       {"auto", "bfloat16", "float32"},
       "activations and compute weights: auto = the device's own (bfloat16 on CUDA, float32 on "
       "the CPU); master weights and optimizer state are always float32"},
      {"train.allow_tf32", K::kBool, AX_FIELD(train.allow_tf32), B::kAny, {},
       "float32 activations on CUDA: GEMMs may use TF32 tensor cores (10-bit mantissas); "
       "no effect in bfloat16 or on the CPU"},
      {"train.recompute", K::kEnum, AX_FIELD(train.recompute), B::kAny, {"none", "layer"},
       "activation recomputation: layer = keep only each layer's output, recompute the rest"},
      {"train.pipeline_schedule", K::kEnum, AX_FIELD(train.pipeline_schedule), B::kAny,
       {"gpipe", "1f1b", "interleaved"},
       "pipeline parallelism: gpipe = every forward then every backward (activations of all "
       "micro-batches alive); 1f1b = one forward one backward (at most pipeline of them); "
       "interleaved = 1f1b over train.pipeline_virtual_stages chunks per stage (a smaller bubble, "
       "micro-batches a multiple of pipeline)"},
      {"train.pipeline_virtual_stages", K::kInt, AX_FIELD(train.pipeline_virtual_stages),
       B::kPositive, {},
       "interleaved pipeline schedule: model chunks per stage (Megatron's virtual stages; layers "
       "cut into pipeline x this many chunks, chunk c on stage c mod pipeline); no effect "
       "without a pipeline axis"},
      {"train.pipeline_trace_step", K::kInt, AX_FIELD(train.pipeline_trace_step),
       B::kNonNegative, {},
       "pipelined run: at this step (0 = none) every rank writes its stage's passes and waits to "
       "RUN_DIR/pipeline_trace/step_N/, drawn by `ax-train timeline RUN_DIR`"},
      {"train.fsdp_prefetch", K::kBool, AX_FIELD(train.fsdp_prefetch), B::kAny, {},
       "FSDP: gather the next layer on a second communicator while the current one computes"},
      {"train.comm_timeout_s", K::kFloat, AX_FIELD(train.comm_timeout_s), B::kPositive, {},
       "seconds a collective or bootstrap step may take before the run fails naming the rank"},
      {"train.seq_len", K::kInt, AX_FIELD(train.seq_len), B::kPositive, {},
       "tokens per training sequence (t5: of the decoder, DEC_SL)"},
      {"train.encoder_seq_len", K::kInt, AX_FIELD(train.encoder_seq_len), B::kNonNegative, {},
       "t5: encoder tokens per sequence (ENC_SL)"},
      {"train.z_loss", K::kFloat, AX_FIELD(train.z_loss), B::kNonNegative, {},
       "z-loss coefficient: adds z_loss * (log sum exp logits)^2 per token (T5x uses 1e-4)"},
      {"train.pack_examples", K::kInt, AX_FIELD(train.pack_examples), B::kPositive, {},
       "t5: span-corruption examples per row, kept apart by segment ids (ENC_SL / pack each)"},
      {"train.pack_seq2seq", K::kBool, AX_FIELD(train.pack_seq2seq), B::kAny, {},
       "fine-tuning on seq2seq shards: pack consecutive examples into a row while they fit, kept "
       "apart by segment ids; false = one example per row"},
      {"train.seed", K::kInt, AX_FIELD(train.seed), B::kNonNegative, {},
       "seed of the initial weights and the data order"},
      {"train.log_every", K::kInt, AX_FIELD(train.log_every), B::kPositive, {},
       "steps between progress lines and metrics.jsonl records"},
      {"train.straggler_margin", K::kFloat, AX_FIELD(train.straggler_margin), B::kNonNegative,
       {},
       "a rank whose data or compute time per step exceeds the ranks' median by more than this "
       "fraction of it (and straggler_min_ms) is named on the progress line; 0 = never"},
      {"train.straggler_min_ms", K::kFloat, AX_FIELD(train.straggler_min_ms), B::kNonNegative,
       {}, "the least excess over the median, in ms per step, that names a straggler"},
      {"train.debug_slow_rank", K::kInt, AX_FIELD(train.debug_slow_rank), B::kAny, {},
       "for tests: the rank that sleeps debug_slow_ms per step; -1 = none"},
      {"train.debug_slow_ms", K::kFloat, AX_FIELD(train.debug_slow_ms), B::kNonNegative, {},
       "for tests: how long debug_slow_rank sleeps in debug_slow_phase"},
      {"train.debug_slow_phase", K::kEnum, AX_FIELD(train.debug_slow_phase), B::kAny,
       {"compute", "data"},
       "for tests: where debug_slow_rank sleeps: compute (forward) or data (loading)"},
      {"train.debug_slow_step", K::kInt, AX_FIELD(train.debug_slow_step), B::kNonNegative, {},
       "for tests: the one step debug_slow_rank sleeps in; 0 = every step"},
      {"train.eval_every", K::kInt, AX_FIELD(train.eval_every), B::kNonNegative, {},
       "steps between validation runs; 0 = never"},
      {"train.eval_batches", K::kInt, AX_FIELD(train.eval_batches), B::kPositive, {},
       "batches per validation run"},
      {"train.eval_task", K::kEnum, AX_FIELD(train.eval_task), B::kAny,
       {"none", "mnli", "squad", "lambada"},
       "task evaluation every eval_every steps after the validation loss (whole models only: "
       "data parallel or one process)"},
      {"train.eval_task_data", K::kString, AX_FIELD(train.eval_task_data), B::kAny, {},
       "the task's examples: the jsonl of `ax-data convert-task`"},
      {"train.eval_task_examples", K::kInt, AX_FIELD(train.eval_task_examples), B::kNonNegative,
       {}, "the first N examples of eval_task_data; 0 = all"},
      {"train.eval_task_max_new_tokens", K::kInt, AX_FIELD(train.eval_task_max_new_tokens),
       B::kNonNegative, {}, "new tokens decoded per example at most; 0 = mnli 8, squad 32"},
      {"train.checkpoint_every", K::kInt, AX_FIELD(train.checkpoint_every), B::kNonNegative, {},
       "steps between checkpoints; 0 = only at the end"},
      {"train.keep_checkpoints", K::kInt, AX_FIELD(train.keep_checkpoints), B::kPositive, {},
       "newest checkpoints kept on disk"},
      {"train.checkpoint_async", K::kBool, AX_FIELD(train.checkpoint_async), B::kAny, {},
       "write checkpoints on a background thread from a host copy of the state while training "
       "goes on; false = the loop waits for each write"},
      {"train.resume_on_corrupt", K::kEnum, AX_FIELD(train.resume_on_corrupt), B::kAny,
       {"fallback", "refuse"},
       "when the newest checkpoint fails verification on resume: fallback = move it aside "
       "(step_N.corrupt-<time>) and resume from the newest valid one; refuse = stop with the error"},
      {"train.init_from", K::kString, AX_FIELD(train.init_from), B::kAny, {},
       "start from these weights (--init-from): an ax run or checkpoint directory, or a Hugging "
       "Face directory; fresh optimizer state; the model config comes from there"},
      {"train.init_from_keep_step", K::kBool, AX_FIELD(train.init_from_keep_step), B::kAny, {},
       "with an ax checkpoint in train.init_from: continue its step count (schedule, max_steps) "
       "instead of starting at step 0"},
      {"data.train_dir", K::kString, AX_FIELD(data.train_dir), B::kAny, {},
       "shard set for training (--data)"},
      {"data.validation_dir", K::kString, AX_FIELD(data.validation_dir), B::kAny, {},
       "held-out shard set (empty = <data>/../validation if present)"},
      {"data.tokenizer", K::kString, AX_FIELD(data.tokenizer), B::kAny, {},
       "tokenizer: a SentencePiece .model, a tokenizer.json or a directory (--tokenizer)"},
      {"mesh.ici", K::kMesh, AX_FIELD(mesh.ici), B::kAny, {},
       "device mesh inside a node as data,fsdp,tensor (one -1 = the rest), or auto"},
      {"mesh.dcn", K::kMesh, AX_FIELD(mesh.dcn), B::kAny, {},
       "device mesh across nodes as data,fsdp,tensor (one -1 = the rest), or auto"},
  };
  // clang-format on
  // The type column and the field's C++ type must agree; a mismatch is a bug in this table.
  Config probe;
  for (const KeyDef& key : keys) {
    FieldPtr f = key.field(probe);
    bool ok = false;
    switch (key.type) {
      case KeyType::kInt:
        ok = std::holds_alternative<int64_t*>(f) || std::holds_alternative<uint64_t*>(f);
        break;
      case KeyType::kFloat:
        ok = std::holds_alternative<double*>(f);
        break;
      case KeyType::kBool:
        ok = std::holds_alternative<bool*>(f);
        break;
      case KeyType::kString:
      case KeyType::kMesh:
        ok = std::holds_alternative<std::string*>(f);
        break;
      case KeyType::kEnum:
        ok = std::holds_alternative<std::string*>(f) || std::holds_alternative<uint8_t*>(f);
        break;
    }
    AX_CHECK(ok) << "config key " << key.name << ": type does not match its field";
    AX_CHECK((key.type == KeyType::kEnum) == !key.allowed.empty()) << key.name;
  }
  return keys;
}

#undef AX_FIELD
#undef AX_ENUM_FIELD

const std::vector<KeyDef>& key_table() {
  static const std::vector<KeyDef> keys = build_key_table();
  return keys;
}

std::string_view type_name(KeyType type) {
  switch (type) {
    case KeyType::kInt:
      return "int";
    case KeyType::kFloat:
      return "float";
    case KeyType::kBool:
      return "bool";
    case KeyType::kString:
      return "string";
    case KeyType::kEnum:
      return "enum";
    case KeyType::kMesh:
      return "mesh";
  }
  return "?";
}

std::string_view group_of(std::string_view name) {
  size_t dot = name.find('.');
  return dot == std::string_view::npos ? std::string_view() : name.substr(0, dot);
}

std::string_view leaf_of(std::string_view name) {
  size_t dot = name.find('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

// Shortest text that reads back as the same double ("0.0006", "1e-08", "500000").
std::string format_double(double v) {
  char buf[40];
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

// ---- Values ------------------------------------------------------------------------------------

std::string join(const std::vector<std::string_view>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep;
    out += items[i];
  }
  return out;
}

Status check_bound(std::string_view who, Bound bound, double v, std::string_view text) {
  const char* rule = nullptr;
  switch (bound) {
    case Bound::kAny:
      return Status::Ok();
    case Bound::kPositive:
      rule = v > 0 ? nullptr : "must be > 0";
      break;
    case Bound::kNonNegative:
      rule = v >= 0 ? nullptr : "must be >= 0";
      break;
    case Bound::kUnit:
      rule = v >= 0 && v <= 1 ? nullptr : "must be in [0, 1]";
      break;
    case Bound::kUnitOpen:
      rule = v >= 0 && v < 1 ? nullptr : "must be in [0, 1)";
      break;
  }
  if (rule == nullptr) return Status::Ok();
  return InvalidArgument("config key ", who, ": ", text, " ", rule);
}

// "[1,8,1]", "1, 8, 1" -> "1,8,1"; "auto" stays. Three axes (data, fsdp, tensor), each >= 1 or
// -1 (the devices left over), at most one -1.
StatusOr<std::string> normalize_mesh(std::string_view who, std::string_view text) {
  std::string_view s = str_trim(text);
  if (s == "auto") return std::string("auto");
  auto bad = [&](std::string_view why) {
    return InvalidArgument("config key ", who, ": '", text, "' ", why,
                           " (expected 3 integers data,fsdp,tensor such as 1,8,1 or [1,8,1], "
                           "at most one -1, or auto)");
  };
  if (!s.empty() && s.front() == '[') {
    if (s.back() != ']') return bad("has an unclosed '['");
    s = s.substr(1, s.size() - 2);
  }
  std::vector<std::string> parts = str_split(s, ',');
  if (parts.size() != 3) return bad(str_cat("has ", parts.size(), " axes"));
  std::string out;
  int fill = 0;
  for (const std::string& part : parts) {
    std::optional<int64_t> n = parse_int64(str_trim(part));
    if (!n) return bad(str_cat("has a non-integer axis '", str_trim(part), "'"));
    if (*n == -1) {
      ++fill;
    } else if (*n < 1) {
      return bad(str_cat("has an axis of ", *n));
    }
    if (!out.empty()) out += ',';
    out += std::to_string(*n);
  }
  if (fill > 1) return bad("has more than one -1");
  return out;
}

std::optional<uint64_t> parse_uint64(std::string_view s) {
  std::string t(s);
  if (t.empty() || !std::isdigit(static_cast<unsigned char>(t[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(t.c_str(), &end, 10);
  if (errno != 0 || end != t.c_str() + t.size()) return std::nullopt;
  return static_cast<uint64_t>(v);
}

// A typed enum's value: the index of `text` among the key's names.
StatusOr<uint8_t> enum_index(const KeyDef& key, std::string_view who, std::string_view text) {
  auto it = std::find(key.allowed.begin(), key.allowed.end(), text);
  if (it == key.allowed.end()) {
    return InvalidArgument("config key ", who, ": '", text, "' is not one of ",
                           join(key.allowed, ", "));
  }
  return static_cast<uint8_t>(it - key.allowed.begin());
}

// A string key's value as stored: enums must be in their set, meshes are normalised.
StatusOr<std::string> string_value(const KeyDef& key, std::string_view who, std::string_view text) {
  if (key.type == KeyType::kMesh) return normalize_mesh(who, text);
  if (key.type == KeyType::kEnum &&
      std::find(key.allowed.begin(), key.allowed.end(), text) == key.allowed.end()) {
    return InvalidArgument("config key ", who, ": '", text, "' is not one of ",
                           join(key.allowed, ", "));
  }
  return std::string(text);
}

Status set_from_text(const KeyDef& key, std::string_view who, std::string_view text,
                     Config* config) {
  FieldPtr field = key.field(*config);
  auto not_a = [&](std::string_view what) {
    return InvalidArgument("config key ", who, " (", type_name(key.type), "): '", text, "' is not ",
                           what);
  };
  if (auto* p = std::get_if<int64_t*>(&field)) {
    std::optional<int64_t> v = parse_int64(text);
    if (!v) return not_a("an integer");
    AX_RETURN_IF_ERROR(check_bound(who, key.bound, static_cast<double>(*v), text));
    **p = *v;
  } else if (auto* p = std::get_if<uint64_t*>(&field)) {
    std::optional<uint64_t> v = parse_uint64(text);
    if (!v) return not_a("a non-negative integer");
    **p = *v;
  } else if (auto* p = std::get_if<double*>(&field)) {
    std::optional<double> v = parse_double(text);
    if (!v || !std::isfinite(*v)) return not_a("a finite number");
    AX_RETURN_IF_ERROR(check_bound(who, key.bound, *v, text));
    **p = *v;
  } else if (auto* p = std::get_if<bool*>(&field)) {
    std::optional<bool> v = parse_bool(text);
    if (!v) return not_a("a boolean (true/false, 1/0, yes/no, on/off)");
    **p = *v;
  } else if (auto* p = std::get_if<uint8_t*>(&field)) {
    AX_ASSIGN_OR_RETURN(**p, enum_index(key, who, text));
  } else {
    AX_ASSIGN_OR_RETURN(std::string v, string_value(key, who, text));
    *std::get<std::string*>(field) = std::move(v);
  }
  return Status::Ok();
}

// JSON values must have the key's type: 4 is an int, 4.0 and 4 are floats, "4" is neither.
Status set_from_json(const KeyDef& key, std::string_view who, const Json& value, Config* config) {
  FieldPtr field = key.field(*config);
  auto wrong_type = [&] {
    return InvalidArgument("config key ", who, " (", type_name(key.type), "): JSON value ",
                           value.dump(), " has the wrong type");
  };
  if (auto* p = std::get_if<int64_t*>(&field)) {
    if (!value.is_number_integer()) return wrong_type();
    if (value.is_number_unsigned() &&
        value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return wrong_type();
    }
    int64_t v = value.get<int64_t>();
    AX_RETURN_IF_ERROR(check_bound(who, key.bound, static_cast<double>(v), value.dump()));
    **p = v;
  } else if (auto* p = std::get_if<uint64_t*>(&field)) {
    if (!value.is_number_unsigned()) return wrong_type();
    **p = value.get<uint64_t>();
  } else if (auto* p = std::get_if<double*>(&field)) {
    if (!value.is_number()) return wrong_type();
    double v = value.get<double>();
    AX_RETURN_IF_ERROR(check_bound(who, key.bound, v, value.dump()));
    **p = v;
  } else if (auto* p = std::get_if<bool*>(&field)) {
    if (!value.is_boolean()) return wrong_type();
    **p = value.get<bool>();
  } else if (auto* p = std::get_if<uint8_t*>(&field)) {
    if (!value.is_string()) return wrong_type();
    AX_ASSIGN_OR_RETURN(**p, enum_index(key, who, value.get_ref<const std::string&>()));
  } else {
    if (!value.is_string()) return wrong_type();
    AX_ASSIGN_OR_RETURN(std::string v, string_value(key, who, value.get_ref<const std::string&>()));
    *std::get<std::string*>(field) = std::move(v);
  }
  return Status::Ok();
}

std::string value_text(const KeyDef& key, const Config& config) {
  FieldPtr field = key.field(const_cast<Config&>(config));
  if (auto* p = std::get_if<uint8_t*>(&field)) return std::string(key.allowed.at(**p));
  return std::visit(
      [](auto* p) -> std::string {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, bool>) {
          return *p ? "true" : "false";
        } else if constexpr (std::is_same_v<T, double>) {
          return format_double(*p);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return *p;
        } else {
          return std::to_string(*p);
        }
      },
      field);
}

Json value_json(const KeyDef& key, const Config& config) {
  FieldPtr field = key.field(const_cast<Config&>(config));
  if (auto* p = std::get_if<uint8_t*>(&field)) return Json(key.allowed.at(**p));
  return std::visit([](auto* p) { return Json(*p); }, field);
}

// The key's current value is in its range / set; the per-key half of validate().
Status check_key(const KeyDef& key, const Config& config) {
  FieldPtr field = key.field(const_cast<Config&>(config));
  std::string name = str_cat("'", key.name, "'");
  if (auto* p = std::get_if<int64_t*>(&field)) {
    return check_bound(name, key.bound, static_cast<double>(**p), std::to_string(**p));
  }
  if (auto* p = std::get_if<double*>(&field)) {
    if (!std::isfinite(**p)) return InvalidArgument("config key ", name, " is not finite");
    return check_bound(name, key.bound, **p, format_double(**p));
  }
  if (auto* p = std::get_if<std::string*>(&field)) {
    return string_value(key, name, **p).status();
  }
  if (auto* p = std::get_if<uint8_t*>(&field)) {
    if (**p >= key.allowed.size()) return InvalidArgument("config key ", name, " out of range");
  }
  return Status::Ok();
}

// ---- Key lookup --------------------------------------------------------------------------------

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      bool same = std::tolower(static_cast<unsigned char>(a[i - 1])) ==
                  std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (same ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

Status unknown_key(std::string_view name) {
  // The nearest key or Pax name; a name without a group is also compared with the key leaves,
  // so "num_layers" finds model.num_layers.
  std::string_view best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  auto consider = [&](std::string_view candidate, std::string_view compared) {
    // A truncated name ("PERCORE_BATCH") is as good as a one-letter typo.
    bool prefix = name.size() >= 4 && compared.size() > name.size() &&
                  edit_distance(name, compared.substr(0, name.size())) == 0;
    size_t d = prefix ? 1 : edit_distance(name, compared);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  };
  // Pax names first: on a tie, "PERCORE_BATCH" should suggest the name its user spells.
  for (const Alias& alias : kAliases) consider(alias.pax_name, alias.pax_name);
  bool has_group = !group_of(name).empty();
  for (const KeyDef& key : key_table()) {
    consider(key.name, key.name);
    if (!has_group) consider(key.name, leaf_of(key.name));
  }

  std::string message = str_cat("unknown config key '", name, "'");
  bool suggest = best_distance <= std::max<size_t>(2, name.size() / 3);
  if (suggest) message += str_cat("; did you mean ", best, "?");
  std::string_view group = has_group ? group_of(name) : suggest ? group_of(best) : "";
  std::vector<std::string_view> in_group;
  for (const KeyDef& key : key_table()) {
    if (group_of(key.name) == group) in_group.push_back(key.name);
  }
  if (!in_group.empty()) {
    message += str_cat(" (keys in ", group, ".*: ", join(in_group, ", "), ")");
  } else {
    std::vector<std::string_view> groups;
    for (const KeyDef& key : key_table()) {
      std::string_view g = group_of(key.name);
      if (groups.empty() || groups.back() != g) groups.push_back(g);
    }
    std::vector<std::string_view> aliases;
    for (const Alias& alias : kAliases) aliases.push_back(alias.pax_name);
    message += str_cat(" (groups: ", join(groups, ", "), "; Pax names: ", join(aliases, ", "),
                       "; see ax-train --help-config)");
  }
  return InvalidArgument(message);
}

StatusOr<const KeyDef*> find_key(std::string_view name) {
  std::string_view resolved = name;
  for (const Alias& alias : kAliases) {
    if (alias.pax_name == name) resolved = alias.key;
  }
  for (const KeyDef& key : key_table()) {
    if (key.name == resolved) return &key;
  }
  return unknown_key(name);
}

// The name shown in errors, quoted; a Pax name keeps its canonical key beside it.
std::string shown_name(std::string_view typed, const KeyDef& key) {
  if (typed == key.name) return str_cat("'", typed, "'");
  return str_cat("'", typed, "' (", key.name, ")");
}

}  // namespace

Status apply_override(Config* config, const std::string& key, const std::string& value) {
  std::string_view name = str_trim(key);
  AX_ASSIGN_OR_RETURN(const KeyDef* def, find_key(name));
  return set_from_text(*def, shown_name(name, *def), str_trim(value), config);
}

Status apply_override(Config* config, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos) {
    return InvalidArgument("config override '", assignment,
                           "' is not key=value (for example model.num_layers=12)");
  }
  return apply_override(config, assignment.substr(0, eq), assignment.substr(eq + 1));
}

Status validate(const Config& config) {
  for (const KeyDef& key : key_table()) AX_RETURN_IF_ERROR(check_key(key, config));
  const ModelConfig& m = config.model;
  const OptimConfig& o = config.optim;
  const TrainConfig& t = config.train;
  if (m.kv_channels == 0 && m.model_dim % m.num_heads != 0) {
    return InvalidArgument("model.model_dim (", m.model_dim, ") must be divisible by ",
                           "model.num_heads (", m.num_heads, ") when model.kv_channels is 0");
  }
  if ((m.family == ModelFamily::kT5) != (m.position == PositionKind::kRelative)) {
    return InvalidArgument(
        "model.position=relative goes with model.family=t5 and only with it; "
        "this config has model.family=",
        name_of(m.family), " and model.position=", name_of(m.position));
  }
  if (t.eval_task != "none" && t.eval_task_data.empty()) {
    return InvalidArgument("train.eval_task=", t.eval_task,
                           " needs train.eval_task_data (the jsonl of `ax-data convert-task`)");
  }
  if (t.eval_task == "lambada" && m.family == ModelFamily::kT5) {
    return InvalidArgument("train.eval_task=lambada needs a decoder-only model (gpt, llama); ",
                           "model.family=t5 is evaluated on mnli or squad");
  }
  if (m.family == ModelFamily::kT5 && t.encoder_seq_len < 1) {
    return InvalidArgument("model.family=t5 needs train.encoder_seq_len (ENC_SL) > 0");
  }
  if (m.num_kv_heads > m.num_heads || m.num_heads % m.num_kv_heads != 0) {
    return InvalidArgument("model.num_heads (", m.num_heads, ") must be a multiple of ",
                           "model.num_kv_heads (", m.num_kv_heads, ")");
  }
  if (m.position == PositionKind::kRope && m.head_dim() % 2 != 0) {
    return InvalidArgument("model.position=rope needs an even head dim, but it is ", m.head_dim(),
                           " (model.kv_channels, else model.model_dim (", m.model_dim,
                           ") / model.num_heads (", m.num_heads, "))");
  }
  if (m.rope_scaling != RopeScalingKind::kNone && m.position != PositionKind::kRope) {
    return InvalidArgument("model.rope_scaling=", name_of(m.rope_scaling),
                           " scales RoPE's frequencies and needs model.position=rope, not ",
                           name_of(m.position));
  }
  if (m.rope_scaling == RopeScalingKind::kLlama3 &&
      m.rope_high_freq_factor <= m.rope_low_freq_factor) {
    return InvalidArgument("model.rope_scaling=llama3 needs model.rope_high_freq_factor (",
                           m.rope_high_freq_factor, ") > model.rope_low_freq_factor (",
                           m.rope_low_freq_factor, ")");
  }
  if (m.position == PositionKind::kLearned && t.seq_len > m.max_seq_len) {
    return InvalidArgument("train.seq_len (", t.seq_len, ") exceeds model.max_seq_len (",
                           m.max_seq_len, "), the size of the learned position table");
  }
  int64_t decay_end = o.decay_steps > 0 ? o.decay_steps : t.max_steps;
  if (o.warmup_steps > decay_end) {
    return InvalidArgument(
        "optim.warmup_steps (", o.warmup_steps, ") exceeds the end of the decay (",
        o.decay_steps > 0
            ? str_cat("optim.decay_steps = ", o.decay_steps)
            : str_cat("train.max_steps = ", t.max_steps, " as optim.decay_steps is 0"),
        ")");
  }
  return Status::Ok();
}

std::string to_json(const Config& config) {
  Json j = Json::object();
  j["experiment"] = config.experiment;
  for (const KeyDef& key : key_table()) {
    j[std::string(group_of(key.name))][std::string(leaf_of(key.name))] = value_json(key, config);
  }
  return j.dump(2) + "\n";
}

StatusOr<Config> from_json(const std::string& json) {
  Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("config JSON does not parse");
  if (!j.is_object()) return InvalidArgument("config JSON is not an object");
  Config config;
  for (const auto& [group, members] : j.items()) {
    if (group == "experiment") {
      if (!members.is_string()) return InvalidArgument("config JSON: 'experiment' is not a string");
      config.experiment = members.get<std::string>();
      continue;
    }
    if (!members.is_object()) {
      bool known_group = false;
      for (const KeyDef& key : key_table()) known_group |= group_of(key.name) == group;
      if (!known_group) return unknown_key(group);
      return InvalidArgument("config JSON: '", group, "' is not an object of keys");
    }
    for (const auto& [leaf, value] : members.items()) {
      std::string name = str_cat(group, ".", leaf);
      AX_ASSIGN_OR_RETURN(const KeyDef* def, find_key(name));
      AX_RETURN_IF_ERROR(set_from_json(*def, shown_name(name, *def), value, &config));
    }
  }
  return config;
}

std::string to_text(const Config& config) {
  size_t width = std::string_view("experiment").size();
  for (const KeyDef& key : key_table()) width = std::max(width, key.name.size());
  auto line = [&](std::string_view name, const std::string& value) {
    return str_cat(name, std::string(width - name.size(), ' '), " = ",
                   value.empty() ? "\"\"" : value, "\n");
  };
  std::string out = line("experiment", config.experiment);
  std::string_view group;
  for (const KeyDef& key : key_table()) {
    if (group_of(key.name) != group) {
      group = group_of(key.name);
      out += "\n";
    }
    out += line(key.name, value_text(key, config));
  }
  return out;
}

std::string describe_keys() {
  Config defaults;
  size_t name_width = 0;
  size_t default_width = 0;
  for (const KeyDef& key : key_table()) {
    name_width = std::max(name_width, key.name.size());
    default_width = std::max(default_width, value_text(key, defaults).size() + 2);
  }
  auto pad = [](std::string s, size_t width) {
    s.resize(std::max(width, s.size()), ' ');
    return s;
  };
  std::string out =
      "Config keys (--set key=value). Columns: key, type, default of the base config, "
      "description.\n";
  std::string_view group;
  for (const KeyDef& key : key_table()) {
    if (group_of(key.name) != group) {
      group = group_of(key.name);
      out += "\n";
    }
    std::string value = value_text(key, defaults);
    std::string line = str_cat(
        pad(std::string(key.name), name_width), "  ", pad(std::string(type_name(key.type)), 6),
        "  ", pad(value.empty() ? "\"\"" : value, default_width), "  ", key.description);
    if (key.type == KeyType::kEnum) line += str_cat(" {", join(key.allowed, "|"), "}");
    for (const Alias& alias : kAliases) {
      if (alias.key == key.name) line += str_cat(" [Pax: ", alias.pax_name, "]");
    }
    out += line + "\n";
  }
  out +=
      "\nValues: int and float are plain numbers (ints reject 1.5), bool is true/false or 1/0, "
      "mesh is data,fsdp,tensor such as 1,8,1 or [1,8,1] (one -1 = the remaining devices) or "
      "auto.\n";
  return out;
}

std::string_view name_of(ModelFamily v) { return kFamilyNames[static_cast<size_t>(v)]; }
std::string_view name_of(NormKind v) { return kNormNames[static_cast<size_t>(v)]; }
std::string_view name_of(Activation v) { return kActivationNames[static_cast<size_t>(v)]; }
std::string_view name_of(PositionKind v) { return kPositionNames[static_cast<size_t>(v)]; }
std::string_view name_of(RopeScalingKind v) { return kRopeScalingNames[static_cast<size_t>(v)]; }

}  // namespace ax::train
