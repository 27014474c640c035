// Embedding lookup, LayerNorm and RMSNorm: one warp per row for the row-wise passes (a row's
// statistics are warp reductions, no shared memory), and column sums over row chunks for the
// parameter gradients, reduced in a fixed order so that they are the same on every run.
#include <algorithm>

#include "cuda_common.cuh"

namespace ax::train::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / kWarp;
constexpr int kChunkRows = 256;  // rows per partial sum of column_grads

template <typename Act>
__global__ void embedding_forward_kernel(Act* out, const int32_t* tokens, const Act* wte,
                                         const Act* wpe, int64_t T, int64_t C, int64_t n) {
  AX_GRID_STRIDE(i, n) {
    int64_t row = i / C, c = i % C;
    int32_t id = tokens[row];
    float v = id >= 0 ? to_f32(wte[id * C + c]) : 0.0f;
    if (wpe != nullptr) v += to_f32(wpe[(row % T) * C + c]);
    store(&out[i], v);
  }
}

template <typename Act>
__global__ void embedding_backward_wte_kernel(float* dwte, const Act* dout, const int32_t* tokens,
                                              int64_t C, int64_t n) {
  AX_GRID_STRIDE(i, n) {
    int32_t id = tokens[i / C];
    if (id >= 0) atomicAdd(&dwte[id * C + i % C], to_f32(dout[i]));
  }
}

// dwpe[t, c] += dout[b, t, c] for b = 0, 1, ...: the CPU backend's additions in its order.
template <typename Act>
__global__ void embedding_backward_wpe_kernel(float* dwpe, const Act* dout, int64_t B, int64_t T,
                                              int64_t C) {
  AX_GRID_STRIDE(i, T * C) {
    float acc = dwpe[i];
    for (int64_t b = 0; b < B; ++b) acc += to_f32(dout[b * T * C + i]);
    dwpe[i] = acc;
  }
}

// The same float operations as the CPU reference: mean = Σx / C, var = Σ(x - mean)² / C,
// y = (x - mean) · rstd · w (+ b); RMSNorm: rstd = 1 / sqrt(Σx² / C + eps), y = x · rstd · w.
template <bool kRms, typename Act>
__global__ void norm_forward_kernel(Act* out, float* mean, float* rstd, const Act* inp,
                                    const Act* weight, const Act* bias, int64_t N, int64_t C,
                                    float eps) {
  int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const Act* x = inp + row * C;
  Act* y = out + row * C;
  float m = 0.0f, s;
  if (kRms) {
    float sq = 0.0f;
    for (int64_t c = lane; c < C; c += kWarp) sq += to_f32(x[c]) * to_f32(x[c]);
    s = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(C) + eps);
  } else {
    float sum = 0.0f;
    for (int64_t c = lane; c < C; c += kWarp) sum += to_f32(x[c]);
    m = warp_sum(sum) / static_cast<float>(C);
    float dev = 0.0f;
    for (int64_t c = lane; c < C; c += kWarp) {
      float d = to_f32(x[c]) - m;
      dev += d * d;
    }
    s = 1.0f / sqrtf(warp_sum(dev) / static_cast<float>(C) + eps);
  }
  for (int64_t c = lane; c < C; c += kWarp) {
    float v = (to_f32(x[c]) - m) * s * to_f32(weight[c]);
    if (bias != nullptr) v += to_f32(bias[c]);
    store(&y[c], v);
  }
  if (lane == 0) {
    if (!kRms) mean[row] = m;
    rstd[row] = s;
  }
}

// dinp += (dnorm - mean(dnorm) - norm · mean(dnorm · norm)) · rstd, dnorm = dout · weight;
// RMSNorm drops the mean(dnorm) term.
template <bool kRms, typename Act>
__global__ void norm_backward_inputs_kernel(Act* dinp, const Act* dout, const Act* inp,
                                            const Act* weight, const float* mean, const float* rstd,
                                            int64_t N, int64_t C) {
  int64_t row = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / kWarp;
  int lane = threadIdx.x % kWarp;
  if (row >= N) return;
  const Act* x = inp + row * C;
  const Act* dy = dout + row * C;
  Act* dx = dinp + row * C;
  float m = kRms ? 0.0f : mean[row], s = rstd[row];
  float sum_d = 0.0f, sum_dn = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) {
    float dnorm = to_f32(dy[c]) * to_f32(weight[c]);
    sum_d += dnorm;
    sum_dn += dnorm * ((to_f32(x[c]) - m) * s);
  }
  float mean_d = kRms ? 0.0f : warp_sum(sum_d) / static_cast<float>(C);
  float mean_dn = warp_sum(sum_dn) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += kWarp) {
    float norm = (to_f32(x[c]) - m) * s;
    add_to(&dx[c], (to_f32(dy[c]) * to_f32(weight[c]) - mean_d - norm * mean_dn) * s);
  }
}

