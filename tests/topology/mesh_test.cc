// Mesh derivation: spec parsing (strict, hostile input), golden meshes for the node kinds ax meets
// (NVSwitch, two NVLink islands, PCIe only, NVL72 cliques, CPU only), errors that name the numbers,
// placement invariants, and a simulated 1024-node job.
#include "ax/topology/mesh.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ax::topo {
namespace {

// A node whose GPUs are joined by NVLink within each group (every pair of a group, as through an
// NVSwitch) and by PCIe otherwise.
Topology node_with_islands(const std::vector<std::vector<int>>& groups, int gpus) {
  Topology t;
  t.hostname = "node";
  t.source = "mesh_test";
  t.packages = 2;
  for (int g = 0; g < gpus; ++g) {
    Gpu gpu;
    gpu.index = g;
    gpu.numa_node = g * 2 / gpus;
    t.gpus.push_back(gpu);
  }
  t.gpu_paths.assign(gpus, std::vector<PathKind>(gpus, PathKind::kCrossSocket));
  t.nvlinks.assign(gpus, std::vector<int>(gpus, 0));
  for (const auto& group : groups) {
    for (int a : group) {
      for (int b : group) {
        if (a == b) continue;
        t.gpu_paths[a][b] = PathKind::kNvLink;
        t.nvlinks[a][b] = 18;
      }
    }
  }
  return t;
}

Topology nvswitch_node() { return node_with_islands({{0, 1, 2, 3, 4, 5, 6, 7}}, 8); }
Topology two_island_node() { return node_with_islands({{0, 1, 2, 3}, {4, 5, 6, 7}}, 8); }
Topology pcie_node() { return node_with_islands({}, 4); }
Topology cpu_node() { return Topology{}; }
Topology nvl72_tray(int clique) {
  Topology t = node_with_islands({{0, 1, 2, 3}}, 4);
  for (Gpu& gpu : t.gpus) {
    gpu.fabric_cluster_uuid = "cluster-a";
    gpu.fabric_clique_id = clique;
  }
  return t;
}

MeshSpec spec(const std::string& text) {
  StatusOr<MeshSpec> s = parse_mesh_spec(text);
  EXPECT_TRUE(s.ok()) << text << ": " << s.status().to_string();
  return s.ok() ? *s : MeshSpec{};
}

Mesh derive(const std::vector<Topology>& nodes, int num_nodes, int tasks, const std::string& text) {
  StatusOr<Mesh> mesh = derive_mesh(nodes, num_nodes, tasks, spec(text));
  EXPECT_TRUE(mesh.ok()) << text << ": " << mesh.status().to_string();
  return mesh.ok() ? *mesh : Mesh{};
}

std::string derive_error(const std::vector<Topology>& nodes, int num_nodes, int tasks,
                         const std::string& text) {
  StatusOr<Mesh> mesh = derive_mesh(nodes, num_nodes, tasks, spec(text));
  EXPECT_FALSE(mesh.ok()) << text;
  if (mesh.ok()) return "";
  EXPECT_EQ(mesh.status().code(), StatusCode::kInvalidArgument);
  // Without the " (at file:line)" that AX_RETURN_IF_ERROR appends.
  const std::string message = mesh.status().message();
  return message.substr(0, message.find(" (at "));
}

// Every rank once with its own mesh coordinates, consecutive ranks share a domain, every (node,
// GPU) used once, local ranks 0..tasks-1 on each node, ranks of a domain on the domain's GPUs.
void check_placement(const Mesh& mesh) {
  const int ranks = mesh.num_nodes * mesh.tasks_per_node;
  ASSERT_EQ(static_cast<int>(mesh.placement.size()), ranks);
  ASSERT_EQ(mesh.global().size(), ranks);
  ASSERT_EQ(mesh.ici.size(), mesh.domain_size);
  std::set<std::pair<int, int>> gpus_used;
  std::set<std::pair<int, int>> local_used;
  std::set<std::vector<int>> coords_used;
  for (int r = 0; r < ranks; ++r) {
    const Placement& p = mesh.placement[r];
    const MeshShape& c = p.coord;
    EXPECT_TRUE(coords_used.insert({c.pipeline, c.data, c.fsdp, c.seq, c.tensor}).second)
        << "rank " << r << " shares its coordinates " << c.full_string();
    EXPECT_EQ(p.rank, r);
    EXPECT_EQ(p.domain, r / mesh.domain_size);
    EXPECT_GE(p.node, 0);
    EXPECT_LT(p.node, mesh.num_nodes);
    EXPECT_GE(p.local_rank, 0);
    EXPECT_LT(p.local_rank, mesh.tasks_per_node);
    EXPECT_TRUE(local_used.insert({p.node, p.local_rank}).second) << "rank " << r;
    if (p.gpu >= 0) {
      EXPECT_TRUE(gpus_used.insert({p.node, p.gpu}).second) << "rank " << r;
    }
  }
}

// ---- parse_mesh_spec ----

TEST(MeshSpecTest, ParsesAuto) {
  MeshSpec s = spec("auto");
  EXPECT_EQ(s.kind, MeshSpec::Kind::kAuto);
  EXPECT_EQ(s.auto_tp, 1);
  EXPECT_FALSE(s.force);
  s = spec("auto:tp=4");
  EXPECT_EQ(s.kind, MeshSpec::Kind::kAuto);
  EXPECT_EQ(s.auto_tp, 4);
  EXPECT_EQ(spec("auto:tp=65536").auto_tp, 65536);
}

TEST(MeshSpecTest, ParsesExplicit) {
  MeshSpec s = spec("ici=1,8,1;dcn=2,1,1");
  EXPECT_EQ(s.kind, MeshSpec::Kind::kExplicit);
  EXPECT_EQ(s.ici, (MeshShape{1, 8, 1}));
  EXPECT_EQ(s.dcn, (MeshShape{2, 1, 1}));
  EXPECT_FALSE(s.force);
  s = spec("ici=1,-1,1;dcn=-1,1,1");
  EXPECT_EQ(s.ici, (MeshShape{1, -1, 1}));
  EXPECT_EQ(s.dcn, (MeshShape{-1, 1, 1}));
  s = spec("dcn=1,1,2;ici=1,4,2;force");
  EXPECT_TRUE(s.force);
  EXPECT_EQ(s.ici, (MeshShape{1, 4, 2}));
  EXPECT_EQ(s.dcn, (MeshShape{1, 1, 2}));
  EXPECT_EQ(MeshShape({2, 4, 1}).to_string(), "2,4,1");
}

// Three numbers are data,fsdp,tensor (pipeline 1, seq 1); five are pipeline,data,fsdp,seq,tensor.
TEST(MeshSpecTest, ParsesFiveAxes) {
  MeshSpec s = spec("ici=1,1,-1,2,2;dcn=2,-1,1,1,1");
  EXPECT_EQ(s.kind, MeshSpec::Kind::kExplicit);
  EXPECT_EQ(s.ici, (MeshShape{1, 1, -1, 2, 2}));
  EXPECT_EQ(s.ici.seq, 2);
  EXPECT_EQ(s.dcn.pipeline, 2);
  EXPECT_EQ(s.dcn.data, -1);
  // Mixed forms are fine: each vector is read on its own.
  s = spec("ici=1,8,1;dcn=2,1,1,1,1");
  EXPECT_EQ(s.ici, (MeshShape{1, 1, 8, 1, 1}));
  EXPECT_EQ(s.dcn, (MeshShape{2, 1, 1, 1, 1}));
  EXPECT_EQ(spec("ici=1,8,1;dcn=2,1,1").ici, spec("ici=1,1,8,1,1;dcn=1,2,1,1,1").ici);

  EXPECT_EQ(MeshShape(1, 2, 4, 1, 1).to_string(), "2,4,1");  // the short form when it can
  EXPECT_EQ(MeshShape(2, 1, 4, 1, 1).to_string(), "2,1,4,1,1");
  EXPECT_EQ(MeshShape(1, 1, 4, 2, 1).to_string(), "1,1,4,2,1");
  EXPECT_EQ(MeshShape(2, 4, 1).full_string(), "1,2,4,1,1");
  EXPECT_EQ(MeshShape(2, 1, 4, 1, 1).named(), "pipeline=2 data=1 fsdp=4 seq=1 tensor=1");
  // Both printed forms parse back to the same shape.
  for (const MeshShape& m : {MeshShape(2, 4, 1), MeshShape(2, 1, 2, 2, 1)}) {
    EXPECT_EQ(spec("ici=" + m.to_string() + ";dcn=1,1,1").ici, m);
    EXPECT_EQ(spec("ici=" + m.full_string() + ";dcn=1,1,1").ici, m);
  }

  s = spec("auto:pp=2,tp=4");
  EXPECT_EQ(s.kind, MeshSpec::Kind::kAuto);
  EXPECT_EQ(s.auto_pp, 2);
  EXPECT_EQ(s.auto_tp, 4);
  EXPECT_EQ(s.auto_sp, 1);
  s = spec("auto:sp=2");
  EXPECT_EQ(s.auto_sp, 2);
  EXPECT_EQ(s.auto_tp, 1);
  EXPECT_EQ(s.auto_pp, 1);
}

TEST(MeshSpecTest, RejectsBadSpecsNamingTheToken) {
  struct Case {
    std::string spec;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {"", "empty"},
      {"Auto", "\"Auto\""},
      {"auto ", "\"auto \""},
      {" auto", "\" auto\""},
      {"auto:tp=0", "\"auto:tp=0\""},
      {"auto:tp=-1", "\"auto:tp=-1\""},
      {"auto:tp=65537", "\"auto:tp=65537\""},
      {"auto:tp=99999999999999999999", "\"auto:tp=99999999999999999999\""},
      {"auto:tp=", "\"auto:tp=\""},
      {"auto:qq=2", "\"auto:qq=2\""},
      {"auto:tp=2,tp=4", "gives tp twice"},
      {"auto:tp=2,", "\"auto:tp=2,\""},
      {"auto:pp2", "\"auto:pp2\""},
      {"auto:sp=0", "\"auto:sp=0\""},
      {"auto:tp=4x", "\"auto:tp=4x\""},
      {"auto;auto", "given twice"},
      {"auto;", "stray ';'"},
      {";auto", "stray ';'"},
      {"auto;;force", "stray ';'"},
      {"force;force", "given twice"},
      {"auto;ici=1,8,1", "cannot be combined"},
      {"ici=1,8,1", "missing dcn"},
      {"dcn=1,8,1", "missing ici"},
      {"force", "missing ici"},
      {"ici=1,8;dcn=1,1,1", "\"ici=1,8\" needs three numbers"},
      {"ici=1,8,1,1;dcn=1,1,1", "needs three numbers"},
      {"ici=1,1,8,1;dcn=1,1,1,1,1", "or five pipeline,data,fsdp,seq,tensor (got 4)"},
      {"ici=1,1,8,1,1,1;dcn=1,1,1", "(got 6)"},
      {"ici=1,-1,8,-1,1;dcn=1,1,1", "has more than one -1"},
      {"ici=1,1,8,0,1;dcn=1,1,1", "bad number \"0\""},
      {"ici=1,-1,-1;dcn=1,1,1", "\"ici=1,-1,-1\" has more than one -1"},
      {"ici=1,8,1;dcn=-1,-1,1", "\"dcn=-1,-1,1\" has more than one -1"},
      {"ici=1,0,1;dcn=1,1,1", "bad number \"0\""},
      {"ici=1,-2,1;dcn=1,1,1", "bad number \"-2\""},
      {"ici=1,+8,1;dcn=1,1,1", "bad number \"+8\""},
      {"ici=1,08,1;dcn=1,1,1", "bad number \"08\""},
      {"ici=1, 8,1;dcn=1,1,1", "bad number \" 8\""},
      {"ici=1,65537,1;dcn=1,1,1", "bad number \"65537\""},
      {"ici=1,4294967304,1;dcn=1,1,1", "bad number \"4294967304\""},
      {"ici=1,8,1;dcn=1,1,", "bad number \"\""},
      {"ici=1,8,1;dcn=1,1,1;pp=2", "unknown token \"pp=2\""},
      {"ici=1,8,1\n;dcn=1,1,1", "\\x0a"},
      {std::string("auto\0x", 6), "\\x00"},
      {"ICI=1,8,1;dcn=1,1,1", "unknown token \"ICI=1,8,1\""},
  };
  for (const Case& c : cases) {
    StatusOr<MeshSpec> s = parse_mesh_spec(c.spec);
    ASSERT_FALSE(s.ok()) << c.spec;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.message_part), std::string::npos)
        << c.spec << " -> " << s.status().message();
  }
}

