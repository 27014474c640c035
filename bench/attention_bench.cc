// ax-attention-bench: the attention op alone, forward and backward, at the shapes of the GPU
// benchmark's models. On CUDA it times the tensor-core kernels and the CUDA-core kernels (two
// backends on one device: CudaBackendOptions::tensor_core_attention on and off, as
// AX_CUDA_ATTENTION chooses them) and, with --peer, PyTorch's scaled_dot_product_attention on the
// same shapes (bench/torch_attention_peer.py, run by this program): the peers measured in the
// same run. Prints per shape the milliseconds of a forward and of a backward pass, TFLOP/s by
// FlashAttention's count (forward 4·B·NH·Tq·Tk·HD, halved when causal; backward 2.5 × forward)
// and the ratios. On the CPU (--device cpu|cpu-bf16) the same program times the CPU backend (no
// kernel choice there): the smoke test of bench/gpu_bench.sh --check.
//
//   ax-attention-bench [--device cuda] [--shapes
//   pile126m,fuji-1b,llama-hd128,t5-encoder,t5-decoder]
//                      [--repeats 10] [--peer] [--python python3] [--peer-script PATH]
//
// Values are random (the speed does not depend on them); each backward pass adds into the same
// gradients. Method: docs/benchmarks-gpu.md ("Attention alone").
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ax/common/cli.h"
#include "ax/trainer/backend/backend.h"
#include "ax/trainer/backend/tensor.h"
#include "ax/trainer/train/train_loop.h"

namespace ax::train {
namespace {

struct AttnShape {
  std::string name;
  int64_t B, T, NH, KVH, HD;
  bool causal, bias;  // bias: a relative position bias shared by the batch, with its gradient
  const char* what;
};

// The models of bench/gpu_bench.sh at a batch that leaves room for both backends' scratch.
const std::vector<AttnShape>& shapes() {
  static const std::vector<AttnShape> all = {
      {"pile126m", 8, 2048, 12, 12, 64, true, false, "Pile126M: GPT, causal, 12 heads of 64"},
      {"fuji-1b", 2, 4096, 32, 8, 64, true, false, "fuji-1B v2: Llama, causal, GQA 32/8 of 64"},
      {"llama-hd128", 1, 4096, 32, 8, 128, true, false, "Llama-3-8B's heads: GQA 32/8 of 128"},
      {"t5-encoder", 16, 512, 12, 12, 64, false, true, "t5-base encoder: shared bias"},
      {"t5-decoder", 16, 128, 12, 12, 64, true, true, "t5-base decoder: causal, shared bias"},
      {"tiny", 2, 128, 4, 2, 64, true, false, "a smoke test for the CPU"},
  };
  return all;
}

struct Options {
  std::string device = "cuda";
  std::string shapes = "pile126m,fuji-1b,llama-hd128,t5-encoder,t5-decoder";
  int repeats = 10;
  int threads = 0;
  bool peer = false;
  std::string python = "python3";
  std::string peer_script = AX_TORCH_ATTENTION_PEER;
};

double forward_flops(const AttnShape& s) {
  const double f = 4.0 * s.B * s.NH * s.T * s.T * s.HD;
  return s.causal ? f / 2 : f;
}

struct Timing {
  double forward_ms = 0, backward_ms = 0;
  std::string error;
  std::string backend;  // the peer's: PyTorch's version and kernel
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Tensors of one shape on one backend, in its activation dtype, random.
class Tensors {
 public:
  Tensors(Backend& be, const AttnShape& s) : be_(be) {
    const int64_t R = (s.NH + 2 * s.KVH) * s.HD, OC = s.NH * s.HD;
    const DType act = be.compute_dtype();
    qkv = make(act, {s.B, s.T, R}, 1.0f);
    dqkv = make(act, {s.B, s.T, R}, 0.0f);
    out = make(act, {s.B, s.T, OC}, 0.0f);
    dout = make(act, {s.B, s.T, OC}, 1.0f);
    lse = make(DType::kF32, {s.B, s.NH, s.T}, 0.0f);
    if (s.bias) {
      bias = make(act, {1, s.NH, s.T, s.T}, 1.0f);
      dbias = make(DType::kF32, {1, s.NH, s.T, s.T}, 0.0f);
    }
  }
  ~Tensors() {
    for (void* p : owned_) be_.free(p);
  }
  Tensors(const Tensors&) = delete;
  Tensors& operator=(const Tensors&) = delete;
  bool ok() const { return error.empty(); }

  Tensor qkv, dqkv, out, dout, lse, bias, dbias;
  std::string error;

