// T5's relative position bias: the gather of the (num_buckets, NH) table into the attention bias,
// and the table's gradient without float atomics, so the same bits on every run:
//   1. one warp per (head, chunk of kChunkRows query rows of one batch row): each lane sums the
//      elements it visits (j = lane, lane + 32, ...) into its own column of a per-warp
//      (num_buckets × 32) accumulator in shared memory, then each bucket's 32 lane sums are
//      added by a fixed shuffle tree into one partial per (chunk, head, bucket);
//   2. one thread per (bucket, head) adds its partials chunk by chunk, in order, into dtable.
// A bucket id outside [0, num_buckets) is never used as an index: its bias is NaN, and its
// gradient is dropped.
#include <algorithm>

#include "cuda_common.cuh"

namespace ax::train::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kChunkRows = 16;          // query rows per partial sum
constexpr int kMaxWarpsPerBlock = 4;        // pass 1
constexpr size_t kSharedBytes = 48 * 1024;  // the default dynamic shared memory limit
constexpr size_t kWarpBytesPerBucket = kWarp * sizeof(float);

template <typename Act>
__global__ void position_bias_forward_kernel(Act* bias, const Act* table, const int32_t* buckets,
                                             int64_t NH, int64_t Tq, int64_t Tk,
                                             int64_t num_buckets, int64_t n) {
  AX_GRID_STRIDE(e, n) {
    const int64_t j = e % Tk, row = e / Tk;  // row = (b·NH + h)·Tq + i
    const int64_t i = row % Tq, h = row / Tq % NH, b = row / Tq / NH;
    const int32_t k = buckets[(b * Tq + i) * Tk + j];
    bias[e] = (k >= 0 && k < num_buckets) ? table[k * NH + h] : from_f32<Act>(NAN);
  }
}

// Pass 1. partials (P, NH, num_buckets) with P = Bb · chunks_per_row; warp w of the grid takes
// head h = w % NH and chunk p = w / NH (batch row p / chunks_per_row).
__global__ void position_bias_partials_kernel(float* partials, const float* dbias,
                                              const int32_t* buckets, int64_t NH, int64_t Tq,
                                              int64_t Tk, int64_t num_buckets,
                                              int64_t chunks_per_row, int64_t warps) {
  extern __shared__ float shared[];
  const int lane = threadIdx.x % kWarp, warp_in_block = threadIdx.x / kWarp;
  const int64_t w = blockIdx.x * int64_t{blockDim.x / kWarp} + warp_in_block;
  if (w >= warps) return;  // whole warps only: the shuffles below see all 32 lanes
  float* acc = shared + warp_in_block * num_buckets * kWarp;
  for (int64_t k = 0; k < num_buckets; ++k) acc[k * kWarp + lane] = 0.0f;
  const int64_t h = w % NH, p = w / NH, b = p / chunks_per_row;
  const int64_t i0 = p % chunks_per_row * kChunkRows;
  const int64_t i1 = i0 + kChunkRows < Tq ? i0 + kChunkRows : Tq;
  for (int64_t i = i0; i < i1; ++i) {
    const float* g = dbias + ((b * NH + h) * Tq + i) * Tk;
    const int32_t* ids = buckets + (b * Tq + i) * Tk;
    for (int64_t j = lane; j < Tk; j += kWarp) {
      const int32_t k = ids[j];
      if (k >= 0 && k < num_buckets) acc[k * kWarp + lane] += g[j];  // this lane's column only
    }
  }
  for (int64_t k = 0; k < num_buckets; ++k) {
    const float s = warp_sum(acc[k * kWarp + lane]);
    if (lane == 0) partials[(p * NH + h) * num_buckets + k] = s;
  }
}

// Pass 2: thread t = h · num_buckets + k; at each step p the threads read adjacent partials.
__global__ void position_bias_sum_kernel(float* dtable, const float* partials, int64_t NH,
                                         int64_t num_buckets, int64_t P) {
  AX_GRID_STRIDE(t, NH * num_buckets) {
    float s = 0.0f;
    for (int64_t p = 0; p < P; ++p) s += partials[p * NH * num_buckets + t];
    const int64_t h = t / num_buckets, k = t % num_buckets;
    dtable[k * NH + h] += s;
  }
}

int warps_per_block(int64_t num_buckets) {
  const int64_t fit = static_cast<int64_t>(kSharedBytes / (num_buckets * kWarpBytesPerBucket));
  return static_cast<int>(std::clamp<int64_t>(fit, 1, kMaxWarpsPerBlock));
}

}  // namespace

int64_t position_bias_max_buckets() {
  return static_cast<int64_t>(kSharedBytes / kWarpBytesPerBucket);
}

int64_t position_bias_scratch_floats(int64_t Bb, int64_t NH, int64_t Tq, int64_t num_buckets) {
  return Bb * ceil_div(Tq, kChunkRows) * NH * num_buckets;
}

template <typename Act>
void position_bias_forward(Act* bias, const Act* table, const int32_t* buckets, int64_t Bb,
                           int64_t NH, int64_t Tq, int64_t Tk, int64_t num_buckets,
                           cudaStream_t stream) {
  const int64_t n = Bb * NH * Tq * Tk;
  if (n == 0) return;
  position_bias_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      bias, table, buckets, NH, Tq, Tk, num_buckets, n);
  AX_CUDA_CHECK_LAUNCH();
}

void position_bias_backward(float* dtable, const float* dbias, const int32_t* buckets, int64_t Bb,
                            int64_t NH, int64_t Tq, int64_t Tk, int64_t num_buckets, float* scratch,
                            cudaStream_t stream) {
  if (Bb * NH * Tq * Tk == 0) return;
  const int64_t chunks_per_row = ceil_div(Tq, kChunkRows), P = Bb * chunks_per_row;
  const int64_t warps = P * NH;
  const int per_block = warps_per_block(num_buckets);
  const size_t shared = static_cast<size_t>(per_block) * num_buckets * kWarpBytesPerBucket;
  position_bias_partials_kernel<<<static_cast<unsigned>(ceil_div(warps, per_block)),
                                  per_block * kWarp, shared, stream>>>(
      scratch, dbias, buckets, NH, Tq, Tk, num_buckets, chunks_per_row, warps);
  AX_CUDA_CHECK_LAUNCH();
  position_bias_sum_kernel<<<grid_for(NH * num_buckets, kThreads), kThreads, 0, stream>>>(
      dtable, scratch, NH, num_buckets, P);
  AX_CUDA_CHECK_LAUNCH();
}

template void position_bias_forward(bf16*, const bf16*, const int32_t*, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, cudaStream_t);
template void position_bias_forward(float*, const float*, const int32_t*, int64_t, int64_t, int64_t,
                                    int64_t, int64_t, cudaStream_t);

}  // namespace ax::train::cuda
