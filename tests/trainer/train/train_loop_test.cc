// The train loop on real text: loss going down, bit-exact resume (also past a corrupt
// checkpoint), and bad input (corrupt checkpoints, tokenizer mismatch, NaN, model change, full
// disk); sampling from a run.
#include "ax/trainer/train/train_loop.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>
#include <tuple>

#include "ax/trainer/checkpoint/checkpoint.h"
#include "ax/trainer/eval/decoding.h"
#include "ax/trainer/optim/optimizer.h"
#include "ax/trainer/parallel/distributed.h"
#include "ax/trainer/train/sampler.h"
#include "ax/trainer/train/train_state.h"
#include "model_test_util.h"
#include "test_util.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using testing::corpus;
using testing::corpus_config;

struct TrainRun {
  Status status;
  std::optional<TrainOutcome> outcome;
  std::vector<StepResult> steps;
  std::string out;
};

// Trains config in dir; stop_after > 0 stops after that step as SIGTERM would.
TrainRun train_run(const Config& config, const std::string& dir, int64_t stop_after = 0,
                   const std::string& device = "cpu") {
  TrainRun run;
  std::ostringstream out;
  TrainOptions options;
  options.device = device;
  options.threads = 2;
  options.out = &out;
  options.after_step = [&](const StepResult& r) {
    run.steps.push_back(r);
    return r.step != stop_after;
  };
  StatusOr<TrainOutcome> outcome = train(config, dir, options);
  run.status = outcome.status();
  if (outcome.ok()) run.outcome = *outcome;
  run.out = out.str();
  return run;
}

std::string new_dir(const std::string& tag) { return data::testing::temp_dir(tag) + "/run"; }

double mean(const std::vector<StepResult>& steps, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += steps[i].loss;
  return s / static_cast<double>(end - begin);
}

TEST(ResolveConfig, VocabularyFromTheTokenizer) {
  Config c = corpus_config("tiny-gpt", {"model.vocab_size=0"});
  EXPECT_EQ(c.model.vocab_size, 512);  // 500 pieces rounded up to a multiple of 128
  c = corpus_config("tiny-gpt", {"model.vocab_size=0", "model.vocab_multiple=100"});
  EXPECT_EQ(c.model.vocab_size, 500);
  EXPECT_TRUE(fs::path(c.data.train_dir).is_absolute());

  RunRequest r;
  r.experiment = "tiny-gpt";
  r.data_dir = corpus().train_dir;
  r.tokenizer = corpus().tokenizer;
  r.overrides = {"model.vocab_size=256"};
  StatusOr<Config> small = resolve_config(r);
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("model.vocab_size"), std::string::npos);
  r.overrides = {"model.no_such_key=1"};
  EXPECT_EQ(resolve_config(r).status().code(), StatusCode::kInvalidArgument);
}

// The mesh of a job: the launcher's shapes when given, else the config's, derived for CPU ranks
// (each node one ICI domain), with errors naming the numbers.
// AX_CPU_THREADS wins; unset or empty (a wrapper's `export AX_CPU_THREADS=`), the ranks of a node
// share its cores, and one rank takes them all (0).
TEST(CpuThreads, FromTheKnobElseSharedAmongTheNodesRanks) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  for (const char* unset : {static_cast<const char*>(""), static_cast<const char*>(nullptr)}) {
    if (unset == nullptr) {
      unsetenv("AX_CPU_THREADS");
    } else {
      setenv("AX_CPU_THREADS", unset, 1);
    }
    EXPECT_EQ(*cpu_threads(1), 0);
    EXPECT_EQ(*cpu_threads(2), std::max(1, cores / 2));
    EXPECT_EQ(*cpu_threads(4 * cores), 1);
  }
  setenv("AX_CPU_THREADS", "3", 1);
  EXPECT_EQ(*cpu_threads(2), 3);
  setenv("AX_CPU_THREADS", "three", 1);
  EXPECT_FALSE(cpu_threads(2).ok());
  unsetenv("AX_CPU_THREADS");
}

TEST(ResolveMesh, FromTheLauncherOrTheConfig) {
  job::JobContext ctx;
  ctx.world = 8;
  ctx.num_nodes = 2;
  ctx.rank = 5;
  MeshConfig mesh;  // auto, auto
  StatusOr<comm::MeshCoords> c = resolve_mesh(ctx, mesh);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::tuple(c->data, c->fsdp, c->tensor), std::tuple(2, 4, 1));
  EXPECT_EQ(std::tuple(c->d, c->f, c->t), std::tuple(1, 1, 0));
  mesh.ici = "1,-1,2";
  c = resolve_mesh(ctx, mesh);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::tuple(c->data, c->fsdp, c->tensor), std::tuple(2, 2, 2));
  mesh.ici = "1,3,1";  // 3 of a node's 4 ranks
  c = resolve_mesh(ctx, mesh);
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("1,3,1"), std::string::npos) << c.status().message();
  ctx.ici_mesh = "1,2,2";
  ctx.dcn_mesh = "2,1,1";
  c = resolve_mesh(ctx, mesh);  // the launcher's shapes win over the config
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::tuple(c->data, c->fsdp, c->tensor), std::tuple(2, 2, 2));
  ctx.dcn_mesh = "1,1,1";
  EXPECT_FALSE(resolve_mesh(ctx, mesh).ok());  // 4 ranks for a job of 8
}

