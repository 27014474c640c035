// The tensor-core attention kernels' block programs (attention_tc.h) run on the CPU: a context
// that runs each phase's work items in turn, emulates the 16×16 bf16 tile product with f32
// accumulation and checks wmma's rules (32-byte aligned tile pointers, row pitches in 16 bytes,
// 16-byte global rows), shared memory filled with NaN before each block (a read of anything not
// written first spoils the result). Held to the f32 CPU backend on the same bf16 inputs, and run
// twice, work items forwards and backwards, for the same bits: a phase whose items read what
// other items of the phase write would differ. What this cannot see: wmma's own fragment
// layouts, and timing (tests/trainer/backend/cuda_op_table_test.cc on a GPU).
#include "attention_tc.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "attention_plan.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/tensor.h"
#include "backend_test_util.h"

namespace ax::train::cuda::tc {
namespace {

struct Bf16 {
  uint16_t bits;
};

bool aligned(const void* p, size_t n) { return reinterpret_cast<uintptr_t>(p) % n == 0; }

int g_rule_breaks = 0;  // wmma or vector-load rules broken by a block program

void rule(bool ok) {
  if (!ok) ++g_rule_breaks;
}

struct HostCtx {
  bool reverse = false;

  void sync() const {}
  template <class F>
  void for_each(int n, F f) const {
    for (int k = 0; k < n; ++k) f(reverse ? n - 1 - k : k);
  }
  template <class F>
  void for_each_warp(int n, F f) const {
    for_each(n, f);
  }
  // c (16×16, f32, pitch ldc) = (load_c ? c : 0) + A·B, A 16×k (element (i, kk) at a[i·lda + kk],
  // or a[kk·lda + i] when kTransA), B k×16 (b[kk·ldb + j], or b[j·ldb + kk] when kTransB).
  template <bool kTransA, bool kTransB>
  void mma16(float* c, int ldc, bool load_c, const Bf16* a, int lda, const Bf16* b, int ldb,
             int k) const {
    rule(aligned(c, 32) && aligned(a, 32) && aligned(b, 32));
    rule(ldc % 4 == 0 && lda % 8 == 0 && ldb % 8 == 0 && k % 16 == 0);
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) {
        float acc = load_c ? c[i * ldc + j] : 0.0f;
        for (int kk = 0; kk < k; ++kk) {
          const Bf16 x = kTransA ? a[kk * lda + i] : a[i * lda + kk];
          const Bf16 y = kTransB ? b[j * ldb + kk] : b[kk * ldb + j];
          acc += f32_from_bf16(x.bits) * f32_from_bf16(y.bits);
        }
        c[i * ldc + j] = acc;
      }
    }
  }
  static float exp(float x) { return std::exp(x); }
  static float log(float x) { return std::log(x); }
  static float f32(Bf16 x) { return f32_from_bf16(x.bits); }
  static float mul(float a, float b) { return a * b; }
  static Bf16 round(float x) { return {bf16_from_f32(x)}; }
  static void copy8(Bf16* dst, const Bf16* src) {
    rule(aligned(dst, 16) && aligned(src, 16));
    std::memcpy(dst, src, 16);
  }
  static void zero8(Bf16* dst) {
    rule(aligned(dst, 16));
    std::memset(dst, 0, 16);
  }
  static void store8(Bf16* dst, const float* v) {
    rule(aligned(dst, 16));
    for (int e = 0; e < 8; ++e) dst[e] = round(v[e]);
  }
  static void add8(Bf16* dst, const float* v) {
    rule(aligned(dst, 16));
    for (int e = 0; e < 8; ++e) dst[e] = round(f32_from_bf16(dst[e].bits) + v[e]);
  }
};

// A block's shared memory, 128-byte aligned, NaN bytes until written.
class Smem {
 public:
  unsigned char* fresh(size_t bytes) {
    buf_.assign(bytes + 128, 0xFF);
    auto p = reinterpret_cast<uintptr_t>(buf_.data());
    return buf_.data() + (128 - p % 128) % 128;
  }

 private:
  std::vector<unsigned char> buf_;
};

