#include "hf_format.h"

#include <algorithm>
#include <cmath>
#include <optional>

namespace ax::train::ckpt {
namespace {

using Json = nlohmann::json;
using OrderedJson = nlohmann::ordered_json;

Status check_architecture(const ModelConfig& m, NormKind norm, Activation activation,
                          PositionKind position) {
  if (m.norm != norm || m.activation != activation || m.position != position) {
    return FailedPrecondition(
        "Hugging Face format of model.family=", name_of(m.family),
        " needs model.norm=", name_of(norm), ", model.activation=", name_of(activation),
        " and model.position=", name_of(position), "; this model has ", name_of(m.norm), ", ",
        name_of(m.activation), " and ", name_of(m.position));
  }
  return Status::Ok();
}

// Builds the table in export order.
class Table {
 public:
  // An ax tensor stored as one Hugging Face tensor.
  void plain(const std::string& ax, const std::string& hf, std::vector<int64_t> shape,
             HfLayout layout = HfLayout::kSame) {
    const int64_t rows = shape[0];
    out_.push_back({ax, std::move(shape), {{hf, 0, rows, layout}}});
  }
  // An ax tensor whose rows are split into Hugging Face tensors of `rows` rows each.
  void split(const std::string& ax, std::vector<int64_t> shape,
             const std::vector<std::pair<std::string, int64_t>>& parts,
             HfLayout first_layout = HfLayout::kSame) {
    HfTensor t{ax, std::move(shape), {}};
    int64_t row = 0;
    for (const auto& [hf, rows] : parts) {
      t.parts.push_back({hf, row, rows, row == 0 ? first_layout : HfLayout::kSame});
      row += rows;
    }
    out_.push_back(std::move(t));
  }
  // A bias GPT-2 always has: ax's, or zeros for a model without biases.
  void bias(bool has, const std::string& ax, const std::string& hf, int64_t n) {
    plain(has ? ax : std::string(), hf, {n});
  }
  std::vector<HfTensor> take() { return std::move(out_); }

