#include "cuda_parity.h"

#include <cstdio>
#include <cstdlib>

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

// x rounded once to `dtype` (bf16: to nearest even, directly from f64; f32: the C++ cast).
double round_to(DType dtype, double x) {
  if (dtype != kBF16) return static_cast<double>(static_cast<float>(x));
  if (x == 0 || !std::isfinite(x)) return x;
  int e = 0;
  std::frexp(x, &e);
  const double step = std::ldexp(1.0, e - 8);  // bf16 keeps 8 significant bits
  return std::nearbyint(x / step) * step;      // the default rounding: ties to even
}

// value - exact in steps of `dtype` at exact (at value when exact is 0).
double steps_off(DType dtype, double value, double exact) {
  const double d = value - exact;
  if (d == 0) return 0;
  const double u = ulp(dtype, exact != 0 ? exact : value);
  return u > 0 ? d / u : INFINITY;
}

std::string fmt(double v, const char* spec = "%.6g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, spec, v);
  return buf;
}

}  // namespace

std::string gemm_diagnosis(DType dtype, const std::vector<float>& gpu,
                           const std::vector<float>& ref, const GemmParts& parts, int64_t first) {
  const size_t n = gpu.size();
  const bool has_addend = !parts.addend.empty();
  if (ref.size() != n || parts.acc.size() != n || (has_addend && parts.addend.size() != n)) {
    return "f64 check: not made (the operands give " + std::to_string(parts.acc.size()) +
           " values for an output of " + std::to_string(n) + ")";
  }
  const auto addend = [&](size_t i) { return has_addend ? parts.addend[i] : 0.0; };
  const auto exact = [&](size_t i) { return parts.acc[i] + addend(i); };
  // What a GEMM that rounds its product to the output's dtype before adding gives.
  const auto early = [&](size_t i) {
    return round_to(dtype, round_to(dtype, parts.acc[i]) + addend(i));
  };
  // Off: more than one step plus kNoise of the output's rms from the f64 value. The noise is
  // what f32 sums of these lengths differ by (an output near 0 after cancellation has tiny steps),
  // a hundredth of the parity bound and far below a bf16 rounding of an intermediate.
  constexpr double kNoise = 1e-5;
  double sq = 0;
  int64_t finite = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isfinite(exact(i))) sq += exact(i) * exact(i), ++finite;
  }
  const double rms = finite > 0 ? std::sqrt(sq / static_cast<double>(finite)) : 0;
  struct Side {
    const char* name;
    const std::vector<float>& v;
    double worst = 0;  // |v - f64| / rms
    int64_t off = 0, once = 0, early = 0, finite = 0;
  };
  Side sides[] = {{"gpu", gpu}, {"reference", ref}};
  for (Side& s : sides) {
    for (size_t i = 0; i < n; ++i) {
      const double x = exact(i), v = s.v[i];
      if (!std::isfinite(x) || !std::isfinite(v)) continue;
      ++s.finite;
      const double err = std::fabs(v - x);
      if (rms > 0) s.worst = std::max(s.worst, err / rms);
      if (err > ulp(dtype, x != 0 ? x : v) + kNoise * rms) ++s.off;
      if (v == round_to(dtype, x)) ++s.once;
      if (v == early(i)) ++s.early;
    }
  }
  const char* unit = dtype == kBF16 ? "bf16" : "f32";
  std::string out = std::string("f64 check (the operands as the GPU holds them; one step: one ") +
                    unit + " step at the f64 value; rms: the f64 output's, " + fmt(rms) + "):";
  if (first >= 0 && static_cast<size_t>(first) < n) {
    const size_t i = static_cast<size_t>(first);
    out += "\n  first [" + std::to_string(first) + "]: f64 " + fmt(exact(i), "%.10g") +
           " = product " + fmt(parts.acc[i], "%.10g") +
           (has_addend ? " + addend " + fmt(addend(i), "%.10g") : std::string()) + "; gpu " +
           fmt(gpu[i], "%.10g") + " (" + fmt(steps_off(dtype, gpu[i], exact(i)), "%+.3f") +
           " steps), reference " + fmt(ref[i], "%.10g") + " (" +
           fmt(steps_off(dtype, ref[i], exact(i)), "%+.3f") + " steps)";
  }
  for (const Side& s : sides) {
    out += std::string("\n  ") + s.name + ": " + std::to_string(s.off) + " of " +
           std::to_string(s.finite) + " more than one step + " + fmt(kNoise, "%g") +
           " rms off, the largest error " + fmt(s.worst, "%.3g") +
           " rms; the f64 value rounded once in " + std::to_string(s.once) + ", " +
           (has_addend ? "the product rounded before the addend (then the sum) in "
                       : "(no addend: a product rounded early is the same) in ") +
           std::to_string(s.early);
  }
  const Side &g = sides[0], &r = sides[1];
  std::string verdict;
  if (g.off > 0 && r.off == 0) {
    verdict = "the GPU is off; the CPU reference is within one step everywhere";
  } else if (r.off > 0 && g.off == 0) {
    verdict = "the CPU reference is off; the GPU is within one step everywhere";
  } else if (g.off > 0) {
    verdict = "both are more than one step off somewhere";
  } else {
    verdict = "both are within one step everywhere (the bound is tighter than two roundings)";
  }
  if (has_addend && g.early > g.once && g.early * 100 >= g.finite * 99) {
    verdict += "; the GPU's values are a product rounded to " + std::string(unit) +
               " before the addend was added";
  }
  return out + "\n  so: " + verdict;
}

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

void ParityHarness::expect(const Pair& p, const std::string& output,
                           const GemmPartsFn& gemm_parts) {
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
  std::string f64;
  if (bad > 0 && spec->compare == Compare::kGemm) {
    const std::optional<GemmParts> parts = gemm_parts ? gemm_parts() : std::nullopt;
    f64 = "\n" + (parts ? gemm_diagnosis(p.dtype, got, want, *parts, first)
                        : std::string("no f64 check: the test gives no operands for it"));
    const char* log = std::getenv("AX_CUDA_GEMM_LOG");
    f64 += log != nullptr && *log != '\0'
               ? "\n  (AX_CUDA_GEMM_LOG is set: the test's GEMM plans, when it is on, are on "
                 "stderr after its [ RUN ] line)"
               : "\n  (AX_CUDA_GEMM_LOG=1 prints the test's GEMM plans, their algorithms "
                 "included)";
  }
  EXPECT_EQ(bad, 0) << output << " (" << spec->why << "): " << bad << " of " << want.size()
                    << " elements differ; first [" << first << "] gpu "
                    << (first >= 0 ? got[first] : 0) << " reference "
                    << (first >= 0 ? want[first] : 0) << "; rms " << rms << ", allowed " << steps
                    << " step(s) + " << rel << " of (|ref| + rms), worst " << worst << f64;
}

}  // namespace ax::train::parity
