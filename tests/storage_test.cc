#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "storage/event_codec.h"
#include "storage/key_encoding.h"
#include "storage/temporal_store.h"

namespace tlp::storage {
namespace {

// An event as stored, for brute-force answers to neighbour lookups.
struct StoredEvent {
  uint64_t src, dst;
  double ts;
  uint64_t sequence;
};

// The k most recent neighbours of `node` with ts < before, newest first, by brute force.
std::vector<Neighbor> BruteForceRecent(const std::vector<StoredEvent>& all, uint64_t node,
                                       double before, size_t k) {
  std::vector<Neighbor> expected;
  for (const StoredEvent& e : all) {
    if (e.ts >= before) continue;
    if (e.src == node)
      expected.push_back({e.dst, e.ts, e.sequence});
    else if (e.dst == node)
      expected.push_back({e.src, e.ts, e.sequence});
  }
  std::sort(expected.begin(), expected.end(),
            [](const Neighbor& a, const Neighbor& b) { return b.Before(a); });
  if (expected.size() > k) expected.resize(k);
  return expected;
}

// Checks a store's lookups of `node` against brute force, features (= sequence - 1) included
// when the store has them.
void ExpectRecentMatches(const TemporalStore& store, const std::vector<StoredEvent>& all,
                         uint64_t node, double before, size_t k) {
  const std::vector<Neighbor> expected = BruteForceRecent(all, node, before, k);
  NeighborLists lists;
  ASSERT_TRUE(store.neighbors().RecentBatch({&node, 1}, {&before, 1}, k, &lists).ok());
  ASSERT_EQ(lists.counts[0], expected.size()) << "node " << node << " before " << before;
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(lists.neighbors[i].node, expected[i].node) << "node " << node << " row " << i;
    EXPECT_EQ(lists.neighbors[i].ts, expected[i].ts);
    EXPECT_EQ(lists.neighbors[i].sequence, expected[i].sequence);
    if (lists.feature_dim == 1) {
      EXPECT_EQ(lists.features[i], static_cast<float>(expected[i].sequence - 1));
    }
  }
}

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tlp_store_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<TemporalStore> OpenStore(StoreOptions options = {}) {
    options.sync = false;  // the crash test below shows process-crash safety without fsync
    std::unique_ptr<TemporalStore> store;
    const Status status = TemporalStore::Open(dir_.string(), options, &store);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return store;
  }

  // Runs `write` in a child process on the store at dir_, which reports each durable unit of
  // work (1, 2, ...) through `acknowledge`. Once `units` are acknowledged and `delay_us` more
  // passed, kills the child with SIGKILL; returns the last unit acknowledged, counting what the
  // pipe still held (those were durable too).
  using Acknowledge = std::function<void(uint64_t)>;
  uint64_t KillWriterAfter(uint64_t units, useconds_t delay_us,
                           const std::function<void(TemporalStore&, const Acknowledge&)>& write,
                           StoreOptions options = {}) {
    int pipe_fds[2];
    EXPECT_EQ(pipe(pipe_fds), 0);
    const pid_t child = fork();
    EXPECT_GE(child, 0);
    if (child == 0) {
      close(pipe_fds[0]);
      std::unique_ptr<TemporalStore> store;
      options.sync = false;
      if (!TemporalStore::Open(dir_.string(), options, &store).ok()) _exit(2);
      write(*store, [&](uint64_t unit) {
        if (::write(pipe_fds[1], &unit, sizeof(unit)) != sizeof(unit)) _exit(4);
      });
      _exit(0);
    }
    close(pipe_fds[1]);
    uint64_t acknowledged = 0, unit = 0;
    while (acknowledged < units && read(pipe_fds[0], &unit, sizeof(unit)) == sizeof(unit)) {
      acknowledged = unit;
    }
    usleep(delay_us);
    kill(child, SIGKILL);
    int wait_status = 0;
    waitpid(child, &wait_status, 0);
    while (read(pipe_fds[0], &unit, sizeof(unit)) == sizeof(unit)) acknowledged = unit;
    close(pipe_fds[0]);
    return acknowledged;
  }

  std::filesystem::path dir_;
};

TEST(KeyEncoding, OrderedBitsPreserveOrder) {
  const std::vector<double> values = {-1e9, -2.5, -0.0, 0.0, 1e-300, 1.0, 2.5, 1e18};
  for (size_t i = 1; i < values.size(); ++i) {
    EXPECT_LE(OrderedBits(values[i - 1]), OrderedBits(values[i]));
    EXPECT_EQ(FromOrderedBits(OrderedBits(values[i])), values[i]);
  }
}

TEST_F(StoreTest, AppendsAndReadsBackAcrossReopen) {
  {
    auto store = OpenStore();
    EventBatch batch;
    batch.Add(1, 2, 10.0);
    batch.Add(2, 3, 11.0);
    batch.Add(1, 3, 12.0);
    AppendResult result;
    ASSERT_TRUE(store->Append(batch, &result).ok());
    EXPECT_EQ(result.accepted, 3u);
    EXPECT_EQ(result.sequences, (std::vector<uint64_t>{1, 2, 3}));
    EXPECT_EQ(store->neighbors().Degree(1), 2u);
  }
  auto store = OpenStore();
  EXPECT_EQ(store->last_sequence(), 3u);
  EXPECT_EQ(store->max_ts(), 12.0);
  std::vector<Neighbor> recent;
  ASSERT_TRUE(store->neighbors().Recent(3, 100.0, 10, &recent).ok());
  ASSERT_EQ(recent.size(), 2u);
  EXPECT_EQ(recent[0].node, 1u);  // newest first
  EXPECT_EQ(recent[1].node, 2u);
  EXPECT_EQ(store->neighbors().Degree(3), 2u);
  std::vector<uint64_t> replayed;
  ASSERT_TRUE(store
                  ->ReplayAfter(1, 10,
                                [&](const EventBatch& events, uint64_t first) {
                                  EXPECT_EQ(first, 2u);
                                  replayed.insert(replayed.end(), events.src.begin(),
                                                  events.src.end());
                                  return Status::Ok();
                                })
                  .ok());
  EXPECT_EQ(replayed, (std::vector<uint64_t>{2, 1}));
}

