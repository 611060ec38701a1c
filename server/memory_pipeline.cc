#include "server/memory_pipeline.h"

#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <system_error>
#include <thread>
#include <utility>

#include "common/stopwatch.h"
#include "common/thread_name.h"
#include "server/status_error.h"

namespace tlp::server {

MemoryPipeline::MemoryPipeline(const MemoryPipelineOptions& options, storage::TemporalStore* store,
                               MemoryModel model, NodeMemoryCache* cache,
                               DestinationSet* destinations, Mutex* model_mutex)
    : options_(options),
      store_(store),
      model_(std::move(model)),
      cache_(cache),
      destinations_(destinations),
      model_mutex_(model_mutex),
      feature_dim_(store->feature_dim()),
      checkpointer_(store, cache, destinations, model_mutex, &progress_, options.model_tag,
                    options.checkpoints) {}

MemoryPipeline::~MemoryPipeline() { Stop(); }

Status MemoryPipeline::Start(const std::string& data_dir, bool rebuild, uint64_t* watermark) {
  Status status = checkpointer_.Restore(data_dir, rebuild, model_.has_memory, watermark);
  if (!status.ok()) return status;
  {
    MutexLock lock(model_mutex_);
    progress_.events_applied = *watermark;
    progress_.through = *watermark;
  }
  chunk_through_ = *watermark;
  flushed_through_ = *watermark;
  {
    MutexLock lock(&queue_mutex_);
    published_through_ = *watermark;
    queued_through_ = *watermark;
  }
  Launch(options_.background);
  return Status::Ok();
}

void MemoryPipeline::StartEmpty() { Launch(options_.background); }

void MemoryPipeline::Resume() {
  if (thread_.joinable()) return;
  {
    MutexLock lock(&queue_mutex_);
    stopping_ = false;
  }
  Launch(false);
}

void MemoryPipeline::Launch(bool background) {
  yields_ = background && options_.busy && options_.background_lock_share < 1.0;
  thread_ = std::thread([this, background] {
    NameThisThread(background ? "tlpd-mem-load" : "tlpd-memory");
    // Per thread on Linux. Raising it back needs privileges, hence Resume's new thread.
    if (background && setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10) != 0) {
      spdlog::warn("cannot lower the priority of the model load's memory thread");
    }
    Run();
  });
}

void MemoryPipeline::Queue(const EventBatch& batch, uint64_t first_sequence,
                           std::span<const uint8_t> skip) {
  Work work;
  {
    MutexLock lock(&queue_mutex_);
    if (!spare_work_.empty()) {
      work = std::move(spare_work_.back());
      spare_work_.pop_back();
    }
  }
  work.first_sequence = first_sequence;
  work.src.clear();
  work.dst.clear();
  work.ts.clear();
  work.features.clear();
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!skip.empty() && skip[i]) continue;
    work.src.push_back(batch.src[i]);
    work.dst.push_back(batch.dst[i]);
    work.ts.push_back(batch.ts[i]);
    const auto features = batch.FeaturesOf(i);
    work.features.insert(work.features.end(), features.begin(), features.end());
  }
  const size_t events = work.size();
  if (events == 0) return;
  destinations_->Add(work.dst);
  {
    MutexLock lock(&queue_mutex_);
    // A gap would leave memory waiting for events that never come (Await would hang): fail.
    if (first_sequence != queued_through_ + 1 && status_.ok()) {
      status_ =
          Status::Internal("node memory was handed sequence " + std::to_string(first_sequence) +
                           " after " + std::to_string(queued_through_));
      spdlog::error("{}", status_.ToString());
      progress_made_.SignalAll();
      return;
    }
    queued_through_ = first_sequence + events - 1;
    while (queued_events_ != 0 && queued_events_ + events > options_.memory_queue_events) {
      room_.Wait(&queue_mutex_);
    }
    queued_events_ += events;
    queue_.push_back(std::move(work));
  }
  work_ready_.Signal();
}

Status MemoryPipeline::Drain() {
  MutexLock lock(&queue_mutex_);
  while (queued_events_ != 0) room_.Wait(&queue_mutex_);
  return status_;
}