// Issue 25: a pipeline axis gives every rank its stage (the slowest axis); issue 26: a seq axis
// gives every rank its slice (between fsdp and tensor).
TEST(ResolveMesh, PlacesPipelineStagesAndSeqSlices) {
  job::JobContext ctx;
  ctx.world = 16;
  ctx.num_nodes = 2;
  ctx.rank = 3;
  MeshConfig mesh;
  ctx.ici_mesh = "1,1,8,1,1";  // the five-number form with pipeline 1, seq 1 is today's mesh
  ctx.dcn_mesh = "1,2,1,1,1";
  StatusOr<comm::MeshCoords> c = resolve_mesh(ctx, mesh);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::tuple(c->data, c->fsdp, c->tensor), std::tuple(2, 8, 1));
  ctx.dcn_mesh = "2,1,1,1,1";
  ctx.rank = 11;
  c = resolve_mesh(ctx, mesh);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::tuple(c->pipeline, c->data, c->fsdp, c->tensor), std::tuple(2, 1, 8, 1));
  EXPECT_EQ(std::tuple(c->p, c->f), std::tuple(1, 3));
  ctx.ici_mesh = "1,1,2,2,2";
  ctx.dcn_mesh = "2,1,1";
  ctx.rank = 13;  // d=1 f=1 s=0 t=1
  c = resolve_mesh(ctx, mesh);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(std::tuple(c->data, c->fsdp, c->seq, c->tensor), std::tuple(2, 2, 2, 2));
  EXPECT_EQ(std::tuple(c->d, c->f, c->s, c->t), std::tuple(1, 1, 0, 1));
}

// What a seq axis is not built for is refused in one line naming what to change, before any
// communicator is built (setup_distributed calls it first).
TEST(ResolveMesh, SeqLayoutsNotBuiltAreRefused) {
  Config config = *make_experiment("tiny-llama");
  config.train.seq_len = 64;
  const comm::MeshCoords seq2 = comm::MeshCoords::of(0, 1, 2, 2, 1, /*seq=*/2);
  EXPECT_TRUE(check_seq_layout(config, seq2).ok());
  EXPECT_TRUE(check_seq_layout(config, comm::MeshCoords::of(0, 1, 1, 1, 1, 4)).ok());
  config.train.seq_len = 30;
  Status s = check_seq_layout(config, comm::MeshCoords::of(0, 1, 1, 1, 1, 4));
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(
      s.message(),
      "train.seq_len=30 does not split over the seq axis of 4 ranks: make it a multiple of 4");
  EXPECT_TRUE(check_seq_layout(config, comm::MeshCoords::of(0, 1, 1, 1)).ok());  // seq 1
  // Pipeline stages and dropout compose with a seq axis.
  config.train.seq_len = 64;
  EXPECT_TRUE(check_seq_layout(config, comm::MeshCoords::of(0, 1, 1, 1, 2, 2)).ok());
  config.model.dropout = 0.1;
  EXPECT_TRUE(check_seq_layout(config, seq2).ok());
  config = *make_experiment("tiny-t5");
  s = check_seq_layout(config, seq2);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_EQ(s.message(),
            "seq=2: sequence sharding is built for the decoder-only families (gpt, llama), not "
            "for model.family=t5 yet (issue 26): train t5 with a mesh of seq 1");
}

// What pipeline stages are not built for is refused in one line naming what to change.
TEST(ResolveMesh, PipelineLayoutsNotBuiltAreRefused) {
  Config config = *make_experiment("tiny-gpt");
  config.model.num_layers = 4;
  EXPECT_TRUE(check_pipeline_layout(config, comm::MeshCoords::of(0, 2, 1, 2, 4)).ok());
  EXPECT_TRUE(check_pipeline_layout(config, comm::MeshCoords::of(0, 1, 2, 1, 1)).ok());
  // FSDP inside a stage is built (sharded_train_test's PipelineEquivalence runs it).
  EXPECT_TRUE(check_pipeline_layout(config, comm::MeshCoords::of(0, 1, 2, 1, 2)).ok());
  Status s = check_pipeline_layout(config, comm::MeshCoords::of(0, 1, 1, 1, 8));
  EXPECT_EQ(s.message(),
            "pipeline=8 stages need at least as many layers, and model.num_layers=4: use a smaller "
            "pipeline axis or more layers");
  // T5's stages cut its encoder's and decoder's layers as one sequence: tiny-t5's 2 + 2 make 4
  // stages, not 8.
  config = *make_experiment("tiny-t5");
  EXPECT_TRUE(check_pipeline_layout(config, comm::MeshCoords::of(0, 1, 1, 1, 4)).ok());
  s = check_pipeline_layout(config, comm::MeshCoords::of(0, 1, 1, 1, 8));
  EXPECT_EQ(s.message(),
            "pipeline=8 stages need at least as many layers, and model.num_layers=2 and "
            "model.num_decoder_layers=2 (4 layers in all): use a smaller pipeline axis or more "
            "layers");
}

