// MemoryPipeline: keeps node memory in step with the durable event log, on a thread of its own.
//
// Pipelining: the writer queues events once they are durable (Queue) and returns; the memory
// thread applies them to the model behind it, so appends and model updates overlap on different
// cores. The queue is bounded (memory_queue_events), so a model slower than the store pushes
// back on ingest instead of lagging without limit. Await gives readers read-your-writes: it
// waits until memory covers every complete chunk stored when it was called.
//
// Determinism: memory is advanced in chunks aligned to store sequence numbers (events
// [k*memory_batch + 1, (k+1)*memory_batch]), during live ingest and replay alike, so node
// memory after a restart equals memory from an uninterrupted run. The events of the open chunk
// are durable but not in memory; replay after a restart covers them.
//
// The memory thread also reads ahead the node memory that queued work will miss (on another
// thread, NodeMemoryCache::AddPrefetched) and starts checkpoints when they are due
// (MemoryCheckpointer).
//
// Locks: the model and its row cache are shared with scoring under the model mutex (borrowed);
// the queue has its own mutex, never held while the model mutex is taken. Thread contract:
// Queue from one writer at a time; everything else from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "common/event_batch.h"
#include "common/mutex.h"
#include "common/status.h"
#include "server/destination_set.h"
#include "server/memory_checkpointer.h"
#include "server/node_memory_cache.h"
#include "storage/temporal_store.h"

namespace tlp::server {

// Where the memory thread's time went since open, seconds: it is the ingest pipeline's slower
// stage at scale, so these say what a faster pipeline has to shrink. Time waiting for work is
// not counted.
struct MemoryThreadSeconds {
  double lookup = 0;    // node ids to cache rows, evictions chosen
  double page_in = 0;   // misses' memory read from the store into rows
  double page_out = 0;  // changed memory of evicted nodes copied aside
  double apply = 0;     // the model's memory update (messages, GRU)
  double snapshot = 0;  // checkpoint copies taken (the write runs on another thread)
};

// The model as the memory thread sees it. The update runs under the model mutex; the pipeline
// knows no torch, so its locking is checked by clang (scripts/thread_safety_check.sh).
struct MemoryModel {
  bool has_memory = true;  // false: nothing to page in or read ahead (TGAT)
  uint32_t memory_dim = 0;
  // Applies one chunk's events, given their endpoints' cache rows, to node memory
  // (TemporalLinkModelImpl::ApplyEvents); throws on failure.
  std::function<void(std::span<const int64_t> src_rows, std::span<const int64_t> dst_rows,
                     std::span<const double> ts, std::span<const float> features)>
      apply;
};

struct MemoryPipelineOptions {
  int64_t memory_batch = 200;           // events per chunk
  size_t memory_queue_events = 100000;  // durable events that may wait; beyond it Queue waits
  CheckpointSchedule checkpoints;
  std::string model_tag;  // "<model fingerprint>/<memory_batch>": whose stored memory is ours
  // The memory thread runs at a lower priority (nice 10): a model being loaded beside the
  // serving one rebuilds its memory without taking cores from scoring and ingest.
  bool background = false;
  // With `background`: while `busy()` says others use the model lock (scoring), the memory
  // thread holds it at most this share of the time, sleeping after each chunk for what it held
  // times (1 - share) / share. Niceness alone does not do it: scorers wait for the lock, not
  // for a core. Unset `busy` or share 1: no pause.
  double background_lock_share = 1.0;
  std::function<bool()> busy;
};

class MemoryPipeline {
 public:
  // Borrows everything but `model`; all must outlive it. `cache` and what `model.apply` touches
  // are guarded by `model_mutex`.
  MemoryPipeline(const MemoryPipelineOptions& options, storage::TemporalStore* store,
                 MemoryModel model, NodeMemoryCache* cache, DestinationSet* destinations,
                 Mutex* model_mutex);
  ~MemoryPipeline();  // Stop()
  MemoryPipeline(const MemoryPipeline&) = delete;
  MemoryPipeline& operator=(const MemoryPipeline&) = delete;

  // Restores the stored memory checkpoint (MemoryCheckpointer::Restore) and starts the memory
  // thread. *watermark: the sequence restored memory covers; the caller queues the log after it.
  Status Start(const std::string& data_dir, bool rebuild, uint64_t* watermark);
  // Starts the memory thread at sequence 0 without reading the store: for a model loaded
  // beside the serving one, whose memory is rebuilt from the whole log (its cache is not
  // store-backed, and nothing is checkpointed until it is).
  void StartEmpty();