Status MemoryPipeline::Await() {
  const auto chunk = static_cast<uint64_t>(options_.memory_batch);
  const uint64_t target = store_->last_sequence() / chunk * chunk;
  MutexLock lock(&queue_mutex_);
  while (published_through_ < target && status_.ok() && !stopping_) {
    progress_made_.Wait(&queue_mutex_);
  }
  return status_;
}

void MemoryPipeline::Stop() {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&queue_mutex_);
    stopping_ = true;
  }
  work_ready_.SignalAll();
  thread_.join();
  progress_made_.SignalAll();  // Await returns once stopped
  checkpointer_.Wait();
}

void MemoryPipeline::Run() {
  ReadAhead read_ahead;
  while (true) {
    Work work;
    Status failed;
    {
      MutexLock lock(&queue_mutex_);
      while (queue_.empty() && !stopping_) work_ready_.Wait(&queue_mutex_);
      if (queue_.empty()) return;  // stopping, and everything queued is applied
      work = std::move(queue_.front());
      queue_.pop_front();
      failed = status_;
    }
    if (failed.ok()) {
      try {
        AdvanceReadAhead(&read_ahead);
        Apply(work);
      } catch (const StatusError& error) {  // the store's own code (IO_ERROR, ...)
        failed =
            Status(error.status().code(), "node memory update failed: " + error.status().message());
        spdlog::error("{}", failed.ToString());
      } catch (const std::exception& error) {
        failed = Status::Internal(std::string("node memory update failed: ") + error.what());
        spdlog::error("{}", failed.ToString());
      }
    }
    {
      MutexLock lock(&queue_mutex_);
      queued_events_ -= work.size();
      spare_work_.push_back(std::move(work));
      published_through_ = flushed_through_;
      if (status_.ok()) status_ = failed;
    }
    room_.SignalAll();
    progress_made_.SignalAll();
    // The changed rows are copied here (a memory copy) and written on another thread, so that
    // ingest does not wait for the write.
    if (failed.ok() && checkpointer_.Due()) {
      double snapshot_seconds = 0;
      checkpointer_.Start(&snapshot_seconds);
      MutexLock lock(model_mutex_);
      seconds_.snapshot += snapshot_seconds;
    }
  }
}

