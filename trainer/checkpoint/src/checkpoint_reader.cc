// Opening a committed checkpoint: COMMIT, file checks, tensors.json, and slice assembly.

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "checkpoint_internal.h"

namespace ax::train::ckpt {
namespace {

// ordered_json keeps tensors.json's tensor order, which load() returns.
using OrderedJson = nlohmann::ordered_json;

// A string member, or "" when it is missing or not a string.
std::string string_field(const OrderedJson& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The number of elements, or -1 when it overflows.
int64_t element_count(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(n, d, &n)) return -1;
  }
  return n;
}

// Reads a JSON document of the checkpoint and checks its format, version and step.
StatusOr<OrderedJson> read_document(const std::string& path, int64_t step) {
  AX_ASSIGN_OR_RETURN(std::string text, read_file(path));
  OrderedJson j = OrderedJson::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return DataLoss(path, ": not a JSON object");
  if (string_field(j, "format") != kFormatName || !j.contains("version") ||
      !j["version"].is_number_integer()) {
    return DataLoss(path, ": not an ax checkpoint file (no \"format\": \"", kFormatName, "\")");
  }
  if (j["version"].get<int64_t>() != kFormatVersion) {
    return FailedPrecondition(path, ": checkpoint format version ", j["version"].get<int64_t>(),
                              "; this build reads version ", kFormatVersion);
  }
  if (!j.contains("step") || !j["step"].is_number_integer() || j["step"].get<int64_t>() != step) {
    return DataLoss(path, ": records step ", j.value("step", OrderedJson()).dump(), ", expected ",
                    step);
  }
  return j;
}

StatusOr<std::vector<int64_t>> int_list(const OrderedJson& j, const std::string& where) {
  if (!j.is_array()) return DataLoss(where, " is not a list of integers");
  std::vector<int64_t> out;
  for (const OrderedJson& v : j) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > (uint64_t{1} << 62)) {
      return DataLoss(where, " is not a list of non-negative integers: ", j.dump());
    }
    out.push_back(v.get<int64_t>());
  }
  return out;
}

// A file name recorded in the checkpoint must stay inside its directory.
bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

StatusOr<std::map<std::string, FileRecord>> file_map(const OrderedJson& j,
                                                     const std::string& path) {
  if (!j.is_object()) return DataLoss(path, ": \"files\" is not an object");
  std::map<std::string, FileRecord> files;
  for (const auto& [name, v] : j.items()) {
    std::optional<uint64_t> hash;
    if (v.is_object() && v.contains("xxh64") && v["xxh64"].is_string()) {
      hash = parse_hex64(v["xxh64"].get<std::string>());
    }
    if (!plain_name(name) || !hash || !v.contains("size") || !v["size"].is_number_unsigned()) {
      return DataLoss(path, ": bad entry for file '", name, "': ", v.dump());
    }
    files[name] = FileRecord{name, v["size"].get<uint64_t>(), *hash};
  }
  return files;
}

// Compares a file on disk with its record: missing, size, then XXH64.
Status verify_file(const std::string& dir, const FileRecord& want, const char* recorded_in) {
  const std::string path = join_path(dir, want.name);
  StatusOr<FileRecord> got = hash_file(dir, want.name);
  if (!got.ok()) {
    if (got.status().code() == StatusCode::kNotFound) {
      return DataLoss(path, ": missing, but ", recorded_in, " lists it");
    }
    return got.status();
  }
  if (got->size != want.size) {
    return DataLoss(path, ": ", got->size, " bytes, but ", recorded_in, " records ", want.size,
                    " (truncated or overwritten)");
  }
  if (got->xxh64 != want.xxh64) {
    return DataLoss(path, ": XXH64 ", hex64(got->xxh64), " does not match ", hex64(want.xxh64),
                    " recorded in ", recorded_in, " (corrupt file)");
  }
  return Status::Ok();
}

