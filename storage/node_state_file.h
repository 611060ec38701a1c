// NodeStateFile: node memory rows outside the LSM tree, one fixed-size slot per node.
//
// Why not a column family: a checkpoint re-writes the memory of every node that changed since
// the previous one (~415k rows of ~400 B per 1M events at 10M nodes). In RocksDB each such row
// went through the WAL, a flush, and then blob garbage collection, which relocated the live
// rows of old blob files again and again: node_state's compaction CPU grew linearly with the
// store and was the largest piece of what grows (issue #11). Here a row is written twice per
// checkpoint, once sequentially into a journal and once in place into its slot, and never moved.
//
// Files, in their own directory:
//   slots            record s = the state of the node that owns slot s (see Record below)
//   index            u64 per slot: its node (slots are handed out in order, never reused)
//   journal-0, -1    generation g's rows are journalled in journal-(g % 2) before they commit
//
// Commit protocol. Prepare journals the rows (and appends new nodes to the index) and syncs
// them; the caller then commits {generation, slot count, dim} durably elsewhere (the store's
// meta column family, in the same write as the watermark and cursors), and Publish writes the
// rows into their slots. A crash before the commit leaves the previous generation in force (its
// journal is the other file); a crash after it replays the committed generation's journal on
// open. Before a journal file is reused, the slots file is synced, so every generation older
// than the committed one is durable in its slots.
//
// Thread safety: one thread at a time prepares and publishes (the store serialises them);
// Read may run concurrently with either. A slot is never read while it is being written.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/status.h"

namespace tlp::storage {

struct NodeStates;

// What the caller keeps durably for the file: the last committed generation and its shape.
struct NodeStateCommit {
  uint64_t generation = 0;  // 0: nothing committed yet
  uint64_t slots = 0;       // slots handed out up to it
  uint32_t dim = 0;         // floats per memory row (0 while no slot exists)
};

class NodeStateFile {
 public:
  // Opens (creating when missing) the files in `directory` as of `committed`, replaying its
  // journal. `sync`: fsync journals and slots (survives power loss); off survives process
  // crashes only.
  static Status Open(const std::string& directory, const NodeStateCommit& committed, bool sync,
                     std::unique_ptr<NodeStateFile>* file);
  ~NodeStateFile();
  NodeStateFile(const NodeStateFile&) = delete;
  NodeStateFile& operator=(const NodeStateFile&) = delete;

  // Journals `states` (each node once) as the next generation and returns what to commit.
  // Nothing is visible to Read until Publish. INVALID_ARGUMENT for rows of another width
  // while slots exist (ClearAll first).
  Status Prepare(const NodeStates& states, NodeStateCommit* next);
  // After `next` (from Prepare) was committed: writes the journalled rows into their slots.
  // An error here leaves the file unusable until reopened (the journal replays then).
  Status Publish(const NodeStates& states, const NodeStateCommit& next);
  // Forgets every state, in the same two steps: PrepareClear journals an empty generation
  // (slots 0, dim 0) for the caller to commit, PublishClear then empties the files.
  Status PrepareClear(NodeStateCommit* next);
  Status PublishClear(const NodeStateCommit& next);

  // The stored states of `nodes`: found = 0 and zeros for nodes never stored. CORRUPTION when
  // `states->dim` differs from the stored rows' width or a slot fails its checksum.
  Status Read(std::span<const uint64_t> nodes, NodeStates* states) const;

  // Copies the files into `directory` (must not exist), as of the last Publish.
  Status CopyTo(const std::string& directory) const;

  uint64_t stored_nodes() const;
  // Bytes of the files on disk (slots, index, journals).
  uint64_t disk_bytes() const;
  const NodeStateCommit& committed() const { return committed_; }

 private:
  NodeStateFile() = default;
  // Bytes of one slot for memory rows of `dim` floats.
  static size_t RecordBytes(uint32_t dim);
  // Serialises row i of `states` into `out` (RecordBytes(states.dim) long).
  static void EncodeRecord(const NodeStates& states, size_t i, char* out);
  // Writes generation `generation`'s journal: a header, `rows` (slot, record) pairs made by
  // `fill(i, out)`, a checksum; synced.
  Status WriteJournal(uint64_t generation, uint32_t dim, size_t rows,
                      const std::function<void(size_t, char*)>& fill);
  // Applies the committed generation's journal to the slots (on open).
  Status ReplayJournal();
  // Writes records into their slots, consecutive slots in writes of up to 64 KiB, each under the
  // exclusive lock. `records` holds slots.size() records in the order of `slots`.
  Status WriteSlots(std::span<const uint64_t> slots, const char* records, size_t record_bytes);
  Status SyncSlots() const;

  std::string directory_;
  bool sync_ = true;
  int slots_fd_ = -1, index_fd_ = -1;
  NodeStateCommit committed_;
  bool failed_ = false;  // a Publish failed: reads would miss committed rows (under mutex_)

  // Guards the slot map and the slot contents against Read; Prepare/Publish are serialised by
  // the caller.
  mutable std::shared_mutex mutex_;
  absl::flat_hash_map<uint64_t, uint64_t> slot_of_;
  // Prepared, not yet published: the generation's slots, in the order of its rows.
  std::vector<uint64_t> prepared_slots_;
  std::vector<size_t> prepared_order_;  // rows by slot
  std::vector<char> journal_buffer_;
};

}  // namespace tlp::storage