  // Hands events i of `batch` with !skip[i] (an empty `skip` takes all), whose sequences are
  // consecutive from first_sequence, to the memory thread, and records new destinations. Waits
  // while the queue is full. A gap after the last queued sequence fails the pipeline (INTERNAL).
  void Queue(const EventBatch& batch, uint64_t first_sequence, std::span<const uint8_t> skip = {});
  // Waits until everything queued is applied (not only complete chunks).
  Status Drain();
  // Waits until memory covers every complete chunk stored when called. Fails only when a memory
  // update failed (scores would be wrong from then on).
  Status Await();
  // Applies what is queued, then stops the memory thread, and waits for the checkpoint being
  // written. The open chunk is kept. Await returns at once from then on. Idempotent.
  void Stop();
  // After Stop: starts the memory thread again where it stopped, in the foreground (a loaded
  // model that becomes the serving one).
  void Resume();

  // Writes a memory checkpoint now (after the one in flight) and waits for it.
  Status Checkpoint();
  // Durable events not yet applied to memory (queued or in the open chunk).
  uint64_t LagEvents() const;
  MemoryProgress Progress() const;
  MemoryThreadSeconds ThreadSeconds() const;
  double SecondsSinceCheckpoint() const;
  uint64_t EventsSinceCheckpoint() const;

 private:
  // Stored events on their way to the memory thread; sequences first_sequence, +1, ...
  struct Work {
    uint64_t first_sequence = 0;
    std::vector<uint64_t> src, dst;
    std::vector<double> ts;
    std::vector<float> features;
    size_t size() const { return src.size(); }
  };
  // The read-ahead of node memory misses: the read in flight, and the last sequence of the
  // queued work read ahead so far.
  struct ReadAhead {
    std::future<std::shared_ptr<const PrefetchedStates>> reading;
    uint64_t through = 0;
    std::vector<uint64_t> nodes;
  };
  void Launch(bool background);  // starts the memory thread
  void Run();                    // the memory thread
  // Hands the read in flight to the cache (waiting for it: it covers the work about to be
  // applied), then starts reading what queued work after it will miss.
  void AdvanceReadAhead(ReadAhead* read_ahead) ABSL_LOCKS_EXCLUDED(queue_mutex_, model_mutex_);
  // Adds one work item to the open chunk, flushing at every chunk boundary.
  void Apply(const Work& work) ABSL_LOCKS_EXCLUDED(model_mutex_);
  void FlushChunk() ABSL_LOCKS_EXCLUDED(model_mutex_);
  void FlushChunkLocked() ABSL_LOCKS_EXCLUDED(model_mutex_);  // takes it

  const MemoryPipelineOptions options_;
  storage::TemporalStore* const store_;
  const MemoryModel model_;
  NodeMemoryCache* const cache_ ABSL_PT_GUARDED_BY(model_mutex_);
  DestinationSet* const destinations_;
  Mutex* const model_mutex_;
  const size_t feature_dim_;

  MemoryProgress progress_ ABSL_GUARDED_BY(model_mutex_);
  MemoryThreadSeconds seconds_ ABSL_GUARDED_BY(model_mutex_);
  MemoryCheckpointer checkpointer_;  // reads progress_

  // Writer -> memory thread hand-over.
  mutable Mutex queue_mutex_;
  CondVar work_ready_;     // queue not empty, or stopping
  CondVar room_;           // queue has room (or is empty)
  CondVar progress_made_;  // published_through_ moved, or memory failed
  std::deque<Work> queue_ ABSL_GUARDED_BY(queue_mutex_);
  std::vector<Work> spare_work_ ABSL_GUARDED_BY(queue_mutex_);  // no allocation per batch warm
  size_t queued_events_ ABSL_GUARDED_BY(queue_mutex_) = 0;
  uint64_t published_through_ ABSL_GUARDED_BY(queue_mutex_) = 0;  // = progress_.through
  uint64_t queued_through_ ABSL_GUARDED_BY(queue_mutex_) = 0;     // last sequence queued
  bool stopping_ ABSL_GUARDED_BY(queue_mutex_) = false;
  Status status_ ABSL_GUARDED_BY(queue_mutex_);  // the first memory update failure
  std::thread thread_;
  // The memory thread pauses for busy() (MemoryPipelineOptions::background_lock_share). Set by
  // Launch before the thread starts; read by that thread alone.
  bool yields_ = false;

  // The open chunk: events stored but not yet applied (memory thread only).
  std::vector<uint64_t> chunk_src_, chunk_dst_;
  std::vector<int64_t> chunk_src_rows_, chunk_dst_rows_;
  std::vector<double> chunk_ts_;
  std::vector<float> chunk_features_;
  uint64_t chunk_through_ = 0;    // sequence of the open chunk's last event
  uint64_t flushed_through_ = 0;  // = progress_.through, without the model lock
};

}  // namespace tlp::server
