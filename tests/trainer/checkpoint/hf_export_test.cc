// Hugging Face export of tiny GPT-2 and Llama models whose params/* tensors are built with the
// shapes of docs/parameter-names.md.

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "safetensors.h"
#include "test_util.h"

namespace ax::train {
namespace {

using testing::make_tensor;
using testing::read_file;
using testing::temp_dir;
using Shapes = std::map<std::string, std::vector<int64_t>>;

constexpr int64_t kVocab = 16;  // padded vocabulary, the rows of wte

Config tiny_gpt() {
  Config c;
  c.model.family = ModelFamily::kGpt;
  c.model.num_layers = 2;
  c.model.model_dim = 8;
  c.model.num_heads = 2;
  c.model.num_kv_heads = 2;
  c.model.hidden_dim = 32;
  c.model.max_seq_len = 12;
  return c;
}

Config tiny_llama() {
  Config c;
  c.model.family = ModelFamily::kLlama;
  c.model.num_layers = 2;
  c.model.model_dim = 8;
  c.model.num_heads = 4;
  c.model.num_kv_heads = 2;
  c.model.hidden_dim = 12;
  c.model.max_seq_len = 64;
  c.model.norm = NormKind::kRmsNorm;
  c.model.activation = Activation::kSwiglu;
  c.model.position = PositionKind::kRope;
  c.model.bias = false;
  c.model.tied_embeddings = false;
  c.model.rope_theta = 500000.0;
  return c;
}

// The ax parameters of a model, by the table of docs/parameter-names.md.
Shapes ax_shapes(const ModelConfig& m) {
  const int64_t C = m.model_dim, HD = m.head_dim(), F = m.hidden_dim;
  const int64_t qkv = (m.num_heads + 2 * m.num_kv_heads) * HD;
  const bool gpt = m.family == ModelFamily::kGpt;
  Shapes s = {{"wte", {kVocab, C}}, {"lnf.weight", {C}}};
  if (gpt) s["wpe"] = {m.max_seq_len, C};
  if (m.bias) s["lnf.bias"] = {C};
  if (!m.tied_embeddings) s["lm_head.weight"] = {kVocab, C};
  for (int64_t i = 0; i < m.num_layers; ++i) {
    const std::string h = "h." + std::to_string(i) + ".";
    s[h + "ln1.weight"] = s[h + "ln2.weight"] = {C};
    s[h + "attn.qkv.weight"] = {qkv, C};
    s[h + "attn.proj.weight"] = {C, m.num_heads * HD};
    s[h + "mlp.fc.weight"] = {gpt ? F : 2 * F, C};
    s[h + "mlp.proj.weight"] = {C, F};
    if (m.bias) {
      s[h + "ln1.bias"] = s[h + "ln2.bias"] = s[h + "attn.proj.bias"] =
          s[h + "mlp.proj.bias"] = {C};
      s[h + "attn.qkv.bias"] = {qkv};
      s[h + "mlp.fc.bias"] = {gpt ? F : 2 * F};
    }
  }
  return s;
}

// params/* with random values, plus optimizer state the export must ignore.
CheckpointState make_params(const ModelConfig& m) {
  CheckpointState state;
  uint64_t seed = 100;
  for (const auto& [name, shape] : ax_shapes(m)) {
    state.tensors.push_back(make_tensor("params/" + name, shape, ++seed));
  }
  state.tensors.push_back(make_tensor("adam_m/wte", {kVocab, m.model_dim}, 1));
  return state;
}

const HostTensor& param(const CheckpointState& s, const std::string& name) {
  for (const HostTensor& t : s.tensors) {
    if (t.name == "params/" + name) return t;
  }
  throw std::runtime_error("no params/" + name);
}

struct Exported {
  Shapes shapes;
  std::map<std::string, std::vector<float>> values;
  std::map<std::string, std::string> metadata;
  nlohmann::json config;
};

Exported read_export(const std::string& dir) {
  Exported e;
  auto reader = ckpt::SafetensorsReader::open(dir + "/model.safetensors");
  EXPECT_TRUE(reader.ok()) << reader.status().to_string();
  if (!reader.ok()) return e;
  for (const ckpt::SafetensorsEntry& entry : reader->entries()) {
    e.shapes[entry.key] = entry.shape;
    std::vector<float>& v = e.values[entry.key];
    v.resize((entry.end - entry.begin) / sizeof(float));
    EXPECT_TRUE(reader->read(entry, v.data()).ok());
  }
  e.metadata = reader->metadata();
  e.config = nlohmann::json::parse(read_file(dir + "/config.json"));
  return e;
}

TEST(HuggingFaceExport, Gpt2NamesShapesAndTransposes) {
  const Config config = tiny_gpt();
  const CheckpointState state = make_params(config.model);
  const std::string dir = temp_dir("hf") + "/gpt2";
  Status s = export_hugging_face(state, config, dir);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const Exported e = read_export(dir);

  Shapes want = {{"transformer.wte.weight", {16, 8}},
                 {"transformer.wpe.weight", {12, 8}},
                 {"transformer.ln_f.weight", {8}},
                 {"transformer.ln_f.bias", {8}}};
  for (int i = 0; i < 2; ++i) {
    const std::string h = "transformer.h." + std::to_string(i) + ".";
    want[h + "ln_1.weight"] = want[h + "ln_1.bias"] = {8};
    want[h + "ln_2.weight"] = want[h + "ln_2.bias"] = {8};
    want[h + "attn.c_attn.weight"] = {8, 24};
    want[h + "attn.c_attn.bias"] = {24};
    want[h + "attn.c_proj.weight"] = {8, 8};
    want[h + "attn.c_proj.bias"] = {8};
    want[h + "mlp.c_fc.weight"] = {8, 32};
    want[h + "mlp.c_fc.bias"] = {32};
    want[h + "mlp.c_proj.weight"] = {32, 8};
    want[h + "mlp.c_proj.bias"] = {8};
  }
  EXPECT_EQ(e.shapes, want);  // the tied lm_head is left out
  EXPECT_EQ(e.metadata.at("format"), "pt");

  // Conv1D stores (in, out): exported[c][r] == ax[r][c].
  const HostTensor& qkv = param(state, "h.1.attn.qkv.weight");  // (24, 8)
  const std::vector<float>& c_attn = e.values.at("transformer.h.1.attn.c_attn.weight");
  for (int r = 0; r < 24; ++r) {
    for (int c = 0; c < 8; ++c) ASSERT_EQ(c_attn[c * 24 + r], qkv.data[r * 8 + c]) << r << "," << c;
  }
  const HostTensor& fc_proj = param(state, "h.0.mlp.proj.weight");  // (8, 32)
  const std::vector<float>& c_proj = e.values.at("transformer.h.0.mlp.c_proj.weight");
  EXPECT_EQ(c_proj[5 * 8 + 3], fc_proj.data[3 * 32 + 5]);
  EXPECT_EQ(e.values.at("transformer.h.0.ln_2.bias"), param(state, "h.0.ln2.bias").data);

  const nlohmann::json& c = e.config;
  EXPECT_EQ(c["model_type"], "gpt2");
  EXPECT_EQ(c["architectures"], nlohmann::json::array({"GPT2LMHeadModel"}));
  EXPECT_EQ(c["n_layer"], 2);
  EXPECT_EQ(c["n_embd"], 8);
  EXPECT_EQ(c["n_head"], 2);
  EXPECT_EQ(c["n_positions"], 12);
  EXPECT_EQ(c["vocab_size"], kVocab);
  EXPECT_EQ(c["n_inner"], 32);
  EXPECT_DOUBLE_EQ(c["layer_norm_epsilon"].get<double>(), 1e-5);
  EXPECT_EQ(c["tie_word_embeddings"], true);
}

TEST(HuggingFaceExport, Gpt2UntiedKeepsLmHead) {
  Config config = tiny_gpt();
  config.model.tied_embeddings = false;
  const CheckpointState state = make_params(config.model);
  const std::string dir = temp_dir("hf");
  ASSERT_TRUE(export_hugging_face(state, config, dir).ok());
  const Exported e = read_export(dir);
  EXPECT_EQ(e.values.at("lm_head.weight"), param(state, "lm_head.weight").data);
  EXPECT_EQ(e.config["tie_word_embeddings"], false);
}

TEST(HuggingFaceExport, LlamaNamesShapesAndSplits) {
  const Config config = tiny_llama();  // C 8, 4 heads of 2, 2 kv heads, F 12, untied
  const CheckpointState state = make_params(config.model);
  const std::string dir = temp_dir("hf");
  Status s = export_hugging_face(state, config, dir);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const Exported e = read_export(dir);

  Shapes want = {{"model.embed_tokens.weight", {16, 8}},
                 {"model.norm.weight", {8}},
                 {"lm_head.weight", {16, 8}}};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "model.layers." + std::to_string(i) + ".";
    want[l + "input_layernorm.weight"] = want[l + "post_attention_layernorm.weight"] = {8};
    want[l + "self_attn.q_proj.weight"] = {8, 8};
    want[l + "self_attn.k_proj.weight"] = {4, 8};
    want[l + "self_attn.v_proj.weight"] = {4, 8};
    want[l + "self_attn.o_proj.weight"] = {8, 8};
    want[l + "mlp.gate_proj.weight"] = {12, 8};
    want[l + "mlp.up_proj.weight"] = {12, 8};
    want[l + "mlp.down_proj.weight"] = {8, 12};
  }
  EXPECT_EQ(e.shapes, want);

