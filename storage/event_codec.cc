#include "storage/event_codec.h"

#include <cstring>

namespace tlp::storage {
namespace {

template <typename T>
void Put(const T& value, std::string* out) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
bool Get(std::string_view* in, T* value) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(value, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

}  // namespace

void EncodeEvent(uint64_t src, uint64_t dst, double ts, std::span<const float> features,
                 std::string_view event_id, int8_t state_label, std::string* out) {
  Put(src, out);
  Put(dst, out);
  Put(ts, out);
  Put(static_cast<uint32_t>(features.size()), out);
  out->append(reinterpret_cast<const char*>(features.data()), features.size_bytes());
  Put(static_cast<uint16_t>(event_id.size()), out);
  out->append(event_id);
  if (state_label != EventBatch::kNoStateLabel) Put(static_cast<uint8_t>(state_label), out);
}

Status DecodeEvent(std::string_view value, std::vector<float>* feature_buffer,
                   DecodedEvent* event) {
  uint32_t feature_count = 0;
  uint16_t id_length = 0;
  if (!Get(&value, &event->src) || !Get(&value, &event->dst) || !Get(&value, &event->ts) ||
      !Get(&value, &feature_count) || value.size() < feature_count * sizeof(float)) {
    return Status::Corruption("truncated event record");
  }
  feature_buffer->resize(feature_count);
  // (memcpy from or to a null pointer is undefined even for 0 bytes; found by the fuzzer.)
  if (feature_count > 0) {
    std::memcpy(feature_buffer->data(), value.data(), feature_count * sizeof(float));
  }
  value.remove_prefix(feature_count * sizeof(float));
  // The id is all that is left, or all but the state label's byte.
  if (!Get(&value, &id_length) || (value.size() != id_length && value.size() != id_length + 1u)) {
    return Status::Corruption("event record has a bad id length");
  }
  event->state_label = EventBatch::kNoStateLabel;
  if (value.size() > id_length) {
    const auto label = static_cast<uint8_t>(value.back());
    if (label > 1) return Status::Corruption("event record has a bad state label");
    event->state_label = static_cast<int8_t>(label);
    value.remove_suffix(1);
  }
  event->features = *feature_buffer;
  event->event_id = value;
  return Status::Ok();
}

}  // namespace tlp::storage