TEST_F(StoreTest, DuplicateEventIdsAreAcknowledgedNotStoredTwice) {
  auto store = OpenStore();
  EventBatch batch;
  batch.Add(1, 2, 1.0, {}, "a");
  batch.Add(1, 3, 2.0, {}, "b");
  batch.Add(1, 3, 2.0, {}, "b");  // repeated inside the batch
  AppendResult result;
  ASSERT_TRUE(store->Append(batch, &result).ok());
  EXPECT_EQ(result.accepted, 2u);
  EXPECT_EQ(result.duplicates, 1u);
  EXPECT_EQ(result.sequences[2], result.sequences[1]);
  ASSERT_TRUE(store->Append(batch, &result).ok());  // a full re-send
  EXPECT_EQ(result.accepted, 0u);
  EXPECT_EQ(result.duplicates, 3u);
  EXPECT_EQ(result.sequences, (std::vector<uint64_t>{1, 2, 2}));
  EXPECT_EQ(store->last_sequence(), 2u);
  EXPECT_EQ(store->neighbors().Degree(1), 2u);
}

TEST_F(StoreTest, InvalidOrLateBatchWritesNothing) {
  StoreOptions options;
  options.lateness_seconds = 5;
  auto store = OpenStore(options);
  EventBatch batch;
  batch.Add(1, 2, 100.0);
  AppendResult result;
  ASSERT_TRUE(store->Append(batch, &result).ok());
  batch.Clear();
  batch.Add(1, 2, 101.0);
  batch.Add(1, 2, 90.0);  // 11 s late
  Status status = store->Append(batch, &result);
  EXPECT_EQ(status.code(), Status::Code::kOutOfRange);
  EXPECT_NE(status.message().find("event 1"), std::string::npos) << status.message();
  batch.Clear();
  batch.Add(1, 2, 102.0);
  batch.Add(1, 2, std::nan(""));
  status = store->Append(batch, &result);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("'ts'"), std::string::npos);
  batch.Clear();
  batch.feature_dim = 2;
  const std::vector<float> features = {1.0f, 2.0f};
  batch.Add(1, 2, 102.0, features);
  EXPECT_EQ(store->Append(batch, &result).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(store->last_sequence(), 1u);
  EXPECT_EQ(store->neighbors().Degree(1), 1u);
  // Within the window is fine.
  batch = EventBatch();
  batch.Add(3, 4, 96.0, {}, "late-but-fine");
  EXPECT_TRUE(store->Append(batch, &result).ok());
  // A retry of an acknowledged event is acknowledged however old it is by now.
  EventBatch newer;
  newer.Add(5, 6, 200.0);
  ASSERT_TRUE(store->Append(newer, &result).ok());
  ASSERT_TRUE(store->Append(batch, &result).ok());
  EXPECT_EQ(result.duplicates, 1u);
  EXPECT_EQ(store->last_sequence(), 3u);
}

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TEST_F(StoreTest, TsFromTheFarFutureIsRefusedAndWedgesNothing) {
  StoreOptions options;
  options.max_future_seconds = 86400;
  auto store = OpenStore(options);
  AppendResult result;
  // Before the first event the bound is the clock: milliseconds or 1e300 are refused.
  for (double ts : {1e300, UnixNow() * 1000}) {
    EventBatch batch;
    batch.Add(1, 2, ts);
    const Status status = store->Append(batch, &result);
    EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << ts;
    EXPECT_NE(status.message().find("event 0: field 'ts'"), std::string::npos) << status.message();
    EXPECT_NE(status.message().find("--max-future-seconds"), std::string::npos);
  }
  // A stream with its own epoch (seconds since its start) is bounded by its newest ts.
  EventBatch batch;
  batch.Add(1, 2, 100.0);
  batch.Add(1, 3, 100.0 + 86400);  // exactly at the bound
  ASSERT_TRUE(store->Append(batch, &result).ok());
  batch.Clear();
  batch.Add(1, 2, 86500.0 + 86401);
  const Status ahead = store->Append(batch, &result);
  EXPECT_EQ(ahead.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(ahead.message().find("newest ts"), std::string::npos) << ahead.message();
  // ... and nothing was wedged: the next real event is accepted.
  batch.Clear();
  batch.Add(2, 3, 86600.0);
  ASSERT_TRUE(store->Append(batch, &result).ok());
  EXPECT_EQ(store->last_sequence(), 3u);
}

TEST_F(StoreTest, UnixTimeStreamsFollowTheClockAfterAnIdlePeriod) {
  StoreOptions options;
  options.max_future_seconds = 86400;
  options.lateness_seconds = 1e9;
  auto store = OpenStore(options);
  AppendResult result;
  const double now = UnixNow();
  EventBatch batch;
  batch.Add(1, 2, now - 3 * 86400.0);  // the stream was idle for three days
  ASSERT_TRUE(store->Append(batch, &result).ok());
  batch.Clear();
  batch.Add(1, 2, now - 60);
  EXPECT_TRUE(store->Append(batch, &result).ok());
  batch.Clear();
  batch.Add(1, 2, now * 1000);
  EXPECT_EQ(store->Append(batch, &result).code(), Status::Code::kInvalidArgument);
  // 0 turns the bound off.
  options.max_future_seconds = 0;
  store.reset();
  store = OpenStore(options);
  EXPECT_TRUE(store->Append(batch, &result).ok());
}

// Source cursors move with the events in one write: a failed append moves neither, a batch
// of cursors alone is allowed, and both survive a reopen.
TEST_F(StoreTest, CursorsAreWrittenAtomicallyWithTheirEvents) {
  StoreOptions options;
  options.lateness_seconds = 5;
  {
    auto store = OpenStore(options);
    std::string value;
    bool found = true;
    ASSERT_TRUE(store->GetCursor("kafka/t/0", &value, &found).ok());
    EXPECT_FALSE(found);
    EventBatch batch;
    batch.Add(1, 2, 100.0);
    AppendResult result;
    const SourceCursor first[] = {{"kafka/t/0", "1"}};
    ASSERT_TRUE(store->Append(batch, &result, first).ok());
    batch.Clear();
    batch.Add(1, 2, 80.0);  // too late: nothing of it, cursor included, is written
    const SourceCursor second[] = {{"kafka/t/0", "2"}};
    EXPECT_EQ(store->Append(batch, &result, second).code(), Status::Code::kOutOfRange);
    ASSERT_TRUE(store->GetCursor("kafka/t/0", &value, &found).ok());
    EXPECT_TRUE(found);
    EXPECT_EQ(value, "1");
    const SourceCursor only[] = {{"kafka/t/0", "3"}};
    ASSERT_TRUE(store->Append(EventBatch(), &result, only).ok());  // e.g. a watermark
    EXPECT_EQ(store->last_sequence(), 1u);
  }
  auto store = OpenStore(options);
  std::string value;
  bool found = false;
  ASSERT_TRUE(store->GetCursor("kafka/t/0", &value, &found).ok());
  EXPECT_TRUE(found);
  EXPECT_EQ(value, "3");
}

// Property test: k-most-recent lookups (cache and RocksDB fallback) against brute force on a
// random stream with repeated timestamps, late events and self-loops, with a cache that holds
// every node and with one that holds 5 of the 30 (slots recycled while the stream goes on, so
// slots with floors answer too). Adjacency epochs of 16 events, so lookups walk epochs, late
// events cross epoch boundaries, and batches span several epochs. Lookups run between appends
// and after a reopen.
class NeighborCacheTest : public StoreTest, public ::testing::WithParamInterface<size_t> {};

TEST_P(NeighborCacheTest, RecentNeighboursMatchBruteForce) {
  StoreOptions options;
  options.cached_neighbors = 4;  // small, so many lookups fall back to RocksDB
  options.lateness_seconds = 3;
  options.feature_dim = 1;
  options.neighbor_cache_bytes = GetParam() * NeighborIndex::SlotBytes(4, 1);
  options.adjacency_epoch_bits = 4;
  auto store = OpenStore(options);
  EXPECT_EQ(store->neighbors().cache_slots(), GetParam());
  std::mt19937_64 random(42);
  std::vector<StoredEvent> all;
  double now = 0;
  auto check = [&](const TemporalStore& s, int trials) {
    for (int trial = 0; trial < trials; ++trial) {
      const uint64_t node = random() % 32;
      // Half the lookups near "now", where the cache answers; half anywhere in the past.
      const double before = trial % 2 == 0
                                ? std::max(0.0, now + 2 - static_cast<double>(random() % 8))
                                : static_cast<double>(random() % static_cast<uint64_t>(now + 2));
      const size_t k = 1 + random() % 8;
      ExpectRecentMatches(s, all, node, before, k);
    }
  };
  EventBatch batch;
  batch.feature_dim = 1;
  AppendResult result;
  auto append_rounds = [&](int rounds) {
    for (int round = 0; round < rounds; ++round) {
      batch.Clear();
      for (int i = 0; i < 50; ++i) {
        // Time moves slowly against how often a node recurs, so late events (up to 2 s) reorder
        // a node's own neighbours, and a recycled slot can be taken by a late event.
        now += random() % 4 == 0 ? 1.0 : 0.0;
        const double ts = std::max(0.0, now - static_cast<double>(random() % 3));
        const float feature = static_cast<float>(all.size() + batch.size());
        batch.Add(random() % 30, random() % 30, ts, std::span(&feature, 1));
      }
      ASSERT_TRUE(store->Append(batch, &result).ok());
      for (size_t i = 0; i < batch.size(); ++i) {
        all.push_back({batch.src[i], batch.dst[i], batch.ts[i], result.sequences[i]});
      }
      check(*store, 20);
    }
  };
  append_rounds(40);
  check(*store, 300);
  EXPECT_GT(store->neighbors().cache_hits(), 0u);
  EXPECT_GT(store->neighbors().cache_misses(), 0u);
  EXPECT_EQ(store->neighbors().node_count(), 30u);
  store.reset();
  store = OpenStore(options);
  check(*store, 300);  // the cache rebuilt from RocksDB answers the same
  EXPECT_EQ(store->neighbors().node_count(), 30u);
  append_rounds(10);  // and keeps answering as events go on
  EXPECT_GT(store->neighbors().cache_hits(), 0u);
}

// After a reopen the neighbour cache's slots go to the nodes active most recently, the ones
// lookups at "now" ask for, whatever their ids.
TEST_F(StoreTest, ReopenedNeighbourCacheHoldsTheMostRecentlyActiveNodes) {
  StoreOptions options;
  options.cached_neighbors = 4;
  options.neighbor_cache_bytes = 2 * NeighborIndex::SlotBytes(4, 0);
  auto store = OpenStore(options);
  EventBatch batch;
  batch.Add(7, 8, 1.0);
  batch.Add(3, 4, 10.0);  // the newest: nodes 3 and 4
  batch.Add(5, 6, 5.0);
  AppendResult result;
  ASSERT_TRUE(store->Append(batch, &result).ok());
  store.reset();
  store = OpenStore(options);
  std::vector<Neighbor> found;
  const uint64_t misses = store->neighbors().cache_misses();
  for (const uint64_t node : {3, 4}) {
    ASSERT_TRUE(store->neighbors().Recent(node, 100.0, 4, &found).ok());
    ASSERT_EQ(found.size(), 1u);
  }
  EXPECT_EQ(store->neighbors().cache_misses(), misses);
  ASSERT_TRUE(store->neighbors().Recent(6, 100.0, 4, &found).ok());
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].node, 5u);
  EXPECT_EQ(store->neighbors().cache_misses(), misses + 1);  // from RocksDB
  EXPECT_EQ(store->neighbors().Degree(8), 1u);
}

