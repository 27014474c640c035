#include "cuda_parity.h"

#include <cstdio>

namespace ax::train::parity {
namespace {

const OutputSpec* spec_of(const std::string& output) {
  for (const OutputSpec& s : kOutputs) {
    if (output == s.output) return &s;
  }
  return nullptr;
}

// The spacing of `dtype` values at magnitude x: what one rounding step may change.
double ulp(DType dtype, double x) {
  if (x == 0 || !std::isfinite(x)) return 0;
  int e = 0;
  std::frexp(x, &e);  // x = f · 2^e, f in [0.5, 1)
  return std::ldexp(1.0, e - (dtype == kBF16 ? 8 : 24));
}

}  // namespace

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) {
  const int64_t cols = t.ndim == 1 ? 1 : t.cols();
  Tensor v = t;
  v.data = static_cast<char*>(t.data) + first * cols * static_cast<int64_t>(dtype_size(t.dtype));
  v.ndim = t.ndim == 1 ? 1 : 2;
  v.shape = {};
  v.shape[0] = count;
  if (t.ndim > 1) v.shape[1] = cols;
  return v;
}

bool ParityHarness::start() {
  if (cuda_device_count() == 0) {
    skip_reason_ = "no GPU answered: " + make_cuda_backend(0).status().message();
    return false;
  }
  auto gpu = make_cuda_backend(0, {mode().act, mode().allow_tf32, mode().tensor_core_attention});
  if (!gpu.ok()) {
    ADD_FAILURE() << gpu.status().to_string();
    skip_reason_ = "the CUDA backend failed";
    return false;
  }
  gpu_ = std::move(*gpu);
  ref_ = mode().cpu_bf16 ? make_cpu_bf16_backend(0) : make_cpu_backend(0);
  const unsigned seed = std::random_device{}();
  rng_.seed(seed);
  ::testing::Test::RecordProperty("seed", static_cast<int>(seed));
  std::printf("mode %s against %s, seed %u\n", mode().name, ref_->name().c_str(), seed);
  return true;
}

void ParityHarness::finish() {
  for (auto& [be, p] : allocations_) be->free(p);
}

StatusOr<Tensor> ParityHarness::try_make(Backend& be, DType dtype,
                                         const std::vector<int64_t>& shape) {
  Tensor t;
  t.dtype = dtype;
  for (int64_t d : shape) t.shape[t.ndim++] = d;
  AX_ASSIGN_OR_RETURN(void* p, be.alloc(std::max<size_t>(t.bytes(), 1)));
  t.data = p;
  allocations_.push_back({&be, p});
  return t;
}

Tensor ParityHarness::make(Backend& be, DType dtype, const std::vector<int64_t>& shape) {
  auto t = try_make(be, dtype, shape);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? *t : Tensor();
}

std::vector<float> ParityHarness::uniform(int64_t n, DType dtype, float scale) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dtype == kBF16 ? f32_from_bf16(bf16_from_f32(dist(rng_))) : dist(rng_);
  return v;
}

std::vector<float> ParityHarness::small_ints(int64_t n, int bound) {
  std::uniform_int_distribution<int> dist(-bound, bound);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(dist(rng_));
  return v;
}

Pair ParityHarness::random(std::vector<int64_t> shape, DType dtype, float scale) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return upload(std::move(shape), dtype, uniform(n, dtype, scale));
}

Pair ParityHarness::zeros(std::vector<int64_t> shape, DType dtype) {
  return Pair{shape, dtype, make(*ref_, dtype, shape), make(*gpu_, dtype, shape)};
}

Pair ParityHarness::upload(std::vector<int64_t> shape, DType dtype,
                           const std::vector<float>& values) {
  Pair p = zeros(std::move(shape), dtype);
  write(*ref_, p.ref, values);
  write(*gpu_, p.gpu, values);
  return p;
}

