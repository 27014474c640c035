// Export of the params/* tensors to Hugging Face names and layouts (GPT-2, Llama, T5). The mapping
// is in docs/parameter-names.md and docs/checkpoint-format.md.

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "ax/trainer/checkpoint.h"
#include "checkpoint_io.h"
#include "safetensors.h"

namespace ax::train {
namespace {

using Json = nlohmann::ordered_json;
constexpr int64_t kAny = -1;  // a dimension take() does not check

std::string shape_text(const std::vector<int64_t>& shape) { return Json(shape).dump(); }

// The params/* tensors of a state, by ax name. take() checks the documented shape and marks the
// tensor used, so that a tensor without a Hugging Face name is an error rather than dropped.
class Params {
 public:
  explicit Params(const CheckpointState& state) {
    for (const HostTensor& t : state.tensors) {
      if (starts_with(t.name, "params/")) tensors_[t.name.substr(7)] = &t;
    }
  }

  StatusOr<const HostTensor*> take(const std::string& name, const std::vector<int64_t>& shape) {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return NotFound("Hugging Face export: no tensor params/", name);
    const HostTensor& t = *it->second;
    bool match = t.shape.size() == shape.size();
    for (size_t k = 0; match && k < shape.size(); ++k) {
      match = shape[k] == kAny || shape[k] == t.shape[k];
    }
    if (!match) {
      return FailedPrecondition("Hugging Face export: params/", name, " has shape ",
                                shape_text(t.shape), ", the config implies ", shape_text(shape));
    }
    if (!t.logical_shape.empty() && t.logical_shape != t.shape) {
      return FailedPrecondition("Hugging Face export: params/", name,
                                " is a slice; export the whole tensors of a loaded checkpoint");
    }
    used_.insert(name);
    return &t;
  }

  Status check_all_used() const {
    for (const auto& [name, t] : tensors_) {
      if (!used_.count(name)) {
        return FailedPrecondition("Hugging Face export: params/", name,
                                  " has no Hugging Face name for this model config");
      }
    }
    return Status::Ok();
  }

 private:
  std::map<std::string, const HostTensor*> tensors_;
  std::set<std::string> used_;
};

// The tensors to write; the ones made here (transposes, zero biases) are owned.
struct Exported {
  std::vector<ckpt::TensorRef> refs;
  std::deque<std::vector<float>> owned;

