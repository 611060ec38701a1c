// Node memory paging (server/node_memory_cache.h) through a real Engine: a cache of a few rows
// must be invisible in every score and memory vector, and a crash at any point must come back,
// from what RocksDB holds, to exactly the memory of a run that never stopped.
#include "server/node_memory_cache.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "server/engine.h"
#include "tests/test_model.h"

namespace tlp::server {
namespace {

constexpr int kNodes = 120;
constexpr int64_t kWidth = 8;
// Bytes per resident row at memory_dim 8 (see Engine::Open): 8 * 4 + 80.
constexpr size_t kRowBytes = kWidth * sizeof(float) + 80;

class NodeMemoryCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDirectory(std::string("tlp_memory_cache_") +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(testing::WriteSmallModel(dir_ / "model.pt", kWidth, 3).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<Engine> Open(const std::string& name, size_t cache_rows,
                               uint64_t checkpoint_every, bool rebuild_memory = false,
                               double checkpoint_seconds = 0) {
    EngineOptions options;
    options.rebuild_memory = rebuild_memory;
    options.checkpoint_every_seconds = checkpoint_seconds;
    options.data_dir = (dir_ / name).string();
    options.checkpoint = (dir_ / "model.pt").string();
    options.sync_writes = false;
    options.memory_batch = 8;
    options.checkpoint_every_events = checkpoint_every;
    options.node_memory_cache_bytes = cache_rows * kRowBytes;
    std::unique_ptr<Engine> engine;
    const Status status = Engine::Open(options, &engine);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return engine;
  }

  // Round r: 50 events among kNodes nodes, heavy on a few (so rows are both hot and evicted).
  static EventBatch Round(int round) {
    std::mt19937_64 random(static_cast<uint64_t>(round));
    std::uniform_int_distribution<int> any(1, kNodes);
    std::uniform_int_distribution<int> hot(1, 6);
    EventBatch batch;
    for (int i = 0; i < 50; ++i) {
      const int src = random() % 2 ? hot(random) : any(random);
      int dst = any(random);
      if (dst == src) dst = dst % kNodes + 1;
      batch.Add(static_cast<uint64_t>(src), static_cast<uint64_t>(dst), 10.0 * round + 0.1 * i);
    }
    return batch;
  }

  static std::vector<LinkQuery> Queries() {
    std::vector<LinkQuery> queries;
    for (uint64_t src = 1; src <= kNodes; src += 7) {
      for (uint64_t dst = 2; dst <= kNodes; dst += 13) queries.push_back({src, dst, 0});
    }
    queries.push_back({1, 9999, 0});  // an unknown node: row 0, cold start
    return queries;
  }

  // Every node's memory and every query's logit, bit for bit.
  static void ExpectSameState(Engine& expected, Engine& actual) {
    for (uint64_t node = 1; node <= kNodes; ++node) {
      NodeInfo a, b;
      ASSERT_TRUE(expected.GetNode(node, 0, &a).ok());
      ASSERT_TRUE(actual.GetNode(node, 0, &b).ok());
      ASSERT_EQ(a.known, b.known) << node;
      EXPECT_EQ(a.memory, b.memory) << "node " << node;
    }
    std::vector<LinkScore> a, b;
    ASSERT_TRUE(expected.Score(Queries(), &a).ok());
    ASSERT_TRUE(actual.Score(Queries(), &b).ok());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].logit, b[i].logit) << "query " << i;
      EXPECT_EQ(a[i].src_metrics.representation_norm, b[i].src_metrics.representation_norm);
      EXPECT_EQ(a[i].dst_metrics.cold_start, b[i].dst_metrics.cold_start);
    }
  }

  std::filesystem::path dir_;
};

// 16 rows for 120 nodes: nearly every chunk evicts changed rows (kept aside until a checkpoint
// every 100 events writes them) and pages others in from RocksDB, while scoring in between
// pages in hundreds of neighbours. Nothing of it may show.
TEST_F(NodeMemoryCacheTest, ATinyCacheIsInvisibleInScoresAndMemory) {
  auto unbounded = Open("unbounded", 100000, 100);
  auto tiny = Open("tiny", 16, 100);
  storage::AppendResult result;
  for (int round = 0; round < 30; ++round) {
    const EventBatch batch = Round(round);
    ASSERT_TRUE(unbounded->Ingest(batch, &result).ok());
    ASSERT_TRUE(tiny->Ingest(batch, &result).ok());
    if (round % 10 == 9) ExpectSameState(*unbounded, *tiny);
  }
  const MemoryCacheStats stats = tiny->MemoryCache();
  EXPECT_EQ(stats.capacity_rows, 16u);
  EXPECT_GT(stats.evictions, 1000u);
  EXPECT_GT(stats.misses, 1000u);
  EXPECT_EQ(unbounded->MemoryCache().evictions, 0u);

  // Where the memory thread's time went: the tiny cache pages both ways, the unbounded one
  // only reads the rows of nodes it meets for the first time; both checkpointed every 100 events.
  ASSERT_TRUE(tiny->AwaitMemory().ok());
  const MemoryThreadSeconds tiny_time = tiny->MemoryThreadTime();
  EXPECT_GT(tiny_time.lookup, 0);
  EXPECT_GT(tiny_time.page_in, 0);
  EXPECT_GT(tiny_time.page_out, 0);
  EXPECT_GT(tiny_time.apply, 0);
  EXPECT_GT(tiny_time.snapshot, 0);
  // Scoring pages in too, on its own threads: the cache counts it, the memory thread does not.
  EXPECT_GT(tiny->MemoryCache().page_in_seconds, tiny_time.page_in);
  const MemoryThreadSeconds unbounded_time = unbounded->MemoryThreadTime();
  EXPECT_GT(unbounded_time.page_in, 0);
  EXPECT_EQ(unbounded_time.page_out, 0);
}

