#include "ax/common/status.h"

#include <cerrno>
#include <cstring>

namespace ax {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "Ok";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kOutOfRange:
      return "OutOfRange";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kUnimplemented:
      return "Unimplemented";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (ok()) return "Ok";
  return str_cat(status_code_name(code_), ": ", message_);
}

Status Status::with_context(std::string_view context) const {
  if (ok()) return *this;
  Status s = *this;
  s.message_ = str_cat(context, ": ", message_);
  return s;
}

Status Status::with_location(const char* file, int line) const {
  if (ok() || located_) return *this;
  Status s = *this;
  s.message_ = str_cat(message_, " (at ", file, ":", line, ")");
  s.located_ = true;
  return s;
}

Status IoError(std::string_view what, int errno_value) {
  StatusCode code = StatusCode::kIoError;
  if (errno_value == ENOENT) code = StatusCode::kNotFound;
  if (errno_value == ENOSPC || errno_value == EDQUOT) code = StatusCode::kResourceExhausted;
  return Status(code, str_cat(what, ": ", std::strerror(errno_value)));
}

}  // namespace ax
