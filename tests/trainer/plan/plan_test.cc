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
#include <tuple>
#include <vector>

#include "ax/trainer/backend/backend.h"
#include "ax/trainer/comm/communicator.h"
#include "ax/trainer/models/model.h"
#include "ax/trainer/optim/optimizer.h"
#include "ax/trainer/parallel/distributed.h"
#include "ax/trainer/train/train_loop.h"

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

Layout layout_of(int data, int fsdp, int tensor, int pipeline = 1, int seq = 1) {
  Layout l;
  l.ici[0] = data;
  l.ici[1] = fsdp;
  l.ici[2] = tensor;
  l.ici_pipeline = pipeline;
  l.ici_seq = seq;
  return l;
}

// The backend's peak on stage `stage` of a pipelined `layout` (or on slice 0 of a seq layout)
// after building the model and AdamW as the trainer does and training one step of `microbatches`
// micro-batches of `micro_batch` rows: on a pipeline, ax-train's own pipeline step
// (pipeline_forward_backward with the config's schedule, stand-in neighbours); on a seq axis the
// rank's slice of each row through the seq group's attention (stand-in group).
size_t measured_stage_peak(const Config& c, int64_t vocab, const Layout& layout, int stage,
                           int64_t microbatches, int64_t micro_batch, bool recompute, bool bf16) {
  std::unique_ptr<Backend> be = bf16 ? make_cpu_bf16_backend(1) : make_cpu_backend(1);
  StandIn tensor(layout.tensor()), fsdp(layout.fsdp()), data(layout.data());
  StandIn pipeline(layout.pipeline()), seq(layout.seq());
  ModelParallel par;
  par.tensor_size = layout.tensor();
  par.fsdp_size = layout.fsdp();
  par.pipeline_size = layout.pipeline();
  par.pipeline_rank = stage;
  par.seq_size = layout.seq();
  if (layout.tensor() > 1) par.tensor = &tensor;
  if (layout.fsdp() > 1) par.fsdp = &fsdp;
  if (layout.data() > 1) par.data = &data;
  if (layout.pipeline() > 1) par.pipeline = &pipeline;
  if (layout.seq() > 1) par.seq = &seq;
  const int64_t T = c.train.seq_len / layout.seq();
  StatusOr<std::unique_ptr<Model>> model =
      Model::create(c.model, vocab, micro_batch, T, be.get(), par,
                    {.recompute_layers = recompute,
                     .encoder_seq_len = c.train.encoder_seq_len,
                     .z_loss = static_cast<float>(c.train.z_loss),
                     .pipeline_chunks = c.train.pipeline_schedule == "interleaved"
                                            ? static_cast<int>(c.train.pipeline_virtual_stages)
                                            : 1});
  AX_CHECK(model.ok()) << model.status().to_string();
  StatusOr<std::unique_ptr<AdamW>> opt =
      AdamW::create(c.optim, c.train.max_steps, &(*model)->store());
  AX_CHECK(opt.ok()) << opt.status().to_string();
  (*model)->init(1);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab) - 1);
  StepRows rows;
  rows.rows = microbatches * micro_batch;
  rows.length = T;
  for (int64_t i = 0; i < rows.rows * T; ++i) {
    rows.tokens.push_back(id(rng));
    rows.targets.push_back(id(rng));
  }
  if (c.model.family == ModelFamily::kT5) {
    rows.encoder_length = c.train.encoder_seq_len;
    for (int64_t i = 0; i < rows.rows * rows.encoder_length; ++i) {
      rows.encoder_tokens.push_back(id(rng));
    }
  }
  rows.num_targets = rows.global_targets = rows.rows * T;
  if (layout.pipeline() > 1) {
    StatusOr<PipelineSchedule> schedule = parse_pipeline_schedule(c.train.pipeline_schedule);
    AX_CHECK(schedule.ok());
    pipeline_forward_backward(model->get(), rows, *schedule, nullptr);
  } else {
    (*model)->zero_grad();
    for (int64_t m = 0; m < microbatches; ++m) {
      (*model)->forward(rows.micro_batch(m * micro_batch, micro_batch));
      (*model)->backward(1.0f / static_cast<float>(microbatches));
    }
    (*model)->reduce_gradients();
  }
  (*opt)->apply(1, (*opt)->grad_norm());
  return be->peak_bytes_in_use();
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

