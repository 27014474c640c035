// Hand-made checkpoints of several ranks: each rank writes its slices with write_rank_files, one
// commit merges them, and load() / read_region() assemble whatever region is asked for.

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "checkpoint_internal.h"
#include "test_util.h"

namespace ax::train {
namespace {

using testing::make_tensor;
using testing::same_bits;
using testing::temp_dir;

// The slice [offset, offset + shape) of a whole row-major tensor.
HostTensor slice(const HostTensor& whole, std::vector<int64_t> offset, std::vector<int64_t> shape) {
  HostTensor s;
  s.name = whole.name;
  s.shape = shape;
  s.logical_shape = whole.shape;
  s.offset = offset;
  const size_t rank = shape.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t k = rank; k-- > 1;) stride[k - 1] = stride[k] * whole.shape[k];
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) {
    int64_t rest = i, src = 0;
    for (size_t k = rank; k-- > 0;) {
      src += (offset[k] + rest % shape[k]) * stride[k];
      rest /= shape[k];
    }
    s.data.push_back(whole.data[static_cast<size_t>(src)]);
  }
  return s;
}

// Writes one checkpoint of `step` in which rank r holds per_rank[r], committed as a
// coordinator would after a barrier.
Status save_ranks(const CheckpointManager& m, int64_t step,
                  const std::vector<std::vector<HostTensor>>& per_rank) {
  const std::string final_dir = m.step_dir(step), tmp_dir = final_dir + ".tmp-1";
  std::filesystem::create_directories(tmp_dir);
  std::vector<ckpt::RankWrite> writes;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    CheckpointState state;
    state.step = step;
    state.tensors = per_rank[r];
    state.blobs["trainer.json"] = "{\"step\": 1}";
    AX_ASSIGN_OR_RETURN(ckpt::RankWrite w,
                        ckpt::write_rank_files(tmp_dir, static_cast<int>(r), state, nullptr));
    writes.push_back(std::move(w));
  }
  return ckpt::commit_checkpoint(tmp_dir, final_dir, step, writes, nullptr);
}

