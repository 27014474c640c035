#include "ax/trainer/checkpoint/checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint_io.h"
#include "test_util.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using testing::list_dir;
using testing::make_tensor;
using testing::read_file;
using testing::same_bits;
using testing::temp_dir;
using testing::write_file;

const std::vector<std::string> kStepFiles = {
    "COMMIT",   "config.json",  "loader.json", "rank_00000.safetensors",
    "rng.json", "tensors.json", "trainer.json"};

// Parameters, optimizer moments, and the four blobs the train loop saves.
CheckpointState make_state(int64_t step, uint64_t seed = 7) {
  CheckpointState s;
  s.step = step;
  s.tensors.push_back(make_tensor("params/wte", {16, 8}, seed));
  s.tensors.push_back(make_tensor("params/h.0.attn.qkv.weight", {24, 8}, seed + 1));
  s.tensors.push_back(make_tensor("params/lnf.bias", {8}, seed + 2));
  s.tensors.push_back(make_tensor("adam_m/wte", {16, 8}, seed + 3));
  s.tensors.push_back(make_tensor("adam_v/wte", {16, 8}, seed + 4));
  // Values whose bits a sloppy round trip would change.
  s.tensors[2].data[0] = -0.0f;
  s.tensors[2].data[1] = std::numeric_limits<float>::quiet_NaN();
  s.tensors[2].data[2] = std::numeric_limits<float>::denorm_min();
  s.tensors[2].data[3] = -std::numeric_limits<float>::infinity();
  s.blobs["config.json"] = "{\"model\": {\"family\": \"gpt\"}}\n";
  s.blobs["loader.json"] = "{\"epoch\": 0, \"consumed\": " + std::to_string(step * 3) + "}\n";
  s.blobs["rng.json"] = "{\"seed\": 1234}\n";
  s.blobs["trainer.json"] = "{\"step\": " + std::to_string(step) + "}\n";
  return s;
}

void expect_same(const CheckpointState& a, const CheckpointState& b) {
  EXPECT_EQ(a.step, b.step);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].name, b.tensors[i].name);
    EXPECT_EQ(a.tensors[i].shape, b.tensors[i].shape);
    EXPECT_TRUE(b.tensors[i].logical_shape.empty());
    EXPECT_TRUE(b.tensors[i].offset.empty());
    EXPECT_TRUE(same_bits(a.tensors[i].data, b.tensors[i].data)) << a.tensors[i].name;
  }
  EXPECT_EQ(a.blobs, b.blobs);
}

// Sets AX_CHECKPOINT_FAIL_AFTER_BYTES for one scope.
class FailAfterBytes {
 public:
  explicit FailAfterBytes(const std::string& value) {
    ::setenv("AX_CHECKPOINT_FAIL_AFTER_BYTES", value.c_str(), 1);
  }
  ~FailAfterBytes() { ::unsetenv("AX_CHECKPOINT_FAIL_AFTER_BYTES"); }
};

// Recomputes the sizes and hashes of tensors.json and COMMIT after a test edits a file, so that
// what is tested is the check behind the checksums.
void reseal(const std::string& dir) {
  auto update = [&](const std::string& file, bool skip_index) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(read_file(dir + "/" + file));
    for (auto& [name, entry] : j["files"].items()) {
      if (skip_index && name == "tensors.json") continue;
      auto rec = ckpt::hash_file(dir, name);
      ASSERT_TRUE(rec.ok());
      entry["size"] = rec->size;
      entry["xxh64"] = ckpt::hex64(rec->xxh64);
    }
    write_file(dir + "/" + file, j.dump(1));
  };
  update("tensors.json", false);
  update("COMMIT", false);
}

TEST(Checkpoint, RoundTripIsBitExact) {
  const std::string run = temp_dir("ckpt");
  CheckpointManager m(run, 3);
  const CheckpointState state = make_state(120);
  ASSERT_TRUE(m.save(state).ok());
  EXPECT_EQ(m.step_dir(120), run + "/checkpoints/step_00000120");
  EXPECT_EQ(list_dir(run + "/checkpoints"), std::vector<std::string>{"step_00000120"});
  EXPECT_EQ(list_dir(m.step_dir(120)), kStepFiles);

  auto loaded = m.load(120);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  expect_same(state, *loaded);

  // tensors.json: every logical tensor with its one slice, and every file's size and XXH64.
  const auto index = nlohmann::json::parse(read_file(m.step_dir(120) + "/tensors.json"));
  const auto& wte = index["tensors"]["params/wte"];
  EXPECT_EQ(wte["dtype"], "F32");
  EXPECT_EQ(wte["shape"], nlohmann::json::array({16, 8}));
  ASSERT_EQ(wte["slices"].size(), 1u);
  EXPECT_EQ(wte["slices"][0]["file"], "rank_00000.safetensors");
  EXPECT_EQ(wte["slices"][0]["offset"], nlohmann::json::array({0, 0}));
  EXPECT_EQ(index["files"].size(), 5u);
  const auto commit = nlohmann::json::parse(read_file(m.step_dir(120) + "/COMMIT"));
  EXPECT_EQ(commit["step"], 120);
  EXPECT_EQ(commit["files"].size(), 6u);
  EXPECT_EQ(commit["files"]["rng.json"]["size"], state.blobs.at("rng.json").size());
}