// Pipeline stages: every stage's predicted memory (its layers, the ends it holds, the slots the
// schedule keeps: pipeline_slots; with a seq axis its slice of the rows and the K/V gathers)
// against what the trainer's own pipeline step allocates on it, within 5 %; and the plan's
// heaviest stage is the heaviest measured. T5's stages hold encoder and decoder layers as its
// cost-balanced split puts them (6 layers: model.num_layers 4 and 2 decoder layers).
TEST(Plan, PipelineStageMemoryMatchesTheAllocationCounter) {
  struct Case {
    const char* experiment;
    int64_t layers;  // model.num_layers (0: the experiment's)
    Layout layout;
    int64_t microbatches;
    const char* schedule;
  };
  const CostConstants cpu{.context_bytes = 0, .comm_buffer_bytes = 0, .workspace_bytes = 0};
  int checked = 0;
  double worst = 0;
  for (const Case& pc : {Case{"tiny-gpt", 0, layout_of(1, 1, 1, 2), 4, "1f1b"},
                         Case{"tiny-llama", 0, layout_of(1, 2, 1, 2), 3, "1f1b"},
                         Case{"tiny-llama", 0, layout_of(2, 1, 2, 2), 2, "1f1b"},
                         Case{"tiny-gpt", 4, layout_of(1, 1, 1, 4), 6, "1f1b"},
                         Case{"tiny-llama", 8, layout_of(1, 2, 1, 4), 8, "1f1b"},
                         Case{"tiny-gpt", 4, layout_of(1, 1, 1, 4), 4, "gpipe"},
                         Case{"tiny-llama", 8, layout_of(1, 1, 1, 2), 4, "interleaved"},
                         Case{"tiny-gpt", 8, layout_of(1, 2, 1, 2), 6, "interleaved"},
                         Case{"tiny-gpt", 4, layout_of(1, 1, 1, 2, 2), 4, "1f1b"},
                         Case{"tiny-llama", 8, layout_of(1, 1, 2, 2, 2), 4, "interleaved"},
                         Case{"tiny-t5", 0, layout_of(1, 1, 1, 2), 4, "1f1b"},
                         Case{"tiny-t5", 0, layout_of(1, 2, 1, 4), 6, "1f1b"},
                         Case{"tiny-t5", 0, layout_of(1, 1, 1, 4), 4, "gpipe"},
                         Case{"tiny-t5", 0, layout_of(2, 1, 2, 2), 2, "1f1b"},
                         Case{"tiny-t5", 4, layout_of(1, 1, 1, 2), 4, "interleaved"},
                         Case{"tiny-t5", 4, layout_of(1, 2, 1, 4), 5, "1f1b"}}) {
    Config c = experiment(pc.experiment);
    if (pc.layers > 0) c.model.num_layers = pc.layers;
    c.train.pipeline_schedule = pc.schedule;
    if (std::string(pc.schedule) == "interleaved") c.train.pipeline_virtual_stages = 2;
    for (bool recompute : {false, true}) {
      if (recompute && c.model.family == ModelFamily::kT5) continue;
      for (bool bf16 : {false, true}) {
        const int64_t micro_batch = 2;
        const DType dtype = bf16 ? DType::kBF16 : DType::kF32;
        double heaviest_measured = 0, heaviest_predicted = 0;
        for (int s = 0; s < pc.layout.pipeline(); ++s) {
          StatusOr<Memory> predicted = rank_memory(c, 512, pc.layout, micro_batch, recompute, dtype,
                                                   cpu, pc.microbatches, s);
          ASSERT_TRUE(predicted.ok()) << predicted.status().to_string();
          const double measured = static_cast<double>(measured_stage_peak(
              c, 512, pc.layout, s, pc.microbatches, micro_batch, recompute, bf16));
          const double error = std::abs(predicted->total() - measured) / measured;
          EXPECT_LT(error, 0.05) << pc.experiment << " " << pc.layout.name() << " " << pc.schedule
                                 << " stage " << s << " recompute " << recompute << " bf16 " << bf16
                                 << ": predicted " << predicted->total() << " bytes, measured "
                                 << measured;
          worst = std::max(worst, error);
          if (c.model.family == ModelFamily::kT5) {
            std::printf(
                "%s %d layers %s %s stage %d bf16 %d: predicted %.0f bytes, counted %.0f "
                "(%+.3f%%)\n",
                pc.experiment, static_cast<int>(c.model.num_layers + c.model.decoder_layers()),
                pc.layout.name().c_str(), pc.schedule, s, bf16 ? 1 : 0, predicted->total(),
                measured, 100 * (predicted->total() / measured - 1));
          }
          heaviest_measured = std::max(heaviest_measured, measured);
          heaviest_predicted = std::max(heaviest_predicted, predicted->total());
          ++checked;
        }
        int stage = -1;
        StatusOr<Memory> heaviest = rank_memory(c, 512, pc.layout, micro_batch, recompute, dtype,
                                                cpu, pc.microbatches, -1, &stage);
        ASSERT_TRUE(heaviest.ok());
        EXPECT_EQ(heaviest->total(), heaviest_predicted) << "stage " << stage;
        EXPECT_LT(std::abs(heaviest->total() - heaviest_measured) / heaviest_measured, 0.05);
      }
    }
  }
  EXPECT_GE(checked, 104 + 36);
  std::printf(
      "pipeline stages: %d stage plans (16 layouts x stages x recompute x f32/bf16), worst "
      "error %.3f%%\n",
      checked, 100 * worst);
}

