// TemporalStore: the durable, RocksDB-backed home of a temporal graph.
//
// Column families:
//   events      seq (u64 BE)                -> packed event (see event_codec.h)
//   adjacency   epoch, node, ts, seq (28 B) -> neighbour (u64), the node's previous epoch (u32);
//               both directions per event; epoch = seq >> adjacency_epoch_bits (key_encoding.h).
//               Written an epoch at a time: the newest epochs' rows are in memory
//               (NeighborIndex, epoch_rows.h) until a background thread seals each, once the
//               writer has moved past it, into one table file that RocksDB ingests.
//   node_state  empty; stores of schema version 2 kept node memory here (migrated on open)
//   event_ids   client event_id             -> seq (idempotent re-sends)
//   meta        name                        -> schema version, feature dim, max ts, watermark,
//                                              the node state file's committed generation
// Node memory lives beside them in node_states/ (node_state_file.h): one slot per node,
// outside the LSM tree, committed by the same meta write as the watermark.
//
// Contract: one writer calls Append (it is serialised internally anyway); any number of
// threads read. Append writes a whole batch in one WriteBatch with the WAL on, so after it
// returns OK every event in it survives a crash of the process (and, with sync on, of the
// machine). A batch that fails validation writes nothing. Adjacency rows not sealed when the
// process stops are rebuilt from the event log on the next open, from the sequence after the
// newest sealed row on.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/event_batch.h"
#include "common/status.h"
#include "storage/key_encoding.h"
#include "storage/neighbor_index.h"
#include "storage/node_state_file.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
class Slice;
class PinnableSlice;
class Status;
}  // namespace rocksdb

namespace tlp::storage {

inline constexpr uint32_t kSchemaVersion = 4;  // adjacency sealed an epoch at a time
// Stores of older versions are migrated when opened: version 3 wrote every adjacency row
// through RocksDB's write path, version 2 also kept node memory in the node_state column
// family, version 1 also keyed adjacency by node first.
inline constexpr uint32_t kSchemaVersionNodeStateFile = 3;
inline constexpr uint32_t kSchemaVersionNodeStateFamily = 2;
inline constexpr uint32_t kSchemaVersionNodeFirstAdjacency = 1;
inline constexpr size_t kMaxEventIdBytes = 128;
inline constexpr uint32_t kMaxFeatureDim = 4096;

struct StoreOptions {
  // Edge feature width of this store. Unset: take the stored one (0 for a new store).
  std::optional<uint32_t> feature_dim;
  // Events may arrive up to this many seconds older than the newest stored ts.
  double lateness_seconds = 3600.0;
  // Events may carry a ts at most this many seconds ahead of the newest stored ts or, for a
  // stream in Unix time (newest ts past 2000-01-01, or nothing stored yet), of the wall clock:
  // one event from the far future would otherwise put every later real event outside the
  // lateness window. 0 = no bound.
  double max_future_seconds = 86400.0;
  // fsync the WAL on every batch (survives power loss); off survives process crashes only.
  bool sync = true;
  // Neighbours cached in memory per node (NeighborIndex), and the cache's size in bytes: as many
  // nodes get a slot as fit (~770 bytes each without edge features; 1 GiB = ~1.4M nodes).
  uint32_t cached_neighbors = 32;
  size_t neighbor_cache_bytes = size_t{1} << 30;
  // RocksDB's block cache, shared by all column families: the table blocks of node memory
  // misses and of neighbour lookups beyond the neighbour cache.
  size_t block_cache_bytes = size_t{256} << 20;
  // Adjacency epochs of a new store span 2^bits store sequences (an existing store keeps its
  // own): large enough that a node's recent rows are mostly in one epoch, small enough that its
  // rows fit memory until sealed (2^22: 8.4M rows, ~350 MB with their index; two at a time
  // while the older one is sealed).
  uint32_t adjacency_epoch_bits = 22;
  bool create_if_missing = true;
};

struct AppendResult {
  std::vector<uint64_t> sequences;  // per event: its sequence (the stored one for duplicates)
  std::vector<uint8_t> duplicate;   // per event: 1 when its event_id was already stored
  uint64_t accepted = 0;
  uint64_t duplicates = 0;
};

// A named position in an external source (a Kafka partition's next offset, say), written in the
// same atomic batch as the events read up to it: after a crash the store and the position agree,
// so the source resumes exactly where the stored events end.
struct SourceCursor {
  std::string name;
  std::string value;
};

// Node memory rows, column-wise: row i is nodes[i], its last update and memory[i * dim ..
// (i + 1) * dim). Column-wise so that a batch moves between RocksDB and the model's tensors
// without a per-node allocation.
struct NodeStates {
  uint32_t dim = 0;
  std::vector<uint64_t> nodes;
  std::vector<double> last_update_ts;
  std::vector<float> memory;
  std::vector<uint8_t> found;  // GetNodeStates: 1 = stored (else zeros above)