// A node that lost its slot and comes back with a late event must not be answered from a slot
// that lacks its newer history (which only RocksDB holds).
TEST_F(StoreTest, ARecycledSlotNeverHidesANewerEventInRocksDB) {
  StoreOptions options;
  options.lateness_seconds = 100;
  options.neighbor_cache_bytes = 2 * NeighborIndex::SlotBytes(options.cached_neighbors, 0);
  auto store = OpenStore(options);
  AppendResult result;
  EventBatch batch;
  for (const auto& [src, dst, ts] : std::vector<std::tuple<uint64_t, uint64_t, double>>{
           {1, 2, 10}, {1, 3, 20}, {4, 5, 21}, {6, 7, 22}, {1, 8, 15}}) {
    batch.Clear();
    batch.Add(src, dst, ts);
    ASSERT_TRUE(store->Append(batch, &result).ok());
  }
  std::vector<Neighbor> recent;
  ASSERT_TRUE(store->neighbors().Recent(1, 100, 1, &recent).ok());
  ASSERT_EQ(recent.size(), 1u);
  EXPECT_EQ(recent[0].node, 3u);  // ts 20, not the late 15
  ASSERT_TRUE(store->neighbors().Recent(1, 100, 3, &recent).ok());
  ASSERT_EQ(recent.size(), 3u);
  EXPECT_EQ(recent[1].node, 8u);
  EXPECT_EQ(recent[2].node, 2u);
}