TEST(MeshSpecTest, RejectsLongInputWithoutEchoingIt) {
  std::string long_spec = "ici=1,8,1;dcn=1,1,1;" + std::string(200, 'A');
  StatusOr<MeshSpec> s = parse_mesh_spec(long_spec);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("at most 128"), std::string::npos);
  EXPECT_EQ(s.status().message().find("AAAA"), std::string::npos);
  EXPECT_FALSE(parse_mesh_spec(std::string(1 << 20, ';')).ok());
  EXPECT_TRUE(parse_mesh_spec("ici=1,8,1;dcn=1,1,1;force").ok());
}

// ---- golden meshes ----

TEST(DeriveMeshTest, NvSwitchNodeAuto) {
  for (int nodes : {1, 2, 8}) {
    Mesh mesh = derive({nvswitch_node()}, nodes, 8, "auto");
    EXPECT_EQ(mesh.ici, (MeshShape{1, 8, 1})) << nodes;
    EXPECT_EQ(mesh.dcn, (MeshShape{nodes, 1, 1})) << nodes;
    EXPECT_EQ(mesh.global(), (MeshShape{nodes, 8, 1}));
    EXPECT_EQ(mesh.domain_size, 8);
    check_placement(mesh);
    for (const Placement& p : mesh.placement) {
      EXPECT_EQ(p.node, p.rank / 8);
      EXPECT_EQ(p.gpu, p.rank % 8);
      EXPECT_EQ(p.local_rank, p.rank % 8);
      EXPECT_EQ(p.domain, p.rank / 8);
    }
  }
  EXPECT_EQ(derive({nvswitch_node()}, 2, 8, "auto").explanation,
            "auto: FSDP over the 8 GPUs of each ICI domain (a node's NVLink-connected GPUs), "
            "data parallel across 2 domains");
}

