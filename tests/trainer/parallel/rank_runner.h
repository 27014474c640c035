// The harness of the real-process training tests (sharded_train_test, seq_train_test): a mesh
// layout, and the real train loop on that many forked CPU ranks meeting over the TCP store with
// Gloo, with a fault to inject into one rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ax/trainer/config/config.h"
#include "store_stranger.h"

namespace ax::train::testing {

struct Layout {
  int data = 1, fsdp = 1, tensor = 1, pipeline = 1, seq = 1;
  int world() const { return pipeline * data * fsdp * seq * tensor; }
  // "pipeline2_data1_fsdp2_tensor1", "data1_fsdp1_seq2_tensor2" (the axes above 1 of pipeline and
  // seq only): a run directory's name.
  std::string name() const;
  // AX_ICI_MESH: data,fsdp,tensor, or pipeline,data,fsdp,seq,tensor when either is above 1.
  std::string ici() const;
};

// What to do to one rank mid-run.
struct Fault {
  int rank = -1;
  int64_t after_step = 0;
  int signal = 0;          // SIGKILL or SIGSTOP
  int64_t stop_after = 0;  // > 0: every rank asks to stop after this step (a preemption)
  bool stranger = false;   // a process without the job secret hammers the store's port throughout
};

struct RunResult {
  std::vector<double> losses;      // rank 0's, by step
  std::vector<double> grad_norms;  // rank 0's, by step
  std::vector<int> exit_codes;     // by rank (-signal when killed)
  std::vector<std::string> errs;   // stderr by rank
  std::vector<std::string> outs;   // what the train loop printed, by rank
  double seconds = 0;
  comm::testing::Stranger::Tally stranger;
};

// The whole file ("" when it cannot be read).
std::string slurp(const std::string& path);

// Trains `config` in run_dir on layout.world() forked ranks of one thread each; rank 0 writes each
// step's loss and gradient norm.
RunResult run_ranks(const Config& config, const Layout& layout, const std::string& run_dir,
                    const Fault& fault = {}, const std::string& device = "cpu");

}  // namespace ax::train::testing
