// The two steps of a save: every rank writes its files, then one rank commits.

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint_internal.h"

namespace ax::train::ckpt {
namespace {

using OrderedJson = nlohmann::ordered_json;

// Checks one HostTensor and describes it as a slice of its logical tensor.
StatusOr<TensorRecord> slice_of(const HostTensor& t, const std::string& file) {
  if (t.name.empty()) return InvalidArgument("a checkpoint tensor has no name");
  int64_t n = 1;
  for (int64_t d : t.shape) {
    if (d < 0) return InvalidArgument("tensor ", t.name, ": bad shape ", shape_text(t.shape));
    n *= d;
  }
  if (static_cast<int64_t>(t.data.size()) != n) {
    return InvalidArgument("tensor ", t.name, ": shape ", shape_text(t.shape), " needs ", n,
                           " floats, data has ", t.data.size());
  }
  TensorRecord r{
      t.name, t.shape, {{file, t.name, std::vector<int64_t>(t.shape.size(), 0), t.shape}}};
  if (t.logical_shape.empty() && t.offset.empty()) return r;
  if (t.logical_shape.size() != t.shape.size() || t.offset.size() != t.shape.size()) {
    return InvalidArgument("tensor ", t.name, ": shape ", shape_text(t.shape), ", offset ",
                           shape_text(t.offset), " and logical shape ", shape_text(t.logical_shape),
                           " differ in rank");
  }
  for (size_t k = 0; k < t.shape.size(); ++k) {
    if (t.offset[k] < 0 || t.offset[k] + t.shape[k] > t.logical_shape[k]) {
      return InvalidArgument("tensor ", t.name, ": slice at ", shape_text(t.offset), " of shape ",
                             shape_text(t.shape), " is outside the logical shape ",
                             shape_text(t.logical_shape));
    }
  }
  r.shape = t.logical_shape;
  r.slices[0].offset = t.offset;
  return r;
}

// A blob becomes a file of the checkpoint directory: a plain name that cannot collide with the
// files the protocol writes.
bool valid_blob_name(const std::string& name) {
  return !name.empty() && name[0] != '.' && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos && name != kCommitFile && name != kIndexFile &&
         !ends_with(name, ".safetensors") && !ends_with(name, ".tmp");
}

OrderedJson file_entry(const FileRecord& f) {
  return OrderedJson{{"size", f.size}, {"xxh64", hex64(f.xxh64)}};
}

// Merges the ranks' records into tensors.json's text and the list of every file it names.
StatusOr<std::string> index_json(int64_t step, const std::vector<RankWrite>& ranks,
                                 std::vector<FileRecord>* files) {
  std::vector<TensorRecord> merged;
  std::map<std::string, size_t> position;
  std::vector<std::string> blobs;
  std::set<std::string> file_names;
  for (const RankWrite& rank : ranks) {
    for (const TensorRecord& t : rank.tensors) {
      auto [it, inserted] = position.emplace(t.name, merged.size());
      if (inserted) {
        merged.push_back(t);
        continue;
      }
      TensorRecord& m = merged[it->second];
      if (m.shape != t.shape) {
        return InvalidArgument("ranks disagree about the logical shape of ", t.name, ": ",
                               shape_text(m.shape), " and ", shape_text(t.shape));
      }
      m.slices.insert(m.slices.end(), t.slices.begin(), t.slices.end());
    }
    for (const FileRecord& f : rank.files) {
      if (!file_names.insert(f.name).second) return InvalidArgument("two ranks wrote ", f.name);
      files->push_back(f);
    }
    blobs.insert(blobs.end(), rank.blobs.begin(), rank.blobs.end());
  }
  OrderedJson tensors = OrderedJson::object();
  for (const TensorRecord& t : merged) {
    OrderedJson slices = OrderedJson::array();
    for (const SliceRecord& s : t.slices) {
      slices.push_back(
          {{"file", s.file}, {"key", s.key}, {"offset", s.offset}, {"shape", s.shape}});
    }
    tensors[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"slices", std::move(slices)}};
  }
  OrderedJson file_map = OrderedJson::object();
  for (const FileRecord& f : *files) file_map[f.name] = file_entry(f);
  OrderedJson index = {{"format", kFormatName}, {"version", kFormatVersion},
                       {"step", step},          {"tensors", std::move(tensors)},
                       {"blobs", blobs},        {"files", std::move(file_map)}};
  return index.dump(1) + "\n";
}

Status rename_path(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return IoError(str_cat("rename ", from, " to ", to), errno);
  }
  return Status::Ok();
}

std::string parent_dir(const std::string& path) {
  return std::filesystem::path(path).parent_path().string();
}

// Renames tmp_dir to final_dir and writes COMMIT into it.
Status publish(const std::string& tmp_dir, const std::string& final_dir, const std::string& commit,
               WriteBudget* budget) {
  AX_RETURN_IF_ERROR(rename_path(tmp_dir, final_dir));
  AX_RETURN_IF_ERROR(fsync_dir(parent_dir(final_dir)));
  const std::string commit_tmp = str_cat(kCommitFile, ".tmp");
  AX_RETURN_IF_ERROR(write_file(final_dir, commit_tmp, commit, budget).status());
  AX_RETURN_IF_ERROR(
      rename_path(join_path(final_dir, commit_tmp), join_path(final_dir, kCommitFile)));
  return fsync_dir(final_dir);
}

}  // namespace

