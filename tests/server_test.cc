// The daemon in-process over real loopback gRPC, a real RocksDB in a temp dir, and a real
// Prometheus scrape of /metrics, in a binary that links LibTorch (which is what breaks
// civetweb's small thread stacks without the fix in server/thread_stack.cc).
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>

#include "client/health_check.h"
#include "model/checkpoint.h"
#include "server/serve_command.h"
#include "tests/test_model.h"
#include "tests/test_support.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::server {
namespace {

class DaemonTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::FreshDirectory("tlp_daemon");
    ASSERT_TRUE(testing::WriteSmallModel(dir_ / "model.pt", 16, 1).ok());
    metrics_port_ = testing::FreePort();
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
  EXPECT_EQ(client::CheckHealth(channel_), client::Health::kServing);
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

  topk.set_exclude_seen(true);  // node 1 has already met all three destinations
  {
    grpc::ClientContext context;
    tlp::v1::TopKResponse unseen;
    ASSERT_TRUE(stub->TopK(&context, topk, &unseen).ok());
    EXPECT_EQ(unseen.candidates_scored(), 0u);
    EXPECT_EQ(unseen.results_size(), 0);
  }

  // The built-in baselines through the same call. Node 1 met 102 last (t = 350), then 100
  // (300), then 101 (250).
  topk.set_exclude_seen(false);
  topk.set_k(3);
  topk.set_ranker(tlp::v1::RANKER_RECENCY_POPULARITY);
  {
    grpc::ClientContext context;
    tlp::v1::TopKResponse recent;
    ASSERT_TRUE(stub->TopK(&context, topk, &recent).ok());
    ASSERT_EQ(recent.results_size(), 3);
    EXPECT_EQ(recent.results(0).dst(), 102u);
    EXPECT_EQ(recent.results(1).dst(), 100u);
    EXPECT_EQ(recent.results(2).dst(), 101u);
    EXPECT_EQ(recent.results(0).probability(), 0.0f);  // a baseline's score is no probability
  }
  topk.set_ranker(static_cast<tlp::v1::Ranker>(17));
  {
    grpc::ClientContext context;
    tlp::v1::TopKResponse refused;
    const grpc::Status status = stub->TopK(&context, topk, &refused);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(status.error_message().find("'ranker'"), std::string::npos);
  }

  tlp::v1::ModelInfoResponse info;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetModelInfo(&context, tlp::v1::ModelInfoRequest(), &info).ok());
  }
  EXPECT_EQ(info.architecture(), "tgn");
  EXPECT_EQ(info.events_applied(), 40u);
  EXPECT_EQ(info.fingerprint().size(), 16u);

  const std::string metrics = testing::HttpGet(metrics_port_, "/metrics");
  EXPECT_NE(metrics.find("tlpd_ingest_events_total{result=\"accepted\"} 40"), std::string::npos)
      << metrics.substr(0, 2000);
  // 2 scored pairs + 3 TopK candidates.
  EXPECT_NE(metrics.find("tlpd_representation_norm_count{role=\"src\"} 5"), std::string::npos);
  EXPECT_NE(metrics.find("tlpd_memory_thread_seconds_total{stage=\"apply\"}"), std::string::npos);
  EXPECT_NE(metrics.find("\ntlpd_rocksdb_block_cache_bytes "), std::string::npos);
  EXPECT_NE(metrics.find("\ntlpd_node_state_file_bytes "), std::string::npos);
}

}  // namespace
}  // namespace tlp::server
