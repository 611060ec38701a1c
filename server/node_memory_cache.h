// NodeMemoryCache: which nodes' memory is resident in the model, with the store as the truth.
//
// The model indexes node memory by row. This maps client node ids to a bounded set of rows
// (CLOCK replacement), loads the misses of a call from the store's node state file in one
// batched read, and keeps the rows changed since the last checkpoint ("dirty") until a
// checkpoint writes them: a dirty row that is evicted moves to a side table, not to the store,
// so what the store holds is always one consistent cut of the log (the last checkpoint's
// watermark), and a crash replays the log after it onto exactly that state. The side table is
// bounded by checkpointing when it fills (see CheckpointDue).
//
// Row 0 is reserved: zero memory, for nodes the store has never seen. Rows handed out since
// the last BeginOperation() and rows with pending messages (the last applied chunk's) are never
// evicted: one operation may need more rows than the capacity (a 20,000-pair Score touches
// ~220,000 nodes); then the rows grow past it (logged once) instead of failing.
//
// Misses can be read ahead (AddPrefetched): the store's states of nodes that work still queued will
// need, read on another thread while the model works; a checkpoint taken after the read began
// makes such a read unusable, as the store it read is no longer the one behind the cache.
//
// A cache that is not store-backed (a model being loaded beside the serving one, whose memory
// the store holds) reads nothing from the store: every node it has not seen starts at zeros,
// and its changed rows stay in memory (the side table grows) until it is made store-backed
// after its memory was written.
//
// Not thread-safe: the engine calls it under its model lock.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/huge_pages.h"
#include "common/status.h"
#include "storage/temporal_store.h"

namespace tlp::model {
class TemporalLinkModelImpl;
}

namespace tlp::server {

// node -> position in a NodeStates. Open addressing (abseil) rather than std::unordered_map: these
// maps hold up to millions of nodes, are built and torn down at every checkpoint on the memory
// thread, and a node-based map allocates (and later frees) one node per entry and takes a
// dependent cache miss per lookup (at 10M nodes, lookups 1.03 -> 0.67 us per event:
// bench/results/2026-12-04-scale-100m-flat-maps-huge-pages-model-106/).
using NodePositions = absl::flat_hash_map<uint64_t, size_t>;

// What one checkpoint writes: the rows changed since the previous one, and the pending messages
// (node ids, not rows) that the next chunk commits.
struct MemoryCheckpoint {
  storage::NodeStates states;
  NodePositions index;  // of states
  std::vector<uint64_t> pending_nodes;
  std::vector<float> pending_raw;  // [pending x pending_width]
  std::vector<double> pending_ts;
  size_t pending_width = 0;
};

// States read from the store ahead of their use, for the misses of queued work (see
// NodeMemoryCache::AddPrefetched).
struct PrefetchedStates {
  uint64_t generation = 0;        // NodeMemoryCache::generation() when the read began
  uint64_t through_sequence = 0;  // the queued work they were read for ends here
  storage::NodeStates states;
  NodePositions index;  // of states
};

struct MemoryCacheStats {
  uint64_t hits = 0, misses = 0, evictions = 0;
  uint64_t prefetched = 0;  // misses served by a read-ahead instead of a read of their own
  size_t resident_rows = 0, capacity_rows = 0, dirty_rows = 0, evicted_dirty_rows = 0;
  // Time spent paging since construction: misses read from the store (or the side table) into
  // rows, and changed rows of evicted nodes copied to the side table.
  double page_in_seconds = 0, page_out_seconds = 0;
};

class NodeMemoryCache {
 public:
  // capacity_rows >= 2 (row 0 is reserved).
  NodeMemoryCache(const storage::TemporalStore& store, model::TemporalLinkModelImpl& model,
                  size_t capacity_rows, bool store_backed = true);

  // Whether misses read the store and CheckpointDue may say yes (see above). Made true once a
  // checkpoint of this cache's memory replaced the store's.
  bool store_backed() const { return store_backed_; }
  void set_store_backed(bool backed) { store_backed_ = backed; }

