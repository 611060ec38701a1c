// EpochRows: the adjacency rows of one epoch (key_encoding.h) that RocksDB does not hold yet.
//
// Why not RocksDB's write path: every event's two rows went through the WAL, a memtable
// skiplist insert at a random place among millions of nodes, a flush, and one or two
// compactions: about a fifth of the daemon's CPU per event at 100M events (the profile in
// bench/results/2026-12-05-scale-100m-baseline-model-106/).
// An epoch's keys are disjoint from every other epoch's, so its rows can instead be kept here,
// appended in sequence order at O(1), and written once, sorted, as one table file that RocksDB
// ingests straight into its last level, where no compaction touches it again
// (TemporalStore seals an epoch when the writer moves past it). Until then lookups read the
// epoch here: a node's rows are a chain from its newest row back.
//
// Not thread-safe: NeighborIndex guards the open epoch with its lock; a closed epoch is not
// changed any more and may be read (and sealed) from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/huge_pages.h"
#include "common/status.h"
#include "storage/neighbor.h"

namespace rocksdb {
struct Options;
}  // namespace rocksdb

namespace tlp::storage {

class EpochRows {
 public:
  // Rows of `epoch` from store sequence `first_sequence` on: the epoch's rows of earlier
  // sequences, if any (a store reopened mid-epoch), are in RocksDB. `expected_rows` is reserved.
  EpochRows(uint32_t epoch, uint64_t first_sequence, size_t expected_rows);

  uint32_t epoch() const { return epoch_; }
  uint64_t first_sequence() const { return first_sequence_; }
  // The newest row's sequence (first_sequence - 1 while empty).
  uint64_t last_sequence() const { return last_sequence_; }
  size_t size() const { return rows_.size(); }
  bool empty() const { return rows_.empty(); }
  size_t MemoryBytes() const;

  // `node` met `neighbor` at `ts` in event `sequence` (not below any earlier call's).
  // `previous_epoch` is the epoch of the node's rows before this epoch (kNoEpoch: none); only
  // the node's first row here records it.
  void Add(uint64_t node, uint64_t neighbor, double ts, uint64_t sequence, uint32_t previous_epoch);

  // Appends the node's rows with ts < before to *found, in no particular order. False when the
  // node has no rows here; else *previous_epoch is the epoch of its rows before this one.
  bool Collect(uint64_t node, double before, std::vector<Neighbor>* found,
               uint32_t* previous_epoch) const;

  // Writes every row, in key order, to a new table file of the adjacency family at `path`
  // (built with `options`, the family's). Must not be empty.
  Status WriteTable(const rocksdb::Options& options, const std::string& path) const;

 private:
  static constexpr uint64_t kNoRow = ~uint64_t{0};
  struct Row {
    uint64_t neighbor;
    double ts;
    uint64_t sequence;
    uint64_t previous_row;  // the node's row before this one here, or kNoRow
  };
  struct Head {
    uint64_t newest_row;
    uint32_t previous_epoch;
  };

  const uint32_t epoch_;
  const uint64_t first_sequence_;
  uint64_t last_sequence_;
  // Appended in order, but the heads are read at random (two nodes per event) and both grow to
  // hundreds of MB: on huge pages (common/huge_pages.h), fewer page walks and page faults.
  HugePageVector<Row> rows_;
  absl::flat_hash_map<uint64_t, Head, absl::Hash<uint64_t>, std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, Head>>>
      heads_;  // per node with rows here
};

}  // namespace tlp::storage
