// The real `tlpd serve` process over loopback gRPC with a real RocksDB: stream the first 10 %
// of Wikipedia, score under concurrent clients, stop with SIGTERM, restart, and get identical
// scores; kill with SIGKILL and lose no acknowledged event.
#include "tests/daemon_process.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <thread>

#include "client/health_check.h"
#include "common/event_reader.h"
#include "model/checkpoint.h"
#include "storage/temporal_store.h"
#include "tests/test_model.h"
#include "tests/test_support.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp {
namespace {

using std::chrono::seconds;
using testing::DaemonProcess;

class DaemonProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDirectory("tlp_process");
    ASSERT_TRUE(testing::WriteSmallModel(dir_ / "model.pt", 32, 3).ok());
    EventBatch all;
    ASSERT_TRUE(EventReader::ReadAll(testing::BundledData("wikipedia.csv.gz"), &all).ok());
    const size_t tenth = all.size() / 10;
    for (size_t i = 0; i < tenth; ++i) {
      events_.Add(all.src[i], all.dst[i], all.ts[i], {}, "wiki:" + std::to_string(i));
    }
    port_ = testing::FreePort();
    metrics_port_ = testing::FreePort();
  }
  void TearDown() override {
    if (!std::getenv("TLP_KEEP_TEST_DIR")) std::filesystem::remove_all(dir_);
  }

  std::string Log() const {
    std::ifstream log(dir_ / "tlpd.log");
    return {std::istreambuf_iterator<char>(log), std::istreambuf_iterator<char>()};
  }

  tlp::v1::IngestSummary Stream(tlp::v1::TemporalLinkPrediction::Stub& stub, size_t begin,
                                size_t end) {
    grpc::ClientContext context;
    tlp::v1::IngestSummary summary;
    auto writer = stub.IngestEvents(&context, &summary);
    tlp::v1::EdgeEvent event;
    for (size_t i = begin; i < end; ++i) {
      event.set_src(events_.src[i]);
      event.set_dst(events_.dst[i]);
      event.set_ts(events_.ts[i]);
      event.set_event_id(std::string(events_.EventIdOf(i)));
      if (!writer->Write(event)) break;
    }
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    EXPECT_TRUE(status.ok()) << status.error_message();
    return summary;
  }

  std::vector<float> ScoreFixedQueries(tlp::v1::TemporalLinkPrediction::Stub& stub) {
    tlp::v1::ScoreRequest request;
    for (size_t i = 0; i < 40; ++i) {
      auto* query = request.add_queries();
      query->set_src(events_.src[i * 97 % events_.size()]);
      query->set_dst(events_.dst[i * 89 % events_.size()]);
    }
    grpc::ClientContext context;
    tlp::v1::ScoreResponse response;
    const grpc::Status status = stub.ScoreLinks(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    std::vector<float> logits;
    for (const auto& score : response.scores()) logits.push_back(score.logit());
    return logits;
  }

  std::filesystem::path dir_;
  EventBatch events_;
  int port_ = 0, metrics_port_ = 0;
};

