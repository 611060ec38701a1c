// The Kafka source against librdkafka's built-in mock cluster (real Kafka protocol on loopback,
// hosted in this process; no broker package exists here): the deterministic partition merge,
// the record format, replicas that agree, a replica killed mid-stream, dead letters, and kcat
// as an independent producer.
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "common/event_reader.h"
#include "server/kafka_source.h"
#include "server/partition_merge.h"
#include "server/serve_command.h"
#include "server/source_record.h"
#include "storage/temporal_store.h"
#include "tests/daemon_process.h"
#include "tests/test_model.h"
#include "tests/test_support.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::server {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------------------------
// The merge and the record format, without Kafka.

SourceRecord Event(int64_t offset, double ts) {
  SourceRecord record;
  record.kind = SourceRecord::Kind::kEvent;
  record.offset = offset;
  record.ts = ts;
  return record;
}

// Three partitions, each in ts order with some late events, pushed in `seed`'s random
// interleaving and popped as soon as decided; returns (partition, offset) in applied order.
std::vector<std::pair<int, int64_t>> MergeInRandomArrivalOrder(
    const std::vector<std::vector<SourceRecord>>& partitions, uint64_t seed) {
  PartitionMerge merge(static_cast<int>(partitions.size()));
  std::vector<size_t> next(partitions.size(), 0);
  std::mt19937_64 random(seed);
  std::vector<std::pair<int, int64_t>> order;
  SourceRecord record;
  int partition = 0;
  while (true) {
    std::vector<size_t> open;
    for (size_t p = 0; p < partitions.size(); ++p) {
      if (next[p] < partitions[p].size()) open.push_back(p);
    }
    if (open.empty()) break;
    const size_t p = open[random() % open.size()];
    const size_t burst = 1 + random() % 5;  // fetches deliver runs of one partition
    for (size_t i = 0; i < burst && next[p] < partitions[p].size(); ++i) {
      merge.Push(static_cast<int>(p), partitions[p][next[p]++]);
    }
    while (merge.Pop(&record, &partition)) order.emplace_back(partition, record.offset);
  }
  return order;
}

TEST(PartitionMergeTest, OrderDependsOnTheLogNotOnHowFetchesInterleave) {
  std::mt19937_64 random(7);
  std::vector<std::vector<SourceRecord>> partitions(3);
  for (size_t p = 0; p < partitions.size(); ++p) {
    double ts = 0;
    for (int64_t offset = 0; offset < 200; ++offset) {
      ts += static_cast<double>(random() % 10);
      // Every 17th event is late: written after newer ones of its partition.
      partitions[p].push_back(Event(offset, offset % 17 == 0 ? ts - 30 : ts));
    }
    SourceRecord end;  // a final watermark lets every event through
    end.kind = SourceRecord::Kind::kWatermark;
    end.offset = 200;
    end.ts = 1e12;
    partitions[p].push_back(end);
  }
  const auto first = MergeInRandomArrivalOrder(partitions, 1);
  for (uint64_t seed = 2; seed < 6; ++seed) {
    EXPECT_EQ(MergeInRandomArrivalOrder(partitions, seed), first) << "seed " << seed;
  }
  // Every event, and the first final watermark: popping it empties its partition, which the
  // other two watermarks then wait for.
  EXPECT_EQ(first.size(), 3u * 200u + 1u);

  // A replica that restarts from the positions after the first 250 records continues the
  // same order.
  std::vector<std::vector<SourceRecord>> rest(3);
  std::vector<int64_t> applied(3, -1);
  for (size_t i = 0; i < 250; ++i) applied[first[i].first] = first[i].second;
  for (size_t p = 0; p < 3; ++p) {
    rest[p].assign(partitions[p].begin() + applied[p] + 1, partitions[p].end());
  }
  const auto resumed = MergeInRandomArrivalOrder(rest, 9);
  const std::vector<std::pair<int, int64_t>> continuation(first.begin() + 250, first.end());
  EXPECT_EQ(resumed, continuation);
}