struct Case {
  const char* name;
  int64_t B, Tq, Tk, NH, KVH, HD;
  bool causal, packed, segments;
  int64_t q_extra = 0, k_offset = 0, kv_extra = 0;  // general (not packed) layouts
  // Values: N(0, 1.5²) with upstream gradients N(0, 1); or, as the op table's parity cases draw
  // them, U(-uniform, uniform) with upstream gradients U(-1, 1).
  float uniform = 0;
  float grad0 = 0.01f;     // the scale of the gradients backward adds to
  int64_t bias_batch = 0;  // an additive bias (bias_batch, NH, Tq, Tk) and its gradient; 0: none
  float scale = 0;         // multiplies Q·Kᵀ; 0: 1/sqrt(HD)
  // AttentionSpec's first positions (a slice of a row against the whole row's keys).
  int64_t q_first = 0, k_first = 0;
};

std::vector<Bf16> to_bf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = {bf16_from_f32(v[i])};
  return out;
}
std::vector<float> to_f32(const std::vector<Bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = f32_from_bf16(v[i].bits);
  return out;
}

// Segment ids in runs of 1..longest; in a cross case the last two queries of row 0 get an id no
// key has (no visible key: zeros, lse = -inf, no gradient).
std::vector<int32_t> runs(int64_t B, int64_t T, int longest, std::mt19937& rng) {
  std::uniform_int_distribution<int> len(1, longest);
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < B; ++b) {
    int32_t id = 1;
    int left = len(rng);
    for (int64_t t = 0; t < T; ++t, --left) {
      if (left == 0) {
        left = len(rng);
        ++id;
      }
      ids.push_back(id);
    }
  }
  return ids;
}

struct Result {
  std::vector<float> out, lse, dq, dkv, dbias;  // dq == dkv's tensor when packed
};

// An emulated call's inputs: bf16 values (bias empty: none), segment ids (null: none), the
// gradients backward adds to.
struct Inputs {
  std::vector<Bf16> q, kv, dout, dq0, dkv0, bias;
  std::vector<float> dbias0;
  const int32_t *q_seg, *k_seg;
  int64_t bias_batch;
  bool packed;
  // When set, the backward pass starts from these instead of the forward pass's own (as the
  // CUDA parity suite gives both backends the reference's out and lse).
  std::vector<Bf16> given_out;
  std::vector<float> given_lse;
};

