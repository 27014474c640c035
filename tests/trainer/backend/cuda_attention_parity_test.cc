// The general attention op (backend.h AttentionSpec) of the CUDA backend against the CPU backend
// in each dtype plan (cuda_parity.h), through the cases of cuda_attention.cu's masked and unmasked
// kernels: cross-attention (q and kv rows wider than their heads, keys from column 5, Tq != Tk),
// scales of their own, a bias shared by the batch (Bb = 1: the dQ kernel's partials over chunks
// of batch rows, summed in order, or one chunk added row by row; attention_plan.h) or per row
// (Bb = B), segment ids with queries that see no key (zeros, lse = -inf, no gradient, no NaN),
// GQA, lengths that are not multiples of the 32-row tile, and packed self-attention with
// segments (a decoder over packed examples), whose dq and dkv are one tensor. The backward pass
// runs twice from the same starting gradients and must give the same bits (no atomics). Without
// a GPU every test is skipped.
#include <algorithm>
#include <cstring>

#include "cuda_parity.h"

namespace ax::train::parity {
namespace {

struct GeneralCase {
  int64_t B, Tq, Tk;
  int NH, KVH;
  int64_t HD;
  bool causal;
  float scale;
  int64_t bias_batch;  // 0: no bias
  bool segments;
  bool packed;  // one (B, T, (NH + 2·KVH)·HD) tensor as q and kv, and as dq and dkv
};

constexpr GeneralCase kGeneralCases[] = {
    {2, 37, 70, 4, 2, 16, false, 0.25f, 0, false, false},   // cross, GQA, no mask: unmasked kernels
    {3, 45, 33, 2, 1, 64, false, 1.0f, 1, false, false},    // scale 1, Bb = 1: 3 chunks of 1 row
    {2, 65, 65, 4, 4, 32, true, 0.3f, 2, true, false},      // causal, Bb = B, segments
    {2, 40, 50, 6, 2, 8, false, 0.35f, 1, true, false},     // segments and Bb = 1 together
    {6, 260, 260, 16, 4, 8, true, 0.125f, 1, true, false},  // Bb = 1: 3 chunks of 2 rows, causal
    {2, 1024, 40, 16, 16, 8, false, 1.0f, 1, false, false},  // Bb = 1: one chunk (512 blocks)
    {2, 77, 77, 4, 2, 16, true, 0.25f, 0, true, true},       // packed, segments
};

// Segment ids 1, 2, ... in runs of 1 to `longest` positions, for each of B rows of T.
std::vector<int32_t> segment_runs(int64_t B, int64_t T, int longest, std::mt19937& rng) {
  std::uniform_int_distribution<int> run(1, longest);
  std::vector<int32_t> ids;
  for (int64_t b = 0; b < B; ++b) {
    int32_t id = 1;
    for (int left = run(rng); static_cast<int64_t>(ids.size()) < (b + 1) * T; --left) {
      if (left == 0) {
        left = run(rng);
        ++id;
      }
      ids.push_back(id);
    }
  }
  return ids;
}

// Masked queries give zeros and lse = -inf, never NaN (or +inf).
void expect_no_nan(const std::vector<float>& v, const char* output) {
  const auto bad =
      std::count_if(v.begin(), v.end(), [](float x) { return std::isnan(x) || x == INFINITY; });
  EXPECT_EQ(bad, 0) << output << " has NaN or +inf";
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b,
                      const char* output) {
  EXPECT_TRUE(a.size() == b.size() &&
              std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0)
      << output << " differs between two runs of the same backward pass";
}

// One case's tensors on both backends.
struct Inputs {
  Pair q, kv, bias, q_seg, k_seg;
  int64_t Rq, Rkv, k_offset;
};

class CudaAttentionParityTest : public ParityTest {
 protected:
  Inputs inputs(const GeneralCase& c) {
    Inputs in;
    const int64_t OC = c.NH * c.HD;
    in.Rq = c.packed ? (c.NH + 2 * c.KVH) * c.HD : OC + 3;
    in.k_offset = c.packed ? OC : 5;
    in.Rkv = c.packed ? in.Rq : in.k_offset + 2 * c.KVH * c.HD + 2;
    in.q = random({c.B, c.Tq, in.Rq}, act(), 2.0f);
    in.kv = c.packed ? in.q : random({c.B, c.Tk, in.Rkv}, act(), 2.0f);
    if (c.bias_batch > 0) in.bias = random({c.bias_batch, c.NH, c.Tq, c.Tk}, act(), 2.0f);
    if (c.segments) {
      // Queries and keys of one sequence (Tq == Tk) share their ids, else each has its own.
      std::vector<int32_t> ids = segment_runs(c.B, c.Tq, 6, rng_);
      const std::vector<int32_t> key_ids = c.Tq == c.Tk ? ids : segment_runs(c.B, c.Tk, 8, rng_);
      if (!c.packed) ids[c.Tq - 1] = ids[c.Tq - 2] = 1000;  // row 0's last queries: no such key
      in.q_seg = ints({c.B, c.Tq}, ids);
      in.k_seg = c.packed ? in.q_seg : ints({c.B, c.Tk}, key_ids);
    }
    return in;
  }

