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
// With a second hop (SecondHop: the source's distinct partners' own recent partners), walks
// between the endpoints, the collaborative signal of "users who edit what you edit also edit
// this" that no single endpoint's list holds (as TPNet's walk counts, computed here directly):
//   16     log(1 + walks source - x - w - destination of three hops), over the destination's
//          recent interactions w and the source's partners x
//   17     the share of the destination's distinct partners that such walks reach
//   18     log(1 + walks source - x - destination of two hops): partners of partners
// Fixed scales in seconds, not tuned per data set. Streaming by construction: everything comes
// from the neighbour index the server already keeps, strictly before the query time.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/neighbor_sampler.h"

namespace tlp::model {

inline constexpr int64_t kPairFeatures = 16;
inline constexpr int64_t kPairWalkFeatures = 3;

// Features per pair: with a second hop (ModelConfig::pair_hop_neighbors > 0) or without.
inline int64_t PairFeatureCount(int64_t hop_neighbors) {
  return kPairFeatures + (hop_neighbors > 0 ? kPairWalkFeatures : 0);
}

// The second hop: the recent partners of every source's distinct partners. PlanSecondHop
// fills keys and times (one query per (source position, partner)); the caller fills lists
// (NeighborSampler::SamplePartnersByKey); queries [begin[s], end[s]) belong to source position s.
struct SecondHop {
  std::vector<int64_t> keys;
  std::vector<double> times;
  std::vector<int64_t> begin, end;  // per query node position; empty ranges elsewhere
  NeighborBlock lists;
};

// Plans the second hop for the sources of the pairs (their distinct partners in `lists`).
void PlanSecondHop(const NeighborBlock& lists, std::span<const int64_t> keys,
                   std::span<const double> times, std::span<const int64_t> src_positions,
                   SecondHop* hop);

// lists: each query node's recent partners, newest first, and `keys` the query nodes' own
// (NeighborSampler::SamplePartners at `times`). Pair i is (keys[src_positions[i]],
// keys[dst_positions[i]]) at times[src_positions[i]]. second_hop: planned for these pairs, or
// null. Writes [pairs x PairFeatureCount] row-major into *features (walk features only with a
// second hop).
void ComputePairEvidence(const NeighborBlock& lists, std::span<const int64_t> keys,
                         std::span<const double> times, std::span<const int64_t> src_positions,
                         std::span<const int64_t> dst_positions, const SecondHop* second_hop,
                         std::vector<float>* features);

}  // namespace tlp::model
