// CheckpointManager::resume(): the newest checkpoint every rank can load, the ones that fail
// verification moved aside on the way. Protocol and names: docs/checkpoint-format.md "Resume".

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ax/common/file_io.h"
#include "ax/common/logging.h"
#include "ax/trainer/checkpoint/checkpoint.h"
#include "checkpoint_internal.h"

namespace ax::train {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// step_00000040.corrupt-20250612T101500Z: not a step name (parse_step_name), not a leftover of
// a save (no ".tmp-"), so nothing lists, prunes or loads it again.
constexpr const char* kCorruptMarker = ".corrupt-";
// Left inside a moved directory: the reason, for whoever finds it after the log is gone.
constexpr const char* kReasonFile = "CORRUPT";

Json status_json(const Status& s) {
  return Json{{"code", static_cast<int>(s.code())}, {"message", s.message()}};
}

Status status_of(const Json& j) {
  return Status(static_cast<StatusCode>(j.at("code").get<int>()),
                j.at("message").get<std::string>());
}

// Every rank's value in rank order (one process needs no group).
StatusOr<std::vector<std::string>> gather(const CheckpointGroup& group, const std::string& value) {
  if (group.world <= 1 || !group.all_gather) return std::vector<std::string>{value};
  return group.all_gather(value);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// Renames `dir` to <dir>.corrupt-<UTC time> (-2, -3, ... if taken) and returns the new path.
StatusOr<std::string> move_aside(const std::string& dir, const std::string& reason) {
  const std::string base = str_cat(dir, kCorruptMarker, utc_now());
  std::string target = base;
  std::error_code ec;
  for (int k = 2; fs::exists(target, ec); ++k) target = str_cat(base, "-", k);
  if (std::rename(dir.c_str(), target.c_str()) != 0) {
    return IoError(str_cat("rename ", dir, " to ", target), errno);
  }
  AX_RETURN_IF_ERROR(ckpt::fsync_dir(fs::path(dir).parent_path().string()));
  // Best effort: the rename is what matters, and the log line says the same.
  write_file_atomically(join_path(target, kReasonFile), reason + "\n").ignore();
  return target;
}

// Directories moved aside by this start or an earlier one, sorted.
std::vector<std::string> moved_aside_in(const std::string& root) {
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (starts_with(name, "step_") && name.find(kCorruptMarker) != std::string::npos) {
      out.push_back(it->path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string comma_list(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

}  // namespace

StatusOr<ResumeChoice> CheckpointManager::resume(
    const std::vector<TensorRegion>& regions, const CheckpointGroup& group,
    OnCorruptCheckpoint on_corrupt,
    const std::function<Status(const CheckpointState&)>& restore) const {
  const std::string root = join_path(run_dir_, "checkpoints");
  ResumeChoice choice;
  Status rank0_error;  // a failed rename, sent to every rank with the next proposal
  while (true) {
    // 1. Rank 0 names the candidate: the newest committed step, none, or an error.
    std::string proposal;
    if (group.rank == 0) {
      Json p = {{"moved", choice.moved_aside}};
      StatusOr<std::optional<int64_t>> newest = latest();
      if (!rank0_error.ok()) {
        p["error"] = status_json(rank0_error);
      } else if (!newest.ok()) {
        p["error"] = status_json(newest.status());
      } else if (newest->has_value()) {
        p["step"] = **newest;
      } else if (std::vector<std::string> moved = moved_aside_in(root); !moved.empty()) {
        p["error"] = status_json(DataLoss(
            "no valid checkpoint left in ", root, ": ", comma_list(moved),
            " failed verification and ", moved.size() == 1 ? "was" : "were",
            " moved aside; not starting over from step 0 while they are there (move them out of ",
            root, " to start from scratch)"));
      }
      proposal = p.dump();
    }
    AX_ASSIGN_OR_RETURN(std::vector<std::string> proposals, gather(group, proposal));
    const Json p = Json::parse(proposals[0], nullptr, /*allow_exceptions=*/false);
    AX_CHECK(p.is_object() && p.contains("moved")) << proposals[0];
    choice.moved_aside = p["moved"].get<std::vector<std::string>>();
    if (p.contains("error")) return status_of(p["error"]);
    if (!p.contains("step")) return choice;
    const int64_t step = p["step"].get<int64_t>();
    const std::string dir = step_dir(step);

    // 2. Every rank loads and restores its part; the verdicts are shared, so all decide alike.
    Status mine = [&]() -> Status {
      AX_ASSIGN_OR_RETURN(CheckpointState state, load(step, regions));
      return restore(state);
    }();
    AX_ASSIGN_OR_RETURN(std::vector<std::string> verdicts,
                        gather(group, mine.ok() ? std::string() : status_json(mine).dump()));
    Status corrupt;  // the first rank's DataLoss; another error stops every rank
    for (size_t r = 0; r < verdicts.size(); ++r) {
      if (verdicts[r].empty()) continue;
      Status s = status_of(Json::parse(verdicts[r]));
      if (group.world > 1) s = s.with_context(str_cat("rank ", r));
      if (s.code() != StatusCode::kDataLoss) return s.with_context(str_cat("resuming from ", dir));
      if (corrupt.ok()) corrupt = s.with_context(str_cat(dir, " failed verification"));
    }
    if (corrupt.ok()) {
      choice.step = step;
      return choice;
    }
    if (on_corrupt == OnCorruptCheckpoint::kRefuse) return corrupt;

    // 3. Rank 0 moves it aside; the next round names the next newest.
    if (group.rank == 0) {
      StatusOr<std::string> moved = move_aside(dir, corrupt.message());
      if (moved.ok()) {
        AX_LOG(kWarn, "checkpoint") << corrupt.message() << "; moved it aside to " << *moved
                                    << " and trying the next newest checkpoint";
        choice.moved_aside.push_back(*moved);
      } else {
        rank0_error = moved.status().with_context(corrupt.message());
      }
    }
  }
}

}  // namespace ax::train