INSTANTIATE_TEST_SUITE_P(CacheSlots, NeighborCacheTest, ::testing::Values(1000, 5, 1),
                         [](const ::testing::TestParamInfo<size_t>& param) {
                           return "slots_" + std::to_string(param.param);
                         });

TEST_F(StoreTest, NodeStatesWatermarkAndCursorsSurviveReopenAsOneCut) {
  {
    auto store = OpenStore();
    NodeStates states;
    states.Clear(2);
    states.nodes = {7, 9};
    states.last_update_ts = {3.5, 4.0};
    states.memory = {1.0f, 2.0f, 3.0f, 4.0f};
    const SourceCursor cursors[] = {{"memory/b", "2"}, {"memory/a", "1"}, {"other", "x"}};
    ASSERT_TRUE(store->SaveNodeStates(states, 42, cursors).ok());
    states.nodes = {9};  // a later, incremental checkpoint changes one state
    states.last_update_ts = {5.0};
    states.memory = {5.0f, 6.0f};
    ASSERT_TRUE(store->SaveNodeStates(states, 50).ok());
  }
  auto store = OpenStore();
  EXPECT_EQ(store->watermark(), 50u);
  NodeStates states;
  states.dim = 2;
  const uint64_t nodes[] = {9, 8, 7};
  ASSERT_TRUE(store->GetNodeStates(nodes, &states).ok());
  EXPECT_EQ(states.found, (std::vector<uint8_t>{1, 0, 1}));
  EXPECT_EQ(states.memory, (std::vector<float>{5.0f, 6.0f, 0.0f, 0.0f, 1.0f, 2.0f}));
  EXPECT_EQ(states.last_update_ts, (std::vector<double>{5.0, 0.0, 3.5}));
  std::vector<std::string> seen;
  ASSERT_TRUE(store
                  ->ForEachCursor("memory/",
                                  [&](std::string_view name, std::string_view value) {
                                    seen.push_back(std::string(name) + "=" + std::string(value));
                                    return Status::Ok();
                                  })
                  .ok());
  EXPECT_EQ(seen, (std::vector<std::string>{"memory/a=1", "memory/b=2"}));

  states.dim = 3;  // a state of another width is corruption, not silently cut
  EXPECT_EQ(store->GetNodeStates(nodes, &states).code(), Status::Code::kCorruption);

  ASSERT_TRUE(store->ClearNodeStates().ok());
  EXPECT_EQ(store->watermark(), 0u);
  states.dim = 2;
  ASSERT_TRUE(store->GetNodeStates(nodes, &states).ok());
  EXPECT_EQ(states.found, (std::vector<uint8_t>{0, 0, 0}));
}

// Every column family reads through the one block cache of StoreOptions::block_cache_bytes: a
// replay of the event log reads its blocks from table files (the memtables were flushed at
// close), and they occupy it.
TEST_F(StoreTest, TableReadsShareTheConfiguredBlockCache) {
  StoreOptions options;
  options.block_cache_bytes = 3 << 20;
  {
    auto store = OpenStore(options);
    EventBatch batch;
    for (uint64_t i = 1; i <= 5000; ++i) batch.Add(i, i + 100000, static_cast<double>(i));
    AppendResult result;
    ASSERT_TRUE(store->Append(batch, &result).ok());
  }
  auto store = OpenStore(options);
  StoreStats stats = store->Stats();
  EXPECT_EQ(stats.block_cache_capacity_bytes, options.block_cache_bytes);
  const uint64_t before = stats.block_cache_bytes;
  size_t replayed = 0;
  ASSERT_TRUE(store
                  ->ReplayAfter(0, 1000,
                                [&](const EventBatch& batch, uint64_t) {
                                  replayed += batch.size();
                                  return Status::Ok();
                                })
                  .ok());
  EXPECT_EQ(replayed, 5000u);
  stats = store->Stats();
  EXPECT_GT(stats.block_cache_bytes, before);  // the event log's blocks
  EXPECT_LE(stats.block_cache_bytes, options.block_cache_bytes);
}

