#include "proto/grpc_status.h"

#include <string>

namespace tlp {

grpc::Status ToGrpcStatus(const Status& status) {
  using Code = Status::Code;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case Code::kOutOfRange:
      code = grpc::StatusCode::OUT_OF_RANGE;
      break;
    case Code::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case Code::kAlreadyExists:
      code = grpc::StatusCode::ALREADY_EXISTS;
      break;
    case Code::kFailedPrecondition:
      code = grpc::StatusCode::FAILED_PRECONDITION;
      break;
    case Code::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case Code::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case Code::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case Code::kCorruption:
      code = grpc::StatusCode::DATA_LOSS;
      break;
    case Code::kIoError:
    case Code::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
    case Code::kUnauthenticated:
      code = grpc::StatusCode::UNAUTHENTICATED;
      break;
    case Code::kPermissionDenied:
      code = grpc::StatusCode::PERMISSION_DENIED;
      break;
  }
  return {code, status.message()};
}

Status FromGrpcStatus(const grpc::Status& status) {
  using Code = grpc::StatusCode;
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case Code::OK:
      return Status::Ok();
    case Code::INVALID_ARGUMENT:
      return Status::InvalidArgument(message);
    case Code::OUT_OF_RANGE:
      return Status::OutOfRange(message);
    case Code::NOT_FOUND:
      return Status::NotFound(message);
    case Code::ALREADY_EXISTS:
      return Status::AlreadyExists(message);
    case Code::FAILED_PRECONDITION:
      return Status::FailedPrecondition(message);
    case Code::RESOURCE_EXHAUSTED:
      return Status::ResourceExhausted(message);
    case Code::UNAVAILABLE:
      return Status::Unavailable(message);
    case Code::DEADLINE_EXCEEDED:
      return Status::DeadlineExceeded(message);
    case Code::DATA_LOSS:
      return Status::Corruption(message);
    case Code::INTERNAL:
      return Status::Internal(message);
    case Code::UNAUTHENTICATED:
      return Status::Unauthenticated(message);
    case Code::PERMISSION_DENIED:
      return Status::PermissionDenied(message);
    default:
      return Status::Internal("gRPC code " + std::to_string(static_cast<int>(status.error_code())) +
                              ": " + message);
  }
}

}  // namespace tlp