  size_t size() const { return nodes.size(); }
  void Clear(uint32_t memory_dim) {
    dim = memory_dim;
    nodes.clear();
    last_update_ts.clear();
    memory.clear();
    found.clear();
  }
  std::span<const float> MemoryOf(size_t i) const { return {memory.data() + i * dim, dim}; }
};

struct StoreStats {
  uint64_t events = 0;
  uint64_t nodes = 0;
  uint64_t live_sst_bytes = 0;
  uint64_t pending_compaction_bytes = 0;
  uint64_t memtable_bytes = 0;
  uint64_t block_cache_bytes = 0;           // in use (one cache for all column families)
  uint64_t block_cache_capacity_bytes = 0;  // StoreOptions::block_cache_bytes
  uint64_t node_state_bytes = 0;            // the node state file's, on disk
  uint64_t unsealed_adjacency_bytes = 0;    // memory of adjacency rows not sealed yet
  uint64_t adjacency_seal_failures = 0;     // since open; each is retried
  std::string last_adjacency_seal_error;    // empty when none failed
};

class TemporalStore {
 public:
  static Status Open(const std::string& path, const StoreOptions& options,
                     std::unique_ptr<TemporalStore>* store);
  ~TemporalStore();
  TemporalStore(const TemporalStore&) = delete;
  TemporalStore& operator=(const TemporalStore&) = delete;

  // Checks a batch without writing: INVALID_ARGUMENT / OUT_OF_RANGE naming the event index and
  // field of the first bad event (a ts beyond the future bound is INVALID_ARGUMENT: it is wrong
  // whenever it is sent, unlike a late one). Events flagged in `skip_lateness` (re-sent duplicates,
  // which are acknowledged however old) are exempt from the lateness window.
  Status Validate(const EventBatch& batch,
                  const std::vector<uint8_t>* skip_lateness = nullptr) const;
  // Checks event i alone (the batch's feature width is taken as right) against `*newest`, the
  // newest ts before it (max_ts() for the first event of a batch), and advances `*newest`.
  // Validate is this over the batch; a source that drops bad events one by one calls it.
  Status CheckEvent(const EventBatch& batch, size_t i, bool lateness_exempt, double* newest) const;
  // Validates, deduplicates by event_id, and writes the batch durably, with `cursors` in the
  // same atomic write (a batch may be empty when only cursors move).
  Status Append(const EventBatch& batch, AppendResult* result,
                std::span<const SourceCursor> cursors = {});
  // The value of a cursor written by Append; *found false when never written.
  Status GetCursor(std::string_view name, std::string* value, bool* found) const;

  const NeighborIndex& neighbors() const { return *neighbors_; }

  // Node memory checkpoint, incremental: the states that changed since the previous one, the
  // watermark (the last sequence every stored state includes) and `cursors` in one atomic
  // write. So the stored states always form one consistent cut of the log, whatever part of
  // them a bounded cache holds in memory.
  Status SaveNodeStates(const NodeStates& states, uint64_t watermark,
                        std::span<const SourceCursor> cursors = {});
  // The stored states of `nodes` in one batched read; nodes never saved get found = 0 and
  // zeros. `states->dim` must be set.
  Status GetNodeStates(std::span<const uint64_t> nodes, NodeStates* states) const;
  // Deletes every node state and sets the watermark to 0 (memory made by another model).
  Status ClearNodeStates();
  uint64_t watermark() const;
  // Visits the cursors whose names start with `prefix`, in name order.
  Status ForEachCursor(
      std::string_view prefix,
      const std::function<Status(std::string_view name, std::string_view value)>& visit) const;

