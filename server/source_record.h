// SourceRecord: one message of the Kafka event topic, decoded. The wire format (README, "Kafka
// source") is one record per message value:
//   - a serialized tlp.v1.EdgeEvent (binary protobuf), or
//   - the same EdgeEvent in protobuf's JSON mapping:
//       {"src": 1, "dst": 2, "ts": 3.5, "features": [0.1, ...], "event_id": "a-1",
//        "state_label": 1}   (state_label optional: the source's state after the event)
//   - a watermark, JSON only: {"watermark": 1234.5}. It promises that the partition it is in
//     carries no event older than that ts from here on, so the merge of partitions need not wait
//     for an idle partition's next event (see partition_merge.h).
// JSON and binary are told apart by the first byte: '{' (0x7B) would be field 15 with the
// group wire type in protobuf, which EdgeEvent never uses.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/event_batch.h"

namespace tlp::server {

struct SourceRecord {
  enum class Kind { kEvent, kWatermark, kRejected };
  Kind kind = Kind::kRejected;
  int64_t offset = 0;  // in its partition
  double ts = 0;       // event time, or the watermark
  uint64_t src = 0, dst = 0;
  std::vector<float> features;
  std::string event_id;
  int8_t state_label = EventBatch::kNoStateLabel;
  std::string reason;   // kRejected: why, naming the field
  std::string payload;  // kRejected: the message value as received (for the dead-letter topic)
};

// Decodes `value` into a record at `offset`. Malformed values, and events that break a rule
// needing no store state (ts finite and >= 0, `feature_dim` finite features, event_id at most
// 128 bytes, state_label 0 or 1), come back as kRejected with the reason; nothing throws.
SourceRecord DecodeSourceRecord(std::string_view value, int64_t offset, uint32_t feature_dim);

// `reason` without a leading "event N: ": validation messages name an event's index in the batch
// being checked, which means nothing to whoever produced the record.
std::string WithoutEventIndex(std::string_view reason);

}  // namespace tlp::server
