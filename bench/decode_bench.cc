// ax-decode-bench: greedy decoding speed with the key/value cache against without it (the whole
// model again for every new token, ax's decoding before the cache and the reference it is tested
// against), both measured in this process on the same weights, prompts and backend. Prints per
// config the new tokens per second of each, their ratio, and the cache's device memory. Random
// weights: the speed does not depend on the values (no stop token; every row makes all its
// tokens). Method and measured numbers: docs/benchmarks-decode.md.
//
//   ax-decode-bench [--configs bench-a,bench-a-llama,bench-t5-a] [--tokens 256] [--prompt 16]
//                   [--batch 1] [--rounds 3] [--threads 2] [--device cpu]
//
// bench-a-llama is bench-a with the llama blocks: RMSNorm, SwiGLU (hidden 683 ≈ 8/3 · 256),
// RoPE, 2 key/value heads for 4 query heads (GQA) and an untied head.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ax/common/cli.h"
#include "ax/common/strings.h"
#include "ax/trainer/config/config.h"
#include "ax/trainer/eval/decoding.h"
#include "ax/trainer/models/cached_decoder.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/train/train_loop.h"

namespace ax::train {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string configs = "bench-a,bench-a-llama,bench-t5-a";
  int64_t tokens = 256, prompt = 16, batch = 1;
  int threads = 2, rounds = 3;
  std::string device = "cpu";
};

StatusOr<Config> bench_config(const std::string& name) {
  const bool llama = name == "bench-a-llama";
  AX_ASSIGN_OR_RETURN(Config c, make_experiment(llama ? "bench-a" : name));
  if (llama) {
    ModelConfig& m = c.model;
    m.family = ModelFamily::kLlama;
    m.num_kv_heads = 2;
    m.hidden_dim = 683;
    m.norm = NormKind::kRmsNorm;
    m.activation = Activation::kSwiglu;
    m.position = PositionKind::kRope;
    m.tied_embeddings = false;
    m.bias = false;
  }
  if (c.model.vocab_size <= 0) c.model.vocab_size = 8192;
  return c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double cached_tps = 0, whole_tps = 0, ratio = 0;  // medians over the rounds
  size_t cache_bytes = 0;
  bool same_tokens = false;
};

double tokens_per_second(const Model& weights, const std::vector<std::vector<int32_t>>& prompts,
                         const DecodeOptions& o, Decoded* out) {
  const auto t0 = Clock::now();
  StatusOr<Decoded> d = decode(weights, prompts, o);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  AX_CHECK(d.ok()) << d.status().to_string();
  size_t made = 0;
  for (const std::vector<int32_t>& row : d->tokens) made += row.size();
  *out = std::move(*d);
  return static_cast<double>(made) / s;
}

StatusOr<Result> run(const std::string& name, const Options& o, std::ostream& log) {
  AX_ASSIGN_OR_RETURN(Config c, bench_config(name));
  const bool t5 = c.model.family == ModelFamily::kT5;
  // Learned positions must hold the prompt and the new tokens.
  c.model.max_seq_len = std::max(c.model.max_seq_len, o.prompt + o.tokens);
  AX_ASSIGN_OR_RETURN(auto backend, make_backend(o.device, o.threads, log, c.train.precision));
  const int64_t vocab = c.model.vocab_size;
  AX_ASSIGN_OR_RETURN(auto weights, Model::create(c.model, vocab, 1, 1, backend.get(), {},
                                                  {.encoder_seq_len = t5 ? 1 : 0}));
  weights->init(1);
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(o.batch));
  for (std::vector<int32_t>& p : prompts) {
    for (int64_t i = 0; i < o.prompt; ++i) p.push_back(static_cast<int32_t>(rng() % vocab));
  }
  Result r;
  {
    const int64_t capacity = t5 ? o.tokens : o.prompt + o.tokens - 1;
    AX_ASSIGN_OR_RETURN(auto decoder,
                        CachedDecoder::create(*weights, {.batch = o.batch,
                                                         .capacity = capacity,
                                                         .prefill = o.prompt,
                                                         .encoder_capacity = o.prompt}));
    r.cache_bytes = decoder->bytes();
  }
  DecodeOptions d{.max_new_tokens = 8};
  Decoded warm, cached, whole;
  tokens_per_second(*weights, prompts, d, &warm);  // threads, BLAS buffers, the page cache
  d.max_new_tokens = o.tokens;
  // The two alternate, so that a change in the machine's load falls on both; medians.
  std::vector<double> with, without, ratios;
  r.same_tokens = true;
  for (int i = 0; i < o.rounds; ++i) {
    d.use_cache = true;
    with.push_back(tokens_per_second(*weights, prompts, d, &cached));
    d.use_cache = false;
    without.push_back(tokens_per_second(*weights, prompts, d, &whole));
    ratios.push_back(with.back() / without.back());
    r.same_tokens = r.same_tokens && cached.tokens == whole.tokens;
  }
  r.cached_tps = median(with);
  r.whole_tps = median(without);
  r.ratio = median(ratios);
  return r;
}

