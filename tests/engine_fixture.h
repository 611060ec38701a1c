// A fixture for the tests of the engine's parts: a real Engine (RocksDB in a fresh directory,
// a small untrained model, chunks of 4 events) and client batches with event ids.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "server/engine.h"
#include "tests/test_model.h"

namespace tlp::testing {

class EngineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = FreshDirectory(std::string("tlp_engine_") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(WriteSmallModel(dir_ / "model.pt", 8, 1).ok());
    server::EngineOptions options;
    options.data_dir = (dir_ / "data").string();
    options.checkpoint = (dir_ / "model.pt").string();
    options.sync_writes = false;
    options.memory_batch = 4;
    const Status status = server::Engine::Open(options, &engine_);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  void TearDown() override {
    engine_.reset();
    std::filesystem::remove_all(dir_);
  }

  // `count` events of client `client`, ids "c<client>-<i>", timestamps from `first_ts`.
  static EventBatch ClientBatch(int client, int count, double first_ts) {
    EventBatch batch;
    for (int i = 0; i < count; ++i) {
      batch.Add(1 + client, 100 + i % 7, first_ts + i, {},
                "c" + std::to_string(client) + "-" + std::to_string(i));
    }
    return batch;
  }

  std::filesystem::path dir_;
  std::unique_ptr<server::Engine> engine_;
};

}  // namespace tlp::testing
