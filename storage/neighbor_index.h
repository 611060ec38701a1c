// NeighborIndex: the k most recent temporal neighbours of a node strictly before a time.
//
// The hot path of scoring. A bounded in-memory cache keeps the last `cached_per_node`
// neighbours of up to `cache_slots` nodes (flat arrays, no per-event allocation) so that lookups
// at "now" of recently active nodes never touch RocksDB; a node without a cache slot, or a query
// further back than its slot reaches, falls back to a reverse walk of the `adjacency` column
// family: one seek in the node's newest epoch (see key_encoding.h), O(k) after it, and one more
// per older epoch that holds the node while fewer than k were found. The newest epoch or two
// are not in RocksDB yet but here, as EpochRows (epoch_rows.h), which the walk reads instead;
// the store seals each into RocksDB once Add has moved past it, and after a crash rebuilds them
// from the event log. RocksDB and the event log are the truth; the cache is a bounded copy of
// their newest part, so memory no longer grows with the number of nodes
// beyond ~50 bytes of bookkeeping each (degree, newest ts, slot, epochs). Slots are taken by writes
// and recycled CLOCK-wise (a lookup or a write marks a slot used). A recycled slot covers only
// events newer than its node's newest ts when it was taken (its floor); older ones stay in RocksDB.
// A slot's rows are a ring, so that a full slot takes its newest row in place of its oldest
// without moving the others: a stream's hot destinations are full and take a row every event.
// Reads may run concurrently with the single writer; the lock is never held across RocksDB I/O.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/huge_pages.h"
#include "common/status.h"
#include "storage/epoch_rows.h"
#include "storage/key_encoding.h"
#include "storage/neighbor.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class Iterator;
}  // namespace rocksdb

namespace tlp::storage {

// Result of a batched lookup: row i holds up to k neighbours of query i, newest first.
struct NeighborLists {
  size_t k = 0;
  uint32_t feature_dim = 0;
  std::vector<Neighbor> neighbors;  // [queries x k]
  std::vector<uint32_t> counts;     // valid entries per row
  std::vector<float> features;      // [queries x k x feature_dim], 0 on padding
  void Reset(size_t queries, size_t slots, uint32_t dim);
};

class NeighborIndex {
 public:
  // Adjacency rows of store sequence s belong to epoch s >> epoch_bits.
  NeighborIndex(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* adjacency,
                rocksdb::ColumnFamilyHandle* events, uint32_t cached_per_node, uint32_t feature_dim,
                size_t cache_slots, uint32_t epoch_bits);
  ~NeighborIndex();

  // Records one event in both directions (the store's writer calls this after a durable write).
  void Add(uint64_t src, uint64_t dst, double ts, uint64_t sequence,
           std::span<const float> features);
  // Rebuilds the cache and degrees from the adjacency column family (on open), which holds the
  // rows of every sequence up to the newest it holds, set in *sealed_through; the store then
  // Adds the events after it.
  Status Rebuild(uint64_t* sealed_through);

  uint32_t EpochOf(uint64_t sequence) const {
    return static_cast<uint32_t>(sequence >> epoch_bits_);
  }

  // Rows of the newest epochs are in memory (EpochRows) until the store seals them into RocksDB.
  // The epochs Add has moved past, oldest first, are sealed in that order: the oldest one, or
  // null when none waits.
  std::shared_ptr<const EpochRows> OldestClosedEpoch() const;
  // Closes the epoch Add writes to, so that its rows can be sealed as they are (at shutdown,
  // after the last Add).
  void CloseOpenEpoch();
  // `rows`, the oldest closed epoch, is in RocksDB now: lookups read it there from here on.
  void DropSealedEpoch(const EpochRows* rows);
  // Memory held by rows not sealed yet.
  size_t UnsealedBytes() const;

  // The k most recent neighbours of `node` with ts < before, newest first.
  Status Recent(uint64_t node, double before, size_t k, std::vector<Neighbor>* out) const;
  // Batched form, with edge features when the store has them.
  Status RecentBatch(std::span<const uint64_t> nodes, std::span<const double> before, size_t k,
                     NeighborLists* out) const;

  uint64_t Degree(uint64_t node) const;  // events touching the node (self-loops once)
  bool Known(uint64_t node) const;
  size_t node_count() const;
  uint32_t cached_per_node() const { return cached_per_node_; }
  size_t cache_slots() const { return max_slots_; }
  // Bytes one cache slot takes (entries and their features).
  static size_t SlotBytes(uint32_t cached_per_node, uint32_t feature_dim);

  // Lookups served by the cache / by RocksDB since start (for metrics).
  uint64_t cache_hits() const { return cache_hits_.load(std::memory_order_relaxed); }
  uint64_t cache_misses() const { return cache_misses_.load(std::memory_order_relaxed); }

