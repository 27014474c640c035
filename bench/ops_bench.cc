// ax-ops-bench: times the CPU backend's ops at the sizes of the reference benchmark model
// (4 layers, d256, 4 heads, T256, B8, V8192) and prints one table line per op: best-of-N time,
// GFLOP/s for GEMM-bound ops, and the speed-up over the same op on one thread (the peer measured
// in the same run). Usage: ax-ops-bench [threads] [repetitions]. The OpenBLAS kernels follow
// AX_OPENBLAS_CORETYPE (trainer/backend/src/cpu_blas.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ax/common/cli.h"
#include "ax/trainer/backend/backend.h"

namespace {

using ax::train::Backend;
using ax::train::DType;
using ax::train::Tensor;

struct Bench {
  Backend& be;
  std::vector<void*> owned;
  std::mt19937 rng{42};

  ~Bench() {
    for (void* p : owned) be.free(p);
  }
  Tensor make(DType dtype, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dtype, dims);
    auto mem = be.alloc(t.bytes());
    if (!mem.ok()) std::abort();
    t.data = *mem;
    owned.push_back(t.data);
    return t;
  }
  Tensor randn(std::initializer_list<int64_t> dims, float stddev = 1.0f) {
    Tensor t = make(DType::kF32, dims);
    std::normal_distribution<float> dist(0, stddev);
    std::vector<float> v(t.numel());
    for (auto& x : v) x = dist(rng);
    be.copy_from_host(t, v.data());
    return t;
  }
};

