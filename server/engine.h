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
// Locks: one process-wide model mutex guards the model and its row cache, shared by scoring
// and the memory thread (torch modules and the row cache are not thread-safe); ingest_mutex_
// serialises writers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/event_batch.h"
#include "common/mutex.h"
#include "common/status.h"
#include "server/destination_set.h"
#include "server/memory_pipeline.h"
#include "server/node_memory_cache.h"
#include "storage/temporal_store.h"

namespace tlp::server {

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
};

struct ModelInfo {
  std::string architecture, fingerprint, device;
  double attention_p = 1;
  uint32_t embedding_dim = 0, memory_dim = 0, edge_feature_dim = 0, neighbors = 0;
  uint64_t events_applied = 0, watermark = 0;
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

 private:
  Engine() = default;
  Status CheckSelfLoop(const EventBatch& batch, size_t i) const;  // the self-loop policy

  EngineOptions options_;
  std::string fingerprint_, device_name_;
  // Declared before the pipeline, which borrows them: destroyed after it.
  std::unique_ptr<storage::TemporalStore> store_;
  // Guarded by model_mutex_ (what they point to; not annotated: the analysis takes raw
  // pointers only).
  std::shared_ptr<model::TemporalLinkModelImpl> model_;
  std::unique_ptr<NodeMemoryCache> cache_;
  std::unique_ptr<StoreSampler> sampler_;
  DestinationSet destinations_;
  std::unique_ptr<MemoryPipeline> pipeline_;
  bool opened_ = false;  // Open completed: the destructor writes a final checkpoint

  // One lock for all engines of the process: scoring and memory updates of two engines in one
  // test process computing at once gave logits off by ~1e-4 about once in 30 runs (OpenBLAS
  // issue #2126 describes BLAS calls that are not safe for concurrent callers).
  static Mutex model_mutex_;
  Mutex ingest_mutex_;
};

}  // namespace tlp::server
