// JobContext from environment maps: source precedence, the Slurm coordinator rule, host lists and
// the errors that name the bad variable.
#include "ax/job_context/job_context.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace ax::job {
namespace {

using Env = std::map<std::string, std::string>;

EnvLookup lookup(const Env& env) {
  return [env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
}

// What srun -N 2 -n 3 gives task 2 (the second node runs one task).
Env slurm_step() {
  return {{"SLURM_JOB_ID", "1234"},
          {"SLURM_STEP_ID", "1"},
          {"SLURM_PROCID", "2"},
          {"SLURM_NTASKS", "3"},
          {"SLURM_LOCALID", "0"},
          {"SLURM_NODEID", "1"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_NNODES", "2"},
          {"SLURM_STEP_NODELIST", "n[3-4]"},
          {"SLURM_JOB_NODELIST", "n[1-4]"},
          {"SLURM_STEP_TASKS_PER_NODE", "2,1"}};
}

Env ax_env() {
  return {{"AX_RANK", "5"},
          {"AX_WORLD_SIZE", "8"},
          {"AX_LOCAL_RANK", "1"},
          {"AX_LOCAL_WORLD_SIZE", "4"},
          {"AX_NODE_RANK", "1"},
          {"AX_NNODES", "2"},
          {"AX_ICI_MESH", "1,4,1"},
          {"AX_DCN_MESH", "2,1,1"},
          {"AX_MESH_SPEC", "auto"},
          {"AX_DEVICE", "cpu"},
          {"AX_COORDINATOR", "n1:29500"}};
}

std::string error_of(const Env& env) {
  StatusOr<JobContext> ctx = job_context(lookup(env));
  EXPECT_FALSE(ctx.ok());
  if (ctx.ok()) return "";
  EXPECT_EQ(ctx.status().code(), StatusCode::kInvalidArgument) << ctx.status().to_string();
  return ctx.status().message();
}

TEST(JobContext, EmptyEnvironmentIsOneProcess) {
  StatusOr<JobContext> ctx = job_context(lookup({}));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->source, ContextSource::kSingle);
  EXPECT_EQ(ctx->rank, 0);
  EXPECT_EQ(ctx->world, 1);
  EXPECT_EQ(ctx->local_world, 1);
  EXPECT_EQ(ctx->num_nodes, 1);
  EXPECT_TRUE(ctx->coordinator.empty());
  EXPECT_FALSE(ctx->pmix);
  EXPECT_FALSE(ctx->hostname.empty());
}

TEST(JobContext, AxVariablesWinOverEverything) {
  Env env = ax_env();
  for (const auto& kv : slurm_step()) env.insert(kv);
  env["PMIX_RANK"] = "2";
  env["PMIX_NAMESPACE"] = "slurm.pmix.1234.1";
  StatusOr<JobContext> ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->source, ContextSource::kAx);
  EXPECT_EQ(ctx->rank, 5);
  EXPECT_EQ(ctx->world, 8);
  EXPECT_EQ(ctx->local_rank, 1);
  EXPECT_EQ(ctx->local_world, 4);
  EXPECT_EQ(ctx->node_rank, 1);
  EXPECT_EQ(ctx->num_nodes, 2);
  EXPECT_EQ(ctx->ici_mesh, "1,4,1");
  EXPECT_EQ(ctx->dcn_mesh, "2,1,1");
  EXPECT_EQ(ctx->mesh_spec, "auto");
  EXPECT_EQ(ctx->device, "cpu");
  EXPECT_EQ(ctx->coordinator, "n1:29500");
  EXPECT_EQ(ctx->job_id, "1234");
  EXPECT_TRUE(ctx->pmix);
  EXPECT_EQ(describe(*ctx),
            "rank 5/8 (local 1/4, node 1/2) from ax, coordinator n1:29500, "
            "device cpu");
}

TEST(JobContext, AxWithoutCoordinatorDerivesItUnderSlurm) {
  Env env = {{"AX_RANK", "0"}, {"AX_WORLD_SIZE", "2"}};
  StatusOr<JobContext> alone = job_context(lookup(env));
  ASSERT_TRUE(alone.ok()) << alone.status().to_string();
  EXPECT_EQ(alone->local_world, 2);  // unset local values: one node with every rank
  EXPECT_EQ(alone->coordinator, "");
  for (const auto& kv : slurm_step()) env.insert(kv);
  StatusOr<JobContext> ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->coordinator, "n3:" + std::to_string(20000 + (1234 * 64 + 1) % 12000));
}