// The emulated kernels over the whole grid, as cuda_attention_tc.cu launches them. The dQ grid's
// batch chunks follow dbias_plan (attention_plan.h), or hold `rows` batch rows each when given.
Result run_tc(const Shape& d, const Inputs& in, bool reverse, int64_t rows = 0) {
  HostCtx c{reverse};
  Smem smem;
  const Bias<Bf16> bias{in.bias.empty() ? nullptr : in.bias.data(),
                        in.bias_batch == 1 ? 0 : d.NH * d.Tq * d.Tk};
  std::vector<Bf16> out(d.B * d.Tq * d.OC);
  std::vector<float> lse(d.B * d.NH * d.Tq);
  const int64_t q_tiles = (d.Tq + kTile - 1) / kTile, k_tiles = (d.Tk + kTile - 1) / kTile;
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t h = 0; h < d.NH; ++h) {
      for (int64_t t = 0; t < q_tiles; ++t) {
        forward_block(c, smem.fresh(layout_for(Kernel::kForward, d.HD).bytes), out.data(),
                      lse.data(), in.q.data(), in.kv.data(), in.q_seg, in.k_seg, bias, d, t * kTile,
                      h, b);
      }
    }
  }
  const std::vector<Bf16>& o = in.given_out.empty() ? out : in.given_out;
  const std::vector<float>& l = in.given_lse.empty() ? lse : in.given_lse;
  // D = Σ dO·O per row, from the stored bf16 values (attention_row_dot_kernel).
  std::vector<float> D(lse.size());
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t t = 0; t < d.Tq; ++t) {
      for (int64_t h = 0; h < d.NH; ++h) {
        float s = 0;
        for (int64_t col = 0; col < d.HD; ++col) {
          const int64_t at = (b * d.Tq + t) * d.OC + h * d.HD + col;
          s += f32_from_bf16(in.dout[at].bits) * f32_from_bf16(o[at].bits);
        }
        D[(b * d.NH + h) * d.Tq + t] = s;
      }
    }
  }
  std::vector<Bf16> dkv = in.dkv0, dq_own = in.dq0;
  std::vector<Bf16>& dq = in.packed ? dkv : dq_own;
  for (int64_t b = 0; b < d.B; ++b) {
    for (int64_t g = 0; g < d.KVH; ++g) {
      for (int64_t t = 0; t < k_tiles; ++t) {
        backward_kv_block(c, smem.fresh(layout_for(Kernel::kBackwardKV, d.HD).bytes), dkv.data(),
                          in.dout.data(), l.data(), D.data(), in.q.data(), in.kv.data(), in.q_seg,
                          in.k_seg, bias, d, t * kTile, g, b);
      }
    }
  }
  // The bias gradient's slots as attention_backward sets them up, and its last sum.
  std::vector<float> dbias = in.dbias0, partials;
  const int64_t n = d.NH * d.Tq * d.Tk;
  const bool shared = bias.values != nullptr && in.bias_batch == 1;
  DbiasPlan plan = dbias_plan(d.B, d.Tq, d.Tk, d.NH, shared);
  if (rows > 0) plan = {rows, (d.B + rows - 1) / rows, shared && rows < d.B};
  float* out_db = bias.values == nullptr ? nullptr : dbias.data();
  int64_t slot_stride = shared ? 0 : n;
  if (plan.partials) {
    partials.assign(plan.chunks * n, std::nanf(""));
    out_db = partials.data();
    slot_stride = n;
  }
  for (int64_t z = 0; z < plan.chunks; ++z) {
    const int64_t b_begin = z * plan.rows_per_chunk;
    const int64_t b_end = std::min(d.B, b_begin + plan.rows_per_chunk);
    for (int64_t h = 0; h < d.NH; ++h) {
      float* slot = out_db == nullptr ? nullptr : out_db + z * slot_stride + h * d.Tq * d.Tk;
      for (int64_t t = 0; t < q_tiles; ++t) {
        backward_q_rows(c, smem.fresh(layout_for(Kernel::kBackwardQ, d.HD).bytes), dq.data(),
                        in.dout.data(), l.data(), D.data(), in.q.data(), in.kv.data(), in.q_seg,
                        in.k_seg, bias, slot, plan.partials, d, t * kTile, h, b_begin, b_end);
      }
    }
  }
  for (int64_t e = 0; plan.partials && e < n; ++e) {  // attention_dbias_sum_kernel
    const int64_t key = e % d.Tk, query = e / d.Tk % d.Tq;
    if (d.causal && key > query + d.shift) continue;
    float s = partials[e];
    for (int64_t z = 1; z < plan.chunks; ++z) s += partials[z * n + e];
    dbias[e] += s;
  }
  return {to_f32(out), lse, to_f32(dq), to_f32(dkv), dbias};
}

// How far got is from want: the worst |got - want| / (|want| + rms(want)) and the rms of
// got - want over rms(want), over finite values; infinities must match.
struct Error {
  double worst, rms;
};
Error error(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double ss = 0;
  int64_t n = 0;
  for (float w : want) {
    if (std::isfinite(w)) {
      ss += double{w} * w;
      ++n;
    }
  }
  const double rms = n > 0 ? std::sqrt(ss / n) : 0;
  double worst = 0, se = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
      continue;
    }
    const double e = double{got[i]} - want[i];
    worst = std::max(worst, std::abs(e) / (std::abs(double{want[i]}) + rms + 1e-30));
    se += e * e;
  }
  return {worst, n > 0 && rms > 0 ? std::sqrt(se / n) / rms : 0};
}

// The share of |want| + rms(want) beyond one step of the output's dtype (bf16, or f32 for lse
// and dbias) that got needs (cuda_parity.cc's rule).
double parity_share(const std::vector<float>& got, const std::vector<float>& want, bool f32) {
  double ss = 0;
  for (float w : want) ss += std::isfinite(w) ? double{w} * w : 0.0;
  const double rms = want.empty() ? 0 : std::sqrt(ss / static_cast<double>(want.size()));
  double need = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (got[i] == want[i] || !std::isfinite(want[i])) continue;
    const double g = got[i], w = want[i];
    int e = 0;
    std::frexp(std::max(std::abs(g), std::abs(w)), &e);
    const double step = std::ldexp(1.0, e - (f32 ? 24 : 8));
    need = std::max(need, (std::abs(g - w) - step) / (std::abs(w) + rms));
  }
  return need;
}
// The share the emulation may need: three fifths of what the CUDA parity suite allows the GPU
// (cuda_parity.h kAttentionTensorCoreShare, 5e-2), a margin for its other draws and sum order.
constexpr double kParityShare = 3e-2;

