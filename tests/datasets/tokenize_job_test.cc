// Tokenization as the tasks of a job (tokenize_job.h): the same merged dataset for any number of
// tasks, and the same token stream and training order as one `ax-data tokenize`; finished files
// survive a re-run, a merge needs every part and is safe to repeat.
#include "ax/datasets/text/tokenize_job.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ax/common/strings.h"
#include "ax/datasets/loader/token_loader.h"
#include "ax/datasets/shards/shard_reader.h"
#include "ax/datasets/text/tokenizer.h"
#include "test_model.h"
#include "test_util.h"

namespace ax::data {
namespace {

namespace fs = std::filesystem;
using testing::read_file;
using testing::sample_english;
using testing::temp_dir;
using testing::write_file;

const std::string& model() { return testing::small_model(); }

// Five Pile-layout files of different sizes (one holds a long document) and a text file.
std::string make_inputs() {
  const std::string dir = temp_dir("job-in");
  const std::vector<std::string> lines = str_split(sample_english(300), '\n');
  const int docs_per_file[] = {40, 400, 90, 250, 10};
  size_t at = 0;
  for (int f = 0; f < 5; ++f) {
    std::string jsonl;
    for (int d = 0; d < docs_per_file[f]; ++d, at = (at + 3) % (lines.size() - 3)) {
      const std::string text = lines[at] + "\\n" + lines[at + 1] + " " + lines[at + 2];
      jsonl += "{\"text\": \"" + text + "\", \"meta\": {\"pile_set_name\": \"" +
               (d % 2 ? "Bible" : "Fortunes") + "\"}}\n";
    }
    if (f == 2) {
      std::string big;
      while (big.size() < 40000) big += lines[big.size() % 100] + " ";
      jsonl += "{\"text\": \"" + big + "\", \"meta\": {\"pile_set_name\": \"Books\"}}\n";
    }
    write_file(dir + "/" + std::to_string(f) + ".jsonl", jsonl);
  }
  return dir;
}

TokenizeOptions job_options(const std::string& inputs, const std::string& out) {
  TokenizeOptions o;
  o.inputs = {inputs + "/*.jsonl"};
  o.tokenizer_path = model();
  o.output_dir = out;
  o.threads = 1;
  o.progress_seconds = 0;
  o.shard_tokens = 3000;  // several shards per file
  o.split_bytes = 4096;   // the long document is encoded in pieces
  return o;
}

// Runs every task of a `tasks`-task job (the tasks at once, as under srun), then the merge.
void run_job(const TokenizeOptions& o, int tasks) {
  std::vector<std::thread> threads;
  std::vector<Status> status(static_cast<size_t>(tasks));
  for (int t = 0; t < tasks; ++t) {
    threads.emplace_back([&, t] { status[t] = run_task(o, t, tasks).status(); });
  }
  for (auto& th : threads) th.join();
  for (const Status& s : status) ASSERT_TRUE(s.ok()) << s.to_string();
  auto merged = merge_job(o.output_dir);
  ASSERT_TRUE(merged.ok()) << merged.status().to_string();
}

// Every file of a directory and the hash of its bytes.
std::map<std::string, size_t> contents(const std::string& dir) {
  std::map<std::string, size_t> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    out[e.path().filename().string()] =
        e.is_regular_file() ? std::hash<std::string>()(read_file(e.path().string())) : 0;
  }
  return out;
}

TEST(TokenizeJob, AssignFilesBalancesBytesAndCoversEveryFile) {
  const std::vector<uint64_t> sizes = {10, 1, 1, 1, 7, 3, 3};
  const auto shares = assign_files(sizes, 2);
  ASSERT_EQ(shares.size(), 2u);
  // Largest first to the lighter task: 10 | 7, 3 | then 3 to task 0 (a tie), the 1s to task 1.
  EXPECT_EQ(shares[0], (std::vector<size_t>{0, 6}));           // 10 + 3 = 13 bytes
  EXPECT_EQ(shares[1], (std::vector<size_t>{1, 2, 3, 4, 5}));  // 1 + 1 + 1 + 7 + 3 = 13 bytes
  const auto many = assign_files(sizes, 10);
  std::vector<size_t> all;
  for (const auto& s : many) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  std::vector<size_t> want(sizes.size());
  std::iota(want.begin(), want.end(), 0);
  EXPECT_EQ(all, want);
  EXPECT_TRUE(many[9].empty());  // more tasks than files: some have nothing to do
}

TEST(TokenizeJob, SameDatasetForOneTwoOrThreeTasks) {
  const std::string inputs = make_inputs();
  std::map<std::string, size_t> first;
  for (int tasks : {1, 2, 3}) {
    const std::string out = temp_dir("job-out");
    run_job(job_options(inputs, out), tasks);
    const auto files = contents(out);
    EXPECT_EQ(files.count("parts"), 0u) << "the parts are gone after the merge";
    EXPECT_GT(files.size(), 8u) << "index.json and several shards";
    if (tasks == 1) {
      first = files;
    } else {
      EXPECT_EQ(files, first) << tasks << " tasks: the shards or index.json differ";
    }
  }
}

TEST(TokenizeJob, MergedDatasetHasTheTokensAndOrderOfOneTokenize) {
  const std::string inputs = make_inputs();
  const std::string job = temp_dir("job-out"), single = temp_dir("job-out");
  TokenizeOptions o = job_options(inputs, job);
  run_job(o, 2);
  o.output_dir = single;
  o.shard_tokens = uint64_t{1} << 30;  // one shard: boundaries differ, the stream must not
  ASSERT_TRUE(tokenize(o).ok());
  auto a = ShardSet::open(job), b = ShardSet::open(single);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GT((*a)->num_shards(), (*b)->num_shards());
  ASSERT_EQ((*a)->num_tokens(), (*b)->num_tokens());
  ASSERT_EQ((*a)->num_docs(), (*b)->num_docs());
  std::vector<uint32_t> ta((*a)->num_tokens()), tb((*b)->num_tokens());
  ASSERT_TRUE((*a)->read(0, ta).ok() && (*b)->read(0, tb).ok());
  EXPECT_EQ(ta, tb);
  for (uint64_t d = 0; d < (*a)->num_docs(); ++d) {
    ASSERT_EQ((*a)->doc_range(d), (*b)->doc_range(d)) << d;
  }
  EXPECT_EQ((*a)->index().inputs, (*b)->index().inputs);
  EXPECT_EQ((*a)->index().docs_per_set, (*b)->index().docs_per_set);
  EXPECT_EQ((*a)->index().split_docs, 1u);
  // docs/data-order.md: the order depends on the data, seed and seq_len only.
  LoaderOptions lo;
  lo.seq_len = 64;
  lo.global_batch = 4;
  lo.window_blocks = 4;
  auto la = TokenLoader::create(*a, lo), lb = TokenLoader::create(*b, lo);
  ASSERT_TRUE(la.ok() && lb.ok());
  for (int step = 0; step < 50; ++step) {
    TokenBatch x, y;
    ASSERT_TRUE((*la)->next(&x).ok() && (*lb)->next(&y).ok());
    ASSERT_EQ(x.sample_ids, y.sample_ids) << step;
    ASSERT_EQ(x.tokens, y.tokens) << step;
  }
}

std::string part(const std::string& out, size_t i) {
  char name[16];
  std::snprintf(name, sizeof name, "%05zu", i);
  return out + "/parts/" + name;
}

ino_t inode(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

TEST(TokenizeJob, ReRunKeepsFinishedFilesAndRedoesTheRest) {
  const std::string inputs = make_inputs();
  const std::string out = temp_dir("job-out");
  TokenizeOptions o = job_options(inputs, out);
  // Task 0 of 2 finishes; task 1 is stopped by a signal before its first file.
  ASSERT_TRUE(run_task(o, 0, 2).ok());
  std::atomic<bool> stop{true};
  TokenizeOptions stopped = o;
  stopped.stop = &stop;
  EXPECT_EQ(run_task(stopped, 1, 2).status().code(), StatusCode::kAborted);
  const auto mine = assign_files(prepare_job(o)->sizes, 2);
  const std::string kept = part(out, mine[0][0]) + "/shard-00000.axs";
  const ino_t before = inode(kept);
  ASSERT_NE(before, 0u);
  // What a task killed in the middle of a file leaves: a part without its index.
  const std::string half = part(out, mine[1][0]);
  fs::create_directories(half);
  write_file(half + "/shard-00000.axs.tmp", "half a shard");
  write_file(half + "/shard-00001.axs", "a shard of a set without index");

  auto progress = job_progress(out);
  ASSERT_TRUE(progress.ok());
  EXPECT_EQ(progress->files_done, mine[0].size());
  EXPECT_LT(progress->done_bytes, progress->total_bytes);
  EXPECT_EQ(merge_job(out).status().code(), StatusCode::kFailedPrecondition);

  // The re-run, with another task count: the finished files stay as they are.
  auto again = run_task(o, 0, 1);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  EXPECT_EQ(again->kept, mine[0].size());
  EXPECT_EQ(inode(kept), before);
  auto merged = merge_job(out);
  ASSERT_TRUE(merged.ok()) << merged.status().to_string();
  // The kept part's first shard is in the dataset, as the same file (a hard link).
  bool found = false;
  for (const ShardEntry& e : merged->shards) found = found || inode(out + "/" + e.file) == before;
  EXPECT_TRUE(found);

  const std::string reference = temp_dir("job-out");
  run_job(job_options(inputs, reference), 2);
  auto files = contents(out);
  EXPECT_EQ(files, contents(reference));
  auto done = job_progress(out);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done->merged);
}

TEST(TokenizeJob, OtherSettingsInTheSameDirectoryAreRefused) {
  const std::string inputs = make_inputs();
  const std::string out = temp_dir("job-out");
  TokenizeOptions o = job_options(inputs, out);
  ASSERT_TRUE(prepare_job(o).ok());
  TokenizeOptions other = o;
  other.split_bytes = 8192;
  auto refused = run_task(other, 0, 1);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("split_bytes is 8192 here and 4096"), std::string::npos)
      << refused.status().message();
  // More threads shape nothing: accepted.
  other = o;
  other.threads = 2;
  EXPECT_TRUE(prepare_job(other).ok());
}