int main_impl(int argc, char** argv) {
  Options o;
  CLI::App app{
      "Greedy decoding with the key/value cache against the whole model per new token, in one "
      "process; docs/benchmarks-decode.md.",
      "ax-decode-bench"};
  cli::configure(app);
  app.add_option("--configs", o.configs,
                 "comma-separated experiments (default bench-a,bench-a-llama,bench-t5-a)")
      ->type_name("LIST");
  app.add_option("--tokens", o.tokens, "new tokens per row (default 256)")
      ->type_name("N")
      ->check(cli::in_range(1));
  app.add_option("--prompt", o.prompt, "prompt (t5: encoder input) tokens per row (default 16)")
      ->type_name("N")
      ->check(cli::in_range(1));
  app.add_option("--batch", o.batch, "rows decoded together (default 1)")
      ->type_name("B")
      ->check(cli::in_range(1));
  app.add_option("--rounds", o.rounds, "measurements of each, alternating (default 3)")
      ->type_name("N")
      ->check(cli::in_range(1));
  app.add_option("--threads", o.threads, "CPU threads (default 2)")
      ->type_name("N")
      ->check(cli::in_range(1));
  app.add_option("--device", o.device, "cpu, cpu-bf16 or cuda (default cpu)")->type_name("D");
  if (std::optional<int> exit = cli::parse_or_exit(app, argc, argv)) return *exit;

  std::printf(
      "ax-decode-bench: greedy, %lld rows x (%lld prompt + %lld new tokens), device %s, "
      "%d threads, medians of %d alternating rounds\n",
      static_cast<long long>(o.batch), static_cast<long long>(o.prompt),
      static_cast<long long>(o.tokens), o.device.c_str(), o.threads, o.rounds);
  std::printf("%-14s %14s %14s %8s %10s %12s\n", "config", "cache tok/s", "no-cache tok/s", "ratio",
              "cache MiB", "same tokens");
  int failures = 0;
  std::stringstream configs(o.configs);
  for (std::string name; std::getline(configs, name, ',');) {
    std::ostringstream log;
    StatusOr<Result> r = run(name, o, log);
    if (!r.ok()) {
      std::printf("%-14s failed: %s\n", name.c_str(), r.status().to_string().c_str());
      ++failures;
      continue;
    }
    std::printf("%-14s %14.1f %14.1f %7.1fx %10.1f %12s\n", name.c_str(), r->cached_tps,
                r->whole_tps, r->ratio, static_cast<double>(r->cache_bytes) / (1 << 20),
                r->same_tokens ? "yes" : "NO");
    if (!r->same_tokens) ++failures;
    std::fflush(stdout);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ax::train

int main(int argc, char** argv) { return ax::train::main_impl(argc, argv); }