double seconds(const std::function<void()>& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Op {
  std::string name;
  double flops;  // 0: not GEMM-bound
  std::function<void(Bench&, std::function<void()>&)> setup;
};

constexpr int64_t B = 8, T = 256, C = 256, NH = 4, HD = 64, V = 8192, N = B * T;

std::vector<Op> ops() {
  std::vector<Op> list;
  for (int64_t OC : {int64_t{768}, V}) {
    list.push_back({"matmul_forward N2048 C256 OC" + std::to_string(OC), 2.0 * N * C * OC,
                    [=](Bench& b, std::function<void()>& run) {
                      Tensor out = b.make(DType::kF32, {N, OC}), inp = b.randn({N, C});
                      Tensor w = b.randn({OC, C}), bias = b.randn({OC});
                      run = [&be = b.be, out, inp, w, bias] {
                        be.matmul_forward(out, inp, w, bias);
                      };
                    }});
    list.push_back({"matmul_backward N2048 C256 OC" + std::to_string(OC), 4.0 * N * C * OC,
                    [=](Bench& b, std::function<void()>& run) {
                      Tensor dout = b.randn({N, OC}), inp = b.randn({N, C}), w = b.randn({OC, C});
                      Tensor dinp = b.make(DType::kF32, {N, C}), dw = b.make(DType::kF32, {OC, C});
                      Tensor db = b.make(DType::kF32, {OC});
                      run = [&be = b.be, dinp, dw, db, dout, inp, w] {
                        be.matmul_backward(dinp, dw, db, dout, inp, w);
                      };
                    }});
  }
  // Causal: half of the 4·B·NH·T²·HD forward and 8·B·NH·T²·HD backward FLOPs are needed.
  list.push_back(
      {"attention fwd+bwd B8 NH4 T256 HD64 causal", 6.0 * B * NH * T * T * HD,
       [=](Bench& b, std::function<void()>& run) {
         Tensor qkv = b.randn({B, T, 3 * NH * HD}), dqkv = b.make(DType::kF32, {B, T, 3 * NH * HD});
         Tensor out = b.make(DType::kF32, {B, T, NH * HD}), lse = b.make(DType::kF32, {B, NH, T});
         Tensor dout = b.randn({B, T, NH * HD});
         ax::train::AttentionSpec spec;
         spec.num_heads = spec.num_kv_heads = NH;
         spec.causal = true;
         spec.scale = 1.0f / std::sqrt(static_cast<float>(HD));
         spec.k_offset = NH * HD;
         run = [&be = b.be, qkv, dqkv, out, lse, dout, spec] {
           be.attention_forward(out, lse, qkv, qkv, spec);
           be.attention_backward(dqkv, dqkv, Tensor(), dout, out, lse, qkv, qkv, spec);
         };
       }});
  list.push_back({"layernorm fwd+bwd N2048 C256", 0, [=](Bench& b, std::function<void()>& run) {
                    Tensor x = b.randn({N, C}), w = b.randn({C}), bias = b.randn({C});
                    Tensor y = b.make(DType::kF32, {N, C}), dx = b.make(DType::kF32, {N, C});
                    Tensor mean = b.make(DType::kF32, {N}), rstd = b.make(DType::kF32, {N});
                    Tensor dw = b.make(DType::kF32, {C}), db = b.make(DType::kF32, {C});
                    run = [&be = b.be, x, w, bias, y, dx, mean, rstd, dw, db] {
                      be.layernorm_forward(y, mean, rstd, x, w, bias, 1e-5f);
                      be.layernorm_backward(dx, dw, db, y, x, w, mean, rstd);
                    };
                  }});
  list.push_back({"gelu fwd+bwd N2048 F1024", 0, [=](Bench& b, std::function<void()>& run) {
                    Tensor x = b.randn({N, 4 * C}), y = b.make(DType::kF32, {N, 4 * C});
                    Tensor dx = b.make(DType::kF32, {N, 4 * C});
                    run = [&be = b.be, x, y, dx] {
                      be.gelu_forward(y, x);
                      be.gelu_backward(dx, y, x);
                    };
                  }});
  for (auto [glu, name] :
       {std::pair{ax::train::Glu::kSwiGlu, "swiglu"}, std::pair{ax::train::Glu::kGeGlu, "geglu"}}) {
    list.push_back(
        {std::string(name) + " fwd+bwd N2048 F1024", 0, [=](Bench& b, std::function<void()>& run) {
           Tensor x = b.randn({N, 8 * C}), dx = b.make(DType::kF32, {N, 8 * C});
           Tensor y = b.make(DType::kF32, {N, 4 * C});
           run = [&be = b.be, x, y, dx, glu] {
             be.glu_forward(y, x, glu);
             be.glu_backward(dx, y, x, glu);
           };
         }});
  }
  // T5's relative position bias of one stack: 32 buckets, shared by the batch (Bb = 1).
  list.push_back(
      {"position_bias fwd+bwd NH4 T256 32 buckets", 0, [=](Bench& b, std::function<void()>& run) {
         constexpr int64_t K = 32;
         Tensor table = b.randn({K, NH}), dtable = b.make(DType::kF32, {K, NH});
         Tensor bias = b.make(DType::kF32, {1, NH, T, T});
         Tensor buckets = b.make(DType::kI32, {1, T, T});
         std::vector<int32_t> ids(T * T);
         for (int64_t i = 0; i < T; ++i) {
           for (int64_t j = 0; j < T; ++j) {
             ids[i * T + j] = static_cast<int32_t>(
                 std::min<int64_t>(K - 1, std::abs(j - i)));  // a stand-in for T5's bucketing
           }
         }
         b.be.copy_from_host(buckets, ids.data());
         run = [&be = b.be, table, dtable, bias, buckets] {
           be.position_bias_forward(bias, table, buckets);
           be.position_bias_backward(dtable, bias, buckets);
         };
       }});
  list.push_back(
      {"cross_entropy fwd+bwd N2048 V8192", 0, [=](Bench& b, std::function<void()>& run) {
         Tensor logits = b.randn({N, V}), dlogits = b.make(DType::kF32, {N, V});
         Tensor losses = b.make(DType::kF32, {N});
         Tensor targets = b.make(DType::kI32, {N});
         std::vector<int32_t> t(N);
         for (int64_t i = 0; i < N; ++i) t[i] = static_cast<int32_t>(i * 7919 % V);
         b.be.copy_from_host(targets, t.data());
         run = [&be = b.be, logits, dlogits, losses, targets] {
           be.cross_entropy_forward(losses, logits, targets, V, /*z_loss=*/0);
           be.cross_entropy_backward(dlogits, logits, targets, V, 1.0f / N, /*z_loss=*/0);
         };
       }});
  list.push_back({"adamw_update 5.32M params", 0, [=](Bench& b, std::function<void()>& run) {
                    constexpr int64_t P = 5320000;
                    Tensor p = b.randn({P}), g = b.randn({P}), m = b.make(DType::kF32, {P});
                    Tensor v = b.make(DType::kF32, {P});
                    run = [&be = b.be, p, g, m, v] {
                      ax::train::AdamWArgs args;
                      args.lr = 1e-3f;
                      args.weight_decay = 0.1f;
                      be.adamw_update(p, g, m, v, args);
                    };
                  }});
  return list;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, reps = 10;
  CLI::App app{
      "Times the CPU backend's ops at the reference benchmark model's sizes against the\n"
      "same op on one thread.",
      "ax-ops-bench"};
  ax::cli::configure(app);
  app.add_option("threads", threads, "CPU backend threads (default 0: all cores)")
      ->check(ax::cli::in_range(0, 4096));
  app.add_option("repetitions", reps, "timed runs per op, the best is shown (default 10)")
      ->check(ax::cli::in_range(1, 1e6));
  if (std::optional<int> exit = ax::cli::parse_or_exit(app, argc, argv)) return *exit;
  auto be = ax::train::make_cpu_backend(threads);
  auto one = ax::train::make_cpu_backend(1);
  std::printf("%s, best of %d\n", be->name().c_str(), reps);
  std::printf("%-44s %10s %10s %12s\n", "op", "ms", "GFLOP/s", "vs 1 thread");
  for (const Op& op : ops()) {
    // Both configurations alternate, so that load from other processes on a shared machine
    // hits them alike; the best time of each is kept.
    Bench bench_many{*be, {}}, bench_one{*one, {}};
    std::function<void()> run_many, run_one;
    op.setup(bench_many, run_many);
    op.setup(bench_one, run_one);
    run_many();  // warm-up: scratch, tables, page faults
    run_one();
    double best_many = 1e30, best_one = 1e30;
    for (int r = 0; r < reps; ++r) {
      best_many = std::min(best_many, seconds(run_many));
      best_one = std::min(best_one, seconds(run_one));
    }
    std::printf("%-44s %10.2f", op.name.c_str(), best_many * 1e3);
    if (op.flops > 0) {
      std::printf(" %10.1f", op.flops / best_many / 1e9);
    } else {
      std::printf(" %10s", "-");
    }
    std::printf(" %11.2fx\n", best_one / best_many);
  }
  return 0;
}
