#include "ax/datasets/text/tokenize_job.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "ax/common/file_io.h"
#include "ax/common/logging.h"
#include "ax/common/strings.h"
#include "ax/datasets/text/text_source.h"
#include "ax/datasets/text/tokenizer.h"

namespace ax::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;

constexpr const char* kPlanFormat = "ax-tokenize-plan";
constexpr int kPlanVersion = 1;

std::string parts_dir(const std::string& dir) { return join_path(dir, "parts"); }
std::string plan_path(const std::string& dir) { return join_path(parts_dir(dir), "plan.json"); }

std::string numbered(const std::string& dir, size_t i, const char* suffix = "") {
  char name[32];
  std::snprintf(name, sizeof name, "%05zu%s", i, suffix);
  return join_path(parts_dir(dir), name);
}
std::string part_dir(const std::string& dir, size_t i) { return numbered(dir, i); }
std::string progress_path(const std::string& dir, size_t i) {
  return numbered(dir, i, ".progress");
}

bool exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }
bool part_done(const std::string& dir, size_t i) {
  return exists(join_path(part_dir(dir, i), kIndexFile));
}

const char* unit_name(TextUnit u) {
  return u == TextUnit::kParagraph ? "paragraph" : u == TextUnit::kFile ? "file" : "line";
}
const char* long_docs_name(LongDocs l) {
  return l == LongDocs::kTruncate ? "truncate" : l == LongDocs::kFail ? "fail" : "skip";
}

// Everything that shapes the shards of a part (the thread count does not).
Json settings_json(const TokenizeOptions& o, uint64_t tokenizer_hash) {
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016" PRIx64, tokenizer_hash);
  const TextSourceOptions& s = o.source;
  return Json{{"tokenizer_hash", hash},
              {"format", s.seq2seq ? "seq2seq" : "text"},
              {"field", s.json_field},
              {"inputs_field", s.inputs_field},
              {"targets_field", s.targets_field},
              {"text_unit", unit_name(s.text_unit)},
              {"skip_bad", s.skip_bad},
              {"max_doc_bytes", s.max_doc_bytes},
              {"long_docs", long_docs_name(s.long_docs)},
              {"split_bytes", o.split_bytes},
              {"shard_tokens", o.shard_tokens},
              {"zstd_level", o.zstd_level}};
}

Json plan_json(const JobPlan& plan) {
  Json files = Json::array();
  for (size_t i = 0; i < plan.files.size(); ++i) {
    files.push_back(Json{{"path", plan.files[i]}, {"bytes", plan.sizes[i]}});
  }
  return Json{{"format", kPlanFormat},
              {"version", kPlanVersion},
              {"settings", Json::parse(plan.settings)},
              {"files", std::move(files)}};
}

StatusOr<JobPlan> read_plan(const std::string& dir) {
  const std::string path = plan_path(dir);
  if (!exists(path)) return NotFound(dir, " holds no tokenize job (no ", path, ")");
  AX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || j.value("format", "") != kPlanFormat ||
      j.value("version", 0) != kPlanVersion || !j["settings"].is_object() ||
      !j["files"].is_array()) {
    return DataLoss(path, ": not a tokenize plan of version ", kPlanVersion);
  }
  JobPlan plan;
  plan.settings = j["settings"].dump();
  for (const Json& f : j["files"]) {
    if (!f.is_object() || !f["path"].is_string() || !f["bytes"].is_number_unsigned()) {
      return DataLoss(path, ": malformed file entry ", f.dump());
    }
    plan.files.push_back(f["path"].get<std::string>());
    plan.sizes.push_back(f["bytes"].get<uint64_t>());
  }
  return plan;
}

