// The split of an `auto` mesh from the plan (ax/trainer/train/auto_mesh.h, docs/plan.md):
// what `srun --ax-mesh=auto` and `ax-launch --mesh auto` train on, against `ax-train plan`'s
// own ranking and the launcher's rank numbering.
#include "ax/trainer/train/auto_mesh.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ax/topology/mesh.h"
#include "ax/trainer/plan/plan.h"

namespace ax::train {
namespace {

Config experiment(const std::string& name) {
  StatusOr<Config> c = make_experiment(name);
  EXPECT_TRUE(c.ok()) << c.status().message();
  return *c;
}

AutoMeshInput input(const std::string& name, const std::string& spec, const std::string& ici,
                    const std::string& dcn, int world, const std::string& gpu) {
  AutoMeshInput in;
  in.config = experiment(name);
  in.vocab = in.config.model.vocab_size > 0 ? in.config.model.vocab_size : 50257;
  in.spec = spec;
  in.ici = ici;
  in.dcn = dcn;
  in.world = world;
  in.gpu = gpu;
  return in;
}

topo::MeshShape shape(const std::string& text) {
  StatusOr<topo::MeshSpec> s = topo::parse_mesh_spec(str_cat("ici=", text, ";dcn=1,1,1;force"));
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().message();
  return s.ok() ? s->ici : topo::MeshShape{};
}

TEST(AutoMesh, OnlyAnAutoSpecIsPlanned) {
  for (const char* spec : {"", "ici=1,4,1;dcn=2,1,1"}) {
    StatusOr<AutoMeshChoice> c =
        plan_auto_mesh(input("tiny-gpt", spec, "1,4,1", "2,1,1", 8, "H100-80GB"));
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_FALSE(c->planned) << spec;
    EXPECT_EQ(c->ici, "1,4,1");
    EXPECT_EQ(c->dcn, "2,1,1");
    EXPECT_EQ(c->line, "") << spec;
  }
}

TEST(AutoMesh, NotPlannedSaysWhyAndKeepsTheTopologysSplit) {
  struct Case {
    std::string gpu;
    bool enabled;
    std::string why;
  };
  for (const Case& k : std::vector<Case>{
           {"", true, "not planned (CPU ranks; AX_PLAN_GPU="},
           {"H100-80GB", false, "not planned (AX_PLAN=0)"},
           {"NVIDIA V100", true, "not planned ("},
       }) {
    AutoMeshInput in = input("tiny-gpt", "auto", "1,4,1", "2,1,1", 8, k.gpu);
    in.enabled = k.enabled;
    StatusOr<AutoMeshChoice> c = plan_auto_mesh(in);
    ASSERT_TRUE(c.ok()) << c.status().message();
    EXPECT_FALSE(c->planned);
    EXPECT_EQ(c->ici, "1,4,1");
    EXPECT_EQ(c->dcn, "2,1,1");
    EXPECT_NE(c->line.find(k.why), std::string::npos) << c->line;
    EXPECT_NE(c->line.find("the topology's split ici=1,4,1;dcn=2,1,1"), std::string::npos)
        << c->line;
  }
}

// The choice is `ax-train plan`'s fastest layout that fits at the config's micro-batches and
// recomputation (the plan ranks only layouts that ax's rank numbering places by node); a spec's
// tp=, sp=, pp= are kept.
TEST(AutoMesh, PicksThePlansFastestFittingLayoutThatKeepsTheSpec) {
  struct Case {
    std::string experiment, spec, ici, dcn;
    int world;
    std::string gpu;
  };
  const std::vector<Case> cases = {
      {"tiny-gpt", "auto", "1,4,1", "1,1,1", 4, "H100-80GB"},
      {"tiny-gpt", "auto:tp=2", "1,2,2", "2,1,1", 8, "H100-80GB"},
      {"tiny-llama", "auto:pp=2", "1,4,1", "2,1,1", 8, "H200"},
      {"fuji-7B-v2", "auto", "1,8,1", "2,1,1", 16, "H100-80GB"},
      // Its fastest layout before the plan kept to placed ones was data 2 x fsdp 4 inside the
      // nodes with fsdp 4 across them, which ax's numbering would not have placed so.
      {"fuji-7B-v2", "auto", "1,8,1", "4,1,1", 32, "H100-80GB"},
      {"fuji-3B-v2", "auto", "1,8,1", "4,1,1", 32, "H200"},
      {"GPT5B", "auto:tp=2", "1,4,2", "4,1,1", 32, "A100-80GB"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.experiment + " " + k.spec);
    AutoMeshInput in = input(k.experiment, k.spec, k.ici, k.dcn, k.world, k.gpu);
    StatusOr<AutoMeshChoice> c = plan_auto_mesh(in);
    ASSERT_TRUE(c.ok()) << c.status().message();
    ASSERT_TRUE(c->planned) << c->line;
    EXPECT_EQ(c->line.rfind(str_cat("mesh ", k.spec, ": planned "), 0), 0u) << c->line;
    const topo::MeshShape ici = shape(c->ici), dcn = shape(c->dcn);
    EXPECT_EQ(ici.size(), shape(k.ici).size()) << c->ici;  // the same domains
    EXPECT_EQ(dcn.size(), shape(k.dcn).size()) << c->dcn;
    EXPECT_EQ(dcn.tensor, 1);
    if (k.spec == "auto:tp=2") {
      EXPECT_EQ(ici.tensor, 2);
    }
    if (k.spec == "auto:pp=2") {
      EXPECT_EQ(ici.pipeline * dcn.pipeline, 2);
    }

    // The same question put to the plan: its first fitting layout that keeps the spec is the
    // one chosen.
    plan::PlanRequest r;
    r.config = in.config;
    r.vocab = in.vocab;
    StatusOr<plan::GpuSpec> gpu = plan::find_gpu(k.gpu);
    ASSERT_TRUE(gpu.ok());
    r.cluster = plan::Cluster{shape(k.dcn).size(), shape(k.ici).size(), *gpu};
    r.microbatches = in.config.train.num_microbatches;
    r.recompute = in.config.train.recompute == "layer";
    StatusOr<plan::Plan> p = plan::make_plan(r);
    ASSERT_TRUE(p.ok()) << p.status().message();
    for (const plan::Candidate& cand : p->candidates) {
      ASSERT_TRUE(cand.fits) << "no fitting layout keeps the spec";
      EXPECT_TRUE(cand.layout.placed_by_node()) << cand.layout.name();
      if (k.spec == "auto:tp=2" && cand.layout.tensor() != 2) continue;
      if (k.spec == "auto:pp=2" && cand.layout.pipeline() != 2) continue;
      EXPECT_EQ(c->ici, cand.layout.ici_string());
      EXPECT_EQ(c->dcn, cand.layout.dcn_string());
      break;
    }
  }
}

// ax numbers ranks (((p·D + d)·F + f)·S + s)·T + t with consecutive ranks on one node: a layout
// splitting an axis across nodes after one split inside a node would not run as planned.
TEST(AutoMesh, PlannedLayoutsArePlacedByNode) {
  plan::Layout l;  // ici data 2 fsdp 4, dcn fsdp 4: data groups would cross the nodes
  l.ici[0] = 2;
  l.ici[1] = 4;
  l.dcn[1] = 4;
  EXPECT_FALSE(l.placed_by_node());
  l.ici[0] = 1;  // fsdp 4 inside and across: one fsdp axis over 16 consecutive ranks
  EXPECT_TRUE(l.placed_by_node());
  l.ici[2] = 2;  // tensor inside
  l.dcn_pipeline = 2;
  EXPECT_TRUE(l.placed_by_node());
  l.dcn_seq = 2;  // seq across nodes after fsdp inside
  EXPECT_FALSE(l.placed_by_node());
  plan::Layout m;  // data across nodes, fsdp inside: Pax's GPT175B layout
  m.dcn[0] = 16;
  m.ici[1] = 8;
  EXPECT_TRUE(m.placed_by_node());
}

TEST(AutoMesh, NothingFitsIsOneLineWithWhatWould) {
  // GPT175B on one node of 8 H100s: no micro-batch split or recomputation fits.
  StatusOr<AutoMeshChoice> c =
      plan_auto_mesh(input("GPT175B", "auto", "1,8,1", "1,1,1", 8, "H100-80GB"));
  ASSERT_FALSE(c.ok());
  const std::string m(c.status().message());
  EXPECT_EQ(m.rfind("mesh auto: no layout of 1 x 8 H100-80GB fits at train.num_microbatches=", 0),
            0u)
      << m;
  EXPECT_NE(m.find("the smallest cluster that fits is "), std::string::npos) << m;
  EXPECT_NE(m.find("AX_PLAN=0 trains on the topology's split ici=1,8,1;dcn=1,1,1"),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;

  // fuji-70B-v2 on 8 x 8 H100s fits only with more micro-batches than the config's one.
  c = plan_auto_mesh(input("fuji-70B-v2", "auto", "1,8,1", "8,1,1", 64, "H100-80GB"));
  ASSERT_FALSE(c.ok());
  const std::string more(c.status().message());
  EXPECT_EQ(more.rfind("mesh auto: no layout of 8 x 8 H100-80GB fits at train.num_microbatches=1 "
                       "and train.recompute=none: it fits with --set train.num_microbatches=",
                       0),
            0u)
      << more;
}

}  // namespace
}  // namespace ax::train
