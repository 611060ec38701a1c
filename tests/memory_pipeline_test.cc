// The memory pipeline (server/memory_pipeline.h) and its checkpointer, over a real store, row
// cache and model: chunks follow sequence numbers (not batch boundaries), a failed update is
// reported to every reader instead of hanging them, and a checkpoint is restored only by the
// model that wrote it.
#include "server/memory_pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "model/temporal_model.h"
#include "server/status_error.h"
#include "tests/test_model.h"

namespace tlp::server {
namespace {

constexpr int64_t kWidth = 8;
constexpr int64_t kChunk = 8;

EventBatch Events(int count, double first_ts) {
  EventBatch batch;
  for (int i = 0; i < count; ++i) {
    batch.src.push_back(1 + i % 5);
    batch.dst.push_back(10 + i % 7);
    batch.ts.push_back(first_ts + i);
  }
  return batch;
}

class MemoryPipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshDirectory(std::string("tlp_memory_pipeline_") +
                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    OpenStore();
  }
  void TearDown() override {
    pipeline_.reset();
    cache_.reset();
    store_.reset();  // the model_ outlives them: they borrow it
    std::filesystem::remove_all(dir_);
  }

  void OpenStore() {
    storage::StoreOptions options;
    options.sync = false;
    ASSERT_TRUE(storage::TemporalStore::Open((dir_ / "store").string(), options, &store_).ok());
  }

  // A fresh model (the same weights each time) and row cache, as a restarted daemon has.
  void FreshModel() {
    pipeline_.reset();
    cache_.reset();
    torch::manual_seed(3);
    model::ModelConfig config;
    config.memory_dim = config.embedding_dim = config.time_dim = kWidth;
    model_ = model::TemporalLinkModel(config);
    model_->eval();
    cache_ = std::make_unique<NodeMemoryCache>(*store_, *model_, 1000);
  }

  // A pipeline over the store; `tag` names the model that made its memory, `checkpoint_every`
  // its event trigger (0 = none). Records the size of every chunk it applies; `fail_` and
  // `storage_fails_` make the update throw.
  Status Start(const std::string& tag, uint64_t* watermark, uint64_t checkpoint_every = 0) {
    FreshModel();
    MemoryModel memory_model;
    memory_model.memory_dim = kWidth;
    memory_model.apply = [this](std::span<const int64_t> src, std::span<const int64_t> dst,
                                std::span<const double> ts, std::span<const float> features) {
      if (fail_) throw std::runtime_error("injected");
      if (storage_fails_) throw StatusError(Status::IoError("injected read error"));
      chunks_.push_back(src.size());
      model_->ApplyEvents(src, dst, ts, features);
    };
    MemoryPipelineOptions options;
    options.memory_batch = kChunk;
    options.model_tag = tag;
    options.checkpoints.every_events = checkpoint_every;
    pipeline_ = std::make_unique<MemoryPipeline>(options, store_.get(), std::move(memory_model),
                                                 cache_.get(), &destinations_, &model_mutex_);
    return pipeline_->Start((dir_ / "store").string(), false, watermark);
  }

  // Appends `batch` to the store and queues it, as Engine::Ingest does.
  void Ingest(const EventBatch& batch) {
    storage::AppendResult result;
    ASSERT_TRUE(store_->Append(batch, &result).ok());
    pipeline_->Queue(batch, result.sequences.front());
  }