// Why `got` is not the plan on disk, or "" when it is.
std::string plan_difference(const JobPlan& got, const JobPlan& disk) {
  if (got.settings != disk.settings) {
    const Json a = Json::parse(got.settings), b = Json::parse(disk.settings);
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key()) || b[it.key()] != it.value()) {
        return str_cat("setting ", it.key(), " is ", it.value().dump(), " here and ",
                       b.contains(it.key()) ? b[it.key()].dump() : "absent", " in the plan");
      }
    }
    return "the settings differ";
  }
  if (got.files.size() != disk.files.size()) {
    return str_cat(got.files.size(), " input files here, ", disk.files.size(), " in the plan");
  }
  for (size_t i = 0; i < got.files.size(); ++i) {
    if (got.files[i] != disk.files[i]) {
      return str_cat("input ", i, " is ", got.files[i], " here and ", disk.files[i],
                     " in the plan");
    }
    if (got.sizes[i] != disk.sizes[i]) {
      return str_cat(got.files[i], " has ", got.sizes[i], " bytes, the plan ", disk.sizes[i]);
    }
  }
  return "";
}

StatusOr<JobPlan> make_plan(const TokenizeOptions& options) {
  AX_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, Tokenizer::load(options.tokenizer_path));
  AX_ASSIGN_OR_RETURN(std::unique_ptr<TextSource> source,
                      TextSource::open(options.inputs, options.source));
  JobPlan plan;
  plan.files = source->files();
  for (const std::string& f : plan.files) {
    struct stat st;
    if (::stat(f.c_str(), &st) != 0) return IoError(str_cat("stat ", f), errno);
    plan.sizes.push_back(static_cast<uint64_t>(st.st_size));
  }
  plan.settings = settings_json(options, tok->hash()).dump();
  return plan;
}

// A hard link, or a copy (fsynced) where the file system refuses links.
Status link_or_copy(const std::string& from, const std::string& to) {
  if (::link(from.c_str(), to.c_str()) == 0) return Status::Ok();
  if (errno != EXDEV && errno != EPERM && errno != ENOTSUP && errno != EMLINK) {
    return IoError(str_cat("link ", from, " to ", to), errno);
  }
  std::error_code ec;
  fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
  if (ec) return IoError(str_cat("copy ", from, " to ", to), ec.value());
  int fd = ::open(to.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return IoError(str_cat("fsync ", to), err);
  }
  ::close(fd);
  return Status::Ok();
}

// Removes what an interrupted merge left in DIR (no index.json names it).
Status remove_merge_leftovers(const std::string& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!ends_with(name, kShardSuffix) && !ends_with(name, ".tmp")) continue;
    if (::unlink(it->path().c_str()) != 0 && errno != ENOENT) {
      return IoError(str_cat("remove leftover ", it->path().string()), errno);
    }
  }
  if (ec) return IoError(str_cat("list ", dir), ec.value());
  return Status::Ok();
}

// Adds one part's shards (linked into DIR under their merged names) and counts to `merged`.
Status merge_part(const std::string& dir, const std::string& part, const DatasetIndex& p,
                  DatasetIndex* merged) {
  for (const ShardEntry& e : p.shards) {
    char name[32];
    std::snprintf(name, sizeof name, "shard-%05zu%s", merged->shards.size(), kShardSuffix);
    const std::string from = join_path(part, e.file);
    struct stat st;
    if (::stat(from.c_str(), &st) != 0) return IoError(str_cat("stat ", from), errno);
    if (static_cast<uint64_t>(st.st_size) != e.bytes) {
      return DataLoss(from, " has ", st.st_size, " bytes, its index says ", e.bytes);
    }
    AX_RETURN_IF_ERROR(link_or_copy(from, join_path(dir, name)));
    ShardEntry m = e;
    m.file = name;
    merged->shards.push_back(std::move(m));
    merged->num_tokens += e.num_tokens;
    merged->num_docs += e.num_docs;
  }
  merged->skipped_empty += p.skipped_empty;
  merged->skipped_bad += p.skipped_bad;
  merged->skipped_long += p.skipped_long;
  merged->truncated_long += p.truncated_long;
  merged->split_docs += p.split_docs;
  for (const auto& [set, n] : p.docs_per_set) merged->docs_per_set[set] += n;
  return Status::Ok();
}

