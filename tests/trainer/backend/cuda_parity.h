// The fixture of the CUDA backend's parity suites (label gpu; every test skips without a GPU):
// cuda_op_table_test.cc runs every op case of the op table (op_table.h), cuda_parity_test.cc the
// casts and what is not one op case, cuda_limits_test.cc sizes and ids at the edges. Each test
// runs once per dtype plan (kModes) against the CPU backend that plan is held to:
//   bf16  the CUDA backend's default plan, against cpu-bf16 (the same plan on the CPU: bf16
//         storage, f32 math, one rounding to nearest even per store);
//   f32   train.precision=float32, against the f32 CPU reference: the tightest check, as only
//         summation order and exp/tanh implementations differ;
//   tf32  float32 with train.allow_tf32: the same, GEMMs on TF32 tensor cores;
// and, for the op table's attention cases, bf16 with the tensor-core attention kernels off
// (kCudaCoreAttention: the f32 CUDA-core kernels held to cpu-bf16 as tightly as any op).
// Both sides get the same input bits. How each output is compared, and why, is one table
// (kOutputs); docs/cuda-backend.md "Tests and tolerances" explains it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "ax/trainer/backend/backend.h"

namespace ax::train::parity {

inline constexpr DType kBF16 = DType::kBF16;
inline constexpr DType kF32 = DType::kF32;

// A dtype plan of the CUDA backend and the reference it is checked against.
struct Mode {
  const char* name;
  DType act;        // activations and compute weights
  bool allow_tf32;  // f32 GEMMs on TF32 tensor cores
  bool cpu_bf16;    // reference: make_cpu_bf16_backend, else make_cpu_backend (f32)
  double rel;       // f32 noise allowed: summation order, expf / tanhf implementations
  double gemm_rel;  // the same for GEMM outputs (TF32 keeps 10 of the inputs' 23 mantissa bits)
  bool tensor_core_attention = true;  // CudaBackendOptions::tensor_core_attention
};

inline constexpr Mode kModes[] = {
    {"bf16", kBF16, false, true, 1e-4, 1e-4},
    {"f32", kF32, false, false, 1e-4, 1e-4},
    {"tf32", kF32, true, false, 1e-4, 1e-2},
};
inline constexpr Mode kCudaCoreAttention = {
    "bf16_cuda_cores", kBF16, false, true, 1e-4, 1e-4, false};

// Attention outputs (Compare::kAttention) in a bf16 plan with the tensor-core kernels: P and dS
// enter the products rounded to bf16, and a gradient's few large errors come where dP - D
// cancels (as in the bf16 plan itself). Allowed: one bf16 step plus this share of
// |ref| + rms(ref), and an rms error of at most kAttentionTensorCoreRms of rms(ref). Measured on
// the CPU emulation of the kernels against cpu-bf16, the backward pass from cpu-bf16's out and
// lse as here (attention_tc_test.cc, held to 3e-2 and 1e-2): share at most 1.5e-2, rms error
// at most 2.7e-3.
inline constexpr double kAttentionTensorCoreShare = 5e-2;
inline constexpr double kAttentionTensorCoreRms = 1e-2;

inline void PrintTo(const Mode& m, std::ostream* os) { *os << m.name; }

enum class Compare {
  kSame,       // the same IEEE operations in the same order on both sides: equal values
  kRounded,    // f32 math differing in order or exp/tanh, then the output's one rounding: within
               // one step (ulp) of the output's dtype plus mode.rel · (|ref| + rms(ref))
  kGemm,       // as kRounded, with mode.gemm_rel
  kAttention,  // as kRounded; in a bf16 plan with tensor-core attention, kAttentionTensorCore*
};

struct OutputSpec {
  const char* output;
  Compare compare;
  const char* why;
};

// Every output the suites compare: the one table of what the CUDA backend is held to.
inline constexpr OutputSpec kOutputs[] = {
    {"copy", Compare::kSame, "a cast rounds once to nearest even on both; a copy moves bits"},
    {"zero", Compare::kSame, "zero bytes"},
    {"embedding_forward", Compare::kSame, "one f32 add of the wte and wpe rows, rounded once"},
    {"embedding_backward dwpe", Compare::kSame, "dout added into dwpe batch by batch, in order"},
    {"embedding_backward dwte", Compare::kRounded, "f32 atomics: repeated tokens add in any order"},
    {"layernorm_forward out", Compare::kRounded, "warp-shuffle row sums"},
    {"layernorm_forward mean", Compare::kRounded, "warp-shuffle row sums"},
    {"layernorm_forward rstd", Compare::kRounded, "warp-shuffle row sums"},
    {"layernorm_backward dinp", Compare::kRounded, "warp-shuffle row sums"},
    {"layernorm_backward dweight", Compare::kRounded, "column sums in 256-row chunks"},
    {"layernorm_backward dbias", Compare::kRounded, "column sums in 256-row chunks"},
    {"rmsnorm_forward out", Compare::kRounded, "warp-shuffle row sums"},
    {"rmsnorm_forward rstd", Compare::kRounded, "warp-shuffle row sums"},
    {"rmsnorm_backward dinp", Compare::kRounded, "warp-shuffle row sums"},
    {"rmsnorm_backward dweight", Compare::kRounded, "column sums in 256-row chunks"},
    {"matmul_forward", Compare::kGemm, "cuBLASLt's summation order (and TF32 when allowed)"},
    {"matmul_backward dinp", Compare::kGemm, "cuBLASLt's summation order (and TF32)"},
    {"matmul_backward dweight", Compare::kGemm, "cuBLASLt's summation order (and TF32)"},
    {"matmul_backward dbias", Compare::kRounded, "column sums in 256-row chunks"},
    {"matmul_backward integers", Compare::kSame,
     "integer products and sums below 2^24: exact in any order, in bf16, TF32 and f32"},
    {"rope_forward", Compare::kRounded, "the same f32 table; nvcc and GCC fuse other mul-adds"},
    {"rope_backward", Compare::kRounded, "the same f32 table; nvcc and GCC fuse other mul-adds"},
    {"attention_forward out", Compare::kAttention,
     "online softmax over key tiles, expf; tensor cores: P rounded to bf16 for P·V"},
    {"attention_forward lse", Compare::kAttention, "online softmax over key tiles, expf, logf"},
    {"attention_backward dqkv", Compare::kAttention,
     "tile products recomputed, expf; tensor cores: P and dS rounded to bf16"},
    {"attention_backward dq", Compare::kAttention,
     "tile products recomputed, expf; q's columns past the query heads stay as they were"},
    {"attention_backward dkv", Compare::kAttention,
     "tile products recomputed, expf; kv's columns outside the key and value heads stay"},
    {"attention_backward dbias", Compare::kAttention,
     "expf; a shared bias's batch rows summed in chunks (partials, then in order), not one by one"},
    {"gelu_forward", Compare::kRounded, "tanhf"},
    {"gelu_backward", Compare::kRounded, "tanhf"},
    {"glu_forward swiglu", Compare::kRounded, "expf"},
    {"glu_backward swiglu", Compare::kRounded, "expf"},
    {"glu_forward geglu", Compare::kRounded, "tanhf"},
    {"glu_backward geglu", Compare::kRounded, "tanhf"},
    {"dropout_forward", Compare::kSame, "the same hash and one f32 multiply, rounded once"},
    {"dropout_backward", Compare::kRounded, "a multiply-add nvcc may fuse into one FMA"},
    {"add_forward", Compare::kSame, "one f32 add, rounded once"},
    {"add_forward f32", Compare::kSame, "one f32 add (FSDP's gradient shards)"},
    {"position_bias_forward", Compare::kSame, "a gather moves the table's values"},
    {"position_bias_backward", Compare::kRounded,
     "per-bucket sums: lane columns, a shuffle tree and chunk partials vs the CPU's f64 sums"},
    {"cross_entropy_forward", Compare::kRounded, "online max and Σ exp over 512 threads, expf"},
    {"cross_entropy_backward", Compare::kRounded, "online max and Σ exp over 512 threads, expf"},
    {"ce_shard_max", Compare::kSame, "a maximum is exact"},
    {"ce_shard_sums", Compare::kRounded, "Σ exp over 512 threads, expf"},
    {"ce_shard_backward", Compare::kRounded, "expf"},
    {"adamw", Compare::kSame, "the reference's float operations in its order, none fused"},
};

// A GEMM output in f64 from the operands as the GPU holds them (bf16 values are exact in f64, and
// so are their products): out = acc + addend, acc the product, addend what the GEMM adds to it
// (the bias broadcast over the rows; the output's starting values, which it accumulates onto
// with beta 1), empty when it adds nothing.
struct GemmParts {
  std::vector<double> acc, addend;
};

// Where a failing GEMM output stands against its f64 value (ulp: one step of `dtype` at that
// value): for element `first` and for all, the error of the GPU and of the CPU reference, how
// many of each are that value rounded once, and how many are what a GEMM that rounds its product
// to `dtype` before adding the addend (then rounds again) would give; then which side is off.
std::string gemm_diagnosis(DType dtype, const std::vector<float>& gpu,
                           const std::vector<float>& ref, const GemmParts& parts, int64_t first);

// One tensor on both backends, of one dtype, holding the same values.
struct Pair {
  std::vector<int64_t> shape;
  DType dtype = kF32;
  Tensor ref, gpu;
};

// A view of `count` rows of a matrix (or elements of a vector) from row `first`.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count = 1);

// The two backends of one dtype plan and their tensors, for any parameterised fixture.
class ParityHarness {
 public:
  virtual ~ParityHarness() = default;