  // Visits the events with sequence > after, in order, in batches of up to `batch_size`;
  // `first_sequence` is the sequence of batch.src[0].
  Status ReplayAfter(
      uint64_t after, size_t batch_size,
      const std::function<Status(const EventBatch& batch, uint64_t first_sequence)>& visit) const;

  // A consistent copy of the whole store in `directory` (must not exist), openable as a store.
  Status Checkpoint(const std::string& directory) const;

  uint64_t last_sequence() const;  // 0 = empty
  double max_ts() const;
  uint32_t feature_dim() const { return feature_dim_; }
  double lateness_seconds() const { return options_.lateness_seconds; }
  StoreStats Stats() const;
  const std::string& path() const { return path_; }

 private:
  TemporalStore() = default;
  Status Initialize();
  // Drops the adjacency of a schema version 1 store, which is then rebuilt from its event log.
  Status MigrateAdjacency();
  // Adds the events after `sealed_through` to the neighbour index, sealing each epoch they
  // close (on open: their adjacency rows are only in the log).
  Status RebuildUnsealedEpochs(uint64_t sealed_through);
  // The sealing thread: seals closed epochs as Append closes them.
  void SealLoop();
  // Writes the oldest closed epoch's rows as a table file, has RocksDB ingest it, records how
  // far the sealed rows reach and drops the epoch from memory. *sealed false: none was closed.
  Status SealOldestEpoch(bool* sealed);
  // Moves the node_state column family of a schema version <= 2 store into node_states_.
  Status MigrateNodeStates();
  // Writes a prepared node state generation, with `watermark` and `cursors`, in one meta write.
  Status CommitNodeStates(const NodeStateCommit& next, uint64_t watermark,
                          std::span<const SourceCursor> cursors);

  std::string path_;
  StoreOptions options_;
  uint32_t feature_dim_ = 0;
  uint32_t adjacency_epoch_bits_ = 0;
  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> handles_;
  rocksdb::ColumnFamilyHandle* events_ = nullptr;
  rocksdb::ColumnFamilyHandle* adjacency_ = nullptr;
  rocksdb::ColumnFamilyHandle* node_state_ = nullptr;
  rocksdb::ColumnFamilyHandle* event_ids_ = nullptr;
  rocksdb::ColumnFamilyHandle* meta_ = nullptr;
  std::unique_ptr<NeighborIndex> neighbors_;
  std::unique_ptr<NodeStateFile> node_states_;
  // Serialises node state checkpoints, clears and store copies (a copy must not see half of one).
  mutable std::mutex node_state_mutex_;

  mutable std::mutex writer_mutex_;  // serialises Append
  std::atomic<uint64_t> last_sequence_{0};
  std::atomic<double> max_ts_{0.0};
  std::atomic<uint64_t> watermark_{0};
  // Reused across Append calls: no allocation per event once warm.
  std::string encode_buffer_;
  // The batch's event ids: their lookups, and each id's first event in the batch (its sequence
  // once assigned).
  std::vector<rocksdb::Slice> id_keys_;
  std::vector<size_t> id_positions_;
  std::vector<rocksdb::PinnableSlice> id_values_;
  std::vector<rocksdb::Status> id_statuses_;
  absl::flat_hash_map<std::string_view, uint64_t> first_in_batch_;

  // The sealing thread and what wakes it (an Append that closed an epoch, or stopping).
  std::thread sealer_;
  mutable std::mutex sealer_mutex_;
  std::condition_variable sealer_wake_;
  bool seal_requested_ = false;
  bool stopping_ = false;
  uint64_t seal_failures_ = 0;
  std::string seal_error_;
};

}  // namespace tlp::storage