TEST_F(StoreTest, CheckpointOpensAsAStore) {
  auto store = OpenStore();
  EventBatch batch;
  batch.Add(1, 2, 1.0);
  AppendResult result;
  ASSERT_TRUE(store->Append(batch, &result).ok());
  NodeStates states;
  states.Clear(1);
  states.nodes = {2};
  states.last_update_ts = {1.0};
  states.memory = {0.5f};
  ASSERT_TRUE(store->SaveNodeStates(states, 1).ok());
  const std::string copy = dir_.string() + "_copy";
  std::filesystem::remove_all(copy);
  ASSERT_TRUE(store->Checkpoint(copy).ok());
  std::unique_ptr<TemporalStore> reopened;
  ASSERT_TRUE(TemporalStore::Open(copy, {}, &reopened).ok());
  EXPECT_EQ(reopened->last_sequence(), 1u);
  EXPECT_EQ(reopened->watermark(), 1u);
  NodeStates read;
  read.dim = 1;
  ASSERT_TRUE(reopened->GetNodeStates(states.nodes, &read).ok());
  EXPECT_EQ(read.memory, states.memory);
  reopened.reset();
  std::filesystem::remove_all(copy);
}

// A closed store opened with plain RocksDB, to change it behind TemporalStore's back.
struct RawStore {
  enum Family { kEvents = 1, kAdjacency = 2, kMeta = 5 };
  explicit RawStore(const std::string& dir) {
    std::vector<rocksdb::ColumnFamilyDescriptor> families;
    for (const char* name : {"default", "events", "adjacency", "node_state", "event_ids", "meta"}) {
      families.emplace_back(name, rocksdb::ColumnFamilyOptions());
    }
    rocksdb::DB* raw = nullptr;
    EXPECT_TRUE(rocksdb::DB::Open(rocksdb::DBOptions(), dir, families, &handles, &raw).ok());
    db.reset(raw);
  }
  ~RawStore() {
    for (auto* handle : handles) db->DestroyColumnFamilyHandle(handle);
  }
  void SetSchemaVersion(uint64_t version) {
    std::string value(8, '\0');
    PutBigEndian<uint64_t>(version, value.data());
    EXPECT_TRUE(db->Put(rocksdb::WriteOptions(), handles[kMeta], "schema_version", value).ok());
  }
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
};

// Sets a closed store's schema version to 99 and, when asked, drops the adjacency family.
void Tamper(const std::string& dir, bool drop_adjacency) {
  RawStore raw(dir);
  raw.SetSchemaVersion(99);
  if (drop_adjacency) {
    ASSERT_TRUE(raw.db->DropColumnFamily(raw.handles[RawStore::kAdjacency]).ok());
  }
}

TEST_F(StoreTest, WrongSchemaVersionAndMissingFamilyAreClearErrors) {
  OpenStore().reset();
  Tamper(dir_.string(), /*drop_adjacency=*/true);
  std::unique_ptr<TemporalStore> store;
  Status status = TemporalStore::Open(dir_.string(), {}, &store);
  EXPECT_EQ(status.code(), Status::Code::kCorruption);
  EXPECT_NE(status.message().find("'adjacency'"), std::string::npos) << status.message();

  std::filesystem::remove_all(dir_);
  OpenStore().reset();
  Tamper(dir_.string(), /*drop_adjacency=*/false);
  status = TemporalStore::Open(dir_.string(), {}, &store);
  EXPECT_EQ(status.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(status.message().find("schema version 99"), std::string::npos) << status.message();
  StoreOptions options;
  options.create_if_missing = false;
  EXPECT_EQ(TemporalStore::Open(dir_.string() + "_absent", options, &store).code(),
            Status::Code::kNotFound);
}

// Turns a closed store back into what schema version 1 wrote: adjacency keyed (node, ts, seq)
// -> neighbour (u64), and no adjacency epochs in meta.
void RewriteAsSchemaVersion1(const std::string& dir) {
  RawStore raw(dir);
  rocksdb::ColumnFamilyHandle* adjacency = raw.handles[RawStore::kAdjacency];
  const std::string end(kAdjacencyKeySize + 1, '\xff');
  ASSERT_TRUE(raw.db->DeleteRange(rocksdb::WriteOptions(), adjacency, "", end).ok());
  std::unique_ptr<rocksdb::Iterator> it(
      raw.db->NewIterator(rocksdb::ReadOptions(), raw.handles[RawStore::kEvents]));
  std::vector<float> buffer;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    DecodedEvent event;
    ASSERT_TRUE(DecodeEvent({it->value().data(), it->value().size()}, &buffer, &event).ok());
    for (const auto& [node, neighbor] : {std::pair(event.src, event.dst), {event.dst, event.src}}) {
      char key[24], value[8];
      PutBigEndian<uint64_t>(node, key);
      PutBigEndian<uint64_t>(OrderedBits(event.ts), key + 8);
      std::memcpy(key + 16, it->key().data(), 8);
      PutBigEndian<uint64_t>(neighbor, value);
      ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), adjacency, {key, 24}, {value, 8}).ok());
    }
  }
  raw.SetSchemaVersion(1);
  ASSERT_TRUE(
      raw.db->Delete(rocksdb::WriteOptions(), raw.handles[RawStore::kMeta], "adjacency_epoch_bits")
          .ok());
}