StatusOr<TensorRecord> parse_tensor(const std::string& name, const OrderedJson& v,
                                    const std::map<std::string, FileRecord>& files,
                                    const std::string& path) {
  const std::string where = str_cat(path, ": tensor ", name);
  if (!v.is_object() || string_field(v, "dtype") != "F32" || !v.contains("shape") ||
      !v.contains("slices") || !v["slices"].is_array()) {
    return DataLoss(where, ": needs dtype F32, shape and slices: ", v.dump());
  }
  TensorRecord t;
  t.name = name;
  AX_ASSIGN_OR_RETURN(t.shape, int_list(v["shape"], where + " shape"));
  if (element_count(t.shape) < 0)
    return DataLoss(where, ": shape ", shape_text(t.shape), " overflows");
  for (const OrderedJson& s : v["slices"]) {
    SliceRecord r;
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string() || !s.contains("key") ||
        !s["key"].is_string() || !s.contains("offset") || !s.contains("shape")) {
      return DataLoss(where, ": bad slice ", s.dump());
    }
    r.file = s["file"].get<std::string>();
    r.key = s["key"].get<std::string>();
    AX_ASSIGN_OR_RETURN(r.offset, int_list(s["offset"], where + " slice offset"));
    AX_ASSIGN_OR_RETURN(r.shape, int_list(s["shape"], where + " slice shape"));
    if (!files.count(r.file) || !ends_with(r.file, ".safetensors")) {
      return DataLoss(where, ": slice file ", r.file, " is not a listed safetensors file");
    }
    bool inside = r.offset.size() == t.shape.size() && r.shape.size() == t.shape.size();
    for (size_t k = 0; inside && k < t.shape.size(); ++k) {
      inside = r.offset[k] + r.shape[k] <= t.shape[k];
    }
    if (!inside) {
      return DataLoss(where, ": slice at ", shape_text(r.offset), " of shape ", shape_text(r.shape),
                      " is outside ", shape_text(t.shape));
    }
    t.slices.push_back(std::move(r));
  }
  return t;
}

// Copies the elements of a slice that fall in the region into `out`, marking them in `covered`.
// Returns false, with `at` set to the logical index, where an earlier slice put another value.
bool copy_intersection(const SliceRecord& slice, const float* src,
                       const std::vector<int64_t>& offset, const std::vector<int64_t>& shape,
                       float* out, std::vector<uint8_t>* covered, std::vector<int64_t>* at) {
  const size_t rank = shape.size();
  std::vector<int64_t> lo(rank), hi(rank);
  for (size_t k = 0; k < rank; ++k) {
    lo[k] = std::max(offset[k], slice.offset[k]);
    hi[k] = std::min(offset[k] + shape[k], slice.offset[k] + slice.shape[k]);
    if (lo[k] >= hi[k]) return true;
  }
  // Row-major strides of the slice and of the region.
  std::vector<int64_t> src_stride(rank, 1), dst_stride(rank, 1);
  for (size_t k = rank; k-- > 1;) {
    src_stride[k - 1] = src_stride[k] * slice.shape[k];
    dst_stride[k - 1] = dst_stride[k] * shape[k];
  }
  const int64_t run = rank == 0 ? 1 : hi[rank - 1] - lo[rank - 1];
  std::vector<int64_t> idx = lo;  // logical index of the first element of the current run
  while (true) {
    int64_t s = 0, d = 0;
    for (size_t k = 0; k < rank; ++k) {
      s += (idx[k] - slice.offset[k]) * src_stride[k];
      d += (idx[k] - offset[k]) * dst_stride[k];
    }
    for (int64_t i = 0; i < run; ++i) {
      if ((*covered)[d + i] && std::memcmp(&out[d + i], &src[s + i], sizeof(float)) != 0) {
        *at = idx;
        if (rank > 0) at->back() += i;
        return false;
      }
      out[d + i] = src[s + i];
      (*covered)[d + i] = 1;
    }
    // Next run: advance the outer dimensions like an odometer.
    int64_t k = static_cast<int64_t>(rank) - 2;
    for (; k >= 0; --k) {
      if (++idx[k] < hi[k]) break;
      idx[k] = lo[k];
    }
    if (k < 0) return true;
  }
}

// The logical index of element `i` of a region.
std::vector<int64_t> region_index(int64_t i, const std::vector<int64_t>& offset,
                                  const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = offset[k] + i % shape[k];
    i /= shape[k];
  }
  return idx;
}

}  // namespace

