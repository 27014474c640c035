// The seq axis's attention exchange (seq_attention.h) across real processes: S forked ranks with
// a Gloo group (rank_processes.h), each holding a contiguous slice of every row. Each rank also
// runs the whole-row op on one process (the same inputs, drawn from one seed) and compares its
// slice of the outputs, lse and the gradients of q, k, v (and of T5's bias rows) with what the
// exchange gives, f32: max |got - want| within 1e-6 of max |want| for each tensor (and a cpu-bf16
// case, whose collectives move bf16).
#include "ax/trainer/parallel/seq_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ax/common/build_config.h"
#include "rank_processes.h"

namespace ax::train {
namespace {

struct SeqCase {
  const char* name;
  int S;
  int64_t B, T;
  int NH, KVH;
  int64_t HD;
  bool causal, segments, packed;
  int64_t bias_batch = 0;  // T5's relative position bias, (Bb, NH, T, T) for the whole row
  // cpu-bf16 (bf16 activations): the exchange's bf16 collectives. Its key/value gradients are
  // rounded to bf16 on each rank before the reduce-scatter sums them, and once more when added,
  // where one process rounds once: held to 2e-2 (a few bf16 steps) instead of f32's 1e-6.
  bool bf16 = false;
  double tol() const { return bf16 ? 2e-2 : 1e-6; }
};

std::vector<float> draw(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Positions [t0, t0 + n) of each of the `rows` rows of a (rows, T, C) host tensor.
template <typename T>
std::vector<T> rows_slice(const std::vector<T>& x, int64_t rows, int64_t len, int64_t C, int64_t t0,
                          int64_t n) {
  std::vector<T> out;
  for (int64_t b = 0; b < rows; ++b) {
    const auto* at = x.data() + (b * len + t0) * C;
    out.insert(out.end(), at, at + n * C);
  }
  return out;
}

// Errors of got against want over their finite values (infinities must match): the norm-wise
// relative error max |got - want| / max |want|, held to `tol`, and, printed beside it, the worst
// element's |got - want| / (|want| + rms(want)).
struct Errors {
  double norm = 0, element = 0;
};
std::string compare(const char* what, const std::vector<float>& got, const std::vector<float>& want,
                    double tol, Errors* worst) {
  if (got.size() != want.size()) return std::string(what) + ": size differs; ";
  double ss = 0, top = 0, diff = 0, element = 0;
  int64_t finite = 0;
  for (float w : want) {
    if (std::isfinite(w)) {
      ss += double(w) * w;
      top = std::max(top, double(std::abs(w)));
      ++finite;
    }
  }
  const double rms = finite > 0 ? std::sqrt(ss / finite) : 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      if (got[i] != want[i]) return std::string(what) + ": infinities differ; ";
      continue;
    }
    const double d = std::abs(double(got[i]) - want[i]);
    diff = std::max(diff, d);
    element = std::max(element, d / (std::abs(want[i]) + rms));
  }
  const double norm = top > 0 ? diff / top : diff;
  worst->norm = std::max(worst->norm, norm);
  worst->element = std::max(worst->element, element);
  if (norm <= tol) return "";
  std::ostringstream os;
  os << what << ": relative error " << norm << "; ";
  return os.str();
}

// One rank: the whole-row op, then the exchange on this rank's slice, compared.
std::string run_rank(const SeqCase& k, int rank, std::shared_ptr<comm::Store> store) {
  auto group =
      comm::make_gloo_communicator(store, "seq", comm::iota(k.S), rank, comm::cpu_options());
  if (!group.ok()) return "group: " + group.status().to_string();
  auto be = k.bf16 ? make_cpu_bf16_backend(1) : make_cpu_backend(1);
  const DType act_dtype = k.bf16 ? DType::kBF16 : DType::kF32;
  const int64_t B = k.B, T = k.T, Tl = T / k.S, OC = k.NH * k.HD, KVC = 2 * k.KVH * k.HD;
  const int64_t Rq = k.packed ? OC + KVC : OC, Rkv = k.packed ? OC + KVC : KVC;
  std::mt19937 rng(1234);  // the same inputs on every rank
  const std::vector<float> q = draw(rng, B * T * Rq, 1.0f);
  const std::vector<float> kv = k.packed ? q : draw(rng, B * T * Rkv, 1.0f);
  const std::vector<float> dout = draw(rng, B * T * OC, 1.0f);
  const std::vector<float> dq0 = draw(rng, B * T * Rq, 0.1f);
  const std::vector<float> dkv0 = k.packed ? dq0 : draw(rng, B * T * Rkv, 0.1f);
  const int64_t n_bias = k.bias_batch * k.NH * T * T;
  const std::vector<float> bias = draw(rng, n_bias, 1.0f);
  std::vector<int32_t> segs;
  for (int64_t b = 0; b < B && k.segments; ++b) {  // runs of 1..9 positions
    std::uniform_int_distribution<int> run(1, 9);
    int32_t id = 1;
    for (int left = run(rng), t = 0; t < T; ++t, --left) {
      if (left == 0) {
        left = run(rng);
        ++id;
      }
      segs.push_back(id);
    }
  }

  std::vector<void*> blocks;
  auto tensor = [&](DType dtype, std::initializer_list<int64_t> dims, const void* values) {
    Tensor t(nullptr, dtype, dims);
    t.data = *be->alloc(t.bytes());
    blocks.push_back(t.data);
    if (values != nullptr) be->copy_from_host(t, values);
    return t;
  };
  // An activation (f32 or bf16) from f32 host values, or zeros.
  auto act = [&](std::initializer_list<int64_t> dims, const float* values) {
    Tensor t = tensor(act_dtype, dims, nullptr);
    if (values == nullptr) return t;
    if (!k.bf16) {
      be->copy_from_host(t, values);
    } else {
      std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
      for (size_t i = 0; i < bits.size(); ++i) bits[i] = bf16_from_f32(values[i]);
      be->copy_from_host(t, bits.data());
    }
    return t;
  };
  auto read = [&](Tensor t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    if (t.dtype == DType::kBF16) {
      std::vector<uint16_t> bits(v.size());
      be->copy_to_host(bits.data(), t);
      for (size_t i = 0; i < v.size(); ++i) v[i] = f32_from_bf16(bits[i]);
    } else {
      be->copy_to_host(v.data(), t);
    }
    return v;
  };
  AttentionSpec spec;
  spec.num_heads = k.NH;
  spec.num_kv_heads = k.KVH;
  spec.causal = k.causal;
  spec.scale = 1.0f / std::sqrt(static_cast<float>(k.HD));
  spec.k_offset = k.packed ? OC : 0;

  // The whole row on one process.
  Tensor wq = act({B, T, Rq}, q.data());
  Tensor wkv = k.packed ? wq : act({B, T, Rkv}, kv.data());
  Tensor wout = act({B, T, OC}, nullptr);
  Tensor wlse = tensor(DType::kF32, {B, k.NH, T}, nullptr);
  Tensor wdout = act({B, T, OC}, dout.data());
  Tensor wdq = act({B, T, Rq}, dq0.data());
  Tensor wdkv = k.packed ? wdq : act({B, T, Rkv}, dkv0.data());
  AttentionSpec whole = spec;
  Tensor wdbias;
  if (k.bias_batch > 0) {
    whole.bias = act({k.bias_batch, k.NH, T, T}, bias.data());
    wdbias = tensor(DType::kF32, {k.bias_batch, k.NH, T, T}, nullptr);
  }
  if (k.segments) {
    whole.q_segments = whole.k_segments = tensor(DType::kI32, {B, T}, segs.data());
  }
  be->attention_forward(wout, wlse, wq, wkv, whole);
  be->attention_backward(wdq, wdkv, wdbias, wdout, wout, wlse, wq, wkv, whole);

  // This rank's slice through the exchange.
  const int64_t t0 = rank * Tl;
  auto slice3 = [&](const std::vector<float>& x, int64_t C) {
    return rows_slice(x, B, T, C, t0, Tl);
  };
  const std::vector<float> sq = slice3(q, Rq), sdout = slice3(dout, OC), sdq0 = slice3(dq0, Rq);
  Tensor lq = act({B, Tl, Rq}, sq.data());
  Tensor lkv = lq;
  if (!k.packed) {
    const std::vector<float> skv = slice3(kv, Rkv);
    lkv = act({B, Tl, Rkv}, skv.data());
  }
  Tensor lout = act({B, Tl, OC}, nullptr);
  Tensor llse = tensor(DType::kF32, {B, k.NH, Tl}, nullptr);
  Tensor ldout = act({B, Tl, OC}, sdout.data());
  Tensor ldq = act({B, Tl, Rq}, sdq0.data());
  Tensor ldkv = ldq;
  if (!k.packed) {
    const std::vector<float> sdkv0 = slice3(dkv0, Rkv);
    ldkv = act({B, Tl, Rkv}, sdkv0.data());
  }
  AttentionSpec local = spec;
  Tensor ldbias;
  if (k.bias_batch > 0) {  // the slice's rows of the bias, against every key
    const std::vector<float> rows = rows_slice(bias, k.bias_batch * k.NH, T, T, t0, Tl);
    local.bias = act({k.bias_batch, k.NH, Tl, T}, rows.data());
    ldbias = tensor(DType::kF32, {k.bias_batch, k.NH, Tl, T}, nullptr);
  }
  if (k.segments) {
    const std::vector<int32_t> ids = rows_slice(segs, B, T, 1, t0, Tl);
    local.q_segments = local.k_segments = tensor(DType::kI32, {B, Tl}, ids.data());
  }
  std::string errors;
  Status s = seq_attention_forward(*be, **group, lout, llse, lq, lkv, local);
  if (s.ok()) {
    s = seq_attention_backward(*be, **group, ldq, ldkv, ldbias, ldout, lout, llse, lq, lkv, local);
  }
  if (!s.ok()) return "exchange: " + s.to_string();

  Errors worst;
  errors += compare("out", read(lout), slice3(read(wout), OC), k.tol(), &worst);
  errors +=
      compare("lse", read(llse), rows_slice(read(wlse), B * k.NH, T, 1, t0, Tl), k.tol(), &worst);
  errors += compare("dq", read(ldq), slice3(read(wdq), Rq), k.tol(), &worst);
  if (!k.packed) errors += compare("dkv", read(ldkv), slice3(read(wdkv), Rkv), k.tol(), &worst);
  if (k.bias_batch > 0) {
    errors += compare("dbias", read(ldbias),
                      rows_slice(read(wdbias), k.bias_batch * k.NH, T, T, t0, Tl), k.tol(), &worst);
  }
  std::fprintf(stderr, "%s rank %d: relative error %.2e (worst element %.2e of |want| + rms)\n",
               k.name, rank, worst.norm, worst.element);
  for (void* p : blocks) be->free(p);
  return errors.empty() ? "OK" : errors;
}

class SeqAttention : public ::testing::TestWithParam<SeqCase> {};

TEST_P(SeqAttention, SlicesMatchTheWholeRowOp) {
#if !AX_HAVE_GLOO
  GTEST_SKIP() << "built without Gloo";
#endif
  const SeqCase& k = GetParam();
  const auto outcomes = comm::run_ranks(
      k.S, [&](int rank, std::shared_ptr<comm::Store> store) { return run_rank(k, rank, store); },
      60);
  for (int r = 0; r < k.S; ++r) EXPECT_EQ(outcomes[r].report, "OK") << "rank " << r;
}

// S = 2 and 4; causal and not; GQA (4 query heads on 2 key/value heads) and multi-head; packed
// qkv rows (the query columns travel with the keys, dq and dkv one tensor) and separate q and kv;
// one batch row (the collectives' blocks are whole rows) and several; segment ids of packed
// examples; T5's bias (shared by the batch, and per row) with its gradient; cpu-bf16.
INSTANTIATE_TEST_SUITE_P(
    Cases, SeqAttention,
    ::testing::Values(
        SeqCase{"s2_causal_gqa_packed", 2, 2, 24, 4, 2, 8, true, false, true},
        SeqCase{"s4_causal_gqa_segments", 4, 2, 32, 4, 2, 8, true, true, true},
        SeqCase{"s2_bidirectional_segments", 2, 3, 20, 4, 2, 8, false, true, false},
        SeqCase{"s4_bidirectional_gqa", 4, 1, 36, 4, 1, 16, false, false, false},
        SeqCase{"s4_causal_separate_kv_b1", 4, 1, 80, 2, 2, 8, true, true, false},
        SeqCase{"s2_t5_decoder_shared_bias", 2, 2, 16, 2, 2, 8, true, true, true, 1},
        SeqCase{"s4_t5_encoder_bias_per_row", 4, 2, 16, 2, 2, 8, false, true, true, 2},
        SeqCase{"s2_causal_gqa_segments_bf16", 2, 2, 32, 4, 2, 8, true, true, true, 1, true}),
    [](const ::testing::TestParamInfo<SeqCase>& info) { return std::string(info.param.name); });

TEST(SeqSlice, SplitsEvenlyOrSaysWhatToChange) {
  auto s = seq_slice(4096, 3, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->first, 3072);
  EXPECT_EQ(s->length, 1024);
  auto bad = seq_slice(4095, 0, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().to_string().find("multiple of 4"), std::string::npos)
      << bad.status().to_string();
  EXPECT_FALSE(seq_slice(64, 4, 4).ok());
}

}  // namespace
}  // namespace ax::train