 private:
  std::vector<HfTensor> out_;
};

StatusOr<std::vector<HfTensor>> gpt2_tensors(const ModelConfig& m, int64_t vocab) {
  AX_RETURN_IF_ERROR(
      check_architecture(m, NormKind::kLayerNorm, Activation::kGelu, PositionKind::kLearned));
  if (m.num_kv_heads != m.num_heads || m.head_dim() * m.num_heads != m.model_dim) {
    return FailedPrecondition(
        "Hugging Face GPT-2 has no grouped-query attention and heads of model_dim / num_heads: "
        "model.num_kv_heads must equal model.num_heads and model.kv_channels be 0");
  }
  const int64_t C = m.model_dim, F = m.hidden_dim;
  constexpr HfLayout kConv1D = HfLayout::kTransposed;
  Table t;
  t.plain("wte", "transformer.wte.weight", {vocab, C});
  t.plain("wpe", "transformer.wpe.weight", {m.max_seq_len, C});
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string ax = str_cat("h.", i, ".");
    const std::string hf = str_cat("transformer.h.", i, ".");
    t.plain(ax + "ln1.weight", hf + "ln_1.weight", {C});
    t.bias(m.bias, ax + "ln1.bias", hf + "ln_1.bias", C);
    t.plain(ax + "attn.qkv.weight", hf + "attn.c_attn.weight", {3 * C, C}, kConv1D);
    t.bias(m.bias, ax + "attn.qkv.bias", hf + "attn.c_attn.bias", 3 * C);
    t.plain(ax + "attn.proj.weight", hf + "attn.c_proj.weight", {C, C}, kConv1D);
    t.bias(m.bias, ax + "attn.proj.bias", hf + "attn.c_proj.bias", C);
    t.plain(ax + "ln2.weight", hf + "ln_2.weight", {C});
    t.bias(m.bias, ax + "ln2.bias", hf + "ln_2.bias", C);
    t.plain(ax + "mlp.fc.weight", hf + "mlp.c_fc.weight", {F, C}, kConv1D);
    t.bias(m.bias, ax + "mlp.fc.bias", hf + "mlp.c_fc.bias", F);
    t.plain(ax + "mlp.proj.weight", hf + "mlp.c_proj.weight", {C, F}, kConv1D);
    t.bias(m.bias, ax + "mlp.proj.bias", hf + "mlp.c_proj.bias", C);
  }
  t.plain("lnf.weight", "transformer.ln_f.weight", {C});
  t.bias(m.bias, "lnf.bias", "transformer.ln_f.bias", C);
  if (!m.tied_embeddings) t.plain("lm_head.weight", "lm_head.weight", {vocab, C});
  return t.take();
}

StatusOr<std::vector<HfTensor>> llama_tensors(const ModelConfig& m, int64_t vocab) {
  AX_RETURN_IF_ERROR(
      check_architecture(m, NormKind::kRmsNorm, Activation::kSwiglu, PositionKind::kRope));
  const int64_t C = m.model_dim, F = m.hidden_dim, HD = m.head_dim();
  const int64_t Q = m.num_heads * HD, KV = m.num_kv_heads * HD;
  Table t;
  t.plain("wte", "model.embed_tokens.weight", {vocab, C});
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string ax = str_cat("h.", i, ".");
    const std::string hf = str_cat("model.layers.", i, ".");
    const std::string attn = hf + "self_attn.", mlp = hf + "mlp.";
    t.plain(ax + "ln1.weight", hf + "input_layernorm.weight", {C});
    // qkv rows: queries, keys, values; fc rows: gate, up (docs/parameter-names.md).
    t.split(
        ax + "attn.qkv.weight", {Q + 2 * KV, C},
        {{attn + "q_proj.weight", Q}, {attn + "k_proj.weight", KV}, {attn + "v_proj.weight", KV}});
    t.plain(ax + "attn.proj.weight", attn + "o_proj.weight", {C, Q});
    t.plain(ax + "ln2.weight", hf + "post_attention_layernorm.weight", {C});
    t.split(ax + "mlp.fc.weight", {2 * F, C},
            {{mlp + "gate_proj.weight", F}, {mlp + "up_proj.weight", F}});
    t.plain(ax + "mlp.proj.weight", mlp + "down_proj.weight", {C, F});
    if (m.bias) {  // Llama's attention_bias and mlp_bias
      t.split(ax + "attn.qkv.bias", {Q + 2 * KV},
              {{attn + "q_proj.bias", Q}, {attn + "k_proj.bias", KV}, {attn + "v_proj.bias", KV}});
      t.plain(ax + "attn.proj.bias", attn + "o_proj.bias", {C});
      t.split(ax + "mlp.fc.bias", {2 * F},
              {{mlp + "gate_proj.bias", F}, {mlp + "up_proj.bias", F}});
      t.plain(ax + "mlp.proj.bias", mlp + "down_proj.bias", {C});
    }
  }
  t.plain("lnf.weight", "model.norm.weight", {C});
  if (!m.tied_embeddings) t.plain("lm_head.weight", "lm_head.weight", {vocab, C});
  return t.take();
}

