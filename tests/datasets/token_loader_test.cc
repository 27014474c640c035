#include "ax/datasets/loader/token_loader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ax/datasets/shards/shard_writer.h"
#include "test_util.h"

namespace ax::data {
namespace {

constexpr uint64_t kSeqLen = 32;

// Many small frames (512 tokens) in several shards, so windows cross frames and shards.
std::shared_ptr<const ShardSet> write_set(const std::string& dir,
                                          const std::vector<std::vector<uint32_t>>& docs,
                                          ShardKind kind = ShardKind::kLm) {
  ShardSetWriterOptions options;
  options.shard.kind = kind;
  options.shard.frame_tokens = 512;
  options.shard_tokens = 6000;
  options.tokenizer.vocab_size = 1000;
  options.tokenizer.eos_id = 1;
  auto writer = ShardSetWriter::create(dir, options);
  EXPECT_TRUE(writer.ok()) << writer.status().to_string();
  for (const auto& d : docs) EXPECT_TRUE((*writer)->add_document(d).ok());
  auto index = (*writer)->finish();
  EXPECT_TRUE(index.ok()) << index.status().to_string();
  auto set = ShardSet::open(dir, std::nullopt, /*cache_frames=*/8);
  EXPECT_TRUE(set.ok()) << set.status().to_string();
  return set.ok() ? *set : nullptr;
}

class TokenLoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    docs_ = new std::vector<std::vector<uint32_t>>(
        testing::random_documents(/*seed=*/11, /*n=*/220, /*vocab=*/1000, 1, 300));
    stream_ = new std::vector<uint32_t>();
    for (const auto& d : *docs_) stream_->insert(stream_->end(), d.begin(), d.end());
    set_ = new std::shared_ptr<const ShardSet>(write_set(testing::temp_dir("loader"), *docs_));
    ASSERT_NE(*set_, nullptr);
    ASSERT_GT((*set_)->num_shards(), 3u);
  }

  static LoaderOptions options(uint64_t replica = 0, uint64_t replicas = 1) {
    LoaderOptions o;
    o.seq_len = kSeqLen;
    o.seed = 99;
    o.global_batch = 8;
    o.replica = replica;
    o.num_replicas = replicas;
    o.window_blocks = 3;
    o.prefetch_batches = 2;
    return o;
  }

  static std::unique_ptr<TokenLoader> loader(const LoaderOptions& o) {
    auto l = TokenLoader::create(*set_, o);
    EXPECT_TRUE(l.ok()) << l.status().to_string();
    return l.ok() ? std::move(l).value() : nullptr;
  }

  static std::vector<TokenBatch> batches(TokenLoader& l, size_t n) {
    std::vector<TokenBatch> out(n);
    for (auto& b : out) EXPECT_TRUE(l.next(&b).ok());
    return out;
  }

  // The global batches of R replicas, each the concatenation of the slices in replica order.
  static std::vector<TokenBatch> global_batches(const LoaderOptions& base, uint64_t replicas,
                                                size_t n, const LoaderState* from = nullptr) {
    std::vector<TokenBatch> global(n);
    for (uint64_t r = 0; r < replicas; ++r) {
      LoaderOptions o = base;
      o.replica = r;
      o.num_replicas = replicas;
      auto l = loader(o);
      if (from != nullptr) {
        EXPECT_TRUE(l->restore(*from).ok());
      }
      for (auto& g : global) {
        TokenBatch b;
        EXPECT_TRUE(l->next(&b).ok());
        EXPECT_EQ(b.batch, base.global_batch / replicas);
        g.batch += b.batch;
        g.seq_len = b.seq_len;
        g.tokens.insert(g.tokens.end(), b.tokens.begin(), b.tokens.end());
        g.sample_ids.insert(g.sample_ids.end(), b.sample_ids.begin(), b.sample_ids.end());
        if (r == 0) g.state_after = b.state_after;
        EXPECT_EQ(g.state_after, b.state_after) << "replicas disagree on the global state";
      }
    }
    return global;
  }

  static void expect_same(const std::vector<TokenBatch>& a, const std::vector<TokenBatch>& b) {
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) {
      ASSERT_EQ(a[k].sample_ids, b[k].sample_ids) << "batch " << k;
      ASSERT_EQ(a[k].tokens, b[k].tokens) << "batch " << k;
      ASSERT_EQ(a[k].state_after, b[k].state_after) << "batch " << k;
    }
  }

  static std::vector<std::vector<uint32_t>>* docs_;
  static std::vector<uint32_t>* stream_;
  static std::shared_ptr<const ShardSet>* set_;
};

std::vector<std::vector<uint32_t>>* TokenLoaderTest::docs_ = nullptr;
std::vector<uint32_t>* TokenLoaderTest::stream_ = nullptr;
std::shared_ptr<const ShardSet>* TokenLoaderTest::set_ = nullptr;

