// Engine: the daemon's logic without the network. It owns the temporal store, the model and
// its node memory, and scores links; the gRPC layer (service.h) only translates protos to these
// calls, so everything here is testable directly.
//
// Its parts, each with its own header: the memory pipeline (memory_pipeline.h: the memory
// thread that keeps node memory in step with the log, read-your-writes, determinism) with its
// checkpointer (memory_checkpointer.h), the store-backed neighbour sampler (store_sampler.h),
// the destination set (destination_set.h); TopK lives in the link ranker (link_ranker.h) over
// Score. Ingest returns once events are durable; reads (Score, GetNode, AwaitMemory) first wait
// until memory covers every complete chunk stored when they were called.
//
// Model refresh (LoadModel): a checkpoint is loaded beside the serving model; a background
// thread replays the whole log into its own node memory (a cache that is not store-backed, at a
// lower priority, leaving the model lock to scoring three quarters of the time while requests
// come), catches up with live ingest, then, with ingest held for the last events,
// commits it as the serving model in the store (a crash from then on restarts on it), swaps it
// in at a chunk boundary and writes its memory over the previous model's. Every score says
// which model made it (LinkScore::model); one Score call is never split across models.
//
// Locks: one process-wide model mutex guards the models and their row caches, shared by scoring
// and the memory threads (torch modules and the row cache are not thread-safe), and which model
// serves; ingest_mutex_ serialises writers (and a swap, which holds both).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/event_batch.h"
#include "common/mutex.h"
#include "common/status.h"
#include "server/destination_set.h"
#include "server/memory_pipeline.h"
#include "server/node_memory_cache.h"
#include "storage/temporal_store.h"

namespace tlp::server {

// Where a model load (Engine::LoadModel) is.
enum class ModelLoadPhase {
  kIdle,       // none running
  kReplaying,  // rebuilding the loaded model's memory from the log, beside the serving model
  kCommitted,  // ingest held; the store names the loaded model as the one to serve
  kSwapped,    // it serves; its memory is being written over the previous model's
};
const char* ModelLoadPhaseName(ModelLoadPhase phase);

struct EngineOptions {
  std::string data_dir = "./tlpd-data";
  std::string checkpoint;  // model checkpoint file; required
  std::string device = "cpu";
  double lateness_seconds = 3600.0;
  double max_future_seconds = 86400.0;  // storage::StoreOptions::max_future_seconds
  bool sync_writes = true;
  bool allow_self_loops = false;
  int64_t memory_batch = 200;
  int torch_threads = 2;  // scoring's intra-op threads (process-wide in torch)
  // Intra-op threads of the memory thread's model updates. Its chunks are small (~400 rows): an
  // OpenMP team forked per op waits on workers that the writer and RocksDB keep off the cores.
  int memory_threads = 1;
  // Node memory changed since the last checkpoint is written to the store every this many
  // applied events, when the cache's evicted changed rows reach their bound, and on close
  // (MemoryCheckpointer); a restart replays only the log after it. 0 = only on close and when
  // the cache needs it. Each checkpoint costs what changed (~415k rows per 1M events at 10M
  // nodes), so a longer interval writes less for a longer crash replay (~10 s per 1M events).
  uint64_t checkpoint_every_events = 1000000;
  // Also when this many seconds passed since the last one and events were applied since (a
  // slow stream would otherwise go hours between checkpoints). 0 = no time trigger.
  double checkpoint_every_seconds = 300;
  // Memory for cached neighbour lists (storage::StoreOptions::neighbor_cache_bytes), MiB.
  size_t neighbor_cache_mb = 1024;
  // RocksDB's block cache (storage::StoreOptions::block_cache_bytes), MiB.
  size_t block_cache_mb = 256;
  // Discards the stored node memory at open and rebuilds it from the whole log.
  bool rebuild_memory = false;
  // Memory for resident node memory rows (NodeMemoryCache); the rest stays in RocksDB.
  size_t node_memory_cache_bytes = size_t{1} << 30;
  // Durable events that may wait for the memory thread; beyond it Ingest waits.
  size_t memory_queue_events = 100000;
  // Told as a model load (LoadModel) enters each phase, on its thread (kReplaying once its
  // first pass over the log is queued). Tests stop the process there, or ingest.
  std::function<void(ModelLoadPhase)> on_load_phase;
};

struct EndpointMetrics {
  float representation_norm = 0;
  float effective_neighbors = 0;
  float attention_mass = 0;
  float attention_entropy = 0;
  uint32_t neighbors_used = 0;
  bool cold_start = false;
};

struct LinkQuery {
  uint64_t src = 0;
  uint64_t dst = 0;
  double at = 0;  // 0 = now
};

struct LinkScore {
  LinkQuery query;  // `at` resolved
  float probability = 0;
  float logit = 0;
  EndpointMetrics src_metrics, dst_metrics;
  uint64_t model = 0;  // fingerprint of the model that scored it (ModelFingerprintText)
};

// The fingerprint as ModelInfo and the API print it (16 hex digits).
std::string ModelFingerprintText(uint64_t fingerprint);

struct NodeStateQuery {
  uint64_t node = 0;
  double at = 0;  // 0 = now
};

struct NodeStateScore {
  NodeStateQuery query;   // `at` resolved
  float probability = 0;  // P(state label = 1)
  float logit = 0;
  EndpointMetrics metrics;  // of the node's representation for this outcome
  uint64_t model = 0;       // fingerprint of the model that scored it
};

struct ModelInfo {
  std::string architecture, fingerprint, device, outcome_attention;
  bool node_state = false;  // ScoreNodeStates is served
  double attention_p = 1;
  uint32_t embedding_dim = 0, memory_dim = 0, edge_feature_dim = 0, neighbors = 0;
  uint64_t events_applied = 0, watermark = 0;
};

struct ModelStatus {
  std::string fingerprint, checkpoint;  // the serving model, and the file it came from
  // The model it replaced (empty when none was swapped out): what Rollback loads.
  std::string previous_fingerprint, previous_checkpoint;
  ModelLoadPhase phase = ModelLoadPhase::kIdle;
  std::string loading_fingerprint, loading_checkpoint;  // while a load runs
  uint64_t replayed_events = 0, target_events = 0;      // its progress through the log
  std::string last_error;  // why the last load failed (empty when it did not)
  uint64_t swaps = 0, rollbacks = 0;
  double last_swap_seconds = 0;  // load to swap, of the last one that completed
  double last_hold_seconds = 0;  // of which ingest was held (the last events and the swap)
};

struct NodeInfo {
  bool known = false;
  uint64_t degree = 0;
  double last_update_ts = 0;
  std::vector<float> memory;
  std::vector<storage::Neighbor> recent;
};

class StoreSampler;

class Engine {
 public:
  // Opens the store, loads the model, replays the log into node memory.
  static Status Open(const EngineOptions& options, std::unique_ptr<Engine>* engine);
  ~Engine();  // writes a final memory checkpoint (when Open had succeeded)

