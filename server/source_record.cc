#include "server/source_record.h"

#include <google/protobuf/util/json_util.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "server/request_validation.h"
#include "tlp/v1/tlp.pb.h"

namespace tlp::server {
namespace {

SourceRecord Rejected(int64_t offset, std::string reason) {
  SourceRecord record;
  record.kind = SourceRecord::Kind::kRejected;
  record.offset = offset;
  record.reason = std::move(reason);
  return record;
}

// {"watermark": ts} when `value` is exactly that; false for anything else (an event, or junk
// that the EdgeEvent parser then names).
bool ParseWatermark(std::string_view value, double* ts, std::string* error) {
  const nlohmann::json json = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("watermark")) return false;
  if (json.size() != 1 || !json["watermark"].is_number()) {
    *error = "a watermark record is {\"watermark\": <ts>} with a number and no other field";
    return true;
  }
  *ts = json["watermark"].get<double>();
  if (!std::isfinite(*ts) || *ts < 0) *error = "field 'watermark' must be finite and >= 0";
  return true;
}

}  // namespace

std::string WithoutEventIndex(std::string_view reason) {
  const size_t colon = reason.find(": ");
  if (reason.starts_with("event ") && colon != std::string_view::npos) {
    reason.remove_prefix(colon + 2);
  }
  return std::string(reason);
}

SourceRecord DecodeSourceRecord(std::string_view value, int64_t offset, uint32_t feature_dim) {
  if (value.empty()) return Rejected(offset, "empty message value (expected an EdgeEvent)");
  tlp::v1::EdgeEvent event;
  if (value.front() == '{') {
    double watermark = 0;
    std::string error;
    if (ParseWatermark(value, &watermark, &error)) {
      if (!error.empty()) return Rejected(offset, error);
      SourceRecord record;
      record.kind = SourceRecord::Kind::kWatermark;
      record.offset = offset;
      record.ts = watermark;
      return record;
    }
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;  // a misspelt field is an error, not a silent zero
    const auto status = google::protobuf::util::JsonStringToMessage(
        google::protobuf::StringPiece(value.data(), value.size()), &event, options);
    if (!status.ok()) {
      return Rejected(offset, "not a JSON EdgeEvent: " + status.message().as_string());
    }
  } else if (!event.ParseFromArray(value.data(), static_cast<int>(value.size()))) {
    return Rejected(offset, "not a serialized tlp.v1.EdgeEvent (protobuf parse failed)");
  }
  EventBatch one;
  one.feature_dim = feature_dim;
  if (Status status = AppendEdgeEvent(event, 0, &one); !status.ok()) {
    return Rejected(offset, WithoutEventIndex(status.message()));
  }
  SourceRecord record;
  record.kind = SourceRecord::Kind::kEvent;
  record.offset = offset;
  record.ts = event.ts();
  record.src = event.src();
  record.dst = event.dst();
  record.features.assign(event.features().begin(), event.features().end());
  record.event_id = event.event_id();
  record.state_label = one.StateLabelOf(0);
  return record;
}

}  // namespace tlp::server