// A store written before adjacency epochs opens, rewritten from its event log, and answers
// neighbour lookups (RocksDB only: a one-slot cache) like the store it was, features included.
TEST_F(StoreTest, SchemaVersion1StoreIsMigratedOnOpen) {
  StoreOptions options;
  options.adjacency_epoch_bits = 4;
  options.feature_dim = 1;
  options.lateness_seconds = 10;
  options.neighbor_cache_bytes = NeighborIndex::SlotBytes(options.cached_neighbors, 1);
  std::vector<StoredEvent> all;
  {
    auto store = OpenStore(options);
    EventBatch batch;
    batch.feature_dim = 1;
    for (int i = 0; i < 300; ++i) {
      const float feature = static_cast<float>(i);
      batch.Add(i % 7, 10 + i % 5, 10 + i / 3 - (i % 4 == 0 ? 5.0 : 0.0), std::span(&feature, 1));
    }
    AppendResult result;
    ASSERT_TRUE(store->Append(batch, &result).ok());
    for (size_t i = 0; i < batch.size(); ++i) {
      all.push_back({batch.src[i], batch.dst[i], batch.ts[i], result.sequences[i]});
    }
  }
  RewriteAsSchemaVersion1(dir_.string());
  for (int open = 0; open < 2; ++open) {  // the migration, then a plain open of its result
    auto store = OpenStore(options);
    ASSERT_NE(store, nullptr);
    for (uint64_t node = 0; node < 15; ++node) ExpectRecentMatches(*store, all, node, 60.0, 40);
    EXPECT_EQ(store->neighbors().Degree(3), 43u);
  }
}

// A store of schema version 2 kept node memory in the node_state column family: opening it
// moves the rows into the node state file at the same watermark and empties the family.
TEST_F(StoreTest, SchemaVersion2NodeStatesAreMigratedOnOpen) {
  OpenStore().reset();
  {
    RawStore raw(dir_.string());
    rocksdb::ColumnFamilyHandle* node_state = raw.handles[3];
    for (uint64_t node : {3, 8}) {
      char key[8];
      PutBigEndian<uint64_t>(node, key);
      const double ts = static_cast<double>(node) / 2;
      const float memory[2] = {static_cast<float>(node), -static_cast<float>(node)};
      std::string value(reinterpret_cast<const char*>(&ts), sizeof(ts));
      value.append(reinterpret_cast<const char*>(memory), sizeof(memory));
      ASSERT_TRUE(raw.db->Put(rocksdb::WriteOptions(), node_state, {key, 8}, value).ok());
    }
    std::string watermark(8, '\0');
    PutBigEndian<uint64_t>(42, watermark.data());
    ASSERT_TRUE(
        raw.db->Put(rocksdb::WriteOptions(), raw.handles[RawStore::kMeta], "watermark", watermark)
            .ok());
    ASSERT_TRUE(
        raw.db->Delete(rocksdb::WriteOptions(), raw.handles[RawStore::kMeta], "node_state_commit")
            .ok());
    raw.SetSchemaVersion(kSchemaVersionNodeStateFamily);
  }
  for (int open = 0; open < 2; ++open) {  // the migration, then a plain open of its result
    auto store = OpenStore();
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->watermark(), 42u);
    NodeStates states;
    states.dim = 2;
    const uint64_t nodes[] = {8, 5, 3};
    ASSERT_TRUE(store->GetNodeStates(nodes, &states).ok());
    EXPECT_EQ(states.found, (std::vector<uint8_t>{1, 0, 1}));
    EXPECT_EQ(states.memory, (std::vector<float>{8.0f, -8.0f, 0.0f, 0.0f, 3.0f, -3.0f}));
    EXPECT_EQ(states.last_update_ts, (std::vector<double>{4.0, 0.0, 1.5}));
  }
  RawStore raw(dir_.string());
  std::unique_ptr<rocksdb::Iterator> it(
      raw.db->NewIterator(rocksdb::ReadOptions(), raw.handles[3]));
  it->SeekToFirst();
  EXPECT_FALSE(it->Valid());
  std::string version;
  ASSERT_TRUE(
      raw.db->Get(rocksdb::ReadOptions(), raw.handles[RawStore::kMeta], "schema_version", &version)
          .ok());
  EXPECT_EQ(GetBigEndian<uint64_t>(version.data()), kSchemaVersion);
}

// Every adjacency row of a closed store, as (epoch, node, ts, sequence, neighbour, the node's
// previous epoch), in key order.
using AdjacencyTuple = std::tuple<uint32_t, uint64_t, double, uint64_t, uint64_t, uint32_t>;
std::vector<AdjacencyTuple> StoredAdjacency(const std::string& dir) {
  RawStore raw(dir);
  std::vector<AdjacencyTuple> rows;
  std::unique_ptr<rocksdb::Iterator> it(
      raw.db->NewIterator(rocksdb::ReadOptions(), raw.handles[RawStore::kAdjacency]));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view key(it->key().data(), it->key().size());
    const std::string_view value(it->value().data(), it->value().size());
    rows.emplace_back(AdjacencyKey::Epoch(key), AdjacencyKey::Node(key), AdjacencyKey::Ts(key),
                      AdjacencyKey::Sequence(key), AdjacencyValue::Neighbor(value),
                      AdjacencyValue::PreviousEpoch(value));
  }
  EXPECT_TRUE(it->status().ok());
  return rows;
}

// The rows `all` should leave, with epochs of 2^bits sequences (ts >= 0: tuple order is key
// order).
std::vector<AdjacencyTuple> ExpectedAdjacency(const std::vector<StoredEvent>& all, uint32_t bits) {
  std::vector<AdjacencyTuple> rows;
  for (const StoredEvent& e : all) {
    const auto epoch = static_cast<uint32_t>(e.sequence >> bits);
    rows.emplace_back(epoch, e.src, e.ts, e.sequence, e.dst, kNoEpoch);
    if (e.src != e.dst) rows.emplace_back(epoch, e.dst, e.ts, e.sequence, e.src, kNoEpoch);
  }
  std::sort(rows.begin(), rows.end());
  std::map<uint64_t, std::pair<uint32_t, uint32_t>> newest;  // node: its epoch so far, previous
  for (AdjacencyTuple& row : rows) {
    const uint32_t epoch = std::get<0>(row);
    auto [it, first] = newest.try_emplace(std::get<1>(row), epoch, kNoEpoch);
    if (!first && it->second.first != epoch) it->second = {epoch, it->second.first};
    std::get<5>(row) = it->second.second;
  }
  return rows;
}

