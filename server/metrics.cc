#include "server/metrics.h"

#include "server/security.h"

namespace tlp::server {
namespace {

prometheus::Histogram::BucketBoundaries ExponentialBuckets(double start, double factor, int count) {
  prometheus::Histogram::BucketBoundaries bounds;
  for (double value = start; count-- > 0; value *= factor) bounds.push_back(value);
  return bounds;
}

prometheus::Histogram& Histogram(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help,
                                 const prometheus::Histogram::BucketBoundaries& bounds) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, bounds);
}

prometheus::Gauge& Gauge(prometheus::Registry& registry, const std::string& name,
                         const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

}  // namespace

Metrics::Metrics(const std::string& address)
    : registry_(std::make_shared<prometheus::Registry>()),
      ingest_events(prometheus::BuildCounter()
                        .Name("tlpd_ingest_events_total")
                        .Help("Events received, by result (accepted, duplicate, rejected)")
                        .Register(*registry_)),
      ingest_latency(Histogram(*registry_, "tlpd_ingest_latency_seconds",
                               "Time to make one ingest batch durable",
                               ExponentialBuckets(1e-4, 2, 16))),
      ingest_batch_size(Histogram(*registry_, "tlpd_ingest_batch_events", "Events per ingest batch",
                                  ExponentialBuckets(1, 4, 10))),
      score_latency(Histogram(*registry_, "tlpd_score_latency_seconds", "Time to score one request",
                              ExponentialBuckets(1e-4, 2, 16))),
      score_batch_size(Histogram(*registry_, "tlpd_score_batch_pairs", "Pairs per scoring pass",
                                 ExponentialBuckets(1, 4, 10))),
      node_state_latency(Histogram(*registry_, "tlpd_node_state_latency_seconds",
                                   "Time to score one ScoreNodeStates request",
                                   ExponentialBuckets(1e-4, 2, 16))),
      node_state_probability(Histogram(*registry_, "tlpd_node_state_probability",
                                       "P(state label = 1) of scored node states",
                                       {0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99})),
      representation_norm(prometheus::BuildHistogram()
                              .Name("tlpd_representation_norm")
                              .Help("L2 norm of scored representations, by role (src, dst, node)")
                              .Register(*registry_)),
      effective_neighbors(prometheus::BuildHistogram()
                              .Name("tlpd_effective_neighbors")
                              .Help("Kish effective number of attended neighbours, by role")
                              .Register(*registry_)),
      attention_mass(prometheus::BuildHistogram()
                         .Name("tlpd_attention_mass")
                         .Help("sum w / (sum w^p)^(1/p) of scored endpoints, by role")
                         .Register(*registry_)),
      requests(prometheus::BuildCounter()
                   .Name("tlpd_grpc_requests_total")
                   .Help("tlp.v1 calls answered, by method and gRPC status code")
                   .Register(*registry_)),
      ingest_group_size(Histogram(*registry_, "tlpd_ingest_group_submissions",
                                  "Ingest submissions grouped into one durable append",
                                  ExponentialBuckets(1, 2, 8))),
      ingest_queue_events(
          Gauge(*registry_, "tlpd_ingest_queue_events", "Events waiting for the ingest writer")),
      score_queue_pairs(
          Gauge(*registry_, "tlpd_score_queue_pairs", "Pairs waiting for a scoring pass")),
      events_stored(Gauge(*registry_, "tlpd_events_stored", "Events in the store")),
      events_applied(Gauge(*registry_, "tlpd_events_applied", "Events applied to node memory")),
      memory_lag_events(Gauge(*registry_, "tlpd_memory_lag_events",
                              "Durable events not yet applied to node memory")),
      nodes_stored(Gauge(*registry_, "tlpd_nodes_stored", "Distinct nodes in the store")),
      live_sst_bytes(Gauge(*registry_, "tlpd_rocksdb_live_sst_bytes", "RocksDB live SST bytes")),
      pending_compaction_bytes(Gauge(*registry_, "tlpd_rocksdb_pending_compaction_bytes",
                                     "RocksDB estimated pending compaction bytes")),
      memtable_bytes(
          Gauge(*registry_, "tlpd_rocksdb_memtable_bytes", "RocksDB bytes in all memtables")),
      block_cache_bytes(Gauge(*registry_, "tlpd_rocksdb_block_cache_bytes",
                              "RocksDB block cache in use (--block-cache-mb bounds it)")),
      node_state_file_bytes(Gauge(*registry_, "tlpd_node_state_file_bytes",
                                  "Node memory on disk, beside RocksDB (slots, index, journals)")),
      unsealed_adjacency_bytes(
          Gauge(*registry_, "tlpd_adjacency_unsealed_bytes",
                "Memory of the newest adjacency epochs, not yet sealed into RocksDB")),
      adjacency_seal_failures(prometheus::BuildCounter()
                                  .Name("tlpd_adjacency_seal_failures_total")
                                  .Help("Adjacency epochs that failed to seal (each is retried; "
                                        "the log says why)")
                                  .Register(*registry_)
                                  .Add({})),
      checkpoint_age(Gauge(*registry_, "tlpd_checkpoint_age_seconds",
                           "Seconds since node memory was last checkpointed")),
      events_since_checkpoint(
          Gauge(*registry_, "tlpd_events_since_checkpoint",
                "Events applied since the last checkpoint (replayed on restart)")),
      neighbor_lookups(prometheus::BuildCounter()
                           .Name("tlpd_neighbor_lookups_total")
                           .Help("Neighbour list lookups, by result: hit (in-memory cache) or "
                                 "miss (read from RocksDB)")
                           .Register(*registry_)),
      node_memory_lookups(prometheus::BuildCounter()
                              .Name("tlpd_node_memory_lookups_total")
                              .Help("Node memory row lookups, by result: hit (resident) or miss "
                                    "(paged in from RocksDB)")
                              .Register(*registry_)),
      node_memory_evictions(prometheus::BuildCounter()
                                .Name("tlpd_node_memory_evictions_total")
                                .Help("Node memory rows evicted from the cache")
                                .Register(*registry_)
                                .Add({})),
      node_memory_read_ahead(prometheus::BuildCounter()
                                 .Name("tlpd_node_memory_read_ahead_total")
                                 .Help("Node memory misses served by a read made ahead of them, "
                                       "off the memory thread")
                                 .Register(*registry_)
                                 .Add({})),
      node_memory_resident(Gauge(*registry_, "tlpd_node_memory_resident_nodes",
                                 "Nodes whose memory is resident in the cache")),
      node_memory_dirty(Gauge(*registry_, "tlpd_node_memory_dirty_nodes",
                              "Nodes whose memory changed since the last checkpoint")),
      memory_thread_seconds(prometheus::BuildCounter()
                                .Name("tlpd_memory_thread_seconds_total")
                                .Help("Busy time of the thread that applies events to node "
                                      "memory, by stage: lookup, page_in, page_out, apply, "
                                      "snapshot")
                                .Register(*registry_)),
      allocator_freed_bytes(Gauge(*registry_, "tlpd_allocator_freed_bytes",
                                  "Memory freed by tlpd that the allocator keeps for reuse "
                                  "instead of returning it to the kernel")),
      allocator_returns(prometheus::BuildCounter()
                            .Name("tlpd_allocator_returns_total")
                            .Help("Times the freed memory held went over --retain-freed-mb and "
                                  "was returned to the kernel")
                            .Register(*registry_)
                            .Add({})),
      kafka_records(prometheus::BuildCounter()
                        .Name("tlpd_kafka_records_total")
                        .Help("Kafka source records by outcome: applied, duplicate, "
                              "dead_letter, watermark")
                        .Register(*registry_)),
      kafka_held_records(prometheus::BuildGauge()
                             .Name("tlpd_kafka_held_records")
                             .Help("Kafka records consumed and waiting in the partition merge")
                             .Register(*registry_)),
      kafka_lag_records(prometheus::BuildGauge()
                            .Name("tlpd_kafka_lag_records")
                            .Help("Kafka records in the topic not yet durable in this replica")
                            .Register(*registry_)),
      model_load_phase(prometheus::BuildGauge()
                           .Name("tlpd_model_load_phase")
                           .Help("Model load (tlpctl model load): 0 idle, 1 replaying the log "
                                 "into the loaded model's memory, 2 committed, 3 swapped")
                           .Register(*registry_)
                           .Add({})),
      model_load_replayed_events(prometheus::BuildGauge()
                                     .Name("tlpd_model_load_replayed_events")
                                     .Help("Events of the log queued for the loading model")
                                     .Register(*registry_)
                                     .Add({})),
      model_load_target_events(prometheus::BuildGauge()
                                   .Name("tlpd_model_load_target_events")
                                   .Help("Events in the log when the loading model last looked")
                                   .Register(*registry_)
                                   .Add({})),
      model_swaps(prometheus::BuildCounter()
                      .Name("tlpd_model_swaps_total")
                      .Help("Loaded models swapped in (tlpctl model load)")
                      .Register(*registry_)
                      .Add({})),
      model_rollbacks(prometheus::BuildCounter()
                          .Name("tlpd_model_rollbacks_total")
                          .Help("Previous models swapped back in (tlpctl model rollback)")
                          .Register(*registry_)
                          .Add({})),
      model_refreshes(prometheus::BuildCounter()
                          .Name("tlpd_model_refreshes_total")
                          .Help("Finished model refreshes by outcome (promoted, kept, failed)")
                          .Register(*registry_)),
      model_refresh_running(prometheus::BuildGauge()
                                .Name("tlpd_model_refresh_running")
                                .Help("1 while a model refresh trains and compares")
                                .Register(*registry_)
                                .Add({})),
      model_refresh_mrr(prometheus::BuildGauge()
                            .Name("tlpd_model_refresh_mrr")
                            .Help("One-vs-all MRR on the last refresh's held-back events, of the "
                                  "new (candidate) and the serving model")
                            .Register(*registry_)),
      build_info(prometheus::BuildGauge()
                     .Name("tlpd_build_info")
                     .Help("Always 1; the labels describe the running build and model")
                     .Register(*registry_)) {
  exposer_ = std::make_unique<prometheus::Exposer>(address);
  exposer_->RegisterCollectable(registry_);
}

