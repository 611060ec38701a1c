// The ingest writer over a real Engine (RocksDB in a temp dir, a small model): group commit
// across concurrent callers, isolation of a bad submission, back-pressure, named threads.
#include "server/ingest_writer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "model/checkpoint.h"
#include "server/score_batcher.h"
#include "tests/engine_fixture.h"

namespace tlp::server {
namespace {

using IngestWriterTest = testing::EngineTest;

TEST_F(IngestWriterTest, GroupsConcurrentSubmissionsIntoOneAppend) {
  constexpr int kClients = 8, kEvents = 25;
  std::vector<AppendReport> reports;
  {
    IngestWriterOptions options;
    options.max_append_events = kClients * kEvents;
    options.linger = std::chrono::seconds(5);  // the group closes when all 8 are queued
    IngestWriter writer(*engine_, options,
                        [&](const AppendReport& report) { reports.push_back(report); });
    std::vector<Status> statuses(kClients);
    std::vector<storage::AppendResult> results(kClients);
    std::vector<EventBatch> batches;
    for (int client = 0; client < kClients; ++client)
      batches.push_back(ClientBatch(client, kEvents, 10.0));
    std::vector<std::thread> threads;
    for (int client = 0; client < kClients; ++client) {
      threads.emplace_back(
          [&, client] { statuses[client] = writer.Write(batches[client], &results[client]); });
    }
    for (auto& thread : threads) thread.join();
    std::set<uint64_t> sequences;
    for (int client = 0; client < kClients; ++client) {
      ASSERT_TRUE(statuses[client].ok()) << statuses[client].ToString();
      EXPECT_EQ(results[client].accepted, static_cast<uint64_t>(kEvents));
      ASSERT_EQ(results[client].sequences.size(), static_cast<size_t>(kEvents));
      sequences.insert(results[client].sequences.begin(), results[client].sequences.end());
    }
    // Every event got its own sequence, 1..200.
    EXPECT_EQ(sequences.size(), static_cast<size_t>(kClients * kEvents));
    EXPECT_EQ(*sequences.begin(), 1u);
    EXPECT_EQ(*sequences.rbegin(), static_cast<uint64_t>(kClients * kEvents));
    // Re-sending one client's events: all duplicates, nothing stored twice.
    storage::AppendResult again;
    ASSERT_TRUE(writer.Write(batches[3], &again).ok());
    EXPECT_EQ(again.duplicates, static_cast<uint64_t>(kEvents));
    EXPECT_EQ(again.sequences, results[3].sequences);
  }
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].submissions, static_cast<size_t>(kClients));
  EXPECT_EQ(reports[0].events, static_cast<size_t>(kClients * kEvents));
  EXPECT_EQ(engine_->store().last_sequence(), static_cast<uint64_t>(kClients * kEvents));
  ASSERT_TRUE(engine_->AwaitMemory().ok());
  EXPECT_EQ(engine_->Info().events_applied, static_cast<uint64_t>(kClients * kEvents));
  EXPECT_EQ(engine_->MemoryLagEvents(), 0u);
}

// The memory thread trails ingest; a queue of one event forces Ingest to wait for it at every
// batch. Memory must come out the same as with the default queue, and scores read right after
// an acknowledged ingest must already see it (read-your-writes).
TEST_F(IngestWriterTest, MemoryPipelineUnderBackPressureMatchesTheDefault) {
  EngineOptions options;
  options.checkpoint = (dir_ / "model.pt").string();
  options.sync_writes = false;
  options.memory_batch = 4;
  options.memory_queue_events = 1;
  options.data_dir = (dir_ / "tight").string();
  std::unique_ptr<Engine> tight;
  ASSERT_TRUE(Engine::Open(options, &tight).ok());
  storage::AppendResult result;
  const std::vector<LinkQuery> queries = {{1, 101, 0}, {3, 104, 0}, {2, 100, 0}};
  for (int round = 0; round < 5; ++round) {
    EventBatch events;
    for (int i = 0; i < 23; ++i) {
      events.Add(1 + round % 3, 100 + i % 7, 1.0 + 100.0 * round + i, {},
                 "r" + std::to_string(round) + "-" + std::to_string(i));
    }
    ASSERT_TRUE(engine_->Ingest(events, &result).ok());
    ASSERT_TRUE(tight->Ingest(events, &result).ok());
    std::vector<LinkScore> expected, actual;
    ASSERT_TRUE(engine_->Score(queries, &expected).ok());
    ASSERT_TRUE(tight->Score(queries, &actual).ok());
    ASSERT_EQ(expected.size(), actual.size());
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(expected[i].logit, actual[i].logit);
    // 23 events a round in chunks of 4: every complete chunk is in memory when Score returns.
    EXPECT_EQ(tight->Info().events_applied, static_cast<uint64_t>(23 * (round + 1)) / 4 * 4);
  }
  NodeInfo a, b;
  ASSERT_TRUE(engine_->GetNode(1, 0, &a).ok());
  ASSERT_TRUE(tight->GetNode(1, 0, &b).ok());
  ASSERT_FALSE(a.memory.empty());
  EXPECT_EQ(a.memory, b.memory);
}