// Seq slices: a rank's predicted memory (its slice of every row, the K/V gathers' buffers)
// against what its forward and backward passes through the seq group's attention allocate,
// within 5 %; activations fall with the seq size.
TEST(Plan, SeqRankMemoryMatchesTheAllocationCounter) {
  const CostConstants cpu{.context_bytes = 0, .comm_buffer_bytes = 0, .workspace_bytes = 0};
  int checked = 0;
  double worst = 0;
  for (const char* name : {"tiny-gpt", "tiny-llama"}) {
    const Config c = experiment(name);
    for (const Layout& lay :
         {layout_of(1, 1, 1, 1, 2), layout_of(1, 1, 1, 1, 4), layout_of(1, 2, 1, 1, 2),
          layout_of(1, 1, 2, 1, 2), layout_of(2, 1, 1, 1, 4)}) {
      for (bool recompute : {false, true}) {
        for (bool bf16 : {false, true}) {
          const int64_t micro_batch = 4;
          StatusOr<Memory> predicted = rank_memory(c, 512, lay, micro_batch, recompute,
                                                   bf16 ? DType::kBF16 : DType::kF32, cpu);
          ASSERT_TRUE(predicted.ok()) << predicted.status().to_string();
          EXPECT_GT(predicted->transient, 0);
          const double measured = static_cast<double>(
              measured_stage_peak(c, 512, lay, 0, 2, micro_batch, recompute, bf16));
          const double error = std::abs(predicted->total() - measured) / measured;
          EXPECT_LT(error, 0.05) << name << " " << lay.name() << " recompute " << recompute
                                 << " bf16 " << bf16 << ": predicted " << predicted->total()
                                 << " bytes, measured " << measured;
          worst = std::max(worst, error);
          ++checked;
        }
      }
    }
    StatusOr<Memory> one = rank_memory(c, 512, layout_of(1, 1, 1), 4, false, DType::kF32, cpu);
    StatusOr<Memory> two =
        rank_memory(c, 512, layout_of(1, 1, 1, 1, 2), 4, false, DType::kF32, cpu);
    StatusOr<Memory> four =
        rank_memory(c, 512, layout_of(1, 1, 1, 1, 4), 4, false, DType::kF32, cpu);
    ASSERT_TRUE(one.ok() && two.ok() && four.ok());
    EXPECT_LT(two->activations, 0.6 * one->activations) << name;
    EXPECT_LT(four->activations, 0.6 * two->activations) << name;
    EXPECT_EQ(two->parameters, one->parameters) << name;
    std::printf("%s activations per rank: seq 1 %.0f, seq 2 %.0f, seq 4 %.0f bytes (f32, 4 rows)\n",
                name, one->activations, two->activations, four->activations);
  }
  // docs/benchmarks-sharding.md "Sequence parallelism": SeqMemory's forked CPU ranks (tiny-llama,
  // rows of 1024 tokens, one micro-batch of 2 rows, f32), rank 0's backend peak in MB (1e6
  // bytes): 29.71, 20.69, 13.56 on seq 1, 2, 4.
  Config long_rows = experiment("tiny-llama");
  long_rows.train.seq_len = 1024;
  for (const auto& [seq, mb] : {std::pair{1, 29.71}, std::pair{2, 20.69}, std::pair{4, 13.56}}) {
    StatusOr<Memory> p =
        rank_memory(long_rows, 512, layout_of(1, 1, 1, 1, seq), 2, false, DType::kF32, cpu);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_NEAR(p->total() / 1e6, mb, 0.05 * mb) << "seq " << seq;
    std::printf(
        "tiny-llama rows of 1024, seq %d: predicted peak %.2f MB (activations %.2f, K/V "
        "gathers %.2f), measured %.2f MB (%+.2f%%)\n",
        seq, p->total() / 1e6, p->activations / 1e6, p->transient / 1e6, mb,
        100 * (p->total() / 1e6 / mb - 1));
  }
  EXPECT_GE(checked, 40);
  std::printf("seq ranks: %d rank plans (layouts x recompute x f32/bf16), worst error %.3f%%\n",
              checked, 100 * worst);
}