  // Starts an operation (a chunk applied, a Score call): rows handed out from here on stay
  // resident until the next BeginOperation.
  void BeginOperation();
  // rows[i] = the row holding nodes[i]'s memory, loading misses (from the side table, the last
  // checkpoint, or the store in one batched read; zeros for nodes never stored).
  Status Rows(std::span<const uint64_t> nodes, std::span<int64_t> rows);
  uint64_t NodeOf(int64_t row) const { return node_of_row_[static_cast<size_t>(row)]; }

  // Read-ahead of misses. Appends to `missing` those of `nodes` that are not resident (repeats
  // included): the ones worth reading ahead.
  void AppendNotResident(std::span<const uint64_t> nodes, std::vector<uint64_t>* missing) const;
  // Checkpoints taken so far: a read of the store is current while this stays the same.
  uint64_t generation() const { return generation_; }
  // Makes `prefetched` the source of its nodes' misses instead of the store (the side table and
  // the last checkpoint still come first), unless a checkpoint was taken since its read began.
  void AddPrefetched(std::shared_ptr<const PrefetchedStates> prefetched);
  // Drops the reads made for work up to `sequence` (applied now).
  void DropPrefetchedThrough(uint64_t sequence);

  // Makes the pending messages of a checkpoint the model's (on open, before any chunk).
  Status RestorePending(const MemoryCheckpoint& checkpoint);
  // After ApplyEvents: `rows` now hold pending messages (pinned until the next call) and will
  // change when they are committed (dirty).
  void SetPending(std::span<const int64_t> rows);

  // True when the evicted dirty rows have reached their bound: checkpoint soon (never while
  // not store-backed).
  bool CheckpointDue() const;
  // Copies every dirty row and the pending messages out of the model and marks the rows clean
  // (pending ones stay dirty: their commit changes them). `previous_written` false means the
  // last checkpoint was not stored: its rows are carried into this one.
  std::shared_ptr<const MemoryCheckpoint> TakeCheckpoint(bool previous_written);

  MemoryCacheStats stats() const;
  double page_in_seconds() const { return page_in_seconds_; }
  double page_out_seconds() const { return page_out_seconds_; }

 private:
  // A row for a node not resident: a free row, a victim, or a new row past the capacity.
  int64_t AllocateRow();
  int64_t AddRow();  // a new, empty row at the end
  // States of `nodes` as the store holds them: read ahead, or read now.
  Status ReadStored(std::span<const uint64_t> nodes, storage::NodeStates* states);
  // States of `nodes` (none resident) from the side table, the last checkpoint, or the store.
  Status LoadStates(std::span<const uint64_t> nodes, storage::NodeStates* states);
  // Copies the memory of `rows` (last held by `nodes`) to the side table.
  void EvictDirty(std::span<const int64_t> rows, std::span<const uint64_t> nodes);

  const storage::TemporalStore& store_;
  model::TemporalLinkModelImpl& model_;
  const size_t capacity_;
  const uint32_t dim_;
  const bool has_memory_;
  bool store_backed_;

  // Resident node -> row. Not reserved to the capacity up front: a table sized for millions of
  // rows while few are resident spreads the first lookups over 64 MB (measured: lookups took
  // ~0.8 instead of ~0.5 us per event over the first 5M events of the 100M stream). Read at
  // random, hence on huge pages once large (common/huge_pages.h).
  absl::flat_hash_map<uint64_t, int64_t, absl::Hash<uint64_t>, std::equal_to<uint64_t>,
                      HugePageAllocator<std::pair<const uint64_t, int64_t>>>
      row_of_;
  std::vector<uint64_t> node_of_row_;
  std::vector<uint8_t> occupied_, dirty_, pending_, referenced_;
  std::vector<uint64_t> epoch_of_row_;
  std::vector<int64_t> pending_rows_;
  uint64_t epoch_ = 1;
  uint64_t full_epoch_ = 0;  // the operation in which a sweep found no row to evict
  size_t clock_hand_ = 1;
  bool warned_growth_ = false;

  // Dirty rows evicted since the last checkpoint: node -> position in evicted_.
  storage::NodeStates evicted_;
  NodePositions evicted_index_;
  std::shared_ptr<const MemoryCheckpoint> last_checkpoint_;
  uint64_t generation_ = 0;
  std::vector<std::shared_ptr<const PrefetchedStates>> prefetched_;  // oldest first

  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, prefetched_used_ = 0;
  double page_in_seconds_ = 0, page_out_seconds_ = 0;
};

}  // namespace tlp::server
