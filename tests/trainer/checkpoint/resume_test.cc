// CheckpointManager::resume(): a checkpoint that fails verification is moved aside and the next
// newest one restored (or, with kRefuse, the error returned); every rank lands on the same step
// and only rank 0 renames.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "test_util.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using testing::list_dir;
using testing::make_tensor;
using testing::read_file;
using testing::temp_dir;
using testing::write_file;

CheckpointState resume_state(int64_t step) {
  CheckpointState s;
  s.step = step;
  s.tensors.push_back(make_tensor("params/wte", {16, 8}, static_cast<uint64_t>(step)));
  s.blobs["trainer.json"] = "{\"step\": " + std::to_string(step) + "}\n";
  return s;
}

const std::vector<TensorRegion> kWholeWte = {{"params/wte", {0, 0}, {16, 8}}};

// A run directory with committed checkpoints of steps 20 and 40.
std::string run_with_20_and_40(const std::string& tag) {
  const std::string run = temp_dir(tag);
  CheckpointManager m(run, 3);
  EXPECT_TRUE(m.save(resume_state(20)).ok());
  EXPECT_TRUE(m.save(resume_state(40)).ok());
  return run;
}

void flip_middle_byte(const std::string& path) {
  std::string bytes = read_file(path);
  bytes[bytes.size() / 2] ^= 0x20;
  write_file(path, bytes);
}

// The ways a step directory goes bad, and what the error names: the file and the check.
struct Damage {
  const char* what;
  void (*apply)(const std::string& step_dir);
  const char* file;
  const char* check;
};
const Damage kDamages[] = {
    {"a flipped byte in a tensor file",
     [](const std::string& d) { flip_middle_byte(d + "/rank_00000.safetensors"); },
     "rank_00000.safetensors", "does not match"},
    {"a deleted file", [](const std::string& d) { fs::remove(d + "/trainer.json"); },
     "trainer.json", "missing"},
    {"truncated metadata", [](const std::string& d) { fs::resize_file(d + "/tensors.json", 10); },
     "tensors.json", "truncated"},
};

// Resumes one process, recording the steps `restore` was handed.
StatusOr<ResumeChoice> resume_one(const std::string& run, OnCorruptCheckpoint on_corrupt,
                                  std::vector<int64_t>* restored) {
  return CheckpointManager(run, 3).resume(kWholeWte, CheckpointGroup{}, on_corrupt,
                                          [&](const CheckpointState& s) {
                                            restored->push_back(s.step);
                                            return Status::Ok();
                                          });
}

TEST(ResumeFallback, CorruptNewestIsMovedAsideAndTheOlderOneRestored) {
  for (const Damage& damage : kDamages) {
    SCOPED_TRACE(damage.what);
    const std::string run = run_with_20_and_40("resume-fallback");
    CheckpointManager m(run, 2);
    damage.apply(m.step_dir(40));
    std::vector<int64_t> restored;
    StatusOr<ResumeChoice> choice = resume_one(run, OnCorruptCheckpoint::kFallback, &restored);
    ASSERT_TRUE(choice.ok()) << choice.status().to_string();
    EXPECT_EQ(choice->step, std::optional<int64_t>(20));
    EXPECT_EQ(restored, std::vector<int64_t>{20});
    ASSERT_EQ(choice->moved_aside.size(), 1u);
    const std::string moved = choice->moved_aside[0];
    EXPECT_EQ(fs::path(moved).filename().string().rfind("step_00000040.corrupt-", 0), 0u) << moved;
    EXPECT_TRUE(fs::is_directory(moved));
    EXPECT_FALSE(fs::exists(m.step_dir(40)));
    // The reason stays with the directory.
    const std::string reason = read_file(moved + "/CORRUPT");
    EXPECT_NE(reason.find(damage.file), std::string::npos) << reason;
    EXPECT_NE(reason.find(damage.check), std::string::npos) << reason;
    EXPECT_EQ(**m.latest(), 20);

    // Saves go on around it: pruning neither counts nor removes the moved directory.
    for (int64_t step : {60, 80, 100}) ASSERT_TRUE(m.save(resume_state(step)).ok());
    const std::vector<std::string> want = {fs::path(moved).filename().string(), "step_00000080",
                                           "step_00000100"};
    EXPECT_EQ(list_dir(run + "/checkpoints"), want);
  }
}

TEST(ResumeFallback, RefuseKeepsTheErrorAndTheDirectory) {
  for (const Damage& damage : kDamages) {
    SCOPED_TRACE(damage.what);
    const std::string run = run_with_20_and_40("resume-refuse");
    CheckpointManager m(run, 3);
    damage.apply(m.step_dir(40));
    std::vector<int64_t> restored;
    StatusOr<ResumeChoice> choice = resume_one(run, OnCorruptCheckpoint::kRefuse, &restored);
    EXPECT_EQ(choice.status().code(), StatusCode::kDataLoss) << choice.status().to_string();
    const std::string message = choice.status().message();
    EXPECT_NE(message.find(m.step_dir(40) + " failed verification"), std::string::npos) << message;
    EXPECT_NE(message.find(damage.file), std::string::npos) << message;
    EXPECT_NE(message.find(damage.check), std::string::npos) << message;
    EXPECT_TRUE(restored.empty());
    EXPECT_EQ(list_dir(run + "/checkpoints"),
              (std::vector<std::string>{"step_00000020", "step_00000040"}));
  }
}