// The plan lists pipeline and seq layouts for decoders, alone and together, and never one
// ax-train refuses: the trainer's own checks pass on every plan, no more stages than layers, seq
// and tensor inside a node; pipelines but no seq for t5, seq under dropout too; 1F1B's bubble.
TEST(Plan, PipelineAndSeqLayoutsAreListedAndNeverRefusedOnes) {
  auto plan_of = [](Config c, int nodes, int gpus) {
    PlanRequest r;
    r.config = std::move(c);
    r.vocab = 512;
    r.cluster = {nodes, gpus, *find_gpu("H100-80GB")};
    StatusOr<Plan> p = make_plan(r);
    AX_CHECK(p.ok()) << p.status().to_string();
    return *p;
  };
  auto check = [](const Plan& p, const Config& c) {
    int pipelined = 0, sliced = 0, both = 0;
    for (const Candidate& cand : p.candidates) {
      const Layout& l = cand.layout;
      comm::MeshCoords coords;
      coords.data = l.data();
      coords.fsdp = l.fsdp();
      coords.tensor = l.tensor();
      coords.pipeline = l.pipeline();
      coords.seq = l.seq();
      Config probe = c;
      probe.train.num_microbatches = cand.microbatches;
      EXPECT_TRUE(check_pipeline_layout(probe, coords).ok()) << l.name();
      EXPECT_TRUE(check_seq_layout(probe, coords).ok()) << l.name();
      const bool t5 = c.model.family == ModelFamily::kT5;
      EXPECT_LE(l.pipeline(), c.model.num_layers + (t5 ? c.model.decoder_layers() : 0)) << l.name();
      both += l.pipeline() > 1 && l.seq() > 1 ? 1 : 0;
      EXPECT_EQ(l.dcn[2], 1) << l.name();
      EXPECT_EQ(l.dcn_seq, 1) << l.name();
      EXPECT_EQ(c.train.seq_len % l.seq(), 0) << l.name();
      if (l.pipeline() > 1) {
        ++pipelined;
        const double P = l.pipeline(), m = static_cast<double>(cand.microbatches);
        if (c.train.pipeline_schedule == "1f1b") {
          EXPECT_NEAR(cand.time.bubble, (P - 1) / (m + P - 1), 1e-9) << l.name();
        }
        EXPECT_GT(cand.time.pipeline_s, 0);
      }
      if (l.seq() > 1) {
        ++sliced;
        EXPECT_GT(cand.time.seq_s, 0);
        EXPECT_GT(cand.memory.transient, 0);
      }
    }
    return std::make_tuple(pipelined, sliced, both);
  };
  // tiny-llama (2 layers, seq_len 64) on 2 x 4: stages across the nodes, slices inside one, and
  // both.
  const Config llama = experiment("tiny-llama");
  const Plan p = plan_of(llama, 2, 4);
  const auto [pipelined, sliced, both] = check(p, llama);
  EXPECT_GT(pipelined, 0);
  EXPECT_GT(sliced, 0);
  EXPECT_GT(both, 0);
  bool five_best = false;
  for (const Candidate& cand : p.candidates) {
    if (cand.layout.pipeline() == 2) {
      EXPECT_EQ(cand.layout.dcn_pipeline, 2);
    }
    five_best = five_best || cand.layout.five();
  }
  EXPECT_TRUE(five_best);
  EXPECT_NE(format_table(p, 5).find("ICI p,d,f,s,t"), std::string::npos);
  // One node of 8: at most 2 stages for 2 layers (pipeline 4 and 8 refused with the trainer's
  // line), seq 2, 4, 8 (64 positions split evenly).
  const Plan one_node = plan_of(llama, 1, 8);
  check(one_node, llama);
  int most_stages = 0, most_slices = 0;
  for (const Candidate& cand : one_node.candidates) {
    most_stages = std::max(most_stages, cand.layout.pipeline());
    most_slices = std::max(most_slices, cand.layout.seq());
  }
  EXPECT_EQ(most_stages, 2);
  EXPECT_EQ(most_slices, 8);
  bool refusal_noted = false;
  for (const std::string& n : one_node.notes) {
    refusal_noted = refusal_noted || n.find("pipeline=4 stages need at least") != std::string::npos;
  }
  EXPECT_TRUE(refusal_noted) << format_table(one_node, 0);
  // A seq_len seq 8 does not divide: no seq 8.
  Config odd = llama;
  odd.train.seq_len = 60;
  for (const Candidate& cand : plan_of(odd, 1, 8).candidates) {
    EXPECT_NE(cand.layout.seq(), 8);
    EXPECT_EQ(60 % cand.layout.seq(), 0);
  }
  // Dropout: seq too; interleaved: micro-batches a multiple of the stages.
  Config dropout = experiment("tiny-gpt");
  dropout.model.dropout = 0.1;
  const Plan dp = plan_of(dropout, 1, 8);
  EXPECT_GT(std::get<1>(check(dp, dropout)), 0);
  Config interleaved = llama;
  interleaved.model.num_layers = 8;
  interleaved.train.pipeline_schedule = "interleaved";
  interleaved.train.pipeline_virtual_stages = 2;
  const Plan ip = plan_of(interleaved, 4, 2);
  EXPECT_GT(std::get<0>(check(ip, interleaved)), 0);
  for (const Candidate& cand : ip.candidates) {
    EXPECT_EQ(cand.microbatches % cand.layout.pipeline(), 0) << cand.layout.name();
  }
  // T5: pipelines (its 2 + 2 layers as one sequence: up to 4 stages; 8 refused with the
  // trainer's line), no seq; a stage passes both streams, (B·Te + B·Td, C), each way.
  const Config t5 = experiment("tiny-t5");
  const Plan tp = plan_of(t5, 2, 4);
  const auto [t5_pipelined, t5_sliced, t5_both] = check(tp, t5);
  EXPECT_GT(t5_pipelined, 0);
  EXPECT_EQ(t5_sliced, 0);
  EXPECT_EQ(t5_both, 0);
  int t5_stages = 0;
  for (const Candidate& cand : tp.candidates) {
    t5_stages = std::max(t5_stages, cand.layout.pipeline());
    if (cand.layout.pipeline() == 1) continue;
    const CostConstants k;
    const GpuSpec& g = tp.cluster.gpu;
    const bool dcn = cand.layout.dcn_pipeline > 1;
    const double bytes = static_cast<double>(cand.micro_batch) *
                         static_cast<double>(t5.train.encoder_seq_len + t5.train.seq_len) *
                         static_cast<double>(t5.model.model_dim) *
                         (t5.train.precision == "float32" ? 4 : 2);
    const double link = (dcn ? g.network_bytes_per_s : g.nvlink_bytes_per_s) * k.link_efficiency;
    const double expected = 2.0 *
                            static_cast<double>(cand.microbatches + cand.layout.pipeline() - 1) *
                            (bytes / link + (dcn ? k.dcn_latency_s : k.ici_latency_s));
    EXPECT_NEAR(cand.time.pipeline_s, expected, 1e-9 * expected) << cand.layout.name();
  }
  EXPECT_EQ(t5_stages, 4);
  // The plan groups T5's stages by what the model puts on them: its heaviest stage is what
  // sizing every stage of the layout finds (tiny-t5's pipelines; t5-xxl's up to 32 stages).
  const Config xxl = experiment("t5-xxl");
  const Plan xp = plan_of(xxl, 4, 8);
  for (const auto& [pc, cfg] : {std::pair{&tp, &t5}, std::pair{&xp, &xxl}}) {
    int compared = 0;
    for (const Candidate& cand : pc->candidates) {
      if (cand.layout.pipeline() == 1 || compared >= 12) continue;
      int stage = -1;
      const DType dtype = cfg->train.precision == "float32" ? DType::kF32 : DType::kBF16;
      StatusOr<Memory> m = rank_memory(*cfg, 512, cand.layout, cand.micro_batch, false, dtype,
                                       pc->constants, cand.microbatches, -1, &stage);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      EXPECT_EQ(m->total(), cand.memory.total()) << cfg->experiment << " " << cand.layout.name();
      EXPECT_EQ(stage, cand.stage) << cfg->experiment << " " << cand.layout.name();
      ++compared;
    }
    EXPECT_GT(compared, 0) << cfg->experiment;
  }
  bool seq_noted = false;
  for (const std::string& n : tp.notes) {
    EXPECT_EQ(n.find("pipeline and seq axes are not planned"), std::string::npos) << n;
    seq_noted = seq_noted || n == "seq axes are not planned for t5 (ax-train builds them for gpt "
                                  "and llama only: issue 26)";
  }
  EXPECT_TRUE(seq_noted) << format_table(tp, 0);
  const Plan t5_node = plan_of(t5, 1, 8);
  check(t5_node, t5);
  bool t5_refusal = false;
  for (const std::string& n : t5_node.notes) {
    t5_refusal = t5_refusal || n.find("pipeline=8 stages need at least") != std::string::npos;
  }
  EXPECT_TRUE(t5_refusal) << format_table(t5_node, 0);
}

