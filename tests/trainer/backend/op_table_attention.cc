// The op table's attention cases (op_table.h): packed self-attention, and the general op
// (backend.h AttentionSpec): cross-attention with q and kv rows wider than their heads, scales of
// their own, a bias shared by the batch (Bb = 1) or per row with its gradient, and segment ids
// with queries that see no key (zeros, lse = -inf, no gradient). Smooth (softmax): finite
// differences with eps 1e-2, atol 5e-4, rtol 2e-3; the OpenBLAS path from T >= 64.
#include <cmath>
#include <string>

#include "op_reference.h"
#include "op_table.h"

namespace ax::train::optable {
namespace {

OpCase attention(const AttentionShape& s, std::vector<int32_t> q_seg, std::vector<int32_t> k_seg,
                 float scale, float grad_scale, bool neg_inf) {
  OpCase c;
  const int64_t OC = s.NH * s.HD;
  c.name = std::string("attention") + (s.packed ? "" : "_general") +
           (s.causal ? "_causal" : "_bidirectional") + (s.segments ? "_segments" : "") + "_B" +
           std::to_string(s.B) + "_Tq" + std::to_string(s.Tq) + "_Tk" + std::to_string(s.Tk) +
           "_NH" + std::to_string(s.NH) + "_KVH" + std::to_string(s.KVH) + "_HD" +
           std::to_string(s.HD) + "_Bb" + std::to_string(s.bias_batch);
  if (s.q_first != 0 || s.k_first != 0) {
    c.name += "_qpos" + std::to_string(s.q_first) + "_kpos" + std::to_string(s.k_first);
  }
  auto grad_input = [&](const char* name, std::vector<int64_t> shape, const char* parity) {
    return In{.name = name,
              .shape = std::move(shape),
              .grad = Grad::kAct,
              .scale = scale,
              .grad_scale = grad_scale,
              .grad_parity = parity};
  };
  if (s.packed) {
    c.inputs = {grad_input("qkv", {s.B, s.Tq, s.Rq}, "attention_backward dqkv")};
  } else {
    c.inputs = {grad_input("q", {s.B, s.Tq, s.Rq}, "attention_backward dq"),
                grad_input("kv", {s.B, s.Tk, s.Rkv}, "attention_backward dkv")};
  }
  if (s.bias_batch > 0) {
    In bias = grad_input("bias", {s.bias_batch, s.NH, s.Tq, s.Tk}, "attention_backward dbias");
    bias.grad = Grad::kF32;
    c.inputs.push_back(bias);
  }
  if (s.segments) {
    c.inputs.push_back(
        {.name = "q_segments", .shape = {s.B, s.Tq}, .kind = Kind::kI32, .ids = std::move(q_seg)});
    c.inputs.push_back(
        {.name = "k_segments", .shape = {s.B, s.Tk}, .kind = Kind::kI32, .ids = std::move(k_seg)});
  }
  // Float softmax sums over up to 260 keys against double.
  c.outputs = {
      {.name = "out", .shape = {s.B, s.Tq, OC}, .tol = 2e-5, .parity = "attention_forward out"},
      {.name = "lse",
       .shape = {s.B, s.NH, s.Tq},
       .kind = Kind::kF32,
       .projected = false,
       .tol = 2e-5,
       .parity = "attention_forward lse",
       .neg_inf = neg_inf}};
  AttentionSpec base;
  base.num_heads = s.NH;
  base.num_kv_heads = s.KVH;
  base.causal = s.causal;
  base.scale = s.scale;
  base.k_offset = s.k_offset;
  base.q_first_position = s.q_first;
  base.k_first_position = s.k_first;
  const char* q = s.packed ? "qkv" : "q";
  const char* kv = s.packed ? "qkv" : "kv";
  auto spec = [base](Env& e) {
    AttentionSpec a = base;
    a.bias = e["bias"];
    a.q_segments = e["q_segments"];
    a.k_segments = e["k_segments"];
    return a;
  };
  c.forward = [spec, q, kv](Backend& be, Env& e) {
    be.attention_forward(e["out"], e["lse"], e[q], e[kv], spec(e));
  };
  c.backward = [spec, q, kv](Backend& be, Env& e) {
    be.attention_backward(e[std::string("d") + q], e[std::string("d") + kv], e["dbias"], e["dout"],
                          e["out"], e["lse"], e[q], e[kv], spec(e));
  };
  c.reference = [s](const Host& h) { return attention_reference(s, h); };
  c.fd = FiniteDiff{1e-2, 5e-4, 2e-3};
  return c;
}

struct General {
  int64_t B, Tq, Tk;
  int NH, KVH;
  int64_t HD, bias_batch;
  bool causal, segments;
  float scale;
};

// A general case's shape: q rows `q_extra` columns wider than their heads, keys from column
// `k_offset` of kv rows `kv_extra` wider than keys and values; packed: one qkv tensor.
AttentionShape shape_of(const General& g, bool packed, int64_t q_extra, int64_t k_offset,
                        int64_t kv_extra) {
  const int64_t OC = g.NH * g.HD, R = (g.NH + 2 * g.KVH) * g.HD;
  return {g.B,
          g.Tq,
          g.Tk,
          g.NH,
          g.KVH,
          g.HD,
          g.causal,
          g.scale,
          g.bias_batch,
          g.segments,
          packed,
          packed ? R : OC + q_extra,
          packed ? R : k_offset + 2 * g.KVH * g.HD + kv_extra,
          packed ? OC : k_offset};
}

// Self-attention over a packed (B, T, (NH + 2·KVH)·HD) qkv with the 1/sqrt(HD) scale.
OpCase packed(int64_t B, int64_t T, int NH, int KVH, int64_t HD, bool causal, float scale = 1) {
  const General g{B, T, T, NH, KVH, HD, 0, causal, false, 1.0f / std::sqrt(static_cast<float>(HD))};
  return attention(shape_of(g, true, 0, 0, 0), {}, {}, scale, 1, false);
}

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

// The former CPU reference cases: segments 1, 2, ... in runs of 3 queries and 4 keys; segment 9
// (the last queries of row 0) has no key at all.
void add_reference_origin(std::vector<OpCase>& t) {
  for (const General& g : {General{2, 5, 7, 4, 2, 8, 0, false, false, 1.0f},
                           General{2, 70, 9, 2, 1, 16, 1, false, true, 0.5f},
                           General{1, 6, 6, 4, 4, 4, 1, true, true, 0.25f},
                           General{3, 8, 8, 2, 2, 8, 3, true, true, 1.0f},
                           General{2, 66, 66, 2, 1, 8, 2, true, true, 0.3f}}) {
    std::vector<int32_t> qs, ks;
    for (int64_t b = 0; b < g.B && g.segments; ++b) {
      for (int64_t i = 0; i < g.Tq; ++i) qs.push_back(b == 0 && i >= g.Tq - 2 ? 9 : 1 + i / 3);
      for (int64_t u = 0; u < g.Tk; ++u) ks.push_back(1 + u / 4);
    }
    t.push_back(attention(shape_of(g, false, 5, 2, 1), qs, ks, 1, 1, g.segments));
  }
}

// The former finite-difference cases: the last query of a row is in segment 7, which no key has.
void add_gradient_origin(std::vector<OpCase>& t) {
  for (const General& g : {General{2, 4, 6, 4, 2, 8, 1, false, false, 0.4f},
                           General{2, 5, 5, 2, 1, 8, 2, true, true, 0.4f},
                           General{1, 70, 9, 2, 2, 8, 1, false, true, 0.4f}}) {
    std::vector<int32_t> qs, ks;
    for (int64_t b = 0; b < g.B && g.segments; ++b) {
      for (int64_t i = 0; i < g.Tq; ++i) qs.push_back(i == g.Tq - 1 ? 7 : 1 + i / 2);
      for (int64_t u = 0; u < g.Tk; ++u) ks.push_back(1 + u / 3);
    }
    t.push_back(attention(shape_of(g, false, 3, 1, 1), qs, ks, 1, 1, g.segments));
  }
}

// The former parity cases, through cuda_attention.cu's masked and unmasked kernels: keys from
// column 5, a shared bias over 1 to 3 chunks of batch rows (attention_plan.h), lengths that are
// not multiples of the 32-row tile, and packed self-attention with segments (dq and dkv one
// tensor). Random segment runs; row 0's last two queries forced to a segment no key has.
// Gradients start small (0.01): the comparison's rms is the gradient's.
void add_parity_origin(std::vector<OpCase>& t) {
  struct Case {
    General g;
    bool packed;
  };
  std::mt19937 rng(23);
  for (const Case& k : {Case{{2, 37, 70, 4, 2, 16, 0, false, false, 0.25f}, false},
                        Case{{3, 45, 33, 2, 1, 64, 1, false, false, 1.0f}, false},
                        Case{{2, 65, 65, 4, 4, 32, 2, true, true, 0.3f}, false},
                        Case{{2, 40, 50, 6, 2, 8, 1, false, true, 0.35f}, false},
                        Case{{6, 260, 260, 16, 4, 8, 1, true, true, 0.125f}, false},
                        Case{{2, 1024, 40, 16, 16, 8, 1, false, false, 1.0f}, false},
                        Case{{2, 77, 77, 4, 2, 16, 0, true, true, 0.25f}, true}}) {
    const General& g = k.g;
    std::vector<int32_t> qs, ks;
    if (g.segments) {
      // Queries and keys of one sequence (Tq == Tk) share their ids, else each has its own.
      qs = segment_runs(g.B, g.Tq, 6, rng);
      ks = g.Tq == g.Tk ? qs : segment_runs(g.B, g.Tk, 8, rng);
      if (!k.packed) qs[g.Tq - 1] = qs[g.Tq - 2] = 1000;
    }
    OpCase c =
        attention(shape_of(g, k.packed, 3, 5, 2), qs, ks, 2.0f, 0.01f, g.segments && !k.packed);
    c.uniform = true;
    c.same_bits_twice = true;
    t.push_back(c);
  }
}

// Cases the CUDA backend's tensor-core kernels take in its bf16 plan (attention_tc.h: head size
// a multiple of 16, rows and the key column in multiples of 8): cross-attention with segments
// (row 0's last two queries see no key), GQA and a bias per row; causal packed self-attention
// with segments over three 64-row tiles; T5's encoder self-attention (a bias shared by the
// batch, its gradient over three rows, segments). The op table's packed cases of head size 16,
// 64, 80 and 128 (add_parity_origin's packed case with segments among them) are taken too. Not in
// the finite-difference driver (their size; the kernels' math is the same as the smaller cases').
void add_tensor_core_origin(std::vector<OpCase>& t) {
  struct Case {
    General g;
    bool packed;
  };
  std::mt19937 rng(31);
  for (const Case& k : {Case{{2, 37, 130, 4, 2, 32, 2, false, true, 0.18f}, false},
                        Case{{2, 150, 150, 4, 2, 64, 0, true, true, 0.125f}, true},
                        Case{{3, 100, 100, 4, 4, 64, 1, false, true, 0.125f}, true}}) {
    const General& g = k.g;
    std::vector<int32_t> qs = segment_runs(g.B, g.Tq, 9, rng);
    std::vector<int32_t> ks = k.packed ? qs : segment_runs(g.B, g.Tk, 11, rng);
    if (!k.packed) qs[g.Tq - 1] = qs[g.Tq - 2] = 1000;
    OpCase c = attention(shape_of(g, k.packed, 8, 8, 16), qs, ks, 2.0f, 0.01f, !k.packed);
    c.name += "_tc";
    c.uniform = true;
    c.same_bits_twice = true;
    c.drivers = optable::kReference | optable::kParity;
    t.push_back(c);
  }
}

// A slice of a row against the whole row's keys (sequence parallelism, docs/sharding.md): the
// slice's own qkv rows hold the queries (q rows 2·KVH·HD wider than their heads), the gathered
// rows of the whole row the keys and values (from column NH·HD), and the AttentionSpec's first
// positions say where the slice starts. The segment ids of the queries are the keys' ids at the
// same positions (a packed row cut into slices). Cases: causal slices of S = 2, 3 and 4 (GQA, a
// bias per row or shared as T5's decoder has, segments), a bidirectional slice (positions do not
// matter), keys that start after the queries (zig-zag's early chunk against a later one: rows
// that see no key, a whole 64-row block of them), a slice on the OpenBLAS path; then in bf16
// shapes the tensor-core kernels take (the reference and parity drivers only, for their size).
void add_sequence_slice_cases(std::vector<OpCase>& t) {
  struct Case {
    General g;
    int64_t q_first, k_first;
    bool large;  // the parity suite's values (U(-2, 2), gradients from 0.01), not differenced
  };
  std::mt19937 rng(41);
  for (const Case& k : {Case{{2, 4, 16, 4, 2, 8, 0, true, false, 0.4f}, 8, 0, false},
                        Case{{2, 5, 15, 2, 1, 8, 0, true, true, 0.4f}, 5, 0, false},
                        Case{{1, 6, 12, 4, 1, 8, 0, false, true, 0.4f}, 6, 0, false},
                        Case{{2, 4, 8, 2, 2, 8, 1, true, false, 0.4f}, 4, 0, false},
                        Case{{2, 3, 12, 2, 2, 8, 2, true, true, 0.4f}, 9, 0, false},
                        Case{{1, 6, 6, 2, 1, 8, 0, true, false, 0.4f}, 0, 3, false},
                        Case{{1, 70, 9, 2, 1, 8, 0, true, true, 0.4f}, 0, 66, false},
                        Case{{1, 70, 280, 2, 1, 16, 0, true, true, 0.25f}, 140, 0, false},
                        Case{{2, 100, 400, 4, 2, 64, 0, true, true, 0.125f}, 200, 0, true},
                        Case{{2, 70, 140, 4, 4, 64, 1, true, true, 0.125f}, 70, 0, true},
                        Case{{1, 130, 100, 4, 2, 64, 0, true, false, 0.125f}, 0, 70, true},
                        Case{{2, 64, 256, 4, 2, 32, 0, false, true, 0.18f}, 128, 0, true}}) {
    const General& g = k.g;
    std::vector<int32_t> qs, ks;
    if (g.segments) {
      ks = segment_runs(g.B, g.Tk, 7, rng);
      for (int64_t b = 0; b < g.B; ++b) {
        for (int64_t i = 0; i < g.Tq; ++i) {
          const int64_t at = k.q_first - k.k_first + i;  // the key at the query's position
          qs.push_back(at >= 0 && at < g.Tk ? ks[b * g.Tk + at] : 1000);
        }
      }
    }
    AttentionShape shape = shape_of(g, false, 2 * g.KVH * g.HD, g.NH * g.HD, 0);
    shape.q_first = k.q_first;
    shape.k_first = k.k_first;
    // Rows that see no key: queries before the first key (causal), or of a segment no key has.
    bool neg_inf = g.causal && k.q_first < k.k_first;
    for (int32_t id : qs) neg_inf = neg_inf || id == 1000;
    OpCase c = attention(shape, qs, ks, k.large ? 2.0f : 1.0f, k.large ? 0.01f : 1.0f, neg_inf);
    if (k.large) {
      c.uniform = true;
      c.same_bits_twice = true;
      c.drivers = optable::kReference | optable::kParity;
    }
    t.push_back(c);
  }
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& t) {
  t.push_back(packed(2, 5, 4, 2, 8, true));
  t.push_back(packed(1, 70, 4, 1, 16, false));
  t.push_back(packed(2, 130, 2, 2, 8, true));
  t.push_back(packed(1, 9, 4, 4, 6, false));
  t.push_back(packed(2, 5, 4, 1, 8, false));
  t.push_back(packed(1, 7, 2, 2, 6, true));
  t.push_back(packed(1, 5, 4, 4, 4, false));
  t.push_back(packed(1, 70, 4, 2, 16, true));
  t.push_back(packed(1, 70, 2, 1, 8, false));
  t.push_back(packed(1, 66, 4, 1, 8, true));
  for (OpCase c : {packed(1, 1, 1, 1, 8, true, 2), packed(2, 37, 4, 2, 16, true, 2),
                   packed(2, 37, 4, 4, 16, false, 2), packed(1, 70, 6, 2, 64, true, 2),
                   packed(1, 33, 2, 1, 128, false, 2), packed(1, 65, 2, 2, 80, true, 2),
                   packed(2, 129, 4, 1, 64, true, 2)}) {
    c.uniform = true;
    t.push_back(c);
  }
  add_reference_origin(t);
  add_gradient_origin(t);
  add_parity_origin(t);
  add_tensor_core_origin(t);
  add_sequence_slice_cases(t);
}

}  // namespace ax::train::optable
