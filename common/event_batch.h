// EventBatch: a column-oriented batch of timestamped edge events, the unit in which events move
// through tlpd (reader -> store -> model). Columns rather than a vector of structs so that a
// batch that is cleared and refilled reuses its buffers: no allocation per event on the hot path.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tlp {

struct EventBatch {
  std::vector<uint64_t> src;
  std::vector<uint64_t> dst;
  std::vector<double> ts;  // seconds
  // Edge features, row-major [size() x feature_dim]; empty when feature_dim == 0.
  uint32_t feature_dim = 0;
  std::vector<float> features;
  // Client idempotency keys, one per event ("" = none); either empty or size() long.
  std::vector<std::string> event_ids;

  size_t size() const { return src.size(); }
  bool empty() const { return src.empty(); }

  // Keeps the capacity of every column.
  void Clear() {
    src.clear();
    dst.clear();
    ts.clear();
    features.clear();
    event_ids.clear();
  }

  // Appends one event. `event_features` must hold feature_dim values; `event_id` may be empty.
  void Add(uint64_t event_src, uint64_t event_dst, double event_ts,
           std::span<const float> event_features = {}, std::string_view event_id = {}) {
    // Event ids are tracked from the first non-empty one on; earlier events get "".
    if (!event_ids.empty() || !event_id.empty()) {
      event_ids.resize(src.size());
      event_ids.emplace_back(event_id);
    }
    src.push_back(event_src);
    dst.push_back(event_dst);
    ts.push_back(event_ts);
    features.insert(features.end(), event_features.begin(), event_features.end());
  }

  std::span<const float> FeaturesOf(size_t i) const {
    if (feature_dim == 0) return {};
    return {features.data() + i * feature_dim, feature_dim};
  }
  std::string_view EventIdOf(size_t i) const {
    return event_ids.empty() ? std::string_view() : std::string_view(event_ids[i]);
  }
};

}  // namespace tlp