TEST(TrainLoop, TwentyStepsOnRealTextLowerTheLoss) {
  const Config config = corpus_config("tiny-gpt", {});
  const std::string dir = new_dir("loop-20");
  TrainRun run = train_run(config, dir);
  ASSERT_TRUE(run.status.ok()) << run.status.to_string();
  EXPECT_EQ(run.outcome, TrainOutcome::kFinished);
  ASSERT_EQ(run.steps.size(), 20u);
  for (const StepResult& r : run.steps) ASSERT_TRUE(std::isfinite(r.loss)) << r.step;
  EXPECT_NEAR(run.steps[0].loss, std::log(500.0), 0.3);
  EXPECT_LT(mean(run.steps, 15, 20), mean(run.steps, 0, 5) - 0.3) << run.out;

  EXPECT_NE(run.out.find("device: cpu"), std::string::npos);
  EXPECT_NE(run.out.find("validation: " + corpus().val_dir), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("eval step 10 | val loss"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("step 20/20 | loss"), std::string::npos) << run.out;
  EXPECT_TRUE(fs::exists(dir + "/config.json"));
  const std::string metrics = data::testing::read_file(dir + "/metrics.jsonl");
  EXPECT_NE(metrics.find("\"val_loss\""), std::string::npos);
  CheckpointManager checkpoints(dir, 3);
  auto latest = checkpoints.latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, std::optional<int64_t>(20));
  // Every run directory keeps its resolved config; a second call has nothing left to do.
  TrainRun again = train_run(config, dir);
  ASSERT_TRUE(again.status.ok()) << again.status.to_string();
  EXPECT_TRUE(again.steps.empty());
}

// Returns the uninterrupted run's output.
std::string expect_bit_exact_resume(const std::vector<std::string>& overrides,
                                    const std::string& experiment = "tiny-gpt",
                                    bool seq2seq = false) {
  std::vector<std::string> o = overrides;
  o.insert(o.end(), {"train.max_steps=8", "train.eval_every=4", "train.checkpoint_every=0"});
  const Config config =
      seq2seq ? testing::seq2seq_config(experiment, o) : corpus_config(experiment, o);
  const std::string whole = new_dir("resume-a"), split = new_dir("resume-b");
  TrainRun a = train_run(config, whole);
  EXPECT_TRUE(a.status.ok()) << a.status.to_string();
  TrainRun b1 = train_run(config, split, 3);
  EXPECT_TRUE(b1.status.ok()) << b1.status.to_string();
  EXPECT_EQ(b1.outcome, TrainOutcome::kStopped);
  TrainRun b2 = train_run(config, split);
  EXPECT_TRUE(b2.status.ok()) << b2.status.to_string();
  EXPECT_NE(b2.out.find("resumed from step 3"), std::string::npos) << b2.out;

  std::vector<StepResult> b = b1.steps;
  b.insert(b.end(), b2.steps.begin(), b2.steps.end());
  EXPECT_EQ(a.steps.size(), 8u);
  EXPECT_EQ(b.size(), 8u);
  for (size_t i = 0; i < std::min<size_t>(8, std::min(a.steps.size(), b.size())); ++i) {
    EXPECT_EQ(a.steps[i].step, b[i].step);
    EXPECT_EQ(a.steps[i].loss, b[i].loss) << "step " << i + 1;  // exact
    EXPECT_EQ(a.steps[i].grad_norm, b[i].grad_norm) << "step " << i + 1;
  }
  // And the final weights and optimizer state are identical.
  auto sa = CheckpointManager(whole, 3).load(8);
  auto sb = CheckpointManager(split, 3).load(8);
  EXPECT_TRUE(sa.ok() && sb.ok());
  if (!sa.ok() || !sb.ok()) return a.out;
  EXPECT_EQ(sa->tensors.size(), sb->tensors.size());
  for (size_t i = 0; i < std::min(sa->tensors.size(), sb->tensors.size()); ++i) {
    EXPECT_EQ(sa->tensors[i].data, sb->tensors[i].data) << sa->tensors[i].name;
  }
  return a.out;
}

TEST(TrainLoop, ResumeIsBitExact) { expect_bit_exact_resume({}); }
TEST(TrainLoop, ResumeIsBitExactWithTwoMicroBatches) {
  expect_bit_exact_resume({"NUM_MICROBATCHES=2"});
}
// Fine-tuning on seq2seq examples (packed, two micro-batches of rows with different numbers
// of targets): the packer's state resumes bit-exactly, and validation packs the sibling val set.
TEST(TrainLoop, T5FineTuningResumesBitExactAndValidates) {
  const std::string out = expect_bit_exact_resume({"NUM_MICROBATCHES=2"}, "tiny-t5", true);
  EXPECT_NE(out.find("tokens of (inputs, targets) examples, packed"), std::string::npos) << out;
  EXPECT_NE(out.find("eval step 4 | val loss"), std::string::npos) << out;
  EXPECT_EQ(out.find("val loss nan"), std::string::npos) << out;
}
TEST(TrainLoop, InstructionTuningResumesBitExactAndValidates) {
  const std::string out = expect_bit_exact_resume({"NUM_MICROBATCHES=2"}, "tiny-llama", true);
  EXPECT_NE(out.find("tokens of (prompt, response) examples, packed"), std::string::npos) << out;
  EXPECT_NE(out.find("eval step 8 | val loss"), std::string::npos) << out;
}