  void add(const std::string& name, std::vector<int64_t> shape, const float* data) {
    refs.push_back({name, std::move(shape), data});
  }
  void add_owned(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    owned.push_back(std::move(data));
    add(name, std::move(shape), owned.back().data());
  }
  // Rows [begin, end) of a row-major tensor whose rows have `row` elements.
  void add_rows(const std::string& name, const HostTensor& t, int64_t begin, int64_t end) {
    std::vector<int64_t> shape = t.shape;
    shape[0] = end - begin;
    const int64_t row = t.shape.size() == 2 ? t.shape[1] : 1;
    add(name, std::move(shape), t.data.data() + begin * row);
  }
  // A linear weight (out, in) as GPT-2's Conv1D stores it, (in, out).
  void add_transposed(const std::string& name, const HostTensor& t) {
    const int64_t rows = t.shape[0], cols = t.shape[1];
    std::vector<float> out(t.data.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = t.data[r * cols + c];
    }
    add_owned(name, {cols, rows}, std::move(out));
  }
};

Status check_architecture(const ModelConfig& m, NormKind norm, Activation activation,
                          PositionKind position) {
  if (m.norm != norm || m.activation != activation || m.position != position) {
    return FailedPrecondition(
        "Hugging Face export of model.family=", name_of(m.family),
        " needs model.norm=", name_of(norm), ", model.activation=", name_of(activation),
        " and model.position=", name_of(position), "; this model has ", name_of(m.norm), ", ",
        name_of(m.activation), " and ", name_of(m.position));
  }
  return Status::Ok();
}

StatusOr<Json> export_gpt2(const ModelConfig& m, Params* p, Exported* out) {
  AX_RETURN_IF_ERROR(
      check_architecture(m, NormKind::kLayerNorm, Activation::kGelu, PositionKind::kLearned));
  if (m.num_kv_heads != m.num_heads) {
    return FailedPrecondition(
        "Hugging Face GPT-2 has no grouped-query attention: "
        "model.num_kv_heads must equal model.num_heads");
  }
  const int64_t C = m.model_dim, F = m.hidden_dim;
  // Linear and norm biases; GPT-2 always has them, so a model without gets zeros.
  auto bias = [&](const std::string& name, const std::string& hf, int64_t n) -> Status {
    if (!m.bias) {
      out->add_owned(hf, {n}, std::vector<float>(static_cast<size_t>(n), 0.0f));
      return Status::Ok();
    }
    AX_ASSIGN_OR_RETURN(const HostTensor* t, p->take(name, {n}));
    out->add(hf, {n}, t->data.data());
    return Status::Ok();
  };
  auto plain = [&](const std::string& name, const std::string& hf,
                   const std::vector<int64_t>& shape) -> Status {
    AX_ASSIGN_OR_RETURN(const HostTensor* t, p->take(name, shape));
    out->add(hf, t->shape, t->data.data());
    return Status::Ok();
  };
  auto conv1d = [&](const std::string& name, const std::string& hf, int64_t rows,
                    int64_t cols) -> Status {
    AX_ASSIGN_OR_RETURN(const HostTensor* t, p->take(name, {rows, cols}));
    out->add_transposed(hf, *t);
    return Status::Ok();
  };

  AX_ASSIGN_OR_RETURN(const HostTensor* wte, p->take("wte", {kAny, C}));
  const int64_t vocab = wte->shape[0];
  out->add("transformer.wte.weight", wte->shape, wte->data.data());
  AX_RETURN_IF_ERROR(plain("wpe", "transformer.wpe.weight", {m.max_seq_len, C}));
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string ax = str_cat("h.", i, ".");
    const std::string hf = str_cat("transformer.h.", i, ".");
    AX_RETURN_IF_ERROR(plain(ax + "ln1.weight", hf + "ln_1.weight", {C}));
    AX_RETURN_IF_ERROR(bias(ax + "ln1.bias", hf + "ln_1.bias", C));
    AX_RETURN_IF_ERROR(conv1d(ax + "attn.qkv.weight", hf + "attn.c_attn.weight", 3 * C, C));
    AX_RETURN_IF_ERROR(bias(ax + "attn.qkv.bias", hf + "attn.c_attn.bias", 3 * C));
    AX_RETURN_IF_ERROR(conv1d(ax + "attn.proj.weight", hf + "attn.c_proj.weight", C, C));
    AX_RETURN_IF_ERROR(bias(ax + "attn.proj.bias", hf + "attn.c_proj.bias", C));
    AX_RETURN_IF_ERROR(plain(ax + "ln2.weight", hf + "ln_2.weight", {C}));
    AX_RETURN_IF_ERROR(bias(ax + "ln2.bias", hf + "ln_2.bias", C));
    AX_RETURN_IF_ERROR(conv1d(ax + "mlp.fc.weight", hf + "mlp.c_fc.weight", F, C));
    AX_RETURN_IF_ERROR(bias(ax + "mlp.fc.bias", hf + "mlp.c_fc.bias", F));
    AX_RETURN_IF_ERROR(conv1d(ax + "mlp.proj.weight", hf + "mlp.c_proj.weight", C, F));
    AX_RETURN_IF_ERROR(bias(ax + "mlp.proj.bias", hf + "mlp.c_proj.bias", C));
  }
  AX_RETURN_IF_ERROR(plain("lnf.weight", "transformer.ln_f.weight", {C}));
  AX_RETURN_IF_ERROR(bias("lnf.bias", "transformer.ln_f.bias", C));
  if (!m.tied_embeddings) AX_RETURN_IF_ERROR(plain("lm_head.weight", "lm_head.weight", {vocab, C}));

