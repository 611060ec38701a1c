// PairEvidence: what the two endpoints' recent interactions say about one link, as features for
// the link predictor. Node memory and attention embed each endpoint alone, so a TGN cannot
// tell whether this source met this destination before, how often or how lately; those are
// the strongest signals for which destination a source meets next (a "recent destinations,
// then popular ones" heuristic ranks far above a TGN on Wikipedia). The features:
//   0      met: the destination is among the source's recent interactions (0/1)
//   1      log(1 + times the source met it among them)
//   2      1 / its recency rank among the source's distinct recent partners (0 if not met)
//   3..6   exp(-age / scale) of the last meeting, scales 1 h, 1 d, 1 w, 4 w (0 if not met)
//   7..10  log(1 + the destination's interactions within 1 h, 1 d, 1 w, 4 w): its recent
//          popularity, from its own recent interactions
//   11     log(1 + distinct partners the two endpoints share): neighbour co-occurrence
//   12     log(1 + the source's recent interactions)
//   13     the source's distinct partners per interaction (1 = always someone new; small = it
//          returns to the same ones): how much its history predicts its next partner
//   14, 15 exp(-age / scale) of the destination's newest interaction with anyone, 1 h and 1 d
// Fixed scales in seconds, not tuned per data set. Streaming by construction: everything comes
// from the neighbour index the server already keeps, strictly before the query time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/neighbor_sampler.h"

namespace tlp::model {

inline constexpr int64_t kPairFeatures = 16;

// lists: each query node's recent partners, newest first, and `keys` the query nodes' own
// (NeighborSampler::SamplePartners at `times`). Pair i is (keys[src_positions[i]],
// keys[dst_positions[i]]) at times[src_positions[i]]. Writes [pairs x kPairFeatures] row-major
// into *features.
void ComputePairEvidence(const NeighborBlock& lists, std::span<const int64_t> keys,
                         std::span<const double> times, std::span<const int64_t> src_positions,
                         std::span<const int64_t> dst_positions, std::vector<float>* features);

}  // namespace tlp::model