TEST(DeriveMeshTest, NvSwitchNodeAutoTensorParallel) {
  struct Case {
    int tp;
    MeshShape ici;
  };
  for (const Case& c : {Case{2, {1, 4, 2}}, Case{4, {1, 2, 4}}, Case{8, {1, 1, 8}}}) {
    for (int nodes : {1, 2, 8}) {
      Mesh mesh = derive({nvswitch_node()}, nodes, 8, "auto:tp=" + std::to_string(c.tp));
      EXPECT_EQ(mesh.ici, c.ici) << c.tp;
      EXPECT_EQ(mesh.dcn, (MeshShape{nodes, 1, 1}));
      check_placement(mesh);
    }
  }
  EXPECT_EQ(derive({nvswitch_node()}, 1, 8, "auto:tp=2").explanation,
            "auto:tp=2: tensor 2 x FSDP 4 inside each ICI domain of 8 GPUs (a node's "
            "NVLink-connected GPUs), data parallel across 1 domain");
}

// True when every group of `axis` (the ranks that agree on all other coordinates) is on one node.
bool groups_within_a_node(const Mesh& mesh, int MeshShape::*axis) {
  std::map<std::vector<int>, int> node_of;  // the other coordinates -> node
  for (const Placement& p : mesh.placement) {
    MeshShape key = p.coord;
    key.*axis = 0;
    auto [it, inserted] = node_of.emplace(
        std::vector<int>{key.pipeline, key.data, key.fsdp, key.seq, key.tensor}, p.node);
    if (!inserted && it->second != p.node) return false;
  }
  return true;
}

