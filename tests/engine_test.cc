// The engine facade (server/engine.h) over a real store and model: memory restored from the
// store only for the model that wrote it; a pair-wise model's metrics per link.
#include "server/engine.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/engine_fixture.h"

namespace tlp::server {
namespace {

using EngineTest = testing::EngineTest;

TEST_F(EngineTest, MemoryCheckpointOfAnotherModelIsNotUsed) {
  const EventBatch events = ClientBatch(0, 40, 1.0);
  storage::AppendResult result;
  ASSERT_TRUE(engine_->Ingest(events, &result).ok());
  engine_.reset();  // writes a memory checkpoint of this model into the store
  // Another model (other weights) on the same data dir, and on a fresh one fed the same events.
  ASSERT_TRUE(testing::WriteSmallModel(dir_ / "other.pt", 8, 2).ok());
  EngineOptions options;
  options.checkpoint = (dir_ / "other.pt").string();
  options.sync_writes = false;
  options.memory_batch = 4;
  options.data_dir = (dir_ / "data").string();
  std::unique_ptr<Engine> reopened, fresh;
  ASSERT_TRUE(Engine::Open(options, &reopened).ok());
  options.data_dir = (dir_ / "fresh").string();
  ASSERT_TRUE(Engine::Open(options, &fresh).ok());
  ASSERT_TRUE(fresh->Ingest(events, &result).ok());
  NodeInfo replayed, clean;
  ASSERT_TRUE(reopened->GetNode(1, 0, &replayed).ok());
  ASSERT_TRUE(fresh->GetNode(1, 0, &clean).ok());
  ASSERT_FALSE(clean.memory.empty());
  ASSERT_EQ(replayed.memory.size(), clean.memory.size());
  for (size_t i = 0; i < clean.memory.size(); ++i)
    EXPECT_FLOAT_EQ(replayed.memory[i], clean.memory[i]);
  EXPECT_EQ(reopened->Info().events_applied, 40u);
}

TEST_F(EngineTest, APairWiseModelReportsEachLinksOwnMetrics) {
  ASSERT_TRUE(testing::WriteSmallModel(dir_ / "dygformer.pt", 8, 3, "dygformer").ok());
  EngineOptions options;
  options.checkpoint = (dir_ / "dygformer.pt").string();
  options.sync_writes = false;
  options.memory_batch = 4;
  options.data_dir = (dir_ / "dygformer").string();
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(Engine::Open(options, &engine).ok());
  storage::AppendResult result;
  // Source 1 meets 100..106 in turn; its 3 most recent partners are 104, 103, 102.
  ASSERT_TRUE(engine->Ingest(ClientBatch(0, 12, 1.0), &result).ok());
  ASSERT_TRUE(engine->AwaitMemory().ok());
  const std::vector<LinkQuery> queries = {{1, 100, 0}, {1, 103, 0}, {1, 999, 0}};
  std::vector<LinkScore> scores;
  ASSERT_TRUE(engine->Score(queries, &scores).ok());
  ASSERT_EQ(scores.size(), 3u);
  for (const LinkScore& score : scores) {
    EXPECT_TRUE(std::isfinite(score.logit));
    EXPECT_EQ(score.src_metrics.neighbors_used, 3u);
    EXPECT_GT(score.src_metrics.effective_neighbors, 0.0f);
  }
  EXPECT_TRUE(scores[2].dst_metrics.cold_start);
  EXPECT_EQ(scores[2].dst_metrics.neighbors_used, 0u);
  // The source's representation depends on the pair: 103 is in its sequence, 999 is unknown.
  EXPECT_NE(scores[1].src_metrics.representation_norm, scores[2].src_metrics.representation_norm);
}

}  // namespace
}  // namespace tlp::server