  // qkv rows: q [0, 8), k [8, 12), v [12, 16); fc rows: gate [0, 12), up [12, 24).
  const std::vector<float>& qkv = param(state, "h.1.attn.qkv.weight").data;
  EXPECT_EQ(e.values.at("model.layers.1.self_attn.q_proj.weight"),
            std::vector<float>(qkv.begin(), qkv.begin() + 8 * 8));
  EXPECT_EQ(e.values.at("model.layers.1.self_attn.k_proj.weight"),
            std::vector<float>(qkv.begin() + 8 * 8, qkv.begin() + 12 * 8));
  EXPECT_EQ(e.values.at("model.layers.1.self_attn.v_proj.weight"),
            std::vector<float>(qkv.begin() + 12 * 8, qkv.end()));
  const std::vector<float>& fc = param(state, "h.0.mlp.fc.weight").data;
  EXPECT_EQ(e.values.at("model.layers.0.mlp.up_proj.weight"),
            std::vector<float>(fc.begin() + 12 * 8, fc.end()));
  EXPECT_EQ(e.values.at("model.layers.0.mlp.down_proj.weight"),
            param(state, "h.0.mlp.proj.weight").data);

  const nlohmann::json& c = e.config;
  EXPECT_EQ(c["model_type"], "llama");
  EXPECT_EQ(c["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(c["hidden_size"], 8);
  EXPECT_EQ(c["intermediate_size"], 12);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["num_key_value_heads"], 2);
  EXPECT_EQ(c["num_hidden_layers"], 2);
  EXPECT_EQ(c["vocab_size"], kVocab);
  EXPECT_EQ(c["max_position_embeddings"], 64);
  EXPECT_DOUBLE_EQ(c["rms_norm_eps"].get<double>(), 1e-5);
  EXPECT_DOUBLE_EQ(c["rope_theta"].get<double>(), 500000.0);
  EXPECT_EQ(c["tie_word_embeddings"], false);
  EXPECT_FALSE(c.contains("rope_scaling")) << "a model without scaling writes none";
}

// Llama 3.1's rope_scaling, in the keys and types Hugging Face writes it with.
TEST(HuggingFaceExport, LlamaWritesLlama3RopeScaling) {
  Config config = tiny_llama();
  config.model.rope_scaling = RopeScalingKind::kLlama3;
  config.model.rope_scaling_factor = 32;
  config.model.rope_low_freq_factor = 1.5;
  config.model.rope_high_freq_factor = 6;
  config.model.rope_original_max_positions = 16;
  const std::string dir = temp_dir("hf");
  ASSERT_TRUE(export_hugging_face(make_params(config.model), config, dir).ok());
  const nlohmann::json& c = read_export(dir).config;
  ASSERT_TRUE(c.contains("rope_scaling")) << c.dump();
  const nlohmann::json& r = c["rope_scaling"];
  EXPECT_EQ(r["rope_type"], "llama3");
  EXPECT_DOUBLE_EQ(r["factor"].get<double>(), 32);
  EXPECT_DOUBLE_EQ(r["low_freq_factor"].get<double>(), 1.5);
  EXPECT_DOUBLE_EQ(r["high_freq_factor"].get<double>(), 6);
  EXPECT_TRUE(r["original_max_position_embeddings"].is_number_integer()) << r.dump();
  EXPECT_EQ(r["original_max_position_embeddings"], 16);
}

TEST(HuggingFaceExport, LlamaTiedOmitsLmHead) {
  Config config = tiny_llama();
  config.model.tied_embeddings = true;
  const std::string dir = temp_dir("hf");
  ASSERT_TRUE(export_hugging_face(make_params(config.model), config, dir).ok());
  const Exported e = read_export(dir);
  EXPECT_EQ(e.shapes.count("lm_head.weight"), 0u);
  EXPECT_EQ(e.config["tie_word_embeddings"], true);
}

TEST(HuggingFaceExport, MismatchesAreErrors) {
  const Config gpt = tiny_gpt();
  CheckpointState missing = make_params(gpt.model);
  missing.tensors.erase(missing.tensors.begin());  // params/attn... whichever sorts first
  Status s = export_hugging_face(missing, gpt, temp_dir("hf"));
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.to_string();
  EXPECT_NE(s.message().find("params/"), std::string::npos);

  CheckpointState extra = make_params(gpt.model);
  extra.tensors.push_back(make_tensor("params/h.0.attn.gate", {8}, 1));
  s = export_hugging_face(extra, gpt, temp_dir("hf"));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("params/h.0.attn.gate"), std::string::npos) << s.to_string();

  Config swiglu_gpt = gpt;
  swiglu_gpt.model.activation = Activation::kSwiglu;
  EXPECT_EQ(export_hugging_face(make_params(gpt.model), swiglu_gpt, temp_dir("hf")).code(),
            StatusCode::kFailedPrecondition);
  Config wrong_dim = gpt;
  wrong_dim.model.model_dim = 16;
  EXPECT_EQ(export_hugging_face(make_params(gpt.model), wrong_dim, temp_dir("hf")).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace ax::train
