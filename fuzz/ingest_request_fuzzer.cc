// libFuzzer target: an IngestBatchRequest from arbitrary bytes through the request validator.
// Whatever it accepts must be storable: finite non-negative ts, finite features of the right
// width, event ids that fit the codec (checked by encoding and decoding each event).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "server/request_validation.h"
#include "storage/event_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  tlp::v1::IngestBatchRequest request;
  if (!request.ParseFromArray(data + 1, static_cast<int>(size - 1))) return 0;
  tlp::EventBatch batch;
  batch.feature_dim = data[0] % 4;  // the store's width, chosen by the first byte
  if (!tlp::server::ToEventBatch(request, 1000, &batch).ok()) return 0;
  std::string encoded;
  std::vector<float> features;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!std::isfinite(batch.ts[i]) || batch.ts[i] < 0) __builtin_trap();
    encoded.clear();
    tlp::storage::EncodeEvent(batch.src[i], batch.dst[i], batch.ts[i], batch.FeaturesOf(i),
                              batch.EventIdOf(i), batch.StateLabelOf(i), &encoded);
    tlp::storage::DecodedEvent event;
    if (!tlp::storage::DecodeEvent(encoded, &features, &event).ok()) __builtin_trap();
    if (event.src != batch.src[i] || event.event_id != batch.EventIdOf(i) ||
        event.state_label != batch.StateLabelOf(i)) {
      __builtin_trap();
    }
  }
  return 0;
}
