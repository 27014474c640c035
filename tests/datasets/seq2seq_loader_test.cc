#include "ax/datasets/loader/seq2seq_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "ax/datasets/shards/shard_writer.h"
#include "test_util.h"

namespace ax::data {
namespace {

std::shared_ptr<const ShardSet> write_set(const std::vector<std::vector<uint32_t>>& docs,
                                          ShardKind kind) {
  const std::string dir = testing::temp_dir("s2s");
  ShardSetWriterOptions options;
  options.shard.kind = kind;
  options.shard.frame_tokens = 256;
  options.shard_tokens = 3000;
  auto writer = ShardSetWriter::create(dir, options);
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  for (const auto& d : docs) EXPECT_TRUE((*writer)->add_document(d).ok());
  EXPECT_TRUE((*writer)->finish().ok());
  auto set = ShardSet::open(dir);
  EXPECT_TRUE(set.ok()) << set.status().to_string();
  return set.ok() ? *set : nullptr;
}

class Seq2SeqLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    docs_ = testing::random_documents(21, 2 * 301, 500, 1, 60);  // 301 examples
    set_ = write_set(docs_, ShardKind::kSeq2Seq);
    ASSERT_NE(set_, nullptr);
  }

  Seq2SeqLoaderOptions options(uint64_t replica = 0, uint64_t replicas = 1) const {
    Seq2SeqLoaderOptions o;
    o.seed = 5;
    o.global_batch = 8;
    o.replica = replica;
    o.num_replicas = replicas;
    o.block_examples = 8;
    o.window_blocks = 4;
    o.prefetch_batches = 3;
    return o;
  }

  // n global batches of `replicas` loaders (slices concatenated), optionally restored first.
  std::vector<Seq2SeqBatch> global_batches(uint64_t replicas, size_t n,
                                           std::optional<LoaderState> from = std::nullopt,
                                           int prefetch = 3) const {
    std::vector<Seq2SeqBatch> global(n);
    for (uint64_t r = 0; r < replicas; ++r) {
      Seq2SeqLoaderOptions o = options(r, replicas);
      o.prefetch_batches = prefetch;
      auto l = Seq2SeqLoader::create(set_, o);
      EXPECT_TRUE(l.ok()) << l.status().to_string();
      if (from) {
        EXPECT_TRUE((*l)->restore(*from).ok());
      }
      for (auto& g : global) {
        Seq2SeqBatch b;
        EXPECT_TRUE((*l)->next(&b).ok());
        EXPECT_EQ(b.examples.size(), 8 / replicas);
        g.examples.insert(g.examples.end(), b.examples.begin(), b.examples.end());
        g.state_after = b.state_after;
      }
    }
    return global;
  }

  static std::vector<uint64_t> ids(const std::vector<Seq2SeqBatch>& batches) {
    std::vector<uint64_t> out;
    for (const auto& b : batches) {
      for (const auto& e : b.examples) out.push_back(e.id);
    }
    return out;
  }

  std::vector<std::vector<uint32_t>> docs_;
  std::shared_ptr<const ShardSet> set_;
};

TEST_F(Seq2SeqLoaderTest, PairsComeBackIntactAndEpochsCoverAll) {
  const std::vector<Seq2SeqBatch> batches = global_batches(1, 2 * 301 / 8 + 1);
  std::vector<uint64_t> seen;
  for (const auto& b : batches) {
    for (const auto& e : b.examples) {
      ASSERT_LT(e.id, 301u);
      EXPECT_EQ(e.inputs, docs_[2 * e.id]) << "example " << e.id;
      EXPECT_EQ(e.targets, docs_[2 * e.id + 1]) << "example " << e.id;
      EXPECT_EQ(e.inputs.back(), 1u);
      EXPECT_EQ(e.targets.back(), 1u);
      seen.push_back(e.id);
    }
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<uint64_t> e(seen.begin() + epoch * 301, seen.begin() + (epoch + 1) * 301);
    std::sort(e.begin(), e.end());
    for (uint64_t i = 0; i < 301; ++i) ASSERT_EQ(e[i], i) << "epoch " << epoch;
  }
  EXPECT_EQ(batches.back().state_after,
            (LoaderState{(batches.size() * 8) / 301, (batches.size() * 8) % 301}));
}

TEST_F(Seq2SeqLoaderTest, ReplicasPrefetchAndResumeKeepTheOrder) {
  const size_t n = 2 * 301 / 8;
  const std::vector<Seq2SeqBatch> reference = global_batches(1, n);
  EXPECT_EQ(ids(global_batches(1, n, std::nullopt, /*prefetch=*/0)), ids(reference));
  for (uint64_t replicas : {2u, 4u, 8u}) {
    EXPECT_EQ(ids(global_batches(replicas, n)), ids(reference)) << replicas << " replicas";
  }
  for (size_t k : {size_t{3}, size_t{37}, size_t{38}}) {  // batch 37 straddles epochs
    const std::vector<Seq2SeqBatch> want(reference.begin() + k, reference.begin() + k + 5);
    for (uint64_t replicas : {1u, 4u}) {
      EXPECT_EQ(ids(global_batches(replicas, 5, reference[k - 1].state_after)), ids(want))
          << "resumed after " << k << " batches on " << replicas << " replicas";
    }
  }
}

TEST_F(Seq2SeqLoaderTest, RejectsBadOptions) {
  Seq2SeqLoaderOptions o = options(0, 3);
  EXPECT_EQ(Seq2SeqLoader::create(set_, o).status().code(), StatusCode::kInvalidArgument);
  o = options();
  o.block_examples = 0;
  EXPECT_EQ(Seq2SeqLoader::create(set_, o).status().code(), StatusCode::kInvalidArgument);
  o = options(4, 4);
  EXPECT_EQ(Seq2SeqLoader::create(set_, o).status().code(), StatusCode::kInvalidArgument);
}

TEST(Seq2SeqLoader, RefusesAnLmSet) {
  auto set = write_set(testing::random_documents(2, 10, 100, 1, 20), ShardKind::kLm);
  ASSERT_NE(set, nullptr);
  auto l = Seq2SeqLoader::create(set, Seq2SeqLoaderOptions{});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kFailedPrecondition) << l.status().to_string();
}

}  // namespace
}  // namespace ax::data
