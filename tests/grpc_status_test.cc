#include "proto/grpc_status.h"

#include <gtest/gtest.h>

namespace tlp {
namespace {

TEST(GrpcStatus, EveryCodeWithATwinSurvivesTheRoundTrip) {
  for (const Status& status :
       {Status::InvalidArgument("field 'k' must be in 1..1000"), Status::OutOfRange("o"),
        Status::NotFound("n"), Status::AlreadyExists("a"), Status::FailedPrecondition("f"),
        Status::ResourceExhausted("r"), Status::Unavailable("u"), Status::DeadlineExceeded("d"),
        Status::Corruption("c"), Status::Internal("i"), Status::Unauthenticated("t"),
        Status::PermissionDenied("p")}) {
    const Status back = FromGrpcStatus(ToGrpcStatus(status));
    EXPECT_EQ(back.code(), status.code()) << status.ToString();
    EXPECT_EQ(back.message(), status.message());
  }
  EXPECT_TRUE(FromGrpcStatus(ToGrpcStatus(Status::Ok())).ok());
}

TEST(GrpcStatus, StorageErrorsKeepTheirMeaningOnTheWire) {
  EXPECT_EQ(ToGrpcStatus(Status::Corruption("bad block")).error_code(),
            grpc::StatusCode::DATA_LOSS);
  EXPECT_EQ(ToGrpcStatus(Status::IoError("disk full")).error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_EQ(ToGrpcStatus(Status::IoError("disk full")).error_message(), "disk full");
}

TEST(GrpcStatus, CodesWithoutATwinReadAsInternal) {
  const Status status = FromGrpcStatus({grpc::StatusCode::UNIMPLEMENTED, "no such method"});
  EXPECT_EQ(status.code(), Status::Code::kInternal);
  EXPECT_NE(status.message().find("no such method"), std::string::npos);
}

}  // namespace
}  // namespace tlp