TEST_F(TokenLoaderTest, SamplesAreStreamWindowsAndEpochsCoverAll) {
  auto l = loader(options());
  const uint64_t n = l->samples_per_epoch();
  ASSERT_EQ(n, (stream_->size() - 1) / kSeqLen);
  ASSERT_NE(n % 8, 0u) << "the test wants batches that straddle epochs";
  std::vector<uint64_t> order;
  const size_t num_batches = (3 * n + 7) / 8;
  for (size_t k = 0; k < num_batches; ++k) {
    TokenBatch b;
    ASSERT_TRUE(l->next(&b).ok());
    ASSERT_EQ(b.batch, 8u);
    ASSERT_EQ(b.seq_len, kSeqLen);
    ASSERT_EQ(b.tokens.size(), 8 * (kSeqLen + 1));
    for (size_t j = 0; j < b.batch; ++j) {
      const uint64_t id = b.sample_ids[j];
      ASSERT_LT(id, n);
      std::vector<uint32_t> want(stream_->begin() + id * kSeqLen,
                                 stream_->begin() + id * kSeqLen + kSeqLen + 1);
      std::vector<uint32_t> got(b.tokens.begin() + j * (kSeqLen + 1),
                                b.tokens.begin() + (j + 1) * (kSeqLen + 1));
      ASSERT_EQ(got, want) << "sample " << id;
      order.push_back(id);
    }
    const uint64_t consumed = (k + 1) * 8;
    EXPECT_EQ(b.state_after, (LoaderState{consumed / n, consumed % n}));
    EXPECT_EQ(l->state(), b.state_after);
  }
  for (uint64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<uint64_t> ids(order.begin() + epoch * n, order.begin() + (epoch + 1) * n);
    std::sort(ids.begin(), ids.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(ids[i], i) << "epoch " << epoch;
  }
  std::vector<uint64_t> e0(order.begin(), order.begin() + n),
      e1(order.begin() + n, order.begin() + 2 * n);
  EXPECT_NE(e0, e1);
}

TEST_F(TokenLoaderTest, ReplicaSlicesMakeTheGlobalBatch) {
  const uint64_t n = ((*set_)->num_tokens() - 1) / kSeqLen;
  const size_t num_batches = 3 * n / 8;  // three epochs
  const std::vector<TokenBatch> reference = global_batches(options(), 1, num_batches);
  for (uint64_t replicas : {2u, 4u, 8u}) {
    SCOPED_TRACE(::testing::Message() << replicas << " replicas");
    expect_same(global_batches(options(), replicas, num_batches), reference);
  }
}

TEST_F(TokenLoaderTest, ResumesExactlyAlsoOnOtherReplicaCounts) {
  auto l = loader(options());
  const uint64_t n = l->samples_per_epoch();
  const std::vector<TokenBatch> reference = batches(*l, 2 * n / 8 + 10);
  const size_t epoch_end = n / 8;  // batch epoch_end straddles epochs 0 and 1
  for (size_t k :
       {size_t{0}, size_t{1}, size_t{7}, epoch_end - 1, epoch_end, epoch_end + 1, epoch_end + 5}) {
    SCOPED_TRACE(::testing::Message() << "saved after " << k << " batches");
    const LoaderState saved = k == 0 ? LoaderState{} : reference[k - 1].state_after;
    const std::vector<TokenBatch> want(reference.begin() + k, reference.begin() + k + 6);
    // Saved at R=2 (each replica's state is the global one), resumed at R=1, 2 and 4.
    LoaderOptions at2 = options(1, 2);
    auto r2 = loader(at2);
    for (size_t i = 0; i < k; ++i) {
      TokenBatch b;
      ASSERT_TRUE(r2->next(&b).ok());
    }
    ASSERT_EQ(r2->state(), saved);
    for (uint64_t replicas : {1u, 2u, 4u}) {
      expect_same(global_batches(options(), replicas, want.size(), &saved), want);
    }
  }
}

TEST_F(TokenLoaderTest, RestoreRestartsAMidFlightLoader) {
  auto l = loader(options());
  const std::vector<TokenBatch> reference = batches(*l, 20);
  ASSERT_TRUE(l->restore(reference[4].state_after).ok());
  EXPECT_EQ(l->state(), reference[4].state_after);
  expect_same(batches(*l, 10),
              std::vector<TokenBatch>(reference.begin() + 5, reference.begin() + 15));
  ASSERT_TRUE(l->restore(LoaderState{}).ok());
  expect_same(batches(*l, 3), std::vector<TokenBatch>(reference.begin(), reference.begin() + 3));
}

TEST_F(TokenLoaderTest, PrefetchDoesNotChangeBatches) {
  LoaderOptions o = options(1, 2);
  o.prefetch_batches = 0;
  const std::vector<TokenBatch> sync = batches(*loader(o), 150);
  for (int prefetch : {1, 4}) {
    o.prefetch_batches = prefetch;
    expect_same(batches(*loader(o), 150), sync);
  }
}

TEST_F(TokenLoaderTest, StorageOrderWithoutShuffle) {
  LoaderOptions o = options();
  o.shuffle = false;
  auto l = loader(o);
  TokenBatch b;
  ASSERT_TRUE(l->next(&b).ok());
  ASSERT_TRUE(l->next(&b).ok());
  EXPECT_EQ(b.sample_ids, (std::vector<uint64_t>{8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST_F(TokenLoaderTest, RejectsBadOptions) {
  auto expect_invalid = [](LoaderOptions o, const char* what) {
    auto l = TokenLoader::create(*set_, o);
    ASSERT_FALSE(l.ok()) << what;
    EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument)
        << what << ": " << l.status().to_string();
  };
  LoaderOptions o = options();
  o.num_replicas = 0;
  expect_invalid(o, "no replicas");
  expect_invalid(options(2, 2), "replica out of range");
  o = options(0, 3);
  expect_invalid(o, "global batch not divisible");
  o = options();
  o.seq_len = 0;
  expect_invalid(o, "seq_len 0");
  o = options();
  o.global_batch = 0;
  o.num_replicas = 1;
  expect_invalid(o, "global batch 0");
  o = options();
  o.window_blocks = 0;
  expect_invalid(o, "window_blocks 0");
  o = options();
  o.prefetch_batches = -1;
  expect_invalid(o, "negative prefetch");
  o = options();
  o.seq_len = (*set_)->num_tokens();  // needs num_tokens + 1
  expect_invalid(o, "too little data");
  EXPECT_NE(TokenLoader::create(*set_, o).status().message().find("fewer than one window"),
            std::string::npos);
  o.seq_len = (*set_)->num_tokens() - 1;
  EXPECT_TRUE(TokenLoader::create(*set_, o).ok()) << "exactly one window";

  auto l = loader(options());
  EXPECT_EQ(l->restore(LoaderState{0, l->samples_per_epoch()}).code(),
            StatusCode::kInvalidArgument);
}

TEST(TokenLoader, RefusesASeq2SeqSet) {
  auto docs = testing::random_documents(3, 40, 1000, 1, 50);
  auto set = write_set(testing::temp_dir("s2s-as-lm"), docs, ShardKind::kSeq2Seq);
  ASSERT_NE(set, nullptr);
  auto l = TokenLoader::create(set, LoaderOptions{});
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kFailedPrecondition) << l.status().to_string();
}

TEST(TokenLoader, TinySetHasOneWindowOrNone) {
  auto set = write_set(testing::temp_dir("tiny"), {{5, 6, 7, 1}});
  ASSERT_NE(set, nullptr);
  LoaderOptions o;
  o.seq_len = 3;
  o.global_batch = 2;
  auto l = TokenLoader::create(set, o);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  TokenBatch b;
  ASSERT_TRUE((*l)->next(&b).ok());
  EXPECT_EQ(b.tokens, (std::vector<uint32_t>{5, 6, 7, 1, 5, 6, 7, 1}));  // one window, twice
  EXPECT_EQ(b.state_after, (LoaderState{2, 0}));
  o.seq_len = 4;
  EXPECT_EQ(TokenLoader::create(set, o).status().code(), StatusCode::kInvalidArgument);
}

TEST_F(TokenLoaderTest, DestroyingWithAFullQueueDoesNotHang) {
  for (int i = 0; i < 20; ++i) {
    LoaderOptions o = options();
    o.prefetch_batches = 1 + i % 3;
    auto l = loader(o);
    if (i % 2 == 0) {
      TokenBatch b;
      ASSERT_TRUE(l->next(&b).ok());
    }
    if (i % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // queue fills
  }
}

// A read error on the prefetch thread comes out of next(), and next() retries the same batch.
TEST(TokenLoader, ReadErrorsSurfaceInNext) {
  const std::string dir = testing::temp_dir("corrupt");
  auto set = write_set(dir, testing::random_documents(5, 60, 1000, 100, 300));
  ASSERT_NE(set, nullptr);
  // Overwrite the data frames of every shard (the tables were read at open).
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".axs") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = std::filesystem::file_size(entry.path());
    f.seekp(100);
    f << std::string(size / 2, '\x5a');
  }
  for (int prefetch : {0, 2}) {
    LoaderOptions o;
    o.seq_len = 16;
    o.global_batch = 4;
    o.prefetch_batches = prefetch;
    auto l = TokenLoader::create(set, o);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    TokenBatch b;
    Status s;
    for (int i = 0; i < 50 && s.ok(); ++i) s = (*l)->next(&b);
    ASSERT_FALSE(s.ok()) << "prefetch " << prefetch;
    EXPECT_EQ(s.code(), StatusCode::kDataLoss) << s.to_string();
    const LoaderState at_error = (*l)->state();
    EXPECT_EQ((*l)->next(&b).code(), s.code());
    EXPECT_EQ((*l)->state(), at_error);
  }
}

}  // namespace
}  // namespace ax::data