TEST(TrainLoop, ValidationOfAnotherKindIsRefused) {
  const Config config = testing::seq2seq_config(
      "tiny-gpt", {"train.max_steps=2", "data.validation_dir=" + corpus().val_dir});
  TrainRun run = train_run(config, new_dir("ft-val-kind"));
  EXPECT_EQ(run.status.code(), StatusCode::kFailedPrecondition) << run.status.to_string();
  EXPECT_NE(run.status.message().find("is text, the training data"), std::string::npos)
      << run.status.to_string();
}

TEST(TrainLoop, ResumeIsBitExactForLlama) {
  const Config config = corpus_config("tiny-llama", {"train.max_steps=4"});
  const std::string whole = new_dir("resume-llama-a"), split = new_dir("resume-llama-b");
  TrainRun a = train_run(config, whole);
  TrainRun b1 = train_run(config, split, 2);
  TrainRun b2 = train_run(config, split);
  ASSERT_TRUE(a.status.ok() && b1.status.ok() && b2.status.ok()) << b2.status.to_string();
  ASSERT_EQ(a.steps.size(), 4u);
  ASSERT_EQ(b2.steps.size(), 2u);
  EXPECT_EQ(a.steps[2].loss, b2.steps[0].loss);
  EXPECT_EQ(a.steps[3].loss, b2.steps[1].loss);
}

// The CUDA backend's dtype plan on the CPU (cpu-bf16): 200 steps of tiny-gpt and tiny-llama
// follow the f32 curve within bf16 noise, and the curve is not the f32 one (the plan is in
// effect). The tolerance and the measured differences: docs/cuda-backend.md.
constexpr double kBf16CurveTolerance = 0.01;  // relative, per step

class Bf16Curve : public ::testing::TestWithParam<std::string> {};

TEST_P(Bf16Curve, FollowsTheF32CurveFor200Steps) {
  const Config config =
      corpus_config(GetParam(), {"train.max_steps=200", "train.eval_every=0",
                                 "train.checkpoint_every=0", "train.log_every=50"});
  TrainRun f32 = train_run(config, new_dir("curve-f32"), 0, "cpu");
  TrainRun bf16 = train_run(config, new_dir("curve-bf16"), 0, "cpu-bf16");
  ASSERT_TRUE(f32.status.ok() && bf16.status.ok()) << bf16.status.to_string();
  ASSERT_EQ(f32.steps.size(), 200u);
  ASSERT_EQ(bf16.steps.size(), 200u);
  EXPECT_NE(bf16.out.find("device: cpu-bf16"), std::string::npos) << bf16.out;
  double worst = 0, differing = 0;
  for (size_t i = 0; i < 200; ++i) {
    const double a = f32.steps[i].loss, b = bf16.steps[i].loss;
    ASSERT_TRUE(std::isfinite(b)) << "step " << i + 1;
    worst = std::max(worst, std::abs(a - b) / a);
    differing += a != b ? 1 : 0;
    EXPECT_NEAR(b, a, kBf16CurveTolerance * a) << "step " << i + 1;
  }
  EXPECT_GT(differing, 100) << "the bf16 curve is the f32 one: the plan is not in effect";
  EXPECT_LT(mean(bf16.steps, 190, 200), mean(bf16.steps, 0, 10) - 1.0);
  std::printf(
      "%s: 200 steps, f32 %.4f -> %.4f, cpu-bf16 %.4f -> %.4f, largest relative "
      "difference %.3g, %d steps differ\n",
      GetParam().c_str(), f32.steps[0].loss, f32.steps[199].loss, bf16.steps[0].loss,
      bf16.steps[199].loss, worst, static_cast<int>(differing));
}

INSTANTIATE_TEST_SUITE_P(Models, Bf16Curve, ::testing::Values("tiny-gpt", "tiny-llama"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = c == '-' ? '_' : c;
                           return n;
                         });

// Checkpoints hold the f32 masters; the bf16 compute copy is rebuilt from them on resume.
TEST(TrainLoop, ResumeIsBitExactInTheBf16Plan) {
  const Config config = corpus_config("tiny-llama", {"train.max_steps=4"});
  const std::string whole = new_dir("resume-bf16-a"), split = new_dir("resume-bf16-b");
  TrainRun a = train_run(config, whole, 0, "cpu-bf16");
  TrainRun b1 = train_run(config, split, 2, "cpu-bf16");
  TrainRun b2 = train_run(config, split, 0, "cpu-bf16");
  ASSERT_TRUE(a.status.ok() && b1.status.ok() && b2.status.ok()) << b2.status.to_string();
  ASSERT_EQ(a.steps.size(), 4u);
  ASSERT_EQ(b2.steps.size(), 2u);
  EXPECT_EQ(a.steps[2].loss, b2.steps[0].loss);
  EXPECT_EQ(a.steps[3].loss, b2.steps[1].loss);
}