// Auto meshes: rank = (((pipeline * D + data) * F + fsdp) * S + seq) * T + tensor over the global
// mesh, the trainer's numbering.
void check_coords(const Mesh& mesh) {
  const MeshShape g = mesh.global();
  for (const Placement& p : mesh.placement) {
    const MeshShape& c = p.coord;
    EXPECT_EQ(
        (((c.pipeline * g.data + c.data) * g.fsdp + c.fsdp) * g.seq + c.seq) * g.tensor + c.tensor,
        p.rank);
    EXPECT_LT(c.pipeline, g.pipeline);
    EXPECT_LT(c.data, g.data);
    EXPECT_LT(c.fsdp, g.fsdp);
    EXPECT_LT(c.seq, g.seq);
    EXPECT_LT(c.tensor, g.tensor);
  }
}

TEST(DeriveMeshTest, AutoPipelinePutsStagesAcrossNodes) {
  // 2 and 4 nodes of 8 GPUs, 2 stages with tensor 4: a stage per node (or per pair of nodes),
  // tensor groups inside a node.
  Mesh mesh = derive({nvswitch_node()}, 2, 8, "auto:pp=2,tp=4");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 2, 1, 4}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 1, 1, 1, 1}));
  EXPECT_EQ(mesh.global(), (MeshShape{2, 1, 2, 1, 4}));
  check_placement(mesh);
  check_coords(mesh);
  for (const Placement& p : mesh.placement) EXPECT_EQ(p.coord.pipeline, p.node) << p.rank;
  EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::tensor));
  EXPECT_FALSE(groups_within_a_node(mesh, &MeshShape::pipeline));
  EXPECT_EQ(mesh.explanation,
            "auto:tp=4,pp=2: pipeline 2 across the domains, tensor 4 x FSDP 2 inside each ICI "
            "domain of 8 GPUs (a node's NVLink-connected GPUs), data parallel across 1 group of "
            "domains");

  mesh = derive({nvswitch_node()}, 4, 8, "auto:pp=2,tp=4");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 2, 1, 4}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 2, 1, 1, 1}));
  check_placement(mesh);
  check_coords(mesh);
  for (const Placement& p : mesh.placement) EXPECT_EQ(p.coord.pipeline, p.node / 2) << p.rank;
  EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::tensor));
  EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::fsdp));

  mesh = derive({nvswitch_node()}, 4, 8, "auto:pp=4");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 8, 1, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{4, 1, 1, 1, 1}));
  for (const Placement& p : mesh.placement) EXPECT_EQ(p.coord.pipeline, p.node) << p.rank;

  // More stages than nodes: every node holds the same number of consecutive stages.
  mesh = derive({nvswitch_node()}, 2, 8, "auto:pp=4,tp=2");
  EXPECT_EQ(mesh.ici, (MeshShape{2, 1, 2, 1, 2}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 1, 1, 1, 1}));
  check_coords(mesh);
  for (const Placement& p : mesh.placement) EXPECT_EQ(p.coord.pipeline / 2, p.node) << p.rank;
  EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::tensor));
  // One node: the stages are inside it.
  mesh = derive({nvswitch_node()}, 1, 8, "auto:pp=2");
  EXPECT_EQ(mesh.ici, (MeshShape{2, 1, 4, 1, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{1, 1, 1, 1, 1}));
}

