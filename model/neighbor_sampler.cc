#include "model/neighbor_sampler.h"

#include <algorithm>

namespace tlp::model {

void NeighborBlock::Reset(int64_t query_count, int64_t slot_count, uint32_t edge_feature_dim) {
  queries = query_count;
  slots = slot_count;
  feature_dim = edge_feature_dim;
  const size_t cells = static_cast<size_t>(query_count * slot_count);
  nodes.assign(cells, 0);
  ts.assign(cells, 0.0);
  valid.assign(cells, 0);
  features.assign(cells * edge_feature_dim, 0.0f);
}

void TemporalAdjacency::Add(int64_t src, int64_t dst, double ts, std::span<const float> features) {
  const int64_t needed = std::max(src, dst) + 1;
  if (static_cast<int64_t>(adjacency_.size()) < needed) adjacency_.resize(needed);
  int64_t feature_row = -1;
  if (feature_dim_ > 0) {
    feature_row = static_cast<int64_t>(features_.size() / feature_dim_);
    features_.insert(features_.end(), features.begin(), features.end());
  }
  adjacency_[src].push_back({ts, dst, feature_row});
  if (src != dst) adjacency_[dst].push_back({ts, src, feature_row});
}

void TemporalAdjacency::Sample(std::span<const int64_t> nodes, std::span<const double> times,
                               int64_t k, NeighborBlock* out) const {
  out->Reset(static_cast<int64_t>(nodes.size()), k, feature_dim_);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const size_t row = i * static_cast<size_t>(k);
    for (int64_t slot = 0; slot < k; ++slot) out->ts[row + slot] = times[i];
    const int64_t node = nodes[i];
    if (node < 0 || node >= static_cast<int64_t>(adjacency_.size())) continue;
    const std::vector<Entry>& entries = adjacency_[node];
    // First entry at or after the query time: everything before it is strictly earlier.
    const auto end = std::lower_bound(entries.begin(), entries.end(), times[i],
                                      [](const Entry& e, double t) { return e.ts < t; });
    int64_t slot = 0;
    for (auto it = end; it != entries.begin() && slot < k; ++slot) {
      --it;
      out->nodes[row + slot] = it->neighbor;
      out->ts[row + slot] = it->ts;
      out->valid[row + slot] = 1;
      if (feature_dim_ > 0) {
        std::copy_n(features_.begin() + it->feature_row * feature_dim_, feature_dim_,
                    out->features.begin() + (row + slot) * feature_dim_);
      }
    }
  }
}

int64_t TemporalAdjacency::DegreeBefore(int64_t node, double time) const {
  if (node < 0 || node >= static_cast<int64_t>(adjacency_.size())) return 0;
  const std::vector<Entry>& entries = adjacency_[node];
  return std::lower_bound(entries.begin(), entries.end(), time,
                          [](const Entry& e, double t) { return e.ts < t; }) -
         entries.begin();
}

void NeighborSampler::SamplePartners(std::span<const int64_t> nodes, std::span<const double> times,
                                     int64_t k, NeighborBlock* out,
                                     std::vector<int64_t>* keys) const {
  Sample(nodes, times, k, out);
  keys->assign(nodes.begin(), nodes.end());
}

void NeighborSampler::SamplePartnersByKey(std::span<const int64_t> keys,
                                          std::span<const double> times, int64_t k,
                                          NeighborBlock* out) const {
  Sample(keys, times, k, out);
}

}  // namespace tlp::model