void Metrics::RequireBasicAuth(std::vector<std::string> credentials) {
  exposer_->RegisterAuth(
      [credentials = std::move(credentials)](const std::string& user, const std::string& password) {
        bool accepted = false;
        for (const std::string& pair : credentials)
          accepted |= ConstantTimeEquals(user + ":" + password, pair);
        return accepted;
      },
      "tlpd");
}

void Metrics::SetBuildInfo(const std::map<std::string, std::string>& labels) {
  std::lock_guard lock(build_info_mutex_);
  if (build_info_labels_ == labels) return;
  if (build_info_series_ != nullptr) build_info.Remove(build_info_series_);  // a swapped model
  build_info_series_ = &build_info.Add(labels);
  build_info_series_->Set(1);
  build_info_labels_ = labels;
}

void Metrics::CountRequest(const char* method, grpc::StatusCode code) {
  static constexpr const char* kCodeNames[] = {"OK",
                                               "CANCELLED",
                                               "UNKNOWN",
                                               "INVALID_ARGUMENT",
                                               "DEADLINE_EXCEEDED",
                                               "NOT_FOUND",
                                               "ALREADY_EXISTS",
                                               "PERMISSION_DENIED",
                                               "RESOURCE_EXHAUSTED",
                                               "FAILED_PRECONDITION",
                                               "ABORTED",
                                               "OUT_OF_RANGE",
                                               "UNIMPLEMENTED",
                                               "INTERNAL",
                                               "UNAVAILABLE",
                                               "DATA_LOSS",
                                               "UNAUTHENTICATED"};
  const auto index = static_cast<size_t>(code);
  requests.Add({{"method", method}, {"code", index < 17 ? kCodeNames[index] : "UNKNOWN"}})
      .Increment();
}

}  // namespace tlp::server