TEST(DeriveMeshTest, AutoSeqStaysInsideANode) {
  for (int nodes : {1, 2, 4}) {
    Mesh mesh = derive({nvswitch_node()}, nodes, 8, "auto:sp=4");
    EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 2, 4, 1})) << nodes;
    EXPECT_EQ(mesh.dcn, (MeshShape{1, nodes, 1, 1, 1})) << nodes;
    check_placement(mesh);
    check_coords(mesh);
    EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::seq)) << nodes;
  }
  Mesh mesh = derive({nvswitch_node()}, 4, 8, "auto:pp=2,sp=2,tp=2");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 2, 2, 2}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 2, 1, 1, 1}));
  EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::seq));
  EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::tensor));
  EXPECT_EQ(mesh.explanation,
            "auto:tp=2,sp=2,pp=2: pipeline 2 across the domains, tensor 2 x seq 2 x FSDP 2 inside "
            "each ICI domain of 8 GPUs (a node's NVLink-connected GPUs), data parallel across 2 "
            "groups of domains");
  // Asked otherwise: an explicit seq axis across DCN, with force.
  mesh = derive({nvswitch_node()}, 2, 8, "ici=1,1,8,1,1;dcn=1,1,1,2,1;force");
  EXPECT_EQ(mesh.global(), (MeshShape{1, 1, 8, 2, 1}));
  for (const Placement& p : mesh.placement) EXPECT_EQ(p.coord.seq, p.node) << p.rank;
  EXPECT_FALSE(groups_within_a_node(mesh, &MeshShape::seq));
  EXPECT_TRUE(groups_within_a_node(mesh, &MeshShape::fsdp));
}

TEST(DeriveMeshTest, FiveAxisSpecsAndTheirErrors) {
  Mesh mesh = derive({nvswitch_node()}, 4, 8, "ici=1,1,-1,2,2;dcn=2,-1,1,1,1");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 2, 2, 2}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 2, 1, 1, 1}));
  check_placement(mesh);
  check_coords(mesh);
  EXPECT_EQ(mesh.explanation,
            "explicit: ici=1,1,2,2,2 covers each ICI domain of 8 GPUs (a node's NVLink-connected "
            "GPUs), dcn=2,2,1,1,1 the 4 domains");
  // Three-number specs mean what they meant.
  mesh = derive({nvswitch_node()}, 2, 8, "ici=1,-1,1;dcn=-1,1,1");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 8, 1, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{1, 2, 1, 1, 1}));
  EXPECT_EQ(mesh.ici.to_string(), "1,8,1");

  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "ici=2,1,2,2,2;dcn=1,2,1,1,1"),
            "ici=2,1,2,2,2 covers 16 GPUs but there are 8 in one NVLink domain (this node has 8): "
            "make the product 8 or let a -1 fill it in");
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "ici=1,1,8,1,1;dcn=4,-1,1,1,1"),
            "dcn=4,-1,1,1,1 cannot be filled: 4 ICI domains do not divide the 2 in the job (2 "
            "nodes of 8 ranks)");
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "ici=1,1,8,1,1;dcn=1,1,1,2,1"),
            "sequence parallelism across DCN (dcn seq=2) crosses the network; pass force to allow "
            "it");
}

