// The engine facade (server/engine.h) over a real store and model: memory restored from the
// store only for the model that wrote it.
#include "server/engine.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace tlp::server
