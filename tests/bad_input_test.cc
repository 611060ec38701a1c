// The README's bad-input table, one test per row, against a daemon in process over loopback
// gRPC (and the request validator for the rows that need a store with edge features). Every row
// checks the status code, that the message names the field, and that nothing acknowledged
// before was lost.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>

#include "model/checkpoint.h"
#include "server/request_validation.h"
#include "server/serve_command.h"
#include "tests/test_model.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::server {
namespace {

class BadInputTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::FreshDirectory("tlp_bad_input");
    ASSERT_TRUE(testing::WriteSmallModel(dir_ / "model.pt", 8, 1).ok());
    ServeOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.engine.data_dir = (dir_ / "data").string();
    options.engine.checkpoint = (dir_ / "model.pt").string();
    options.engine.sync_writes = false;
    ASSERT_TRUE(Daemon::Start(options, &daemon_).ok());
    stub_ = tlp::v1::TemporalLinkPrediction::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(daemon_->port()), grpc::InsecureChannelCredentials()));
    // The acknowledged history every row must leave intact.
    tlp::v1::IngestBatchRequest request;
    for (int i = 0; i < 20; ++i) AddEvent(&request, 1 + i % 4, 100 + i % 3, 10000.0 + i);
    tlp::v1::IngestSummary summary;
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->IngestBatch(&context, request, &summary).ok());
  }
  static void TearDownTestSuite() {
    stub_.reset();
    daemon_.reset();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override {
    EXPECT_EQ(daemon_->engine().store().last_sequence(), acknowledged_)
        << "a bad request changed the store";
  }

  static tlp::v1::EdgeEvent* AddEvent(tlp::v1::IngestBatchRequest* request, uint64_t src,
                                      uint64_t dst, double ts) {
    auto* event = request->add_events();
    event->set_src(src);
    event->set_dst(dst);
    event->set_ts(ts);
    return event;
  }
  // A batch of two good events and one changed by `spoil`, at index 2.
  static grpc::Status IngestSpoiled(const std::function<void(tlp::v1::EdgeEvent*)>& spoil) {
    tlp::v1::IngestBatchRequest request;
    AddEvent(&request, 1, 100, 10020);
    AddEvent(&request, 2, 101, 10021);
    spoil(AddEvent(&request, 3, 102, 10022));
    tlp::v1::IngestSummary summary;
    grpc::ClientContext context;
    return stub_->IngestBatch(&context, request, &summary);
  }
  static void ExpectError(const grpc::Status& status, grpc::StatusCode code,
                          const std::string& names) {
    EXPECT_EQ(status.error_code(), code) << status.error_message();
    EXPECT_NE(status.error_message().find(names), std::string::npos) << status.error_message();
  }

  static inline uint64_t acknowledged_ = 20;  // events acknowledged so far
  static inline std::filesystem::path dir_;
  static inline std::unique_ptr<Daemon> daemon_;
  static inline std::unique_ptr<tlp::v1::TemporalLinkPrediction::Stub> stub_;
};

TEST_F(BadInputTest, NanTs) {
  ExpectError(IngestSpoiled([](auto* e) { e->set_ts(std::nan("")); }),
              grpc::StatusCode::INVALID_ARGUMENT, "event 2: field 'ts'");
}

TEST_F(BadInputTest, InfiniteTs) {
  ExpectError(IngestSpoiled([](auto* e) { e->set_ts(INFINITY); }),
              grpc::StatusCode::INVALID_ARGUMENT, "event 2: field 'ts'");
}

TEST_F(BadInputTest, NegativeTs) {
  ExpectError(IngestSpoiled([](auto* e) { e->set_ts(-1); }), grpc::StatusCode::INVALID_ARGUMENT,
              "event 2: field 'ts'");
}

TEST_F(BadInputTest, TsBeyondTheLatenessWindow) {
  ExpectError(IngestSpoiled([](auto* e) { e->set_ts(10019 - 3601); }),
              grpc::StatusCode::OUT_OF_RANGE, "event 2");
}