// Every part's index, in input order; FailedPrecondition when some are unfinished.
StatusOr<std::vector<DatasetIndex>> read_parts(const std::string& dir, const JobPlan& plan) {
  std::vector<DatasetIndex> parts;
  std::vector<size_t> missing;
  for (size_t i = 0; i < plan.files.size(); ++i) {
    if (!part_done(dir, i)) {
      missing.push_back(i);
      continue;
    }
    AX_ASSIGN_OR_RETURN(DatasetIndex p, read_dataset_index(part_dir(dir, i)));
    if (!parts.empty() && (p.kind != parts[0].kind || p.tokenizer.hash != parts[0].tokenizer.hash ||
                           p.frame_tokens != parts[0].frame_tokens)) {
      return DataLoss(part_dir(dir, i),
                      " differs from the first part in kind, tokenizer or "
                      "frame size");
    }
    parts.push_back(std::move(p));
  }
  if (!missing.empty()) {
    return FailedPrecondition(missing.size(), " of ", plan.files.size(),
                              " input files are not tokenized yet (the first: ",
                              plan.files[missing[0]], "); run the job's tasks again");
  }
  return parts;
}

// File lock held for its lifetime.
class DirLock {
 public:
  static StatusOr<DirLock> take(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return IoError(str_cat("open ", path), errno);
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) {
        const int err = errno;
        ::close(fd);
        return IoError(str_cat("lock ", path), err);
      }
    }
    return DirLock(fd);
  }
  DirLock(DirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  ~DirLock() {
    if (fd_ >= 0) ::close(fd_);
  }

 private:
  explicit DirLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace

std::vector<std::vector<size_t>> assign_files(const std::vector<uint64_t>& sizes, int tasks) {
  std::vector<std::vector<size_t>> out(static_cast<size_t>(std::max(tasks, 1)));
  std::vector<size_t> order(sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sizes[a] > sizes[b]; });
  std::vector<uint64_t> load(out.size(), 0);
  for (size_t f : order) {
    const size_t t = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    load[t] += sizes[f];
    out[t].push_back(f);
  }
  for (auto& files : out) std::sort(files.begin(), files.end());
  return out;
}

StatusOr<JobPlan> prepare_job(const TokenizeOptions& options) {
  if (options.output_dir.empty()) return InvalidArgument("no output directory given");
  AX_ASSIGN_OR_RETURN(JobPlan plan, make_plan(options));
  std::error_code ec;
  fs::create_directories(parts_dir(options.output_dir), ec);
  if (ec) return IoError(str_cat("create directory ", parts_dir(options.output_dir)), ec.value());
  const std::string path = plan_path(options.output_dir);
  if (!exists(path)) {
    // Every task writes the same plan; the last rename wins and they are equal.
    AX_RETURN_IF_ERROR(write_file_atomically(path, plan_json(plan).dump(2) + "\n"));
  }
  AX_ASSIGN_OR_RETURN(JobPlan disk, read_plan(options.output_dir));
  const std::string diff = plan_difference(plan, disk);
  if (!diff.empty()) {
    return FailedPrecondition(options.output_dir,
                              " holds a tokenize job with other inputs or "
                              "settings (",
                              diff, "); run it with the same ones, or use another directory");
  }
  return plan;
}