TEST(DeriveMeshTest, AutoPipelineAndSeqThatDoNotFit) {
  EXPECT_EQ(derive_error({nvswitch_node()}, 6, 8, "auto:pp=4"),
            "pipeline parallelism of 4 puts one stage per ICI domain, but the job has 6 domains: "
            "use a pipeline size that divides 6 or is a multiple of it");
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "auto:pp=16,tp=2"),
            "pipeline parallelism of 16 over 2 domains puts 8 stages in each NVLink domain, and 8 "
            "x seq 1 x tensor 2 does not divide its 8 GPUs (this node has 8)");
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "auto:sp=4,tp=4"),
            "sequence parallelism of 4 x tensor parallelism of 4 needs a multiple of 16 GPUs in "
            "one NVLink domain (a seq group stays inside it), this node has 8: choose sp and tp "
            "whose product divides 8");
  // tp is checked first, with its own message.
  EXPECT_NE(derive_error({nvswitch_node()}, 2, 8, "auto:tp=3,sp=2").find("use auto:tp=2"),
            std::string::npos);
}

TEST(DeriveMeshTest, ExplicitWithFills) {
  std::vector<Topology> node = {nvswitch_node()};
  Mesh mesh = derive(node, 4, 8, "ici=1,-1,2;dcn=-1,1,1");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 4, 2}));
  EXPECT_EQ(mesh.dcn, (MeshShape{4, 1, 1}));
  check_placement(mesh);
  mesh = derive(node, 4, 8, "ici=2,4,1;dcn=2,-1,1");
  EXPECT_EQ(mesh.ici, (MeshShape{2, 4, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 2, 1}));
  EXPECT_EQ(mesh.global(), (MeshShape{4, 8, 1}));
  mesh = derive(node, 2, 8, "ici=-1,1,1;dcn=1,2,1");
  EXPECT_EQ(mesh.ici, (MeshShape{8, 1, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{1, 2, 1}));
  mesh = derive(node, 2, 8, "ici=1,4,2;dcn=1,1,2;force");
  EXPECT_EQ(mesh.dcn, (MeshShape{1, 1, 2}));
  EXPECT_EQ(mesh.global(), (MeshShape{1, 4, 4}));
  EXPECT_EQ(mesh.explanation,
            "explicit: ici=1,4,2 covers each ICI domain of 8 GPUs (a node's NVLink-connected "
            "GPUs), dcn=1,1,2 the 2 domains");
}

TEST(DeriveMeshTest, TwoIslandsGiveDomainsOfFour) {
  Mesh mesh = derive({two_island_node()}, 2, 8, "auto");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 4, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{4, 1, 1}));
  EXPECT_EQ(mesh.domain_size, 4);
  check_placement(mesh);
  for (const Placement& p : mesh.placement) {
    EXPECT_EQ(p.node, p.rank / 8);
    EXPECT_EQ(p.domain, p.rank / 4);
    EXPECT_EQ(p.gpu, p.rank % 8);
  }
  // Interleaved islands: a domain's ranks land on its island's GPUs.
  Topology interleaved = node_with_islands({{0, 2, 4, 6}, {1, 3, 5, 7}}, 8);
  mesh = derive({interleaved}, 1, 8, "auto");
  const std::vector<int> gpus = {0, 2, 4, 6, 1, 3, 5, 7};
  for (const Placement& p : mesh.placement) {
    EXPECT_EQ(p.gpu, gpus[p.rank]);
    EXPECT_EQ(p.local_rank, p.rank);
  }
  EXPECT_EQ(derive_error({two_island_node()}, 1, 8, "auto:tp=8"),
            "tensor parallelism of 8 needs 8 GPUs in one NVLink domain, this node's NVLink "
            "islands have 4 GPUs each: use auto:tp=4, auto:tp=2 or auto:tp=1");
}