// A crash copy (RocksDB checkpoint of the live store: what a kill -9 leaves) taken at several
// points, opened with the same tiny cache, replays the log after the last memory checkpoint
// onto the stored rows and must equal the engine that never stopped. Evicted rows reaching
// RocksDB before their checkpoint, or a checkpoint missing some, would apply events twice or
// lose them.
TEST_F(NodeMemoryCacheTest, ACrashCopyRecoversTheExactMemoryWithATinyCache) {
  auto live = Open("live", 16, 150);
  storage::AppendResult result;
  for (int round = 0; round < 24; ++round) {
    ASSERT_TRUE(live->Ingest(Round(round), &result).ok());
    if (round % 8 != 7) continue;
    ASSERT_TRUE(live->AwaitMemory().ok());
    // Checkpoints are written on a thread of their own: the first copy waits for one, so that
    // every copy has one to recover from (and events after it to replay).
    for (int wait = 0; wait < 1000 && live->store().watermark() == 0; ++wait) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const std::string copy = "crash" + std::to_string(round);
    ASSERT_TRUE(live->store().Checkpoint((dir_ / copy).string()).ok());
    auto recovered = Open(copy, 16, 150);
    EXPECT_GT(recovered->store().watermark(), 0u) << "no memory checkpoint to recover from";
    ExpectSameState(*live, *recovered);
  }
}

// A clean restart with another cache size: the stored rows are the truth whatever the size of
// the cache that wrote them or reads them.
TEST_F(NodeMemoryCacheTest, RestartsWithAnotherCacheSizeAndMatches) {
  storage::AppendResult result;
  auto reference = Open("reference", 100000, 0);
  {
    auto small = Open("small", 16, 0);
    for (int round = 0; round < 12; ++round) {
      ASSERT_TRUE(small->Ingest(Round(round), &result).ok());
      ASSERT_TRUE(reference->Ingest(Round(round), &result).ok());
    }
  }  // closing writes the final checkpoint: nothing to replay
  auto large = Open("small", 100000, 0);
  EXPECT_EQ(large->Info().events_applied, 12u * 50 / 8 * 8);
  EXPECT_EQ(large->EventsSinceCheckpoint(), 0u);  // restored, nothing replayed
  ExpectSameState(*reference, *large);
  large.reset();
  // --rebuild-memory: the stored memory is discarded and the whole log replayed, to the same.
  auto rebuilt = Open("small", 100000, 0, /*rebuild_memory=*/true);
  EXPECT_EQ(rebuilt->EventsSinceCheckpoint(), 12u * 50 / 8 * 8);
  ExpectSameState(*reference, *rebuilt);
}

