// GraphGenerator: a seeded synthetic temporal graph with the shape of real interaction streams,
// so that scale tests and benchmarks need no downloads.
//
// Shape:
//   * Heavy-tailed degrees by preferential attachment: an endpoint is a new node with probability
//     `new_node_share` while nodes remain, else a uniformly drawn endpoint of a recent event
//     (degree-proportional within the last `memory` endpoints, which also gives the temporal
//     locality of real streams), else (with `uniform_share`) any existing node.
//   * Bursty time: gaps between events are Pareto distributed (tail index 1.5: many tiny gaps,
//     rare long silences; coefficient of variation well above Poisson's 1), scaled to a mean of
//     1 / events_per_second.
//   * Optionally bipartite (users -> items, as Wikipedia or Reddit): sources from
//     [1, nodes], destinations from [nodes + 1, nodes + destinations].
// Deterministic for a seed on every platform: it draws from std::mt19937_64 bits directly, not
// from std:: distributions (whose algorithms differ between standard libraries).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "common/event_batch.h"

namespace tlp {

struct GraphGeneratorOptions {
  uint64_t events = 1000000;
  uint64_t nodes = 100000;        // source nodes (all nodes when not bipartite)
  uint64_t destinations = 0;      // > 0: bipartite, with this many destination nodes
  double events_per_second = 10;  // mean event rate in event time
  double new_node_share = 0.1;    // chance an endpoint is a new node while nodes remain
  double uniform_share = 0.1;     // chance an endpoint is any existing node
  uint64_t memory = 1 << 20;      // recent endpoints preferential attachment draws from
  double start_ts = 1.6e9;        // first timestamp (seconds)
  uint64_t seed = 1;
};

class GraphGenerator {
 public:
  explicit GraphGenerator(const GraphGeneratorOptions& options);

  // Replaces *batch with the next up to max_events events (empty at the end). The signature of
  // EventReader::Next, so either can feed an ingest.
  void Next(size_t max_events, EventBatch* batch);
  uint64_t generated() const { return generated_; }

 private:
  // One side of the graph (sources, destinations, or all nodes).
  struct Side {
    uint64_t first = 1, count = 0;  // ids first .. first + count - 1
    uint64_t used = 0;              // ids handed out so far
    std::vector<uint64_t> recent;   // ring of recent endpoints
    size_t next_slot = 0;
  };
  double Uniform();  // [0, 1)
  uint64_t Draw(Side& side);
  void Remember(Side& side, uint64_t node);

  GraphGeneratorOptions options_;
  std::mt19937_64 random_;
  Side sources_, destinations_;
  bool bipartite_;
  uint64_t generated_ = 0;
  double ts_;
};

}  // namespace tlp
