// Tokenization spread over the tasks of a job (sbatch/tokenize.sub). The input files are shared
// out by bytes; each task tokenizes its files one at a time, each into a shard set of its own
// under DIR/parts/; merge_job() then joins them, in input order, into DIR: one index.json listing
// every shard. A part depends only on its file and the settings, so the merged dataset is the
// same whatever the number of tasks or nodes, and a re-run keeps every finished part
// (docs/tokenization.md).
//
//   DIR/parts/plan.json       the inputs (in order, with sizes) and the settings; every task
//                             of every run of the job checks it
//   DIR/parts/NNNNN/          input file NNNNN's shard set (complete once it has index.json)
//   DIR/parts/NNNNN.progress  "<bytes read> <bytes>" of a file being tokenized
//   DIR/index.json            written by merge_job, last: the dataset is complete
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ax/common/status.h"
#include "ax/datasets/shards/dataset_index.h"
#include "ax/datasets/text/tokenize.h"

namespace ax::data {

struct JobPlan {
  std::vector<std::string> files;  // the expanded inputs, in order
  std::vector<uint64_t> sizes;     // their sizes in bytes
  std::string settings;            // what shapes the shards, as JSON (tokenizer hash included)
};

// Which files each of `tasks` tasks tokenizes: the largest file first to the task with the
// fewest bytes so far (ties: the lower task, the earlier file). Each task's list is ascending.
std::vector<std::vector<size_t>> assign_files(const std::vector<uint64_t>& sizes, int tasks);

// The plan of options.inputs into options.output_dir: written to DIR/parts/plan.json when it is
// not there yet, else checked against it (FailedPrecondition naming what differs).
StatusOr<JobPlan> prepare_job(const TokenizeOptions& options);

struct TaskResult {
  size_t files = 0;     // assigned to the task
  size_t kept = 0;      // already finished by an earlier run
  bool merged = false;  // DIR/index.json exists: the whole job is done
};

// Task `task` of `tasks` (0 <= task < tasks): tokenizes its files that have no finished part.
// options.stop ends it early with kAborted; the files finished so far stay.
StatusOr<TaskResult> run_task(const TokenizeOptions& options, int task, int tasks);

// Joins the parts into DIR once all are finished: hard links (copies where the file system has
// none) named shard-NNNNN.axs in input order, index.json written atomically last, then
// DIR/parts removed. Safe to run again or twice at once (a lock; an existing index.json is the
// answer).
StatusOr<DatasetIndex> merge_job(const std::string& dir);

struct JobProgress {
  uint64_t total_bytes = 0;
  uint64_t done_bytes = 0;  // finished files, plus what the running ones have read
  size_t files = 0;
  size_t files_done = 0;
  bool merged = false;
};

// Where DIR's job stands (NotFound before the plan exists).
StatusOr<JobProgress> job_progress(const std::string& dir);

}  // namespace ax::data
