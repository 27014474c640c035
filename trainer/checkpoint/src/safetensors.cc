#include "safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

namespace ax::train::ckpt {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors is little-endian and written with plain memcpy");

// The reference implementation refuses larger headers (safetensors' N_MAX).
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

// The dtypes the format defines; ax stores F32 only.
bool is_safetensors_dtype(const std::string& d) {
  static const char* const kDtypes[] = {
      "BOOL", "U8",  "I8",  "I16",     "U16",     "F16",     "BF16", "I32",     "U32",     "F32",
      "F64",  "I64", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",   "F6_E2M3", "F6_E3M2", "C64"};
  return std::find(std::begin(kDtypes), std::end(kDtypes), d) != std::end(kDtypes);
}

uint64_t element_bytes(StoredType t) { return t == StoredType::kF32 ? 4 : 2; }

std::optional<StoredType> stored_type(const std::string& d) {
  if (d == "F32") return StoredType::kF32;
  if (d == "F16") return StoredType::kF16;
  if (d == "BF16") return StoredType::kBF16;
  return std::nullopt;
}

// product(shape) * element_size, or nullopt when a dimension is negative or the product
// overflows.
std::optional<uint64_t> tensor_bytes(const std::vector<int64_t>& shape, uint64_t element_size) {
  uint64_t n = element_size;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
      return std::nullopt;
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

std::optional<uint64_t> f32_bytes(const std::vector<int64_t>& shape) {
  return tensor_bytes(shape, sizeof(float));
}

// IEEE half to float: exact (every half is a float).
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

// `n` stored elements at `raw` to floats.
void to_float(StoredType type, const char* raw, size_t n, float* out) {
  if (type == StoredType::kF32) {
    std::memcpy(out, raw, n * sizeof(float));
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, raw + 2 * i, 2);
    out[i] = type == StoredType::kBF16 ? std::bit_cast<float>(static_cast<uint32_t>(v) << 16)
                                       : half_to_float(v);
  }
}

std::string spaced_shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += str_cat(i ? ", " : "", shape[i]);
  return s + "]";
}

Status pread_all(int fd, const std::string& path, void* out, uint64_t size, uint64_t offset) {
  char* p = static_cast<char*>(out);
  while (size > 0) {
    ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return IoError(str_cat("read ", path), errno);
    if (n == 0) return DataLoss(path, ": file ends at byte ", offset, " (truncated?)");
    p += n;
    size -= static_cast<uint64_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<FileRecord> write_safetensors(const std::string& dir, const std::string& name,
                                       const std::vector<TensorRef>& tensors,
                                       const std::map<std::string, std::string>& metadata,
                                       WriteBudget* budget) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const TensorRef& t : tensors) {
    std::optional<uint64_t> bytes = f32_bytes(t.shape);
    if (!bytes)
      return InvalidArgument(name, ": tensor ", t.key, " has a bad shape ",
                             spaced_shape_text(t.shape));
    if (t.key.empty() || t.key == kMetadataKey || header.contains(t.key)) {
      return InvalidArgument(name, ": tensor key '", t.key, "' is empty, reserved or repeated");
    }
    header[t.key] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    return InvalidArgument(name, ": a tensor key or metadata string is not UTF-8: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_size = text.size();

  AX_ASSIGN_OR_RETURN(FileWriter writer, FileWriter::create(join_path(dir, name), name, budget));
  AX_RETURN_IF_ERROR(writer.append(&header_size, sizeof(header_size)));
  AX_RETURN_IF_ERROR(writer.append(text.data(), text.size()));
  for (const TensorRef& t : tensors) {
    AX_RETURN_IF_ERROR(writer.append(t.data, *f32_bytes(t.shape)));
  }
  return writer.finish();
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      entries_(std::move(other.entries_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

StatusOr<SafetensorsReader> SafetensorsReader::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return IoError(str_cat("open ", path), errno);
  SafetensorsReader reader(path, fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0) return IoError(str_cat("stat ", path), errno);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    return DataLoss(path, ": ", file_size, " bytes, too short for a safetensors file (truncated?)");
  }
  uint64_t header_size = 0;
  AX_RETURN_IF_ERROR(pread_all(fd, path, &header_size, 8, 0));
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8) {
    return DataLoss(path, ": header length ", header_size, " does not fit the file of ", file_size,
                    " bytes (truncated or not a safetensors file?)");
  }
  std::string header(header_size, '\0');
  AX_RETURN_IF_ERROR(pread_all(fd, path, header.data(), header_size, 8));
  reader.data_start_ = 8 + header_size;
  AX_RETURN_IF_ERROR(reader.parse_header(header, file_size - reader.data_start_));
  return reader;
}

Status SafetensorsReader::parse_header(const std::string& header, uint64_t data_size) {
  const nlohmann::json j = nlohmann::json::parse(header, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return DataLoss(path_, ": the safetensors header is not a JSON object");
  }
  for (const auto& [key, value] : j.items()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) return DataLoss(path_, ": ", kMetadataKey, " is not an object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) return DataLoss(path_, ": metadata '", mk, "' is not a string");
        metadata_[mk] = mv.get<std::string>();
      }
      continue;
    }
    const std::string where = str_cat(path_, ": tensor '", key, "'");
    if (!value.is_object()) return DataLoss(where, " is not an object");
    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) return DataLoss(where, " has no dtype");
    const std::string d = dtype->get<std::string>();
    std::optional<StoredType> type = stored_type(d);
    if (!type) {
      if (is_safetensors_dtype(d)) {
        return Unimplemented(where, " has dtype ", d, "; ax reads F32, F16 and BF16");
      }
      return DataLoss(where, " has the unknown dtype '", d, "'");
    }
    SafetensorsEntry e;
    e.key = key;
    e.dtype = *type;
    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) return DataLoss(where, " has no shape");
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned()) return DataLoss(where, " has a bad shape ", shape->dump());
      const uint64_t v = dim.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return DataLoss(where, " has a bad shape ", shape->dump());
      }
      e.shape.push_back(static_cast<int64_t>(v));
    }
    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return DataLoss(where, " has no data_offsets [begin, end]");
    }
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    std::optional<uint64_t> bytes = tensor_bytes(e.shape, element_bytes(e.dtype));
    if (!bytes || e.end < e.begin || e.end - e.begin != *bytes) {
      return DataLoss(where, ": data_offsets ", offsets->dump(), " do not hold shape ",
                      spaced_shape_text(e.shape), " of ", d);
    }
    entries_.push_back(std::move(e));
  }
  // The byte ranges must tile the data section, as the reference implementation requires.
  std::sort(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expected = 0;
  for (const SafetensorsEntry& e : entries_) {
    if (e.begin != expected) {
      return DataLoss(path_, ": tensor '", e.key, "' starts at data byte ", e.begin, ", expected ",
                      expected, e.begin < expected ? " (overlaps the previous tensor)" : " (gap)");
    }
    expected = e.end;
  }
  for (size_t i = 0; i < entries_.size(); ++i) index_[entries_[i].key] = i;
  if (expected > data_size) {
    return DataLoss(path_, ": the header needs ", expected, " data bytes but the file has ",
                    data_size, " (truncated?)");
  }
  if (expected < data_size) {
    return DataLoss(path_, ": ", data_size - expected, " bytes after the last tensor");
  }
  return Status::Ok();
}

