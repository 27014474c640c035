#include "safetensors.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace ax::train::ckpt {
namespace {

using ax::train::testing::random_values;
using ax::train::testing::read_file;
using ax::train::testing::same_bits;
using ax::train::testing::temp_dir;
using ax::train::testing::write_file;

// A safetensors file made by hand: the 8-byte length, the header text as given, `data_bytes`
// zero bytes.
std::string raw_file(const std::string& header, size_t data_bytes) {
  const uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + header + std::string(data_bytes, '\0');
}

TEST(Safetensors, RoundTripKeepsOrderShapesValuesAndMetadata) {
  const std::string dir = temp_dir("st");
  const std::vector<float> a = random_values(1, 6), b = random_values(2, 5), scalar = {-0.0f};
  const std::vector<TensorRef> tensors = {{"a.weight", {2, 3}, a.data()},
                                          {"empty", {0, 4}, nullptr},
                                          {"b", {5}, b.data()},
                                          {"scalar", {}, scalar.data()}};
  auto rec = write_safetensors(dir, "x.safetensors", tensors, {{"format", "pt"}}, nullptr);
  ASSERT_TRUE(rec.ok()) << rec.status().to_string();
  const std::string bytes = read_file(dir + "/x.safetensors");
  EXPECT_EQ(rec->size, bytes.size());

  // The header length is little-endian, the header starts with '{' and is padded with spaces to
  // an 8-byte boundary, and the data follows it contiguously.
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes[8], '{');
  EXPECT_EQ(bytes.size(), 8 + n + (6 + 5 + 1) * 4);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  EXPECT_EQ(header["a.weight"]["dtype"], "F32");
  EXPECT_EQ(header["a.weight"]["data_offsets"], nlohmann::json::array({0, 24}));
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({24, 44}));

  auto reader = SafetensorsReader::open(dir + "/x.safetensors");
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  ASSERT_EQ(reader->entries().size(), 4u);
  EXPECT_EQ(reader->metadata().at("format"), "pt");
  const SafetensorsEntry* e = reader->find("a.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{2, 3}));
  std::vector<float> got(6);
  ASSERT_TRUE(reader->read(*e, got.data()).ok());
  EXPECT_TRUE(same_bits(got, a));
  got.resize(5);
  ASSERT_TRUE(reader->read(*reader->find("b"), got.data()).ok());
  EXPECT_TRUE(same_bits(got, b));
  got.resize(1);
  ASSERT_TRUE(reader->read(*reader->find("scalar"), got.data()).ok());
  EXPECT_TRUE(same_bits(got, scalar));
  EXPECT_EQ(reader->find("empty")->shape, (std::vector<int64_t>{0, 4}));
  EXPECT_EQ(reader->find("missing"), nullptr);
}

TEST(Safetensors, WriterRejectsRepeatedKeys) {
  const std::string dir = temp_dir("st");
  const std::vector<float> a = {1, 2};
  auto rec = write_safetensors(dir, "x.safetensors", {{"k", {2}, a.data()}, {"k", {2}, a.data()}},
                               {}, nullptr);
  EXPECT_EQ(rec.status().code(), StatusCode::kInvalidArgument);
}

struct BadFile {
  const char* what;
  std::string bytes;
  StatusCode code;
  const char* message;  // a part of the error message
};

TEST(Safetensors, ReaderRejectsBrokenFiles) {
  const std::string f32_2 = R"("dtype":"F32","shape":[2])";
  const std::vector<BadFile> cases = {
      {"shorter than the length", std::string("\x10\0\0", 3), StatusCode::kDataLoss, "too short"},
      {"header past the end", raw_file("{}", 0).substr(0, 9), StatusCode::kDataLoss,
       "does not fit"},
      {"bad header JSON", raw_file("{\"a\": [1, 2", 0), StatusCode::kDataLoss, "not a JSON object"},
      {"header not an object", raw_file("[1, 2]  ", 0), StatusCode::kDataLoss, "not a JSON object"},
      {"unknown dtype", raw_file(R"({"a":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8),
       StatusCode::kDataLoss, "unknown dtype"},
      {"other dtype", raw_file(R"({"a":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16),
       StatusCode::kUnimplemented, "I64"},
      {"size not shape*4", raw_file("{\"a\":{" + f32_2 + ",\"data_offsets\":[0,4]}}", 4),
       StatusCode::kDataLoss, "do not hold shape"},
      {"negative dim", raw_file(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       StatusCode::kDataLoss, "bad shape"},
      {"overlap",
       raw_file("{\"a\":{" + f32_2 + ",\"data_offsets\":[0,8]},\"b\":{" + f32_2 +
                    ",\"data_offsets\":[4,12]}}",
                12),
       StatusCode::kDataLoss, "overlaps"},
      {"gap",
       raw_file("{\"a\":{" + f32_2 + ",\"data_offsets\":[0,8]},\"b\":{" + f32_2 +
                    ",\"data_offsets\":[12,20]}}",
                20),
       StatusCode::kDataLoss, "gap"},
      {"data truncated", raw_file("{\"a\":{" + f32_2 + ",\"data_offsets\":[0,8]}}", 5),
       StatusCode::kDataLoss, "truncated"},
      {"trailing bytes", raw_file("{\"a\":{" + f32_2 + ",\"data_offsets\":[0,8]}}", 12),
       StatusCode::kDataLoss, "after the last tensor"},
      {"missing offsets", raw_file("{\"a\":{" + f32_2 + "}}", 8), StatusCode::kDataLoss,
       "data_offsets"},
      {"metadata not strings", raw_file(R"({"__metadata__":{"n":1}})", 0), StatusCode::kDataLoss,
       "not a string"},
  };
  const std::string dir = temp_dir("st");
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir + "/bad.safetensors";
    write_file(path, c.bytes);
    auto reader = SafetensorsReader::open(path);
    ASSERT_FALSE(reader.ok());
    EXPECT_EQ(reader.status().code(), c.code) << reader.status().to_string();
    EXPECT_NE(reader.status().message().find(c.message), std::string::npos)
        << reader.status().to_string();
    EXPECT_NE(reader.status().message().find(path), std::string::npos)
        << "the error names the file: " << reader.status().to_string();
  }
}

TEST(Safetensors, TruncatedWrittenFileIsDataLoss) {
  const std::string dir = temp_dir("st");
  const std::vector<float> a = random_values(3, 100);
  ASSERT_TRUE(
      write_safetensors(dir, "x.safetensors", {{"a", {10, 10}, a.data()}}, {}, nullptr).ok());
  std::filesystem::resize_file(dir + "/x.safetensors", 8 + 100);
  auto reader = SafetensorsReader::open(dir + "/x.safetensors");
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status().to_string();
}

}  // namespace
}  // namespace ax::train::ckpt
