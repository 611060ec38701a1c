// The engine facade (server/engine.h) over a real store and model: memory restored from the
// store only for the model that wrote it; a pair-wise model's metrics per link; model refresh
// (LoadModel, Rollback) under concurrent ingest and scoring, its refusals, and restarts after a
// crash in each of its phases.
#include "server/engine.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "model/checkpoint.h"
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

// The queries the model-refresh tests compare: known sources and destinations, one unknown.
const std::vector<LinkQuery> kProbe = {{1, 100, 0}, {2, 103, 0}, {3, 105, 0}, {1, 999, 0}};

std::vector<float> ProbeLogits(Engine& engine) {
  std::vector<LinkScore> scores;
  const Status status = engine.Score(kProbe, &scores);
  EXPECT_TRUE(status.ok()) << status.ToString();
  std::vector<float> logits;
  for (const LinkScore& score : scores) logits.push_back(score.logit);
  return logits;
}

EngineOptions SmallEngineOptions(const std::filesystem::path& data_dir,
                                 const std::filesystem::path& checkpoint) {
  EngineOptions options;
  options.data_dir = data_dir.string();
  options.checkpoint = checkpoint.string();
  options.sync_writes = false;
  options.memory_batch = 4;
  return options;
}

TEST_F(EngineTest, LoadedModelSwapsInUnderIngestAndScoringAndMatchesAFreshStart) {
  // Another memory width too: the swapped-in memory replaces rows of another shape.
  ASSERT_TRUE(testing::WriteSmallModel(dir_ / "b.pt", 12, 2).ok());
  engine_.reset();
  // Events also arrive once the load's first pass over the log is queued, after what it read.
  EngineOptions options = SmallEngineOptions(dir_ / "data", dir_ / "model.pt");
  // The writer below may run any number of batches (1,000 s of event time each) ahead between
  // reading max_ts and this batch's append, so no lateness bound may refuse it.
  options.lateness_seconds = 1e9;
  Engine* opened = nullptr;
  options.on_load_phase = [&](ModelLoadPhase phase) {
    storage::AppendResult late;
    if (phase == ModelLoadPhase::kReplaying) {
      const Status status =
          opened->Ingest(ClientBatch(97, 30, opened->store().max_ts() + 0.5), &late);
      ASSERT_TRUE(status.ok()) << status.ToString();
    }
  };
  ASSERT_TRUE(Engine::Open(options, &engine_).ok());
  opened = engine_.get();
  storage::AppendResult result;
  ASSERT_TRUE(engine_->Ingest(ClientBatch(0, 400, 1.0), &result).ok());
  const std::string a = engine_->Info().fingerprint;

  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, back_to_a{0};
  std::set<uint64_t> models_seen;
  std::thread scorer([&] {
    bool seen_other = false;
    while (!stop) {
      // A pause between calls, as between a client's requests: a loop that retakes the model
      // lock the moment it lets go wins it nearly every time (std::mutex is not fair), and the
      // load, which yields to scoring by design, then took from 1 to 100 s on 2 cores.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::vector<LinkScore> scores;
      if (!engine_->Score(kProbe, &scores).ok()) {
        ++failures;
        continue;
      }
      for (const LinkScore& score : scores) {
        EXPECT_EQ(score.model, scores.front().model) << "one call, one model";
      }
      models_seen.insert(scores.front().model);
      const bool is_a = ModelFingerprintText(scores.front().model) == a;
      if (seen_other && is_a) ++back_to_a;
      seen_other |= !is_a;
    }
  });
  std::thread writer([&] {
    for (int batch = 1; batch <= 40 && !stop; ++batch) {
      storage::AppendResult appended;
      if (!engine_->Ingest(ClientBatch(batch, 25, 1000.0 * batch), &appended).ok()) ++failures;
    }
  });
  const Status load = engine_->LoadModel((dir_ / "b.pt").string());
  ASSERT_TRUE(load.ok()) << load.ToString();
  const Status loaded = engine_->AwaitModelLoad();
  writer.join();
  stop = true;
  scorer.join();
  ASSERT_TRUE(loaded.ok()) << loaded.ToString();
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(back_to_a, 0);
  const ModelStatus status = engine_->GetModelStatus();
  const std::string b = status.fingerprint;
  EXPECT_NE(b, a);
  EXPECT_EQ(status.previous_fingerprint, a);
  EXPECT_EQ(status.swaps, 1u);
  EXPECT_EQ(status.phase, ModelLoadPhase::kIdle);
  EXPECT_TRUE(status.last_error.empty());
  EXPECT_TRUE(std::filesystem::exists(dir_ / "data" / "models" / (b + ".pt")));
  for (uint64_t model : models_seen) {
    EXPECT_TRUE(ModelFingerprintText(model) == a || ModelFingerprintText(model) == b);
  }
  EXPECT_EQ(engine_->Info().events_applied + engine_->MemoryLagEvents(), 400u + 40 * 25 + 30);

  ASSERT_TRUE(engine_->AwaitMemory().ok());
  const std::vector<float> swapped = ProbeLogits(*engine_);
  engine_.reset();
  // A restart with the same --checkpoint serves the committed model, memory restored...
  std::unique_ptr<Engine> restarted;
  ASSERT_TRUE(Engine::Open(SmallEngineOptions(dir_ / "data", dir_ / "model.pt"), &restarted).ok());
  EXPECT_EQ(restarted->Info().fingerprint, b);
  EXPECT_EQ(ProbeLogits(*restarted), swapped);
  restarted.reset();
  // ...and equals B started fresh on the same log, bit for bit.
  EngineOptions fresh_options = SmallEngineOptions(dir_ / "data", dir_ / "b.pt");
  fresh_options.rebuild_memory = true;
  std::unique_ptr<Engine> fresh;
  ASSERT_TRUE(Engine::Open(fresh_options, &fresh).ok());
  EXPECT_EQ(ProbeLogits(*fresh), swapped);
}

