#include "server/metrics.h"

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
      representation_norm(prometheus::BuildHistogram()
                              .Name("tlpd_representation_norm")
                              .Help("L2 norm of scored endpoint embeddings, by role (src, dst)")
                              .Register(*registry_)),
      effective_neighbors(prometheus::BuildHistogram()
                              .Name("tlpd_effective_neighbors")
                              .Help("Kish effective number of attended neighbours, by role")
                              .Register(*registry_)),
      attention_mass(prometheus::BuildHistogram()
                         .Name("tlpd_attention_mass")
                         .Help("sum w / (sum w^p)^(1/p) of scored endpoints, by role")
                         .Register(*registry_)),
      events_stored(Gauge(*registry_, "tlpd_events_stored", "Events in the store")),
      nodes_stored(Gauge(*registry_, "tlpd_nodes_stored", "Distinct nodes in the store")),
      live_sst_bytes(Gauge(*registry_, "tlpd_rocksdb_live_sst_bytes", "RocksDB live SST bytes")),
      pending_compaction_bytes(Gauge(*registry_, "tlpd_rocksdb_pending_compaction_bytes",
                                     "RocksDB estimated pending compaction bytes")) {
  exposer_ = std::make_unique<prometheus::Exposer>(address);
  exposer_->RegisterCollectable(registry_);
}

}  // namespace tlp::server