  return Json{{"architectures", {"GPT2LMHeadModel"}},
              {"model_type", "gpt2"},
              {"vocab_size", vocab},
              {"n_positions", m.max_seq_len},
              {"n_ctx", m.max_seq_len},
              {"n_embd", C},
              {"n_layer", m.num_layers},
              {"n_head", m.num_heads},
              {"n_inner", F},
              {"activation_function", "gelu_new"},  // the tanh approximation ax computes
              {"layer_norm_epsilon", m.norm_eps},
              {"tie_word_embeddings", m.tied_embeddings},
              {"torch_dtype", "float32"}};
}

StatusOr<Json> export_llama(const ModelConfig& m, Params* p, Exported* out) {
  AX_RETURN_IF_ERROR(
      check_architecture(m, NormKind::kRmsNorm, Activation::kSwiglu, PositionKind::kRope));
  const int64_t C = m.model_dim, F = m.hidden_dim, HD = m.head_dim();
  const int64_t Q = m.num_heads * HD, KV = m.num_kv_heads * HD;
  auto plain = [&](const std::string& name, const std::string& hf,
                   const std::vector<int64_t>& shape) -> Status {
    AX_ASSIGN_OR_RETURN(const HostTensor* t, p->take(name, shape));
    out->add(hf, t->shape, t->data.data());
    return Status::Ok();
  };
  // qkv rows: queries, keys, values; fc rows: gate, up (docs/parameter-names.md).
  auto split = [&](const std::string& name, const std::vector<int64_t>& shape,
                   const std::vector<std::pair<std::string, int64_t>>& parts) -> Status {
    AX_ASSIGN_OR_RETURN(const HostTensor* t, p->take(name, shape));
    int64_t row = 0;
    for (const auto& [hf, rows] : parts) {
      out->add_rows(hf, *t, row, row + rows);
      row += rows;
    }
    return Status::Ok();
  };

  AX_ASSIGN_OR_RETURN(const HostTensor* wte, p->take("wte", {kAny, C}));
  const int64_t vocab = wte->shape[0];
  out->add("model.embed_tokens.weight", wte->shape, wte->data.data());
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string ax = str_cat("h.", i, ".");
    const std::string hf = str_cat("model.layers.", i, ".");
    const std::string attn = hf + "self_attn.", mlp = hf + "mlp.";
    AX_RETURN_IF_ERROR(plain(ax + "ln1.weight", hf + "input_layernorm.weight", {C}));
    AX_RETURN_IF_ERROR(split(
        ax + "attn.qkv.weight", {Q + 2 * KV, C},
        {{attn + "q_proj.weight", Q}, {attn + "k_proj.weight", KV}, {attn + "v_proj.weight", KV}}));
    AX_RETURN_IF_ERROR(plain(ax + "attn.proj.weight", attn + "o_proj.weight", {C, Q}));
    AX_RETURN_IF_ERROR(plain(ax + "ln2.weight", hf + "post_attention_layernorm.weight", {C}));
    AX_RETURN_IF_ERROR(split(ax + "mlp.fc.weight", {2 * F, C},
                             {{mlp + "gate_proj.weight", F}, {mlp + "up_proj.weight", F}}));
    AX_RETURN_IF_ERROR(plain(ax + "mlp.proj.weight", mlp + "down_proj.weight", {C, F}));
    if (m.bias) {  // Llama's attention_bias and mlp_bias
      AX_RETURN_IF_ERROR(split(
          ax + "attn.qkv.bias", {Q + 2 * KV},
          {{attn + "q_proj.bias", Q}, {attn + "k_proj.bias", KV}, {attn + "v_proj.bias", KV}}));
      AX_RETURN_IF_ERROR(plain(ax + "attn.proj.bias", attn + "o_proj.bias", {C}));
      AX_RETURN_IF_ERROR(split(ax + "mlp.fc.bias", {2 * F},
                               {{mlp + "gate_proj.bias", F}, {mlp + "up_proj.bias", F}}));
      AX_RETURN_IF_ERROR(plain(ax + "mlp.proj.bias", mlp + "down_proj.bias", {C}));
    }
  }
  AX_RETURN_IF_ERROR(plain("lnf.weight", "model.norm.weight", {C}));
  if (!m.tied_embeddings) AX_RETURN_IF_ERROR(plain("lm_head.weight", "lm_head.weight", {vocab, C}));

