// `ax-train plan` (docs/plan.md): the memory it predicts for a rank against what the real model,
// built and trained one step on the CPU backend, allocates (the backend's allocation counter);
// the scale plans against their time budget and the layouts the seeds published; bad input.
#include "ax/trainer/plan/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "ax/trainer/backend/backend.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/optim/optimizer.h"

namespace ax::train::plan {
namespace {

// Rank 0 of a group of `n`, in one process: collectives leave this rank's own data where a real
// one would put the group's result. Allocations do not depend on values, and the Gloo and NCCL
// communicators allocate nothing through the backend, so the rank's allocations are the real
// rank's.
class StandIn : public comm::Communicator {
 public:
  explicit StandIn(int n) : n_(n) {}
  int rank() const override { return 0; }
  int size() const override { return n_; }
  std::string name() const override { return "stand-in"; }
  Status all_reduce(Tensor, comm::ReduceOp) override { return Status::Ok(); }
  Status reduce_scatter(Tensor out, Tensor in) override {
    std::memmove(out.data, in.data, out.bytes());
    return Status::Ok();
  }
  Status all_gather(Tensor out, Tensor in) override {
    if (out.data != in.data) std::memmove(out.data, in.data, in.bytes());
    return Status::Ok();
  }
  Status broadcast(Tensor, int) override { return Status::Ok(); }
  Status barrier() override { return Status::Ok(); }
  Status exchange(const std::vector<comm::P2POp>&) override { return Status::Ok(); }
  int64_t bytes_moved() const override { return 0; }

 private:
  int n_;
};

Config experiment(const std::string& name) {
  StatusOr<Config> c = make_experiment(name);
  AX_CHECK(c.ok()) << c.status().to_string();
  return *c;
}

// The backend's peak after building the model and AdamW as the trainer does and training one
// step of one micro-batch on rank 0 of `layout`.
size_t measured_peak(const Config& c, int64_t vocab, const Layout& layout, int64_t micro_batch,
                     bool recompute, bool bf16) {
  std::unique_ptr<Backend> be = bf16 ? make_cpu_bf16_backend(1) : make_cpu_backend(1);
  StandIn tensor(layout.tensor()), fsdp(layout.fsdp()), data(layout.data());
  ModelParallel par;
  par.tensor_size = layout.tensor();
  par.fsdp_size = layout.fsdp();
  if (layout.tensor() > 1) par.tensor = &tensor;
  if (layout.fsdp() > 1) par.fsdp = &fsdp;
  if (layout.data() > 1) par.data = &data;
  StatusOr<std::unique_ptr<Model>> model =
      Model::create(c.model, vocab, micro_batch, c.train.seq_len, be.get(), par,
                    {.recompute_layers = recompute,
                     .encoder_seq_len = c.train.encoder_seq_len,
                     .z_loss = static_cast<float>(c.train.z_loss)});
  AX_CHECK(model.ok()) << model.status().to_string();
  StatusOr<std::unique_ptr<AdamW>> opt =
      AdamW::create(c.optim, c.train.max_steps, &(*model)->store());
  AX_CHECK(opt.ok()) << opt.status().to_string();
  (*model)->init(1);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab) - 1);
  auto ids = [&](int64_t n) {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int32_t& x : v) x = id(rng);
    return v;
  };
  const std::vector<int32_t> tokens = ids(micro_batch * c.train.seq_len);
  const std::vector<int32_t> targets = ids(micro_batch * c.train.seq_len);
  const std::vector<int32_t> encoder = ids(micro_batch * c.train.encoder_seq_len);
  Batch batch{.tokens = tokens, .targets = targets};
  if (c.model.family == ModelFamily::kT5) batch.encoder_tokens = encoder;
  (*model)->zero_grad();
  (*model)->forward(batch);
  (*model)->backward(1.0f);
  (*model)->reduce_gradients();
  (*opt)->apply(1, (*opt)->grad_norm());
  return be->peak_bytes_in_use();
}

Layout layout_of(int data, int fsdp, int tensor) {
  Layout l;
  l.ici[0] = data;
  l.ici[1] = fsdp;
  l.ici[2] = tensor;
  return l;
}

struct MemoryCase {
  const char* experiment;
  int64_t vocab;
};