TEST_F(EngineTest, RollbackServesThePreviousModelAgain) {
  storage::AppendResult result;
  ASSERT_TRUE(engine_->Ingest(ClientBatch(0, 60, 1.0), &result).ok());
  ASSERT_TRUE(engine_->AwaitMemory().ok());
  const std::string a = engine_->Info().fingerprint;
  const std::vector<float> before = ProbeLogits(*engine_);
  const Status none = engine_->Rollback();
  EXPECT_EQ(none.code(), Status::Code::kFailedPrecondition) << none.ToString();

  ASSERT_TRUE(testing::WriteSmallModel(dir_ / "b.pt", 8, 2).ok());
  ASSERT_TRUE(engine_->LoadModel((dir_ / "b.pt").string()).ok());
  ASSERT_TRUE(engine_->AwaitModelLoad().ok());
  EXPECT_NE(ProbeLogits(*engine_), before);
  ASSERT_TRUE(engine_->Rollback().ok());
  ASSERT_TRUE(engine_->AwaitModelLoad().ok());
  const ModelStatus status = engine_->GetModelStatus();
  EXPECT_EQ(status.fingerprint, a);
  EXPECT_EQ(status.swaps, 1u);
  EXPECT_EQ(status.rollbacks, 1u);
  EXPECT_EQ(ProbeLogits(*engine_), before);
}

TEST_F(EngineTest, LoadModelRefusesWhatCannotServeThisStore) {
  model::ModelConfig config;
  config.memory_dim = config.embedding_dim = config.time_dim = 8;
  config.edge_feature_dim = 3;  // the store holds events without features
  model::TemporalLinkModel wide(config);
  ASSERT_TRUE(model::SaveCheckpoint((dir_ / "wide.pt").string(), wide).ok());
  Status status = engine_->LoadModel((dir_ / "wide.pt").string());
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(status.message().find("edge_feature_dim 3"), std::string::npos) << status.ToString();
  status = engine_->LoadModel((dir_ / "missing.pt").string());
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  status = engine_->LoadModel((dir_ / "model.pt").string());
  EXPECT_EQ(status.code(), Status::Code::kAlreadyExists) << status.ToString();
  EXPECT_EQ(engine_->GetModelStatus().phase, ModelLoadPhase::kIdle);
  EXPECT_EQ(engine_->GetModelStatus().swaps, 0u);
}