TEST(TrainLoop, MicroBatchesMustDivideTheGlobalBatch) {
  const Config config = corpus_config("tiny-gpt", {"NUM_MICROBATCHES=3"});
  TrainRun run = train_run(config, new_dir("micro"));
  EXPECT_EQ(run.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(run.status.message().find("NUM_MICROBATCHES (train.num_microbatches = 3)"),
            std::string::npos)
      << run.status.message();
  EXPECT_NE(run.status.message().find("GLOBAL_BATCH = 4"), std::string::npos);
}

// Flips one byte in the middle of every safetensors file of a checkpoint directory.
void corrupt(const std::string& step_dir) {
  int corrupted = 0;
  for (const auto& entry : fs::directory_iterator(step_dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    const auto size = static_cast<std::streamoff>(fs::file_size(entry.path()));
    f.seekg(size / 2);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x5a);
    f.seekp(size / 2);
    f.write(&c, 1);
    ++corrupted;
  }
  ASSERT_GT(corrupted, 0) << "no safetensors file in " << step_dir;
}

// Three ways a checkpoint directory goes bad, with the file and the check the error names.
struct CheckpointDamage {
  const char* what;
  void (*apply)(const std::string& step_dir);
  const char* file;
  const char* check;
};
const CheckpointDamage kCheckpointDamages[] = {
    {"flipped bytes in a tensor file", [](const std::string& d) { corrupt(d); },
     "rank_00000.safetensors", "does not match"},
    {"a deleted file", [](const std::string& d) { fs::remove(d + "/loader.json"); }, "loader.json",
     "missing"},
    {"truncated metadata", [](const std::string& d) { fs::resize_file(d + "/tensors.json", 7); },
     "tensors.json", "truncated"},
};

// Checkpoints at steps 2 and 4, the newest damaged: the run resumes from step 2, moves step 4
// aside, says so, and trains the losses of an uninterrupted run from step 3 on.
TEST(TrainLoop, CorruptNewestCheckpointFallsBackToTheOlderOne) {
  const Config config = corpus_config(
      "tiny-gpt", {"train.max_steps=6", "train.checkpoint_every=2", "train.eval_every=0"});
  TrainRun whole = train_run(config, new_dir("fallback-whole"));
  ASSERT_TRUE(whole.status.ok()) << whole.status.to_string();
  ASSERT_EQ(whole.steps.size(), 6u);
  for (const CheckpointDamage& damage : kCheckpointDamages) {
    SCOPED_TRACE(damage.what);
    const std::string dir = new_dir("fallback");
    ASSERT_TRUE(train_run(config, dir, 4).status.ok());
    CheckpointManager checkpoints(dir, 3);
    damage.apply(checkpoints.step_dir(4));
    TrainRun resumed = train_run(config, dir);
    ASSERT_TRUE(resumed.status.ok()) << resumed.status.to_string();
    EXPECT_NE(resumed.out.find("resumed from step 2"), std::string::npos) << resumed.out;
    EXPECT_NE(resumed.out.find("moved aside (failed verification, see the warning above): " +
                               checkpoints.step_dir(4) + ".corrupt-"),
              std::string::npos)
        << resumed.out;
    ASSERT_EQ(resumed.steps.size(), 4u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(resumed.steps[i].step, whole.steps[i + 2].step);
      EXPECT_EQ(resumed.steps[i].loss, whole.steps[i + 2].loss) << "step " << i + 3;  // exact
    }
    size_t moved = 0;
    for (const auto& entry : fs::directory_iterator(dir + "/checkpoints")) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step_00000004.corrupt-", 0) != 0) continue;
      ++moved;
      const std::string reason = data::testing::read_file(entry.path().string() + "/CORRUPT");
      EXPECT_NE(reason.find(damage.file), std::string::npos) << reason;
      EXPECT_NE(reason.find(damage.check), std::string::npos) << reason;
    }
    EXPECT_EQ(moved, 1u);
    // Step 4 was trained and saved again, from step 2's state.
    EXPECT_EQ(*checkpoints.latest(), std::optional<int64_t>(6));
    EXPECT_TRUE(checkpoints.load(4).ok());
  }
}

// train.resume_on_corrupt=refuse: today's strict refusal, naming the checkpoint and the check.
TEST(TrainLoop, CorruptCheckpointWithRefuseIsAnError) {
  const Config config = corpus_config("tiny-gpt", {"train.resume_on_corrupt=refuse"});
  const std::string dir = new_dir("corrupt-refuse");
  ASSERT_TRUE(train_run(config, dir, 2).status.ok());
  const std::string step_dir = CheckpointManager(dir, 3).step_dir(2);
  corrupt(step_dir);
  TrainRun run = train_run(config, dir);
  EXPECT_EQ(run.status.code(), StatusCode::kDataLoss) << run.status.to_string();
  const std::string message = run.status.message();
  EXPECT_NE(message.find("train.resume_on_corrupt=refuse"), std::string::npos) << message;
  EXPECT_NE(message.find(step_dir + " failed verification"), std::string::npos) << message;
  EXPECT_NE(message.find("rank_00000.safetensors: XXH64"), std::string::npos) << message;
  EXPECT_TRUE(run.steps.empty());
  EXPECT_TRUE(fs::exists(step_dir + "/COMMIT"));
}

