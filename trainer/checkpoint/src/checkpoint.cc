// CheckpointManager: the single-process save (both protocol steps), latest(), load() and
// retention. Layout and protocol: docs/checkpoint-format.md.

#include "ax/trainer/checkpoint/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>

#include "ax/common/logging.h"
#include "checkpoint_internal.h"

namespace ax::train {

namespace {

namespace fs = std::filesystem;
using ckpt::join_path;

constexpr const char* kStepPrefix = "step_";
constexpr const char* kTmpMarker = ".tmp-";

// "step_00000120".
std::string step_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "%s%08lld", kStepPrefix, static_cast<long long>(step));
  return name;
}

bool is_committed(const std::string& dir) {
  std::error_code ec;
  return fs::is_regular_file(join_path(dir, ckpt::kCommitFile), ec);
}

// The entries of the checkpoints directory: committed steps (newest first) and the directories a
// crash left behind (temporary ones, and step directories without COMMIT).
struct Listing {
  std::vector<int64_t> committed;
  std::vector<std::string> leftovers;
};

StatusOr<Listing> list_checkpoints(const std::string& root) {
  Listing out;
  std::error_code ec;
  if (!fs::exists(root, ec)) return out;
  fs::directory_iterator it(root, ec);
  if (ec) return IoError(str_cat("list ", root), ec.value());
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (!it->is_directory(ec)) continue;
    const std::string name = it->path().filename().string();
    if (std::optional<int64_t> step = ckpt::parse_step_name(name)) {
      if (is_committed(it->path().string())) {
        out.committed.push_back(*step);
      } else {
        out.leftovers.push_back(it->path().string());
      }
    } else if (starts_with(name, kStepPrefix) && name.find(kTmpMarker) != std::string::npos) {
      out.leftovers.push_back(it->path().string());
    }
  }
  if (ec) return IoError(str_cat("list ", root), ec.value());
  std::sort(out.committed.begin(), out.committed.end(), std::greater<>());
  return out;
}

// After a successful save: removes what crashes left and the oldest committed steps beyond
// `keep` (never the one just saved). Failures only warn; the new checkpoint is already safe.
void prune(const std::string& root, int64_t keep, int64_t saved) {
  StatusOr<Listing> listing = list_checkpoints(root);
  if (!listing.ok()) {
    AX_LOG(kWarn, "checkpoint") << "not pruning: " << listing.status().to_string();
    return;
  }
  for (const std::string& dir : listing->leftovers) {
    AX_LOG(kInfo, "checkpoint") << "removing incomplete checkpoint " << dir;
    ckpt::remove_tree(dir);
  }
  if (keep <= 0) return;
  int64_t kept = 1;  // the step just saved, whatever its place in the order
  for (int64_t step : listing->committed) {
    if (step == saved) continue;
    if (kept < keep) {
      ++kept;
      continue;
    }
    // COMMIT goes first, so a crash midway leaves a directory that is plainly not a checkpoint.
    const std::string dir = join_path(root, step_name(step));
    if (::unlink(join_path(dir, ckpt::kCommitFile).c_str()) != 0) {
      AX_LOG(kWarn, "checkpoint") << "could not remove " << dir << ": " << std::strerror(errno);
      continue;
    }
    ckpt::remove_tree(dir);
  }
}

}  // namespace