TEST_F(BadInputTest, TsFromTheFarFuture) {
  // 1e300, or milliseconds from a client that should send seconds: refused, so that the real
  // events after it still fit the lateness window.
  ExpectError(IngestSpoiled([](auto* e) { e->set_ts(1e300); }), grpc::StatusCode::INVALID_ARGUMENT,
              "event 2: field 'ts'");
  ExpectError(IngestSpoiled([](auto* e) { e->set_ts(e->ts() * 1000); }),
              grpc::StatusCode::INVALID_ARGUMENT, "--max-future-seconds");
}

TEST_F(BadInputTest, SelfLoop) {
  ExpectError(IngestSpoiled([](auto* e) { e->set_dst(e->src()); }),
              grpc::StatusCode::INVALID_ARGUMENT, "'src' and 'dst'");
}

TEST_F(BadInputTest, LargestIdsAreValidNodes) {
  // Ids are opaque uint64 values: none is out of range, the extremes included.
  tlp::v1::ScoreRequest request;
  auto* query = request.add_queries();
  query->set_src(std::numeric_limits<uint64_t>::max());
  query->set_dst(0);
  tlp::v1::ScoreResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->ScoreLinks(&context, request, &response).ok());
  EXPECT_TRUE(response.scores(0).src_metrics().cold_start());
}

TEST_F(BadInputTest, FeatureVectorOfTheWrongLength) {
  ExpectError(IngestSpoiled([](auto* e) { e->add_features(1.0f); }),
              grpc::StatusCode::INVALID_ARGUMENT, "event 2: field 'features' has 1 values");
}

TEST_F(BadInputTest, NanFeatures) {
  // This daemon's model has no edge features; the validator with a width of 2 has.
  tlp::v1::IngestBatchRequest request;
  auto* event = AddEvent(&request, 1, 2, 3);
  event->add_features(0.5f);
  event->add_features(std::nanf(""));
  EventBatch batch;
  batch.feature_dim = 2;
  const Status status = ToEventBatch(request, 100, &batch);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("event 0: field 'features' holds NaN"), std::string::npos);
}

TEST_F(BadInputTest, EmptyBatch) {
  tlp::v1::IngestBatchRequest request;
  tlp::v1::IngestSummary summary;
  grpc::ClientContext context;
  ExpectError(stub_->IngestBatch(&context, request, &summary), grpc::StatusCode::INVALID_ARGUMENT,
              "field 'events' is empty");
}

TEST_F(BadInputTest, EventIdTooLong) {
  ExpectError(IngestSpoiled([](auto* e) { e->set_event_id(std::string(129, 'x')); }),
              grpc::StatusCode::INVALID_ARGUMENT, "field 'event_id'");
}

TEST_F(BadInputTest, TooManyEventsInOneBatch) {
  tlp::v1::IngestBatchRequest request;
  for (int i = 0; i < 100001; ++i) AddEvent(&request, 1, 2, 10030);
  tlp::v1::IngestSummary summary;
  grpc::ClientContext context;
  ExpectError(stub_->IngestBatch(&context, request, &summary), grpc::StatusCode::INVALID_ARGUMENT,
              "field 'events' holds 100001 events");
}