// T5 v1.1 as T5ForConditionalGeneration (docs/parameter-names.md "T5").
StatusOr<std::vector<HfTensor>> t5_tensors(const ModelConfig& m, int64_t vocab) {
  AX_RETURN_IF_ERROR(
      check_architecture(m, NormKind::kRmsNorm, Activation::kGeglu, PositionKind::kRelative));
  if (m.bias || m.tied_embeddings || m.num_kv_heads != m.num_heads) {
    return FailedPrecondition(
        "Hugging Face T5 v1.1 has no biases, an untied LM head and no grouped-query attention: "
        "model.bias=false, model.tied_embeddings=false and model.num_kv_heads=model.num_heads");
  }
  const int64_t C = m.model_dim, F = m.hidden_dim, Q = m.num_heads * m.head_dim();
  Table t;
  auto self_attention = [&](const std::string& ax, const std::string& hf) {
    t.plain(ax + "ln1.weight", hf + "layer.0.layer_norm.weight", {C});
    const std::string a = hf + "layer.0.SelfAttention.";
    t.split(ax + "attn.qkv.weight", {3 * Q, C},
            {{a + "q.weight", Q}, {a + "k.weight", Q}, {a + "v.weight", Q}}, HfLayout::kQuery);
    t.plain(ax + "attn.proj.weight", a + "o.weight", {C, Q});
  };
  auto mlp = [&](const std::string& ax, const std::string& hf) {
    t.split(ax + "mlp.fc.weight", {2 * F, C}, {{hf + "wi_0.weight", F}, {hf + "wi_1.weight", F}});
    t.plain(ax + "mlp.proj.weight", hf + "wo.weight", {C, F});
  };
  t.plain("wte", "shared.weight", {vocab, C});
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string ax = str_cat("enc.h.", i, "."), hf = str_cat("encoder.block.", i, ".");
    self_attention(ax, hf);
    t.plain(ax + "ln2.weight", hf + "layer.1.layer_norm.weight", {C});
    mlp(ax, hf + "layer.1.DenseReluDense.");
  }
  for (int64_t i = 0; i < m.decoder_layers(); ++i) {
    const std::string ax = str_cat("dec.h.", i, "."), hf = str_cat("decoder.block.", i, ".");
    self_attention(ax, hf);
    const std::string x = hf + "layer.1.EncDecAttention.";
    t.plain(ax + "ln_cross.weight", hf + "layer.1.layer_norm.weight", {C});
    t.plain(ax + "cross.q.weight", x + "q.weight", {Q, C}, HfLayout::kQuery);
    t.split(ax + "cross.kv.weight", {2 * Q, C}, {{x + "k.weight", Q}, {x + "v.weight", Q}});
    t.plain(ax + "cross.proj.weight", x + "o.weight", {C, Q});
    t.plain(ax + "ln2.weight", hf + "layer.2.layer_norm.weight", {C});
    mlp(ax, hf + "layer.2.DenseReluDense.");
  }
  for (const std::string stack : {"enc", "dec"}) {
    const std::string hf = stack == "enc" ? "encoder." : "decoder.";
    t.plain(stack + ".rel_bias.weight",
            hf + "block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            {m.relative_buckets, m.num_heads});
    t.plain(stack + ".lnf.weight", hf + "final_layer_norm.weight", {C});
  }
  t.plain("lm_head.weight", "lm_head.weight", {vocab, C});
  return t.take();
}

// ---- config.json -> ModelConfig ----

// Reads config.json keys with their Hugging Face defaults; errors name the file and the key.
class HfConfig {
 public:
  HfConfig(const Json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  StatusOr<int64_t> count(const char* key, std::optional<int64_t> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return InvalidArgument(where_, ": has no \"", key, "\"");
    }
    if (!j_[key].is_number_integer() || j_[key].get<int64_t>() <= 0) {
      return InvalidArgument(where_, ": \"", key, "\" = ", j_[key].dump(),
                             " is not a positive integer");
    }
    return j_[key].get<int64_t>();
  }
  StatusOr<double> number(const char* key, std::optional<double> fallback) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      return InvalidArgument(where_, ": has no \"", key, "\"");
    }
    if (!j_[key].is_number() || j_[key].get<double>() <= 0) {
      return InvalidArgument(where_, ": \"", key, "\" = ", j_[key].dump(),
                             " is not a positive number");
    }
    return j_[key].get<double>();
  }
  StatusOr<bool> flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_[key].is_boolean()) {
      return InvalidArgument(where_, ": \"", key, "\" = ", j_[key].dump(), " is not true/false");
    }
    return j_[key].get<bool>();
  }
  std::string text(const char* key, const std::string& fallback) const {
    return has(key) && j_[key].is_string() ? j_[key].get<std::string>() : fallback;
  }
  const std::string& where() const { return where_; }
  // A key whose value ax does not implement.
  Status unsupported(const char* key, const std::string& why) const {
    return FailedPrecondition(where_, ": \"", key, "\" = ", j_[key].dump(), ": ", why);
  }

 private:
  const Json& j_;
  std::string where_;
};

