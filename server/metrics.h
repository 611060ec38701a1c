// Prometheus metrics of the daemon, served by prometheus-cpp's Exposer on its own address.
#pragma once

#include <grpcpp/support/status_code_enum.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace tlp::server {

class Metrics {
 public:
  // Starts serving /metrics on `address` ("host:port"); throws when it cannot bind.
  explicit Metrics(const std::string& address);

  prometheus::Registry& registry() { return *registry_; }
  // Requires HTTP basic auth with one of these "user:password" pairs on /metrics.
  void RequireBasicAuth(std::vector<std::string> credentials);

 private:
  // Declared first: every family below is created in it.
  std::shared_ptr<prometheus::Registry> registry_;

 public:
  prometheus::Family<prometheus::Counter>& ingest_events;  // label result
  prometheus::Histogram& ingest_latency;
  prometheus::Histogram& ingest_batch_size;
  prometheus::Histogram& score_latency;
  prometheus::Histogram& score_batch_size;
  prometheus::Histogram& node_state_latency;      // ScoreNodeStates
  prometheus::Histogram& node_state_probability;  // of every node state scored
  // Label role: src, dst (links) or node (node states).
  prometheus::Family<prometheus::Histogram>& representation_norm;
  prometheus::Family<prometheus::Histogram>& effective_neighbors;
  prometheus::Family<prometheus::Histogram>& attention_mass;
  prometheus::Family<prometheus::Counter>& requests;  // labels method, code (gRPC status)
  prometheus::Histogram& ingest_group_size;           // submissions per durable append
  prometheus::Gauge& ingest_queue_events;
  prometheus::Gauge& score_queue_pairs;
  prometheus::Gauge& events_stored;
  prometheus::Gauge& events_applied;
  prometheus::Gauge& memory_lag_events;
  prometheus::Gauge& nodes_stored;
  prometheus::Gauge& live_sst_bytes;
  prometheus::Gauge& pending_compaction_bytes;
  prometheus::Gauge& memtable_bytes;
  prometheus::Gauge& block_cache_bytes;
  prometheus::Gauge& node_state_file_bytes;
  prometheus::Gauge& unsealed_adjacency_bytes;
  prometheus::Counter& adjacency_seal_failures;
  prometheus::Gauge& checkpoint_age;
  prometheus::Gauge& events_since_checkpoint;
  prometheus::Family<prometheus::Counter>& neighbor_lookups;     // label result (hit, miss)
  prometheus::Family<prometheus::Counter>& node_memory_lookups;  // label result (hit, miss)
  prometheus::Counter& node_memory_evictions;
  prometheus::Counter& node_memory_read_ahead;
  prometheus::Gauge& node_memory_resident;
  prometheus::Gauge& node_memory_dirty;
  prometheus::Family<prometheus::Counter>& memory_thread_seconds;  // label stage
  prometheus::Gauge& allocator_freed_bytes;  // freed memory held for reuse (freed_memory_bound.h)
  prometheus::Counter& allocator_returns;    // times it went over --retain-freed-mb
  // Kafka source only (series appear once it runs).
  prometheus::Family<prometheus::Counter>& kafka_records;  // label outcome
  prometheus::Family<prometheus::Gauge>& kafka_held_records;
  prometheus::Family<prometheus::Gauge>& kafka_lag_records;
  prometheus::Gauge& model_load_phase;  // ModelLoadPhase as a number
  prometheus::Gauge& model_load_replayed_events;
  prometheus::Gauge& model_load_target_events;
  prometheus::Counter& model_swaps;
  prometheus::Counter& model_rollbacks;
  prometheus::Family<prometheus::Counter>& model_refreshes;  // label outcome
  prometheus::Gauge& model_refresh_running;
  prometheus::Family<prometheus::Gauge>& model_refresh_mrr;  // label model (candidate, serving)
  prometheus::Family<prometheus::Gauge>& build_info;         // 1, labels describe the build

  // Sets the build_info series (version, model fingerprint, architecture, p, device), replacing
  // the previous one (the model may change while serving).
  void SetBuildInfo(const std::map<std::string, std::string>& labels);
  // Counts a finished call by method and gRPC status code (tlpd_requests_total).
  void CountRequest(const char* method, grpc::StatusCode code);

 private:
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::mutex build_info_mutex_;
  std::map<std::string, std::string> build_info_labels_;
  prometheus::Gauge* build_info_series_ = nullptr;
};

}  // namespace tlp::server