class TensorCoreAttention : public ::testing::TestWithParam<Case> {};

TEST_P(TensorCoreAttention, BlockProgramsMatchTheCpuBackend) {
  const Case& k = GetParam();
  const int64_t OC = k.NH * k.HD, R = (k.NH + 2 * k.KVH) * k.HD;
  Shape d{};
  d.B = k.B;
  d.Tq = k.Tq;
  d.Tk = k.Tk;
  d.NH = k.NH;
  d.KVH = k.KVH;
  d.HD = k.HD;
  d.Rq = k.packed ? R : OC + k.q_extra;
  d.Rkv = k.packed ? R : k.k_offset + 2 * k.KVH * k.HD + k.kv_extra;
  d.OC = OC;
  d.group = k.NH / k.KVH;
  d.k_col = k.packed ? OC : k.k_offset;
  d.scale = k.scale > 0 ? k.scale : 1.0f / std::sqrt(static_cast<float>(k.HD));
  d.causal = k.causal;
  d.shift = k.q_first - k.k_first;
  const void* none[] = {nullptr};
  ASSERT_TRUE(eligible(d, true, none, 1, 227 * 1024)) << "a case the kernels must take";

  std::mt19937 rng(7);
  auto draw = [&](int64_t n, float scale) {
    std::vector<float> v = testing::normal(rng, n, scale);
    if (k.uniform > 0) {
      std::uniform_real_distribution<float> u(-scale, scale);
      for (float& x : v) x = u(rng);
    }
    return to_f32(to_bf16(v));  // values bf16 holds exactly
  };
  const float value_scale = k.uniform > 0 ? k.uniform : 1.5f;
  const std::vector<float> qv = draw(d.B * d.Tq * d.Rq, value_scale);
  const std::vector<float> kvv = k.packed ? qv : draw(d.B * d.Tk * d.Rkv, value_scale);
  const std::vector<float> dout = draw(d.B * d.Tq * OC, 1.0f);
  const std::vector<float> dq0 = draw(d.B * d.Tq * d.Rq, k.grad0);
  const std::vector<float> dkv0 = k.packed ? dq0 : draw(d.B * d.Tk * d.Rkv, k.grad0);
  std::vector<int32_t> qs, ks;
  if (k.segments) {
    qs = runs(d.B, d.Tq, 9, rng);
    ks = k.packed ? qs : runs(d.B, d.Tk, 11, rng);
    if (!k.packed) qs[d.Tq - 1] = qs[d.Tq - 2] = 1000;
  }
  const int64_t n_bias = k.bias_batch * d.NH * d.Tq * d.Tk;
  const std::vector<float> bias = draw(n_bias, k.uniform > 0 ? k.uniform : 1.0f);
  const std::vector<float> dbias0 = draw(n_bias, k.grad0);

  // The CPU backends on the same values: f32, and cpu-bf16 (bf16 storage, f32 math: the plan
  // the CUDA parity suite holds the bf16 GPU path to).
  struct Ref {
    std::vector<float> out, lse, dq, dkv, dbias;
  };
  auto reference = [&](bool bf16) {
    auto be = bf16 ? make_cpu_bf16_backend(1) : make_cpu_backend(1);
    testing::Buffers buf(*be);
    const DType act = bf16 ? DType::kBF16 : DType::kF32;
    auto make = [&](std::vector<int64_t> dims, const std::vector<float>& v) {
      Tensor t = buf.make(act, dims);
      if (v.empty()) return t;
      if (bf16) {
        std::vector<uint16_t> bits(v.size());
        for (size_t i = 0; i < v.size(); ++i) bits[i] = bf16_from_f32(v[i]);
        be->copy_from_host(t, bits.data());
      } else {
        buf.set(t, v);
      }
      return t;
    };
    auto read = [&](Tensor t) {
      if (t.dtype == DType::kF32) return buf.read(t);
      std::vector<uint16_t> bits(t.numel());
      be->copy_to_host(bits.data(), t);
      std::vector<float> v(bits.size());
      for (size_t i = 0; i < v.size(); ++i) v[i] = f32_from_bf16(bits[i]);
      return v;
    };
    Tensor q = make({d.B, d.Tq, d.Rq}, qv);
    Tensor kv = k.packed ? q : make({d.B, d.Tk, d.Rkv}, kvv);
    Tensor out = make({d.B, d.Tq, OC}, {}), lse = buf.f32({d.B, d.NH, d.Tq});
    Tensor dy = make({d.B, d.Tq, OC}, dout);
    Tensor dq = make({d.B, d.Tq, d.Rq}, dq0);
    Tensor dkv = k.packed ? dq : make({d.B, d.Tk, d.Rkv}, dkv0);
    AttentionSpec spec;
    spec.num_heads = static_cast<int>(d.NH);
    spec.num_kv_heads = static_cast<int>(d.KVH);
    spec.causal = d.causal;
    spec.scale = d.scale;
    spec.k_offset = d.k_col;
    spec.q_first_position = k.q_first;
    spec.k_first_position = k.k_first;
    if (k.segments) {
      spec.q_segments = buf.i32({d.B, d.Tq}, qs);
      spec.k_segments = buf.i32({d.B, d.Tk}, ks);
    }
    Tensor dbias;
    if (k.bias_batch > 0) {
      spec.bias = make({k.bias_batch, d.NH, d.Tq, d.Tk}, bias);
      dbias = buf.f32({k.bias_batch, d.NH, d.Tq, d.Tk}, dbias0);
    }
    be->attention_forward(out, lse, q, kv, spec);
    be->attention_backward(dq, dkv, dbias, dy, out, lse, q, kv, spec);
    return Ref{read(out), read(lse), read(dq), read(dkv),
               dbias.empty() ? std::vector<float>{} : buf.read(dbias)};
  };
  const Ref f32 = reference(false), bf16 = reference(true);

  const Inputs in{to_bf16(qv),
                  to_bf16(kvv),
                  to_bf16(dout),
                  to_bf16(dq0),
                  to_bf16(dkv0),
                  to_bf16(bias),
                  dbias0,
                  k.segments ? qs.data() : nullptr,
                  k.segments ? ks.data() : nullptr,
                  k.bias_batch,
                  k.packed,
                  {},
                  {}};
  g_rule_breaks = 0;
  const Result fwd = run_tc(d, in, false), bwd = run_tc(d, in, true);
  EXPECT_EQ(g_rule_breaks, 0) << "unaligned tile, pitch or 16-byte access";

  auto same_bits = [](const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
  };
  EXPECT_TRUE(same_bits(fwd.out, bwd.out) && same_bits(fwd.lse, bwd.lse) &&
              same_bits(fwd.dq, bwd.dq) && same_bits(fwd.dkv, bwd.dkv) &&
              same_bits(fwd.dbias, bwd.dbias))
      << "the order of a phase's work items changed the result";
  if (k.bias_batch == 1 && d.B > 1) {
    // A shared bias's gradient: one dQ block walking every batch row into dbias, instead of
    // the plan's partials, gives the same results but the bias gradient's sum order.
    // And chunks of two rows into partials (the first row of a chunk assigns, the next adds).
    for (int64_t rows : {d.B, int64_t{2}}) {
      const Result other = run_tc(d, in, false, rows);
      EXPECT_TRUE(same_bits(fwd.dq, other.dq) && same_bits(fwd.dkv, other.dkv)) << rows;
      EXPECT_LT(error(other.dbias, fwd.dbias).worst, 1e-5) << "dbias, chunks of " << rows;
    }
  }

  // Against f32: the kernels round P and dS to bf16 for the products, the outputs once. Their
  // error may be at most twice the bf16 plan's own (cpu-bf16 against f32: stored activations and
  // D from the bf16 output), plus 1e-3 of the rms; no element off by more than 6 % of
  // |want| + rms or 1.25 times the plan's worst (measured: rms 0.13-0.47 %, worst at most 13.8 %
  // against the bf16 plan's 14.1 %, both in a per-row bias gradient: where dP - D cancels).
  Inputs from_plan = in;
  from_plan.given_out = to_bf16(bf16.out);
  from_plan.given_lse = bf16.lse;
  const Result parity = run_tc(d, from_plan, false);
  const std::vector<float>* parity_grads[] = {&parity.dq, &parity.dkv, &parity.dbias};
  const std::vector<float>* got[] = {&fwd.out, &fwd.lse, &fwd.dq, &fwd.dkv, &fwd.dbias};
  const std::vector<float>* want[] = {&f32.out, &f32.lse, &f32.dq, &f32.dkv, &f32.dbias};
  const std::vector<float>* plan[] = {&bf16.out, &bf16.lse, &bf16.dq, &bf16.dkv, &bf16.dbias};
  const char* names[] = {"out", "lse", "dq", "dkv", "dbias"};
  for (int i = 0; i < (k.bias_batch > 0 ? 5 : 4); ++i) {
    const Error e = error(*got[i], *want[i]), p = error(*plan[i], *want[i]);
    std::printf("%s %s: rms %.2e worst %.2e (cpu-bf16: rms %.2e worst %.2e)\n", k.name, names[i],
                e.rms, e.worst, p.rms, p.worst);
    if (i == 1) {  // lse: f32 all the way (products of bf16 values are exact in f32)
      EXPECT_LT(e.worst, 1e-5) << names[i];
      continue;
    }
    EXPECT_LE(e.rms, 2 * p.rms + 1e-3) << names[i];
    EXPECT_LT(e.worst, std::max(6e-2, 1.25 * p.worst)) << names[i];
    // The CUDA parity suite's rule for these outputs in its bf16 plan: one bf16 step plus a
    // share of |ref| + rms(ref), against cpu-bf16, whose out and lse the backward pass starts
    // from there.
    const std::vector<float>& parity_got = i < 2 ? *got[i] : *parity_grads[i - 2];
    const double need = parity_share(parity_got, *plan[i], i == 1 || i == 4);
    const double rms_to_plan = error(parity_got, *plan[i]).rms;
    std::printf("  against cpu-bf16: parity share needed %.2e, rms %.2e\n", need, rms_to_plan);
    EXPECT_LE(need, kParityShare) << names[i];
    EXPECT_LE(rms_to_plan, 1e-2) << names[i];
  }
}

