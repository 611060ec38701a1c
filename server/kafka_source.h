// KafkaSource: Kafka as tlpd's replicated event log. Every replica consumes every partition of
// one topic, merges them in a deterministic order (partition_merge.h) and applies the events
// through the engine's validated, durable path (the same as gRPC ingest), so all replicas of a
// topic hold the same store, the same node memory and give the same scores.
//
// Exactly once: the next offset of every partition is written as a store cursor in the same
// atomic RocksDB write as the events read up to it, so after a crash the replica resumes exactly
// where its stored events end (no loss, no double apply). Offsets are also committed to the
// consumer group after each durable append, for lag monitoring only; the store is the truth.
//
// Malformed or invalid records go to the dead-letter topic, with the reason in a header, and
// the stream goes on. They are produced and flushed before the append that moves the cursor
// past them, so none is lost; a crash in between sends one again (at least once).
//
// While a source runs, gRPC ingest is refused: a replica's state is a function of the topic.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/engine.h"

namespace tlp::server {

struct KafkaSourceOptions {
  std::string brokers;  // bootstrap.servers; empty = no Kafka source
  std::string topic;
  // Consumer group the applied offsets are committed to (monitoring only; each replica reads
  // all partitions itself, so replicas should use one group each).
  std::string group_id = "tlpd";
  std::string dead_letter_topic;  // empty = "<topic>.dead-letter"
  // Extra librdkafka settings, "key=value" (security.protocol, sasl.*, fetch tuning, ...).
  std::vector<std::string> properties;
  size_t max_batch_events = 10000;  // events per durable append
  // Records held for the merge per partition; beyond it that partition's fetching pauses.
  size_t max_held_records = 100000;
  std::chrono::milliseconds wait_for_topic{30000};  // at start, for the topic to exist
};

struct KafkaSourceStats {
  uint64_t events_applied = 0;  // stored by this source since start
  uint64_t duplicates = 0;      // events whose event_id was already stored
  uint64_t dead_letters = 0;
  uint64_t watermarks = 0;
  uint64_t held_records = 0;  // consumed, waiting in the merge
  int64_t lag_records = -1;   // high watermarks minus applied positions; -1 = not known yet
};

class KafkaSource {
 public:
  // Connects, checks the topic against what this store followed before (partition count),
  // assigns every partition at its stored position, and starts consuming.
  static Status Start(const KafkaSourceOptions& options, Engine& engine,
                      std::unique_ptr<KafkaSource>* source);
  ~KafkaSource();  // stops after the append in flight; nothing held is lost (it is re-read)

  KafkaSourceStats Stats() const;
  // Cursor names in the store: the partition count, and the next offset of partition p.
  static std::string PartitionsCursor(const std::string& topic);
  static std::string OffsetCursor(const std::string& topic, int partition);

 private:
  class Impl;
  explicit KafkaSource(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tlp::server
