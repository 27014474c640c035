// TensorBoard event files without TensorFlow or a protobuf library: each tf.Event is encoded by
// hand and framed as a TFRecord.
//
// File: events.out.tfevents.<unix seconds>.<host>, a sequence of records, all little-endian:
//   uint64 length | uint32 masked_crc32c(length bytes) | data[length] | uint32 masked_crc32c(data)
//   masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8 with c = CRC-32C(x).
// The first record's data is Event{wall_time, file_version = "brain.Event:2"}; every scalar is
// Event{wall_time, step, summary = Summary{value = Value{tag, simple_value}}}. Protobuf fields:
//   Event:   1 wall_time (fixed64 double), 2 step (varint int64), 3 file_version (bytes),
//            5 summary (bytes: Summary)
//   Summary: 1 value (bytes: Value, repeated)
//   Value:   1 tag (bytes), 2 simple_value (fixed32 float)
// Each field is a varint key (field << 3 | wire type: 0 varint, 1 fixed64, 2 length-delimited,
// 5 fixed32), then the value; length-delimited values carry a varint byte count first.
#include <unistd.h>

#include <climits>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>

#include "append_file.h"
#include "ax/trainer/metrics/metrics.h"
#include "crc32c.h"

namespace ax::train {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

// Field numbers of tensorflow/core/util/event.proto and framework/summary.proto.
constexpr uint32_t kEventWallTime = 1;     // double
constexpr uint32_t kEventStep = 2;         // int64
constexpr uint32_t kEventFileVersion = 3;  // string
constexpr uint32_t kEventSummary = 5;      // Summary
constexpr uint32_t kEventSessionLog = 6;   // SessionLog
constexpr uint32_t kSessionLogStatus = 1;  // enum SessionStatus
constexpr uint64_t kSessionStart = 1;      // SessionLog.START
constexpr uint32_t kSummaryValue = 1;      // repeated Summary.Value
constexpr uint32_t kValueTag = 1;          // string
constexpr uint32_t kValueSimpleValue = 2;  // float

// Appends protobuf fields to a byte string.
class ProtoEncoder {
 public:
  void varint(uint32_t field, uint64_t v) {
    key(field, kVarint);
    put_varint(v);
  }
  void fixed64(uint32_t field, uint64_t v) {
    key(field, kFixed64);
    put_little_endian(v, 8);
  }
  void fixed32(uint32_t field, uint32_t v) {
    key(field, kFixed32);
    put_little_endian(v, 4);
  }
  void bytes(uint32_t field, std::string_view v) {
    key(field, kLengthDelimited);
    put_varint(v.size());
    out_.append(v);
  }
  void double_field(uint32_t field, double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    fixed64(field, bits);
  }
  void float_field(uint32_t field, float v) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof bits);
    fixed32(field, bits);
  }
  const std::string& data() const { return out_; }

 private:
  void key(uint32_t field, uint32_t wire_type) { put_varint((field << 3) | wire_type); }
  void put_varint(uint64_t v) {
    while (v >= 0x80) {
      out_.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out_.push_back(static_cast<char>(v));
  }
  void put_little_endian(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  std::string out_;
};

double now_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// TFRecord: uint64 length, masked CRC32C of those 8 bytes, the data, masked CRC32C of the data;
// all little-endian.
std::string tfrecord(std::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  auto put32 = [&](uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  };
  uint64_t length = data.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((length >> (8 * i)) & 0xFF));
  put32(crc32c_masked(out.data(), 8));
  out.append(data);
  put32(crc32c_masked(data.data(), data.size()));
  return out;
}

std::string hostname() {
  char buf[HOST_NAME_MAX + 1] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string name = buf;
  // The host becomes part of a file name.
  for (char& c : name) {
    if (c == '/') c = '_';
  }
  return name;
}

}  // namespace

class TensorBoardWriter::Impl {
 public:
  explicit Impl(AppendFile file) : file_(std::move(file)) {}
  Status write_event(const ProtoEncoder& event) { return file_.append(tfrecord(event.data())); }
  Status sync() { return file_.sync(); }
  const std::string& path() const { return file_.path(); }

 private:
  AppendFile file_;
};

StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::open(const std::string& dir) {
  AX_RETURN_IF_ERROR(make_dirs(dir));
  double wall_time = now_seconds();
  std::string base =
      str_cat(dir, dir.empty() || dir.back() == '/' ? "" : "/", "events.out.tfevents.",
              static_cast<int64_t>(wall_time), ".", hostname());
  // Never append to another writer's file: a run restarted within the same second on the same
  // host gets a suffix (TensorBoard reads every file whose name contains "tfevents").
  StatusOr<AppendFile> file = AppendFile::open(base, /*exclusive=*/true);
  for (int i = 1; !file.ok() && file.status().code() == StatusCode::kAlreadyExists && i < 100;
       ++i) {
    file = AppendFile::open(str_cat(base, ".", i), /*exclusive=*/true);
  }
  if (!file.ok()) return file.status();
  auto impl = std::make_unique<Impl>(std::move(file).value());
  ProtoEncoder header;
  header.double_field(kEventWallTime, wall_time);
  header.bytes(kEventFileVersion, "brain.Event:2");
  AX_RETURN_IF_ERROR(impl->write_event(header));
  return std::unique_ptr<TensorBoardWriter>(new TensorBoardWriter(std::move(impl)));
}

TensorBoardWriter::TensorBoardWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TensorBoardWriter::~TensorBoardWriter() = default;

Status TensorBoardWriter::add_session_start(int64_t step) {
  ProtoEncoder session_log;
  session_log.varint(kSessionLogStatus, kSessionStart);
  ProtoEncoder event;
  event.double_field(kEventWallTime, now_seconds());
  event.varint(kEventStep, static_cast<uint64_t>(step));
  event.bytes(kEventSessionLog, session_log.data());
  return impl_->write_event(event);
}

Status TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value) {
  ProtoEncoder summary_value;
  summary_value.bytes(kValueTag, tag);
  summary_value.float_field(kValueSimpleValue, static_cast<float>(value));
  ProtoEncoder summary;
  summary.bytes(kSummaryValue, summary_value.data());
  ProtoEncoder event;
  event.double_field(kEventWallTime, now_seconds());
  event.varint(kEventStep, static_cast<uint64_t>(step));  // int64: two's complement varint
  event.bytes(kEventSummary, summary.data());
  return impl_->write_event(event);
}

Status TensorBoardWriter::flush() { return impl_->sync(); }

const std::string& TensorBoardWriter::path() const { return impl_->path(); }

}  // namespace ax::train
