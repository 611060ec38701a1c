// Packed form of one event in the `events` column family:
//   src u64 | dst u64 | ts f64 | feature count u32 | features f32[] | id length u16 | id bytes
//   [| state label u8]
// The state label (0 or 1, EventBatch::state_labels) is present only on labelled events, so
// records written before labels existed decode unchanged, as unlabelled.
// Fixed-width fields are stored in the machine's byte order (little-endian on every platform
// tlpd supports); the value is never compared, only decoded.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/event_batch.h"
#include "common/status.h"

namespace tlp::storage {

struct DecodedEvent {
  uint64_t src = 0;
  uint64_t dst = 0;
  double ts = 0;
  std::span<const float> features;  // points into a buffer of the caller's
  std::string_view event_id;
  int8_t state_label = EventBatch::kNoStateLabel;
};

// Appends the packed event to `out` (which is not cleared, so one buffer serves a batch).
// `state_label` is 0, 1 or EventBatch::kNoStateLabel.
void EncodeEvent(uint64_t src, uint64_t dst, double ts, std::span<const float> features,
                 std::string_view event_id, int8_t state_label, std::string* out);
// Decodes `value`; features are copied into `feature_buffer` (resized) so that unaligned input
// is safe. Returns CORRUPTION for truncated or inconsistent bytes, or a label other than 0, 1.
Status DecodeEvent(std::string_view value, std::vector<float>* feature_buffer, DecodedEvent* event);

}  // namespace tlp::storage