TEST(Checkpoint, LatestAndKeepNewest) {
  const std::string run = temp_dir("ckpt");
  CheckpointManager m(run, 2);
  auto none = m.latest();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  for (int64_t step : {10, 20, 30}) {
    ASSERT_TRUE(m.save(make_state(step)).ok());
    EXPECT_EQ(**m.latest(), step);
  }
  EXPECT_EQ(list_dir(run + "/checkpoints"),
            (std::vector<std::string>{"step_00000020", "step_00000030"}));
  EXPECT_EQ(m.load(10).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(m.load(20).ok());

  // Saving an older step than the newest never removes the one just saved.
  ASSERT_TRUE(m.save(make_state(5)).ok());
  EXPECT_EQ(list_dir(run + "/checkpoints"),
            (std::vector<std::string>{"step_00000005", "step_00000030"}));
  EXPECT_EQ(**m.latest(), 30);

  // keep <= 0 keeps everything.
  CheckpointManager all(temp_dir("ckpt"), 0);
  for (int64_t step : {1, 2, 3, 4}) ASSERT_TRUE(all.save(make_state(step)).ok());
  EXPECT_EQ(**all.latest(), 4);
  EXPECT_TRUE(all.load(1).ok());
}

TEST(Checkpoint, SavingAStepAgainReplacesIt) {
  const std::string run = temp_dir("ckpt");
  CheckpointManager m(run, 3);
  ASSERT_TRUE(m.save(make_state(8, /*seed=*/1)).ok());
  const CheckpointState again = make_state(8, /*seed=*/2);
  ASSERT_TRUE(m.save(again).ok());
  expect_same(again, *m.load(8));
  EXPECT_EQ(list_dir(run + "/checkpoints"), std::vector<std::string>{"step_00000008"});
}

TEST(Checkpoint, CrashLeftoversAreIgnoredThenCleaned) {
  const std::string run = temp_dir("ckpt");
  CheckpointManager m(run, 3);
  const CheckpointState ten = make_state(10);
  ASSERT_TRUE(m.save(ten).ok());
  // A crash after the rename but before COMMIT, and one in the middle of writing.
  const std::string renamed = m.step_dir(20), tmp = m.step_dir(30) + ".tmp-999999";
  fs::copy(m.step_dir(10), renamed);
  fs::remove(renamed + "/COMMIT");
  fs::copy(m.step_dir(10), tmp);
  EXPECT_EQ(**m.latest(), 10);
  auto refused = m.load(20);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("COMMIT"), std::string::npos);
  EXPECT_EQ(m.load(30).status().code(), StatusCode::kNotFound);

  ASSERT_TRUE(m.save(make_state(15)).ok());
  EXPECT_EQ(list_dir(run + "/checkpoints"),
            (std::vector<std::string>{"step_00000010", "step_00000015"}));
  expect_same(ten, *m.load(10));

  // An uncommitted directory of the very step being saved is replaced.
  fs::copy(m.step_dir(10), renamed);
  fs::remove(renamed + "/COMMIT");
  const CheckpointState twenty = make_state(20, /*seed=*/5);
  ASSERT_TRUE(m.save(twenty).ok());
  expect_same(twenty, *m.load(20));
}

TEST(Checkpoint, CorruptionIsDataLossNamingTheFile) {
  CheckpointManager m(temp_dir("ckpt"), 3);
  ASSERT_TRUE(m.save(make_state(3)).ok());
  const std::string dir = m.step_dir(3);
  for (const std::string name : {"rank_00000.safetensors", "tensors.json", "loader.json"}) {
    SCOPED_TRACE(name);
    std::string bytes = read_file(dir + "/" + name);
    const std::string original = bytes;
    bytes[bytes.size() / 2] ^= 0x20;
    write_file(dir + "/" + name, bytes);
    auto loaded = m.load(3);
    EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss) << loaded.status().to_string();
    EXPECT_NE(loaded.status().message().find(name), std::string::npos)
        << loaded.status().to_string();
    EXPECT_NE(loaded.status().message().find("XXH64"), std::string::npos);
    write_file(dir + "/" + name, original);
  }
  EXPECT_TRUE(m.load(3).ok());
}