TEST(TokenizeJob, MergeTwiceAtOnceAndAgainGivesOneDataset) {
  const std::string inputs = make_inputs();
  const std::string out = temp_dir("job-out");
  const TokenizeOptions o = job_options(inputs, out);
  ASSERT_TRUE(run_task(o, 0, 1).ok());
  // A merge that died after linking some shards.
  write_file(out + "/shard-00042.axs", "from an interrupted merge");
  write_file(out + "/index.json.tmp", "{");
  std::vector<StatusOr<DatasetIndex>> results(2, InvalidArgument("not run"));
  std::thread a([&] { results[0] = merge_job(out); });
  std::thread b([&] { results[1] = merge_job(out); });
  a.join();
  b.join();
  ASSERT_TRUE(results[0].ok()) << results[0].status().to_string();
  ASSERT_TRUE(results[1].ok()) << results[1].status().to_string();
  EXPECT_EQ(results[0]->shards.size(), results[1]->shards.size());
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.insert(e.path().filename().string());
  std::set<std::string> want = {"index.json"};
  for (const ShardEntry& e : results[0]->shards) want.insert(e.file);
  EXPECT_EQ(names, want);
  auto set = ShardSet::open(out);
  ASSERT_TRUE(set.ok());
  EXPECT_TRUE((*set)->verify().ok());
  EXPECT_TRUE(merge_job(out).ok());  // once more: the index is the answer
}

}  // namespace
}  // namespace ax::data