// Within 5 % on every layout: parameters, gradients, AdamW, FSDP's gathered units, activations.
TEST(Plan, MemoryMatchesTheAllocationCounterOfTheRealModel) {
  const std::vector<Layout> layouts = {layout_of(1, 1, 1), layout_of(4, 1, 1), layout_of(1, 2, 1),
                                       layout_of(1, 4, 1), layout_of(1, 1, 2), layout_of(2, 2, 1),
                                       layout_of(1, 2, 2)};
  const CostConstants cpu{.context_bytes = 0, .comm_buffer_bytes = 0, .workspace_bytes = 0};
  for (const MemoryCase& mc :
       {MemoryCase{"tiny-gpt", 512}, MemoryCase{"tiny-llama", 512}, MemoryCase{"tiny-t5", 500}}) {
    const Config c = experiment(mc.experiment);
    const bool t5 = c.model.family == ModelFamily::kT5;
    int checked = 0;
    double worst = 0;
    for (const Layout& lay : layouts) {
      for (bool recompute : {false, true}) {
        if (recompute && t5) continue;
        for (bool bf16 : {false, true}) {
          const int64_t micro_batch = 4;
          StatusOr<Memory> predicted = rank_memory(c, mc.vocab, lay, micro_batch, recompute,
                                                   bf16 ? DType::kBF16 : DType::kF32, cpu);
          ASSERT_TRUE(predicted.ok()) << predicted.status().to_string();
          const double measured =
              static_cast<double>(measured_peak(c, mc.vocab, lay, micro_batch, recompute, bf16));
          const double error = std::abs(predicted->total() - measured) / measured;
          EXPECT_LT(error, 0.05) << mc.experiment << " " << lay.name() << " recompute " << recompute
                                 << " bf16 " << bf16 << ": predicted " << predicted->total()
                                 << " bytes, measured " << measured;
          worst = std::max(worst, error);
          ++checked;
        }
      }
    }
    EXPECT_GE(checked, 12) << mc.experiment;
    std::printf("%s: %d rank plans (layouts x recompute x f32/bf16), worst error %.3f%%\n",
                mc.experiment, checked, 100 * worst);
  }
}

// The CUDA backend's own peak count on a lent H200 (docs/benchmarks-gpu.md, "Results": one GPU,
// bf16, one micro-batch of the batch named, the backend's peak count in GiB, not nvidia-smi's).
TEST(Plan, MemoryMatchesTheMeasuredPeakOfAnH200) {
  struct Measured {
    const char* experiment;
    int64_t batch, vocab;
    double gib;
  };
  const CostConstants none{.context_bytes = 0, .comm_buffer_bytes = 0, .workspace_bytes = 0};
  for (const Measured& m :
       {Measured{"Pile126M", 128, 50257, 105.3}, Measured{"fuji-1B-v2", 16, 32768, 101.2},
        Measured{"t5-small", 512, 32128, 48.4}, Measured{"t5-base", 256, 32128, 62.7},
        Measured{"t5-large", 128, 32128, 87.4}}) {
    StatusOr<Memory> p = rank_memory(experiment(m.experiment), m.vocab, layout_of(1, 1, 1), m.batch,
                                     false, DType::kBF16, none);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    const double predicted = p->total() / (1 << 30);
    EXPECT_NEAR(predicted, m.gib, 0.10 * m.gib) << m.experiment;
    std::printf("%s batch %lld on an H200: predicted %.2f GiB, measured %.1f GiB (%+.2f%%)\n",
                m.experiment, static_cast<long long>(m.batch), predicted, m.gib,
                100 * (predicted / m.gib - 1));
  }
}

// The plan sizes activations with the model's own plan: more rows, more bytes; recomputation
// keeps less (decoders).
TEST(Plan, ActivationsFollowTheModelsPlan) {
  const Config c = experiment("tiny-llama");
  const CostConstants none{.context_bytes = 0, .comm_buffer_bytes = 0, .workspace_bytes = 0};
  StatusOr<Memory> one = rank_memory(c, 512, layout_of(1, 1, 1), 1, false, DType::kF32, none);
  StatusOr<Memory> four = rank_memory(c, 512, layout_of(1, 1, 1), 4, false, DType::kF32, none);
  StatusOr<Memory> four_r = rank_memory(c, 512, layout_of(1, 1, 1), 4, true, DType::kF32, none);
  ASSERT_TRUE(one.ok() && four.ok() && four_r.ok());
  EXPECT_GT(four->activations, 3 * one->activations);
  EXPECT_LT(four_r->activations, four->activations);
  EXPECT_EQ(four->parameters, one->parameters);
}

