// Status: the error return used at every module boundary of tlpd.
//
// A Status is either OK or carries a code and a message meant for people. The codes mirror the
// gRPC ones the server maps them to, so a storage or model error reaches the client unchanged.
// [[nodiscard]]: a dropped Status is a compile error.
#pragma once

#include <string>
#include <string_view>
#include <utility>

namespace tlp {

class [[nodiscard]] Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,     // a caller-supplied value is wrong; the message names the field
    kOutOfRange,          // e.g. an event older than the lateness window
    kNotFound,            // a file, node or column family does not exist
    kAlreadyExists,       // creating what is already there
    kFailedPrecondition,  // state is wrong for the call (e.g. schema version mismatch)
    kResourceExhausted,   // a bounded queue is full; retry later
    kUnavailable,         // recovering or draining
    kDeadlineExceeded,    // the caller's deadline passed before the work was done
    kCorruption,          // stored data cannot be decoded
    kIoError,             // the operating system or RocksDB failed an I/O
    kInternal,            // a bug
    kUnauthenticated,     // no valid credentials (a missing or unknown token)
    kPermissionDenied,    // valid credentials that may not make this call
  };

  Status() = default;
  Status(Code code, std::string_view message) : code_(code), message_(message) {}
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string_view message) {
    return {Code::kInvalidArgument, message};
  }
  static Status OutOfRange(std::string_view message) { return {Code::kOutOfRange, message}; }
  static Status NotFound(std::string_view message) { return {Code::kNotFound, message}; }
  static Status AlreadyExists(std::string_view message) { return {Code::kAlreadyExists, message}; }
  static Status FailedPrecondition(std::string_view message) {
    return {Code::kFailedPrecondition, message};
  }
  static Status ResourceExhausted(std::string_view message) {
    return {Code::kResourceExhausted, message};
  }
  static Status Unavailable(std::string_view message) { return {Code::kUnavailable, message}; }
  static Status DeadlineExceeded(std::string_view message) {
    return {Code::kDeadlineExceeded, message};
  }
  static Status Corruption(std::string_view message) { return {Code::kCorruption, message}; }
  static Status IoError(std::string_view message) { return {Code::kIoError, message}; }
  static Status Internal(std::string_view message) { return {Code::kInternal, message}; }
  static Status Unauthenticated(std::string_view message) {
    return {Code::kUnauthenticated, message};
  }
  static Status PermissionDenied(std::string_view message) {
    return {Code::kPermissionDenied, message};
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "<code name>: <message>".
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

const char* CodeName(Status::Code code);

}  // namespace tlp
