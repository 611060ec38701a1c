// PartitionMerge: one deterministic order for the records of several Kafka partitions.
//
// Kafka orders records within a partition only; how a consumer's fetches interleave partitions
// depends on timing, so two replicas that applied records as they arrived would disagree. The
// merge makes the applied order a function of the log alone: the next record is always the
// head, over all partitions, with the smallest (ts, partition), watermarks after events of the
// same ts, and it is only decided once every partition has a head. A replica that restarts from the
// per-partition positions it stored continues the same order, because the order depends on nothing
// but those positions.
//
// Consequences, which README states for producers:
//   - an idle partition holds the others back; producers send it watermarks ({"watermark": ts},
//     source_record.h), which take part in the order like events and are then dropped;
//   - within a partition, offsets are never reordered (a late event stays where it was written).
// Rejected records (malformed) carry no time; at a head they are passed on at once, so a bad
// message never holds anything back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "server/source_record.h"

namespace tlp::server {

class PartitionMerge {
 public:
  explicit PartitionMerge(int partitions);

  // Adds the partition's next record (offsets must increase within a partition).
  void Push(int partition, SourceRecord record);
  // Moves the next record in merge order into *record, when it is decided; false otherwise.
  bool Pop(SourceRecord* record, int* partition);

  int partitions() const { return static_cast<int>(queues_.size()); }
  size_t held(int partition) const { return queues_[partition].size(); }
  size_t held() const { return held_; }
  // An empty partition that other partitions' records are waiting for, or -1.
  int WaitingFor() const;

 private:
  std::vector<std::deque<SourceRecord>> queues_;
  size_t held_ = 0;
};

}  // namespace tlp::server