TEST(PartitionMergeTest, WaitsForAnEmptyPartitionButNotForRejectedRecords) {
  PartitionMerge merge(2);
  SourceRecord record;
  int partition = -1;
  merge.Push(0, Event(0, 5));
  EXPECT_FALSE(merge.Pop(&record, &partition));  // partition 1 may still bring ts < 5
  EXPECT_EQ(merge.WaitingFor(), 1);
  SourceRecord rejected;
  rejected.offset = 1;
  merge.Push(0, Event(1, 6));
  merge.Push(1, rejected);  // no time, changes nothing: passes at once
  ASSERT_TRUE(merge.Pop(&record, &partition));
  EXPECT_EQ(partition, 1);
  EXPECT_EQ(record.kind, SourceRecord::Kind::kRejected);
  SourceRecord watermark = Event(2, 5.5);
  watermark.kind = SourceRecord::Kind::kWatermark;
  merge.Push(1, watermark);
  ASSERT_TRUE(merge.Pop(&record, &partition));  // ts 5 < watermark 5.5
  EXPECT_EQ(record.ts, 5);
  ASSERT_TRUE(merge.Pop(&record, &partition));  // the watermark itself
  EXPECT_EQ(record.kind, SourceRecord::Kind::kWatermark);
  EXPECT_FALSE(merge.Pop(&record, &partition));  // ts 6 waits again
  EXPECT_EQ(merge.held(), 1u);
}

// A watermark promises nothing older than its ts: an event at exactly that ts in another
// partition still goes first, so the last events of a stream are not held behind it.
TEST(PartitionMergeTest, AWatermarkGoesAfterEventsOfTheSameTime) {
  PartitionMerge merge(2);
  SourceRecord watermark = Event(0, 10);
  watermark.kind = SourceRecord::Kind::kWatermark;
  merge.Push(0, watermark);
  merge.Push(1, Event(0, 10));
  SourceRecord record;
  int partition = -1;
  ASSERT_TRUE(merge.Pop(&record, &partition));
  EXPECT_EQ(partition, 1);
  EXPECT_EQ(record.kind, SourceRecord::Kind::kEvent);
}

TEST(SourceRecordTest, DecodesBinaryJsonAndWatermarksAndNamesWhatIsWrong) {
  tlp::v1::EdgeEvent event;
  event.set_src(1);
  event.set_dst(2);
  event.set_ts(3.5);
  event.add_features(0.25f);
  event.set_event_id("a-1");
  SourceRecord record = DecodeSourceRecord(event.SerializeAsString(), 7, 1);
  ASSERT_EQ(record.kind, SourceRecord::Kind::kEvent) << record.reason;
  EXPECT_EQ(record.offset, 7);
  EXPECT_EQ(record.src, 1u);
  EXPECT_EQ(record.dst, 2u);
  EXPECT_EQ(record.ts, 3.5);
  EXPECT_EQ(record.features, std::vector<float>{0.25f});
  EXPECT_EQ(record.event_id, "a-1");
  EXPECT_EQ(record.state_label, EventBatch::kNoStateLabel);

  record = DecodeSourceRecord(
      R"({"src": "18446744073709551615", "dst": 2, "ts": 4, "features": [1], "event_id": "x"})", 0,
      1);
  ASSERT_EQ(record.kind, SourceRecord::Kind::kEvent) << record.reason;
  EXPECT_EQ(record.src, 18446744073709551615ull);
  EXPECT_EQ(record.event_id, "x");
  record = DecodeSourceRecord(R"({"src": 1, "dst": 2, "ts": 4, "features": [1], "state_label": 1})",
                              0, 1);
  ASSERT_EQ(record.kind, SourceRecord::Kind::kEvent) << record.reason;
  EXPECT_EQ(record.state_label, 1);

  record = DecodeSourceRecord(R"({"watermark": 100.5})", 0, 1);
  EXPECT_EQ(record.kind, SourceRecord::Kind::kWatermark);
  EXPECT_EQ(record.ts, 100.5);

  const std::pair<std::string, std::string> bad[] = {
      {"", "empty"},
      {std::string("\x0a\xff\x01", 3), "protobuf"},
      {R"({"source": 1, "dst": 2, "ts": 3, "features": [1]})", "source"},
      {R"({"src": 1, "dst": 2, "ts": -1, "features": [1]})", "'ts'"},
      {R"({"src": 1, "dst": 2, "ts": 1})", "'features' has 0 values"},
      {R"({"watermark": "soon"})", "watermark"},
      {R"({"watermark": 1, "src": 2})", "no other field"},
      {R"({"src": 1, "dst": 2, "ts": 1, "features": [1], "state_label": 3})", "'state_label'"},
  };
  for (const auto& [value, reason] : bad) {
    record = DecodeSourceRecord(value, 3, 1);
    EXPECT_EQ(record.kind, SourceRecord::Kind::kRejected) << value;
    EXPECT_NE(record.reason.find(reason), std::string::npos) << value << " -> " << record.reason;
  }
}