void MemoryPipeline::AdvanceReadAhead(ReadAhead* read_ahead) {
  if (!model_.has_memory) return;  // nothing is read on a miss
  if (read_ahead->reading.valid()) {
    const Stopwatch watch;
    std::shared_ptr<const PrefetchedStates> read = read_ahead->reading.get();
    const double waited = watch.Seconds();
    MutexLock lock(model_mutex_);
    seconds_.page_in += waited;  // not the wait for the lock (scoring may hold it)
    if (read) cache_->AddPrefetched(std::move(read));
  }
  // Whole work items, from the first not read ahead yet, up to ~kMaxEvents; nothing under
  // kMinEvents, so that a stream of small items does not start a read for each.
  constexpr size_t kMinEvents = 1000, kMaxEvents = 10000;
  std::vector<uint64_t>& nodes = read_ahead->nodes;
  nodes.clear();
  uint64_t through = read_ahead->through;
  {
    MutexLock lock(&queue_mutex_);
    for (const Work& work : queue_) {
      const uint64_t last = work.first_sequence + work.size() - 1;
      if (last <= through) continue;
      nodes.insert(nodes.end(), work.src.begin(), work.src.end());
      nodes.insert(nodes.end(), work.dst.begin(), work.dst.end());
      through = last;
      if (nodes.size() >= 2 * kMaxEvents) break;
    }
  }
  if (nodes.size() < 2 * kMinEvents) return;
  read_ahead->through = through;
  std::vector<uint64_t> missing;
  uint64_t generation = 0;
  {
    MutexLock lock(model_mutex_);
    const Stopwatch watch;
    cache_->AppendNotResident(nodes, &missing);
    generation = cache_->generation();
    seconds_.lookup += watch.Seconds();
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (missing.empty()) return;
  auto read = [store = store_, missing = std::move(missing), generation, through,
               dim = model_.memory_dim]() {
    NameThisThread("tlpd-read-ahead");
    auto states = std::make_shared<PrefetchedStates>();
    states->generation = generation;
    states->through_sequence = through;
    states->states.Clear(dim);
    // A failed read is not an error here: its misses are read again when they happen.
    if (!store->GetNodeStates(missing, &states->states).ok()) {
      return std::shared_ptr<const PrefetchedStates>();
    }
    states->index.reserve(missing.size());
    for (size_t i = 0; i < missing.size(); ++i) states->index.emplace(missing[i], i);
    return std::shared_ptr<const PrefetchedStates>(std::move(states));
  };
  try {
    read_ahead->reading = std::async(std::launch::async, std::move(read));
  } catch (const std::system_error& error) {  // no thread for it: the misses wait for reads
    spdlog::warn("node memory read-ahead skipped: {}", error.what());
  }
}

void MemoryPipeline::Apply(const Work& work) {
  const auto chunk = static_cast<uint64_t>(options_.memory_batch);
  for (size_t i = 0; i < work.size(); ++i) {
    chunk_src_.push_back(work.src[i]);
    chunk_dst_.push_back(work.dst[i]);
    chunk_ts_.push_back(work.ts[i]);
    chunk_features_.insert(chunk_features_.end(), work.features.begin() + i * feature_dim_,
                           work.features.begin() + (i + 1) * feature_dim_);
    chunk_through_ = work.first_sequence + i;
    if (chunk_through_ % chunk == 0) FlushChunk();
  }
}

void MemoryPipeline::FlushChunk() {
  if (chunk_src_.empty()) return;
  const Stopwatch held;
  FlushChunkLocked();
  if (yields_ && options_.busy()) {
    const double share = std::max(options_.background_lock_share, 0.01);
    std::this_thread::sleep_for(
        std::chrono::duration<double>(held.Seconds() * (1.0 - share) / share));
  }
}

void MemoryPipeline::FlushChunkLocked() {
  MutexLock lock(model_mutex_);
  Stopwatch watch;
  const double paged_in = cache_->page_in_seconds(), paged_out = cache_->page_out_seconds();
  cache_->BeginOperation();
  chunk_src_rows_.resize(chunk_src_.size());
  chunk_dst_rows_.resize(chunk_dst_.size());
  Status status = cache_->Rows(chunk_src_, chunk_src_rows_);
  if (status.ok()) status = cache_->Rows(chunk_dst_, chunk_dst_rows_);
  if (!status.ok()) throw StatusError(status);
  const double page_in = cache_->page_in_seconds() - paged_in;
  const double page_out = cache_->page_out_seconds() - paged_out;
  seconds_.page_in += page_in;
  seconds_.page_out += page_out;
  seconds_.lookup += watch.Lap() - page_in - page_out;
  model_.apply(chunk_src_rows_, chunk_dst_rows_, chunk_ts_, chunk_features_);
  seconds_.apply += watch.Seconds();
  // The rows now pending (this chunk's endpoints) must stay until the next chunk commits them.
  chunk_src_rows_.insert(chunk_src_rows_.end(), chunk_dst_rows_.begin(), chunk_dst_rows_.end());
  cache_->SetPending(chunk_src_rows_);
  progress_.events_applied += chunk_src_.size();
  progress_.through = chunk_through_;
  flushed_through_ = chunk_through_;
  cache_->DropPrefetchedThrough(progress_.through);
  chunk_src_.clear();
  chunk_dst_.clear();
  chunk_ts_.clear();
  chunk_features_.clear();
}

Status MemoryPipeline::Checkpoint() { return checkpointer_.Save(); }

uint64_t MemoryPipeline::LagEvents() const {
  const uint64_t stored = store_->last_sequence();
  MutexLock lock(&queue_mutex_);
  return stored - std::min(stored, published_through_);
}

MemoryProgress MemoryPipeline::Progress() const {
  MutexLock lock(model_mutex_);
  return progress_;
}

MemoryThreadSeconds MemoryPipeline::ThreadSeconds() const {
  MutexLock lock(model_mutex_);
  return seconds_;
}

double MemoryPipeline::SecondsSinceCheckpoint() const { return checkpointer_.SecondsSince(); }

uint64_t MemoryPipeline::EventsSinceCheckpoint() const { return checkpointer_.EventsSince(); }

}  // namespace tlp::server