// Lengths around the 64-row tile, GQA groups, segments (queries with no visible key in the cross
// cases), head sizes 16 to 128, keys from a column other than the first.
INSTANTIATE_TEST_SUITE_P(
    Shapes, TensorCoreAttention,
    ::testing::Values(
        Case{"packed_causal_gqa", 2, 200, 200, 4, 2, 64, true, true, false},
        Case{"packed_bidirectional_hd128", 1, 70, 70, 2, 1, 128, false, true, false},
        Case{"packed_causal_segments", 2, 150, 150, 4, 4, 64, true, true, true},
        Case{"packed_causal_hd80_one_tile", 1, 64, 64, 2, 2, 80, true, true, false},
        Case{"packed_causal_one_row", 1, 1, 1, 2, 1, 32, true, true, false},
        Case{"cross_segments", 2, 37, 130, 4, 2, 32, false, false, true, 8, 8, 16},
        Case{"cross_bidirectional", 1, 129, 65, 4, 1, 48, false, false, false, 0, 16, 8},
        Case{"cross_segments_hd112", 2, 70, 140, 2, 1, 112, false, false, true, 8, 8, 8},
        Case{"packed_causal_hd96", 1, 100, 100, 3, 1, 96, true, true, false},
        Case{"packed_bidirectional_hd16", 2, 80, 80, 4, 2, 16, false, true, false},
        // The op table's cases these kernels take (op_table_attention.cc: packed(...) with
        // head sizes 16, 64, 80 and 128, the parity case with segments, and the `_tc` cases),
        // with its values: U(-2, 2) (N(0, 1.5²) here for its two normal ones), gradients starting
        // at its scale.
        Case{"table_packed_causal_hd16", 2, 37, 37, 4, 2, 16, true, true, false, 0, 0, 0, 2, 1},
        Case{"table_packed_bidirectional_hd16_normal", 1, 70, 70, 4, 1, 16, false, true, false, 0,
             0, 0, 0, 1},
        Case{"table_packed_bidirectional_hd16", 2, 37, 37, 4, 4, 16, false, true, false, 0, 0, 0, 2,
             1},
        Case{"table_packed_segments_hd16", 2, 77, 77, 4, 2, 16, true, true, true, 0, 0, 0, 2, 0.01f,
             0, 0.25f},
        Case{"table_packed_causal_hd64", 1, 70, 70, 6, 2, 64, true, true, false, 0, 0, 0, 2, 1},
        Case{"table_packed_hd128", 1, 33, 33, 2, 1, 128, false, true, false, 0, 0, 0, 2, 1},
        Case{"table_packed_causal_hd80", 1, 65, 65, 2, 2, 80, true, true, false, 0, 0, 0, 2, 1},
        Case{"table_packed_causal_b2", 2, 129, 129, 4, 1, 64, true, true, false, 0, 0, 0, 2, 1},
        // T5: a relative position bias shared by the batch (its gradient over three rows: the
        // plan's partials), causal in the decoder; a bias per row in cross-attention.
        Case{"t5_encoder_shared_bias", 3, 100, 100, 4, 4, 64, false, true, true, 0, 0, 0, 0, 0.01f,
             1},
        Case{"t5_decoder_shared_bias", 2, 70, 70, 2, 2, 64, true, true, true, 0, 0, 0, 0, 0.01f, 1},
        Case{"cross_bias_per_row", 2, 37, 130, 4, 2, 32, false, false, true, 8, 8, 16, 0, 0.01f, 2},
        // The op table's `_tc` cases (op_table_attention.cc) with its values and scales.
        Case{"table_cross_bias_per_row", 2, 37, 130, 4, 2, 32, false, false, true, 8, 8, 16, 2,
             0.01f, 2, 0.18f},
        Case{"table_packed_causal_segments", 2, 150, 150, 4, 2, 64, true, true, true, 0, 0, 0, 2,
             0.01f, 0, 0.125f},
        Case{"table_t5_shared_bias", 3, 100, 100, 4, 4, 64, false, true, true, 0, 0, 0, 2, 0.01f, 1,
             0.125f},
        // A slice of a row (queries from position q_first) against the whole row's keys, as
        // sequence parallelism calls the op (op_table_attention.cc's slice cases): causal with
        // GQA and segments; T5's decoder with a shared bias; keys that start after the queries
        // (a whole query tile and more sees no key).
        Case{"slice_causal_gqa_segments", 2, 100, 400, 4, 2, 64, true, false, true, 256, 256, 0, 2,
             0.01f, 0, 0.125f, 200, 0},
        Case{"slice_t5_decoder_shared_bias", 2, 70, 140, 4, 4, 64, true, false, true, 512, 256, 0,
             2, 0.01f, 1, 0.125f, 70, 0},
        Case{"slice_keys_after_queries", 1, 130, 100, 4, 2, 64, true, false, false, 256, 256, 0, 2,
             0.01f, 0, 0.125f, 0, 70}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(TensorCoreAttention, EligibleShapesOnly) {
  Shape d{};
  d.HD = 64;
  d.Rq = d.Rkv = 3 * 64;
  d.k_col = 64;
  const void* ok[] = {reinterpret_cast<const void*>(uintptr_t{4096})};
  const void* odd[] = {reinterpret_cast<const void*>(uintptr_t{4098})};
  const size_t h100 = 227 * 1024, a100 = 163 * 1024;
  EXPECT_TRUE(eligible(d, true, ok, 1, h100));
  EXPECT_FALSE(eligible(d, false, ok, 1, h100)) << "f32 activations";
  EXPECT_FALSE(eligible(d, true, odd, 1, h100)) << "an address off 16 bytes";
  Shape e = d;
  e.k_col = 68;
  EXPECT_FALSE(eligible(e, true, ok, 1, h100)) << "a key column off 8 elements";
  e = d;
  e.HD = 72;
  EXPECT_FALSE(eligible(e, true, ok, 1, h100)) << "HD not a multiple of 16";
  e = d;
  e.HD = 160;
  EXPECT_FALSE(eligible(e, true, ok, 1, h100)) << "HD over 128";
  e = d;
  e.HD = 128;
  e.Rq = e.Rkv = 3 * 128;
  EXPECT_TRUE(eligible(e, true, ok, 1, h100));
  EXPECT_FALSE(eligible(e, true, ok, 1, a100)) << "HD 128's dK/dV block: 190 KiB";
  EXPECT_TRUE(eligible(d, true, ok, 1, a100));
}

}  // namespace
}  // namespace ax::train::cuda::tc
