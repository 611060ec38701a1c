// The daemon in-process over real loopback gRPC, a real RocksDB in a temp dir, and a real
// Prometheus scrape of /metrics, in a binary that links LibTorch (which is what breaks
// civetweb's small thread stacks without the fix in server/thread_stack.cc).
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "model/checkpoint.h"
#include "server/serve_command.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::server {
namespace {

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    return "";
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (write(fd, request.data(), request.size()) < 0) return "";
  std::string response;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof(buffer))) > 0) response.append(buffer, n);
  close(fd);
  return response;
}

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address));
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("tlp_daemon_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    torch::manual_seed(1);
    model::ModelConfig config;
    config.memory_dim = config.embedding_dim = config.time_dim = 16;
    model::TemporalLinkModel model(config);
    ASSERT_TRUE(model::SaveCheckpoint((dir_ / "model.pt").string(), model).ok());
    metrics_port_ = FreePort();
    ServeOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:" + std::to_string(metrics_port_);
    options.engine.data_dir = (dir_ / "data").string();
    options.engine.checkpoint = (dir_ / "model.pt").string();
    options.engine.sync_writes = false;
    options.engine.memory_batch = 4;
    const Status status = Daemon::Start(options, &daemon_);
    ASSERT_TRUE(status.ok()) << status.ToString();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(daemon_->port()),
                                   grpc::InsecureChannelCredentials());
  }
  static void TearDownTestSuite() {
    daemon_.reset();
    std::filesystem::remove_all(dir_);
  }

  static inline std::filesystem::path dir_;
  static inline int metrics_port_ = 0;
  static inline std::unique_ptr<Daemon> daemon_;
  static inline std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(DaemonTest, HealthServiceAnswersServing) {
  grpc::ClientContext context;
  grpc::ByteBuffer response;
  // grpc.health.v1.HealthCheckRequest{service: ""} is the empty message.
  grpc::GenericStub stub(channel_);
  grpc::CompletionQueue queue;
  grpc::ByteBuffer request;
  grpc::Slice empty("");
  request = grpc::ByteBuffer(&empty, 1);
  grpc::Status status;
  auto call = stub.PrepareUnaryCall(&context, "/grpc.health.v1.Health/Check", request, &queue);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(queue.Next(&tag, &ok));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& slice : slices)
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  // HealthCheckResponse{status: SERVING (1)} encodes as field 1 varint 1: 0x08 0x01.
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
  queue.Shutdown();
}

TEST_F(DaemonTest, IngestsScoresAndReportsMetrics) {
  auto stub = tlp::v1::TemporalLinkPrediction::NewStub(channel_);
  tlp::v1::IngestBatchRequest batch;
  for (int i = 0; i < 40; ++i) {
    auto* event = batch.add_events();
    event->set_src(1 + i % 5);
    event->set_dst(100 + i % 3);
    event->set_ts(10.0 * i);
    event->set_event_id("e" + std::to_string(i));
  }
  tlp::v1::IngestSummary summary;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->IngestBatch(&context, batch, &summary).ok());
    EXPECT_EQ(summary.accepted(), 40u);
  }
  {
    grpc::ClientContext context;  // a re-send is acknowledged as duplicates
    tlp::v1::IngestSummary again;
    ASSERT_TRUE(stub->IngestBatch(&context, batch, &again).ok());
    EXPECT_EQ(again.accepted(), 0u);
    EXPECT_EQ(again.duplicates(), 40u);
  }
  {
    tlp::v1::IngestBatchRequest bad;
    auto* event = bad.add_events();
    event->set_src(1);
    event->set_dst(2);
    event->set_ts(-5);
    grpc::ClientContext context;
    const grpc::Status status = stub->IngestBatch(&context, bad, &summary);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("'ts'"), std::string::npos);
  }
  tlp::v1::ScoreRequest request;
  auto* known = request.add_queries();
  known->set_src(1);
  known->set_dst(100);
  auto* unknown = request.add_queries();
  unknown->set_src(999);
  unknown->set_dst(100);
  tlp::v1::ScoreResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status = stub->ScoreLinks(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  ASSERT_EQ(response.scores_size(), 2);
  const auto& first = response.scores(0);
  EXPECT_GT(first.probability(), 0.0f);
  EXPECT_LT(first.probability(), 1.0f);
  EXPECT_EQ(first.src_metrics().neighbors_used(), 8u);  // node 1 is in 8 of the 40 events
  EXPECT_GT(first.src_metrics().effective_neighbors(), 1.0f);
  EXPECT_FALSE(first.src_metrics().cold_start());
  EXPECT_TRUE(response.scores(1).src_metrics().cold_start());
  EXPECT_EQ(response.scores(1).src_metrics().neighbors_used(), 0u);

  tlp::v1::TopKRequest topk;
  topk.set_src(1);
  topk.set_k(2);
  tlp::v1::TopKResponse ranked;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->TopK(&context, topk, &ranked).ok());
  }
  EXPECT_EQ(ranked.candidates_scored(), 3u);  // destinations 100, 101, 102
  ASSERT_EQ(ranked.results_size(), 2);
  EXPECT_GE(ranked.results(0).probability(), ranked.results(1).probability());

  tlp::v1::ModelInfoResponse info;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetModelInfo(&context, tlp::v1::ModelInfoRequest(), &info).ok());
  }
  EXPECT_EQ(info.architecture(), "tgn");
  EXPECT_EQ(info.events_applied(), 40u);
  EXPECT_EQ(info.fingerprint().size(), 16u);

  const std::string metrics = HttpGet(metrics_port_, "/metrics");
  EXPECT_NE(metrics.find("tlpd_ingest_events_total{result=\"accepted\"} 40"), std::string::npos)
      << metrics.substr(0, 2000);
  // 2 scored pairs + 3 TopK candidates.
  EXPECT_NE(metrics.find("tlpd_representation_norm_count{role=\"src\"} 5"), std::string::npos);
}

}  // namespace
}  // namespace tlp::server