// Epochs the writer has moved past are sealed into RocksDB in the background; a clean close
// seals the open epoch as far as it goes, and after a reopen that epoch goes on in memory. RocksDB
// then holds every row once, with its node's previous epoch, and lookups that read memory and
// RocksDB (a one-slot cache) match brute force all along.
TEST_F(StoreTest, AdjacencyEpochsAreSealedIntoRocksDB) {
  StoreOptions options;
  options.adjacency_epoch_bits = 3;
  options.lateness_seconds = 5;
  options.cached_neighbors = 2;
  options.neighbor_cache_bytes = NeighborIndex::SlotBytes(2, 0);
  std::vector<StoredEvent> all;
  std::mt19937_64 random(7);
  double now = 0;
  auto append = [&](TemporalStore& store, int events) {
    EventBatch batch;
    for (int i = 0; i < events; ++i) {
      now += 1;
      batch.Add(random() % 6, random() % 6, std::max(0.0, now - static_cast<double>(random() % 4)));
    }
    AppendResult result;
    ASSERT_TRUE(store.Append(batch, &result).ok());
    for (size_t i = 0; i < batch.size(); ++i) {
      all.push_back({batch.src[i], batch.dst[i], batch.ts[i], result.sequences[i]});
    }
  };
  auto check = [&](const TemporalStore& store) {
    for (uint64_t node = 0; node < 6; ++node) {
      ExpectRecentMatches(store, all, node, now + 1, 64);
      ExpectRecentMatches(store, all, node, now / 2, 3);
    }
  };
  {
    auto store = OpenStore(options);
    for (int round = 0; round < 10; ++round) {
      append(*store, 7);
      check(*store);
    }
    for (int wait = 0; wait < 1000 && store->neighbors().OldestClosedEpoch(); ++wait) {
      usleep(10000);
    }
    EXPECT_EQ(store->neighbors().OldestClosedEpoch(), nullptr) << "closed epochs left unsealed";
    EXPECT_GT(store->Stats().unsealed_adjacency_bytes, 0u);  // the open epoch's
    EXPECT_EQ(store->Stats().adjacency_seal_failures, 0u);
  }
  EXPECT_EQ(StoredAdjacency(dir_.string()), ExpectedAdjacency(all, 3));
  {
    auto store = OpenStore(options);
    check(*store);
    append(*store, 5);  // sequences 71-75: the rest of epoch 8 (64-71, sealed up to 70), then 9
    check(*store);
  }
  EXPECT_EQ(StoredAdjacency(dir_.string()), ExpectedAdjacency(all, 3));
}

// A child process writes node state checkpoints, each setting every node's memory to its
// generation (new nodes joining as it goes), the watermark to the generation, and reports each
// acknowledged one through a pipe; the parent kills it with SIGKILL mid-checkpoint. After
// reopening, the states must be exactly one acknowledged checkpoint (or the next, if it
// committed before the kill): every stored node holds the watermark's generation.
TEST_F(StoreTest, SigkillMidCheckpointLeavesOneCut) {
  static constexpr uint32_t kDim = 8;
  static constexpr uint64_t kNodes = 20000;
  auto nodes_in = [](uint64_t generation) { return std::min(kNodes, 2000 + generation * 500); };
  // 3 ms after the 20th: into the middle of a later checkpoint.
  const uint64_t acknowledged =
      KillWriterAfter(20, 3000, [&](TemporalStore& store, const Acknowledge& acknowledge) {
        NodeStates states;
        for (uint64_t generation = 1;; ++generation) {
          states.Clear(kDim);
          for (uint64_t node = 0; node < nodes_in(generation); ++node) {
            states.nodes.push_back(node * 7919);
            states.last_update_ts.push_back(static_cast<double>(generation));
            states.memory.insert(states.memory.end(), kDim, static_cast<float>(generation));
          }
          if (!store.SaveNodeStates(states, generation).ok()) _exit(3);
          acknowledge(generation);
        }
      });
  ASSERT_GE(acknowledged, 20u);

  auto store = OpenStore();
  ASSERT_NE(store, nullptr);
  const uint64_t watermark = store->watermark();
  EXPECT_GE(watermark, acknowledged);
  EXPECT_LE(watermark, acknowledged + 1);
  std::vector<uint64_t> nodes;
  for (uint64_t node = 0; node < kNodes; ++node) nodes.push_back(node * 7919);
  NodeStates states;
  states.dim = kDim;
  ASSERT_TRUE(store->GetNodeStates(nodes, &states).ok());
  for (size_t i = 0; i < nodes.size(); ++i) {
    ASSERT_EQ(states.found[i], i < nodes_in(watermark) ? 1 : 0) << "node " << nodes[i];
    if (!states.found[i]) continue;
    ASSERT_EQ(states.last_update_ts[i], static_cast<double>(watermark)) << "node " << nodes[i];
    for (uint32_t d = 0; d < kDim; ++d) {
      ASSERT_EQ(states.memory[i * kDim + d], static_cast<float>(watermark)) << "node " << nodes[i];
    }
  }
}