 protected:
  virtual const Mode& mode() const = 0;
  // Creates both backends; false (and why, in skip_reason_) when no GPU answers.
  bool start();
  void finish();  // frees the tensors
  DType act() const { return mode().act; }

  // A tensor of `dtype` on one backend (zeroed); an allocation failure is returned, not fatal.
  StatusOr<Tensor> try_make(Backend& be, DType dtype, const std::vector<int64_t>& shape);
  Tensor make(Backend& be, DType dtype, const std::vector<int64_t>& shape);

  // Values uniform in [-scale, scale] as `dtype` holds them.
  std::vector<float> uniform(int64_t n, DType dtype, float scale = 1.0f);
  // Integers uniform in [-bound, bound].
  std::vector<float> small_ints(int64_t n, int bound);
  Pair random(std::vector<int64_t> shape, DType dtype, float scale = 1.0f);
  Pair zeros(std::vector<int64_t> shape, DType dtype);
  Pair upload(std::vector<int64_t> shape, DType dtype, const std::vector<float>& values);
  Pair ints(std::vector<int64_t> shape, const std::vector<int32_t>& values);
  // n ids in [0, vocab), about one in `ignore_every` replaced by -1 (0: none).
  std::vector<int32_t> ids(int64_t n, int64_t vocab, int ignore_every = 0);