  static AttentionSpec spec(const GeneralCase& c, const Inputs& in, bool gpu) {
    auto pick = [gpu](const Pair& p) { return gpu ? p.gpu : p.ref; };
    AttentionSpec s;
    s.num_heads = c.NH;
    s.num_kv_heads = c.KVH;
    s.causal = c.causal;
    s.scale = c.scale;
    s.k_offset = in.k_offset;
    if (c.bias_batch > 0) s.bias = pick(in.bias);
    if (c.segments) {
      s.q_segments = pick(in.q_seg);
      s.k_segments = pick(in.k_seg);
    }
    return s;
  }

  // The backward pass from the reference's out and lse on both. Gradients start from small
  // random values: accumulation is checked, and the comparison's rms is the gradient's. Then the
  // GPU's pass again from the same starting gradients: the same bits.
  void check_backward(const GeneralCase& c, const Inputs& in, const Pair& out, const Pair& lse) {
    const AttentionSpec ref_spec = spec(c, in, false), gpu_spec = spec(c, in, true);
    Pair dout = random({c.B, c.Tq, c.NH * c.HD}, act());
    Pair dq = random({c.B, c.Tq, in.Rq}, act(), 0.01f);
    Pair dkv = c.packed ? dq : random({c.B, c.Tk, in.Rkv}, act(), 0.01f);
    Pair dbias = c.bias_batch > 0 ? random({c.bias_batch, c.NH, c.Tq, c.Tk}, kF32, 0.01f) : Pair{};
    std::vector<const Pair*> grads = {&dq};
    if (!c.packed) grads.push_back(&dkv);
    if (c.bias_batch > 0) grads.push_back(&dbias);
    std::vector<std::vector<float>> start;
    for (const Pair* g : grads) start.push_back(gpu_values(*g));
    auto gpu_backward = [&] {
      gpu_->attention_backward(dq.gpu, dkv.gpu, dbias.gpu, dout.gpu, out.gpu, lse.gpu, in.q.gpu,
                               in.kv.gpu, gpu_spec);
    };
    ref_->attention_backward(dq.ref, dkv.ref, dbias.ref, dout.ref, out.ref, lse.ref, in.q.ref,
                             in.kv.ref, ref_spec);
    gpu_backward();
    const char* names[] = {c.packed ? "attention_backward dqkv" : "attention_backward dq",
                           c.packed ? "attention_backward dbias" : "attention_backward dkv",
                           "attention_backward dbias"};
    std::vector<std::vector<float>> first;
    for (size_t i = 0; i < grads.size(); ++i) {
      expect(*grads[i], names[i]);
      first.push_back(gpu_values(*grads[i]));
      expect_no_nan(first.back(), names[i]);
      write(*gpu_, grads[i]->gpu, start[i]);
    }
    gpu_backward();
    for (size_t i = 0; i < grads.size(); ++i) {
      expect_same_bits(gpu_values(*grads[i]), first[i], names[i]);
    }
  }
};

TEST_P(CudaAttentionParityTest, GeneralCases) {
  for (const GeneralCase& c : kGeneralCases) {
    SCOPED_TRACE(testing::Message()
                 << "B=" << c.B << " Tq=" << c.Tq << " Tk=" << c.Tk << " NH=" << c.NH
                 << " KVH=" << c.KVH << " HD=" << c.HD << " causal=" << c.causal
                 << " scale=" << c.scale << " bias_batch=" << c.bias_batch
                 << " segments=" << c.segments << " packed=" << c.packed);
    const Inputs in = inputs(c);
    Pair out = zeros({c.B, c.Tq, c.NH * c.HD}, act()), lse = zeros({c.B, c.NH, c.Tq}, kF32);
    ref_->attention_forward(out.ref, lse.ref, in.q.ref, in.kv.ref, spec(c, in, false));
    gpu_->attention_forward(out.gpu, lse.gpu, in.q.gpu, in.kv.gpu, spec(c, in, true));
    expect(out, "attention_forward out");
    expect(lse, "attention_forward lse");
    expect_no_nan(gpu_values(out), "out");
    expect_no_nan(gpu_values(lse), "lse");
    const std::vector<float> ref_lse = ref_values(lse);
    EXPECT_EQ(std::count(ref_lse.begin(), ref_lse.end(), -INFINITY) > 0, c.segments && !c.packed)
        << "the case has queries that see no key exactly when it forces some";
    give_gpu_the_ref(out);
    give_gpu_the_ref(lse);
    check_backward(c, in, out, lse);
  }
}

INSTANTIATE_TEST_SUITE_P(Plans, CudaAttentionParityTest, ::testing::ValuesIn(kModes),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ax::train::parity
