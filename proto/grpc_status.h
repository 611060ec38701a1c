// The one mapping between tlpd's Status codes and gRPC status codes. The server answers with
// ToGrpcStatus and the client reads answers with FromGrpcStatus, so a code means the same on
// both sides of the wire (docs: the bad-input table lists what each call answers).
//
//   Status            gRPC
//   kInvalidArgument  INVALID_ARGUMENT      kUnavailable       UNAVAILABLE
//   kOutOfRange       OUT_OF_RANGE          kDeadlineExceeded  DEADLINE_EXCEEDED
//   kNotFound         NOT_FOUND             kCorruption        DATA_LOSS
//   kAlreadyExists    ALREADY_EXISTS        kIoError           INTERNAL
//   kFailedPrecondition FAILED_PRECONDITION kInternal          INTERNAL
//   kResourceExhausted RESOURCE_EXHAUSTED
// gRPC codes without a twin (CANCELLED, UNKNOWN, ABORTED, UNIMPLEMENTED, PERMISSION_DENIED,
// UNAUTHENTICATED) read as kInternal, the code's number in the message.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/status.h"

namespace tlp {

grpc::Status ToGrpcStatus(const Status& status);
Status FromGrpcStatus(const grpc::Status& status);

}  // namespace tlp
