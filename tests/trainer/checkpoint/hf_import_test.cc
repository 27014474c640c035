// The import side of --init-from: export -> import -> export is byte-identical for GPT-2, Llama
// (GQA) and T5; a rank's regions read from a Hugging Face directory (single file, sharded index,
// BF16 and F16) equal the whole tensors' parts; bad directories fail naming the tensor or key.

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "hf_format.h"
#include "safetensors.h"
#include "test_util.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::same_bits;
using testing::temp_dir;
using testing::write_file;
using Json = nlohmann::json;

constexpr int64_t kImportVocab = 16;

ModelConfig tiny(ModelFamily family) {
  ModelConfig m;
  m.family = family;
  m.num_layers = 2;
  m.model_dim = 8;
  m.num_heads = 2;
  m.num_kv_heads = 2;
  m.hidden_dim = 12;
  m.max_seq_len = 12;
  m.vocab_size = kImportVocab;
  if (family == ModelFamily::kLlama) {
    m.num_heads = 4;  // grouped-query attention: 4 query heads read 2 key/value heads
    m.norm = NormKind::kRmsNorm;
    m.activation = Activation::kSwiglu;
    m.position = PositionKind::kRope;
    m.bias = false;
    m.tied_embeddings = false;
    m.rope_theta = 500000.0;
    m.norm_eps = 1e-6;
  } else if (family == ModelFamily::kT5) {
    m.num_decoder_layers = 1;
    m.kv_channels = 16;  // a power of 4: the query scaling is exact
    m.norm = NormKind::kRmsNorm;
    m.activation = Activation::kGeglu;
    m.position = PositionKind::kRelative;
    m.bias = false;
    m.tied_embeddings = false;
    m.relative_buckets = 8;
    m.relative_max_distance = 20;
    m.norm_eps = 1e-6;
  }
  return m;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Random params/* for every tensor of the model.
CheckpointState random_params(const ModelConfig& m) {
  StatusOr<std::vector<ckpt::HfTensor>> table = ckpt::hf_tensors(m, kImportVocab);
  EXPECT_TRUE(table.ok()) << table.status().to_string();
  CheckpointState state;
  uint64_t seed = 7;
  for (const ckpt::HfTensor& t : table.ok() ? *table : std::vector<ckpt::HfTensor>{}) {
    if (!t.ax.empty())
      state.tensors.push_back(testing::make_tensor("params/" + t.ax, t.shape, ++seed));
  }
  return state;
}

Config config_of(const ModelConfig& m) {
  Config c;
  c.model = m;
  return c;
}

// Every params/* tensor of the source, whole.
std::vector<TensorRegion> whole_regions(const CheckpointState& state) {
  std::vector<TensorRegion> out;
  for (const HostTensor& t : state.tensors) {
    out.push_back({t.name, std::vector<int64_t>(t.shape.size(), 0), t.shape});
  }
  return out;
}

CheckpointState as_whole(CheckpointState s) {
  for (HostTensor& t : s.tensors) {
    t.offset.clear();
    t.logical_shape.clear();
  }
  return s;
}

const HostTensor* find_imported(const CheckpointState& s, const std::string& name) {
  for (const HostTensor& t : s.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void expect_round_trip(const ModelConfig& m) {
  const std::string dir = temp_dir("hf-import");
  const CheckpointState original = random_params(m);
  Status s = export_hugging_face(original, config_of(m), dir + "/first");
  ASSERT_TRUE(s.ok()) << s.to_string();

  StatusOr<InitSource> source = open_init_source(dir + "/first");
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  EXPECT_EQ(source->kind, InitSource::Kind::kHuggingFace);
  EXPECT_EQ(source->model.family, m.family);
  EXPECT_EQ(source->model.num_kv_heads, m.num_kv_heads);
  EXPECT_EQ(source->model.vocab_size, kImportVocab);
  EXPECT_EQ(source->model.rope_theta, m.rope_theta);
  EXPECT_EQ(source->model.rope_scaling, m.rope_scaling);
  if (m.rope_scaling == RopeScalingKind::kLlama3) {
    EXPECT_EQ(source->model.rope_scaling_factor, m.rope_scaling_factor);
    EXPECT_EQ(source->model.rope_low_freq_factor, m.rope_low_freq_factor);
    EXPECT_EQ(source->model.rope_high_freq_factor, m.rope_high_freq_factor);
    EXPECT_EQ(source->model.rope_original_max_positions, m.rope_original_max_positions);
  }
  // Every tensor of the imported model, whole, as a one-process run asks for them.
  StatusOr<CheckpointState> imported =
      load_init_parameters(*source, whole_regions(random_params(source->model)));
  ASSERT_TRUE(imported.ok()) << imported.status().to_string();
  for (const HostTensor& t : original.tensors) {
    const HostTensor* back = find_imported(*imported, t.name);
    ASSERT_NE(back, nullptr) << t.name;
    EXPECT_TRUE(same_bits(back->data, t.data)) << t.name << " changed on the way";
  }

  s = export_hugging_face(as_whole(*imported), config_of(source->model), dir + "/second");
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (const char* file : {"model.safetensors", "config.json"}) {
    EXPECT_EQ(read_file(dir + "/first/" + file), read_file(dir + "/second/" + file))
        << file << " differs after export -> import -> export";
  }
}

TEST(HuggingFaceImport, Gpt2RoundTripIsByteIdentical) {
  expect_round_trip(tiny(ModelFamily::kGpt));
}

TEST(HuggingFaceImport, Gpt2WithoutBiasesRoundTrips) {
  ModelConfig m = tiny(ModelFamily::kGpt);
  m.bias = false;  // exported as zero biases, imported as a model with (zero) biases
  expect_round_trip(m);
}

TEST(HuggingFaceImport, LlamaGqaRoundTripIsByteIdentical) {
  expect_round_trip(tiny(ModelFamily::kLlama));
}

TEST(HuggingFaceImport, T5RoundTripIsByteIdentical) { expect_round_trip(tiny(ModelFamily::kT5)); }

// Llama 3.1's rope_scaling survives export -> import -> export (config.json byte-identical).
TEST(HuggingFaceImport, LlamaLlama3RopeScalingRoundTrips) {
  ModelConfig m = tiny(ModelFamily::kLlama);
  m.rope_scaling = RopeScalingKind::kLlama3;
  m.rope_scaling_factor = 16;
  m.rope_low_freq_factor = 0.5;
  m.rope_high_freq_factor = 3;
  m.rope_original_max_positions = 6;
  expect_round_trip(m);
}

// Splits every tensor into boxes the way FSDP and tensor parallelism do (row blocks, column
// blocks, rows cut mid-way) and checks each box against the whole tensor.
TEST(HuggingFaceImport, RegionsEqualThePartsOfTheWhole) {
  for (ModelFamily family : {ModelFamily::kGpt, ModelFamily::kLlama, ModelFamily::kT5}) {
    const ModelConfig m = tiny(family);
    const std::string dir = temp_dir("hf-regions");
    const CheckpointState original = random_params(m);
    ASSERT_TRUE(export_hugging_face(original, config_of(m), dir).ok());
    StatusOr<InitSource> source = open_init_source(dir);
    ASSERT_TRUE(source.ok()) << source.status().to_string();
    std::vector<TensorRegion> regions;
    for (const HostTensor& t : original.tensors) {
      if (t.shape.size() == 1) {
        const int64_t half = t.shape[0] / 2;
        regions.push_back({t.name, {1}, {half}});
        regions.push_back({t.name, {half}, {t.shape[0] - half}});
      } else {
        const int64_t rows = t.shape[0], cols = t.shape[1];
        regions.push_back({t.name, {rows / 3, 0}, {rows - rows / 3, cols}});  // row block
        regions.push_back({t.name, {0, cols / 2}, {rows, cols - cols / 2}});  // column block
        regions.push_back({t.name, {rows - 1, 1}, {1, cols - 2}});            // inside one row
      }
    }
    StatusOr<CheckpointState> got = load_init_parameters(*source, regions);
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    ASSERT_EQ(got->tensors.size(), regions.size());
    for (size_t i = 0; i < regions.size(); ++i) {
      const HostTensor& whole = *find_imported(original, regions[i].name);
      const HostTensor& box = got->tensors[i];
      EXPECT_EQ(box.logical_shape, whole.shape);
      EXPECT_EQ(box.offset, regions[i].offset);
      const int64_t cols = whole.shape.size() == 2 ? whole.shape[1] : 1;
      const int64_t bcols = box.shape.size() == 2 ? box.shape[1] : 1;
      const int64_t c0 = box.offset.size() == 2 ? box.offset[1] : 0;
      std::vector<float> want;
      for (int64_t r = 0; r < box.shape[0]; ++r) {
        for (int64_t c = 0; c < bcols; ++c) {
          want.push_back(whole.data[(box.offset[0] + r) * cols + c0 + c]);
        }
      }
      EXPECT_TRUE(same_bits(box.data, want))
          << name_of(family) << " " << regions[i].name << " region " << i;
    }
  }
}

// A safetensors file of one dtype, written byte by byte as Hugging Face's library does.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

void write_raw_safetensors(const std::string& path, const std::vector<RawTensor>& tensors) {
  Json header = Json::object();
  uint64_t offset = 0;
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
    data += t.bytes;
  }
  std::string text = header.dump();
  const uint64_t n = text.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  write_file(path, out + text + data);
}

// bf16 / f16 bits of floats that both represent exactly.
std::string half_bytes(const std::vector<float>& v, bool bf16) {
  std::string out;
  for (float x : v) {
    uint16_t h;
    if (bf16) {
      h = static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16);
    } else {  // normal halves only: sign, exponent rebiased 127 -> 15, 10 mantissa bits
      const uint32_t b = std::bit_cast<uint32_t>(x);
      h = static_cast<uint16_t>(((b >> 16) & 0x8000u) | ((((b >> 23) & 0xffu) - 112) << 10) |
                                ((b >> 13) & 0x3ffu));
      if ((b & 0x7fffffffu) == 0) h = static_cast<uint16_t>((b >> 16) & 0x8000u);
    }
    out.append(reinterpret_cast<const char*>(&h), 2);
  }
  return out;
}

// The GPT-2 export of a model re-encoded: every tensor in `dtype` (values rounded to 8 mantissa
// bits first, so they are exact in both), split over two files with an index.
TEST(HuggingFaceImport, ShardedIndexWithBf16AndF16) {
  const ModelConfig m = tiny(ModelFamily::kGpt);
  CheckpointState original = random_params(m);
  for (HostTensor& t : original.tensors) {
    for (float& x : t.data) x = std::bit_cast<float>(std::bit_cast<uint32_t>(x) & 0xffff0000u);
  }
  const std::string dir = temp_dir("hf-sharded");
  ASSERT_TRUE(export_hugging_face(original, config_of(m), dir + "/f32").ok());
  auto reader = ckpt::SafetensorsReader::open(dir + "/f32/model.safetensors");
  ASSERT_TRUE(reader.ok());
  std::vector<RawTensor> files[2];
  Json weight_map = Json::object();
  int k = 0;
  for (const ckpt::SafetensorsEntry& e : reader->entries()) {
    std::vector<float> v(static_cast<size_t>(numel(e.shape)));
    ASSERT_TRUE(reader->read(e, v.data()).ok());
    const bool bf16 = k % 2 == 0;
    // Without the "transformer." prefix, as files saved from GPT2Model have it.
    const std::string name = k % 3 == 0 ? e.key.substr(12) : e.key;
    files[k % 2].push_back({name, bf16 ? "BF16" : "F16", e.shape, half_bytes(v, bf16)});
    weight_map[name] =
        k % 2 ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
    ++k;
  }
  fs::create_directories(dir + "/sharded");
  write_raw_safetensors(dir + "/sharded/model-00001-of-00002.safetensors", files[0]);
  write_raw_safetensors(dir + "/sharded/model-00002-of-00002.safetensors", files[1]);
  write_file(dir + "/sharded/model.safetensors.index.json",
             Json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  fs::copy_file(dir + "/f32/config.json", dir + "/sharded/config.json");

  StatusOr<InitSource> source = open_init_source(dir + "/sharded");
  ASSERT_TRUE(source.ok()) << source.status().to_string();
  StatusOr<CheckpointState> got = load_init_parameters(*source, whole_regions(original));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  for (const HostTensor& t : original.tensors) {
    EXPECT_TRUE(same_bits(find_imported(*got, t.name)->data, t.data)) << t.name;
  }
}

// An exported GPT-2 directory changed by `edit`, then imported: the error's text.
template <typename Edit>
std::string import_error(const ModelConfig& m, Edit edit) {
  const std::string dir = temp_dir("hf-bad");
  const CheckpointState original = random_params(m);
  EXPECT_TRUE(export_hugging_face(original, config_of(m), dir).ok());
  edit(dir);
  StatusOr<InitSource> source = open_init_source(dir);
  if (!source.ok()) return source.status().to_string();
  StatusOr<CheckpointState> got = load_init_parameters(*source, whole_regions(original));
  return got.ok() ? "" : got.status().to_string();
}

// Rewrites model.safetensors with the tensors `change` keeps (and may rename or reshape), then
// `extra`.
template <typename Change>
void rewrite_weights(const std::string& dir, Change change, std::vector<RawTensor> extra = {}) {
  auto reader = ckpt::SafetensorsReader::open(dir + "/model.safetensors");
  ASSERT_TRUE(reader.ok());
  std::vector<RawTensor> out;
  for (const ckpt::SafetensorsEntry& e : reader->entries()) {
    std::vector<float> v(static_cast<size_t>(numel(e.shape)));
    ASSERT_TRUE(reader->read(e, v.data()).ok());
    RawTensor t{e.key, "F32", e.shape,
                std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)};
    if (change(&t)) out.push_back(std::move(t));
  }
  for (RawTensor& t : extra) out.push_back(std::move(t));
  write_raw_safetensors(dir + "/model.safetensors", out);
}

void edit_config(const std::string& dir, const Json& patch) {
  Json config = Json::parse(read_file(dir + "/config.json"));
  config.merge_patch(patch);
  write_file(dir + "/config.json", config.dump());
}

// config.json as Llama 3.1 8B ships it (rope_type "llama3"), and as files from before
// transformers 4.43 name the type ("type").
TEST(HuggingFaceImport, ReadsLlama3RopeScaling) {
  for (const char* key : {"rope_type", "type"}) {
    const std::string dir = temp_dir("hf-llama31");
    const ModelConfig m = tiny(ModelFamily::kLlama);
    ASSERT_TRUE(export_hugging_face(random_params(m), config_of(m), dir).ok());
    edit_config(dir, {{"rope_scaling",
                       {{"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192},
                        {key, "llama3"}}}});
    StatusOr<InitSource> source = open_init_source(dir);
    ASSERT_TRUE(source.ok()) << source.status().to_string();
    EXPECT_EQ(source->model.rope_scaling, RopeScalingKind::kLlama3) << key;
    EXPECT_EQ(source->model.rope_scaling_factor, 8.0);
    EXPECT_EQ(source->model.rope_low_freq_factor, 1.0);
    EXPECT_EQ(source->model.rope_high_freq_factor, 4.0);
    EXPECT_EQ(source->model.rope_original_max_positions, 8192);
    EXPECT_TRUE(validate(config_of(source->model)).ok());
  }
}

TEST(HuggingFaceImport, BadDirectoriesNameTheTensorOrKey) {
  const ModelConfig gpt = tiny(ModelFamily::kGpt);
  const ModelConfig llama = tiny(ModelFamily::kLlama);
  std::string e = import_error(gpt, [](const std::string& dir) {
    rewrite_weights(dir, [](RawTensor* t) { return t->name != "transformer.h.1.mlp.c_fc.weight"; });
  });
  EXPECT_NE(e.find("no tensor 'transformer.h.1.mlp.c_fc.weight'"), std::string::npos) << e;

  e = import_error(gpt, [](const std::string& dir) {
    rewrite_weights(dir, [](RawTensor* t) {
      if (t->name == "transformer.wpe.weight") {
        t->shape = {8, 12};  // the transpose of the config's (12, 8)
      }
      return true;
    });
  });
  EXPECT_NE(e.find("'transformer.wpe.weight' has shape [8,12], config.json implies [12,8]"),
            std::string::npos)
      << e;

  e = import_error(gpt, [](const std::string& dir) {
    rewrite_weights(dir, [](RawTensor*) { return true; },
                    {{"transformer.extra.weight", "F32", {1}, std::string(4, '\0')}});
  });
  EXPECT_NE(e.find("'transformer.extra.weight' has no place in ax's gpt model"), std::string::npos)
      << e;

  e = import_error(gpt, [](const std::string& dir) {
    edit_config(dir, {{"architectures", {"MistralForCausalLM"}}, {"model_type", "mistral"}});
  });
  EXPECT_NE(e.find("\"architectures\" = [\"MistralForCausalLM\"]"), std::string::npos) << e;
  EXPECT_NE(e.find("not an architecture ax imports"), std::string::npos) << e;

  // Scalings other than Llama 3.1's are refused naming the type and what ax implements, in
  // today's key (rope_type) and the older one (type).
  for (const char* key : {"rope_type", "type"}) {
    for (const char* type : {"linear", "dynamic", "yarn", "longrope"}) {
      e = import_error(llama, [&](const std::string& dir) {
        edit_config(dir, {{"rope_scaling", {{key, type}, {"factor", 8.0}}}});
      });
      EXPECT_NE(e.find("\"rope_scaling\""), std::string::npos) << e;
      EXPECT_NE(e.find(str_cat("rope_type \"", type, "\" is not one ax implements")),
                std::string::npos)
          << e;
      EXPECT_NE(e.find("\"default\" and \"llama3\""), std::string::npos) << e;
    }
  }
  e = import_error(llama, [](const std::string& dir) {
    edit_config(dir, {{"rope_scaling", {{"factor", 8.0}}}});
  });
  EXPECT_NE(e.find("has no \"rope_type\""), std::string::npos) << e;
  e = import_error(llama, [](const std::string& dir) {
    edit_config(dir, {{"rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}}});
  });
  EXPECT_NE(e.find("\"rope_scaling\": has no \"low_freq_factor\""), std::string::npos) << e;
  e = import_error(llama, [](const std::string& dir) {
    edit_config(dir, {{"rope_scaling",
                       {{"rope_type", "llama3"},
                        {"factor", 8.0},
                        {"low_freq_factor", 4.0},
                        {"high_freq_factor", 1.0},
                        {"original_max_position_embeddings", 8192}}}});
  });
  EXPECT_NE(e.find("needs high_freq_factor > low_freq_factor"), std::string::npos) << e;
  e = import_error(llama, [](const std::string& dir) {
    edit_config(dir, {{"rope_scaling", {{"rope_type", "default"}}}});  // scales nothing
  });
  EXPECT_EQ(e, "");

  e = import_error(llama, [](const std::string& dir) {
    edit_config(dir, {{"hidden_size", nullptr}});
  });
  EXPECT_NE(e.find("has no \"hidden_size\""), std::string::npos) << e;
}

}  // namespace
}  // namespace ax::train