struct ScaleCase {
  const char* experiment;
  int nodes;
  Layout published;  // the seeds' layout for this model, on this cluster
  const char* source;
};

// GPT175B, fuji-70B and t5-xxl on H100 nodes: under 2 s each, and the layout the seeds published
// for the model is among the feasible ones.
TEST(Plan, ScalePlansAreFastAndListThePublishedLayouts) {
  Layout fsdp128;  // Pax GPT175B: FSDP over every GPU (ICI [1,8,1], DCN [1,N,1])
  fsdp128.ici[1] = 8;
  fsdp128.dcn[1] = 16;
  Layout fsdp64 = fsdp128;  // AXLearn fuji-70B on a3: fsdp=64
  fsdp64.dcn[1] = 8;
  Layout tp8;  // T5x t5-xxl: TP 8 inside a node, data parallel across
  tp8.ici[2] = 8;
  tp8.dcn[0] = 4;
  const GpuSpec h100 = *find_gpu("H100-80GB");
  for (const ScaleCase& sc :
       {ScaleCase{"GPT175B", 16, fsdp128, "JAX-Toolbox Pax README: 175B DP 1 FSDP 256 TP 1"},
        ScaleCase{"fuji-70B-v2", 8, fsdp64, "AXLearn fuji.py: 70B fsdp=64 on a3"},
        ScaleCase{"t5-xxl", 4, tp8, "JAX-Toolbox T5x README: xxl TP 8"}}) {
    PlanRequest r;
    r.config = experiment(sc.experiment);
    r.vocab = r.config.model.vocab_size > 0 ? r.config.model.vocab_size : 50257;
    r.cluster = {sc.nodes, 8, h100};
    const auto start = std::chrono::steady_clock::now();
    StatusOr<Plan> p = make_plan(r);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_LT(seconds, 2.0) << sc.experiment;
    ASSERT_TRUE(p->any_fits()) << sc.experiment;
    bool published = false;
    for (const Candidate& cand : p->candidates) {
      if (cand.fits && cand.layout.ici_string() == sc.published.ici_string() &&
          cand.layout.dcn_string() == sc.published.dcn_string()) {
        published = true;
      }
    }
    EXPECT_TRUE(published) << sc.experiment << ": " << sc.source << " is not among the "
                           << "feasible layouts\n"
                           << format_table(*p, 10);
    const Candidate& best = p->candidates.front();
    EXPECT_GT(best.mfu, 0.0);
    EXPECT_LT(best.mfu, 0.8) << sc.experiment;
    std::printf(
        "%s on %d x 8 H100-80GB: %.2f s, %zu plans; best %s ici %s dcn %s, %.1f GiB, "
        "%.0f tokens/s/GPU, MFU %.1f%%\n",
        sc.experiment, sc.nodes, seconds, p->candidates.size(), best.layout.name().c_str(),
        best.layout.ici_string().c_str(), best.layout.dcn_string().c_str(),
        best.memory.total() / (1 << 30), best.tokens_per_s / r.cluster.gpus(), 100 * best.mfu);
  }
}

// GPT175B on one node fits nowhere; the search names a node count on which it does.
TEST(Plan, AConfigThatFitsNowhereNamesTheSmallestClusterThatFits) {
  PlanRequest r;
  r.config = experiment("GPT175B");
  r.config.train.global_batch = 256;
  r.vocab = 50257;
  r.cluster = {1, 8, *find_gpu("H100-80GB")};
  StatusOr<Plan> p = make_plan(r);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->any_fits());
  const int nodes = smallest_fitting_nodes(r, 64);
  EXPECT_GT(nodes, 1);
  PlanRequest smaller = r;
  smaller.cluster.nodes = nodes - 1;
  StatusOr<Plan> below = make_plan(smaller);
  ASSERT_TRUE(below.ok());
  EXPECT_FALSE(below->any_fits()) << "the node count below the answer fits too";
}