// A pipeline's stages compute the whole model between them: their FLOPs per row (as the cost
// model times each) sum to the whole model's flops_per_row, for T5's cost-balanced split of its
// encoder and decoder layers (interleaved chunks too) as for a decoder's even one.
TEST(Plan, StageFlopsSumToTheWholeModel) {
  struct Case {
    const char* experiment;
    int stages;
    const char* schedule;
  };
  for (const Case& fc :
       {Case{"tiny-t5", 2, "1f1b"}, Case{"tiny-t5", 4, "1f1b"}, Case{"tiny-t5", 2, "interleaved"},
        Case{"t5-small", 3, "1f1b"}, Case{"t5-xxl", 8, "1f1b"}, Case{"t5-xxl", 48, "1f1b"},
        Case{"t5-xxl", 4, "interleaved"}, Case{"tiny-llama", 2, "1f1b"},
        Case{"GPT175B", 16, "interleaved"}}) {
    Config c = experiment(fc.experiment);
    c.train.pipeline_schedule = fc.schedule;
    if (std::string(fc.schedule) == "interleaved") c.train.pipeline_virtual_stages = 2;
    const int64_t vocab = c.model.vocab_size > 0 ? c.model.vocab_size : 512;
    StatusOr<std::vector<double>> stages = stage_flops_per_row(c, vocab, fc.stages);
    ASSERT_TRUE(stages.ok()) << fc.experiment << ": " << stages.status().to_string();
    ASSERT_EQ(stages->size(), static_cast<size_t>(fc.stages));
    StatusOr<std::unique_ptr<Model>> whole =
        Model::plan(c.model, vocab, 1, c.train.seq_len, {},
                    {.encoder_seq_len = c.train.encoder_seq_len, .planned_dtype = DType::kBF16});
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    double sum = 0, heaviest = 0;
    for (double f : *stages) {
      EXPECT_GT(f, 0) << fc.experiment;
      sum += f;
      heaviest = std::max(heaviest, f);
    }
    const double expected = (*whole)->flops_per_row();
    EXPECT_NEAR(sum, expected, 1e-9 * expected) << fc.experiment << " on " << fc.stages;
    std::printf(
        "%s on %d stages (%s): stages sum to %.6g FLOPs per row of %.6g (%+.2e), "
        "heaviest %.3f x the mean\n",
        fc.experiment, fc.stages, fc.schedule, sum, expected, sum / expected - 1,
        heaviest * fc.stages / sum);
  }
}