TEST_F(IngestWriterTest, BadSubmissionFailsAloneInItsGroup) {
  IngestWriterOptions options;
  options.max_append_events = 30;
  options.linger = std::chrono::seconds(5);
  IngestWriter writer(*engine_, options);
  EventBatch good_a = ClientBatch(0, 10, 5.0), good_b = ClientBatch(1, 10, 5.0);
  EventBatch bad = ClientBatch(2, 10, 5.0);
  bad.dst[4] = bad.src[4];  // a self-loop, rejected by default
  Status status_a, status_b, status_bad;
  storage::AppendResult result_a, result_b, result_bad;
  std::thread a([&] { status_a = writer.Write(good_a, &result_a); });
  std::thread b([&] { status_b = writer.Write(good_b, &result_b); });
  std::thread c([&] { status_bad = writer.Write(bad, &result_bad); });
  a.join();
  b.join();
  c.join();
  EXPECT_TRUE(status_a.ok()) << status_a.ToString();
  EXPECT_TRUE(status_b.ok()) << status_b.ToString();
  ASSERT_EQ(status_bad.code(), Status::Code::kInvalidArgument);
  // The index counts from the start of the bad submission, not of the merged group.
  EXPECT_NE(status_bad.message().find("event 4"), std::string::npos) << status_bad.message();
  EXPECT_EQ(engine_->store().last_sequence(), 20u);
}

TEST_F(IngestWriterTest, FullQueueIsRefusedWithARetryHint) {
  IngestWriterOptions options;
  options.max_queued_events = 100;
  options.max_append_events = 1000;
  options.linger = std::chrono::seconds(2);  // holds the first submission in the queue
  IngestWriter writer(*engine_, options);
  EventBatch waiting = ClientBatch(0, 80, 1.0);
  Status waiting_status;
  storage::AppendResult waiting_result;
  std::thread first([&] { waiting_status = writer.Write(waiting, &waiting_result); });
  while (writer.queued_events() < 80) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EventBatch refused = ClientBatch(1, 50, 1.0);
  storage::AppendResult refused_result;
  int64_t retry_after_ms = 0;
  const Status status = writer.Write(refused, &refused_result, &retry_after_ms);
  EXPECT_EQ(status.code(), Status::Code::kResourceExhausted);
  EXPECT_NE(status.message().find("retry after"), std::string::npos) << status.message();
  EXPECT_GT(retry_after_ms, 0);
  first.join();
  ASSERT_TRUE(waiting_status.ok()) << waiting_status.ToString();
  EXPECT_EQ(engine_->store().last_sequence(), 80u);  // nothing of the refused batch
  // Once the queue drained the same batch goes through.
  EXPECT_TRUE(writer.Write(refused, &refused_result).ok());
  EXPECT_EQ(engine_->store().last_sequence(), 130u);
}

// The daemon's long-lived threads carry names (top -H, perf, gdb): here the engine's memory
// thread and the two queues' workers.
TEST_F(IngestWriterTest, WorkerThreadsAreNamed) {
  IngestWriter writer(*engine_, {});
  ScoreBatcher batcher(*engine_, {});
  std::multiset<std::string> names;
  for (int wait = 0; wait < 500; ++wait) {  // a thread names itself once it runs
    names.clear();
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream comm(task.path() / "comm");
      std::string name;
      std::getline(comm, name);
      names.insert(name);
    }
    if (names.count("tlpd-memory") && names.count("tlpd-writer") && names.count("tlpd-scorer")) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(names.count("tlpd-memory"), 1u);
  EXPECT_EQ(names.count("tlpd-writer"), 1u);
  EXPECT_EQ(names.count("tlpd-scorer"), 1u);
}

}  // namespace
}  // namespace tlp::server