StatusOr<CheckpointReader> CheckpointReader::open(const std::string& dir, int64_t step) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return NotFound("no checkpoint of step ", step, ": ", dir, " does not exist");
  }
  const std::string commit_path = join_path(dir, kCommitFile);
  if (!std::filesystem::exists(commit_path, ec)) {
    return FailedPrecondition(dir, " has no ", kCommitFile, " marker: the save of step ", step,
                              " did not finish (a crash?), so it cannot be loaded");
  }
  AX_ASSIGN_OR_RETURN(OrderedJson commit, read_document(commit_path, step));
  AX_ASSIGN_OR_RETURN(auto files, file_map(commit.value("files", OrderedJson()), commit_path));
  if (!files.count(kIndexFile)) return DataLoss(commit_path, ": does not list ", kIndexFile);
  // Every byte is checked before anything is interpreted.
  for (const auto& [name, record] : files) {
    AX_RETURN_IF_ERROR(verify_file(dir, record, kCommitFile));
  }

  const std::string index_path = join_path(dir, kIndexFile);
  AX_ASSIGN_OR_RETURN(OrderedJson index, read_document(index_path, step));
  AX_ASSIGN_OR_RETURN(auto index_files, file_map(index.value("files", OrderedJson()), index_path));
  auto expected = files;
  expected.erase(kIndexFile);
  for (const auto& [name, record] : expected) {
    auto it = index_files.find(name);
    if (it == index_files.end() || it->second.size != record.size ||
        it->second.xxh64 != record.xxh64) {
      return DataLoss(index_path, ": its record of ", name, " differs from ", kCommitFile);
    }
  }
  if (index_files.size() != expected.size()) {
    return DataLoss(index_path, ": lists files that ", kCommitFile, " does not");
  }

  CheckpointReader reader(dir);
  const OrderedJson& tensors = index.value("tensors", OrderedJson());
  const OrderedJson& blobs = index.value("blobs", OrderedJson());
  if (!tensors.is_object() || !blobs.is_array()) {
    return DataLoss(index_path, ": needs a \"tensors\" object and a \"blobs\" list");
  }
  for (const auto& [name, v] : tensors.items()) {
    AX_ASSIGN_OR_RETURN(TensorRecord t, parse_tensor(name, v, files, index_path));
    reader.tensors_.push_back(std::move(t));
  }
  AX_RETURN_IF_ERROR(reader.open_files(files));
  for (const OrderedJson& b : blobs) {
    if (!b.is_string() || !files.count(b.get<std::string>())) {
      return DataLoss(index_path, ": blob ", b.dump(), " is not a listed file");
    }
    const std::string name = b.get<std::string>();
    AX_ASSIGN_OR_RETURN(reader.blobs_[name], read_file(join_path(dir, name)));
  }
  return reader;
}

// Opens the rank files the slices name and checks every slice's key and shape.
Status CheckpointReader::open_files(const std::map<std::string, FileRecord>& files) {
  for (const TensorRecord& t : tensors_) {
    for (const SliceRecord& s : t.slices) {
      auto it = rank_files_.find(s.file);
      if (it == rank_files_.end()) {
        AX_ASSIGN_OR_RETURN(SafetensorsReader file,
                            SafetensorsReader::open(join_path(dir_, s.file)));
        it = rank_files_.emplace(s.file, std::move(file)).first;
      }
      const SafetensorsEntry* e = it->second.find(s.key);
      if (e == nullptr || e->shape != s.shape) {
        return DataLoss(it->second.path(), ": has no tensor '", s.key, "' of shape ",
                        shape_text(s.shape), " (", kIndexFile, " slice of ", t.name, ")");
      }
    }
  }
  return Status::Ok();
}

Status CheckpointReader::read_region(const TensorRecord& tensor, const std::vector<int64_t>& offset,
                                     const std::vector<int64_t>& shape, float* out) const {
  bool inside = offset.size() == tensor.shape.size() && shape.size() == tensor.shape.size();
  for (size_t k = 0; inside && k < shape.size(); ++k) {
    inside = offset[k] >= 0 && shape[k] >= 0 && offset[k] + shape[k] <= tensor.shape[k];
  }
  if (!inside) {
    return InvalidArgument("region at ", shape_text(offset), " of shape ", shape_text(shape),
                           " is outside ", tensor.name, " ", shape_text(tensor.shape));
  }
  const int64_t n = element_count(shape);
  std::vector<uint8_t> covered(static_cast<size_t>(n), 0);
  std::vector<float> buf;
  bool nothing_read = true;
  for (const SliceRecord& s : tensor.slices) {
    bool intersects = true;
    for (size_t k = 0; intersects && k < shape.size(); ++k) {
      intersects = std::max(offset[k], s.offset[k]) <
                   std::min(offset[k] + shape[k], s.offset[k] + s.shape[k]);
    }
    if (!intersects) continue;
    const SafetensorsReader& file = rank_files_.at(s.file);
    if (nothing_read && s.offset == offset && s.shape == shape) {
      // The common case of one process: the slice is the region, read it in place.
      AX_RETURN_IF_ERROR(file.read(*file.find(s.key), out));
      std::fill(covered.begin(), covered.end(), 1);
      nothing_read = false;
      continue;
    }
    nothing_read = false;
    buf.resize(static_cast<size_t>(element_count(s.shape)));
    AX_RETURN_IF_ERROR(file.read(*file.find(s.key), buf.data()));
    std::vector<int64_t> at;
    if (!copy_intersection(s, buf.data(), offset, shape, out, &covered, &at)) {
      return DataLoss(join_path(dir_, kIndexFile), ": slices of ", tensor.name,
                      " disagree about element ", shape_text(at), " (", s.file, " key ", s.key,
                      ")");
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!covered[static_cast<size_t>(i)]) {
      return DataLoss(join_path(dir_, kIndexFile), ": element ",
                      shape_text(region_index(i, offset, shape)), " of ", tensor.name,
                      " is in no slice");
    }
  }
  return Status::Ok();
}

}  // namespace ax::train::ckpt