TEST(Checkpoint, MissingOrTruncatedFilesAreDataLoss) {
  CheckpointManager m(temp_dir("ckpt"), 3);
  ASSERT_TRUE(m.save(make_state(3)).ok());
  const std::string dir = m.step_dir(3);

  const std::string rng = read_file(dir + "/rng.json");
  fs::remove(dir + "/rng.json");
  auto missing = m.load(3);
  EXPECT_EQ(missing.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(missing.status().message().find("rng.json: missing"), std::string::npos)
      << missing.status().to_string();
  write_file(dir + "/rng.json", rng);

  const std::string rank = dir + "/rank_00000.safetensors";
  const auto size = fs::file_size(rank);
  fs::resize_file(rank, size - 10);
  auto truncated = m.load(3);
  EXPECT_EQ(truncated.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(truncated.status().message().find("rank_00000.safetensors"), std::string::npos)
      << truncated.status().to_string();
  EXPECT_NE(truncated.status().message().find("truncated"), std::string::npos);
}

TEST(Checkpoint, MissingOrBadCommitIsRefused) {
  CheckpointManager m(temp_dir("ckpt"), 3);
  ASSERT_TRUE(m.save(make_state(2)).ok());
  ASSERT_TRUE(m.save(make_state(4)).ok());
  const std::string commit = m.step_dir(4) + "/COMMIT";
  const std::string text = read_file(commit);
  write_file(commit, "{\"format\": \"ax-checkpoint\", \"ver");
  auto bad = m.load(4);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("COMMIT"), std::string::npos);

  fs::remove(commit);
  auto refused = m.load(4);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("no COMMIT"), std::string::npos)
      << refused.status().to_string();
  EXPECT_EQ(**m.latest(), 2);
}

TEST(Checkpoint, ValidChecksumsButBrokenContentIsDataLoss) {
  CheckpointManager m(temp_dir("ckpt"), 3);
  ASSERT_TRUE(m.save(make_state(6)).ok());
  const std::string dir = m.step_dir(6);
  const std::string rank = dir + "/rank_00000.safetensors";
  // A bad safetensors header JSON, checksums updated to match.
  std::string bytes = read_file(rank);
  bytes[8] = '[';
  write_file(rank, bytes);
  reseal(dir);
  auto loaded = m.load(6);
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("rank_00000.safetensors"), std::string::npos)
      << loaded.status().to_string();
  EXPECT_NE(loaded.status().message().find("not a JSON object"), std::string::npos);
}

TEST(Checkpoint, FullDiskLeavesThePreviousCheckpoint) {
  const std::string run = temp_dir("ckpt");
  CheckpointManager m(run, 3);
  const CheckpointState one = make_state(1);
  ASSERT_TRUE(m.save(one).ok());
  uint64_t total = 0;  // what a save of the same state writes (COMMIT.tmp becomes COMMIT)
  for (const std::string& name : list_dir(m.step_dir(1))) {
    total += fs::file_size(m.step_dir(1) + "/" + name);
  }
  const uint64_t commit = fs::file_size(m.step_dir(1) + "/COMMIT");
  const uint64_t rank = fs::file_size(m.step_dir(1) + "/rank_00000.safetensors");

  // Failing in the rank file, in the blobs, at the end of tensors.json and at the end of COMMIT
  // (after the rename).
  for (uint64_t budget : {uint64_t{0}, uint64_t{100}, rank + 10, total - commit - 1, total - 1}) {
    SCOPED_TRACE(budget);
    FailAfterBytes fail(std::to_string(budget));
    Status s = m.save(make_state(2));
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.to_string();
    EXPECT_NE(s.message().find("step_00000002"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("No space left"), std::string::npos) << s.to_string();
    EXPECT_EQ(list_dir(run + "/checkpoints"), std::vector<std::string>{"step_00000001"});
    EXPECT_EQ(**m.latest(), 1);
    auto loaded = m.load(1);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    expect_same(one, *loaded);
  }
  {
    FailAfterBytes exactly_enough(std::to_string(total));
    EXPECT_TRUE(m.save(make_state(2)).ok());
  }
  EXPECT_EQ(**m.latest(), 2);
  FailAfterBytes invalid("lots");
  EXPECT_EQ(m.save(make_state(3)).code(), StatusCode::kInvalidArgument);
}

TEST(Checkpoint, UnwritableDirectoryFailsCleanly) {
  const std::string run = temp_dir("ckpt");
  write_file(run + "/checkpoints", "not a directory");
  CheckpointManager m(run, 3);
  Status s = m.save(make_state(1));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(run + "/checkpoints"), std::string::npos) << s.to_string();
  EXPECT_EQ(list_dir(run), std::vector<std::string>{"checkpoints"});
}

TEST(Checkpoint, BadStateIsInvalidArgumentAndLeavesNothing) {
  const std::string run = temp_dir("ckpt");
  CheckpointManager m(run, 3);
  CheckpointState bad = make_state(1);
  bad.tensors[0].data.pop_back();
  EXPECT_EQ(m.save(bad).code(), StatusCode::kInvalidArgument);
  CheckpointState bad_blob = make_state(1);
  bad_blob.blobs["../escape.json"] = "{}";
  EXPECT_EQ(m.save(bad_blob).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(list_dir(run + "/checkpoints").empty());
  EXPECT_FALSE(m.latest()->has_value());
}

}  // namespace
}  // namespace ax::train