TEST(DeriveMeshTest, PcieNodeIsOneDomain) {
  Mesh mesh = derive({pcie_node()}, 3, 4, "auto");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 4, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{3, 1, 1}));
  check_placement(mesh);
  EXPECT_NE(mesh.explanation.find("a node without NVLink"), std::string::npos) << mesh.explanation;
  EXPECT_EQ(derive_error({pcie_node()}, 3, 4, "auto:tp=8"),
            "tensor parallelism of 8 needs 8 GPUs in one ICI domain, this node has 4 GPUs without "
            "NVLink, one ICI domain per node: use auto:tp=4, auto:tp=2 or auto:tp=1");
}

TEST(DeriveMeshTest, Nvl72CliqueSpansNodes) {
  std::vector<Topology> nodes;
  for (int n = 0; n < 18; ++n) nodes.push_back(nvl72_tray(7));
  Mesh mesh = derive(nodes, 18, 4, "auto");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 72, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{1, 1, 1}));
  EXPECT_EQ(mesh.domain_size, 72);
  check_placement(mesh);

  for (int n = 0; n < 18; ++n) nodes.push_back(nvl72_tray(8));
  mesh = derive(nodes, 36, 4, "auto:tp=4");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 18, 4}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 1, 1}));
  EXPECT_EQ(mesh.domain_size, 72);
  check_placement(mesh);
  for (const Placement& p : mesh.placement) {
    EXPECT_EQ(p.node, p.rank / 4);
    EXPECT_EQ(p.gpu, p.rank % 4);
    EXPECT_EQ(p.domain, p.rank / 72);
  }
  EXPECT_NE(mesh.explanation.find("an NVLink clique of 18 nodes"), std::string::npos);
  EXPECT_EQ(derive_error(nodes, 36, 4, "auto:tp=144"),
            "tensor parallelism of 144 needs 144 GPUs in one NVLink domain, an NVLink clique here "
            "has 72 GPUs (18 nodes of 4): use auto:tp=72, auto:tp=36 or auto:tp=24");
}

TEST(DeriveMeshTest, Nvl72CliquesMustBeContiguousAndEqual) {
  std::vector<Topology> nodes = {nvl72_tray(1), nvl72_tray(2), nvl72_tray(1), nvl72_tray(2)};
  std::string error = derive_error(nodes, 4, 4, "auto");
  EXPECT_NE(error.find("node 2"), std::string::npos) << error;
  EXPECT_NE(error.find("contiguously"), std::string::npos) << error;
  nodes = {nvl72_tray(1), nvl72_tray(1), nvl72_tray(2)};
  error = derive_error(nodes, 3, 4, "auto");
  EXPECT_NE(error.find("nodes 2-2 has 1 nodes"), std::string::npos) << error;
}

TEST(DeriveMeshTest, CpuOnlyNodes) {
  Mesh mesh = derive({cpu_node()}, 3, 4, "auto");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 4, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{3, 1, 1}));
  check_placement(mesh);
  for (const Placement& p : mesh.placement) {
    EXPECT_EQ(p.gpu, -1);
    EXPECT_EQ(p.node, p.rank / 4);
    EXPECT_EQ(p.local_rank, p.rank % 4);
  }
  mesh = derive({cpu_node()}, 2, 4, "auto:tp=2");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 2, 2}));
  mesh = derive({cpu_node(), cpu_node()}, 2, 1, "auto");
  EXPECT_EQ(mesh.ici, (MeshShape{1, 1, 1}));
  EXPECT_EQ(mesh.dcn, (MeshShape{2, 1, 1}));
}

// ---- errors ----

TEST(DeriveMeshTest, ProductMismatchIsExplained) {
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "ici=1,4,1;dcn=2,1,1"),
            "ici=1,4,1 covers 4 GPUs but there are 8 in one NVLink domain (this node has 8): make "
            "the product 8 or let a -1 fill it in");
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "ici=1,8,1;dcn=4,1,1"),
            "dcn=4,1,1 covers 4 ICI domains but there are 2 in the job (2 nodes of 8 ranks): make "
            "the product 2 or let a -1 fill it in");
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "ici=1,-1,3;dcn=-1,1,1"),
            "ici=1,-1,3 cannot be filled: 3 GPUs do not divide the 8 in one NVLink domain (this "
            "node has 8)");
  // One topology per node (not what the plugin and ax-launch pass): "each node".
  EXPECT_EQ(derive_error({nvswitch_node(), nvswitch_node()}, 2, 8, "ici=1,4,1;dcn=2,1,1"),
            "ici=1,4,1 covers 4 GPUs but there are 8 in one NVLink domain (each node has 8): make "
            "the product 8 or let a -1 fill it in");
}