// A child process appends batches with event ids and reports each acknowledged batch through a
// pipe; the parent kills it with SIGKILL mid-stream. Every acknowledged event must be there
// exactly once after reopening, and a re-send of everything stores nothing twice.
TEST_F(StoreTest, SigkillMidStreamLosesNoAcknowledgedEvent) {
  constexpr int kBatch = 100;
  const uint64_t acknowledged_rounds =
      KillWriterAfter(30, 0, [&](TemporalStore& store, const Acknowledge& acknowledge) {
        EventBatch batch;
        AppendResult result;
        for (uint32_t round = 0;; ++round) {
          batch.Clear();
          for (int i = 0; i < kBatch; ++i) {
            const uint32_t n = round * kBatch + i;
            batch.Add(n % 97, 1000 + n % 13, static_cast<double>(n), {}, "e" + std::to_string(n));
          }
          if (!store.Append(batch, &result).ok()) _exit(3);
          acknowledge(round + 1);
        }
      });
  ASSERT_GE(acknowledged_rounds, 30u);

  auto store = OpenStore();
  const uint64_t stored = store->last_sequence();
  EXPECT_GE(stored, acknowledged_rounds * kBatch);
  EXPECT_EQ(stored % kBatch, 0u) << "a batch was partially stored";
  std::set<uint64_t> sources_seen;
  uint64_t replayed = 0;
  ASSERT_TRUE(store
                  ->ReplayAfter(0, 1000,
                                [&](const EventBatch& events, uint64_t first) {
                                  for (size_t i = 0; i < events.size(); ++i) {
                                    EXPECT_EQ(events.EventIdOf(i),
                                              "e" + std::to_string(first - 1 + i));
                                  }
                                  replayed += events.size();
                                  return Status::Ok();
                                })
                  .ok());
  EXPECT_EQ(replayed, stored);
  EventBatch resend;
  for (uint64_t n = 0; n < stored; ++n) {
    resend.Add(n % 97, 1000 + n % 13, static_cast<double>(n), {}, "e" + std::to_string(n));
  }
  AppendResult result;
  ASSERT_TRUE(store->Append(resend, &result).ok());
  EXPECT_EQ(result.duplicates, stored);
  EXPECT_EQ(store->last_sequence(), stored);
}

// A crash leaves the newest epochs' adjacency in memory only: the next open rebuilds it from
// the event log (and seals the epochs it closes), so lookups, degrees and, after a clean
// close, the rows in RocksDB match brute force over every stored event.
TEST_F(StoreTest, SigkillLosesNoAdjacencyRow) {
  StoreOptions options;
  options.adjacency_epoch_bits = 5;
  constexpr int kBatch = 50;
  KillWriterAfter(
      20, 2000,
      [&](TemporalStore& store, const Acknowledge& acknowledge) {
        EventBatch batch;
        AppendResult result;
        for (uint32_t round = 0;; ++round) {
          batch.Clear();
          for (int i = 0; i < kBatch; ++i) {
            const uint32_t n = round * kBatch + i;
            batch.Add(n % 11, 100 + n % 7, static_cast<double>(n));
          }
          if (!store.Append(batch, &result).ok()) _exit(3);
          acknowledge(round + 1);
        }
      },
      options);
  options.neighbor_cache_bytes = NeighborIndex::SlotBytes(options.cached_neighbors, 0);
  auto store = OpenStore(options);
  std::vector<StoredEvent> all;
  ASSERT_TRUE(
      store
          ->ReplayAfter(0, 1000,
                        [&](const EventBatch& events, uint64_t first) {
                          for (size_t i = 0; i < events.size(); ++i) {
                            all.push_back({events.src[i], events.dst[i], events.ts[i], first + i});
                          }
                          return Status::Ok();
                        })
          .ok());
  ASSERT_GE(all.size(), 20u * kBatch);
  for (uint64_t node = 0; node < 107; node = node == 10 ? 100 : node + 1) {
    ExpectRecentMatches(*store, all, node, 1e12, 40);
    EXPECT_EQ(store->neighbors().Degree(node), BruteForceRecent(all, node, 1e12, all.size()).size())
        << "node " << node;
  }
  store.reset();
  EXPECT_EQ(StoredAdjacency(dir_.string()), ExpectedAdjacency(all, 5));
}

// The state label is an optional trailing byte: records without one (all those written before
// labels existed) decode as unlabelled, and nothing else is accepted after the id.
TEST(EventCodec, StateLabelIsAnOptionalTrailingByte) {
  std::string unlabelled, labelled;
  EncodeEvent(1, 2, 3.0, {}, "id", EventBatch::kNoStateLabel, &unlabelled);
  EncodeEvent(1, 2, 3.0, {}, "id", 1, &labelled);
  EXPECT_EQ(labelled.size(), unlabelled.size() + 1);
  std::vector<float> buffer;
  DecodedEvent event;
  ASSERT_TRUE(DecodeEvent(unlabelled, &buffer, &event).ok());
  EXPECT_EQ(event.state_label, EventBatch::kNoStateLabel);
  EXPECT_EQ(event.event_id, "id");
  ASSERT_TRUE(DecodeEvent(labelled, &buffer, &event).ok());
  EXPECT_EQ(event.state_label, 1);
  EXPECT_EQ(event.event_id, "id");
  labelled.back() = 7;
  EXPECT_EQ(DecodeEvent(labelled, &buffer, &event).code(), Status::Code::kCorruption);
  labelled.back() = 0;
  labelled += 'x';
  EXPECT_EQ(DecodeEvent(labelled, &buffer, &event).code(), Status::Code::kCorruption);
}

TEST_F(StoreTest, StateLabelsAreStoredWithTheirEvents) {
  {
    auto store = OpenStore();
    EventBatch unlabelled;
    unlabelled.Add(1, 2, 10.0);
    EventBatch labelled;
    labelled.Add(1, 3, 11.0, {}, {}, 0);
    labelled.Add(2, 3, 12.0, {}, {}, 1);
    labelled.Add(2, 4, 13.0);
    AppendResult result;
    ASSERT_TRUE(store->Append(unlabelled, &result).ok());
    ASSERT_TRUE(store->Append(labelled, &result).ok());
  }
  auto store = OpenStore();
  std::vector<int8_t> labels;
  ASSERT_TRUE(store
                  ->ReplayAfter(0, 10,
                                [&](const EventBatch& events, uint64_t) {
                                  for (size_t i = 0; i < events.size(); ++i)
                                    labels.push_back(events.StateLabelOf(i));
                                  return Status::Ok();
                                })
                  .ok());
  constexpr int8_t kNone = EventBatch::kNoStateLabel;
  EXPECT_EQ(labels, (std::vector<int8_t>{kNone, 0, 1, kNone}));
}

}  // namespace
}  // namespace tlp::storage