 private:
  // A zeroed tensor, or N(0, stddev²) values written in its dtype (bf16 rounded to nearest).
  Tensor make(DType dtype, std::vector<int64_t> dims, float stddev) {
    Tensor t(nullptr, dtype, {});
    for (int64_t d : dims) t.shape[t.ndim++] = d;
    StatusOr<void*> mem = be_.alloc(t.bytes());
    if (!mem.ok()) {
      error = mem.status().to_string();
      return t;
    }
    t.data = *mem;
    owned_.push_back(t.data);
    if (stddev > 0) {
      std::normal_distribution<float> dist(0.0f, stddev);
      std::vector<float> v(static_cast<size_t>(t.numel()));
      for (float& x : v) x = dist(rng_);
      std::vector<uint16_t> bits;
      if (dtype == DType::kBF16) {
        for (float x : v) bits.push_back(bf16_from_f32(x));
      }
      be_.copy_from_host(t, bits.empty() ? static_cast<const void*>(v.data()) : bits.data());
    }
    return t;
  }

  Backend& be_;
  std::vector<void*> owned_;
  std::mt19937 rng_{5};
};

// Milliseconds of one forward and one backward pass: the median of `repeats` timed passes after
// two untimed ones, the backend synchronised around each.
Timing time_attention(Backend& be, const AttnShape& s, int repeats) {
  Tensors t(be, s);
  if (!t.ok()) return {0, 0, t.error, ""};
  AttentionSpec spec;
  spec.num_heads = static_cast<int>(s.NH);
  spec.num_kv_heads = static_cast<int>(s.KVH);
  spec.causal = s.causal;
  spec.scale = 1.0f / std::sqrt(static_cast<float>(s.HD));
  spec.k_offset = s.NH * s.HD;
  spec.bias = t.bias;
  auto median_ms = [&](const std::function<void()>& pass) {
    std::vector<double> ms;
    for (int i = 0; i < repeats + 2; ++i) {
      be.synchronize();
      const double t0 = now();
      pass();
      be.synchronize();
      if (i >= 2) ms.push_back(1e3 * (now() - t0));
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  Timing r;
  r.forward_ms = median_ms([&] { be.attention_forward(t.out, t.lse, t.qkv, t.qkv, spec); });
  r.backward_ms = median_ms([&] {
    be.attention_backward(t.dqkv, t.dqkv, t.dbias, t.dout, t.out, t.lse, t.qkv, t.qkv, spec);
  });
  return r;
}

// PyTorch's times per shape name, from the peer's JSON lines; empty when it did not run.
std::map<std::string, Timing> run_peer(const Options& o, const std::vector<AttnShape>& list) {
  std::map<std::string, Timing> out;
  std::string names;
  for (const AttnShape& s : list) names += (names.empty() ? "" : ",") + s.name;
  const std::string cmd = o.python + " " + o.peer_script + " --shapes " + names + " --repeats " +
                          std::to_string(o.repeats) + " --device " +
                          (o.device.rfind("cuda", 0) == 0 ? "cuda" : "cpu") + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return out;
  std::string text;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof(buf), pipe)) text.append(buf, n);
  const int rc = pclose(pipe);
  std::istringstream lines(text);
  std::string last;
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    last = line;
    if (line[0] != '{') continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.contains("shape")) continue;
    Timing t;
    if (j.contains("error")) {
      t.error = j["error"].get<std::string>();
    } else {
      t.forward_ms = j["forward_ms"].get<double>();
      t.backward_ms = j["backward_ms"].get<double>();
      t.backend = j.value("backend", "");
    }
    out[j["shape"].get<std::string>()] = t;
  }
  if (out.empty()) {
    std::printf("PyTorch peer: no result (status %d): %s\n", rc, last.c_str());
  }
  return out;
}

std::string cell_ms(const Timing& t, bool forward) {
  if (!t.error.empty()) return "failed";
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", forward ? t.forward_ms : t.backward_ms);
  return b;
}

std::string cell_ratio(double a, double b) {
  if (a <= 0 || b <= 0) return "—";
  char s[32];
  std::snprintf(s, sizeof(s), "%.2fx", b / a);
  return s;
}

int main_impl(int argc, char** argv) {
  Options o;
  CLI::App app{
      "The attention op alone, forward and backward, on the tensor-core and CUDA-core kernels "
      "and against PyTorch's SDPA; docs/benchmarks-gpu.md.",
      "ax-attention-bench"};
  cli::configure(app);
  app.add_option("--device", o.device, "cuda, cuda:N, cpu or cpu-bf16 (default cuda)");
  app.add_option("--shapes", o.shapes,
                 "comma-separated: pile126m, fuji-1b, llama-hd128, t5-encoder, t5-decoder, tiny "
                 "(default all but tiny)");
  app.add_option("--repeats", o.repeats, "timed passes of each, the median kept (default 10)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--threads", o.threads, "CPU threads (default: all cores)");
  app.add_flag("--peer", o.peer, "also time PyTorch's scaled_dot_product_attention");
  app.add_option("--python", o.python, "the Python with PyTorch for --peer (default python3)");
  app.add_option("--peer-script", o.peer_script,
                 "bench/torch_attention_peer.py where the checkout is (default: the build's)");
  if (std::optional<int> exit = cli::parse_or_exit(app, argc, argv)) return *exit;

  std::vector<AttnShape> list;
  std::stringstream names(o.shapes);
  for (std::string name; std::getline(names, name, ',');) {
    auto it = std::find_if(shapes().begin(), shapes().end(),
                           [&](const AttnShape& s) { return s.name == name; });
    if (it == shapes().end()) return cli::usage_error(app, "unknown shape '" + name + "'");
    list.push_back(*it);
  }

  // The backends: on CUDA the tensor-core kernels and the CUDA-core kernels on one device.
  std::unique_ptr<Backend> main_be, cuda_cores;
  const bool cuda = o.device.rfind("cuda", 0) == 0;
  if (cuda) {
    const int ordinal = o.device.size() > 5 ? std::atoi(o.device.c_str() + 5) : 0;
    StatusOr<std::unique_ptr<Backend>> tc = make_cuda_backend(ordinal, {DType::kBF16, false, true});
    StatusOr<std::unique_ptr<Backend>> cc =
        make_cuda_backend(ordinal, {DType::kBF16, false, false});
    if (!tc.ok() || !cc.ok()) {
      std::fprintf(stderr, "ax-attention-bench: %s\n",
                   (tc.ok() ? cc.status() : tc.status()).to_string().c_str());
      return 1;
    }
    main_be = std::move(*tc);
    cuda_cores = std::move(*cc);
  } else {
    std::ostringstream log;
    StatusOr<std::unique_ptr<Backend>> be = make_backend(o.device, o.threads, log);
    if (!be.ok()) {
      std::fprintf(stderr, "ax-attention-bench: %s\n", be.status().to_string().c_str());
      return 1;
    }
    main_be = std::move(*be);
  }
  std::printf("ax-attention-bench: %s; medians of %d passes; TFLOP/s by FlashAttention's count\n",
              main_be->name().c_str(), o.repeats);
  const std::map<std::string, Timing> torch =
      o.peer ? run_peer(o, list) : std::map<std::string, Timing>{};

  const char* ax_label = cuda ? "ax tensor cores" : "ax";
  std::printf("\n| shape | B×T, heads (kv) × HD | pass | %s ms | TFLOP/s |%s%s\n", ax_label,
              cuda ? " ax CUDA cores ms | tensor / CUDA cores |" : "",
              o.peer ? " PyTorch SDPA ms | ax / PyTorch |" : "");
  std::printf("|---|---|---|---|---|%s%s\n", cuda ? "---|---|" : "", o.peer ? "---|---|" : "");
  int failures = 0;
  for (const AttnShape& s : list) {
    const Timing t = time_attention(*main_be, s, o.repeats);
    const Timing c = cuda ? time_attention(*cuda_cores, s, o.repeats) : Timing{};
    const auto p = torch.find(s.name);
    if (!t.error.empty()) ++failures;
    for (bool forward : {true, false}) {
      const double flops = forward_flops(s) * (forward ? 1.0 : 2.5);
      const double ms = forward ? t.forward_ms : t.backward_ms;
      char dims[96];
      std::snprintf(
          dims, sizeof(dims), "%lld×%lld, %lld (%lld) × %lld%s%s", static_cast<long long>(s.B),
          static_cast<long long>(s.T), static_cast<long long>(s.NH), static_cast<long long>(s.KVH),
          static_cast<long long>(s.HD), s.causal ? ", causal" : "", s.bias ? ", bias" : "");
      std::string row = "| " + s.name + " | " + dims + " | " + (forward ? "forward" : "backward") +
                        " | " + (t.error.empty() ? cell_ms(t, forward) : t.error) + " | ";
      char tf[32] = "—";
      if (t.error.empty() && ms > 0) std::snprintf(tf, sizeof(tf), "%.1f", flops / ms / 1e9);
      row += std::string(tf) + " |";
      if (cuda) {
        const double cms = forward ? c.forward_ms : c.backward_ms;
        row += " " + cell_ms(c, forward) + " | " + cell_ratio(ms, c.error.empty() ? cms : 0) + " |";
      }
      if (o.peer) {
        if (p == torch.end()) {
          row += " not run | — |";
        } else {
          const double pms = forward ? p->second.forward_ms : p->second.backward_ms;
          row += " " + (p->second.error.empty() ? cell_ms(p->second, forward) : p->second.error) +
                 " | " + cell_ratio(ms, p->second.error.empty() ? pms : 0) + " |";
        }
      }
      std::printf("%s\n", row.c_str());
    }
    std::fflush(stdout);
  }
  std::printf("\nratios: the other side's time over ax's%s (> 1: ax faster). Shapes:",
              cuda ? " tensor-core kernels'" : "");
  for (const AttnShape& s : list) std::printf(" %s = %s;", s.name.c_str(), s.what);
  std::printf("\n");
  for (const auto& [name, t] : torch) {
    if (!t.backend.empty()) {
      std::printf("PyTorch: %s\n", t.backend.c_str());
      break;
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ax::train

int main(int argc, char** argv) { return ax::train::main_impl(argc, argv); }