  // Writes the node memory changed since the last checkpoint, the pending messages and the
  // destinations seen since, with the watermark they cover (one atomic write), after any
  // checkpoint still being written in the background.
  Status SaveMemoryCheckpoint();

  // Validates (including the self-loop policy), appends durably with `cursors` in the same
  // write, queues the new events for the memory thread. One caller at a time (the ingest
  // writer, or the Kafka source, which replaces it).
  Status Ingest(const EventBatch& batch, storage::AppendResult* result,
                std::span<const storage::SourceCursor> cursors = {});
  // Per event, what Ingest would say of it if the events before it that passed were stored
  // (self-loops, ts, lateness, features, event_id); for sources that drop bad events one by one
  // and go on. Re-sent duplicates are judged like new events here (Ingest exempts them from
  // lateness), so an event that passes also passes Ingest.
  void Screen(const EventBatch& batch, std::vector<Status>* verdicts) const;
  // Waits until node memory covers every complete chunk stored when called. Fails only when
  // a memory update failed (the daemon cannot score correctly any more).
  Status AwaitMemory();
  Status Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores);
  // Scores nodes' state (the second outcome; model::ModelConfig::node_state) at times, waiting
  // for memory as Score does. FAILED_PRECONDITION when the serving model has no node-state head.
  Status ScoreNodeStates(std::span<const NodeStateQuery> queries,
                         std::vector<NodeStateScore>* scores);
  // Every node ever seen as a destination (TopK over "all").
  std::vector<uint64_t> KnownDestinations() const;
  MemoryCacheStats MemoryCache() const;
  MemoryThreadSeconds MemoryThreadTime() const;
  Status GetNode(uint64_t node, size_t recent, NodeInfo* info);
  ModelInfo Info() const;
  // Seconds since node memory was last snapshotted (or since open, when never), and the events
  // applied since: a restart replays those.
  double SecondsSinceCheckpoint() const;
  uint64_t EventsSinceCheckpoint() const;
  // Durable events not yet applied to node memory (queued or in the open chunk).
  uint64_t MemoryLagEvents() const;
  const storage::TemporalStore& store() const { return *store_; }