TEST_F(DaemonProcessTest, RestartGivesIdenticalScoresAndKillLosesNothing) {
  std::vector<float> before;
  uint64_t applied = 0;
  {
    DaemonProcess daemon(dir_, port_, metrics_port_);
    ASSERT_TRUE(daemon.WaitServing());
    auto stub = daemon.Stub();
    const auto summary = Stream(*stub, 0, events_.size());
    EXPECT_EQ(summary.accepted(), events_.size());

    // Concurrent clients share scoring passes and all succeed.
    std::vector<std::thread> clients;
    std::atomic<int> failures{0};
    for (int c = 0; c < 8; ++c) {
      clients.emplace_back([&, c] {
        auto client = daemon.Stub();
        std::mt19937_64 random(c);
        for (int r = 0; r < 20; ++r) {
          tlp::v1::ScoreRequest request;
          for (int q = 0; q < 25; ++q) {
            auto* query = request.add_queries();
            query->set_src(events_.src[random() % events_.size()]);
            query->set_dst(events_.dst[random() % events_.size()]);
          }
          grpc::ClientContext context;
          tlp::v1::ScoreResponse response;
          if (!client->ScoreLinks(&context, request, &response).ok() ||
              response.scores_size() != 25) {
            ++failures;
          }
        }
      });
    }
    for (auto& client : clients) client.join();
    EXPECT_EQ(failures.load(), 0);

    before = ScoreFixedQueries(*stub);
    grpc::ClientContext context;
    tlp::v1::ModelInfoResponse info;
    ASSERT_TRUE(stub->GetModelInfo(&context, {}, &info).ok());
    applied = info.events_applied();
    EXPECT_GT(applied, events_.size() - 200);  // all but the open memory chunk

    // Metrics are scraped from the live process.
    std::string metrics;
    for (int i = 0; i < 50; ++i) {
      metrics = testing::HttpGet(metrics_port_, "/metrics");
      if (metrics.find("tlpd_events_stored " + std::to_string(events_.size())) != std::string::npos)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_NE(metrics.find("tlpd_events_stored " + std::to_string(events_.size())),
              std::string::npos)
        << metrics.substr(0, 1500);
    const int status = daemon.Kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  {
    DaemonProcess daemon(dir_, port_, metrics_port_);
    ASSERT_TRUE(daemon.WaitServing());
    auto stub = daemon.Stub();
    const std::vector<float> after = ScoreFixedQueries(*stub);
    ASSERT_EQ(after.size(), before.size());
    for (size_t i = 0; i < before.size(); ++i) EXPECT_FLOAT_EQ(after[i], before[i]) << i;
    // The restart restored the memory checkpoint written at shutdown (last full chunk of 200)
    // rather than replaying the whole log.
    const std::string text = Log();
    const std::string restored =
        "restored memory at sequence " + std::to_string(events_.size() / 200 * 200);
    EXPECT_NE(text.find(restored), std::string::npos) << text;
    grpc::ClientContext context;
    tlp::v1::ModelInfoResponse info;
    ASSERT_TRUE(stub->GetModelInfo(&context, {}, &info).ok());
    EXPECT_EQ(info.events_applied(), applied);

    // A re-send after a "failure" stores nothing twice; then SIGKILL mid-life.
    const auto again = Stream(*stub, 0, events_.size());
    EXPECT_EQ(again.accepted(), 0u);
    EXPECT_EQ(again.duplicates(), events_.size());
    daemon.Kill(SIGKILL);
  }
  DaemonProcess daemon(dir_, port_, metrics_port_);
  ASSERT_TRUE(daemon.WaitServing());
  auto stub = daemon.Stub();
  tlp::v1::NodeStateRequest request;
  request.set_node(events_.src[0]);
  grpc::ClientContext context;
  tlp::v1::NodeStateResponse node;
  ASSERT_TRUE(stub->GetNodeState(&context, request, &node).ok());
  EXPECT_TRUE(node.known());
  EXPECT_EQ(ScoreFixedQueries(*stub), before);
}

TEST_F(DaemonProcessTest, FirstStartTrainsAModelWhenThereIsNone) {
  // A small SNAP file stands in for the bundled stream, to keep the training short.
  const std::filesystem::path data = dir_ / "first-start.txt";
  {
    std::ofstream out(data);
    out << "src dst time\n";
    for (size_t i = 0; i < 3000; ++i) {
      out << events_.src[i] << ' ' << events_.dst[i] << ' ' << events_.ts[i] << '\n';
    }
  }
  {
    // Refused without a model when bootstrapping is off, naming the missing file.
    DaemonProcess daemon(dir_, port_, metrics_port_, {"--no-bootstrap"});
    const int status = daemon.WaitExit(seconds(60));
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
    EXPECT_NE(Log().find((dir_ / "data" / "model.pt").string()), std::string::npos) << Log();
  }
  {
    // A stop signal while it trains exits then, not once the training is done, and leaves no
    // model behind (the next start trains again).
    DaemonProcess daemon(dir_, port_, metrics_port_, {"--bootstrap-data", data.string()});
    for (int i = 0; i < 600 && Log().find("training the bundled model") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_NE(Log().find("training the bundled model"), std::string::npos) << Log();
    const int status = daemon.Kill(SIGTERM);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_NE(Log().find("during start-up: exiting before serving"), std::string::npos) << Log();
    EXPECT_EQ(Log().find("model.pt.training (fingerprint"), std::string::npos) << Log();
    EXPECT_FALSE(std::filesystem::exists(dir_ / "data" / "model.pt"));
  }
  DaemonProcess daemon(dir_, port_, metrics_port_, {"--bootstrap-data", data.string()});
  // While it trains, the gRPC server is up: not ready (NOT_SERVING), but alive, so that an
  // orchestrator's liveness probe does not restart it in a loop.
  client::Health first = client::Health::kUnreachable;
  for (int i = 0; i < 300 && first == client::Health::kUnreachable; ++i) {
    first = daemon.Health();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(first, client::Health::kNotServing);
  EXPECT_EQ(daemon.Health("liveness"), client::Health::kServing);
  ASSERT_TRUE(daemon.WaitServing()) << Log();
  EXPECT_EQ(daemon.Health("liveness"), client::Health::kServing);
  EXPECT_TRUE(std::filesystem::exists(dir_ / "data" / "model.pt"));
  EXPECT_NE(Log().find("training the bundled model"), std::string::npos);
  auto stub = daemon.Stub();
  grpc::ClientContext context;
  tlp::v1::ModelInfoResponse info;
  ASSERT_TRUE(stub->GetModelInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.architecture(), "tgn");
  EXPECT_EQ(info.edge_feature_dim(), 0u);
  EXPECT_EQ(Stream(*stub, 0, 500).accepted(), 500u);
}

TEST_F(DaemonProcessTest, EveryServeOptionReadsItsEnvironmentVariable) {
  // Each option --x-y is listed with TLPD_X_Y.
  FILE* help = popen(TLPD_BINARY " serve --help", "r");
  ASSERT_NE(help, nullptr);
  std::string text;
  char buffer[4096];
  while (size_t read = fread(buffer, 1, sizeof(buffer), help)) text.append(buffer, read);
  pclose(help);
  for (const char* option : {"--listen", "--no-sync", "--score-max-batch", "--ingest-linger-us",
                             "--kafka-batch", "--allow-self-loops", "--max-k"}) {
    std::string variable = std::string("TLPD_") + (option + 2);
    for (char& c : variable) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
    EXPECT_NE(text.find("[env " + variable + "]"), std::string::npos) << option << "\n" << text;
  }
  // A negated flag by its variable: TLPD_NO_BOOTSTRAP=1 acts as --no-bootstrap.
  setenv("TLPD_NO_BOOTSTRAP", "1", 1);
  DaemonProcess daemon(dir_, port_, metrics_port_, {"--device", "cpu"});
  const int status = daemon.WaitExit(seconds(60));
  unsetenv("TLPD_NO_BOOTSTRAP");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0) << status;
  EXPECT_NE(Log().find((dir_ / "data" / "model.pt").string()), std::string::npos) << Log();
  EXPECT_EQ(Log().find("training the bundled model"), std::string::npos) << Log();
}

double JsonNumber(const std::filesystem::path& file, const std::string& pointer) {
  std::ifstream in(file);
  EXPECT_TRUE(in.good()) << file;
  return nlohmann::json::parse(in).at(nlohmann::json::json_pointer(pointer)).get<double>();
}

TEST_F(DaemonProcessTest, TlpctlEvalThroughTheDaemonMatchesTlpdEvalReplay) {
  const std::filesystem::path stream = dir_ / "stream.txt";
  {
    std::ofstream out(stream);
    out.precision(17);
    out << "src dst time\n";
    for (size_t i = 0; i < events_.size(); ++i) {
      out << events_.src[i] << ' ' << events_.dst[i] << ' ' << events_.ts[i] << '\n';
    }
  }
  const std::string offline = (dir_ / "offline.json").string();
  const std::string served = (dir_ / "served.json").string();
  const std::string in_process =
      std::string(TLPD_BINARY) + " eval --replay --data " + stream.string() + " --checkpoint " +
      (dir_ / "model.pt").string() +
      " --threads 1 --mrr-queries 200 --ranking-queries 300 --json-out " + offline + " >>" +
      (dir_ / "eval.log").string() + " 2>&1";
  ASSERT_EQ(std::system(in_process.c_str()), 0) << in_process;

  DaemonProcess daemon(dir_, port_, metrics_port_);
  ASSERT_TRUE(daemon.WaitServing());
  const std::string through_daemon =
      std::string(TLPCTL_BINARY) + " --address 127.0.0.1:" + std::to_string(port_) + " eval " +
      stream.string() + " --mrr-queries 200 --ranking-queries 300 --plot " +
      (dir_ / "eval.svg").string() + " --json-out " + served + " >>" +
      (dir_ / "eval.log").string() + " 2>&1";
  ASSERT_EQ(std::system(through_daemon.c_str()), 0) << through_daemon;

  for (const char* figure :
       {"/random/ap", "/random/auc", "/historical/ap", "/historical/pooled_auc", "/mrr",
        "/mean_representation_norm", "/test_events", "/ranking/mrr", "/ranking/hits_at_10",
        "/ranking_unrankable", "/baselines/edgebank/mrr", "/baselines/recency_popularity/mrr",
        "/baselines/popularity/hits_at_10"}) {
    EXPECT_NEAR(JsonNumber(served, figure), JsonNumber(offline, figure), 1e-9) << figure;
  }
  // The figures are real ones, not a degenerate constant (which gives AP 0.5; the model is
  // untrained, so its AP may fall on either side).
  EXPECT_GT(std::abs(JsonNumber(served, "/random/ap") - 0.5), 0.01);
  EXPECT_GT(JsonNumber(served, "/test_events"), 1000);
  // One-vs-all through TopK: the queries asked for, ranked among many candidates.
  EXPECT_EQ(JsonNumber(served, "/ranking/queries"), 300);
  EXPECT_GT(JsonNumber(served, "/ranking_candidates_mean"), 10);
  EXPECT_GT(JsonNumber(served, "/ranking/mrr"), 0);
  EXPECT_GT(JsonNumber(served, "/baselines/recency_popularity/mrr"), 0);

  // A second evaluation against the same daemon is refused: it has seen the test period.
  const std::string again =
      std::string(TLPCTL_BINARY) + " --address 127.0.0.1:" + std::to_string(port_) + " eval " +
      stream.string() + " --mrr-queries 0 >" + (dir_ / "again.log").string() + " 2>&1";
  EXPECT_NE(std::system(again.c_str()), 0);
  std::ifstream log(dir_ / "again.log");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("empty data directory"), std::string::npos) << text;

  // The plot of the first evaluation (gnuplot's SVG).
  std::ifstream plot(dir_ / "eval.svg");
  const std::string svg((std::istreambuf_iterator<char>(plot)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("representation norm vs degree"), std::string::npos);

  // The load generator against the same daemon.
  const std::string address = " --address 127.0.0.1:" + std::to_string(port_);
  const std::string bench_json = (dir_ / "bench.json").string();
  ASSERT_EQ(std::system((std::string(TLPCTL_BINARY) + address +
                         " --json bench --duration 1 --concurrency 4 --pairs 5 --pairs-from " +
                         stream.string() + " >" + bench_json)
                            .c_str()),
            0);
  EXPECT_GT(JsonNumber(bench_json, "/requests"), 10);
  EXPECT_EQ(JsonNumber(bench_json, "/failures"), 0);
  EXPECT_GT(JsonNumber(bench_json, "/p50_ms"), 0);
  EXPECT_GE(JsonNumber(bench_json, "/p99_ms"), JsonNumber(bench_json, "/p50_ms"));
  // Not a loopback address: refused before any request.
  EXPECT_NE(std::system((std::string(TLPCTL_BINARY) +
                         " --address 10.1.2.3:50051 bench --duration 1 >/dev/null 2>&1")
                            .c_str()),
            0);
}

// Seeded crash harness: three clients stream while tlpd is SIGKILLed at random points, 20
// times; each restart resumes from the first unacknowledged batch (and re-sends the last
// acknowledged one). Every acknowledged event must be stored exactly once, and the final memory
// must equal a clean run's over the same events in the same order (scores for fixed queries).
TEST_F(DaemonProcessTest, TwentySigkillsLoseNothingAndStoreNothingTwice) {
  constexpr int kKills = 20, kClients = 3;
  // Small, paced batches: the stream lasts longer than the 20 kill intervals together.
  constexpr size_t kEvents = 15000, kBatch = 10;
  ASSERT_GE(events_.size(), kEvents);
  const std::vector<std::string> model = {"--checkpoint",       (dir_ / "model.pt").string(),
                                          "--lateness-seconds", "1e12",
                                          "--checkpoint-every", "1000"};
  // Client c sends batches c, c + kClients, ... of the first kEvents events.
  const size_t batches = kEvents / kBatch;
  std::vector<std::atomic<uint8_t>> acknowledged(batches);
  auto send = [&](tlp::v1::TemporalLinkPrediction::Stub& stub, size_t batch) {
    tlp::v1::IngestBatchRequest request;
    for (size_t i = batch * kBatch; i < (batch + 1) * kBatch; ++i) {
      auto* event = request.add_events();
      event->set_src(events_.src[i]);
      event->set_dst(events_.dst[i]);
      event->set_ts(events_.ts[i]);
      event->set_event_id(std::string(events_.EventIdOf(i)));
    }
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + seconds(10));
    tlp::v1::IngestSummary summary;
    return stub.IngestBatch(&context, request, &summary).ok();
  };
  std::mt19937_64 random(42);
  for (int kill = 0; kill < kKills; ++kill) {
    DaemonProcess daemon(dir_, port_, metrics_port_, model);
    ASSERT_TRUE(daemon.WaitServing()) << "kill " << kill << "\n" << Log();
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        auto stub = daemon.Stub();
        size_t first = c;
        while (first < batches && acknowledged[first]) first += kClients;
        // The last acknowledged batch again: a client that did not see its answer would.
        if (first >= kClients && !send(*stub, first - kClients)) return;
        for (size_t batch = first; batch < batches; batch += kClients) {
          if (!send(*stub, batch)) return;
          acknowledged[batch] = 1;
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50 + random() % 400));
    daemon.Kill(SIGKILL);
    for (auto& client : clients) client.join();
  }
  std::vector<float> crashed_scores;
  {
    DaemonProcess daemon(dir_, port_, metrics_port_, model);
    ASSERT_TRUE(daemon.WaitServing()) << Log();
    auto stub = daemon.Stub();
    for (size_t batch = 0; batch < batches; ++batch) {
      if (!acknowledged[batch]) {
        ASSERT_TRUE(send(*stub, batch));
      }
    }
    crashed_scores = ScoreFixedQueries(*stub);
    EXPECT_EQ(daemon.Kill(SIGTERM), 0);
  }
  // Exactly once: every event id in the store, none twice, nothing else.
  EventBatch stored;
  {
    std::unique_ptr<storage::TemporalStore> store;
    ASSERT_TRUE(storage::TemporalStore::Open((dir_ / "data").string(), {}, &store).ok());
    ASSERT_TRUE(store
                    ->ReplayAfter(0, 10000,
                                  [&](const EventBatch& batch, uint64_t) {
                                    for (size_t i = 0; i < batch.size(); ++i) {
                                      stored.Add(batch.src[i], batch.dst[i], batch.ts[i], {},
                                                 batch.EventIdOf(i));
                                    }
                                    return Status::Ok();
                                  })
                    .ok());
  }
  ASSERT_EQ(stored.size(), kEvents);
  std::set<std::string> ids(stored.event_ids.begin(), stored.event_ids.end());
  EXPECT_EQ(ids.size(), kEvents);
  for (size_t i = 0; i < kEvents; ++i) EXPECT_TRUE(ids.contains(std::string(events_.EventIdOf(i))));

  // A clean run over the same events in the stored order.
  const std::filesystem::path clean = dir_ / "clean";
  std::filesystem::create_directories(clean);
  std::filesystem::copy_file(dir_ / "model.pt", clean / "model.pt");
  DaemonProcess daemon(clean, port_, metrics_port_, model);
  ASSERT_TRUE(daemon.WaitServing());
  auto stub = daemon.Stub();
  tlp::v1::IngestBatchRequest request;
  for (size_t i = 0; i < stored.size(); ++i) {
    auto* event = request.add_events();
    event->set_src(stored.src[i]);
    event->set_dst(stored.dst[i]);
    event->set_ts(stored.ts[i]);
    event->set_event_id(std::string(stored.EventIdOf(i)));
  }
  grpc::ClientContext context;
  tlp::v1::IngestSummary summary;
  ASSERT_TRUE(stub->IngestBatch(&context, request, &summary).ok());
  const std::vector<float> clean_scores = ScoreFixedQueries(*stub);
  ASSERT_EQ(clean_scores.size(), crashed_scores.size());
  for (size_t i = 0; i < clean_scores.size(); ++i) {
    EXPECT_NEAR(crashed_scores[i], clean_scores[i], 1e-5) << i;
  }
}

TEST_F(DaemonProcessTest, DiskFullFailsIngestClearlyAndLosesNothingAcknowledged) {
  uint64_t acknowledged = 0;
  std::string error;
  {
    DaemonProcess daemon(dir_, port_, metrics_port_, {}, 2 << 20);
    ASSERT_TRUE(daemon.WaitServing()) << Log();
    auto stub = daemon.Stub();
    for (size_t begin = 0; begin + 500 <= events_.size(); begin += 500) {
      tlp::v1::IngestBatchRequest request;
      for (size_t i = begin; i < begin + 500; ++i) {
        auto* event = request.add_events();
        event->set_src(events_.src[i]);
        event->set_dst(events_.dst[i]);
        event->set_ts(events_.ts[i]);
        event->set_event_id(std::string(events_.EventIdOf(i)) + std::string(100, '.'));
      }
      grpc::ClientContext context;
      tlp::v1::IngestSummary summary;
      const grpc::Status status = stub->IngestBatch(&context, request, &summary);
      if (!status.ok()) {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL) << status.error_message();
        error = status.error_message();
        break;
      }
      acknowledged += summary.accepted();
    }
    EXPECT_EQ(daemon.Kill(SIGTERM), 0) << Log();
  }
  ASSERT_FALSE(error.empty()) << "2 MiB files never filled up";
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_GT(acknowledged, 0u);
  // With room again: every acknowledged event is there, and ingest works.
  DaemonProcess daemon(dir_, port_, metrics_port_);
  ASSERT_TRUE(daemon.WaitServing()) << Log();
  auto stub = daemon.Stub();
  grpc::ClientContext context;
  tlp::v1::ModelInfoResponse info;
  ASSERT_TRUE(stub->GetModelInfo(&context, {}, &info).ok());
  EXPECT_GE(info.events_applied() + 200, acknowledged);  // all but the open memory chunk
  tlp::v1::IngestBatchRequest request;
  for (int i = 0; i < 10; ++i) {
    auto* event = request.add_events();
    event->set_src(1 + i);
    event->set_dst(9000);
    event->set_ts(events_.ts[acknowledged - 1] + 1 + i);  // after the newest stored one
  }
  grpc::ClientContext again;
  tlp::v1::IngestSummary summary;
  ASSERT_TRUE(stub->IngestBatch(&again, request, &summary).ok());
  EXPECT_EQ(summary.accepted(), 10u);
}

}  // namespace
}  // namespace tlp
