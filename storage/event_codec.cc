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
                 std::string_view event_id, std::string* out) {
  Put(src, out);
  Put(dst, out);
  Put(ts, out);
  Put(static_cast<uint32_t>(features.size()), out);
  out->append(reinterpret_cast<const char*>(features.data()), features.size_bytes());
  Put(static_cast<uint16_t>(event_id.size()), out);
  out->append(event_id);
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
  if (!Get(&value, &id_length) || value.size() != id_length) {
    return Status::Corruption("event record has a bad id length");
  }
  event->features = *feature_buffer;
  event->event_id = value;
  return Status::Ok();
}

}  // namespace tlp::storage