  std::filesystem::path dir_;
  model::TemporalLinkModel model_{nullptr};
  std::unique_ptr<storage::TemporalStore> store_;
  std::unique_ptr<NodeMemoryCache> cache_;
  DestinationSet destinations_;
  Mutex model_mutex_;
  std::unique_ptr<MemoryPipeline> pipeline_;
  std::vector<size_t> chunks_;
  bool fail_ = false;
  bool storage_fails_ = false;
};

TEST_F(MemoryPipelineTest, ChunksFollowSequenceNumbersNotBatches) {
  uint64_t watermark = 1;
  ASSERT_TRUE(Start("model/8", &watermark).ok());
  EXPECT_EQ(watermark, 0u);
  Ingest(Events(5, 100));
  Ingest(Events(5, 200));
  Ingest(Events(7, 300));  // 17 events: chunks [1, 8], [9, 16]; 17 stays open
  ASSERT_TRUE(pipeline_->Await().ok());
  ASSERT_TRUE(pipeline_->Drain().ok());
  EXPECT_EQ(chunks_, (std::vector<size_t>{8, 8}));
  const MemoryProgress progress = pipeline_->Progress();
  EXPECT_EQ(progress.through, 16u);
  EXPECT_EQ(progress.events_applied, 16u);
  EXPECT_EQ(pipeline_->LagEvents(), 1u);
  EXPECT_EQ(destinations_.size(), 7u);
}

TEST_F(MemoryPipelineTest, AFailedUpdateReachesEveryReader) {
  uint64_t watermark = 0;
  ASSERT_TRUE(Start("model/8", &watermark).ok());
  fail_ = true;
  Ingest(Events(10, 100));
  const Status awaited = pipeline_->Await();
  EXPECT_EQ(awaited.code(), Status::Code::kInternal);
  EXPECT_NE(awaited.message().find("node memory update failed: injected"), std::string::npos)
      << awaited.ToString();
  // Later work is not applied, and nobody waits for it.
  Ingest(Events(10, 200));
  EXPECT_EQ(pipeline_->Drain().code(), Status::Code::kInternal);
  EXPECT_TRUE(chunks_.empty());
}

TEST_F(MemoryPipelineTest, AGapInSequencesFailsInsteadOfHanging) {
  uint64_t watermark = 0;
  ASSERT_TRUE(Start("model/8", &watermark).ok());
  Ingest(Events(5, 100));
  pipeline_->Queue(Events(5, 200), 9);  // 6..8 never handed over
  const Status awaited = pipeline_->Await();
  EXPECT_EQ(awaited.code(), Status::Code::kInternal) << awaited.ToString();
  EXPECT_NE(awaited.message().find("sequence 9 after 5"), std::string::npos) << awaited.ToString();
}

// A model being loaded: its pipeline starts at sequence 0 without the store; stopped and resumed
// (in the foreground) it keeps its open chunk and goes on where it stood.
// A model being loaded: its memory thread starts empty in the background, where it asks
// whether to yield the model lock after each chunk (and still applies every chunk while the
// answer is yes), then resumes in the foreground, where it never asks.
TEST_F(MemoryPipelineTest, AnEmptyStartStopsAndResumesWhereItStood) {
  FreshModel();
  MemoryModel memory_model;
  memory_model.memory_dim = kWidth;
  memory_model.apply = [this](std::span<const int64_t> src, std::span<const int64_t> dst,
                              std::span<const double> ts, std::span<const float> features) {
    chunks_.push_back(src.size());
    model_->ApplyEvents(src, dst, ts, features);
  };
  MemoryPipelineOptions options;
  options.memory_batch = kChunk;
  options.model_tag = "loaded/8";
  options.background = true;
  options.background_lock_share = 0.5;
  std::atomic<int> busy_asked{0};
  options.busy = [&busy_asked] {
    ++busy_asked;
    return true;
  };
  pipeline_ = std::make_unique<MemoryPipeline>(options, store_.get(), std::move(memory_model),
                                               cache_.get(), &destinations_, &model_mutex_);
  pipeline_->StartEmpty();
  Ingest(Events(11, 100));  // [1, 8] applied, 9..11 open
  ASSERT_TRUE(pipeline_->Drain().ok());
  EXPECT_EQ(busy_asked, 1) << "one chunk applied in the background";
  pipeline_->Stop();
  EXPECT_TRUE(pipeline_->Await().ok()) << "a stopped pipeline does not keep readers waiting";
  pipeline_->Resume();
  Ingest(Events(6, 200));  // 12..17: [9, 16] applied
  ASSERT_TRUE(pipeline_->Await().ok());
  ASSERT_TRUE(pipeline_->Drain().ok());
  EXPECT_EQ(chunks_, (std::vector<size_t>{8, 8}));
  EXPECT_EQ(busy_asked, 1) << "the foreground thread does not yield";
  EXPECT_EQ(pipeline_->Progress().through, 16u);
  EXPECT_EQ(pipeline_->LagEvents(), 1u);
}

// A storage failure under the model (a StatusError from the store-backed sampler or the row
// cache) keeps its code instead of turning into INTERNAL.
TEST_F(MemoryPipelineTest, AStorageFailureKeepsItsCode) {
  uint64_t watermark = 0;
  ASSERT_TRUE(Start("model/8", &watermark).ok());
  storage_fails_ = true;
  Ingest(Events(10, 100));
  const Status awaited = pipeline_->Await();
  EXPECT_EQ(awaited.code(), Status::Code::kIoError) << awaited.ToString();
  EXPECT_NE(awaited.message().find("injected read error"), std::string::npos);
}

TEST_F(MemoryPipelineTest, ACheckpointIsRestoredByTheModelThatWroteIt) {
  uint64_t watermark = 0;
  ASSERT_TRUE(Start("model/8", &watermark).ok());
  Ingest(Events(20, 100));  // chunks through 16; 17..20 open
  ASSERT_TRUE(pipeline_->Await().ok());
  ASSERT_TRUE(pipeline_->Checkpoint().ok());
  EXPECT_EQ(pipeline_->EventsSinceCheckpoint(), 0u);

  ASSERT_TRUE(Start("model/8", &watermark).ok());
  EXPECT_EQ(watermark, 16u);  // the open chunk is replayed, not restored
  EXPECT_EQ(pipeline_->Progress().events_applied, 16u);
  EXPECT_EQ(destinations_.size(), 7u);

  // Another model (or chunk size) discards it: the whole log is replayed.
  ASSERT_TRUE(Start("other-model/8", &watermark).ok());
  EXPECT_EQ(watermark, 0u);
  EXPECT_EQ(store_->watermark(), 0u);
}

TEST_F(MemoryPipelineTest, CheckpointsStartWhenDue) {
  // Every 8 applied events: the memory thread starts them itself.
  uint64_t watermark = 0;
  ASSERT_TRUE(Start("model/8", &watermark, /*checkpoint_every=*/8).ok());
  Ingest(Events(8, 100));
  ASSERT_TRUE(pipeline_->Drain().ok());
  pipeline_.reset();  // waits for the write in flight
  EXPECT_EQ(store_->watermark(), 8u);
}

}  // namespace
}  // namespace tlp::server
