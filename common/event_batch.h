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
  // State labels of the events' sources after the event (a second outcome beside the link, e.g.
  // Wikipedia's "banned after this edit"): 0, 1 or kNoStateLabel; either empty or size() long.
  std::vector<int8_t> state_labels;
  static constexpr int8_t kNoStateLabel = -1;

  size_t size() const { return src.size(); }
  bool empty() const { return src.empty(); }

  // Keeps the capacity of every column.
  void Clear() {
    src.clear();
    dst.clear();
    ts.clear();
    features.clear();
    event_ids.clear();
    state_labels.clear();
  }

  // Appends one event. `event_features` must hold feature_dim values; `event_id` may be empty.
  void Add(uint64_t event_src, uint64_t event_dst, double event_ts,
           std::span<const float> event_features = {}, std::string_view event_id = {},
           int8_t state_label = kNoStateLabel) {
    // Event ids and labels are tracked from the first one on; earlier events get none.
    if (!event_ids.empty() || !event_id.empty()) {
      event_ids.resize(src.size());
      event_ids.emplace_back(event_id);
    }
    if (!state_labels.empty() || state_label != kNoStateLabel) {
      state_labels.resize(src.size(), kNoStateLabel);
      state_labels.push_back(state_label);
    }
    src.push_back(event_src);
    dst.push_back(event_dst);
    ts.push_back(event_ts);
    features.insert(features.end(), event_features.begin(), event_features.end());
  }

  // Appends every event of `other` (the same feature_dim); optional columns stay aligned.
  void Append(const EventBatch& other) {
    if (!other.event_ids.empty() || !event_ids.empty()) {
      event_ids.resize(size());
      if (other.event_ids.empty()) {
        event_ids.resize(size() + other.size());
      } else {
        event_ids.insert(event_ids.end(), other.event_ids.begin(), other.event_ids.end());
      }
    }
    if (!other.state_labels.empty() || !state_labels.empty()) {
      state_labels.resize(size(), kNoStateLabel);
      if (other.state_labels.empty()) {
        state_labels.resize(size() + other.size(), kNoStateLabel);
      } else {
        state_labels.insert(state_labels.end(), other.state_labels.begin(),
                            other.state_labels.end());
      }
    }
    src.insert(src.end(), other.src.begin(), other.src.end());
    dst.insert(dst.end(), other.dst.begin(), other.dst.end());
    ts.insert(ts.end(), other.ts.begin(), other.ts.end());
    features.insert(features.end(), other.features.begin(), other.features.end());
  }

  std::span<const float> FeaturesOf(size_t i) const {
    if (feature_dim == 0) return {};
    return {features.data() + i * feature_dim, feature_dim};
  }
  std::string_view EventIdOf(size_t i) const {
    return event_ids.empty() ? std::string_view() : std::string_view(event_ids[i]);
  }
  int8_t StateLabelOf(size_t i) const {
    return state_labels.empty() ? kNoStateLabel : state_labels[i];
  }
};

}  // namespace tlp