const SafetensorsEntry* SafetensorsReader::find(const std::string& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Status SafetensorsReader::read(const SafetensorsEntry& entry, float* out) const {
  const uint64_t bytes = entry.end - entry.begin;
  if (entry.dtype == StoredType::kF32) {
    return pread_all(fd_, path_, out, bytes, data_start_ + entry.begin);
  }
  std::vector<char> raw(bytes);
  AX_RETURN_IF_ERROR(pread_all(fd_, path_, raw.data(), bytes, data_start_ + entry.begin));
  to_float(entry.dtype, raw.data(), bytes / element_bytes(entry.dtype), out);
  return Status::Ok();
}

Status SafetensorsReader::read_box(const SafetensorsEntry& entry,
                                   const std::vector<int64_t>& offset,
                                   const std::vector<int64_t>& shape, float* out) const {
  const size_t rank = entry.shape.size();
  bool inside = (rank == 1 || rank == 2) && offset.size() == rank && shape.size() == rank;
  for (size_t k = 0; inside && k < rank; ++k) {
    inside = offset[k] >= 0 && shape[k] >= 0 && offset[k] + shape[k] <= entry.shape[k];
  }
  if (!inside) {
    return InvalidArgument(path_, ": box at ", spaced_shape_text(offset), " of shape ",
                           spaced_shape_text(shape), " is not inside the 1-D or 2-D tensor '",
                           entry.key, "' of shape ", spaced_shape_text(entry.shape));
  }
  const uint64_t size = element_bytes(entry.dtype);
  const int64_t cols = rank == 2 ? entry.shape[1] : entry.shape[0];
  const int64_t row0 = rank == 2 ? offset[0] : 0, rows = rank == 2 ? shape[0] : 1;
  const int64_t col0 = offset[rank - 1], width = shape[rank - 1];
  // Whole rows are one range; otherwise one range per row.
  const bool whole_rows = col0 == 0 && width == cols;
  const int64_t runs = whole_rows ? 1 : rows;
  const uint64_t run_elements = static_cast<uint64_t>(whole_rows ? rows * cols : width);
  std::vector<char> raw(run_elements * size);
  for (int64_t r = 0; r < runs; ++r) {
    const uint64_t first = static_cast<uint64_t>((row0 + r) * cols + col0);
    AX_RETURN_IF_ERROR(
        pread_all(fd_, path_, raw.data(), raw.size(), data_start_ + entry.begin + first * size));
    to_float(entry.dtype, raw.data(), run_elements, out + r * width);
  }
  return Status::Ok();
}

}  // namespace ax::train::ckpt