namespace ckpt {

std::optional<int64_t> parse_step_name(const std::string& name) {
  if (!starts_with(name, kStepPrefix)) return std::nullopt;
  const std::string digits = name.substr(std::string(kStepPrefix).size());
  if (digits.empty() ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return parse_int64(digits);
}

}  // namespace ckpt

CheckpointManager::CheckpointManager(std::string run_dir, int64_t keep)
    : run_dir_(std::move(run_dir)), keep_(keep) {}

std::string CheckpointManager::step_dir(int64_t step) const {
  return join_path(join_path(run_dir_, "checkpoints"), step_name(step));
}

Status CheckpointManager::save(const CheckpointState& state) {
  return save(state, CheckpointGroup{});
}

Status CheckpointManager::save(const CheckpointState& state, const CheckpointGroup& group) {
  AX_ASSIGN_OR_RETURN(PendingSave pending, begin_save(state.step, group));
  StatusOr<std::string> written = write_files(&pending, group.rank, state);
  return finish_save(pending, written, group);
}

StatusOr<PendingSave> CheckpointManager::begin_save(int64_t step,
                                                    const CheckpointGroup& group) const {
  if (step < 0) return InvalidArgument("checkpoint step ", step, " is negative");
  const bool multi = group.world > 1;
  const std::string root = join_path(run_dir_, "checkpoints");
  // Rank 0 prepares the temporary directory and tells everyone its name (or its error).
  std::string prepared;
  if (group.rank == 0) {
    const std::string tmp = str_cat(step_dir(step), kTmpMarker, ::getpid());
    Status s = [&]() -> Status {
      std::error_code ec;
      if (!fs::is_directory(root, ec)) {
        fs::create_directories(root, ec);
        if (ec) return IoError(str_cat("create ", root), ec.value());
        AX_RETURN_IF_ERROR(ckpt::fsync_dir(run_dir_));
      }
      ckpt::remove_tree(tmp);
      if (::mkdir(tmp.c_str(), 0755) != 0) return IoError(str_cat("create ", tmp), errno);
      return Status::Ok();
    }();
    if (!multi) {
      if (!s.ok()) return s.with_context(str_cat("saving the checkpoint of step ", step));
      prepared = "ok " + tmp;
    } else {
      prepared = s.ok() ? "ok " + tmp : "error " + s.to_string();
    }
  }
  std::vector<std::string> names = {prepared};
  if (multi) {
    AX_ASSIGN_OR_RETURN(names, group.all_gather(prepared));
  }
  if (!starts_with(names[0], "ok ")) {
    return Status(StatusCode::kIoError,
                  str_cat("saving the checkpoint of step ", step,
                          ": rank 0: ", names[0].substr(names[0].find(' ') + 1)));
  }
  AX_ASSIGN_OR_RETURN(ckpt::WriteBudget budget, ckpt::write_budget_from_env());
  return PendingSave{step, names[0].substr(3), budget.bytes_left, budget.delay_ms_per_mib};
}

StatusOr<std::string> CheckpointManager::write_files(PendingSave* pending, int rank,
                                                     const CheckpointState& state) const {
  if (state.step != pending->step) {
    return InvalidArgument("the state of step ", state.step, " given to the save of step ",
                           pending->step);
  }
  ckpt::WriteBudget budget{pending->budget_bytes, pending->delay_ms_per_mib};
  StatusOr<ckpt::RankWrite> mine = ckpt::write_rank_files(pending->tmp_dir, rank, state, &budget);
  pending->budget_bytes = budget.bytes_left;
  if (!mine.ok()) return mine.status();
  return ckpt::rank_write_to_json(*mine);
}

Status CheckpointManager::finish_save(const PendingSave& pending,
                                      const StatusOr<std::string>& written,
                                      const CheckpointGroup& group) const {
  const bool multi = group.world > 1;
  const std::string root = join_path(run_dir_, "checkpoints");
  ckpt::WriteBudget budget{pending.budget_bytes};
  if (!multi) {
    Status s = [&]() -> Status {
      if (!written.ok()) return written.status();
      AX_ASSIGN_OR_RETURN(ckpt::RankWrite mine, ckpt::rank_write_from_json(*written));
      return ckpt::commit_checkpoint(pending.tmp_dir, step_dir(pending.step), pending.step, {mine},
                                     &budget);
    }();
    if (!s.ok()) {
      ckpt::remove_tree(pending.tmp_dir);
      return s.with_context(str_cat("saving the checkpoint of step ", pending.step));
    }
    AX_LOG(kDebug, "checkpoint") << "saved step " << pending.step << " to "
                                 << step_dir(pending.step);
    prune(root, keep_, pending.step);
    return Status::Ok();
  }
  // Every rank reports its files; rank 0 commits when every rank succeeded and tells everyone.
  AX_ASSIGN_OR_RETURN(
      std::vector<std::string> reports,
      group.all_gather(written.ok() ? "ok " + *written : "error " + written.status().to_string()));
  std::string verdict;
  if (group.rank == 0) {
    Status s = [&]() -> Status {
      std::vector<ckpt::RankWrite> writes;
      for (size_t r = 0; r < reports.size(); ++r) {
        if (!starts_with(reports[r], "ok ")) {
          const std::string why = reports[r].substr(reports[r].find(' ') + 1);
          return Status(StatusCode::kIoError, str_cat("rank ", r, ": ", why));
        }
        AX_ASSIGN_OR_RETURN(ckpt::RankWrite w, ckpt::rank_write_from_json(reports[r].substr(3)));
        writes.push_back(std::move(w));
      }
      return ckpt::commit_checkpoint(pending.tmp_dir, step_dir(pending.step), pending.step, writes,
                                     &budget);
    }();
    if (!s.ok()) ckpt::remove_tree(pending.tmp_dir);
    verdict = s.ok() ? "ok" : "error " + s.to_string();
  }
  AX_ASSIGN_OR_RETURN(std::vector<std::string> verdicts, group.all_gather(verdict));
  if (verdicts[0] != "ok") {
    return Status(StatusCode::kIoError,
                  str_cat("saving the checkpoint of step ", pending.step, ": ",
                          verdicts[0].substr(verdicts[0].find(' ') + 1)));
  }
  if (group.rank == 0) prune(root, keep_, pending.step);
  return Status::Ok();
}

StatusOr<std::vector<HostTensor>> ckpt::read_regions(const CheckpointReader& reader,
                                                     const std::string& dir,
                                                     const std::vector<TensorRegion>& regions) {
  std::map<std::string, const ckpt::TensorRecord*> by_name;
  for (const ckpt::TensorRecord& t : reader.tensors()) by_name[t.name] = &t;
  std::vector<HostTensor> out;
  for (const TensorRegion& region : regions) {
    auto it = by_name.find(region.name);
    if (it == by_name.end()) {
      return DataLoss("checkpoint ", dir, " has no tensor ", region.name);
    }
    const ckpt::TensorRecord& t = *it->second;
    if (region.offset.size() != t.shape.size() || region.shape.size() != t.shape.size()) {
      return DataLoss("tensor ", region.name, " of ", dir, " has ", t.shape.size(),
                      " dimensions, the model asks for ", region.shape.size());
    }
    int64_t n = 1;
    for (size_t k = 0; k < t.shape.size(); ++k) {
      if (region.offset[k] < 0 || region.offset[k] + region.shape[k] > t.shape[k]) {
        return DataLoss("tensor ", region.name, " of ", dir,
                        " is smaller than the model's (dimension ", k, " has ", t.shape[k], ")");
      }
      n *= region.shape[k];
    }
    HostTensor h;
    h.name = region.name;
    h.shape = region.shape;
    h.offset = region.offset;
    h.logical_shape = t.shape;
    h.data.resize(static_cast<size_t>(n));
    AX_RETURN_IF_ERROR(reader.read_region(t, region.offset, region.shape, h.data.data()));
    out.push_back(std::move(h));
  }
  return out;
}

StatusOr<CheckpointState> CheckpointManager::load(int64_t step,
                                                  const std::vector<TensorRegion>& regions) const {
  const std::string dir = step_dir(step);
  AX_ASSIGN_OR_RETURN(ckpt::CheckpointReader reader, ckpt::CheckpointReader::open(dir, step));
  CheckpointState state;
  state.step = step;
  AX_ASSIGN_OR_RETURN(state.tensors, ckpt::read_regions(reader, dir, regions));
  state.blobs = reader.blobs();
  return state;
}

StatusOr<std::optional<int64_t>> CheckpointManager::latest() const {
  AX_ASSIGN_OR_RETURN(Listing listing, list_checkpoints(join_path(run_dir_, "checkpoints")));
  if (listing.committed.empty()) return std::optional<int64_t>();
  return std::optional<int64_t>(listing.committed.front());
}

StatusOr<CheckpointState> CheckpointManager::load(int64_t step) const {
  AX_ASSIGN_OR_RETURN(ckpt::CheckpointReader reader,
                      ckpt::CheckpointReader::open(step_dir(step), step));
  CheckpointState state;
  state.step = step;
  for (const ckpt::TensorRecord& t : reader.tensors()) {
    HostTensor h;
    h.name = t.name;
    h.shape = t.shape;
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    h.data.resize(static_cast<size_t>(n));
    AX_RETURN_IF_ERROR(
        reader.read_region(t, std::vector<int64_t>(t.shape.size(), 0), t.shape, h.data.data()));
    state.tensors.push_back(std::move(h));
  }
  state.blobs = reader.blobs();
  return state;
}

}  // namespace ax::train
