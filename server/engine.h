// Engine: the daemon's logic without the network. It owns the temporal store and the model,
// keeps node memory in step with the durable event log, and scores links. The gRPC layer
// (service.h) only translates protos to these calls, so everything here is testable directly.
//
// Determinism: memory is advanced in chunks aligned to store sequence numbers (events
// [k*memory_batch + 1, (k+1)*memory_batch]), during live ingest and during replay alike, so
// node memory after a restart equals memory from an uninterrupted run.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/event_batch.h"
#include "common/status.h"
#include "storage/temporal_store.h"

namespace tlp::model {
class TemporalLinkModelImpl;
}

namespace tlp::server {

struct EngineOptions {
  std::string data_dir = "./tlpd-data";
  std::string checkpoint;  // model checkpoint file; required
  std::string device = "cpu";
  double lateness_seconds = 3600.0;
  bool sync_writes = true;
  bool allow_self_loops = false;
  int64_t memory_batch = 200;
  int torch_threads = 2;
  // Node memory is snapshotted to <data_dir>/memory.ckpt every this many applied events and on
  // close; a restart loads it and replays only the log after it. 0 = only on close.
  uint64_t checkpoint_every_events = 100000;
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

class Engine {
 public:
  // Opens the store, loads the model, replays the log into node memory.
  static Status Open(const EngineOptions& options, std::unique_ptr<Engine>* engine);
  ~Engine();  // writes a final memory checkpoint

  // Snapshots node memory and the id table with the watermark they cover (atomic rename).
  Status SaveMemoryCheckpoint();

  // Validates (including the self-loop policy), appends durably, advances memory.
  Status Ingest(const EventBatch& batch, storage::AppendResult* result);
  Status Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores);
  // Every node ever seen as a destination (TopK over "all").
  std::vector<uint64_t> KnownDestinations() const;
  Status GetNode(uint64_t node, size_t recent, NodeInfo* info);
  ModelInfo Info() const;
  // Seconds since node memory was last snapshotted (or since open, when never), and the events
  // applied since: a restart replays those.
  double SecondsSinceCheckpoint() const;
  uint64_t EventsSinceCheckpoint() const;
  const storage::TemporalStore& store() const { return *store_; }

 private:
  class StoreSampler;
  Engine() = default;
  int64_t DenseIndex(uint64_t node);       // creates; writer only
  int64_t FindDense(uint64_t node) const;  // 0 = unknown
  // Grows model state to every index assigned so far; call with model_mutex_ held.
  void CoverAssignedNodes();
  // Queues batch event i (store sequence sequences[i]) for memory unless skip[i] is set; an
  // empty `skip` queues all.
  void ApplyToMemory(const EventBatch& batch, std::span<const uint64_t> sequences,
                     std::span<const uint8_t> skip = {});
  void FlushChunk();
  // Loads memory.ckpt when it matches this model and store; sets *watermark (0 = none).
  Status LoadMemoryCheckpoint(uint64_t* watermark);
  std::string MemoryCheckpointPath() const;

  EngineOptions options_;
  std::unique_ptr<storage::TemporalStore> store_;
  std::shared_ptr<model::TemporalLinkModelImpl> model_;
  std::unique_ptr<StoreSampler> sampler_;
  std::string fingerprint_, device_name_;

  // Client id <-> dense model index; index 0 is reserved for "never seen".
  mutable std::shared_mutex ids_mutex_;
  std::unordered_map<uint64_t, int64_t> dense_of_;
  std::vector<uint64_t> id_of_;
  std::vector<uint8_t> is_destination_;

  // The model is not thread-safe: scoring and memory updates take this lock.
  mutable std::mutex model_mutex_;
  // Dense indices below this have model state (guarded by model_mutex_). Ingest assigns
  // indices before their chunk reaches the model; the sampler maps newer ones to index 0, whose
  // memory is zero, which is exactly the memory of a node no applied event has touched.
  int64_t model_nodes_ = 1;
  std::mutex ingest_mutex_;
  // Events stored but not yet applied to memory (the open chunk).
  std::vector<int64_t> chunk_src_, chunk_dst_;
  std::vector<double> chunk_ts_;
  std::vector<float> chunk_features_;
  uint64_t events_applied_ = 0;
  uint64_t applied_through_ = 0;  // sequence of the last event queued for memory (writer only)
  uint64_t memory_through_ = 0;   // sequence of the last event in memory (model_mutex_)
  uint64_t checkpointed_at_events_ = 0;
  std::atomic<int64_t> checkpointed_at_ms_{0};  // steady clock
};

}  // namespace tlp::server
