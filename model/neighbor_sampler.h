// NeighborSampler: where the embedder gets each node's most recent temporal neighbours.
//
// The model knows no storage engine: training uses the in-memory TemporalAdjacency below, the
// server adapts its RocksDB-backed index to this interface. Node ids here are the model's dense
// indices (0 .. nodes-1), not client ids.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tlp::model {

// Neighbours of n query nodes, k slots each, row-major [n x k]; newest first, padding last.
struct NeighborBlock {
  int64_t queries = 0;
  int64_t slots = 0;
  uint32_t feature_dim = 0;
  std::vector<int64_t> nodes;   // neighbour index; 0 on padding
  std::vector<double> ts;       // event time of the interaction; query time on padding
  std::vector<uint8_t> valid;   // 1 = real neighbour
  std::vector<float> features;  // [n x k x feature_dim] edge features, 0 on padding

  void Reset(int64_t query_count, int64_t slot_count, uint32_t edge_feature_dim);
};

class NeighborSampler {
 public:
  virtual ~NeighborSampler() = default;
  // Fills `out` with the k most recent neighbours of nodes[i] strictly before times[i].
  virtual void Sample(std::span<const int64_t> nodes, std::span<const double> times, int64_t k,
                      NeighborBlock* out) const = 0;
  // The same neighbours by identity only, for pair evidence: out->nodes and *keys (one per
  // query node) hold keys that are equal exactly when the nodes are (a key < 0 matches
  // nothing). Nothing else is loaded; out->features stays empty. This default uses Sample and
  // the indices themselves.
  virtual void SamplePartners(std::span<const int64_t> nodes, std::span<const double> times,
                              int64_t k, NeighborBlock* out, std::vector<int64_t>* keys) const;
  // The partners (as keys) of nodes named by their keys (>= 0) from an earlier SamplePartners:
  // the second hop of pair evidence. This default takes keys as indices.
  virtual void SamplePartnersByKey(std::span<const int64_t> keys, std::span<const double> times,
                                   int64_t k, NeighborBlock* out) const;
};

// In-memory, append-only temporal adjacency (both directions of every event), for training
// and offline evaluation. Events must be added in non-decreasing time.
class TemporalAdjacency : public NeighborSampler {
 public:
  explicit TemporalAdjacency(uint32_t feature_dim = 0) : feature_dim_(feature_dim) {}

  void Add(int64_t src, int64_t dst, double ts, std::span<const float> features = {});
  void Sample(std::span<const int64_t> nodes, std::span<const double> times, int64_t k,
              NeighborBlock* out) const override;
  // Number of interactions of `node` strictly before `time`.
  int64_t DegreeBefore(int64_t node, double time) const;

 private:
  struct Entry {
    double ts;
    int64_t neighbor;
    int64_t feature_row;  // row in features_, or -1
  };
  uint32_t feature_dim_;
  std::vector<std::vector<Entry>> adjacency_;
  std::vector<float> features_;
};

}  // namespace tlp::model