// Every checkpoint corrupt: moved aside, and the run stops instead of starting over from step 0,
// also when started again (a requeue).
TEST(TrainLoop, AllCheckpointsCorruptIsAnError) {
  const Config config = corpus_config("tiny-gpt", {});
  const std::string dir = new_dir("corrupt-all");
  ASSERT_TRUE(train_run(config, dir, 2).status.ok());
  corrupt(CheckpointManager(dir, 3).step_dir(2));
  for (int start = 0; start < 2; ++start) {
    TrainRun run = train_run(config, dir);
    EXPECT_EQ(run.status.code(), StatusCode::kDataLoss) << run.status.to_string();
    EXPECT_NE(run.status.message().find("no valid checkpoint left"), std::string::npos)
        << run.status.message();
    EXPECT_NE(run.status.message().find("step_00000002.corrupt-"), std::string::npos)
        << run.status.message();
    EXPECT_TRUE(run.steps.empty());
  }
}

// restore_state checks everything before it writes anything.
TEST(RestoreState, IsAllOrNothing) {
  const Config config = corpus_config("tiny-gpt", {});
  auto be = make_cpu_backend(2);
  auto make = [&](uint64_t seed) {
    auto model = Model::create(config.model, corpus().vocab, 2, 16, be.get());
    EXPECT_TRUE(model.ok());
    (*model)->init(seed);
    return std::move(*model);
  };
  auto source = make(1);
  auto source_opt = AdamW::create(config.optim, 10, &source->store());
  ASSERT_TRUE(source_opt.ok());
  TrainProgress progress;
  progress.step = 5;
  progress.tokens_seen = 640;
  progress.loader = {1, 17};
  CheckpointState state = capture_state(config, source->store(), **source_opt, progress);

  auto target = make(2);
  auto target_opt = AdamW::create(config.optim, 10, &target->store());
  ASSERT_TRUE(target_opt.ok());
  const std::vector<float> before = param(*target, "wte");
  TrainProgress restored;

  CheckpointState missing = state;
  missing.tensors.pop_back();  // adam_v of the last parameter
  Status s = restore_state(missing, config, &target->store(), target_opt->get(), &restored);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("adam_v/"), std::string::npos) << s.message();
  EXPECT_EQ(param(*target, "wte"), before);
  EXPECT_EQ(restored.step, 0);

  CheckpointState bad_blob = state;
  bad_blob.blobs["loader.json"] = "{\"epoch\": -1}";
  EXPECT_EQ(restore_state(bad_blob, config, &target->store(), target_opt->get(), &restored).code(),
            StatusCode::kDataLoss);
  EXPECT_EQ(param(*target, "wte"), before);

  Config other = config;
  other.model.num_layers = 3;
  CheckpointState other_model = capture_state(other, source->store(), **source_opt, progress);
  s = restore_state(other_model, config, &target->store(), target_opt->get(), &restored);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("model.num_layers"), std::string::npos);

  ASSERT_TRUE(restore_state(state, config, &target->store(), target_opt->get(), &restored).ok());
  EXPECT_EQ(param(*target, "wte"), param(*source, "wte"));
  EXPECT_EQ(restored.step, 5);
  EXPECT_EQ(restored.tokens_seen, 640);
  EXPECT_EQ(restored.loader, (data::LoaderState{1, 17}));
}

TEST(TrainLoop, TokenizerMismatchIsRefused) {
  RunRequest r;
  r.experiment = "tiny-gpt";
  r.data_dir = corpus().train_dir;
  r.tokenizer = corpus().other_tokenizer;
  StatusOr<Config> config = resolve_config(r);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  TrainRun run = train_run(*config, new_dir("mismatch"));
  EXPECT_EQ(run.status.code(), StatusCode::kFailedPrecondition) << run.status.to_string();
  EXPECT_NE(run.status.message().find("training data"), std::string::npos);
  EXPECT_TRUE(run.steps.empty());
}

TEST(TrainLoop, NanLossStopsAndKeepsTheLastCheckpoint) {
  const Config config =
      corpus_config("tiny-gpt", {"optim.lr=1e30", "optim.grad_clip=0", "train.checkpoint_every=1"});
  const std::string dir = new_dir("nan");
  TrainRun run = train_run(config, dir);
  EXPECT_EQ(run.status.code(), StatusCode::kAborted) << run.status.to_string();
  EXPECT_NE(run.status.message().find("loss is NaN at step "), std::string::npos)
      << run.status.message();
  EXPECT_NE(run.status.message().find("Lower optim.lr"), std::string::npos);
  ASSERT_FALSE(run.steps.empty());
  CheckpointManager checkpoints(dir, 3);
  auto latest = checkpoints.latest();
  ASSERT_TRUE(latest.ok() && latest->has_value());
  EXPECT_EQ(**latest, run.steps.back().step);  // the last finite step
  EXPECT_TRUE(checkpoints.load(**latest).ok());
}

