#include "common/graph_generator.h"

#include <algorithm>
#include <cmath>

namespace tlp {

GraphGenerator::GraphGenerator(const GraphGeneratorOptions& options)
    : options_(options),
      random_(options.seed),
      bipartite_(options.destinations > 0),
      ts_(options.start_ts) {
  options_.nodes = std::max<uint64_t>(options_.nodes, 2);
  options_.memory = std::max<uint64_t>(options_.memory, 1);
  sources_.count = options_.nodes;
  if (bipartite_) {
    destinations_.first = options_.nodes + 1;
    destinations_.count = options_.destinations;
  }
}

double GraphGenerator::Uniform() { return static_cast<double>(random_() >> 11) * 0x1.0p-53; }

uint64_t GraphGenerator::Draw(Side& side) {
  const double choice = Uniform();
  if (side.used < 2 || (side.used < side.count && choice < options_.new_node_share)) {
    return side.first + side.used++;
  }
  if (side.recent.empty() || choice < options_.new_node_share + options_.uniform_share) {
    return side.first + static_cast<uint64_t>(Uniform() * static_cast<double>(side.used));
  }
  return side.recent[static_cast<size_t>(Uniform() * static_cast<double>(side.recent.size()))];
}

void GraphGenerator::Remember(Side& side, uint64_t node) {
  if (side.recent.size() < options_.memory) {
    side.recent.push_back(node);
  } else {
    side.recent[side.next_slot] = node;
    side.next_slot = (side.next_slot + 1) % side.recent.size();
  }
}

void GraphGenerator::Next(size_t max_events, EventBatch* batch) {
  batch->Clear();
  // Lomax (Pareto II) gaps lambda * (U^(-1/a) - 1) have mean lambda / (a - 1).
  constexpr double kTail = 1.5;
  const double lambda = (kTail - 1) / options_.events_per_second;
  Side& destination_side = bipartite_ ? destinations_ : sources_;
  while (batch->size() < max_events && generated_ < options_.events) {
    const uint64_t src = Draw(sources_);
    uint64_t dst = Draw(destination_side);
    for (int retry = 0; dst == src && retry < 8; ++retry) dst = Draw(destination_side);
    if (dst == src) dst = src == sources_.first ? src + 1 : sources_.first;
    Remember(sources_, src);
    Remember(destination_side, dst);
    ts_ += lambda * (std::pow(1.0 - Uniform(), -1.0 / kTail) - 1.0);
    batch->Add(src, dst, ts_);
    ++generated_;
  }
}

}  // namespace tlp