StatusOr<ModelConfig> gpt2_model(const HfConfig& c) {
  ModelConfig m;
  m.family = ModelFamily::kGpt;
  m.norm = NormKind::kLayerNorm;
  m.activation = Activation::kGelu;
  m.position = PositionKind::kLearned;
  m.bias = true;
  AX_ASSIGN_OR_RETURN(m.vocab_size, c.count("vocab_size"));
  AX_ASSIGN_OR_RETURN(m.model_dim, c.count("n_embd"));
  AX_ASSIGN_OR_RETURN(m.num_layers, c.count("n_layer"));
  AX_ASSIGN_OR_RETURN(m.num_heads, c.count("n_head"));
  m.num_kv_heads = m.num_heads;
  AX_ASSIGN_OR_RETURN(m.hidden_dim, c.count("n_inner", 4 * m.model_dim));
  AX_ASSIGN_OR_RETURN(m.max_seq_len, c.count("n_positions"));
  AX_ASSIGN_OR_RETURN(m.norm_eps, c.number("layer_norm_epsilon", 1e-5));
  AX_ASSIGN_OR_RETURN(m.tied_embeddings, c.flag("tie_word_embeddings", true));
  const std::string act = c.text("activation_function", "gelu_new");
  if (act != "gelu_new" && act != "gelu_pytorch_tanh") {
    return c.unsupported("activation_function",
                         "ax's GPT computes the tanh GELU (gelu_new, gelu_pytorch_tanh)");
  }
  AX_ASSIGN_OR_RETURN(bool scaled, c.flag("scale_attn_weights", true));
  if (!scaled) return c.unsupported("scale_attn_weights", "ax divides the logits by sqrt(d)");
  AX_ASSIGN_OR_RETURN(bool by_layer, c.flag("scale_attn_by_inverse_layer_idx", false));
  if (by_layer) return c.unsupported("scale_attn_by_inverse_layer_idx", "ax does not");
  return m;
}

// config.json's rope_scaling: none, {"rope_type": "default"} (older files: "type"), which scales
// nothing, or Llama 3.1's {"rope_type": "llama3", "factor", "low_freq_factor",
// "high_freq_factor", "original_max_position_embeddings"}. Any other type is refused by name.
Status read_rope_scaling(const HfConfig& c, const Json& config, ModelConfig* m) {
  if (!c.has("rope_scaling")) return Status::Ok();
  const Json& scaling = config["rope_scaling"];
  constexpr const char* kSupported = "ax implements rope_type \"default\" and \"llama3\"";
  if (!scaling.is_object()) return c.unsupported("rope_scaling", kSupported);
  const Json type =
      scaling.contains("rope_type") ? scaling["rope_type"] : scaling.value("type", Json());
  if (type == "default") return Status::Ok();
  if (type.is_null()) {
    return c.unsupported("rope_scaling", str_cat("it has no \"rope_type\" (", kSupported, ")"));
  }
  if (type != "llama3") {
    return c.unsupported("rope_scaling", str_cat("rope_type ", type.dump(),
                                                 " is not one ax implements (", kSupported,
                                                 "; linear, dynamic, yarn, longrope and the others "
                                                 "do not import)"));
  }
  const HfConfig s(scaling, c.where() + ": \"rope_scaling\"");
  m->rope_scaling = RopeScalingKind::kLlama3;
  AX_ASSIGN_OR_RETURN(m->rope_scaling_factor, s.number("factor", std::nullopt));
  AX_ASSIGN_OR_RETURN(m->rope_low_freq_factor, s.number("low_freq_factor", std::nullopt));
  AX_ASSIGN_OR_RETURN(m->rope_high_freq_factor, s.number("high_freq_factor", std::nullopt));
  AX_ASSIGN_OR_RETURN(m->rope_original_max_positions, s.count("original_max_position_embeddings"));
  if (m->rope_high_freq_factor <= m->rope_low_freq_factor) {
    return s.unsupported("high_freq_factor",
                         str_cat("llama3 scaling needs high_freq_factor > low_freq_factor (",
                                 m->rope_low_freq_factor, ")"));
  }
  return Status::Ok();
}