  // Model refresh. Loads `checkpoint` (a file the daemon can read) and returns once it is
  // checked; the rest runs in the background (see the top of this file). The file is copied
  // into <data_dir>/models/ first, so a restart finds the committed model there.
  // INVALID_ARGUMENT: unreadable, or another edge-feature width than the store's;
  // ALREADY_EXISTS: it is the serving model; FAILED_PRECONDITION: a load is running.
  Status LoadModel(const std::string& checkpoint);
  // Loads the model the last swap replaced, the same way. FAILED_PRECONDITION when none.
  Status Rollback();
  // Waits until no load runs; the last load's outcome.
  Status AwaitModelLoad();
  ModelStatus GetModelStatus() const;

 private:
  struct ServingModel;
  Engine() = default;
  Status CheckSelfLoop(const EventBatch& batch, size_t i) const;  // the self-loop policy
  // Loads a checkpoint file (checked against the store's feature width once it is open).
  Status LoadModelFile(const std::string& checkpoint, std::shared_ptr<ServingModel>* result) const;
  // Builds its cache, sampler and memory pipeline (not started). `store_backed`: its memory
  // is the store's (the serving model at open; not a model being loaded).
  void AttachModel(ServingModel* serving, bool store_backed);
  // Records `phase` and tells options_.on_load_phase.
  void EnterPhase(ModelLoadPhase phase) ABSL_LOCKS_EXCLUDED(load_mutex_);
  std::shared_ptr<ServingModel> Serving() const ABSL_LOCKS_EXCLUDED(model_mutex_);
  // Runs `score` with the serving model once its memory is current, again with the next one
  // when it reports (*swapped) that it stopped serving before the model lock was taken.
  Status WithServingModel(const std::function<Status(const ServingModel&, bool*)>& score);
  // Under the model mutex, with `serving` still serving (else *swapped, and nothing runs): pages
  // in the rows of `count` queries (row 0 for nodes the store does not know; `known_nodes` at
  // `known_positions`) and runs `score` on them without autograd. What the model or the store
  // throws becomes a Status.
  Status ScoreRows(const ServingModel& serving, const std::vector<uint64_t>& known_nodes,
                   const std::vector<size_t>& known_positions, size_t count, bool* swapped,
                   const std::function<Status(const std::vector<int64_t>& rows)>& score);
  // Score and ScoreNodeStates with `serving`.
  Status ScoreWith(const ServingModel& serving, std::span<const LinkQuery> queries,
                   std::vector<LinkScore>* scores, bool* swapped);
  Status ScoreNodeStatesWith(const ServingModel& serving, std::span<const NodeStateQuery> queries,
                             std::vector<NodeStateScore>* scores, bool* swapped);
  Status StartLoad(const std::string& checkpoint, bool rollback);
  // The load thread: replay, catch up, commit, swap, write the new memory.
  void RunLoad(std::shared_ptr<ServingModel> loaded, bool rollback);
  Status ReplayInto(const ServingModel& loaded, uint64_t* through, bool to_end);

  EngineOptions options_;
  std::string device_name_;
  std::string base_fingerprint_;  // of options_.checkpoint (the committed record names it)
  // Declared before the models, whose pipelines borrow them: destroyed after them.
  std::unique_ptr<storage::TemporalStore> store_;
  DestinationSet destinations_;
  bool opened_ = false;  // Open completed: the destructor writes a final checkpoint

  // Which model serves. Changed with ingest_mutex_, model_mutex_ and serving_mutex_ held, in
  // that order; read under serving_mutex_ alone, so that a scorer finds it without waiting for
  // a chunk apply, which holds the model mutex.
  mutable Mutex serving_mutex_;
  std::shared_ptr<ServingModel> serving_ ABSL_GUARDED_BY(serving_mutex_);
  // The serving model as Ingest sees it (the same, read under ingest_mutex_ alone).
  std::shared_ptr<ServingModel> ingest_target_ ABSL_GUARDED_BY(ingest_mutex_);

  mutable Mutex load_mutex_;
  std::thread load_thread_;  // joined by the next load and the destructor
  bool cancel_load_ ABSL_GUARDED_BY(load_mutex_) = false;
  ModelStatus load_status_ ABSL_GUARDED_BY(load_mutex_);  // the load fields and counters
  Status last_load_ ABSL_GUARDED_BY(load_mutex_);
  CondVar load_done_;

  // One lock for all engines of the process: scoring and memory updates of two engines in one
  // test process computing at once gave logits off by ~1e-4 about once in 30 runs (OpenBLAS
  // issue #2126 describes BLAS calls that are not safe for concurrent callers).
  static Mutex model_mutex_;
  // When a Score call last started (steady clock, ns), and whether a loading model's memory
  // thread should yield the model lock to scoring now (MemoryPipelineOptions::busy).
  std::atomic<int64_t> last_score_{0};
  std::atomic<bool> load_yields_{false};
  Mutex ingest_mutex_ ABSL_ACQUIRED_BEFORE(model_mutex_);
};

}  // namespace tlp::server
