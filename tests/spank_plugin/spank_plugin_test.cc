#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "ax/job_context/job_context.h"
#include "ax/topology/topology.h"
#include "config.h"
#include "env.h"
#include "options.h"

extern std::string g_last_slurm_error;

namespace ax::spank {
namespace {

topo::Topology fixture(const std::string& name) {
  StatusOr<topo::Topology> t = topo::load_topology(std::string(AX_FIXTURES) + "/" + name);
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(t).value() : topo::Topology{};
}

std::map<std::string, std::string> as_map(const TaskEnv& env) {
  return {env.env.begin(), env.env.end()};
}

std::vector<int> range(int from, int to) {
  std::vector<int> out;
  for (int c = from; c < to; ++c) out.push_back(c);
  return out;
}

TEST(SpankConfig, GoodArguments) {
  StatusOr<Config> c =
      parse_config({"default=auto:tp=2", "bind=numa", "nic=all", "topology=/etc/ax/node.json"});
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(*c->default_spec, "auto:tp=2");
  EXPECT_EQ(c->bind, Bind::kNuma);
  EXPECT_EQ(c->nic, NicChoice::kAll);
  EXPECT_EQ(c->topology_file, "/etc/ax/node.json");
  StatusOr<Config> empty = parse_config({});
  ASSERT_TRUE(empty.ok());
  EXPECT_FALSE(empty->default_spec);
  EXPECT_EQ(empty->bind, Bind::kCores);
  EXPECT_EQ(empty->nic, NicChoice::kNearest);
}

TEST(SpankConfig, BadArgumentsAreErrors) {
  for (const char* bad : {"bind=gpu", "nic=", "default=ici=1,8", "topology=relative.json",
                          "color=red", "bind", "=none", "default=auto:tp=x"}) {
    EXPECT_FALSE(parse_config({bad}).ok()) << bad;
  }
  EXPECT_FALSE(parse_config({"bind=none", "bind=cores"}).ok());
  EXPECT_FALSE(parse_config({"default=" + std::string(5000, '1')}).ok());
}

TEST(SpankOptions, Validation) {
  EXPECT_TRUE(check_mesh_option("auto").ok());
  EXPECT_TRUE(check_mesh_option("ici=1,-1,1;dcn=-1,1,1").ok());
  EXPECT_FALSE(check_mesh_option(nullptr).ok());
  EXPECT_FALSE(check_mesh_option("auto:tp=").ok());
  EXPECT_FALSE(check_mesh_option(std::string(10000, 'a').c_str()).ok());

  EXPECT_EQ(on_mesh_option(0, "auto:tp=4", 0), 0);
  ASSERT_TRUE(mesh_option());
  EXPECT_EQ(*mesh_option(), "auto:tp=4");
  g_last_slurm_error.clear();
  EXPECT_EQ(on_mesh_option(0, "ici=1,8,1;dcn=x", 0), -1);
  EXPECT_EQ(g_last_slurm_error.rfind("ax: --ax-mesh: ", 0), 0u) << g_last_slurm_error;
  EXPECT_EQ(*mesh_option(), "auto:tp=4");  // a bad value does not replace a good one
}

TEST(SpankEnv, TwoDgxH100Nodes) {
  topo::Topology node = fixture("dgx-h100.json");
  Config config;
  TaskInput in;
  in.nnodes = 2;
  in.node_id = 1;
  in.tasks_per_node = 8;
  in.local_id = 3;
  in.global_id = 11;
  in.mesh_spec = "auto";
  in.coordinator = "n0:20064";
  in.available_cpus = range(0, 224);
  StatusOr<TaskEnv> env = task_env(node, config, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  auto m = as_map(*env);
  EXPECT_EQ(m["AX_RANK"], "11");
  EXPECT_EQ(m["AX_WORLD_SIZE"], "16");
  EXPECT_EQ(m["AX_LOCAL_RANK"], "3");
  EXPECT_EQ(m["AX_LOCAL_WORLD_SIZE"], "8");
  EXPECT_EQ(m["AX_NODE_RANK"], "1");
  EXPECT_EQ(m["AX_NNODES"], "2");
  EXPECT_EQ(m["AX_ICI_MESH"], "1,8,1");
  EXPECT_EQ(m["AX_DCN_MESH"], "2,1,1");
  EXPECT_EQ(m["AX_MESH_SPEC"], "auto");  // ax-train plans an auto mesh's split (docs/plan.md)
  EXPECT_EQ(m["AX_DEVICE"], "3");
  EXPECT_EQ(m["AX_COORDINATOR"], "n0:20064");
  EXPECT_EQ(m["NCCL_IB_HCA"], node.nics[static_cast<size_t>(node.gpus[3].nearest_nic)].name);
  EXPECT_EQ(env->cpus, node.gpus[3].cpus);
  EXPECT_TRUE(env->note.empty()) << env->note;

  in.user_nccl_ib_hca = true;
  env = task_env(node, config, in);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(as_map(*env).count("NCCL_IB_HCA"), 0u);

  in.user_nccl_ib_hca = false;
  config.nic = NicChoice::kAll;
  config.bind = Bind::kNone;
  env = task_env(node, config, in);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(as_map(*env)["NCCL_IB_HCA"].find("mlx5_0,mlx5_1"), 0u);
  EXPECT_TRUE(env->cpus.empty());

  config.bind = Bind::kNuma;
  in.available_cpus = range(0, 2);  // cores the fixture names are not all here
  env = task_env(node, config, in);
  ASSERT_TRUE(env.ok());
  EXPECT_TRUE(env->cpus.empty());
  EXPECT_FALSE(env->note.empty());
}

// Memory follows the GPU's NUMA node under bind=cores and bind=numa, also when the cores are not
// available (whether the node exists is the task's check, in plugin.cc); bind=none leaves it.
TEST(SpankEnv, MemoryNodeFollowsTheBindArgument) {
  topo::Topology node = fixture("dgx-h100.json");
  TaskInput in;
  in.tasks_per_node = 8;
  in.local_id = 5;
  in.global_id = 5;
  in.mesh_spec = "auto";
  in.coordinator = "n0:20000";
  Config config;
  for (Bind bind : {Bind::kCores, Bind::kNuma, Bind::kNone}) {
    config.bind = bind;
    StatusOr<TaskEnv> env = task_env(node, config, in);
    ASSERT_TRUE(env.ok()) << env.status().to_string();
    EXPECT_EQ(env->mem_node, bind == Bind::kNone ? -1 : node.gpus[5].numa_node);
  }
  EXPECT_EQ(node.gpus[5].numa_node, 1);
  in.cuda_visible_devices = "5";  // Slurm bound one GPU per task: still GPU 5's node
  config.bind = Bind::kCores;
  StatusOr<TaskEnv> env = task_env(node, config, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(env->mem_node, 1);
  in.cuda_visible_devices = "6,2";  // the step's view with two tasks: GPU 2 is on node 0
  in.tasks_per_node = 2;
  in.local_id = 1;
  in.global_id = 1;
  env = task_env(node, config, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(env->mem_node, 0);
  in = TaskInput{};
  in.tasks_per_node = 2;
  in.mesh_spec = "auto";
  env = task_env(fixture("no-gpu.json"), config, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(env->mem_node, -1);
}

TEST(SpankEnv, CpuNodeWithFourTasks) {
  topo::Topology node = fixture("no-gpu.json");
  TaskInput in;
  in.tasks_per_node = 4;
  in.local_id = 2;
  in.global_id = 2;
  in.mesh_spec = "auto";
  in.coordinator = "localhost:20000";
  in.cuda_visible_devices = "0";  // ignored without GPUs
  StatusOr<TaskEnv> env = task_env(node, Config{}, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  auto m = as_map(*env);
  EXPECT_EQ(m["AX_DEVICE"], "cpu");
  EXPECT_EQ(m["AX_RANK"], "2");
  EXPECT_EQ(m["AX_WORLD_SIZE"], "4");
  EXPECT_EQ(m["AX_ICI_MESH"], "1,4,1");
  EXPECT_EQ(m.count("NCCL_IB_HCA"), 0u);
  EXPECT_TRUE(env->cpus.empty());
}

TEST(SpankEnv, CudaVisibleDevicesNarrowing) {
  topo::Topology node = fixture("dgx-h100.json");
  TaskInput in;
  in.tasks_per_node = 2;
  in.mesh_spec = "auto";
  in.coordinator = "n0:20000";
  in.cuda_visible_devices = "6,2";  // the step's view: one GPU per task
  in.local_id = 0;
  StatusOr<TaskEnv> env = task_env(node, Config{}, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(as_map(*env)["AX_DEVICE"], "0");
  EXPECT_EQ(as_map(*env)["NCCL_IB_HCA"],
            node.nics[static_cast<size_t>(node.gpus[6].nearest_nic)].name);
  in.local_id = 1;
  in.global_id = 1;
  env = task_env(node, Config{}, in);
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(as_map(*env)["AX_DEVICE"], "1");
  EXPECT_EQ(as_map(*env)["NCCL_IB_HCA"],
            node.nics[static_cast<size_t>(node.gpus[2].nearest_nic)].name);

  // Slurm bound one GPU per task (--gpus-per-task=1): the task's GPU is ordinal 0.
  in.tasks_per_node = 8;
  in.local_id = 5;
  in.global_id = 5;
  in.cuda_visible_devices = "5";
  env = task_env(node, Config{}, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  EXPECT_EQ(as_map(*env)["AX_DEVICE"], "0");
  in.cuda_visible_devices = "4";  // not the GPU the mesh placed this rank on
  EXPECT_FALSE(task_env(node, Config{}, in).ok());
  in.cuda_visible_devices = "9";  // no such GPU
  EXPECT_FALSE(task_env(node, Config{}, in).ok());
}

TEST(SpankEnv, MismatchedTaskCountIsAnError) {
  TaskInput in;
  in.tasks_per_node = 3;
  in.mesh_spec = "auto";
  EXPECT_FALSE(task_env(fixture("dgx-h100.json"), Config{}, in).ok());
}

TEST(SpankEnv, EveryStepGetsAFreshJobSecret) {
  ::setenv("AX_JOB_SECRET", "a value the user's shell had", 1);
  ASSERT_TRUE(export_job_secret().ok());
  const std::string first = std::getenv("AX_JOB_SECRET");
  EXPECT_EQ(first.size(), 64u);
  EXPECT_TRUE(job::check_job_secret(first).ok());
  ASSERT_TRUE(export_job_secret().ok());
  EXPECT_NE(std::getenv("AX_JOB_SECRET"), first);
  ::unsetenv("AX_JOB_SECRET");
}

// Issue 11: --ax-mesh=auto:tp=4 on nodes with 2 GPUs (here: a step of 2 GPUs per node, which
// Slurm's GRES narrows CUDA_VISIBLE_DEVICES to) says what to change, naming the option.
TEST(SpankEnv, MeshThatCannotFitSaysWhatToUse) {
  TaskInput in;
  in.nnodes = 3;
  in.tasks_per_node = 2;
  in.mesh_spec = "auto:tp=4";
  in.coordinator = "n1:20000";
  in.cuda_visible_devices = "0,1";
  StatusOr<TaskEnv> env = task_env(fixture("dgx-h100.json"), Config{}, in);
  ASSERT_FALSE(env.ok());
  EXPECT_EQ(env.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(env.status().message(),
            "--ax-mesh=auto:tp=4: tensor parallelism of 4 needs 4 GPUs in one NVLink domain, this "
            "node has 2: use auto:tp=2 or auto:tp=1");
}

// Issues 25/26: --ax-mesh=auto:pp=2,tp=4 on 2 nodes of 8 GPUs puts a pipeline stage on each node
// and tensor groups inside it; a shape with pipeline or seq > 1 is exported in the five-number
// form.
TEST(SpankEnv, PipelineAndSeqAxesInTheExports) {
  TaskInput in;
  in.nnodes = 2;
  in.node_id = 1;
  in.tasks_per_node = 8;
  in.local_id = 5;
  in.global_id = 13;
  in.mesh_spec = "auto:pp=2,tp=4";
  in.coordinator = "n0:20000";
  in.available_cpus = range(0, 224);
  StatusOr<TaskEnv> env = task_env(fixture("dgx-h100.json"), Config{}, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  auto m = as_map(*env);
  EXPECT_EQ(m["AX_ICI_MESH"], "1,2,4");  // pipeline and seq 1 inside the node: three numbers
  EXPECT_EQ(m["AX_DCN_MESH"], "2,1,1,1,1");
  EXPECT_EQ(m["AX_MESH_SPEC"], "auto:pp=2,tp=4");
  EXPECT_EQ(m["AX_RANK"], "13");
  in.mesh_spec = "ici=1,1,2,4,1;dcn=1,2,1,1,1";
  env = task_env(fixture("dgx-h100.json"), Config{}, in);
  ASSERT_TRUE(env.ok()) << env.status().to_string();
  m = as_map(*env);
  EXPECT_EQ(m["AX_ICI_MESH"], "1,1,2,4,1");
  EXPECT_EQ(m["AX_DCN_MESH"], "2,1,1");
  EXPECT_EQ(check_step_mesh(fixture("dgx-h100.json"), "auto:pp=3", 2, 16).message(),
            "--ax-mesh=auto:pp=3: pipeline parallelism of 3 puts one stage per ICI domain, but the "
            "job has 2 domains: use a pipeline size that divides 2 or is a multiple of it");
}

// What srun checks before any task starts, from the configured node description.
TEST(SpankStepCheck, RefusesInSrunWhatCannotFitTheConfiguredNode) {
  const topo::Topology dgx = fixture("dgx-h100.json");
  Status s = check_step_mesh(dgx, "auto:tp=16", 2, 16);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "--ax-mesh=auto:tp=16: tensor parallelism of 16 needs 16 GPUs in one NVLink domain, "
            "this node has 8: use auto:tp=8, auto:tp=4 or auto:tp=2");
  EXPECT_TRUE(check_step_mesh(dgx, "auto:tp=8", 2, 16).ok());
  // 2 tasks per node on 8-GPU nodes: which 2 GPUs the step gets is decided on the node.
  EXPECT_TRUE(check_step_mesh(dgx, "auto:tp=4", 3, 6).ok());
  EXPECT_TRUE(check_step_mesh(dgx, "auto:tp=16", 3, 7).ok());  // uneven: left to the nodes
  s = check_step_mesh(fixture("no-gpu.json"), "auto:tp=4", 3, 6);
  EXPECT_EQ(s.message(),
            "--ax-mesh=auto:tp=4: tensor parallelism of 4 needs 4 ranks in one ICI domain, this "
            "node has no GPUs and runs 2 CPU ranks, one ICI domain per node: use auto:tp=2 or "
            "auto:tp=1, or run 4 ranks per node");
  EXPECT_TRUE(check_step_mesh(fixture("no-gpu.json"), "auto:tp=2", 3, 6).ok());
}

TEST(SpankHostlist, FirstHost) {
  EXPECT_EQ(*first_host("n[1-4]"), "n1");
  EXPECT_EQ(*first_host("gpu[007-009,012],cpu1"), "gpu007");
  EXPECT_EQ(*first_host("node-a.cluster,node-b"), "node-a.cluster");
  EXPECT_EQ(*first_host("n5"), "n5");
  EXPECT_EQ(*first_host("rack[3-4]-gpu"), "rack3-gpu");
  for (const char* bad : {"", "n[1-4", "n[a-b]", "n;rm -rf /", "[1-2]x$", "n[]"}) {
    EXPECT_FALSE(first_host(bad).ok()) << bad;
  }
  EXPECT_FALSE(first_host(std::string(300, 'a')).ok());
}

TEST(SpankCoordinator, PortFormula) {
  EXPECT_EQ(coordinator_port(0, 0), 20000);
  EXPECT_EQ(coordinator_port(1, 0), 20064);
  EXPECT_EQ(coordinator_port(1, 1), 20065);
  EXPECT_NE(coordinator_port(1234, 0), coordinator_port(1234, 1));
  for (uint32_t job : {0u, 77u, 4294967295u}) {
    int port = coordinator_port(job, 4294967290u);
    EXPECT_GE(port, 20000);
    EXPECT_LT(port, 32000);
  }
}

}  // namespace
}  // namespace ax::spank