TEST(TrainLoop, ModelChangeOnResumeIsRefused) {
  const std::string dir = new_dir("model-change");
  ASSERT_TRUE(train_run(corpus_config("tiny-gpt", {"train.max_steps=2"}), dir).status.ok());
  TrainRun changed = train_run(corpus_config("tiny-gpt", {"model.num_layers=3"}), dir);
  EXPECT_EQ(changed.status.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(changed.status.message().find("model.num_layers=2"), std::string::npos)
      << changed.status.message();
  // Other keys may change: a longer run with another learning rate continues.
  TrainRun longer =
      train_run(corpus_config("tiny-gpt", {"train.max_steps=3", "optim.lr=5e-4"}), dir);
  ASSERT_TRUE(longer.status.ok()) << longer.status.to_string();
  ASSERT_EQ(longer.steps.size(), 1u);
  EXPECT_EQ(longer.steps[0].step, 3);
}

TEST(TrainLoop, FullDiskKeepsThePreviousCheckpoint) {
  const Config config = corpus_config("tiny-gpt", {"train.checkpoint_every=1"});
  const std::string dir = new_dir("full-disk");
  ASSERT_TRUE(train_run(config, dir, 2).status.ok());
  setenv("AX_CHECKPOINT_FAIL_AFTER_BYTES", "4096", 1);
  TrainRun run = train_run(config, dir);
  unsetenv("AX_CHECKPOINT_FAIL_AFTER_BYTES");
  EXPECT_FALSE(run.status.ok());
  EXPECT_NE(run.status.message().find("checkpoint of step 3"), std::string::npos)
      << run.status.message();
  CheckpointManager checkpoints(dir, 3);
  auto latest = checkpoints.latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, std::optional<int64_t>(2));
  EXPECT_TRUE(checkpoints.load(2).ok());
}

// Background checkpoints (train.checkpoint_async, the default) hold the same bytes as the
// synchronous ones, step for step, and say what the loop waited for.
TEST(TrainLoop, BackgroundCheckpointsEqualSynchronousOnes) {
  const std::vector<std::string> o = {"train.max_steps=6", "train.checkpoint_every=2",
                                      "train.eval_every=0"};
  std::vector<std::string> sync = o;
  sync.push_back("train.checkpoint_async=false");
  const std::string bg = new_dir("ckpt-background"), fg = new_dir("ckpt-sync");
  TrainRun a = train_run(corpus_config("tiny-gpt", o), bg);
  TrainRun b = train_run(corpus_config("tiny-gpt", sync), fg);
  ASSERT_TRUE(a.status.ok()) << a.status.to_string();
  ASSERT_TRUE(b.status.ok()) << b.status.to_string();
  EXPECT_NE(a.out.find("in the background; training paused"), std::string::npos) << a.out;
  EXPECT_EQ(b.out.find("in the background"), std::string::npos) << b.out;
  for (int64_t step : {2, 4, 6}) {
    auto sa = CheckpointManager(bg, 3).load(step);
    auto sb = CheckpointManager(fg, 3).load(step);
    ASSERT_TRUE(sa.ok()) << sa.status().to_string();
    ASSERT_TRUE(sb.ok()) << sb.status().to_string();
    ASSERT_EQ(sa->tensors.size(), sb->tensors.size());
    for (size_t i = 0; i < sa->tensors.size(); ++i) {
      EXPECT_EQ(sa->tensors[i].data, sb->tensors[i].data) << step << " " << sa->tensors[i].name;
    }
    // The blobs too, but for config.json, which records train.checkpoint_async itself.
    sa->blobs.erase("config.json");
    sb->blobs.erase("config.json");
    EXPECT_EQ(sa->blobs, sb->blobs) << step;
  }
}