// ---------------------------------------------------------------------------------------------
// Against a mock Kafka cluster.

// A librdkafka mock cluster hosted in this process, reachable on loopback by any client
// (other processes and kcat included).
class MockKafka {
 public:
  MockKafka() {
    char error[512];
    rd_kafka_conf_t* config = rd_kafka_conf_new();
    rd_kafka_conf_set(config, "log_level", "3", error, sizeof(error));
    host_ = rd_kafka_new(RD_KAFKA_PRODUCER, config, error, sizeof(error));
    cluster_ = rd_kafka_mock_cluster_new(host_, 1);
    bootstraps_ = rd_kafka_mock_cluster_bootstraps(cluster_);
  }
  ~MockKafka() {
    rd_kafka_mock_cluster_destroy(cluster_);
    rd_kafka_destroy(host_);
  }
  const std::string& bootstraps() const { return bootstraps_; }
  void CreateTopic(const std::string& topic, int partitions) {
    ASSERT_EQ(rd_kafka_mock_topic_create(cluster_, topic.c_str(), partitions, 1),
              RD_KAFKA_RESP_ERR_NO_ERROR);
  }

 private:
  rd_kafka_t* host_ = nullptr;
  rd_kafka_mock_cluster_t* cluster_ = nullptr;
  std::string bootstraps_;
};