const HostTensor* find(const CheckpointState& s, const std::string& name) {
  for (const HostTensor& t : s.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

class MultiSlice : public ::testing::Test {
 protected:
  MultiSlice() : m_(temp_dir("slices"), 3) {}

  CheckpointManager m_;
  HostTensor rows_ = make_tensor("params/rows", {6, 4}, 1);     // split along dim 0
  HostTensor cols_ = make_tensor("params/cols", {5, 6}, 2);     // split along dim 1
  HostTensor cube_ = make_tensor("adam_m/cube", {2, 3, 5}, 3);  // uneven split along dim 2
  HostTensor whole_ = make_tensor("params/whole", {7}, 4);      // on rank 0 only
};

TEST_F(MultiSlice, LoadAssemblesSlicesOfTwoRanks) {
  ASSERT_TRUE(save_ranks(m_, 5,
                         {{slice(rows_, {0, 0}, {3, 4}), slice(cols_, {0, 0}, {5, 2}),
                           slice(cube_, {0, 0, 0}, {2, 3, 2}), whole_},
                          {slice(rows_, {3, 0}, {3, 4}), slice(cols_, {0, 2}, {5, 4}),
                           slice(cube_, {0, 0, 2}, {2, 3, 3})}})
                  .ok());
  EXPECT_TRUE(std::filesystem::exists(m_.step_dir(5) + "/rank_00001.safetensors"));
  auto loaded = m_.load(5);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->blobs.at("trainer.json"), "{\"step\": 1}");
  for (const HostTensor* want : {&rows_, &cols_, &cube_, &whole_}) {
    const HostTensor* got = find(*loaded, want->name);
    ASSERT_NE(got, nullptr) << want->name;
    EXPECT_EQ(got->shape, want->shape);
    EXPECT_TRUE(same_bits(got->data, want->data)) << want->name;
  }
}

TEST_F(MultiSlice, RegionsSplitDifferentlyFromTheSlices) {
  // Stored in row halves and column halves; read as blocks crossing both halves, as a rank of
  // another mesh would.
  ASSERT_TRUE(save_ranks(m_, 5,
                         {{slice(rows_, {0, 0}, {3, 4}), slice(cols_, {0, 0}, {5, 3})},
                          {slice(rows_, {3, 0}, {3, 4}), slice(cols_, {0, 3}, {5, 3})}})
                  .ok());
  auto reader = ckpt::CheckpointReader::open(m_.step_dir(5), 5);
  ASSERT_TRUE(reader.ok()) << reader.status().to_string();
  ASSERT_EQ(reader->tensors().size(), 2u);
  struct Region {
    const HostTensor* tensor;
    std::vector<int64_t> offset, shape;
  };
  for (const Region& r : {Region{&rows_, {2, 1}, {3, 2}}, Region{&rows_, {0, 2}, {6, 2}},
                          Region{&cols_, {1, 2}, {3, 3}}, Region{&cols_, {4, 0}, {1, 6}}}) {
    const ckpt::TensorRecord& t = reader->tensors()[r.tensor == &rows_ ? 0 : 1];
    ASSERT_EQ(t.name, r.tensor->name);
    std::vector<float> got(static_cast<size_t>(r.shape[0] * r.shape[1]));
    ASSERT_TRUE(reader->read_region(t, r.offset, r.shape, got.data()).ok());
    EXPECT_TRUE(same_bits(got, slice(*r.tensor, r.offset, r.shape).data)) << r.tensor->name;
  }
  std::vector<float> out(100);
  EXPECT_EQ(reader->read_region(reader->tensors()[0], {4, 0}, {3, 4}, out.data()).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(MultiSlice, UncoveredElementIsDataLoss) {
  // Rank 1 holds rows [3, 5): row 5 is in no slice.
  ASSERT_TRUE(
      save_ranks(m_, 5, {{slice(rows_, {0, 0}, {3, 4})}, {slice(rows_, {3, 0}, {2, 4})}}).ok());
  auto loaded = m_.load(5);
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("element [5,0] of params/rows is in no slice"),
            std::string::npos)
      << loaded.status().to_string();
}

TEST_F(MultiSlice, OverlappingSlicesMustAgree) {
  ASSERT_TRUE(
      save_ranks(m_, 5, {{slice(rows_, {0, 0}, {4, 4})}, {slice(rows_, {3, 0}, {3, 4})}}).ok());
  auto same = m_.load(5);
  ASSERT_TRUE(same.ok()) << same.status().to_string();
  EXPECT_TRUE(same_bits(same->tensors[0].data, rows_.data));

  HostTensor changed = slice(rows_, {3, 0}, {3, 4});
  changed.data[1] += 1.0f;  // element [3, 1], also stored by rank 0
  ASSERT_TRUE(save_ranks(m_, 6, {{slice(rows_, {0, 0}, {4, 4})}, {changed}}).ok());
  auto loaded = m_.load(6);
  EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.status().message().find("disagree about element [3,1]"), std::string::npos)
      << loaded.status().to_string();

  // A whole copy first (read in place), then a disagreeing part.
  ASSERT_TRUE(save_ranks(m_, 7, {{rows_}, {changed}}).ok());
  EXPECT_EQ(m_.load(7).status().code(), StatusCode::kDataLoss);
}

TEST_F(MultiSlice, InconsistentSlicesAreRefusedAtSave) {
  HostTensor outside = slice(rows_, {3, 0}, {3, 4});
  outside.offset = {4, 0};
  EXPECT_EQ(save_ranks(m_, 5, {{outside}}).code(), StatusCode::kInvalidArgument);

  HostTensor other_shape = slice(rows_, {3, 0}, {3, 4});
  other_shape.logical_shape = {7, 4};
  EXPECT_EQ(save_ranks(m_, 6, {{slice(rows_, {0, 0}, {3, 4})}, {other_shape}}).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ax::train