// kill -9 while a background write is under way: the run resumes from the checkpoint before it
// and ends with the losses and state of an uninterrupted run.
TEST(TrainLoop, KillDuringBackgroundWriteResumesFromThePreviousCheckpoint) {
  const Config config = corpus_config(
      "tiny-gpt", {"train.max_steps=9", "train.checkpoint_every=3", "train.eval_every=0"});
  const std::string whole = new_dir("kill-whole"), killed = new_dir("kill-bg");
  TrainRun a = train_run(config, whole);
  ASSERT_TRUE(a.status.ok()) << a.status.to_string();
  ASSERT_EQ(a.steps.size(), 9u);

  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // A slow disk: each checkpoint of tiny-gpt (about 1.3 MiB) takes seconds to write.
    ::setenv("AX_CHECKPOINT_WRITE_DELAY_MS", "1500", 1);
    TrainRun run = train_run(config, killed);
    ::_exit(run.status.ok() ? 0 : 1);
  }
  // Kill once step 3 is committed and step 6's files are being written.
  const fs::path root = fs::path(killed) / "checkpoints";
  bool writing_six = false;
  for (int i = 0; i < 6000 && !writing_six; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::error_code ec;
    if (!fs::exists(root / "step_00000003" / "COMMIT", ec)) continue;
    for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      writing_six = writing_six || name.rfind("step_00000006.tmp-", 0) == 0;
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(writing_six) << "step 6's write never started";
  ASSERT_TRUE(WIFSIGNALED(status)) << "the run ended before the kill";

  auto latest = CheckpointManager(killed, 3).latest();
  ASSERT_TRUE(latest.ok());
  EXPECT_EQ(*latest, std::optional<int64_t>(3));
  TrainRun b = train_run(config, killed);
  ASSERT_TRUE(b.status.ok()) << b.status.to_string();
  EXPECT_NE(b.out.find("resumed from step 3"), std::string::npos) << b.out;
  ASSERT_EQ(b.steps.size(), 6u);
  for (size_t i = 0; i < b.steps.size(); ++i) {
    EXPECT_EQ(b.steps[i].step, a.steps[i + 3].step);
    EXPECT_EQ(b.steps[i].loss, a.steps[i + 3].loss) << "step " << b.steps[i].step;  // exact
  }
  auto sa = CheckpointManager(whole, 3).load(9);
  auto sb = CheckpointManager(killed, 3).load(9);
  ASSERT_TRUE(sa.ok() && sb.ok());
  ASSERT_EQ(sa->tensors.size(), sb->tensors.size());
  for (size_t i = 0; i < sa->tensors.size(); ++i) {
    EXPECT_EQ(sa->tensors[i].data, sb->tensors[i].data) << sa->tensors[i].name;
  }
}

// A run that died after its last checkpoint redoes the steps after it: metrics.jsonl keeps one
// record of each step (the redone ones), not two.
TEST(TrainLoop, MetricsAfterARestartCountEachStepOnce) {
  const Config config = corpus_config(
      "tiny-gpt", {"train.max_steps=6", "train.checkpoint_every=3", "train.eval_every=3"});
  const std::string dir = new_dir("metrics-restart");
  ASSERT_TRUE(train_run(config, dir).status.ok());
  // As if the process had died between step 6's records and its checkpoint.
  fs::remove_all(fs::path(dir) / "checkpoints" / "step_00000006");
  TrainRun again = train_run(config, dir);
  ASSERT_TRUE(again.status.ok()) << again.status.to_string();
  ASSERT_NE(again.out.find("resumed from step 3"), std::string::npos) << again.out;
  std::ifstream in(fs::path(dir) / "metrics.jsonl");
  std::map<int64_t, int> train_records, eval_records;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto step_at = line.find("\"step\":");
    ASSERT_NE(step_at, std::string::npos) << line;
    const int64_t step = std::stoll(line.substr(step_at + 7));
    if (line.find("\"loss\"") != std::string::npos) ++train_records[step];
    if (line.find("\"val_loss\"") != std::string::npos) ++eval_records[step];
  }
  EXPECT_EQ(train_records.size(), 6u);
  for (const auto& [step, n] : train_records) EXPECT_EQ(n, 1) << "step " << step;
  EXPECT_EQ(eval_records, (std::map<int64_t, int>{{3, 1}, {6, 1}}));
}

TEST(Sampler, PickToken) {
  const std::vector<float> logits = {0.f, 3.f, 1.f, 2.9f};
  EXPECT_EQ(pick_token(logits, 0.0, 0, 0.7), 1);
  EXPECT_EQ(pick_token(logits, 1.0, 1, 0.99), 1);  // top-1 is greedy
  for (double u : {0.0, 0.3, 0.6, 0.99}) {
    const int32_t t = pick_token(logits, 1.0, 2, u);
    EXPECT_TRUE(t == 1 || t == 3);
  }
  // A very low temperature concentrates on the argmax; a high one spreads.
  EXPECT_EQ(pick_token(logits, 1e-3, 0, 0.999), 1);
  EXPECT_EQ(pick_token(logits, 100.0, 0, 0.01), 1);  // draws follow the sorted order
  EXPECT_EQ(pick_token(logits, 100.0, 0, 0.999), 0);
}

TEST(Sampler, ContinuesAPromptFromTheNewestCheckpoint) {
  const std::string dir = new_dir("sample");
  ASSERT_TRUE(train_run(corpus_config("tiny-gpt", {"train.max_steps=3"}), dir).status.ok());
  SampleOptions o;
  o.run_dir = dir;
  o.prompts = {"The man"};
  o.tokens = 12;
  o.temperature = 0;
  o.device = "cpu";
  std::ostringstream log;
  StatusOr<std::vector<std::string>> a = sample_text(o, log);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ(a->front().rfind("The man", 0), 0u) << a->front();
  EXPECT_NE(log.str().find("step_00000003"), std::string::npos) << log.str();
  EXPECT_EQ(*sample_text(o, log), *a);  // greedy is deterministic
  o.use_cache = false;
  EXPECT_EQ(*sample_text(o, log), *a);  // the same text without the key/value cache
  o.use_cache = true;
  o.temperature = 1.0;
  o.prompts = {"", "And the"};
  EXPECT_TRUE(sample_text(o, log).ok());
  o.run_dir = new_dir("sample-empty");
  EXPECT_EQ(sample_text(o, log).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ax::train