TEST(JobContext, SlurmStep) {
  StatusOr<JobContext> ctx = job_context(lookup(slurm_step()));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->source, ContextSource::kSlurm);
  EXPECT_EQ(ctx->rank, 2);
  EXPECT_EQ(ctx->world, 3);
  EXPECT_EQ(ctx->local_rank, 0);
  EXPECT_EQ(ctx->local_world, 1);  // "2,1": node 1 runs one task
  EXPECT_EQ(ctx->node_rank, 1);
  EXPECT_EQ(ctx->num_nodes, 2);
  EXPECT_TRUE(ctx->ici_mesh.empty());
  EXPECT_TRUE(ctx->device.empty());
  // The step's first node, not the job's; 20000 + (1234 * 64 + 1) % 12000 = 26977.
  EXPECT_EQ(ctx->coordinator, "n3:26977");
  EXPECT_EQ(ctx->job_id, "1234");
}

TEST(JobContext, CoordinatorPortMatchesThePluginRule) {
  // spank_plugin/src/env.cc coordinator_port(): distinct for consecutive steps, wraps at 12000.
  Env env = slurm_step();
  env["SLURM_JOB_ID"] = "4000000000";
  env["SLURM_STEP_ID"] = "65";
  StatusOr<JobContext> ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  uint64_t key = uint64_t{4000000000} * 64 + 65 % 64;
  EXPECT_EQ(ctx->coordinator, "n3:" + std::to_string(20000 + key % 12000));
  env.erase("SLURM_STEP_NODELIST");  // falls back to the job's list
  ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->coordinator.substr(0, 3), "n1:");
}

TEST(JobContext, TasksPerNodeWithRepeats) {
  Env env = slurm_step();
  env["SLURM_NTASKS"] = "8";
  env["SLURM_PROCID"] = "7";
  env["SLURM_NODEID"] = "2";
  env["SLURM_LOCALID"] = "1";
  env["SLURM_STEP_NUM_NODES"] = "3";
  env["SLURM_STEP_TASKS_PER_NODE"] = "3(x2),2";
  StatusOr<JobContext> ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->local_world, 2);
  env["SLURM_STEP_TASKS_PER_NODE"] = "3(x3";
  EXPECT_NE(error_of(env).find("SLURM_STEP_TASKS_PER_NODE"), std::string::npos);
  env["SLURM_STEP_TASKS_PER_NODE"] = "3,3";
  EXPECT_NE(error_of(env).find("lists 2 nodes but SLURM_STEP_NUM_NODES=3"), std::string::npos);
}

TEST(JobContext, PmixRankWithSlurmStep) {
  Env env = slurm_step();
  env["PMIX_RANK"] = "2";
  env["PMIX_NAMESPACE"] = "slurm.pmix.1234.1";
  env["SLURM_PROCID"] = "0";  // PMIx's rank wins for the pmix source
  StatusOr<JobContext> ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->source, ContextSource::kPmix);
  EXPECT_TRUE(ctx->pmix);
  EXPECT_EQ(ctx->rank, 2);
  EXPECT_EQ(ctx->world, 3);
  EXPECT_EQ(ctx->coordinator, "n3:26977");
  env.erase("SLURM_NTASKS");
  EXPECT_EQ(error_of(env).rfind("SLURM_NTASKS is not set but PMIX_RANK is", 0), 0u)
      << error_of(env);
}

TEST(JobContext, BatchScriptIsASingleProcess) {
  // sbatch sets SLURM_PROCID=0 in the batch script but no SLURM_STEP_ID.
  Env env = {{"SLURM_JOB_ID", "7"},
             {"SLURM_PROCID", "0"},
             {"SLURM_NTASKS", "16"},
             {"SLURM_JOB_NODELIST", "n[1-2]"}};
  StatusOr<JobContext> ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->source, ContextSource::kSingle);
  EXPECT_EQ(ctx->world, 1);
  EXPECT_EQ(ctx->job_id, "7");
  EXPECT_EQ(std::string(context_source_name(ctx->source)), "single");
}

