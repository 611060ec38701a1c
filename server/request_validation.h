// Validation of tlp.v1 requests into domain types: the first line of defence against bad input,
// kept apart from the service (and from LibTorch) so that it can be fuzzed on its own.
#pragma once

#include <cstddef>

#include "common/event_batch.h"
#include "common/status.h"
#include "tlp/v1/tlp.pb.h"

namespace tlp::server {

// Checks one event (ts finite and >= 0, `batch->feature_dim` finite features, event_id at most
// 128 bytes) and appends it to `batch`; INVALID_ARGUMENT naming `index` and the field.
Status AppendEdgeEvent(const tlp::v1::EdgeEvent& event, size_t index, EventBatch* batch);

// A whole IngestBatch request: non-empty, at most `max_events`, every event valid. `batch`
// keeps its feature_dim and is cleared first.
Status ToEventBatch(const tlp::v1::IngestBatchRequest& request, size_t max_events,
                    EventBatch* batch);

}  // namespace tlp::server