// Pax's shapes, brackets and one -1 per vector, on a cluster; tensor across nodes refused.
TEST(Plan, ExplicitMeshShapes) {
  const Cluster cl{16, 8, *find_gpu("H100-80GB")};
  StatusOr<Layout> l = parse_layout("[1,-1,1]", "-1,1,1", cl);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->ici_string(), "1,8,1");
  EXPECT_EQ(l->dcn_string(), "16,1,1");
  EXPECT_FALSE(parse_layout("1,4,1", "16,1,1", cl).ok());
  EXPECT_FALSE(parse_layout("1,-1,-1", "16,1,1", cl).ok());
  EXPECT_FALSE(parse_layout("1,-1,3", "16,1,1", cl).ok());
  EXPECT_FALSE(parse_layout("1,8,1", "8,1,2", cl).ok());
  EXPECT_FALSE(parse_layout("1,8", "16,1,1", cl).ok());
  PlanRequest r;
  r.config = experiment("tiny-gpt");
  r.vocab = 512;
  r.cluster = {2, 4, cl.gpu};
  r.only = *parse_layout("1,2,2", "2,1,1", r.cluster);
  StatusOr<Plan> p = make_plan(r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->layouts, 1);
  ASSERT_FALSE(p->candidates.empty());
  for (const Candidate& c : p->candidates) {
    EXPECT_EQ(c.layout.ici_string(), "1,2,2");
    EXPECT_EQ(c.layout.dcn_string(), "2,1,1");
  }
}

TEST(Plan, BadInputIsRefusedInOneLine) {
  StatusOr<GpuSpec> v100 = find_gpu("V100");
  ASSERT_FALSE(v100.ok());
  EXPECT_NE(v100.status().message().find("H100-80GB, H200, A100-80GB"), std::string::npos);
  PlanRequest r;
  r.config = experiment("tiny-gpt");
  r.vocab = 512;
  r.cluster = {0, 8, *find_gpu("H200")};
  StatusOr<Plan> p = make_plan(r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(p.status().message().find('\n'), std::string::npos);
}

// The driver's names (what the job scripts get from nvidia-smi) are the table's GPUs; a job's
// own micro-batch count and recomputation are the only ones planned; CPU ranks take measured
// rates at efficiency 1 (bench/plan_cpu_bench.sh).
TEST(Plan, DriverNamesFixedChoicesAndCpuRanks) {
  EXPECT_EQ(find_gpu("NVIDIA H100 80GB HBM3")->name, "H100-80GB");
  EXPECT_EQ(find_gpu("NVIDIA H200")->name, "H200");
  EXPECT_EQ(find_gpu("NVIDIA A100-SXM4-80GB")->name, "A100-80GB");
  EXPECT_FALSE(find_gpu("NVIDIA A100-SXM4-40GB").ok());
  PlanRequest r;
  r.config = experiment("tiny-gpt");
  r.config.train.global_batch = 16;
  r.vocab = 512;
  r.cluster = {1, 4, *find_gpu("H200")};
  r.microbatches = 2;
  r.recompute = true;
  StatusOr<Plan> p = make_plan(r);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_FALSE(p->candidates.empty());
  for (const Candidate& c : p->candidates) {
    EXPECT_EQ(c.microbatches, 2);
    EXPECT_TRUE(c.recompute);
  }
  StatusOr<Device> cpu = cpu_device("gemm=100,attention=20,memory=10,link=1,latency=5", 1e9);
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  EXPECT_EQ(cpu->gpu.bf16_flops, 100e9);
  EXPECT_EQ(cpu->constants.attention_bwd_flops, 20e9);
  EXPECT_EQ(cpu->constants.gemm_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(cpu->constants.ici_latency_s, 5e-6);
  EXPECT_EQ(cpu->constants.context_bytes, 0.0);
  EXPECT_FALSE(cpu_device("gemm=100,attention=20,memory=10,link=1", 1e9).ok());
  EXPECT_FALSE(cpu_device("gemm=100,gemm=2,attention=20,memory=10,link=1,latency=0", 1e9).ok());
  EXPECT_FALSE(cpu_device("gemm=0,attention=20,memory=10,link=1,latency=0", 1e9).ok());
}

}  // namespace
}  // namespace ax::train::plan