TEST(JobContext, EmptyVariablesCountAsUnset) {
  StatusOr<JobContext> ctx = job_context(lookup({{"AX_RANK", ""}, {"AX_WORLD_SIZE", ""}}));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->source, ContextSource::kSingle);
}

TEST(JobContext, RestartCountFromSlurm) {
  auto ctx = job_context(lookup({{"SLURM_PROCID", "0"},
                                 {"SLURM_NTASKS", "1"},
                                 {"SLURM_STEP_ID", "0"},
                                 {"SLURM_JOB_ID", "7"},
                                 {"SLURM_RESTART_COUNT", "2"}}));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->restart_count, 2);
  EXPECT_NE(describe(*ctx).find(", restart 2"), std::string::npos) << describe(*ctx);
  auto bad = job_context(lookup({{"SLURM_PROCID", "0"},
                                 {"SLURM_NTASKS", "1"},
                                 {"SLURM_STEP_ID", "0"},
                                 {"SLURM_JOB_ID", "7"},
                                 {"SLURM_RESTART_COUNT", "two"}}));
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("SLURM_RESTART_COUNT"), std::string::npos);
}

TEST(JobContext, BadValuesNameTheVariable) {
  struct Case {
    std::string var, value, expect;
  };
  const Case cases[] = {
      {"AX_RANK", "x", "AX_RANK='x': expected an integer"},
      {"AX_RANK", "-1", "AX_RANK='-1'"},
      {"AX_RANK", "8", "AX_RANK=8 is not below AX_WORLD_SIZE=8"},
      {"AX_WORLD_SIZE", "0", "AX_WORLD_SIZE=0"},
      {"AX_LOCAL_RANK", "4", "AX_LOCAL_RANK=4 is not below AX_LOCAL_WORLD_SIZE=4"},
      {"AX_NODE_RANK", "2", "AX_NODE_RANK=2 is not below AX_NNODES=2"},
      {"AX_ICI_MESH", "1,4", "AX_ICI_MESH='1,4': expected data,fsdp,tensor"},
      {"AX_DCN_MESH", "0,1,1", "AX_DCN_MESH='0,1,1'"},
      {"AX_DCN_MESH", "4,1,1", "AX_ICI_MESH=1,4,1 times AX_DCN_MESH=4,1,1 is 16 devices"},
      {"AX_ICI_MESH", "1,1,4,1",
       "AX_ICI_MESH='1,1,4,1': expected data,fsdp,tensor or "
       "pipeline,data,fsdp,seq,tensor"},
      {"AX_ICI_MESH", "2,1,4,1,1", "AX_ICI_MESH=2,1,4,1,1 times AX_DCN_MESH=2,1,1 is 16 devices"},
      {"AX_MESH_SPEC", std::string(300, 'a'), "AX_MESH_SPEC is 300 characters long"},
      {"AX_DEVICE", "gpu0", "AX_DEVICE='gpu0'"},
      {"AX_COORDINATOR", "n1", "AX_COORDINATOR='n1': expected host:port"},
      {"AX_COORDINATOR", "n1:70000", "AX_COORDINATOR='n1:70000'"},
  };
  for (const Case& c : cases) {
    Env env = ax_env();
    env[c.var] = c.value;
    EXPECT_NE(error_of(env).find(c.expect), std::string::npos) << c.var << "=" << c.value;
  }
  Env no_world = {{"AX_RANK", "0"}};
  EXPECT_EQ(error_of(no_world).rfind("AX_WORLD_SIZE is not set but AX_RANK is", 0), 0u)
      << error_of(no_world);
  Env stray = {{"AX_WORLD_SIZE", "4"}};
  EXPECT_EQ(error_of(stray).rfind("AX_WORLD_SIZE is set but AX_RANK is not", 0), 0u)
      << error_of(stray);
  Env one_mesh = ax_env();
  one_mesh.erase("AX_DCN_MESH");
  EXPECT_EQ(error_of(one_mesh).rfind("AX_DCN_MESH is not set but AX_ICI_MESH is", 0), 0u)
      << error_of(one_mesh);

  Env slurm = slurm_step();
  slurm["SLURM_JOB_ID"] = "12x";
  EXPECT_NE(error_of(slurm).find("SLURM_JOB_ID='12x'"), std::string::npos);
  slurm = slurm_step();
  slurm["SLURM_STEP_NODELIST"] = "n[1-2";
  EXPECT_NE(error_of(slurm).find("SLURM_STEP_NODELIST: node list 'n[1-2'"), std::string::npos)
      << error_of(slurm);
  slurm = slurm_step();
  slurm["SLURM_PROCID"] = "3";
  EXPECT_NE(error_of(slurm).find("SLURM_PROCID=3 is not below SLURM_NTASKS=3"), std::string::npos);
}