StatusOr<ModelConfig> llama_model(const HfConfig& c, const Json& config) {
  ModelConfig m;
  m.family = ModelFamily::kLlama;
  m.norm = NormKind::kRmsNorm;
  m.activation = Activation::kSwiglu;
  m.position = PositionKind::kRope;
  AX_ASSIGN_OR_RETURN(m.vocab_size, c.count("vocab_size"));
  AX_ASSIGN_OR_RETURN(m.model_dim, c.count("hidden_size"));
  AX_ASSIGN_OR_RETURN(m.hidden_dim, c.count("intermediate_size"));
  AX_ASSIGN_OR_RETURN(m.num_layers, c.count("num_hidden_layers"));
  AX_ASSIGN_OR_RETURN(m.num_heads, c.count("num_attention_heads"));
  AX_ASSIGN_OR_RETURN(m.num_kv_heads, c.count("num_key_value_heads", m.num_heads));
  AX_ASSIGN_OR_RETURN(int64_t head_dim, c.count("head_dim", m.model_dim / m.num_heads));
  m.kv_channels = head_dim * m.num_heads == m.model_dim ? 0 : head_dim;
  AX_ASSIGN_OR_RETURN(m.max_seq_len, c.count("max_position_embeddings", 2048));
  AX_ASSIGN_OR_RETURN(m.norm_eps, c.number("rms_norm_eps", 1e-6));
  AX_ASSIGN_OR_RETURN(m.rope_theta, c.number("rope_theta", 10000.0));
  AX_ASSIGN_OR_RETURN(m.tied_embeddings, c.flag("tie_word_embeddings", false));
  AX_ASSIGN_OR_RETURN(bool attention_bias, c.flag("attention_bias", false));
  AX_ASSIGN_OR_RETURN(bool mlp_bias, c.flag("mlp_bias", false));
  if (attention_bias != mlp_bias) {
    return c.unsupported("mlp_bias", str_cat("ax's model.bias covers both attention_bias (",
                                             attention_bias, ") and mlp_bias"));
  }
  m.bias = attention_bias;
  AX_RETURN_IF_ERROR(read_rope_scaling(c, config, &m));
  if (c.text("hidden_act", "silu") != "silu") {
    return c.unsupported("hidden_act", "ax's Llama computes SwiGLU with SiLU");
  }
  return m;
}

StatusOr<ModelConfig> t5_model(const HfConfig& c) {
  ModelConfig m;
  m.family = ModelFamily::kT5;
  m.norm = NormKind::kRmsNorm;
  m.activation = Activation::kGeglu;
  m.position = PositionKind::kRelative;
  m.bias = false;
  m.tied_embeddings = false;
  AX_ASSIGN_OR_RETURN(m.vocab_size, c.count("vocab_size"));
  AX_ASSIGN_OR_RETURN(m.model_dim, c.count("d_model"));
  AX_ASSIGN_OR_RETURN(m.hidden_dim, c.count("d_ff"));
  AX_ASSIGN_OR_RETURN(m.kv_channels, c.count("d_kv"));
  AX_ASSIGN_OR_RETURN(m.num_heads, c.count("num_heads"));
  m.num_kv_heads = m.num_heads;
  AX_ASSIGN_OR_RETURN(m.num_layers, c.count("num_layers"));
  AX_ASSIGN_OR_RETURN(m.num_decoder_layers, c.count("num_decoder_layers", m.num_layers));
  AX_ASSIGN_OR_RETURN(m.relative_buckets, c.count("relative_attention_num_buckets", 32));
  AX_ASSIGN_OR_RETURN(m.relative_max_distance, c.count("relative_attention_max_distance", 128));
  AX_ASSIGN_OR_RETURN(m.norm_eps, c.number("layer_norm_epsilon", 1e-6));
  const std::string ff = c.text("feed_forward_proj", "relu");
  if (ff != "gated-gelu" && ff != "gated-gelu_new") {
    return c.unsupported("feed_forward_proj",
                         "ax implements T5 v1.1 (gated-gelu); T5 v1.0 (relu) does not import");
  }
  AX_ASSIGN_OR_RETURN(bool tied, c.flag("tie_word_embeddings", true));
  if (tied) {
    return c.unsupported("tie_word_embeddings",
                         "T5 v1.1 has an untied LM head (a tied one scales the decoder output, "
                         "which ax does not)");
  }
  return m;
}

}  // namespace

std::vector<int64_t> hf_shape(const HfTensor& t, const HfPart& part) {
  if (t.shape.size() == 1) return {part.rows};
  if (part.layout == HfLayout::kTransposed) return {t.shape[1], part.rows};
  return {part.rows, t.shape[1]};
}

StatusOr<std::vector<HfTensor>> hf_tensors(const ModelConfig& m, int64_t vocab) {
  switch (m.family) {
    case ModelFamily::kGpt:
      return gpt2_tensors(m, vocab);
    case ModelFamily::kLlama:
      return llama_tensors(m, vocab);
    case ModelFamily::kT5:
      return t5_tensors(m, vocab);
  }
  return Internal("unknown model family");
}

double t5_query_scale(const ModelConfig& m) { return std::sqrt(static_cast<double>(m.head_dim())); }