Pair ParityHarness::ints(std::vector<int64_t> shape, const std::vector<int32_t>& values) {
  Pair p = zeros(std::move(shape), DType::kI32);
  ref_->copy_from_host(p.ref, values.data());
  gpu_->copy_from_host(p.gpu, values.data());
  return p;
}

std::vector<int32_t> ParityHarness::ids(int64_t n, int64_t vocab, int ignore_every) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = ignore_every > 0 && i % ignore_every == 1 ? -1 : dist(rng_);
  }
  return v;
}

std::vector<float> ParityHarness::read(Backend& be, const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (t.dtype == kBF16) {
    std::vector<uint16_t> h(v.size());
    be.copy_to_host(h.data(), t);
    for (size_t i = 0; i < v.size(); ++i) v[i] = f32_from_bf16(h[i]);
  } else if (t.dtype == DType::kI32) {
    std::vector<int32_t> h(v.size());
    be.copy_to_host(h.data(), t);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(h[i]);
  } else {
    be.copy_to_host(v.data(), t);
  }
  return v;
}

void ParityHarness::write(Backend& be, const Tensor& t, const std::vector<float>& values) {
  EXPECT_EQ(static_cast<int64_t>(values.size()), t.numel());
  if (t.dtype == kBF16) {
    std::vector<uint16_t> h(values.size());
    for (size_t i = 0; i < h.size(); ++i) h[i] = bf16_from_f32(values[i]);
    be.copy_from_host(t, h.data());
  } else {
    be.copy_from_host(t, values.data());
  }
}

void ParityHarness::expect(const Pair& p, const std::string& output) {
  const OutputSpec* spec = spec_of(output);
  ASSERT_NE(spec, nullptr) << "'" << output << "' has no row in kOutputs (cuda_parity.h)";
  double steps = 1, rel = mode().rel;
  if (spec->compare == Compare::kSame) steps = rel = 0;
  if (spec->compare == Compare::kGemm) rel = mode().gemm_rel;
  const bool tensor_cores =
      spec->compare == Compare::kAttention && mode().act == kBF16 && mode().tensor_core_attention;
  if (tensor_cores) rel = kAttentionTensorCoreShare;
  std::vector<float> want = ref_values(p), got = gpu_values(p);
  double sq = 0;
  for (float w : want) sq += std::isfinite(w) ? static_cast<double>(w) * w : 0.0;
  const double rms = want.empty() ? 0 : std::sqrt(sq / static_cast<double>(want.size()));
  int64_t bad = 0, first = -1;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i] || (std::isnan(got[i]) && std::isnan(want[i]))) continue;
    const double w = want[i], g = got[i], err = std::fabs(g - w);
    const double allowed =
        steps * ulp(p.dtype, std::max(std::fabs(g), std::fabs(w))) + rel * (std::fabs(w) + rms);
    if (!(err <= allowed)) {
      if (bad++ == 0) first = static_cast<int64_t>(i);
      worst = std::max(worst, std::isfinite(err) ? err / (std::fabs(w) + rms) : INFINITY);
    }
  }
  if (tensor_cores) {
    double se = 0;
    int64_t n = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!std::isfinite(want[i])) continue;
      se += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      ++n;
    }
    const double rms_err = n > 0 ? std::sqrt(se / static_cast<double>(n)) : 0;
    EXPECT_LE(rms_err, kAttentionTensorCoreRms * rms)
        << output << ": rms error " << rms_err << " of an rms " << rms;
  }
  EXPECT_EQ(bad, 0) << output << " (" << spec->why << "): " << bad << " of " << want.size()
                    << " elements differ; first [" << first << "] gpu "
                    << (first >= 0 ? got[first] : 0) << " reference "
                    << (first >= 0 ? want[first] : 0) << "; rms " << rms << ", allowed " << steps
                    << " step(s) + " << rel << " of (|ref| + rms), worst " << worst;
}

}  // namespace ax::train::parity