// A slow stream still gets checkpoints: by time, once events were applied since the last.
TEST_F(NodeMemoryCacheTest, CheckpointsByTimeWhenEventsAreFew) {
  // A cache that never fills (a full side table would checkpoint too), no event count.
  auto engine = Open("slow", 100000, 0, false, /*checkpoint_seconds=*/0.2);
  storage::AppendResult result;
  ASSERT_TRUE(engine->Ingest(Round(0), &result).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(engine->Ingest(Round(1), &result).ok());  // the memory thread looks after work
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (engine->store().watermark() == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(engine->store().watermark(), 0u);
}

// The memory thread reads misses ahead when work queues behind the item it applies, as in the
// replay after a restart, which queues the log 10,000 events at a time. A crash copy taken
// 40,000 events after a memory checkpoint replays them onto the stored states with a cold cache:
// each item meets sources that only the store holds, which reads ahead serve when the cache
// never evicts (no checkpoint comes between a read and its use), and which checkpoints after
// nearly every item drop with a tiny cache. Both must recover the live memory exactly.
TEST_F(NodeMemoryCacheTest, ReadAheadDuringAReplayIsInvisible) {
  constexpr uint64_t kSources = 40000, kDestinations = 20000;
  auto live = Open("live", 100000, 0);
  storage::AppendResult result;
  auto ingest = [&](uint64_t from, uint64_t to) {
    for (uint64_t first = from; first < to; first += 1000) {
      EventBatch batch;
      for (uint64_t i = first; i < first + 1000; ++i) {
        batch.Add(i % kSources + 1, kSources + i * 7919 % kDestinations + 1,
                  static_cast<double>(i));
      }
      ASSERT_TRUE(live->Ingest(batch, &result).ok());
    }
  };
  ingest(0, kSources);
  ASSERT_TRUE(live->AwaitMemory().ok());
  ASSERT_TRUE(live->SaveMemoryCheckpoint().ok());
  ingest(kSources, 2 * kSources);
  ASSERT_TRUE(live->AwaitMemory().ok());
  for (const auto& [name, rows] : {std::pair<std::string, size_t>{"unbounded", 100000},
                                   std::pair<std::string, size_t>{"tiny", 16}}) {
    ASSERT_TRUE(live->store().Checkpoint((dir_ / name).string()).ok());
    auto recovered = Open(name, rows, 0);
    if (rows == 100000) {  // the tiny cache checkpoints as it replays
      EXPECT_EQ(recovered->store().watermark(), kSources);
      EXPECT_GT(recovered->MemoryCache().prefetched, 0u);
    }
    for (uint64_t node = 1; node <= kSources + kDestinations; node += 397) {
      NodeInfo expected, actual;
      ASSERT_TRUE(live->GetNode(node, 0, &expected).ok());
      ASSERT_TRUE(recovered->GetNode(node, 0, &actual).ok());
      EXPECT_EQ(expected.memory, actual.memory) << name << ", node " << node;
    }
  }
}

// Read-ahead at the cache itself (NodeMemoryCache::AddPrefetched): a miss takes a read made
// ahead instead of reading the store, until a checkpoint, after which the store may hold rows
// that such a read missed; and a read is dropped once the work it was made for is applied.
TEST(NodeMemoryCacheReadAhead, ReadsServeMissesUntilACheckpointOrTheirWorkIsApplied) {
  const auto dir = testing::FreshDirectory("tlp_memory_read_ahead");
  std::unique_ptr<storage::TemporalStore> store;
  storage::StoreOptions store_options;
  store_options.sync = false;
  ASSERT_TRUE(storage::TemporalStore::Open((dir / "store").string(), store_options, &store).ok());
  model::ModelConfig config;
  config.memory_dim = config.embedding_dim = config.time_dim = kWidth;
  model::TemporalLinkModel model(config);
  NodeMemoryCache cache(*store, *model, 16);
  auto save = [&](std::vector<uint64_t> nodes, float value, uint64_t watermark) {
    storage::NodeStates states;
    states.Clear(kWidth);
    for (const uint64_t node : nodes) {
      states.nodes.push_back(node);
      states.last_update_ts.push_back(value);
      states.memory.insert(states.memory.end(), kWidth, value);
    }
    ASSERT_TRUE(store->SaveNodeStates(states, watermark).ok());
  };
  auto read_ahead = [&](std::vector<uint64_t> nodes, uint64_t through_sequence) {
    auto read = std::make_shared<PrefetchedStates>();
    read->generation = cache.generation();
    read->through_sequence = through_sequence;
    read->states.Clear(kWidth);
    EXPECT_TRUE(store->GetNodeStates(nodes, &read->states).ok());
    for (size_t i = 0; i < nodes.size(); ++i) read->index.emplace(nodes[i], i);
    return read;
  };
  auto memory_of = [&](uint64_t node) {
    cache.BeginOperation();
    int64_t row = 0;
    EXPECT_TRUE(cache.Rows({&node, 1}, {&row, 1}).ok());
    return model->MemoryOf(std::vector<int64_t>{row})[0][0].item<float>();
  };

  save({1, 2, 3, 4}, 1.0f, 1);
  const auto read = read_ahead({1, 2, 3}, 100);
  // The store changes after the read (by hand here: in the daemon only a checkpoint writes it),
  // so each value below says where a miss was served from.
  save({1, 2, 3, 4}, 2.0f, 2);
  cache.AddPrefetched(read);
  EXPECT_EQ(memory_of(1), 1.0f);  // the read
  EXPECT_EQ(cache.stats().prefetched, 1u);
  EXPECT_EQ(memory_of(4), 2.0f);  // not read ahead: the store
  cache.TakeCheckpoint(true);
  EXPECT_EQ(memory_of(2), 2.0f);  // dropped by the checkpoint
  cache.AddPrefetched(read);      // begun before it: refused
  EXPECT_EQ(memory_of(3), 2.0f);
  EXPECT_EQ(cache.stats().prefetched, 1u);

  save({5, 6}, 3.0f, 3);
  cache.AddPrefetched(read_ahead({5, 6}, 200));
  save({5, 6}, 4.0f, 4);
  EXPECT_EQ(memory_of(5), 3.0f);
  cache.DropPrefetchedThrough(199);  // its work is not all applied yet: kept
  EXPECT_EQ(memory_of(6), 3.0f);
  EXPECT_EQ(cache.stats().prefetched, 3u);
  cache.DropPrefetchedThrough(200);
  save({7}, 5.0f, 5);
  cache.AddPrefetched(read_ahead({7}, 200));
  cache.DropPrefetchedThrough(200);
  save({7}, 6.0f, 6);
  EXPECT_EQ(memory_of(7), 6.0f);
  EXPECT_EQ(cache.stats().prefetched, 3u);
  store.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tlp::server
