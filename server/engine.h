// Engine: the daemon's logic without the network. It owns the temporal store and the model,
// keeps node memory in step with the durable event log, and scores links. The gRPC layer
// (service.h) only translates protos to these calls, so everything here is testable directly.
//
// Determinism: memory is advanced in chunks aligned to store sequence numbers (events
// [k*memory_batch + 1, (k+1)*memory_batch]), during live ingest and during replay alike, so
// node memory after a restart equals memory from an uninterrupted run.
//
// Pipelining: Ingest returns once the events are durable; a memory thread applies them to the
// model behind it, so appends and model updates overlap on different cores (they took turns on
// one thread before: ingest ran at the sum of both costs, now at the larger). Reads stay
// consistent with what was acknowledged: Score, GetNode and AwaitMemory first wait until memory
// covers every complete chunk stored when they were called (read-your-writes). The memory queue
// is bounded, so a model slower than the store pushes back on ingest instead of lagging
// without limit.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/event_batch.h"
#include "common/status.h"
#include "server/destination_set.h"
#include "server/node_memory_cache.h"
#include "storage/temporal_store.h"

namespace tlp::server {

struct EngineOptions {
  std::string data_dir = "./tlpd-data";
  std::string checkpoint;  // model checkpoint file; required
  std::string device = "cpu";
  double lateness_seconds = 3600.0;
  bool sync_writes = true;
  bool allow_self_loops = false;
  int64_t memory_batch = 200;
  int torch_threads = 2;  // scoring's intra-op threads (process-wide in torch)
  // Intra-op threads of the memory thread's model updates. Its chunks are small (~400 rows): an
  // OpenMP team forked per op waits on workers that the ingest writer and RocksDB keep off the
  // cores, so one thread applies more events per second than two on a busy machine (30M
  // generated events, 10M nodes, 2 cores).
  int memory_threads = 1;
  // Node memory changed since the last checkpoint is written to the store (its node state file,
  // committed atomically with the watermark it covers) every this many applied events, when the
  // cache's evicted changed rows reach their bound, and on close; a restart replays only the log
  // after it. Incremental: a checkpoint costs what changed, not the number of nodes. 0 = only on
  // close and when the cache needs it. Each checkpoint rewrites every row changed since the last
  // one (~95k rows per 100k events at 10M nodes, ~415k per 1M): 1M events between them wrote
  // and compacted far less than 100k when node memory lived in RocksDB (30M generated events,
  // 10M nodes, 2 cores: 429 -> 371 s) for a crash replay of at most ~1M events (~10 s).
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

// Where the memory thread's time went since open, seconds: it is the ingest pipeline's slower
// stage at scale, so these say what a faster pipeline has to shrink. Time waiting for work is
// not counted.
struct MemoryThreadSeconds {
  double lookup = 0;    // node ids to cache rows, evictions chosen
  double page_in = 0;   // misses' memory read from the store into rows
  double page_out = 0;  // changed memory of evicted nodes copied aside
  double apply = 0;     // the model's memory update (messages, GRU)
  double snapshot = 0;  // checkpoint copies taken (the write runs on another thread)
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
  ~Engine();  // writes a final memory checkpoint

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
  // Stored events on their way to the memory thread. Their sequences are consecutive:
  // first_sequence, first_sequence + 1, ...
  struct MemoryWork {
    uint64_t first_sequence = 0;
    std::vector<uint64_t> src, dst;
    std::vector<double> ts;
    std::vector<float> features;
    size_t size() const { return src.size(); }
  };
  Engine() = default;
  Status CheckSelfLoop(const EventBatch& batch, size_t i) const;  // the self-loop policy
  // Hands batch events i with !skip[i] (an empty `skip` takes all), whose sequences follow
  // first_sequence, to the memory thread, and records new destinations.
  void QueueForMemory(const EventBatch& batch, uint64_t first_sequence,
                      std::span<const uint8_t> skip = {});
  void RunMemoryThread();
  // The memory thread's read-ahead of node memory misses (NodeMemoryCache::AddPrefetched): the
  // read in flight, and the last sequence of the queued work read ahead so far.
  struct ReadAhead {
    std::future<std::shared_ptr<const PrefetchedStates>> reading;
    uint64_t through = 0;
    std::vector<uint64_t> nodes;
  };
  // Hands the read in flight to the cache (waiting for it: it covers the work about to be
  // applied), then starts reading what queued work after it will miss, on another thread.
  void AdvanceReadAhead(ReadAhead* read_ahead);
  // Adds one work item to the open chunk, flushing at every chunk boundary (memory thread).
  void ApplyToMemory(const MemoryWork& work);
  void FlushChunk();
  void StopMemoryThread();
  struct MemorySnapshot;
  std::shared_ptr<const MemorySnapshot> TakeMemorySnapshot();  // copies, under the locks
  Status WriteMemorySnapshot(const MemorySnapshot& snapshot);  // no locks, any thread
  Status FinishBackgroundCheckpoint();  // waits for the one being written, if any
  // Which model and chunk size made the stored node memory ("<fingerprint>/<memory_batch>"):
  // memory from any other is not restored.
  std::string MemoryModelTag() const;
  // Restores the pending messages and destinations of the store's last memory checkpoint when
  // it was made by this model (else clears it); sets *watermark (0 = none).
  Status LoadMemoryCheckpoint(uint64_t* watermark);