TEST(DeriveMeshTest, TensorParallelMustDivideTheDomain) {
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "auto:tp=3"),
            "tensor parallelism of 3 does not divide the 8 GPUs of an NVLink domain (this node "
            "has 8): use auto:tp=2 or auto:tp=1");
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "auto:tp=16"),
            "tensor parallelism of 16 needs 16 GPUs in one NVLink domain, this node has 8: use "
            "auto:tp=8, auto:tp=4 or auto:tp=2");
  // Issue 11: --ax-mesh=auto:tp=4 on nodes with 2 GPUs (the message said "does not divide the
  // ICI domain ... (NVLink island of node 0)" on every node).
  EXPECT_EQ(derive_error({node_with_islands({{0, 1}}, 2)}, 3, 2, "auto:tp=4"),
            "tensor parallelism of 4 needs 4 GPUs in one NVLink domain, this node has 2: use "
            "auto:tp=2 or auto:tp=1");
  // CPU ranks: the domain is the node's ranks, so more ranks per node are a way out too.
  EXPECT_EQ(derive_error({cpu_node()}, 3, 2, "auto:tp=4"),
            "tensor parallelism of 4 needs 4 ranks in one ICI domain, this node has no GPUs and "
            "runs 2 CPU ranks, one ICI domain per node: use auto:tp=2 or auto:tp=1, or run 4 "
            "ranks per node");
}

TEST(DeriveMeshTest, TensorAcrossDcnNeedsForce) {
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 8, "ici=1,4,2;dcn=1,1,2"),
            "tensor parallelism across DCN (dcn tensor=2) crosses the network; pass force to "
            "allow it");
  EXPECT_NE(derive_error({nvswitch_node()}, 2, 8, "ici=1,4,2;dcn=1,1,-1").find("dcn tensor=2"),
            std::string::npos);
}

TEST(DeriveMeshTest, DisagreeingNodesAreNamed) {
  std::string error = derive_error({nvswitch_node(), nvswitch_node(), pcie_node()}, 3, 8, "auto");
  EXPECT_EQ(error, "nodes disagree: node 2 has 4 GPUs but node 0 has 8");
  error = derive_error({nvswitch_node(), two_island_node()}, 2, 8, "auto");
  EXPECT_EQ(error, "nodes disagree: node 1 has NVLink islands 4+4 but node 0 has 8");
  error = derive_error({nvswitch_node(), cpu_node()}, 2, 8, "auto");
  EXPECT_EQ(error, "nodes disagree: node 1 has 0 GPUs but node 0 has 8");
  error = derive_error({node_with_islands({{0, 1}, {2, 3, 4, 5}}, 6)}, 1, 6, "auto");
  EXPECT_EQ(error,
            "this node has NVLink islands of unequal size (2+4); ICI domains must be the same "
            "size");
  error = derive_error({nvswitch_node(), nvswitch_node()}, 3, 8, "auto");
  EXPECT_EQ(error, "got 2 node topologies for 3 nodes (pass one per node, or one shared by all)");
}

TEST(DeriveMeshTest, TasksMustMatchGpus) {
  EXPECT_EQ(derive_error({nvswitch_node()}, 2, 4, "auto"),
            "4 tasks per node but this node has 8 GPUs: run one task per GPU (8 per node)");
  EXPECT_NE(derive_error({cpu_node()}, 2, 0, "auto").find("tasks_per_node must be >= 1"),
            std::string::npos);
  EXPECT_NE(derive_error({cpu_node()}, 0, 1, "auto").find("number of nodes"), std::string::npos);
}

// ---- scale ----

TEST(DeriveMeshTest, ThousandNodesOfEightGpus) {
  std::vector<Topology> nodes(1024, nvswitch_node());
  const MeshSpec s = spec("auto:tp=2");
  const auto start = std::chrono::steady_clock::now();
  StatusOr<Mesh> mesh = derive_mesh(nodes, 1024, 8, s);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(mesh.ok()) << mesh.status().to_string();
  std::printf("derive_mesh 1024 nodes x 8 GPUs (one topology per node): %.2f ms\n", ms);
  EXPECT_LT(ms, 1000.0);
  EXPECT_EQ(mesh->ici, (MeshShape{1, 4, 2}));
  EXPECT_EQ(mesh->dcn, (MeshShape{1024, 1, 1}));
  check_placement(*mesh);
}

}  // namespace
}  // namespace ax::topo