OrderedJson hf_config(const ModelConfig& m, int64_t vocab) {
  const int64_t C = m.model_dim, F = m.hidden_dim;
  switch (m.family) {
    case ModelFamily::kGpt:
      return OrderedJson{{"architectures", {"GPT2LMHeadModel"}},
                         {"model_type", "gpt2"},
                         {"vocab_size", vocab},
                         {"n_positions", m.max_seq_len},
                         {"n_ctx", m.max_seq_len},
                         {"n_embd", C},
                         {"n_layer", m.num_layers},
                         {"n_head", m.num_heads},
                         {"n_inner", F},
                         {"activation_function", "gelu_new"},  // the tanh GELU ax computes
                         {"layer_norm_epsilon", m.norm_eps},
                         {"tie_word_embeddings", m.tied_embeddings},
                         {"torch_dtype", "float32"}};
    case ModelFamily::kLlama: {
      OrderedJson j{{"architectures", {"LlamaForCausalLM"}},
                    {"model_type", "llama"},
                    {"vocab_size", vocab},
                    {"hidden_size", C},
                    {"intermediate_size", F},
                    {"num_hidden_layers", m.num_layers},
                    {"num_attention_heads", m.num_heads},
                    {"num_key_value_heads", m.num_kv_heads},
                    {"head_dim", m.head_dim()},
                    {"hidden_act", "silu"},
                    {"max_position_embeddings", m.max_seq_len},
                    {"rms_norm_eps", m.norm_eps},
                    {"rope_theta", m.rope_theta},
                    {"attention_bias", m.bias},
                    {"mlp_bias", m.bias},
                    {"tie_word_embeddings", m.tied_embeddings},
                    {"torch_dtype", "float32"}};
      if (m.rope_scaling == RopeScalingKind::kLlama3) {
        j["rope_scaling"] = {{"rope_type", "llama3"},
                             {"factor", m.rope_scaling_factor},
                             {"low_freq_factor", m.rope_low_freq_factor},
                             {"high_freq_factor", m.rope_high_freq_factor},
                             {"original_max_position_embeddings", m.rope_original_max_positions}};
      }
      return j;
    }
    case ModelFamily::kT5:
      break;
  }
  return OrderedJson{{"architectures", {"T5ForConditionalGeneration"}},
                     {"model_type", "t5"},
                     {"is_encoder_decoder", true},
                     {"vocab_size", vocab},
                     {"d_model", C},
                     {"d_ff", F},
                     {"d_kv", m.head_dim()},
                     {"num_heads", m.num_heads},
                     {"num_layers", m.num_layers},
                     {"num_decoder_layers", m.decoder_layers()},
                     {"relative_attention_num_buckets", m.relative_buckets},
                     {"relative_attention_max_distance", m.relative_max_distance},
                     {"layer_norm_epsilon", m.norm_eps},
                     {"feed_forward_proj", "gated-gelu"},  // gelu_new (tanh), as ax computes it
                     {"dropout_rate", m.dropout},
                     {"tie_word_embeddings", false},
                     {"decoder_start_token_id", 0},
                     {"pad_token_id", 0},
                     {"eos_token_id", 1},
                     {"torch_dtype", "float32"}};
}

StatusOr<ModelConfig> model_from_hf_config(const Json& config, const std::string& where) {
  if (!config.is_object()) return InvalidArgument(where, ": not a JSON object");
  const HfConfig c(config, where);
  const std::string type = c.text("model_type", "");
  std::vector<std::string> architectures;
  if (config.contains("architectures") && config["architectures"].is_array()) {
    for (const Json& a : config["architectures"]) {
      if (a.is_string()) architectures.push_back(a.get<std::string>());
    }
  }
  auto names = [&](const char* arch) {
    return std::find(architectures.begin(), architectures.end(), arch) != architectures.end();
  };
  if (type == "gpt2" || names("GPT2LMHeadModel")) return gpt2_model(c);
  if (type == "llama" || names("LlamaForCausalLM")) return llama_model(c, config);
  if (type == "t5" || names("T5ForConditionalGeneration")) return t5_model(c);
  return FailedPrecondition(where,
                            ": \"architectures\" = ", config.value("architectures", Json()).dump(),
                            ", \"model_type\" = ", config.value("model_type", Json()).dump(),
                            " is not an architecture ax imports (GPT2LMHeadModel / gpt2, "
                            "LlamaForCausalLM / llama, T5ForConditionalGeneration / t5)");
}

}  // namespace ax::train::ckpt
