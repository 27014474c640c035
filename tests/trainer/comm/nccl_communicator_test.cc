// The NCCL path on one GPU (world 1) through make_mesh_groups, the same code multi-GPU runs use.
// Skipped without a GPU; several NCCL ranks cannot share one GPU, so that is all one GPU shows.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/comm/store.h"
#include "test_files.h"

namespace ax::train::comm {
namespace {

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

// Device copy of `host`, read back with `read`.
struct DeviceBuffer {
  explicit DeviceBuffer(const std::vector<float>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, n * sizeof(float)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  std::vector<float> read() const {
    std::vector<float> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
  Tensor tensor() const { return Tensor(ptr, DType::kF32, {static_cast<int64_t>(n)}); }
  void* ptr = nullptr;
  size_t n;
};

TEST(NcclCommunicator, WorldOfOneGpuRunsEveryCollective) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU";
  auto store = make_file_store(testing::temp_dir("nccl_store"), 0, 1);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  CommOptions options;
  options.timeout = Millis(60000);
  options.cuda_stream = stream;
  options.cuda_device = 0;
  auto groups = make_mesh_groups(*store, MeshCoords::of(0, 1, 1, 1), CommBackend::kNccl, options);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  EXPECT_EQ(groups->world->name(), "nccl world (ranks 0)");

  Communicator& c = *groups->data;
  const std::vector<float> values = {1, -2, 3.5f, 4};
  DeviceBuffer buf(values), out(std::vector<float>(4, 0.f));
  ASSERT_TRUE(c.all_reduce(buf.tensor(), ReduceOp::kSum).ok());
  ASSERT_TRUE(c.all_reduce(buf.tensor(), ReduceOp::kMax).ok());
  ASSERT_TRUE(c.broadcast(buf.tensor(), 0).ok());
  ASSERT_TRUE(c.reduce_scatter(out.tensor(), buf.tensor()).ok());
  ASSERT_TRUE(c.barrier().ok());
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(buf.read(), values);
  EXPECT_EQ(out.read(), values);
  DeviceBuffer gathered(std::vector<float>(4, 0.f));
  ASSERT_TRUE(c.all_gather(gathered.tensor(), buf.tensor()).ok());
  ASSERT_TRUE(c.barrier().ok());
  EXPECT_EQ(gathered.read(), values);
  EXPECT_EQ(c.bytes_moved(), 4 * 4 * 5);
  groups->world.reset();
  groups->data.reset();
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace ax::train::comm
