// Neighbor: one temporal neighbour of a node, as lookups return it and epochs hold it.
#pragma once

#include <cstdint>

namespace tlp::storage {

struct Neighbor {
  uint64_t node = 0;
  double ts = 0;
  uint64_t sequence = 0;  // store sequence of the event behind this adjacency
  // Event order: by ts, then by sequence (the order in which equal ts were stored).
  bool Before(const Neighbor& other) const {
    return ts < other.ts || (ts == other.ts && sequence < other.sequence);
  }
};

}  // namespace tlp::storage