// A crash (SIGKILL) in each phase of a load: the restart serves the last committed model,
// with every event, and its restored memory equals memory rebuilt from the log.
TEST_F(EngineTest, ACrashDuringALoadRestartsOnTheLastCommittedModel) {
  engine_.reset();
  ASSERT_TRUE(testing::WriteSmallModel(dir_ / "b.pt", 12, 2).ok());
  std::string a, b;
  {
    std::unique_ptr<Engine> probe;
    ASSERT_TRUE(Engine::Open(SmallEngineOptions(dir_ / "probe-a", dir_ / "model.pt"), &probe).ok());
    a = probe->Info().fingerprint;
    probe.reset();
    ASSERT_TRUE(Engine::Open(SmallEngineOptions(dir_ / "probe-b", dir_ / "b.pt"), &probe).ok());
    b = probe->Info().fingerprint;
  }
  for (const auto& [phase, expected] : std::vector<std::pair<std::string, std::string>>{
           {"replaying", a}, {"committed", b}, {"swapped", b}}) {
    SCOPED_TRACE(phase);
    const std::filesystem::path data = dir_ / ("crash-" + phase);
    const std::string command = std::string(MODEL_LOAD_CRASH_BINARY) + " " + data.string() + " " +
                                (dir_ / "model.pt").string() + " " + (dir_ / "b.pt").string() +
                                " " + phase + " 203 2>/dev/null";
    const int exit = std::system(command.c_str());
    ASSERT_TRUE(WIFSIGNALED(exit) || (WIFEXITED(exit) && WEXITSTATUS(exit) == 128 + SIGKILL))
        << "helper exit " << exit;
    std::unique_ptr<Engine> restarted;
    ASSERT_TRUE(Engine::Open(SmallEngineOptions(data, dir_ / "model.pt"), &restarted).ok());
    EXPECT_EQ(restarted->Info().fingerprint, expected);
    EXPECT_EQ(restarted->store().last_sequence(), 203u);
    const std::vector<float> restored = ProbeLogits(*restarted);
    restarted.reset();
    EngineOptions rebuild = SmallEngineOptions(data, dir_ / "model.pt");
    rebuild.rebuild_memory = true;
    ASSERT_TRUE(Engine::Open(rebuild, &restarted).ok());
    EXPECT_EQ(restarted->Info().fingerprint, expected);
    EXPECT_EQ(ProbeLogits(*restarted), restored);
  }
}

// The second outcome through the engine: refused by a link-only model; a node-state model scores
// each (node, time) with that node's own representation metrics.
TEST_F(EngineTest, ScoresNodeStatesWithTheirOwnRepresentationMetrics) {
  const std::vector<NodeStateQuery> queries = {{1, 0}, {999, 0}, {1, 5.5}};
  std::vector<NodeStateScore> scores;
  const Status refused = engine_->ScoreNodeStates(queries, &scores);  // links only
  EXPECT_EQ(refused.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(refused.message().find("--node-state"), std::string::npos) << refused.ToString();
  ASSERT_TRUE(testing::WriteSmallModel(dir_ / "states.pt", 8, 3, "tgn", "indexed").ok());
  std::unique_ptr<Engine> engine;
  ASSERT_TRUE(Engine::Open(SmallEngineOptions(dir_ / "states", dir_ / "states.pt"), &engine).ok());
  EXPECT_TRUE(engine->Info().node_state);
  EXPECT_EQ(engine->Info().outcome_attention, "indexed");
  storage::AppendResult result;
  ASSERT_TRUE(engine->Ingest(ClientBatch(0, 12, 1.0), &result).ok());  // node 1 at ts 1..12
  const Status status = engine->ScoreNodeStates(queries, &scores);
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(scores.size(), 3u);
  EXPECT_GT(scores[0].query.at, 12.0);  // "now": after every stored event
  EXPECT_EQ(scores[2].query.at, 5.5);
  for (const NodeStateScore& score : scores) {
    EXPECT_TRUE(std::isfinite(score.logit));
    EXPECT_FLOAT_EQ(score.probability, 1.0f / (1.0f + std::exp(-score.logit)));
    EXPECT_EQ(ModelFingerprintText(score.model), engine->Info().fingerprint);
  }
  EXPECT_EQ(scores[0].metrics.neighbors_used, 10u);  // the model's k of node 1's 12 events
  EXPECT_FALSE(scores[0].metrics.cold_start);
  EXPECT_GT(scores[0].metrics.representation_norm, 0.0f);
  EXPECT_TRUE(scores[1].metrics.cold_start);
  EXPECT_EQ(scores[1].metrics.neighbors_used, 0u);
  EXPECT_EQ(scores[2].metrics.neighbors_used, 5u);  // ts 1..5 are before 5.5
}

}  // namespace
}  // namespace tlp::server