class Producer {
 public:
  explicit Producer(const std::string& bootstraps) {
    char error[512];
    rd_kafka_conf_t* config = rd_kafka_conf_new();
    rd_kafka_conf_set(config, "bootstrap.servers", bootstraps.c_str(), error, sizeof(error));
    rd_kafka_conf_set(config, "linger.ms", "2", error, sizeof(error));
    handle_ = rd_kafka_new(RD_KAFKA_PRODUCER, config, error, sizeof(error));
  }
  ~Producer() {
    Flush();
    rd_kafka_destroy(handle_);
  }
  void Send(const std::string& topic, int partition, const std::string& value) {
    while (rd_kafka_producev(handle_, RD_KAFKA_V_TOPIC(topic.c_str()),
                             RD_KAFKA_V_PARTITION(partition),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                             RD_KAFKA_V_VALUE(const_cast<char*>(value.data()), value.size()),
                             RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      rd_kafka_poll(handle_, 10);
    }
    rd_kafka_poll(handle_, 0);
  }
  void Flush() { ASSERT_EQ(rd_kafka_flush(handle_, 30000), RD_KAFKA_RESP_ERR_NO_ERROR); }

 private:
  rd_kafka_t* handle_ = nullptr;
};

struct Edge {
  uint64_t src, dst;
  double ts;
  bool operator==(const Edge&) const = default;
};

std::string Binary(const Edge& edge) {
  tlp::v1::EdgeEvent event;
  event.set_src(edge.src);
  event.set_dst(edge.dst);
  event.set_ts(edge.ts);
  return event.SerializeAsString();
}

std::string Json(const Edge& edge) {
  char text[160];
  std::snprintf(text, sizeof(text), R"({"src": %llu, "dst": %llu, "ts": %.17g})",
                static_cast<unsigned long long>(edge.src),
                static_cast<unsigned long long>(edge.dst), edge.ts);
  return text;
}

std::vector<Edge> StoredEdges(const storage::TemporalStore& store) {
  std::vector<Edge> edges;
  EXPECT_TRUE(store
                  .ReplayAfter(0, 4096,
                               [&](const EventBatch& batch, uint64_t) {
                                 for (size_t i = 0; i < batch.size(); ++i) {
                                   edges.push_back({batch.src[i], batch.dst[i], batch.ts[i]});
                                 }
                                 return Status::Ok();
                               })
                  .ok());
  return edges;
}

class KafkaSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDirectory("tlp_kafka");
    ASSERT_TRUE(testing::WriteSmallModel(dir_ / "model.pt", 16, 5).ok());
    EventBatch all;
    ASSERT_TRUE(EventReader::ReadAll(testing::BundledData("wikipedia.csv.gz"), &all).ok());
    for (size_t i = 0; i < 6000; ++i) wikipedia_.push_back({all.src[i], all.dst[i], all.ts[i]});
  }
  void TearDown() override {
    if (!std::getenv("TLP_KEEP_TEST_DIR")) std::filesystem::remove_all(dir_);
  }

  ServeOptions ReplicaOptions(const std::string& name, const std::string& topic) const {
    ServeOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.engine.data_dir = (dir_ / name).string();
    options.engine.checkpoint = (dir_ / "model.pt").string();
    options.engine.sync_writes = false;
    options.kafka.brokers = kafka_.bootstraps();
    options.kafka.topic = topic;
    options.kafka.group_id = "tlpd-" + name;
    return options;
  }

  // Produces `edges` partitioned by src (binary, every third one as JSON), then a final
  // watermark to every partition so that the merge can let the last events through.
  void ProduceBySource(const std::string& topic, int partitions, std::span<const Edge> edges,
                       double pace_events_per_second = 0) {
    Producer producer(kafka_.bootstraps());
    const auto start = Clock::now();
    for (size_t i = 0; i < edges.size(); ++i) {
      const int partition = static_cast<int>(edges[i].src % static_cast<uint64_t>(partitions));
      producer.Send(topic, partition, i % 3 == 0 ? Json(edges[i]) : Binary(edges[i]));
      if (pace_events_per_second > 0) {
        std::this_thread::sleep_until(start +
                                      std::chrono::microseconds(static_cast<int64_t>(
                                          1e6 * static_cast<double>(i) / pace_events_per_second)));
      }
    }
    for (int p = 0; p < partitions; ++p) {
      producer.Send(topic, p, R"({"watermark": )" + std::to_string(edges.back().ts) + "}");
    }
  }

  // The order every replica must apply: partitions merged by (ts, partition, offset).
  static std::vector<Edge> MergedOrder(std::span<const Edge> edges, int partitions) {
    std::vector<std::vector<Edge>> by_partition(static_cast<size_t>(partitions));
    for (const Edge& edge : edges) by_partition[edge.src % partitions].push_back(edge);
    std::vector<Edge> order;
    std::vector<size_t> next(static_cast<size_t>(partitions), 0);
    while (order.size() < edges.size()) {
      int best = -1;
      for (int p = 0; p < partitions; ++p) {
        if (next[p] == by_partition[p].size()) continue;
        if (best < 0 || by_partition[p][next[p]].ts < by_partition[best][next[best]].ts) best = p;
      }
      order.push_back(by_partition[best][next[best]++]);
    }
    return order;
  }

  static bool WaitForEvents(Engine& engine, uint64_t events, std::chrono::seconds limit) {
    const auto deadline = Clock::now() + limit;
    while (Clock::now() < deadline) {
      if (engine.store().last_sequence() >= events) return engine.AwaitMemory().ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::vector<LinkQuery> Queries() const {
    std::vector<LinkQuery> queries;
    for (size_t i = 0; i < 40; ++i) {
      const Edge& edge = wikipedia_[i * 131 % wikipedia_.size()];
      queries.push_back(
          {edge.src, wikipedia_[(i * 57) % wikipedia_.size()].dst, wikipedia_.back().ts + 1});
    }
    return queries;
  }

  static std::vector<LinkScore> ScoresOf(Engine& engine, std::span<const LinkQuery> queries) {
    std::vector<LinkScore> scores;
    EXPECT_TRUE(engine.Score(queries, &scores).ok());
    return scores;
  }

  std::filesystem::path dir_;
  MockKafka kafka_;
  std::vector<Edge> wikipedia_;
};

// Replica A follows the topic while it is written; replica B starts when everything is there,
// with another batch size. Both store the merged order, end at the same watermark, and give
// bit-identical scores; A restarted later resumes exactly where its store ends.
TEST_F(KafkaSourceTest, ReplicasOfOneTopicReachTheSameStateAndScores) {
  constexpr int kPartitions = 3;
  kafka_.CreateTopic("events", kPartitions);
  const std::span<const Edge> first(wikipedia_.data(), 5000);
  std::unique_ptr<Daemon> a;
  Status status = Daemon::Start(ReplicaOptions("a", "events"), &a);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ProduceBySource("events", kPartitions, first, 20000);
  ServeOptions b_options = ReplicaOptions("b", "events");
  b_options.kafka.max_batch_events = 97;
  std::unique_ptr<Daemon> b;
  status = Daemon::Start(b_options, &b);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(WaitForEvents(a->engine(), first.size(), std::chrono::seconds(60)));
  ASSERT_TRUE(WaitForEvents(b->engine(), first.size(), std::chrono::seconds(60)));

  const std::vector<Edge> expected = MergedOrder(first, kPartitions);
  EXPECT_EQ(StoredEdges(a->engine().store()), expected);
  EXPECT_EQ(StoredEdges(b->engine().store()), expected);
  EXPECT_EQ(a->engine().Info().watermark, b->engine().Info().watermark);
  EXPECT_EQ(a->engine().Info().events_applied, first.size());
  const std::vector<LinkQuery> queries = Queries();
  const std::vector<LinkScore> a_scores = ScoresOf(a->engine(), queries);
  const std::vector<LinkScore> b_scores = ScoresOf(b->engine(), queries);
  for (size_t i = 0; i < queries.size(); ++i) {
    EXPECT_EQ(a_scores[i].logit, b_scores[i].logit) << i;
    EXPECT_EQ(a_scores[i].src_metrics.representation_norm,
              b_scores[i].src_metrics.representation_norm)
        << i;
  }

  // gRPC ingest is refused while a replica follows Kafka: its state is the topic's.
  auto stub = tlp::v1::TemporalLinkPrediction::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(a->port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  tlp::v1::IngestBatchRequest request;
  auto* event = request.add_events();
  event->set_src(1);
  event->set_dst(2);
  event->set_ts(wikipedia_.back().ts);
  tlp::v1::IngestSummary summary;
  const grpc::Status refused = stub->IngestBatch(&context, request, &summary);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(refused.error_message().find("Kafka topic 'events'"), std::string::npos);

  // A stops; the topic grows; A restarts from its stored offsets and matches B again.
  a.reset();
  const std::span<const Edge> rest(wikipedia_.data() + 5000, 1000);
  ProduceBySource("events", kPartitions, rest);
  status = Daemon::Start(ReplicaOptions("a", "events"), &a);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(WaitForEvents(a->engine(), wikipedia_.size(), std::chrono::seconds(60)));
  ASSERT_TRUE(WaitForEvents(b->engine(), wikipedia_.size(), std::chrono::seconds(60)));
  std::vector<Edge> all_expected = expected;
  const std::vector<Edge> rest_expected = MergedOrder(rest, kPartitions);
  all_expected.insert(all_expected.end(), rest_expected.begin(), rest_expected.end());
  EXPECT_EQ(StoredEdges(a->engine().store()), all_expected);
  EXPECT_EQ(StoredEdges(b->engine().store()), all_expected);
  const std::vector<LinkScore> a_again = ScoresOf(a->engine(), queries);
  const std::vector<LinkScore> b_again = ScoresOf(b->engine(), queries);
  for (size_t i = 0; i < queries.size(); ++i) EXPECT_EQ(a_again[i].logit, b_again[i].logit) << i;
}

// The partition count is part of the merge order: a store refuses the topic once it has
// another count (here: a second cluster whose topic of the same name has 3 partitions).
TEST_F(KafkaSourceTest, RefusesATopicWhosePartitionCountChanged) {
  kafka_.CreateTopic("events", 2);
  ProduceBySource("events", 2, std::span<const Edge>(wikipedia_.data(), 100));
  std::unique_ptr<Daemon> replica;
  ASSERT_TRUE(Daemon::Start(ReplicaOptions("r", "events"), &replica).ok());
  ASSERT_TRUE(WaitForEvents(replica->engine(), 100, std::chrono::seconds(60)));
  replica.reset();
  MockKafka other;
  other.CreateTopic("events", 3);
  ServeOptions options = ReplicaOptions("r", "events");
  options.kafka.brokers = other.bootstraps();
  const Status status = Daemon::Start(options, &replica);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition) << status.ToString();
  EXPECT_NE(status.message().find("has 3 partitions, this store followed it with 2"),
            std::string::npos)
      << status.ToString();
}

// Brokers that cannot be reached fail the start with NOT_FOUND naming the topic and saying why
// it may be missing, instead of a daemon that serves nothing. (The mock cluster creates topics
// on first use, as brokers with auto.create.topics.enable do, so a missing topic is not testable
// here.)
TEST_F(KafkaSourceTest, UnreachableBrokersFailTheStart) {
  ServeOptions options = ReplicaOptions("missing", "no-such-topic");
  options.kafka.brokers = "127.0.0.1:" + std::to_string(testing::FreePort());
  options.kafka.wait_for_topic = std::chrono::milliseconds(1500);
  std::unique_ptr<Daemon> replica;
  const Status status = Daemon::Start(options, &replica);
  EXPECT_EQ(status.code(), Status::Code::kNotFound) << status.ToString();
  EXPECT_NE(status.message().find("'no-such-topic' not found"), std::string::npos)
      << status.ToString();
  EXPECT_NE(status.message().find("unreachable"), std::string::npos) << status.ToString();
}

// Malformed and invalid records go to the dead-letter topic with the reason and where they came
// from; the valid ones around them are applied.
TEST_F(KafkaSourceTest, BadRecordsGoToTheDeadLetterTopicAndTheStreamGoesOn) {
  kafka_.CreateTopic("mixed", 1);
  kafka_.CreateTopic("mixed.dead-letter", 1);
  {
    Producer producer(kafka_.bootstraps());
    producer.Send("mixed", 0, Binary({1, 2, 1000}));                      // 0 ok
    producer.Send("mixed", 0, std::string("\x0a\xff\x01", 3));            // 1 junk
    producer.Send("mixed", 0, R"({"source": 1, "dst": 2, "ts": 1001})");  // 2 field name
    producer.Send("mixed", 0, R"({"src": 5, "dst": 5, "ts": 1002})");     // 3 self-loop
    producer.Send("mixed", 0, R"({"src": 3, "dst": 4, "ts": 1003, "event_id": "e4"})");  // 4 ok
    producer.Send("mixed", 0, R"({"src": 6, "dst": 7, "ts": 1})");       // 5 too late
    producer.Send("mixed", 0, R"({"watermark": 1004})");                 // 6 watermark
    producer.Send("mixed", 0, "");                                       // 7 empty
    producer.Send("mixed", 0, R"({"src": "8", "dst": 9, "ts": 1005})");  // 8 ok
  }
  ServeOptions options = ReplicaOptions("dl", "mixed");
  options.engine.lateness_seconds = 10;
  std::unique_ptr<Daemon> replica;
  Status status = Daemon::Start(options, &replica);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(WaitForEvents(replica->engine(), 3, std::chrono::seconds(60)));
  const std::vector<Edge> expected = {{1, 2, 1000}, {3, 4, 1003}, {8, 9, 1005}};
  EXPECT_EQ(StoredEdges(replica->engine().store()), expected);

  // Read the dead letters back with a plain consumer.
  char error[512];
  rd_kafka_conf_t* config = rd_kafka_conf_new();
  rd_kafka_conf_set(config, "bootstrap.servers", kafka_.bootstraps().c_str(), error, sizeof(error));
  rd_kafka_conf_set(config, "group.id", "dead-letter-reader", error, sizeof(error));
  rd_kafka_t* consumer = rd_kafka_new(RD_KAFKA_CONSUMER, config, error, sizeof(error));
  rd_kafka_poll_set_consumer(consumer);
  rd_kafka_topic_partition_list_t* assignment = rd_kafka_topic_partition_list_new(1);
  rd_kafka_topic_partition_list_add(assignment, "mixed.dead-letter", 0)->offset =
      RD_KAFKA_OFFSET_BEGINNING;
  rd_kafka_assign(consumer, assignment);
  rd_kafka_topic_partition_list_destroy(assignment);
  std::map<std::string, std::string> reason_of_offset;
  std::string json_of_self_loop;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (reason_of_offset.size() < 5 && Clock::now() < deadline) {
    rd_kafka_message_t* message = rd_kafka_consumer_poll(consumer, 200);
    if (message == nullptr) continue;
    if (message->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
      rd_kafka_headers_t* headers = nullptr;
      rd_kafka_message_headers(message, &headers);
      auto header = [&](const char* name) {
        const void* value = nullptr;
        size_t size = 0;
        if (rd_kafka_header_get_last(headers, name, &value, &size) != RD_KAFKA_RESP_ERR_NO_ERROR) {
          return std::string("<missing>");
        }
        return std::string(static_cast<const char*>(value), size);
      };
      EXPECT_EQ(header("tlpd-source-topic"), "mixed");
      EXPECT_EQ(header("tlpd-source-partition"), "0");
      reason_of_offset[header("tlpd-source-offset")] = header("tlpd-reason");
      if (header("tlpd-source-offset") == "3") {
        json_of_self_loop.assign(static_cast<const char*>(message->payload), message->len);
      }
    }
    rd_kafka_message_destroy(message);
  }
  rd_kafka_consumer_close(consumer);
  rd_kafka_destroy(consumer);
  ASSERT_EQ(reason_of_offset.size(), 5u);
  EXPECT_NE(reason_of_offset["1"].find("protobuf"), std::string::npos) << reason_of_offset["1"];
  EXPECT_NE(reason_of_offset["2"].find("source"), std::string::npos) << reason_of_offset["2"];
  EXPECT_NE(reason_of_offset["3"].find("'src' and 'dst' are equal"), std::string::npos)
      << reason_of_offset["3"];
  EXPECT_NE(reason_of_offset["5"].find("lateness window"), std::string::npos)
      << reason_of_offset["5"];
  EXPECT_NE(reason_of_offset["7"].find("empty"), std::string::npos) << reason_of_offset["7"];
  EXPECT_NE(json_of_self_loop.find("\"src\":\"5\""), std::string::npos) << json_of_self_loop;
}

// kcat, an independent producer (Debian's package), writes JSON lines; the replica applies them.
TEST_F(KafkaSourceTest, EventsProducedByKcatAreApplied) {
  kafka_.CreateTopic("kcat", 1);
  const std::filesystem::path lines = dir_ / "events.jsonl";
  {
    std::ofstream out(lines);
    for (size_t i = 0; i < 50; ++i) out << Json(wikipedia_[i]) << "\n";
  }
  const std::string command = "kcat -P -b " + kafka_.bootstraps() + " -t kcat -p 0 -l " +
                              lines.string() + " 2>" + (dir_ / "kcat.log").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << "kcat failed (bash scripts/setup.sh installs it)";
  std::unique_ptr<Daemon> replica;
  Status status = Daemon::Start(ReplicaOptions("k", "kcat"), &replica);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_TRUE(WaitForEvents(replica->engine(), 50, std::chrono::seconds(60)));
  EXPECT_EQ(StoredEdges(replica->engine().store()),
            std::vector<Edge>(wikipedia_.begin(), wikipedia_.begin() + 50));
}

// The real tlpd process, SIGKILLed three times while the topic is written (events without ids,
// so the store's deduplication cannot hide a double apply): after the last restart it holds
// exactly the merged order, no event lost or twice, and scores like a replica never killed.
TEST_F(KafkaSourceTest, ReplicaKilledMidStreamLosesNothingAndAppliesNothingTwice) {
  constexpr int kPartitions = 2;
  kafka_.CreateTopic("crash", kPartitions);
  const int port = testing::FreePort(), metrics_port = testing::FreePort();
  const std::vector<std::string> args = {"--checkpoint",       (dir_ / "model.pt").string(),
                                         "--kafka-brokers",    kafka_.bootstraps(),
                                         "--kafka-topic",      "crash",
                                         "--kafka-batch",      "200",
                                         "--checkpoint-every", "1000"};
  std::atomic<bool> produced{false};
  std::thread producer([&] {
    ProduceBySource("crash", kPartitions, wikipedia_, 1500);
    produced = true;
  });
  std::mt19937_64 random(11);
  for (int kill = 0; kill < 3; ++kill) {
    testing::DaemonProcess daemon(dir_, port, metrics_port, args);
    ASSERT_TRUE(daemon.WaitServing()) << "restart " << kill;
    std::this_thread::sleep_for(std::chrono::milliseconds(200 + random() % 400));
    daemon.Kill(SIGKILL);
  }
  producer.join();
  ASSERT_TRUE(produced);
  {
    testing::DaemonProcess daemon(dir_, port, metrics_port, args);
    ASSERT_TRUE(daemon.WaitServing());
    auto stub = daemon.Stub();
    uint64_t applied = 0;
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    while (applied < wikipedia_.size() && Clock::now() < deadline) {
      grpc::ClientContext context;
      tlp::v1::ModelInfoRequest request;
      tlp::v1::ModelInfoResponse info;
      if (stub->GetModelInfo(&context, request, &info).ok()) applied = info.events_applied();
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_EQ(applied, wikipedia_.size());
    EXPECT_EQ(daemon.Kill(SIGTERM), 0);
  }
  std::unique_ptr<storage::TemporalStore> store;
  ASSERT_TRUE(storage::TemporalStore::Open((dir_ / "data").string(), {}, &store).ok());
  EXPECT_EQ(StoredEdges(*store), MergedOrder(wikipedia_, kPartitions));
  store.reset();

  // Scores: the killed replica, restarted, against one that read the topic in one go.
  std::unique_ptr<Daemon> clean;
  ASSERT_TRUE(Daemon::Start(ReplicaOptions("clean", "crash"), &clean).ok());
  ASSERT_TRUE(WaitForEvents(clean->engine(), wikipedia_.size(), std::chrono::seconds(60)));
  const std::vector<LinkQuery> queries = Queries();
  const std::vector<LinkScore> expected = ScoresOf(clean->engine(), queries);
  testing::DaemonProcess daemon(dir_, port, metrics_port, args);
  ASSERT_TRUE(daemon.WaitServing());
  grpc::ClientContext context;
  tlp::v1::ScoreRequest request;
  for (const LinkQuery& query : queries) {
    auto* added = request.add_queries();
    added->set_src(query.src);
    added->set_dst(query.dst);
    added->set_at(query.at);
  }
  tlp::v1::ScoreResponse response;
  ASSERT_TRUE(daemon.Stub()->ScoreLinks(&context, request, &response).ok());
  ASSERT_EQ(response.scores_size(), static_cast<int>(queries.size()));
  for (size_t i = 0; i < queries.size(); ++i) {
    EXPECT_NEAR(response.scores(static_cast<int>(i)).logit(), expected[i].logit, 1e-4) << i;
  }
}

}  // namespace
}  // namespace tlp::server
