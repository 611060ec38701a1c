#include "server/request_validation.h"

#include <cmath>
#include <string>

#include "storage/temporal_store.h"

namespace tlp::server {

Status AppendEdgeEvent(const tlp::v1::EdgeEvent& event, size_t index, EventBatch* batch) {
  const std::string where = "event " + std::to_string(index) + ": ";
  if (!std::isfinite(event.ts()) || event.ts() < 0) {
    return Status::InvalidArgument(where + "field 'ts' must be finite and >= 0");
  }
  if (static_cast<uint32_t>(event.features_size()) != batch->feature_dim) {
    return Status::InvalidArgument(
        where + "field 'features' has " + std::to_string(event.features_size()) +
        " values, the model takes " + std::to_string(batch->feature_dim));
  }
  for (float value : event.features()) {
    if (!std::isfinite(value)) {
      return Status::InvalidArgument(where + "field 'features' holds NaN or inf");
    }
  }
  if (event.event_id().size() > storage::kMaxEventIdBytes) {
    return Status::InvalidArgument(where + "field 'event_id' is longer than 128 bytes");
  }
  if (event.has_state_label() && event.state_label() > 1) {
    return Status::InvalidArgument(where + "field 'state_label' must be 0 or 1, got " +
                                   std::to_string(event.state_label()));
  }
  batch->Add(event.src(), event.dst(), event.ts(),
             std::span<const float>(event.features().data(), event.features_size()),
             event.event_id(),
             event.has_state_label() ? static_cast<int8_t>(event.state_label())
                                     : EventBatch::kNoStateLabel);
  return Status::Ok();
}

Status ToEventBatch(const tlp::v1::IngestBatchRequest& request, size_t max_events,
                    EventBatch* batch) {
  batch->Clear();
  if (request.events_size() == 0) return Status::InvalidArgument("field 'events' is empty");
  if (static_cast<size_t>(request.events_size()) > max_events) {
    return Status::InvalidArgument("field 'events' holds " + std::to_string(request.events_size()) +
                                   " events, at most " + std::to_string(max_events) + " per batch");
  }
  for (int i = 0; i < request.events_size(); ++i) {
    Status status = AppendEdgeEvent(request.events(i), static_cast<size_t>(i), batch);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

}  // namespace tlp::server