// Five-number shapes: pipeline and seq from ICI_MESH_SHAPE / DCN_MESH_SHAPE, printed back in the
// same form for the job scripts and --ax-mesh.
TEST(Plan, FiveNumberMeshShapes) {
  const Cluster cl{4, 8, *find_gpu("H100-80GB")};
  StatusOr<Layout> l = parse_layout("[1,1,-1,2,1]", "4,1,1,1,1", cl);
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  EXPECT_EQ(l->seq(), 2);
  EXPECT_EQ(l->pipeline(), 4);
  EXPECT_EQ(l->fsdp(), 4);
  EXPECT_EQ(l->ici_string(), "1,1,4,2,1");
  EXPECT_EQ(l->dcn_string(), "4,1,1,1,1");
  EXPECT_EQ(l->name(), "data 1 fsdp 4 tensor 1 pipeline 4 seq 2");
  EXPECT_FALSE(parse_layout("1,1,8,2,1", "4,1,1,1,1", cl).ok());
  EXPECT_FALSE(parse_layout("1,8,1,1", "4,1,1", cl).ok());
  EXPECT_FALSE(parse_layout("1,8,1,1,1", "1,1,1,1,4", cl).ok());
  StatusOr<Layout> three = parse_layout("1,8,1", "1,1,1,1,4", cl);
  EXPECT_FALSE(three.ok());
  PlanRequest r;
  r.config = experiment("tiny-llama");
  r.config.model.num_layers = 4;
  r.vocab = 512;
  r.cluster = {2, 4, cl.gpu};
  r.only = *parse_layout("1,1,2,2,1", "2,1,1,1,1", r.cluster);
  StatusOr<Plan> p = make_plan(r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->layouts, 1);
  ASSERT_FALSE(p->candidates.empty()) << "pipeline with seq: ax-train builds it";
  EXPECT_EQ(p->candidates.front().layout.pipeline(), 2);
  EXPECT_EQ(p->candidates.front().layout.seq(), 2);
  r.only = *parse_layout("2,1,2,1,1", "2,1,1,1,1", r.cluster);
  p = make_plan(r);
  ASSERT_TRUE(p.ok());
  ASSERT_FALSE(p->candidates.empty());
  EXPECT_EQ(p->candidates.front().layout.pipeline(), 4);
  const std::string best = format_choice(*p, p->candidates.front());
  EXPECT_NE(best.find("ICI_MESH_SHAPE=[2,1,2,1,1] DCN_MESH_SHAPE=[2,1,1,1,1]"), std::string::npos)
      << best;
  EXPECT_NE(best.find("--ax-mesh='ici=2,1,2,1,1;dcn=2,1,1,1,1'"), std::string::npos) << best;
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
