// libFuzzer target: DecodeEvent on arbitrary bytes must either fail cleanly or decode an event
// that encodes back to the same bytes.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "storage/event_codec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<float> features;
  tlp::storage::DecodedEvent event;
  if (!tlp::storage::DecodeEvent(input, &features, &event).ok()) return 0;
  std::string encoded;
  tlp::storage::EncodeEvent(event.src, event.dst, event.ts, event.features, event.event_id,
                            event.state_label, &encoded);
  if (encoded.size() != input.size() || std::memcmp(encoded.data(), data, size) != 0) {
    __builtin_trap();  // decode accepted bytes that are not an encoding
  }
  return 0;
}
