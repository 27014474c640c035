// The op table's entries: one factory per op, then the shapes each op is tested at. The shapes
// are the union of the former cpu_ops_test, grad_check_test and cuda_parity_test cases; a case
// leaves a driver out (`drivers`) only where the comment says why. Tolerances (docs/testing-ops.md
// has the table):
//   reference  CPU f32 against double: float rounding of the op's sums, 1e-6..1e-4 by length;
//   fd         finite differences: eps, atol, rtol by how smooth the op is (exact for linear ops);
//   parity     kOutputs in cuda_parity.h, by output, with the plan's rel (bf16, f32, TF32).
#include "op_table.h"

#include <cmath>
#include <string>
#include <tuple>

#include "ax/common/check.h"
#include "ax/trainer/backend/dropout_mask.h"
#include "op_reference.h"

namespace ax::train::optable {
namespace {

using K = Kind;

std::string dims(std::initializer_list<std::pair<const char*, int64_t>> d) {
  std::string s;
  for (auto [k, v] : d) s += std::string("_") + k + std::to_string(v);
  return s;
}

// n ids in [0, hi), every `ignore_every`-th (from the second) replaced by -1 (0: none).
std::vector<int32_t> random_ids(std::mt19937& rng, int64_t n, int64_t hi, int ignore_every = 0) {
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(hi - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = ignore_every > 0 && i % ignore_every == 1 ? -1 : dist(rng);
  }
  return v;
}

// Gates of 0 and ±50 (the activations' saturated tails) at the start of the tensor.
void saturated_tails(std::vector<float>& v) {
  if (v.size() >= 3) v[0] = 0, v[1] = 50, v[2] = -50;
}

// ---- Embedding: linear, so central differences are exact up to rounding. ----
OpCase embedding(EmbeddingShape s, std::vector<int32_t> tokens, bool dwpe = true) {
  OpCase c;
  c.name = "embedding" + dims({{"B", s.B}, {"T", s.T}, {"Vp", s.Vp}, {"C", s.C}}) +
           (s.wpe_rows > 0 ? "_wpe" : "") + (s.wpe_rows > 0 && !dwpe ? "_no_dwpe" : "");
  c.inputs = {{.name = "tokens", .shape = {s.B, s.T}, .kind = K::kI32, .ids = std::move(tokens)},
              {.name = "wte",
               .shape = {s.Vp, s.C},
               .grad = Grad::kF32,
               .grad_tol = 1e-6,
               .grad_parity = "embedding_backward dwte"}};
  if (s.wpe_rows > 0) {
    c.inputs.push_back({.name = "wpe",
                        .shape = {s.wpe_rows, s.C},
                        .grad = dwpe ? Grad::kF32 : Grad::kNone,
                        .grad_tol = 1e-6,
                        .grad_parity = "embedding_backward dwpe"});
  }
  c.outputs = {
      {.name = "out", .shape = {s.B, s.T, s.C}, .tol = 1e-6, .parity = "embedding_forward"}};
  c.forward = [](Backend& be, Env& e) {
    be.embedding_forward(e["out"], e["tokens"], e["wte"], e["wpe"]);
  };
  c.backward = [](Backend& be, Env& e) {
    be.embedding_backward(e["dwte"], e["dwpe"], e["dout"], e["tokens"]);
  };
  c.reference = [s](const Host& h) { return embedding_reference(s, h); };
  c.fd = FiniteDiff{0.5, 1e-4, 1e-4};
  return c;
}

// ---- LayerNorm and RMSNorm: smooth; truncation error O(eps²) plus float rounding. ----
std::vector<In> norm_inputs(const NormShape& s, float scale, float mean, bool bias) {
  std::vector<In> in = {{.name = "inp",
                         .shape = {s.N, s.C},
                         .grad = Grad::kAct,
                         .scale = scale,
                         .mean = mean,
                         .grad_parity = ""},
                        {.name = "weight", .shape = {s.C}, .grad = Grad::kF32}};
  if (bias) in.push_back({.name = "bias", .shape = {s.C}, .grad = Grad::kF32});
  return in;
}

OpCase layernorm(NormShape s, float scale = 2, float mean = 0) {
  OpCase c;
  c.name = "layernorm" + dims({{"N", s.N}, {"C", s.C}}) + (s.bias ? "_bias" : "");
  c.inputs = norm_inputs(s, scale, mean, s.bias);
  c.inputs[0].grad_parity = "layernorm_backward dinp";
  c.inputs[1].grad_parity = "layernorm_backward dweight";
  if (s.bias) c.inputs[2].grad_parity = "layernorm_backward dbias";
  c.outputs = {{.name = "out", .shape = {s.N, s.C}, .tol = 1e-5, .parity = "layernorm_forward out"},
               {.name = "mean",
                .shape = {s.N},
                .kind = K::kF32,
                .projected = false,
                .tol = 1e-6,
                .parity = "layernorm_forward mean"},
               {.name = "rstd",
                .shape = {s.N},
                .kind = K::kF32,
                .projected = false,
                .tol = 1e-6,
                .parity = "layernorm_forward rstd"}};
  const float eps = s.eps;
  c.forward = [eps](Backend& be, Env& e) {
    be.layernorm_forward(e["out"], e["mean"], e["rstd"], e["inp"], e["weight"], e["bias"], eps);
  };
  c.backward = [](Backend& be, Env& e) {
    be.layernorm_backward(e["dinp"], e["dweight"], e["dbias"], e["dout"], e["inp"], e["weight"],
                          e["mean"], e["rstd"]);
  };
  c.reference = [s](const Host& h) { return layernorm_reference(s, h); };
  c.fd = FiniteDiff{1e-2, 3e-4, 1e-3};
  return c;
}

OpCase rmsnorm(NormShape s, float scale = 2, float mean = 0) {
  OpCase c;
  c.name = "rmsnorm" + dims({{"N", s.N}, {"C", s.C}});
  c.inputs = norm_inputs(s, scale, mean, false);
  c.inputs[0].grad_parity = "rmsnorm_backward dinp";
  c.inputs[1].grad_parity = "rmsnorm_backward dweight";
  c.outputs = {{.name = "out", .shape = {s.N, s.C}, .tol = 1e-5, .parity = "rmsnorm_forward out"},
               {.name = "rstd",
                .shape = {s.N},
                .kind = K::kF32,
                .projected = false,
                .tol = 1e-6,
                .parity = "rmsnorm_forward rstd"}};
  const float eps = s.eps;
  c.forward = [eps](Backend& be, Env& e) {
    be.rmsnorm_forward(e["out"], e["rstd"], e["inp"], e["weight"], eps);
  };
  c.backward = [](Backend& be, Env& e) {
    be.rmsnorm_backward(e["dinp"], e["dweight"], e["dout"], e["inp"], e["weight"], e["rstd"]);
  };
  c.reference = [s](const Host& h) { return rmsnorm_reference(s, h); };
  c.fd = FiniteDiff{1e-2, 3e-4, 1e-3};
  return c;
}

// ---- Matmul: bilinear (linear in inp and in weight, each perturbed alone). ----
OpCase matmul(MatmulShape s, float weight_scale = 1) {
  OpCase c;
  c.name = "matmul" + dims({{"N", s.N}, {"C", s.C}, {"OC", s.OC}}) + (s.bias ? "_bias" : "") +
           (s.dinp ? "" : "_no_dinp") + (s.dbias ? "" : "_no_dbias");
  // Float sums of up to 600 products of N(0, 1) values: rounding errors reach ~5e-5.
  c.inputs = {{.name = "inp",
               .shape = {s.N, s.C},
               .grad = s.dinp ? Grad::kAct : Grad::kNone,
               .grad_tol = 1e-4,
               .grad_parity = "matmul_backward dinp"},
              {.name = "weight",
               .shape = {s.OC, s.C},
               .grad = Grad::kF32,
               .scale = weight_scale,
               .grad_tol = 1e-4,
               .grad_parity = "matmul_backward dweight"}};
  if (s.bias || s.dbias) {
    c.inputs.push_back({.name = "bias",
                        .shape = {s.OC},
                        .grad = s.dbias ? Grad::kF32 : Grad::kNone,
                        .grad_tol = 1e-4,
                        .grad_parity = "matmul_backward dbias"});
  }
  c.outputs = {{.name = "out", .shape = {s.N, s.OC}, .tol = 1e-4, .parity = "matmul_forward"}};
  const bool bias = s.bias;
  c.forward = [bias](Backend& be, Env& e) {
    be.matmul_forward(e["out"], e["inp"], e["weight"], bias ? e["bias"] : Tensor());
  };
  c.backward = [](Backend& be, Env& e) {
    be.matmul_backward(e["dinp"], e["dweight"], e["dbias"], e["dout"], e["inp"], e["weight"]);
  };
  c.reference = [s](const Host& h) { return matmul_reference(s, h); };
  c.fd = FiniteDiff{0.1, 2e-4, 1e-4};
  // dbias of a forward pass without a bias (a model adding it elsewhere) has no finite difference.
  if (s.dbias && !s.bias) c.drivers = kReference | kParity;
  return c;
}

// ---- RoPE: linear. The reference's tolerance is below the former 1e-5 absolute for |x| < 4.
OpCase rope(RopeShape s) {
  OpCase c;
  const int64_t R = (s.NH + 2 * s.KVH) * s.HD;
  c.name = "rope" + dims({{"B", s.B}, {"T", s.T}, {"NH", s.NH}, {"KVH", s.KVH}, {"HD", s.HD}}) +
           "_theta" + std::to_string(static_cast<int64_t>(s.theta)) +
           (s.position > 0 ? "_from" + std::to_string(s.position) : "") +
           (s.llama3 ? "_llama3" : "");
  RopeSpec spec{.theta = s.theta};
  if (s.llama3) {
    spec.scaling = RopeSpec::Scaling::kLlama3;
    spec.factor = s.llama3->factor;
    spec.low_freq_factor = s.llama3->low_freq_factor;
    spec.high_freq_factor = s.llama3->high_freq_factor;
    spec.original_max_positions = s.llama3->original_max_positions;
  }
  c.inputs = {{.name = "inp",
               .shape = {s.B, s.T, R},
               .grad = Grad::kAct,
               .grad_tol = 2e-6,
               .grad_parity = "rope_backward"}};
  c.outputs = {{.name = "out", .shape = {s.B, s.T, R}, .tol = 2e-6, .parity = "rope_forward"}};
  c.forward = [s, spec](Backend& be, Env& e) {
    be.rope_forward(e["out"], e["inp"], s.NH, s.KVH, spec, s.position);
  };
  c.backward = [s, spec](Backend& be, Env& e) {
    be.rope_backward(e["dinp"], e["dout"], s.NH, s.KVH, spec, s.position);
  };
  c.reference = [s](const Host& h) { return rope_reference(s, h); };
  c.fd = FiniteDiff{0.1, 1e-4, 1e-4};
  return c;
}

// ---- GELU and the gated linear units: smooth; inputs N(0, 2) cover both tails. ----
OpCase gelu(int64_t N, int64_t F, float scale = 2, bool tails = false) {
  OpCase c;
  c.name = "gelu" + dims({{"N", N}, {"F", F}}) + (tails ? "_tails" : "");
  c.inputs = {{.name = "inp",
               .shape = {N, F},
               .grad = Grad::kAct,
               .scale = scale,
               .grad_tol = 2e-5,
               .grad_parity = "gelu_backward"}};
  if (tails) c.inputs[0].edit = saturated_tails;
  c.outputs = {{.name = "out", .shape = {N, F}, .tol = 2e-6, .parity = "gelu_forward"}};
  c.forward = [](Backend& be, Env& e) { be.gelu_forward(e["out"], e["inp"]); };
  c.backward = [](Backend& be, Env& e) { be.gelu_backward(e["dinp"], e["dout"], e["inp"]); };
  c.reference = gelu_reference;
  c.fd = FiniteDiff{1e-2, 2e-4, 1e-3};
  return c;
}

OpCase glu(Glu g, int64_t N, int64_t F, float scale = 2, bool tails = false) {
  OpCase c;
  const std::string act = g == Glu::kGeGlu ? "geglu" : "swiglu";
  c.name = "glu_" + act + dims({{"N", N}, {"F", F}}) + (tails ? "_tails" : "");
  // GELU's derivative, 0.5·x·(1 - tanh²)·du, scales tanh_f32's ~1e-7 absolute error by up to
  // ~100 for gates around ±9, hence GeGLU's wider bound on dinp.
  c.inputs = {{.name = "inp",
               .shape = {N, 2 * F},
               .grad = Grad::kAct,
               .scale = scale,
               .grad_tol = g == Glu::kGeGlu ? 2e-5 : 2e-6,
               .grad_parity = "glu_backward " + act}};
  if (tails) c.inputs[0].edit = saturated_tails;
  c.outputs = {{.name = "out", .shape = {N, F}, .tol = 2e-6, .parity = "glu_forward " + act}};
  c.forward = [g](Backend& be, Env& e) { be.glu_forward(e["out"], e["inp"], g); };
  c.backward = [g](Backend& be, Env& e) { be.glu_backward(e["dinp"], e["dout"], e["inp"], g); };
  c.reference = [N, F, g](const Host& h) { return glu_reference(N, F, g, h); };
  c.fd = FiniteDiff{1e-2, 2e-4, 1e-3};
  return c;
}

// out = a + b, or a += b in place (the residual stream); f32 views: FSDP's gradient shards.
OpCase add(int64_t N, int64_t F, bool f32, bool in_place) {
  OpCase c;
  const Kind k = f32 ? K::kF32 : K::kAct;
  c.name = "add" + dims({{"N", N}, {"F", F}}) + (f32 ? "_f32" : "") + (in_place ? "_in_place" : "");
  c.inputs = {{.name = "a", .shape = {N, F}, .kind = k}, {.name = "b", .shape = {N, F}, .kind = k}};
  c.outputs = {{.name = in_place ? "a" : "out",
                .shape = {N, F},
                .kind = k,
                .in_place = in_place,
                .tol = 2e-7,
                .parity = f32 ? "add_forward f32" : "add_forward"}};
  c.forward = [in_place](Backend& be, Env& e) {
    be.add_forward(e[in_place ? "a" : "out"], e["a"], e["b"]);
  };
  c.reference = add_reference;
  return c;
}

// ---- Dropout: linear in its input once the mask is drawn; any 32-bit row keys (negative i32
// included), a feature offset as a tensor-parallel rank has, and rates from none to most. ----
OpCase dropout(int64_t N, int64_t F, double rate, int64_t feature_offset, uint64_t seed,
               std::vector<int32_t> keys) {
  OpCase c;
  c.name = "dropout" + dims({{"N", N}, {"F", F}, {"offset", feature_offset}}) + "_rate" +
           std::to_string(static_cast<int>(rate * 100));
  const DropoutSpec spec{.seed = seed,
                         .threshold = dropout_threshold(rate),
                         .scale = static_cast<float>(1.0 / (1.0 - rate)),
                         .feature_offset = feature_offset};
  c.inputs = {{.name = "row_keys", .shape = {N}, .kind = K::kI32, .ids = std::move(keys)},
              {.name = "inp",
               .shape = {N, F},
               .grad = Grad::kAct,
               .grad_tol = 2e-7,
               .grad_parity = "dropout_backward"}};
  c.outputs = {{.name = "out", .shape = {N, F}, .tol = 2e-7, .parity = "dropout_forward"}};
  c.forward = [spec](Backend& be, Env& e) {
    be.dropout_forward(e["out"], e["inp"], e["row_keys"], spec);
  };
  c.backward = [spec](Backend& be, Env& e) {
    be.dropout_backward(e["dinp"], e["dout"], e["row_keys"], spec);
  };
  c.reference = [N, F, spec](const Host& h) { return dropout_reference(N, F, spec, h); };
  c.fd = FiniteDiff{1e-2, 2e-4, 1e-3};
  return c;
}

// ---- T5's relative position bias: a gather (the table's values exactly), and the table's
// gradient summed per bucket; linear. ----
OpCase position_bias(PositionBiasShape s, std::vector<int32_t> buckets) {
  OpCase c;
  c.name = "position_bias" +
           dims({{"Bb", s.Bb}, {"NH", s.NH}, {"Tq", s.Tq}, {"Tk", s.Tk}, {"buckets", s.K}});
  c.inputs = {
      {.name = "buckets", .shape = {s.Bb, s.Tq, s.Tk}, .kind = K::kI32, .ids = std::move(buckets)},
      {.name = "table",
       .shape = {s.K, s.NH},
       .grad = Grad::kF32,
       .grad_tol = 1e-6,
       .grad_parity = "position_bias_backward"}};
  c.outputs = {{.name = "bias",
                .shape = {s.Bb, s.NH, s.Tq, s.Tk},
                .dkind = K::kF32,
                .tol = 0,
                .parity = "position_bias_forward"}};
  c.forward = [](Backend& be, Env& e) {
    be.position_bias_forward(e["bias"], e["table"], e["buckets"]);
  };
  c.backward = [](Backend& be, Env& e) {
    be.position_bias_backward(e["dtable"], e["dbias"], e["buckets"]);
  };
  c.reference = [s](const Host& h) { return position_bias_reference(s, h); };
  c.fd = FiniteDiff{0.5, 1e-4, 1e-4};
  return c;
}

// ---- Cross-entropy: smooth; padded columns and ignored rows have zero gradient. With
// `in_place` the backward pass overwrites the logits, as the model calls it (no finite
// differences then: the input is gone). ----
OpCase cross_entropy(CrossEntropyShape s, std::vector<int32_t> targets, float scale, float mean,
                     bool in_place, const char* tag = "") {
  OpCase c;
  c.name = "cross_entropy" + dims({{"N", s.N}, {"V", s.V}, {"Vp", s.Vp}}) +
           (s.z_loss == 0      ? ""
            : s.z_loss < 1e-3f ? "_zloss_1em4"
                               : "_zloss_0p1") +
           (in_place ? "_in_place" : "") + tag;
  c.inputs = {{.name = "targets", .shape = {s.N}, .kind = K::kI32, .ids = std::move(targets)},
              {.name = "logits",
               .shape = {s.N, s.Vp},
               .grad = in_place ? Grad::kInPlace : Grad::kAct,
               .scale = scale,
               .mean = mean,
               .grad_tol = 1e-6,
               .grad_parity = "cross_entropy_backward"}};
  c.outputs = {{.name = "losses",
                .shape = {s.N},
                .kind = K::kF32,
                .tol = 1e-6,
                .parity = "cross_entropy_forward"}};
  c.dloss = s.dloss;
  c.forward = [s](Backend& be, Env& e) {
    be.cross_entropy_forward(e["losses"], e["logits"], e["targets"], s.V, s.z_loss);
  };
  c.backward = [s, in_place](Backend& be, Env& e) {
    be.cross_entropy_backward(e[in_place ? "logits" : "dlogits"], e["logits"], e["targets"], s.V,
                              s.dloss, s.z_loss);
  };
  c.reference = [s](const Host& h) { return cross_entropy_reference(s, h); };
  c.fd = FiniteDiff{1e-2, 2e-4, 1e-3};
  return c;
}

// ---- Vocabulary-parallel cross-entropy on one shard: the row max, the sums (from that max),
// and the backward pass in place from lse = max + log(sums[:, 0]) (the caller's combination on
// one shard). A shard of padding only (v_count 0) has its max (-inf) and nothing else. ----
OpCase ce_shard(ShardShape s, std::vector<int32_t> targets, float scale) {
  OpCase c;
  c.name = "ce_shard" +
           dims({{"N", s.N}, {"Vl", s.Vl}, {"v_begin", s.v_begin}, {"v_count", s.v_count}}) +
           (s.z_loss == 0 ? "" : "_zloss_0p1");
  c.uniform = true;
  const bool full = s.v_count > 0;
  c.inputs = {{.name = "targets", .shape = {s.N}, .kind = K::kI32, .ids = std::move(targets)},
              {.name = "logits",
               .shape = {s.N, s.Vl},
               .grad = full ? Grad::kInPlace : Grad::kNone,
               .scale = scale,
               .grad_tol = 1e-5,
               .grad_parity = "ce_shard_backward"}};
  c.outputs = {{.name = "rowmax",
                .shape = {s.N},
                .kind = K::kF32,
                .projected = false,
                .tol = 0,
                .parity = "ce_shard_max",
                .neg_inf = !full}};
  if (full) {
    c.outputs.push_back({.name = "sums",
                         .shape = {s.N, 2},
                         .kind = K::kF32,
                         .projected = false,
                         .tol = 1e-6,
                         .parity = "ce_shard_sums"});
    c.outputs.push_back(
        {.name = "lse", .shape = {s.N}, .kind = K::kF32, .projected = false, .scratch = true});
  }
  c.dloss = s.dloss;
  c.forward = [s, full](Backend& be, Env& e) {
    be.ce_shard_max(e["rowmax"], e["logits"], s.v_count);
    if (full)
      be.ce_shard_sums(e["sums"], e["logits"], e["rowmax"], e["targets"], s.v_begin, s.v_count);
  };
  if (full) {
    c.backward = [s](Backend& be, Env& e) {
      std::vector<float> m(s.N), sums(2 * s.N), lse(s.N);
      be.copy_to_host(m.data(), e["rowmax"]);
      be.copy_to_host(sums.data(), e["sums"]);
      for (int64_t n = 0; n < s.N; ++n) lse[n] = m[n] + std::log(sums[2 * n]);
      be.copy_from_host(e["lse"], lse.data());
      be.ce_shard_backward(e["logits"], e["logits"], e["lse"], e["targets"], s.v_begin, s.v_count,
                           s.dloss, s.z_loss);
    };
  }
  c.reference = [s](const Host& h) { return ce_shard_reference(s, h); };
  c.drivers = kReference | kParity;  // the loss is a combination of outputs, not Σ w · out
  return c;
}

// ---- AdamW: `steps` updates in place of f32 params, m and v. ----
OpCase adamw(AdamWShape s, float m_scale, float v_scale) {
  OpCase c;
  c.name = "adamw" + dims({{"n", s.n}, {"steps", s.steps}, {"from_step", s.args.step}});
  const int64_t rows = s.same_grads ? 1 : s.steps;
  c.inputs = {{.name = "params", .shape = {s.n}, .kind = K::kF32},
              {.name = "grads", .shape = {rows, s.n}, .kind = K::kF32},
              {.name = "m", .shape = {s.n}, .kind = K::kF32, .scale = m_scale},
              {.name = "v", .shape = {s.n}, .kind = K::kF32, .scale = v_scale, .positive = true}};
  for (const char* name : {"params", "m", "v"}) {
    // Float steps of values near 1: 2e-6 allows a few roundings per step.
    c.outputs.push_back({.name = name,
                         .shape = {s.n},
                         .kind = K::kF32,
                         .projected = false,
                         .in_place = true,
                         .tol = 2e-6,
                         .parity = "adamw"});
  }
  c.forward = [s](Backend& be, Env& e) {
    AdamWArgs args = s.args;
    for (int64_t k = 0; k < s.steps; ++k, ++args.step) {
      float* row = static_cast<float*>(e["grads"].data) + (s.same_grads ? 0 : k * s.n);
      be.adamw_update(e["params"], Tensor(row, DType::kF32, {s.n}), e["m"], e["v"], args);
    }
  };
  c.reference = [s](const Host& h) { return adamw_reference(s, h); };
  return c;
}

AdamWArgs adamw_args(float lr, int64_t step) {
  AdamWArgs a;
  a.lr = lr;
  a.weight_decay = 0.1f;
  a.grad_scale = 0.5f;
  a.step = step;
  return a;
}

OpCase uniform(OpCase c) {
  c.uniform = true;
  return c;
}

// The former CPU reference checks (normal values, special values), finite-difference cases
// (normal values; seeded ids) and parity cases (uniform values, ids with ignored ones).
void add_row_op_cases(std::vector<OpCase>& t) {
  std::mt19937 rng(7);
  t.push_back(embedding({2, 3, 4, 5, 4}, {1, 3, 1, 1, 0, 3}));
  // A token < 0 belongs to another vocabulary shard: a zero row plus the position, no gradient.
  t.push_back(embedding({1, 3, 4, 5, 3}, {2, -1, 0}, /*dwpe=*/false));
  for (EmbeddingShape s : {EmbeddingShape{2, 5, 7, 6, 7}, {3, 4, 5, 9, 0}}) {
    t.push_back(embedding(s, random_ids(rng, s.B * s.T, s.Vp)));
  }
  for (EmbeddingShape s :
       {EmbeddingShape{1, 1, 3, 8, 4}, {2, 5, 11, 8, 8}, {3, 7, 13, 37, 0}, {2, 70, 50, 96, 73}}) {
    t.push_back(uniform(embedding(s, random_ids(rng, s.B * s.T, s.Vp, 5))));
  }

  t.push_back(layernorm({6, 37, true, 1e-5f}, 3.0f, 1.5f));
  t.push_back(rmsnorm({6, 37, false, 1e-5f}, 3.0f, 1.5f));
  for (NormShape s : {NormShape{5, 7, true, 1e-5f}, {4, 33, true, 1e-5f}, {3, 16, false, 1e-5f}}) {
    t.push_back(layernorm(s));
  }
  for (NormShape s : {NormShape{5, 7, false, 1e-5f}, {4, 40, false, 1e-5f}})
    t.push_back(rmsnorm(s));
  for (NormShape s : {NormShape{1, 8, true}, {7, 37, false}, {300, 768, true}, {5, 1, true}}) {
    t.push_back(uniform(layernorm({s.N, s.C, s.bias, 1e-5f})));
    OpCase rms = uniform(rmsnorm({s.N, s.C, false, 1e-6f}));
    // One column: out = w·x/sqrt(x² + eps) is w·sign(x) but within ~1e-3 of 0, far too steep
    // there for differences over 1e-2.
    if (s.C == 1) rms.drivers = kReference | kParity;
    t.push_back(rms);
  }

  for (MatmulShape s : {MatmulShape{67, 45, 33, true, true, true},
                        {128, 96, 160, false, true, true},
                        {300, 64, 70, true, true, true},
                        {3, 5, 2, true, true, true},
                        {20, 600, 530, true, true, true},
                        // The last two are large enough for OpenBLAS (small ones use the builtin
                        // kernel).
                        {5, 7, 3, true, true, true},
                        {6, 20, 17, false, true, false},
                        {5, 7, 3, true, false, false},
                        {40, 48, 36, true, true, true}}) {
    t.push_back(matmul(s));
  }
  for (MatmulShape s : {MatmulShape{1, 8, 8, true, true, true},
                        {7, 37, 13, false, true, false},
                        {130, 64, 96, true, false, true},
                        {257, 384, 1152, true, true, true}}) {
    t.push_back(uniform(matmul(s, 0.2f)));
  }

  for (RopeShape s : {RopeShape{2, 9, 4, 2, 8, 10000.0f},
                      {2, 5, 4, 2, 8, 10000.0f},
                      {1, 6, 4, 1, 6, 100.0f},
                      {1, 3, 2, 2, 4, 10000.0f},
                      // Decoding with a key/value cache: rows from a later position.
                      {2, 4, 4, 2, 8, 10000.0f, 5},
                      {3, 1, 4, 1, 16, 500000.0f, 300}}) {
    t.push_back(rope(s));
  }
  // Llama 3.1's scaling (low_freq_factor 1, high_freq_factor 4). Original context 64 at HD 16
  // and theta 1e4: the wavelengths 6.3, 20, 63, 199, ... positions put pair 0 in the kept band
  // (< 16), pairs 1 and 2 in the blended one and the rest in the scaled one (> 64). Original
  // context 256 at HD 8 and theta 5e5: wavelengths 6.3, 167, 4443, ...: one pair in each band.
  const Llama3Scaling llama3{8, 1, 4, 64};
  for (RopeShape s : {RopeShape{2, 9, 4, 2, 16, 10000.0f, 0, llama3},
                      {1, 6, 2, 1, 8, 500000.0f, 0, Llama3Scaling{32, 1, 4, 256}},
                      // Decoding with a key/value cache: rows from a later position.
                      {3, 1, 4, 1, 16, 10000.0f, 300, llama3}}) {
    t.push_back(rope(s));
  }
  t.push_back(uniform(rope({2, 37, 4, 2, 16, 500000.0f, 0, Llama3Scaling{8, 1, 4, 1024}})));
  for (RopeShape s : {RopeShape{1, 3, 2, 1, 8}, {2, 37, 4, 2, 16}, {1, 130, 3, 3, 64}}) {
    for (float theta : {10000.0f, 500000.0f}) {
      s.theta = theta;
      t.push_back(uniform(rope(s)));
    }
  }
}

void add_pointwise_cases(std::vector<OpCase>& t) {
  t.push_back(gelu(7, 90, 3.0f, /*tails=*/true));
  for (Glu g : {Glu::kSwiGlu, Glu::kGeGlu}) t.push_back(glu(g, 7, 45, 3.0f, /*tails=*/true));
  t.push_back(add(7, 90, /*f32=*/false, /*in_place=*/true));
  for (auto [N, F] : {std::pair<int64_t, int64_t>{5, 7}, {3, 40}}) t.push_back(gelu(N, F));
  for (Glu g : {Glu::kSwiGlu, Glu::kGeGlu}) {
    for (auto [N, F] : {std::pair<int64_t, int64_t>{5, 7}, {3, 33}}) t.push_back(glu(g, N, F));
  }
  for (auto [N, F] : {std::pair<int64_t, int64_t>{1, 1}, {7, 37}, {64, 3072}}) {
    t.push_back(uniform(gelu(N, F, 4.0f)));
    for (Glu g : {Glu::kSwiGlu, Glu::kGeGlu}) t.push_back(uniform(glu(g, N, F, 4.0f)));
    for (bool f32 : {false, true}) t.push_back(uniform(add(N, F, f32, false)));
  }

  std::mt19937 rng(72);
  for (auto [N, F, rate, offset] : {std::tuple<int64_t, int64_t, double, int64_t>{5, 7, 0.1, 0},
                                    {9, 33, 0.5, 66},
                                    {3, 130, 0.9, 0},
                                    {1, 1, 0.0, 0},
                                    {64, 512, 0.1, 1536}}) {
    std::vector<int32_t> keys(static_cast<size_t>(N));
    for (int32_t& k : keys) k = static_cast<int32_t>(rng());
    t.push_back(dropout(N, F, rate, offset, rng() * 0x100000001ULL, std::move(keys)));
  }
  // Buckets shared by many positions; in the first four, one (the last) used by none.
  for (PositionBiasShape s :
       {PositionBiasShape{1, 4, 9, 9, 32}, {3, 2, 5, 7, 6}, {2, 3, 70, 66, 32}, {1, 1, 1, 1, 2}}) {
    t.push_back(position_bias(s, random_ids(rng, s.Bb * s.Tq * s.Tk, s.K - 1)));
  }
  for (PositionBiasShape s :
       {PositionBiasShape{1, 3, 5, 6, 4}, {2, 2, 4, 4, 3}, {2, 4, 7, 5, 32}}) {
    t.push_back(position_bias(s, random_ids(rng, s.Bb * s.Tq * s.Tk, s.K)));
  }
  // T5's 32 buckets or few, query rows that are not a multiple of the CUDA kernel's 16-row
  // chunk, and a bucket count that fills the shared memory of one warp only.
  for (PositionBiasShape s : {PositionBiasShape{1, 4, 37, 37, 32},
                              {3, 2, 16, 70, 5},
                              {2, 6, 130, 129, 32},
                              {1, 2, 9, 40, 300}}) {
    t.push_back(uniform(position_bias(s, random_ids(rng, s.Bb * s.Tq * s.Tk, s.K))));
  }
}

void add_loss_and_optimizer_cases(std::vector<OpCase>& t) {
  // Logits of one row 1000 above the others (stable for large logits), against the formula;
  // in place and into a gradient with random values (overwritten). Float losses of logits near
  // 1000 are too coarse for finite differences.
  for (bool in_place : {true, false}) {
    OpCase c = cross_entropy({5, 10, 16, 0.0f, 0.25f}, {3, -1, 9, 0, 7}, 3.0f, 0.0f, in_place,
                             "_large_logits");
    c.inputs[1].edit = [](std::vector<float>& x) {
      for (int i = 0; i < 16; ++i) x[3 * 16 + i] += 1000.0f;
    };
    // That row's float lse (near 1000) is rounded to within 3e-5, which its loss (lse - x[t],
    // about 12) keeps: 3e-6 relative. The former test's 1e-6 held only for its seed's values.
    c.outputs[0].tol = 3e-6;
    c.drivers = kReference | kParity;
    t.push_back(c);
  }
  // T5x's z-loss with logits around 6 (a large lse: the term is far from negligible at 0.1).
  for (float z : {1e-4f, 0.1f}) {
    t.push_back(
        cross_entropy({6, 13, 16, z, 0.25f}, {3, -1, 12, 0, 7, 5}, 2.0f, 6.0f, true, "_mean6"));
  }
  std::mt19937 rng(11);
  for (auto [N, V, Vp] : {std::tuple<int64_t, int64_t, int64_t>{6, 11, 16}, {4, 40, 40}}) {
    for (float z : {0.0f, 1e-4f, 0.1f}) {
      auto targets = random_ids(rng, N, V);
      targets[1] = -1;  // ignored
      t.push_back(cross_entropy({N, V, Vp, z, 0.37f}, targets, 2.0f, 0.0f, false));
    }
  }
  for (auto [N, V, Vp] : {std::tuple<int64_t, int64_t, int64_t>{1, 2, 2},
                          {5, 11, 16},
                          {9, 1000, 1024},
                          {33, 50257, 50304}}) {
    for (float z : {0.0f, 1e-4f, 0.1f}) {
      t.push_back(
          uniform(cross_entropy({N, V, Vp, z, 0.25f}, random_ids(rng, N, V, 4), 8.0f, 0.0f, true)));
    }
  }
  // Shards of the padded vocabulary: all real, partly real, padding only; targets inside and
  // outside the shard, and ignored ones.
  for (ShardShape s :
       {ShardShape{4, 16, 0, 16}, {6, 16, 32, 10}, {5, 8, 64, 0}, {7, 1024, 1024, 1000}}) {
    for (float z : {0.0f, 0.1f}) {
      if (s.v_count == 0 && z != 0) continue;
      s.z_loss = z;
      s.dloss = 0.5f;
      t.push_back(ce_shard(s, random_ids(rng, s.N, s.v_begin + s.Vl + 16, 3), 8.0f));
    }
  }

  t.push_back(adamw({1000, 4, adamw_args(1e-2f, 1), false}, 0.0f, 0.0f));
  for (int64_t n : {1, 1000, 65537}) {
    t.push_back(uniform(adamw({n, 3, adamw_args(3e-4f, 7), true}, 0.1f, 0.01f)));
  }
}

}  // namespace

void add_attention_cases(std::vector<OpCase>& t);  // op_table_attention.cc

const std::vector<OpCase>& op_table() {
  static const std::vector<OpCase> table = [] {
    std::vector<OpCase> t;
    add_row_op_cases(t);
    add_attention_cases(t);
    add_pointwise_cases(t);
    add_loss_and_optimizer_cases(t);
    for (size_t i = 0; i < t.size(); ++i) {
      for (size_t j = 0; j < i; ++j) AX_CHECK(t[i].name != t[j].name) << "two cases " << t[i].name;
    }
    return t;
  }();
  return table;
}

std::vector<OpCase> cases_for(Driver driver) {
  std::vector<OpCase> cases;
  for (const OpCase& c : op_table()) {
    if ((c.drivers & driver) == 0) continue;
    if (driver == kReference && !c.reference) continue;
    // Finite differences need the inputs after the backward pass, and outputs apart from them.
    bool in_place = false;
    for (const In& in : c.inputs) in_place |= in.grad == Grad::kInPlace;
    for (const Out& out : c.outputs) in_place |= out.in_place;
    if (driver == kGradient && (!c.backward || !c.fd || in_place)) continue;
    cases.push_back(c);
  }
  return cases;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<float> draw(const OpCase& c, const In& in, std::mt19937& rng) {
  std::vector<float> v(static_cast<size_t>(numel(in.shape)), 0.0f);
  if (in.scale > 0) {
    std::normal_distribution<float> normal(in.mean, in.scale);
    std::uniform_real_distribution<float> flat(in.mean - in.scale, in.mean + in.scale);
    for (float& x : v) {
      x = c.uniform ? flat(rng) : normal(rng);
      if (in.positive) x = std::fabs(x);
    }
  }
  if (in.edit) in.edit(v);
  return v;
}

}  // namespace ax::train::optable