  return Json{{"architectures", {"LlamaForCausalLM"}},
              {"model_type", "llama"},
              {"vocab_size", vocab},
              {"hidden_size", C},
              {"intermediate_size", F},
              {"num_hidden_layers", m.num_layers},
              {"num_attention_heads", m.num_heads},
              {"num_key_value_heads", m.num_kv_heads},
              {"head_dim", HD},
              {"hidden_act", "silu"},
              {"max_position_embeddings", m.max_seq_len},
              {"rms_norm_eps", m.norm_eps},
              {"rope_theta", m.rope_theta},
              {"attention_bias", m.bias},
              {"mlp_bias", m.bias},
              {"tie_word_embeddings", m.tied_embeddings},
              {"torch_dtype", "float32"}};
}

// T5 v1.1 as T5ForConditionalGeneration (docs/parameter-names.md "T5"). ax divides attention
// logits by sqrt(d_kv) (T5x's GPU recipe); Hugging Face's T5 does not, so its query weights are
// ax's divided by sqrt(d_kv) (exact for d_kv a power of 4, such as 64 and 16).
StatusOr<Json> export_t5(const ModelConfig& m, Params* p, Exported* out) {
  AX_RETURN_IF_ERROR(
      check_architecture(m, NormKind::kRmsNorm, Activation::kGeglu, PositionKind::kRelative));
  if (m.bias || m.tied_embeddings || m.num_kv_heads != m.num_heads) {
    return FailedPrecondition(
        "Hugging Face T5 v1.1 has no biases, an untied LM head and no grouped-query attention: "
        "model.bias=false, model.tied_embeddings=false and model.num_kv_heads=model.num_heads");
  }
  const int64_t C = m.model_dim, F = m.hidden_dim, HD = m.head_dim(), Q = m.num_heads * HD;
  const int64_t E = m.num_layers, D = m.num_decoder_layers > 0 ? m.num_decoder_layers : E;
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(HD));
  auto plain = [&](const std::string& name, const std::string& hf,
                   const std::vector<int64_t>& shape) -> Status {
    AX_ASSIGN_OR_RETURN(const HostTensor* t, p->take(name, shape));
    out->add(hf, t->shape, t->data.data());
    return Status::Ok();
  };
  // Rows of `name` split into Hugging Face tensors; the first `scaled` of them are queries.
  auto split = [&](const std::string& name, int64_t cols, const std::vector<std::string>& parts,
                   int64_t rows_each, size_t scaled) -> Status {
    AX_ASSIGN_OR_RETURN(const HostTensor* t,
                        p->take(name, {rows_each * static_cast<int64_t>(parts.size()), cols}));
    for (size_t k = 0; k < parts.size(); ++k) {
      const int64_t begin = static_cast<int64_t>(k) * rows_each;
      if (k < scaled) {
        std::vector<float> q(t->data.begin() + begin * cols,
                             t->data.begin() + (begin + rows_each) * cols);
        for (float& x : q) x *= q_scale;
        out->add_owned(parts[k], {rows_each, cols}, std::move(q));
      } else {
        out->add_rows(parts[k], *t, begin, begin + rows_each);
      }
    }
    return Status::Ok();
  };
  auto mlp = [&](const std::string& ax, const std::string& hf) -> Status {
    AX_RETURN_IF_ERROR(
        split(ax + "mlp.fc.weight", C, {hf + "wi_0.weight", hf + "wi_1.weight"}, F, 0));
    return plain(ax + "mlp.proj.weight", hf + "wo.weight", {C, F});
  };
  auto self_attention = [&](const std::string& ax, const std::string& hf) -> Status {
    AX_RETURN_IF_ERROR(plain(ax + "ln1.weight", hf + "layer.0.layer_norm.weight", {C}));
    const std::string a = hf + "layer.0.SelfAttention.";
    AX_RETURN_IF_ERROR(
        split(ax + "attn.qkv.weight", C, {a + "q.weight", a + "k.weight", a + "v.weight"}, Q, 1));
    return plain(ax + "attn.proj.weight", a + "o.weight", {C, Q});
  };

  AX_ASSIGN_OR_RETURN(const HostTensor* wte, p->take("wte", {kAny, C}));
  const int64_t vocab = wte->shape[0];
  out->add("shared.weight", wte->shape, wte->data.data());
  for (int64_t i = 0; i < E; ++i) {
    const std::string ax = str_cat("enc.h.", i, "."), hf = str_cat("encoder.block.", i, ".");
    AX_RETURN_IF_ERROR(self_attention(ax, hf));
    AX_RETURN_IF_ERROR(plain(ax + "ln2.weight", hf + "layer.1.layer_norm.weight", {C}));
    AX_RETURN_IF_ERROR(mlp(ax, hf + "layer.1.DenseReluDense."));
  }
  for (int64_t i = 0; i < D; ++i) {
    const std::string ax = str_cat("dec.h.", i, "."), hf = str_cat("decoder.block.", i, ".");
    AX_RETURN_IF_ERROR(self_attention(ax, hf));
    const std::string x = hf + "layer.1.EncDecAttention.";
    AX_RETURN_IF_ERROR(plain(ax + "ln_cross.weight", hf + "layer.1.layer_norm.weight", {C}));
    AX_RETURN_IF_ERROR(split(ax + "cross.q.weight", C, {x + "q.weight"}, Q, 1));
    AX_RETURN_IF_ERROR(split(ax + "cross.kv.weight", C, {x + "k.weight", x + "v.weight"}, Q, 0));
    AX_RETURN_IF_ERROR(plain(ax + "cross.proj.weight", x + "o.weight", {C, Q}));
    AX_RETURN_IF_ERROR(plain(ax + "ln2.weight", hf + "layer.2.layer_norm.weight", {C}));
    AX_RETURN_IF_ERROR(mlp(ax, hf + "layer.2.DenseReluDense."));
  }
  for (const char* stack : {"enc", "dec"}) {
    const std::string hf = std::string(stack) == "enc" ? "encoder." : "decoder.";
    AX_RETURN_IF_ERROR(plain(str_cat(stack, ".rel_bias.weight"),
                             hf + "block.0.layer.0.SelfAttention.relative_attention_bias.weight",
                             {m.relative_buckets, m.num_heads}));
    AX_RETURN_IF_ERROR(plain(str_cat(stack, ".lnf.weight"), hf + "final_layer_norm.weight", {C}));
  }
  AX_RETURN_IF_ERROR(plain("lm_head.weight", "lm_head.weight", {vocab, C}));

  return Json{{"architectures", {"T5ForConditionalGeneration"}},
              {"model_type", "t5"},
              {"is_encoder_decoder", true},
              {"vocab_size", vocab},
              {"d_model", C},
              {"d_ff", F},
              {"d_kv", HD},
              {"num_heads", m.num_heads},
              {"num_layers", E},
              {"num_decoder_layers", D},
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

}  // namespace