// No checkpoint at all starts from scratch; every checkpoint corrupt does not, now or at the
// next start (a requeue), until the moved directories are taken away.
TEST(ResumeFallback, AllCorruptIsAnErrorUntilTheMovedOnesAreRemoved) {
  std::vector<int64_t> restored;
  StatusOr<ResumeChoice> empty =
      resume_one(temp_dir("resume-empty"), OnCorruptCheckpoint::kFallback, &restored);
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_FALSE(empty->step.has_value());
  EXPECT_TRUE(empty->moved_aside.empty());

  const std::string run = run_with_20_and_40("resume-all-corrupt");
  CheckpointManager m(run, 3);
  flip_middle_byte(m.step_dir(20) + "/rank_00000.safetensors");
  flip_middle_byte(m.step_dir(40) + "/rank_00000.safetensors");
  for (int start = 0; start < 2; ++start) {
    StatusOr<ResumeChoice> choice = resume_one(run, OnCorruptCheckpoint::kFallback, &restored);
    EXPECT_EQ(choice.status().code(), StatusCode::kDataLoss) << choice.status().to_string();
    EXPECT_NE(choice.status().message().find("no valid checkpoint left"), std::string::npos)
        << choice.status().to_string();
    EXPECT_NE(choice.status().message().find("step_00000020.corrupt-"), std::string::npos);
    EXPECT_NE(choice.status().message().find("step_00000040.corrupt-"), std::string::npos);
  }
  EXPECT_TRUE(restored.empty());
  EXPECT_EQ(list_dir(run + "/checkpoints").size(), 2u);
  for (const std::string& name : list_dir(run + "/checkpoints")) {
    fs::remove_all(run + "/checkpoints/" + name);
  }
  StatusOr<ResumeChoice> fresh = resume_one(run, OnCorruptCheckpoint::kFallback, &restored);
  ASSERT_TRUE(fresh.ok()) << fresh.status().to_string();
  EXPECT_FALSE(fresh->step.has_value());
}

// Only DataLoss means "fails verification": another error (here the model does not match)
// stops the resume and moves nothing.
TEST(ResumeFallback, OtherErrorsStopAndMoveNothing) {
  const std::string run = run_with_20_and_40("resume-other");
  StatusOr<ResumeChoice> choice = CheckpointManager(run, 3).resume(
      kWholeWte, CheckpointGroup{}, OnCorruptCheckpoint::kFallback,
      [](const CheckpointState&) { return FailedPrecondition("trained with another model"); });
  EXPECT_EQ(choice.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(choice.status().message().find("resuming from "), std::string::npos)
      << choice.status().to_string();
  EXPECT_EQ(list_dir(run + "/checkpoints"),
            (std::vector<std::string>{"step_00000020", "step_00000040"}));
}

// The ranks of a job in threads: all_gather through shared memory.
class ThreadRanks {
 public:
  explicit ThreadRanks(int world) : world_(world) {}
  CheckpointGroup group(int rank) {
    CheckpointGroup g;
    g.rank = rank;
    g.world = world_;
    g.all_gather = [this, rank, round = std::make_shared<int>(0)](const std::string& value) {
      return StatusOr<std::vector<std::string>>(gather(rank, (*round)++, value));
    };
    return g;
  }

 private:
  std::vector<std::string> gather(int rank, int round, const std::string& value) {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<std::string>& values = rounds_[round];
    values.resize(static_cast<size_t>(world_));
    values[static_cast<size_t>(rank)] = value;
    ++arrived_[round];
    cv_.notify_all();
    cv_.wait(lock, [&] { return arrived_[round] == world_; });
    return values;
  }

  int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::vector<std::string>> rounds_;
  std::map<int, int> arrived_;
};

// Rank 1 cannot verify step 40 (its shard is corrupt where it reads it), rank 0 can: both land
// on step 20, and the directory is moved aside once.
TEST(ResumeFallback, TwoRanksAgreeOnTheNewestStepValidOnBoth) {
  const std::string run = run_with_20_and_40("resume-two-ranks");
  ThreadRanks ranks(2);
  std::vector<StatusOr<ResumeChoice>> choices(2, StatusOr<ResumeChoice>(Internal("not run")));
  std::vector<std::vector<int64_t>> restored(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    threads.emplace_back([&, rank] {
      choices[static_cast<size_t>(rank)] = CheckpointManager(run, 3).resume(
          kWholeWte, ranks.group(rank), OnCorruptCheckpoint::kFallback,
          [&, rank](const CheckpointState& s) -> Status {
            restored[static_cast<size_t>(rank)].push_back(s.step);
            if (rank == 1 && s.step == 40) {
              return DataLoss("rank_00001.safetensors: XXH64 does not match (corrupt file)");
            }
            return Status::Ok();
          });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE(rank);
    const StatusOr<ResumeChoice>& c = choices[static_cast<size_t>(rank)];
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    EXPECT_EQ(c->step, std::optional<int64_t>(20));
    ASSERT_EQ(c->moved_aside.size(), 1u);
    EXPECT_EQ(c->moved_aside, choices[0]->moved_aside);
    EXPECT_EQ(restored[static_cast<size_t>(rank)], (std::vector<int64_t>{40, 20}));
  }
  const std::vector<std::string> left = list_dir(run + "/checkpoints");
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0], "step_00000020");
  EXPECT_EQ(left[1].rfind("step_00000040.corrupt-", 0), 0u) << left[1];
  const std::string reason = read_file(choices[0]->moved_aside[0] + "/CORRUPT");
  EXPECT_NE(reason.find("rank 1: rank_00001.safetensors"), std::string::npos) << reason;
}

}  // namespace
}  // namespace ax::train