StatusOr<TaskResult> run_task(const TokenizeOptions& options, int task, int tasks) {
  if (tasks < 1 || task < 0 || task >= tasks) {
    return InvalidArgument("task ", task, " of ", tasks, ": expected 0 <= task < tasks");
  }
  if (options.overwrite) return InvalidArgument("a job's task never overwrites; remove DIR");
  TaskResult result;
  const std::string& dir = options.output_dir;
  if (exists(join_path(dir, kIndexFile))) {
    result.merged = true;
    return result;
  }
  AX_ASSIGN_OR_RETURN(JobPlan plan, prepare_job(options));
  const std::vector<size_t> mine = assign_files(plan.sizes, tasks)[static_cast<size_t>(task)];
  uint64_t bytes = 0;
  for (size_t i : mine) bytes += plan.sizes[i];
  result.files = mine.size();
  AX_LOG(kInfo, "data") << "tokenize task " << task << " of " << tasks << ": " << mine.size()
                        << " of " << plan.files.size() << " input files, "
                        << human_bytes(static_cast<double>(bytes));
  for (size_t i : mine) {
    if (part_done(dir, i)) {
      ++result.kept;
      AX_LOG(kInfo, "data") << "tokenize task " << task << ": file " << i << " (" << plan.files[i]
                            << ") was finished before, kept";
      continue;
    }
    if (options.stop != nullptr && options.stop->load()) {
      return Status(StatusCode::kAborted, "stopped by a signal");
    }
    AX_LOG(kInfo, "data") << "tokenize task " << task << ": file " << i << " (" << plan.files[i]
                          << ")";
    TokenizeOptions one = options;
    one.inputs = {plan.files[i]};
    one.output_dir = part_dir(dir, i);
    one.progress_file = progress_path(dir, i);
    const Status done = tokenize(one).status();
    // Finished, the part counts whole; stopped or failed, the next run starts this file again, so
    // what it had read is no progress any more (a task killed outright leaves its file behind:
    // ax-data progress --watch copes with bytes done going down).
    ::unlink(one.progress_file.c_str());
    AX_RETURN_IF_ERROR(done);
  }
  return result;
}

StatusOr<DatasetIndex> merge_job(const std::string& dir) {
  if (exists(join_path(dir, kIndexFile))) return read_dataset_index(dir);
  AX_ASSIGN_OR_RETURN(JobPlan plan, read_plan(dir));
  AX_ASSIGN_OR_RETURN(DirLock lock, DirLock::take(join_path(parts_dir(dir), "merge.lock")));
  // Another merge may have finished while this one waited for the lock.
  if (exists(join_path(dir, kIndexFile))) return read_dataset_index(dir);
  AX_ASSIGN_OR_RETURN(std::vector<DatasetIndex> parts, read_parts(dir, plan));
  AX_RETURN_IF_ERROR(remove_merge_leftovers(dir));
  DatasetIndex merged;
  if (!parts.empty()) {
    merged.kind = parts[0].kind;
    merged.tokenizer = parts[0].tokenizer;
    merged.frame_tokens = parts[0].frame_tokens;
  }
  for (size_t i = 0; i < parts.size(); ++i) {
    AX_RETURN_IF_ERROR(merge_part(dir, part_dir(dir, i), parts[i], &merged));
  }
  merged.inputs = plan.files;
  // The shards' names must be durable before an index names them.
  AX_RETURN_IF_ERROR(fsync_dir(dir));
  AX_RETURN_IF_ERROR(write_dataset_index(dir, merged));
  std::error_code ec;
  fs::remove_all(parts_dir(dir), ec);
  if (ec) {
    AX_LOG(kWarn, "data") << "merged " << dir << ", but could not remove " << parts_dir(dir) << ": "
                          << ec.message();
  }
  return merged;
}

StatusOr<JobProgress> job_progress(const std::string& dir) {
  JobProgress p;
  if (exists(join_path(dir, kIndexFile))) {
    AX_ASSIGN_OR_RETURN(DatasetIndex index, read_dataset_index(dir));
    p.merged = true;
    p.files = p.files_done = index.inputs.size();
    return p;
  }
  AX_ASSIGN_OR_RETURN(JobPlan plan, read_plan(dir));
  p.files = plan.files.size();
  for (size_t i = 0; i < plan.files.size(); ++i) {
    p.total_bytes += plan.sizes[i];
    if (part_done(dir, i)) {
      p.done_bytes += plan.sizes[i];
      ++p.files_done;
      continue;
    }
    std::ifstream in(progress_path(dir, i));
    uint64_t read = 0;
    if (in >> read) p.done_bytes += std::min(read, plan.sizes[i]);
  }
  return p;
}

}  // namespace ax::data
