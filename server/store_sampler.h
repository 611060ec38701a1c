// StoreSampler: the model's neighbour lookups served from the store's neighbour index. The
// model asks by row, the store by client id; neighbours come back as rows of the node memory
// cache (loaded into it, in one batch per call).
//
// Errors: a failed lookup or page-in throws std::runtime_error out of Sample, since the model's
// NeighborSampler interface has no Status; the engine's Score and memory updates catch it.
// Thread contract: Sample runs inside the model's Embed, under the engine's model lock.
#pragma once

#include "model/neighbor_sampler.h"
#include "server/node_memory_cache.h"
#include "storage/temporal_store.h"

namespace tlp::server {

class StoreSampler : public model::NeighborSampler {
 public:
  // Both must outlive the sampler.
  StoreSampler(const storage::TemporalStore& store, NodeMemoryCache& cache)
      : store_(store), cache_(cache) {}

  void Sample(std::span<const int64_t> rows, std::span<const double> times, int64_t k,
              model::NeighborBlock* out) const override;
  // Keys are client node ids (-1 for row 0, a node the store has never seen); no node memory
  // is paged in for them.
  void SamplePartners(std::span<const int64_t> rows, std::span<const double> times, int64_t k,
                      model::NeighborBlock* out, std::vector<int64_t>* keys) const override;
  // Keys are client node ids; read from the neighbour index alone, like SamplePartners.
  void SamplePartnersByKey(std::span<const int64_t> keys, std::span<const double> times, int64_t k,
                           model::NeighborBlock* out) const override;

 private:
  // The partners of `ids` (skipping those whose key is < 0) into *out, by key.
  void ReadPartners(std::span<const uint64_t> ids, std::span<const double> times, int64_t k,
                    std::span<const int64_t> keys, model::NeighborBlock* out) const;

  const storage::TemporalStore& store_;
  NodeMemoryCache& cache_;
};

}  // namespace tlp::server