 private:
  void AddDirected(uint64_t node, uint64_t neighbor, double ts, uint64_t sequence,
                   std::span<const float> features);
  // Fills row `row` of `out` from the cache if it can answer; false when RocksDB must.
  bool FromCache(uint64_t node, double before, size_t k, size_t row, NeighborLists* out) const;
  Status FromStore(uint64_t node, double before, size_t k, size_t row, NeighborLists* out) const;
  // Appends to *found up to k of the node's rows in `epoch` held by RocksDB with ts < before
  // and sequence < below, newest first; *previous = the epoch before (from any row found).
  Status FromTable(rocksdb::Iterator* it, uint64_t node, uint32_t epoch, double before, size_t k,
                   uint64_t below, std::vector<Neighbor>* found, uint32_t* previous) const;
  // Starts an EpochRows for `epoch`, closing the current one (write lock held).
  void OpenEpoch(uint32_t epoch);
  // The in-memory rows of `epoch`, or null (lock held).
  const EpochRows* MemoryEpoch(uint32_t epoch) const;

  static constexpr uint32_t kNoSlot = 0xFFFFFFFFu;
  struct NodeEntry {
    uint64_t degree = 0;
    double newest_ts = 0;
    uint32_t slot = kNoSlot;
    uint32_t newest_epoch = kNoEpoch;
    uint32_t previous_epoch = kNoEpoch;  // the epoch of its rows before newest_epoch
  };
  // Counts `rows` rows of an entry in `epoch`, the newest at `newest_ts` (write lock held).
  void Count(NodeEntry* entry, bool first, double newest_ts, uint32_t epoch, uint64_t rows);
  // Where a slot's logical row (0 = its oldest) is in entries_ and features_, as an index into the
  // slot's K cells.
  size_t CellOf(uint32_t slot, size_t row) const {
    const size_t cell = start_[slot] + row;
    return cell < cached_per_node_ ? cell : cell - cached_per_node_;
  }
  // Puts one row into a slot unless older than the slot covers (write lock held).
  void CacheRow(uint32_t slot, uint64_t neighbor, double ts, uint64_t sequence,
                std::span<const float> features);
  // Upper bound of the ts of every row in `epoch` (+inf when unknown).
  double MaxTsOf(uint32_t epoch) const;
  // A slot for `node` (write lock held), recycling the first unused one after the clock hand.
  uint32_t TakeSlot(uint64_t node, double floor);
  // A new, empty slot at the end (write lock held; fewer than max_slots_ in use).
  uint32_t AppendSlot(uint64_t node, double floor);
  // Empties `slot` and hands it from its node to `node` (write lock held).
  void ReassignSlot(uint32_t slot, uint64_t node, double floor);

  rocksdb::DB* db_;
  rocksdb::ColumnFamilyHandle* adjacency_;
  rocksdb::ColumnFamilyHandle* events_;
  const uint32_t cached_per_node_;
  const uint32_t feature_dim_;
  const size_t max_slots_;
  const uint32_t epoch_bits_;

  mutable std::shared_mutex mutex_;
  // Every node ever seen. Open addressing: a lookup (two per event on the ingest writer) probes
  // the table itself instead of a bucket and then a node allocated on its own. Entries move when
  // it grows: no reference is kept across an insert.
  // It and the slot arrays below are read at random, two nodes per event, over gigabytes: on
  // huge pages (common/huge_pages.h) such a read costs its cache misses but rarely a page walk.
  absl::flat_hash_map<uint64_t, NodeEntry, absl::Hash<uint64_t>, std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, NodeEntry>>>
      nodes_;
  std::vector<double> epoch_max_ts_;  // per epoch: newest ts of its rows
  // Per slot, reserved to max_slots_ up front (address space only; pages are touched as slots
  // are appended) so that they never move.
  HugePageVector<uint64_t> owner_;   // per slot: its node
  HugePageVector<double> floor_;     // per slot: holds every event with ts > floor (-inf: all)
  HugePageVector<uint32_t> cached_;  // per slot: entries held (<= K)
  // Per slot: the cell of its oldest row; 0 unless the slot is full, so a slot that is not
  // full holds its rows in cells [0, count).
  HugePageVector<uint32_t> start_;
  HugePageVector<Neighbor> entries_;  // [slot x K], a ring per slot ascending in (ts, sequence)
  HugePageVector<float> features_;    // [slot x K x feature_dim]
  // Per slot: used since the clock hand last passed. Set by readers under the shared lock.
  std::unique_ptr<std::atomic<uint8_t>[]> used_;
  // Unsealed rows: the epoch Add writes to, and those it moved past, oldest first. Shared, so
  // that the sealing thread reads a closed epoch without the lock.
  std::shared_ptr<EpochRows> open_epoch_;
  std::deque<std::shared_ptr<const EpochRows>> closed_epochs_;
  uint64_t sealed_through_ = 0;  // RocksDB holds the rows of every sequence up to here
  // Epochs dropped from memory so far: a lookup's RocksDB iterator must be newer than the
  // drop of any epoch it reads there (the ingest came before the drop).
  uint64_t drops_ = 0;
  size_t clock_hand_ = 0;
  mutable std::atomic<uint64_t> cache_hits_{0};
  mutable std::atomic<uint64_t> cache_misses_{0};
};

}  // namespace tlp::storage