std::string rank_write_to_json(const RankWrite& write) {
  OrderedJson files = OrderedJson::array(), tensors = OrderedJson::array();
  for (const FileRecord& f : write.files) {
    files.push_back({{"name", f.name}, {"size", f.size}, {"xxh64", hex64(f.xxh64)}});
  }
  for (const TensorRecord& t : write.tensors) {
    OrderedJson slices = OrderedJson::array();
    for (const SliceRecord& s : t.slices) {
      slices.push_back(
          {{"file", s.file}, {"key", s.key}, {"offset", s.offset}, {"shape", s.shape}});
    }
    tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"slices", std::move(slices)}});
  }
  return OrderedJson{{"files", files}, {"tensors", tensors}, {"blobs", write.blobs}}.dump();
}

StatusOr<RankWrite> rank_write_from_json(const std::string& text) {
  OrderedJson j = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return DataLoss("a rank's checkpoint report is not JSON");
  RankWrite out;
  try {
    for (const OrderedJson& f : j.at("files")) {
      std::optional<uint64_t> hash = parse_hex64(f.at("xxh64").get<std::string>());
      if (!hash) return DataLoss("a rank's checkpoint report has a bad checksum");
      out.files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>(), *hash});
    }
    for (const OrderedJson& t : j.at("tensors")) {
      TensorRecord r;
      r.name = t.at("name").get<std::string>();
      r.shape = t.at("shape").get<std::vector<int64_t>>();
      for (const OrderedJson& s : t.at("slices")) {
        r.slices.push_back({s.at("file").get<std::string>(), s.at("key").get<std::string>(),
                            s.at("offset").get<std::vector<int64_t>>(),
                            s.at("shape").get<std::vector<int64_t>>()});
      }
      out.tensors.push_back(std::move(r));
    }
    out.blobs = j.at("blobs").get<std::vector<std::string>>();
  } catch (const OrderedJson::exception& e) {
    return DataLoss("a rank's checkpoint report is malformed: ", e.what());
  }
  return out;
}

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05d.safetensors", rank);
  return buf;
}

StatusOr<RankWrite> write_rank_files(const std::string& tmp_dir, int rank,
                                     const CheckpointState& state, WriteBudget* budget) {
  RankWrite out;
  const std::string file = rank_file_name(rank);
  std::vector<TensorRef> refs;
  // A rank may hold several slices of one tensor (an FSDP shard boundary inside a tensor, the
  // q/k/v blocks of a tensor-parallel qkv): the first is stored under the tensor's name, the
  // next ones under "<name>#1", "<name>#2", ...
  std::map<std::string, int> count;
  for (const HostTensor& t : state.tensors) {
    AX_ASSIGN_OR_RETURN(TensorRecord r, slice_of(t, file));
    const int k = count[t.name]++;
    if (k > 0 && r.slices[0].offset == std::vector<int64_t>(r.shape.size(), 0) &&
        r.slices[0].shape == r.shape) {
      return InvalidArgument("tensor ", t.name, " is given twice to one rank's checkpoint");
    }
    r.slices[0].key = k == 0 ? t.name : str_cat(t.name, "#", k);
    refs.push_back({r.slices[0].key, t.shape, t.data.data()});
    out.tensors.push_back(std::move(r));
  }
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"ax.step", std::to_string(state.step)}, {"ax.rank", std::to_string(rank)}};
  AX_ASSIGN_OR_RETURN(FileRecord rec, write_safetensors(tmp_dir, file, refs, metadata, budget));
  out.files.push_back(std::move(rec));
  if (rank != 0) return out;
  for (const auto& [name, content] : state.blobs) {
    if (!valid_blob_name(name)) {
      return InvalidArgument("checkpoint blob name '", name,
                             "' is not a plain file name or collides with a checkpoint file");
    }
    AX_ASSIGN_OR_RETURN(FileRecord blob, write_file(tmp_dir, name, content, budget));
    out.files.push_back(std::move(blob));
    out.blobs.push_back(name);
  }
  return out;
}

Status commit_checkpoint(const std::string& tmp_dir, const std::string& final_dir, int64_t step,
                         const std::vector<RankWrite>& ranks, WriteBudget* budget) {
  std::vector<FileRecord> files;
  AX_ASSIGN_OR_RETURN(std::string index, index_json(step, ranks, &files));
  AX_ASSIGN_OR_RETURN(FileRecord index_rec, write_file(tmp_dir, kIndexFile, index, budget));
  AX_RETURN_IF_ERROR(fsync_dir(tmp_dir));

  OrderedJson file_map = OrderedJson::object();
  file_map[kIndexFile] = file_entry(index_rec);
  for (const FileRecord& f : files) file_map[f.name] = file_entry(f);
  const std::string commit = OrderedJson{{"format", kFormatName},
                                         {"version", kFormatVersion},
                                         {"step", step},
                                         {"files", std::move(file_map)}}
                                 .dump(1) +
                             "\n";

  // A directory of this step already there is either committed (the step is saved again) or left
  // by a crash between rename and COMMIT. Move it aside under a stale-tmp name, so that a crash
  // now leaves nothing that looks committed and the next save's cleanup removes it.
  std::error_code ec;
  const bool replacing = std::filesystem::exists(final_dir, ec);
  const std::string aside = tmp_dir + "-replaced";
  if (replacing) AX_RETURN_IF_ERROR(rename_path(final_dir, aside));

  Status status = publish(tmp_dir, final_dir, commit, budget);
  if (status.ok()) {
    if (replacing) remove_tree(aside);
    return status;
  }
  if (!std::filesystem::exists(tmp_dir, ec)) remove_tree(final_dir);  // renamed, not committed
  if (replacing && !rename_path(aside, final_dir).ok()) remove_tree(aside);
  return status;
}

}  // namespace ax::train::ckpt