  static std::vector<float> read(Backend& be, const Tensor& t);
  static void write(Backend& be, const Tensor& t, const std::vector<float>& values);
  std::vector<float> ref_values(const Pair& p) { return read(*ref_, p.ref); }
  std::vector<float> gpu_values(const Pair& p) { return read(*gpu_, p.gpu); }
  // The reference's values into the GPU tensor (saved statistics, a saved output), or back.
  void give_gpu_the_ref(const Pair& p) { write(*gpu_, p.gpu, ref_values(p)); }
  void give_ref_the_gpu(const Pair& p) { write(*ref_, p.ref, gpu_values(p)); }

  // Compares p as kOutputs says for `output` in this mode; an output missing from the table
  // fails the test. A GEMM output (Compare::kGemm) that fails is also held to its f64 value,
  // from `gemm_parts` when the caller gives it (called only then; nullopt: none), and the
  // message says which side is off (gemm_diagnosis).
  using GemmPartsFn = std::function<std::optional<GemmParts>()>;
  void expect(const Pair& p, const std::string& output, const GemmPartsFn& gemm_parts = {});

  std::unique_ptr<Backend> ref_, gpu_;
  std::mt19937 rng_;
  std::string skip_reason_;

 private:
  std::vector<std::pair<Backend*, void*>> allocations_;
};

// The suites' fixture: one test per dtype plan (kModes).
class ParityTest : public ::testing::TestWithParam<Mode>, protected ParityHarness {
 protected:
  void SetUp() override {
    if (!start()) GTEST_SKIP() << skip_reason_;
  }
  void TearDown() override { finish(); }
  const Mode& mode() const override { return GetParam(); }
};

}  // namespace ax::train::parity
