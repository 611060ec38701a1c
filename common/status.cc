#include "common/status.h"

namespace tlp {

const char* CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Status::Code::kOutOfRange:
      return "OUT_OF_RANGE";
    case Status::Code::kNotFound:
      return "NOT_FOUND";
    case Status::Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Status::Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Status::Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Status::Code::kUnavailable:
      return "UNAVAILABLE";
    case Status::Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Status::Code::kCorruption:
      return "CORRUPTION";
    case Status::Code::kIoError:
      return "IO_ERROR";
    case Status::Code::kInternal:
      return "INTERNAL";
    case Status::Code::kUnauthenticated:
      return "UNAUTHENTICATED";
    case Status::Code::kPermissionDenied:
      return "PERMISSION_DENIED";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace tlp