Status export_hugging_face(const CheckpointState& state, const Config& config,
                           const std::string& out_dir) {
  const ModelConfig& m = config.model;
  Params params(state);
  Exported exported;
  AX_ASSIGN_OR_RETURN(Json hf_config,
                      m.family == ModelFamily::kGpt  ? export_gpt2(m, &params, &exported)
                      : m.family == ModelFamily::kT5 ? export_t5(m, &params, &exported)
                                                     : export_llama(m, &params, &exported));
  AX_RETURN_IF_ERROR(params.check_all_used());

  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return IoError(str_cat("create ", out_dir), ec.value());
  // Each file under a temporary name first, so an interrupted export leaves no half file.
  const std::string weights = "model.safetensors", config_json = "config.json";
  AX_RETURN_IF_ERROR(
      ckpt::write_safetensors(out_dir, weights + ".tmp", exported.refs, {{"format", "pt"}}, nullptr)
          .status());
  AX_RETURN_IF_ERROR(
      ckpt::write_file(out_dir, config_json + ".tmp", hf_config.dump(2) + "\n", nullptr).status());
  for (const std::string& name : {weights, config_json}) {
    const std::string path = ckpt::join_path(out_dir, name);
    if (std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
      return IoError(str_cat("rename ", path, ".tmp"), errno);
    }
  }
  return ckpt::fsync_dir(out_dir);
}

}  // namespace ax::train