TEST_F(BadInputTest, OversizedMessage) {
  // Over the 64 MiB receive limit: gRPC refuses it before tlpd parses anything.
  tlp::v1::IngestBatchRequest request;
  AddEvent(&request, 1, 2, 10030)->set_event_id(std::string(65 << 20, 'x'));
  tlp::v1::IngestSummary summary;
  grpc::ClientContext context;
  EXPECT_EQ(stub_->IngestBatch(&context, request, &summary).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(BadInputTest, TooManyScorePairsAndKOutOfRange) {
  tlp::v1::ScoreRequest request;
  for (int i = 0; i < 10001; ++i) request.add_queries()->set_src(1);
  tlp::v1::ScoreResponse response;
  {
    grpc::ClientContext context;
    ExpectError(stub_->ScoreLinks(&context, request, &response), grpc::StatusCode::INVALID_ARGUMENT,
                "field 'queries'");
  }
  tlp::v1::TopKRequest topk;
  topk.set_src(1);
  topk.set_k(1001);
  tlp::v1::TopKResponse ranked;
  grpc::ClientContext context;
  ExpectError(stub_->TopK(&context, topk, &ranked), grpc::StatusCode::INVALID_ARGUMENT,
              "field 'k'");
}

TEST_F(BadInputTest, StreamThatStopsMidwayThenResumes) {
  // A client that dies mid-stream got no acknowledgement; its retry with the same ids stores
  // each event once whatever the first attempt left behind.
  auto send = [](int count, bool cancel) {
    grpc::ClientContext context;
    tlp::v1::IngestSummary summary;
    auto writer = stub_->IngestEvents(&context, &summary);
    tlp::v1::EdgeEvent event;
    for (int i = 0; i < count; ++i) {
      event.set_src(7);
      event.set_dst(200 + i);
      event.set_ts(10040 + i);
      event.set_event_id("stream-" + std::to_string(i));
      writer->Write(event);
    }
    if (cancel) {
      context.TryCancel();
      writer->Finish();
      return tlp::v1::IngestSummary();
    }
    writer->WritesDone();
    EXPECT_TRUE(writer->Finish().ok());
    return summary;
  };
  send(6, /*cancel=*/true);
  const tlp::v1::IngestSummary resumed = send(10, /*cancel=*/false);
  EXPECT_EQ(resumed.accepted() + resumed.duplicates(), 10u);
  EXPECT_EQ(resumed.rejected(), 0u);
  acknowledged_ += 10;
  EXPECT_EQ(daemon_->engine().store().last_sequence(), acknowledged_);
}

TEST_F(BadInputTest, WrongContentTypeOnTheGrpcPort) {
  // Plain HTTP/1.1 with a JSON body: the server refuses the connection's protocol and keeps
  // serving gRPC.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(daemon_->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  const std::string request =
      "POST /tlp.v1.TemporalLinkPrediction/IngestBatch HTTP/1.1\r\nHost: x\r\n"
      "Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
  ASSERT_EQ(write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  char reply[256];
  const ssize_t got = read(fd, reply, sizeof(reply));  // closed, or an HTTP/2 error frame
  EXPECT_GE(got, 0);
  close(fd);
  tlp::v1::ModelInfoResponse info;
  grpc::ClientContext context;
  EXPECT_TRUE(stub_->GetModelInfo(&context, {}, &info).ok());
}

TEST_F(BadInputTest, StateLabelOtherThanZeroOrOne) {
  ExpectError(IngestSpoiled([](auto* e) { e->set_state_label(2); }),
              grpc::StatusCode::INVALID_ARGUMENT, "event 2: field 'state_label'");
}

TEST_F(BadInputTest, NodeStateQueries) {
  auto score = [](const tlp::v1::ScoreNodeStatesRequest& request) {
    tlp::v1::ScoreNodeStatesResponse response;
    grpc::ClientContext context;
    return stub_->ScoreNodeStates(&context, request, &response);
  };
  tlp::v1::ScoreNodeStatesRequest request;
  ExpectError(score(request), grpc::StatusCode::INVALID_ARGUMENT, "field 'queries' is empty");
  for (int i = 0; i < 10001; ++i) request.add_queries()->set_node(1);
  ExpectError(score(request), grpc::StatusCode::INVALID_ARGUMENT, "field 'queries' holds 10001");
  request.clear_queries();
  request.add_queries()->set_at(-1);
  ExpectError(score(request), grpc::StatusCode::INVALID_ARGUMENT, "query 0: field 'at'");
  request.mutable_queries(0)->set_at(std::nan(""));
  ExpectError(score(request), grpc::StatusCode::INVALID_ARGUMENT, "query 0: field 'at'");
  // This daemon's model predicts links only.
  request.mutable_queries(0)->set_at(0);
  ExpectError(score(request), grpc::StatusCode::FAILED_PRECONDITION, "--node-state");
}

}  // namespace
}  // namespace tlp::server
