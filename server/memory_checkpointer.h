// MemoryCheckpointer: writes node memory to the store so that a restart replays only the log
// after it, and restores it at open.
//
// A checkpoint is incremental (the rows changed since the last one, NodeMemoryCache::
// TakeCheckpoint), plus the pending messages the next chunk commits and the destinations seen
// since, committed with the watermark they cover in one atomic store write. It is copied under
// the model lock (a memory copy) and written without it, so the memory thread goes on while a
// checkpoint is written; writes happen one at a time, in the order they were taken.
//
// Format and migration: the store's cursors "memory/model" (which model and chunk size made the
// memory: "<fingerprint>/<memory_batch>"; memory from any other is discarded and the whole log
// replayed), "memory/pending" (EncodePending in the .cc), "memory/destinations/<index>". The
// pre-store memory file (<data_dir>/memory.ckpt) is removed with a warning.
//
// Thread contract: Restore before the memory thread starts; Due and Start from the memory
// thread; Save and SecondsSince from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <string>

#include "common/mutex.h"
#include "common/status.h"
#include "server/destination_set.h"
#include "server/node_memory_cache.h"
#include "storage/temporal_store.h"

namespace tlp::server {

// How far node memory is. Written by the memory pipeline, read by checkpoints, both under the
// model lock.
struct MemoryProgress {
  uint64_t events_applied = 0;
  uint64_t through = 0;  // sequence of the last event in memory
};

struct CheckpointSchedule {
  uint64_t every_events = 0;  // 0 = no event trigger
  double every_seconds = 0;   // with events applied since; 0 = no time trigger
};

class MemoryCheckpointer {
 public:
  // Borrows everything; all must outlive it. `progress` and `cache` are guarded by
  // `model_mutex`. model_tag: "<model fingerprint>/<memory_batch>".
  MemoryCheckpointer(storage::TemporalStore* store, NodeMemoryCache* cache,
                     DestinationSet* destinations, Mutex* model_mutex,
                     const MemoryProgress* progress, std::string model_tag,
                     CheckpointSchedule schedule);
  ~MemoryCheckpointer();  // waits for the write in flight
  MemoryCheckpointer(const MemoryCheckpointer&) = delete;
  MemoryCheckpointer& operator=(const MemoryCheckpointer&) = delete;

  // Restores the stored destinations and, when the stored memory was made by this model, its
  // pending messages (`restore_pending`: the model has memory); else (or with `rebuild`) clears
  // the stored memory. *watermark: the sequence the restored memory covers (0 = replay all).
  Status Restore(const std::string& data_dir, bool rebuild, bool restore_pending,
                 uint64_t* watermark) ABSL_LOCKS_EXCLUDED(model_mutex_);

  // Whether a checkpoint is due (schedule, or the cache's side table is full) and none is being
  // written; never while the cache is not store-backed.
  bool Due() ABSL_LOCKS_EXCLUDED(model_mutex_);
  // Snapshots now and writes it in the background. *snapshot_seconds += the copy's time.
  void Start(double* snapshot_seconds) ABSL_LOCKS_EXCLUDED(model_mutex_);
  // Snapshots now and waits until it is written (after the one in flight, if any).
  Status Save() ABSL_LOCKS_EXCLUDED(model_mutex_);
  // Waits for the write in flight, if any.
  void Wait();

  // Seconds since the last checkpoint was written (or since construction), and events applied
  // since the last snapshot.
  double SecondsSince() const;
  uint64_t EventsSince() const ABSL_LOCKS_EXCLUDED(model_mutex_);

 private:
  struct Snapshot;
  // Waits for the write in flight, snapshots, starts its write; returns that write.
  std::shared_future<Status> Launch(double* snapshot_seconds) ABSL_LOCKS_EXCLUDED(model_mutex_);
  Status Write(const Snapshot& snapshot);  // no locks

  storage::TemporalStore* const store_;
  NodeMemoryCache* const cache_ ABSL_PT_GUARDED_BY(model_mutex_);
  DestinationSet* const destinations_;
  Mutex* const model_mutex_;
  const MemoryProgress* const progress_ ABSL_PT_GUARDED_BY(model_mutex_);
  const std::string model_tag_;
  const CheckpointSchedule schedule_;

  std::atomic<bool> written_{true};     // the last checkpoint reached the store
  std::atomic<bool> writing_{false};    // a write is in flight
  std::atomic<int64_t> written_at_ms_;  // steady clock
  uint64_t snapshot_at_events_ ABSL_GUARDED_BY(model_mutex_) = 0;

  // Held while launching, so that snapshots are written in the order they were taken.
  Mutex launch_mutex_ ABSL_ACQUIRED_BEFORE(model_mutex_);
  std::shared_future<Status> in_flight_ ABSL_GUARDED_BY(launch_mutex_);
};

}  // namespace tlp::server