TEST(JobContext, JobSecretWhateverTheSourceAndNeverInTheDescription) {
  const std::string secret(64, 'c');
  for (Env env : {ax_env(), slurm_step(), Env{}}) {
    env["AX_JOB_SECRET"] = secret;
    StatusOr<JobContext> ctx = job_context(lookup(env));
    ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
    EXPECT_EQ(ctx->secret, secret);
    EXPECT_EQ(describe(*ctx).find(secret), std::string::npos) << describe(*ctx);
  }
  StatusOr<JobContext> none = job_context(lookup(ax_env()));
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->secret, "");
  // Malformed: named, its value not shown.
  for (const std::string& bad :
       {std::string(31, 'a'), std::string(129, 'a'), std::string(63, 'a') + "g",
        std::string("secret words here!!") + std::string(20, 'a')}) {
    Env env = ax_env();
    env["AX_JOB_SECRET"] = bad;
    const std::string m = error_of(env);
    EXPECT_NE(m.find("AX_JOB_SECRET is malformed"), std::string::npos) << m;
    EXPECT_EQ(m.find(bad), std::string::npos) << m;
  }
}

TEST(JobContext, NewJobSecretsAre64FreshHexDigits) {
  StatusOr<std::string> a = new_job_secret();
  StatusOr<std::string> b = new_job_secret();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->size(), 64u);
  EXPECT_TRUE(check_job_secret(*a).ok());
  EXPECT_NE(*a, *b);
}

TEST(FirstHost, SlurmHostlists) {
  const std::pair<std::string, std::string> cases[] = {
      {"n1", "n1"},
      {"n[1-4,7]", "n1"},
      {"n[7,1-4]", "n7"},
      {"gpu-a,gpu-b", "gpu-a"},
      {"rack1-[003-005]", "rack1-003"},
      {"node[01-02]-ib,other", "node01-ib"},
      {"a.example.com,b", "a.example.com"},
  };
  for (const auto& [list, host] : cases) {
    StatusOr<std::string> got = first_host(list);
    ASSERT_TRUE(got.ok()) << list << ": " << got.status().to_string();
    EXPECT_EQ(*got, host) << list;
  }
  for (const std::string bad : {"", "[1-2]", "n[1-2", "n[a-b]", "n 1", "n[]", "n;rm"}) {
    StatusOr<std::string> got = first_host(bad);
    EXPECT_FALSE(got.ok()) << "'" << bad << "' gave " << (got.ok() ? *got : "");
    if (!got.ok()) {
      EXPECT_EQ(got.status().code(), StatusCode::kInvalidArgument);
    }
  }
}

}  // namespace
// The five-number form (pipeline,data,fsdp,seq,tensor) that the launcher and plugin export when
// a mesh has a pipeline or seq axis; its product must still be the world.
TEST(JobContext, FiveAxisMeshes) {
  Env env = ax_env();
  env["AX_ICI_MESH"] = "2,1,2,1,1";
  env["AX_DCN_MESH"] = "1,2,1,1,1";
  StatusOr<JobContext> ctx = job_context(lookup(env));
  ASSERT_TRUE(ctx.ok()) << ctx.status().to_string();
  EXPECT_EQ(ctx->ici_mesh, "2,1,2,1,1");
  EXPECT_EQ(ctx->dcn_mesh, "1,2,1,1,1");
  env["AX_DCN_MESH"] = "2,2,1,1,1";
  EXPECT_NE(error_of(env).find("AX_ICI_MESH=2,1,2,1,1 times AX_DCN_MESH=2,2,1,1,1 is 16 devices"),
            std::string::npos)
      << error_of(env);
}

}  // namespace ax::job