// Block (32, 8) sums 32 columns over chunks of kChunkRows rows; partials (2, chunks, C). The
// grid's y runs over the chunks in steps of gridDim.y (at most kMaxGridY), so any N fits.
template <typename Act>
__global__ void column_partials_kernel(float* partials, const Act* dout, const Act* inp,
                                       const float* mean, const float* rstd, bool want_weight,
                                       int64_t N, int64_t C, int64_t chunks) {
  __shared__ float sw[8][kWarp + 1], sb[8][kWarp + 1];
  const int64_t c = blockIdx.x * int64_t{kWarp} + threadIdx.x;
  for (int64_t chunk = blockIdx.y; chunk < chunks; chunk += gridDim.y) {
    const int64_t r_end = min(N, (chunk + 1) * kChunkRows);
    float acc_w = 0.0f, acc_b = 0.0f;
    if (c < C) {
      for (int64_t r = chunk * kChunkRows + threadIdx.y; r < r_end; r += blockDim.y) {
        float dy = to_f32(dout[r * C + c]);
        acc_b += dy;
        if (want_weight) {
          float m = mean != nullptr ? mean[r] : 0.0f;
          acc_w += dy * ((to_f32(inp[r * C + c]) - m) * rstd[r]);
        }
      }
    }
    __syncthreads();  // the previous chunk's sums have been read
    sw[threadIdx.y][threadIdx.x] = acc_w;
    sb[threadIdx.y][threadIdx.x] = acc_b;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
      float w = 0.0f, b = 0.0f;
      for (int y = 0; y < blockDim.y; ++y) {
        w += sw[y][threadIdx.x];
        b += sb[y][threadIdx.x];
      }
      partials[chunk * C + c] = w;
      partials[(chunks + chunk) * C + c] = b;
    }
  }
}

__global__ void column_finish_kernel(float* dweight, float* dbias, const float* partials,
                                     int64_t chunks, int64_t C) {
  int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float w = 0.0f, b = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    w += partials[k * C + c];
    b += partials[(chunks + k) * C + c];
  }
  if (dweight != nullptr) dweight[c] += w;
  if (dbias != nullptr) dbias[c] += b;
}

}  // namespace

template <typename Act>
void embedding_forward(Act* out, const int32_t* tokens, const Act* wte, const Act* wpe, int64_t B,
                       int64_t T, int64_t C, cudaStream_t stream) {
  int64_t n = B * T * C;
  if (n == 0) return;
  embedding_forward_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(out, tokens, wte, wpe, T,
                                                                           C, n);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void embedding_backward(float* dwte, float* dwpe, const Act* dout, const int32_t* tokens, int64_t B,
                        int64_t T, int64_t C, cudaStream_t stream) {
  int64_t n = B * T * C;
  if (n == 0) return;
  embedding_backward_wte_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(dwte, dout, tokens,
                                                                                C, n);
  AX_CUDA_CHECK_LAUNCH();
  if (dwpe == nullptr) return;
  embedding_backward_wpe_kernel<<<grid_for(T * C, kThreads), kThreads, 0, stream>>>(dwpe, dout, B,
                                                                                    T, C);
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void norm_forward(Act* out, float* mean, float* rstd, const Act* inp, const Act* weight,
                  const Act* bias, int64_t N, int64_t C, float eps, cudaStream_t stream) {
  if (N == 0) return;
  unsigned blocks = static_cast<unsigned>(ceil_div(N, kRowsPerBlock));
  if (mean == nullptr) {
    norm_forward_kernel<true>
        <<<blocks, kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
  } else {
    norm_forward_kernel<false>
        <<<blocks, kThreads, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C, eps);
  }
  AX_CUDA_CHECK_LAUNCH();
}

template <typename Act>
void norm_backward_inputs(Act* dinp, const Act* dout, const Act* inp, const Act* weight,
                          const float* mean, const float* rstd, int64_t N, int64_t C,
                          cudaStream_t stream) {
  if (N == 0) return;
  unsigned blocks = static_cast<unsigned>(ceil_div(N, kRowsPerBlock));
  if (mean == nullptr) {
    norm_backward_inputs_kernel<true>
        <<<blocks, kThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  } else {
    norm_backward_inputs_kernel<false>
        <<<blocks, kThreads, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
  }
  AX_CUDA_CHECK_LAUNCH();
}

int64_t column_grads_scratch_floats(int64_t N, int64_t C) {
  return 2 * std::max<int64_t>(1, ceil_div(N, kChunkRows)) * C;
}

template <typename Act>
void column_grads(float* dweight, float* dbias, const Act* dout, const Act* inp, const float* mean,
                  const float* rstd, int64_t N, int64_t C, float* scratch, cudaStream_t stream) {
  if (N == 0 || C == 0 || (dweight == nullptr && dbias == nullptr)) return;
  const int64_t chunks = ceil_div(N, kChunkRows);
  dim3 grid(static_cast<unsigned>(ceil_div(C, kWarp)),
            static_cast<unsigned>(std::min(chunks, kMaxGridY)));
  column_partials_kernel<<<grid, dim3(kWarp, 8), 0, stream>>>(scratch, dout, inp, mean, rstd,
                                                              dweight != nullptr, N, C, chunks);
  AX_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<static_cast<unsigned>(ceil_div(C, kThreads)), kThreads, 0, stream>>>(
      dweight, dbias, scratch, chunks, C);
  AX_CUDA_CHECK_LAUNCH();
}

// The launchers for both activation types (cuda_kernels.h).
#define AX_NORM_LAUNCHERS(Act)                                                                    \
  template void embedding_forward(Act*, const int32_t*, const Act*, const Act*, int64_t, int64_t, \
                                  int64_t, cudaStream_t);                                         \
  template void embedding_backward(float*, float*, const Act*, const int32_t*, int64_t, int64_t,  \
                                   int64_t, cudaStream_t);                                        \
  template void norm_forward(Act*, float*, float*, const Act*, const Act*, const Act*, int64_t,   \
                             int64_t, float, cudaStream_t);                                       \
  template void norm_backward_inputs(Act*, const Act*, const Act*, const Act*, const float*,      \
                                     const float*, int64_t, int64_t, cudaStream_t);               \
  template void column_grads(float*, float*, const Act*, const Act*, const float*, const float*,  \
                             int64_t, int64_t, float*, cudaStream_t);
AX_NORM_LAUNCHERS(bf16)
AX_NORM_LAUNCHERS(float)
#undef AX_NORM_LAUNCHERS

}  // namespace ax::train::cuda
