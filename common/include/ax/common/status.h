// Status and StatusOr: how recoverable errors travel (I/O, config, environment, corrupt data).
// Broken invariants use AX_CHECK (check.h) instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "ax/common/strings.h"

namespace ax {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller (user, config, command line) asked for something wrong
  kNotFound,            // a file, key or name does not exist
  kAlreadyExists,       // refusing to overwrite
  kFailedPrecondition,  // the state of the world does not allow this (e.g. tokenizer mismatch)
  kOutOfRange,          // an index or position past the end
  kDataLoss,            // corrupt or truncated data
  kIoError,             // the operating system refused (errno in the message)
  kUnavailable,         // a peer or service did not answer
  kDeadlineExceeded,    // a timeout
  kResourceExhausted,   // memory, disk
  kUnimplemented,
  kAborted,
  kInternal,
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "DataLoss: shard-00001.axs frame 3: checksum mismatch (at
  // datasets/shards/src/shard_reader.cc:120)".
  std::string to_string() const;

  // Prepends context ("reading index.json: ") to the message; keeps the code.
  Status with_context(std::string_view context) const;
  // Appends the first "file:line" where the error crossed AX_RETURN_IF_ERROR.
  Status with_location(const char* file, int line) const;

  // Marks a Status as deliberately ignored.
  void ignore() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  bool located_ = false;
};

template <typename... Args>
Status InvalidArgument(const Args&... args) {
  return Status(StatusCode::kInvalidArgument, str_cat(args...));
}
template <typename... Args>
Status NotFound(const Args&... args) {
  return Status(StatusCode::kNotFound, str_cat(args...));
}
template <typename... Args>
Status AlreadyExists(const Args&... args) {
  return Status(StatusCode::kAlreadyExists, str_cat(args...));
}
template <typename... Args>
Status FailedPrecondition(const Args&... args) {
  return Status(StatusCode::kFailedPrecondition, str_cat(args...));
}
template <typename... Args>
Status OutOfRange(const Args&... args) {
  return Status(StatusCode::kOutOfRange, str_cat(args...));
}
template <typename... Args>
Status DataLoss(const Args&... args) {
  return Status(StatusCode::kDataLoss, str_cat(args...));
}
template <typename... Args>
Status Unavailable(const Args&... args) {
  return Status(StatusCode::kUnavailable, str_cat(args...));
}
template <typename... Args>
Status DeadlineExceeded(const Args&... args) {
  return Status(StatusCode::kDeadlineExceeded, str_cat(args...));
}
template <typename... Args>
Status ResourceExhausted(const Args&... args) {
  return Status(StatusCode::kResourceExhausted, str_cat(args...));
}
template <typename... Args>
Status Internal(const Args&... args) {
  return Status(StatusCode::kInternal, str_cat(args...));
}
template <typename... Args>
Status Unimplemented(const Args&... args) {
  return Status(StatusCode::kUnimplemented, str_cat(args...));
}
// An I/O error from errno: "open shard-00000.axs: No such file or directory". ENOENT maps to
// kNotFound and ENOSPC/EDQUOT to kResourceExhausted so callers can tell them apart.
Status IoError(std::string_view what, int errno_value);

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : v_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : v_(std::move(value)) {}         // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T& value() & { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace ax

#define AX_STATUS_CONCAT_INNER(a, b) a##b
#define AX_STATUS_CONCAT(a, b) AX_STATUS_CONCAT_INNER(a, b)

// Returns the error from the enclosing function, adding where it passed.
#define AX_RETURN_IF_ERROR(expr)                                               \
  do {                                                                         \
    ::ax::Status ax_status_ = (expr);                                          \
    if (!ax_status_.ok()) return ax_status_.with_location(__FILE__, __LINE__); \
  } while (0)

#define AX_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                        \
  auto tmp = (expr);                                                    \
  if (!tmp.ok()) return tmp.status().with_location(__FILE__, __LINE__); \
  lhs = std::move(tmp).value()

// AX_ASSIGN_OR_RETURN(auto reader, ShardReader::open(path));
#define AX_ASSIGN_OR_RETURN(lhs, expr) \
  AX_ASSIGN_OR_RETURN_IMPL(AX_STATUS_CONCAT(ax_statusor_, __LINE__), lhs, expr)