  EngineOptions options_;
  std::unique_ptr<storage::TemporalStore> store_;
  std::shared_ptr<model::TemporalLinkModelImpl> model_;
  std::unique_ptr<StoreSampler> sampler_;
  std::string fingerprint_, device_name_;

  DestinationSet destinations_;
  std::atomic<bool> checkpoint_written_{true};  // the last checkpoint reached the store

  // Writer -> memory thread hand-over. Guarded by memory_queue_mutex_; memory_through_ is
  // also published here (memory_progress_) for AwaitMemory.
  mutable std::mutex memory_queue_mutex_;
  std::condition_variable memory_work_;      // queue not empty, or stopping
  std::condition_variable memory_room_;      // queue has room
  std::condition_variable memory_progress_;  // memory_through_ moved, or memory failed
  std::deque<MemoryWork> memory_queue_;
  std::vector<MemoryWork> spare_work_;  // recycled buffers: no allocation per batch when warm
  size_t queued_memory_events_ = 0;
  uint64_t published_through_ = 0;  // = memory_through_, readable under memory_queue_mutex_
  bool stopping_memory_ = false;
  Status memory_status_;  // first memory update failure
  std::thread memory_thread_;
  std::future<Status> background_checkpoint_;  // memory thread, then the destructor

  // The model and its row cache are not thread-safe: scoring and memory updates take this lock.
  // One lock for all engines of the process: the serial OpenBLAS that scripts/setup.sh pins is
  // not safe for concurrent callers either (two engines in one test process computing at once
  // gave logits off by ~1e-4 about once in 30 runs; OpenBLAS issue #2126 describes the same).
  static std::mutex model_mutex_;
  std::unique_ptr<NodeMemoryCache> cache_;
  std::mutex ingest_mutex_;
  // Events stored but not yet applied to memory (the open chunk; memory thread only).
  std::vector<uint64_t> chunk_src_, chunk_dst_;
  std::vector<int64_t> chunk_src_rows_, chunk_dst_rows_;
  std::vector<double> chunk_ts_;
  std::vector<float> chunk_features_;
  uint64_t events_applied_ = 0;
  uint64_t applied_through_ = 0;  // sequence of the last event in the open chunk
  uint64_t memory_through_ = 0;   // sequence of the last event in memory (model_mutex_)
  MemoryThreadSeconds memory_thread_seconds_;  // model_mutex_
  uint64_t checkpointed_at_events_ = 0;
  std::atomic<int64_t> checkpointed_at_ms_{0};  // steady clock
};

}  // namespace tlp::server
