#include "server/engine.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <system_error>

#include "common/stopwatch.h"
#include "common/thread_name.h"
#include "model/checkpoint.h"
#include "model/neighbor_sampler.h"
#include "model/temporal_model.h"
#include "server/store_sampler.h"

namespace tlp::server {
namespace {

int64_t SteadyMilliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::mutex Engine::model_mutex_;

Engine::~Engine() {
  StopMemoryThread();
  if (!store_ || !model_) return;
  const Status status = SaveMemoryCheckpoint();
  if (!status.ok()) spdlog::error("final memory checkpoint failed: {}", status.ToString());
}

namespace {

constexpr const char* kMemoryModelCursor = "memory/model";
constexpr const char* kMemoryPendingCursor = "memory/pending";
constexpr const char* kDestinationsCursorPrefix = "memory/destinations/";

template <typename T>
void AppendBytes(std::span<const T> values, std::string* out) {
  out->append(reinterpret_cast<const char*>(values.data()), values.size_bytes());
}

// "memory/pending": count and width (u64 each), then nodes (u64), ts (f64), raw (f32), native
// byte order (the store is local to one machine).
std::string EncodePending(const MemoryCheckpoint& checkpoint) {
  const uint64_t header[] = {checkpoint.pending_nodes.size(), checkpoint.pending_width};
  std::string out;
  AppendBytes(std::span<const uint64_t>(header), &out);
  AppendBytes(std::span<const uint64_t>(checkpoint.pending_nodes), &out);
  AppendBytes(std::span<const double>(checkpoint.pending_ts), &out);
  AppendBytes(std::span<const float>(checkpoint.pending_raw), &out);
  return out;
}

Status DecodePending(std::string_view bytes, MemoryCheckpoint* checkpoint) {
  uint64_t header[2] = {0, 0};
  if (bytes.size() < sizeof(header)) return Status::Corruption("memory/pending is truncated");
  std::memcpy(header, bytes.data(), sizeof(header));
  const uint64_t count = header[0], width = header[1];
  if (bytes.size() != sizeof(header) + count * (8 + 8 + 4 * width)) {
    return Status::Corruption("memory/pending has " + std::to_string(bytes.size()) + " bytes for " +
                              std::to_string(count) + " messages");
  }
  const char* at = bytes.data() + sizeof(header);
  checkpoint->pending_width = width;
  checkpoint->pending_nodes.resize(count);
  checkpoint->pending_ts.resize(count);
  checkpoint->pending_raw.resize(count * width);
  std::memcpy(checkpoint->pending_nodes.data(), at, count * 8);
  std::memcpy(checkpoint->pending_ts.data(), at + count * 8, count * 8);
  std::memcpy(checkpoint->pending_raw.data(), at + count * 16, count * width * 4);
  return Status::Ok();
}

}  // namespace

// Everything one memory checkpoint writes, copied out of the live state so that it can be
// written while the memory thread goes on.
struct Engine::MemorySnapshot {
  std::shared_ptr<const MemoryCheckpoint> memory;
  uint64_t watermark = 0;
  size_t destinations_from = 0;  // destinations[destinations_from...] are new to the store
  std::vector<uint64_t> destinations;
};

std::shared_ptr<const Engine::MemorySnapshot> Engine::TakeMemorySnapshot() {
  auto snapshot = std::make_shared<MemorySnapshot>();
  std::lock_guard lock(model_mutex_);
  const Stopwatch watch;
  snapshot->memory = cache_->TakeCheckpoint(checkpoint_written_.load());
  // Events of the open chunk are in the log but not in memory: replay covers them.
  snapshot->watermark = memory_through_;
  // Events applied after this are not in the snapshot; only the memory thread applies events,
  // and it is the caller (or stopped).
  checkpointed_at_events_ = events_applied_;
  snapshot->destinations = destinations_.Unwritten(&snapshot->destinations_from);
  memory_thread_seconds_.snapshot += watch.Seconds();
  return snapshot;
}

Status Engine::WriteMemorySnapshot(const MemorySnapshot& snapshot) {
  const Stopwatch watch;
  std::vector<storage::SourceCursor> cursors = {
      {kMemoryModelCursor, MemoryModelTag()},
      {kMemoryPendingCursor, EncodePending(*snapshot.memory)}};
  if (!snapshot.destinations.empty()) {
    char name[64];
    std::snprintf(name, sizeof(name), "%s%016zx", kDestinationsCursorPrefix,
                  snapshot.destinations_from);
    std::string ids;
    AppendBytes(std::span<const uint64_t>(snapshot.destinations), &ids);
    cursors.push_back({name, std::move(ids)});
  }
  const Status status =
      store_->SaveNodeStates(snapshot.memory->states, snapshot.watermark, cursors);
  checkpoint_written_ = status.ok();
  if (!status.ok()) return status;
  destinations_.MarkWritten(snapshot.destinations_from + snapshot.destinations.size());
  checkpointed_at_ms_ = SteadyMilliseconds();
  spdlog::info("memory checkpoint at sequence {} ({} changed nodes, {:.2f} s)", snapshot.watermark,
               snapshot.memory->states.size(), watch.Seconds());
  return Status::Ok();
}

std::string Engine::MemoryModelTag() const {
  return fingerprint_ + "/" + std::to_string(options_.memory_batch);
}

Status Engine::FinishBackgroundCheckpoint() {
  if (!background_checkpoint_.valid()) return Status::Ok();
  return background_checkpoint_.get();
}

Status Engine::SaveMemoryCheckpoint() {
  const Status previous = FinishBackgroundCheckpoint();
  if (!previous.ok()) spdlog::error("memory checkpoint failed: {}", previous.ToString());
  return WriteMemorySnapshot(*TakeMemorySnapshot());
}

Status Engine::LoadMemoryCheckpoint(uint64_t* watermark) {
  *watermark = 0;
  // Node memory used to be one file; its successor lives in the store.
  const std::string legacy = options_.data_dir + "/memory.ckpt";
  if (std::filesystem::exists(legacy)) {
    spdlog::warn("{} is from an older tlpd; node memory will be rebuilt from the log", legacy);
    std::error_code ignored;
    std::filesystem::remove(legacy, ignored);
  }
  Status status =
      store_->ForEachCursor(kDestinationsCursorPrefix, [&](std::string_view, std::string_view ids) {
        if (ids.size() % sizeof(uint64_t) != 0) return Status::Corruption("bad destinations");
        std::vector<uint64_t> nodes(ids.size() / sizeof(uint64_t));
        std::memcpy(nodes.data(), ids.data(), ids.size());
        destinations_.Add(nodes);
        return Status::Ok();
      });
  if (!status.ok()) return status;
  destinations_.MarkWritten(destinations_.size());
  const uint64_t stored_watermark = store_->watermark();
  if (stored_watermark == 0) return Status::Ok();
  std::string model;
  bool found = false;
  status = store_->GetCursor(kMemoryModelCursor, &model, &found);
  if (!status.ok()) return status;
  const std::string expected = MemoryModelTag();
  if (options_.rebuild_memory) {
    spdlog::info("--rebuild-memory: replaying the whole log into fresh node memory");
    return store_->ClearNodeStates();
  }
  if (!found || model != expected) {
    spdlog::warn(
        "node memory in the store was made by model/chunk {}, serving {}: replaying the whole log",
        found ? model : "(unknown)", expected);
    return store_->ClearNodeStates();
  }
  if (stored_watermark > store_->last_sequence()) {
    return Status::Corruption("memory checkpoint covers sequence " +
                              std::to_string(stored_watermark) + " but the store ends at " +
                              std::to_string(store_->last_sequence()));
  }
  std::string pending;
  status = store_->GetCursor(kMemoryPendingCursor, &pending, &found);
  if (!status.ok()) return status;
  MemoryCheckpoint checkpoint;
  if (found) status = DecodePending(pending, &checkpoint);
  if (status.ok() && model_->config().has_memory()) {
    std::lock_guard lock(model_mutex_);
    status = cache_->RestorePending(checkpoint);
  }
  if (!status.ok()) return status;
  *watermark = stored_watermark;
  events_applied_ = stored_watermark;
  applied_through_ = stored_watermark;
  memory_through_ = stored_watermark;
  checkpointed_at_events_ = stored_watermark;
  return Status::Ok();
}

Status Engine::Open(const EngineOptions& options, std::unique_ptr<Engine>* engine) {
  std::unique_ptr<Engine> result(new Engine());
  result->options_ = options;
  result->checkpointed_at_ms_ = SteadyMilliseconds();
  torch::set_num_threads(options.torch_threads);
  std::string note;
  const torch::Device device = model::ResolveDevice(options.device, &note);
  if (!note.empty()) spdlog::warn("{}", note);
  result->device_name_ = device.str();

  model::TemporalLinkModel loaded{nullptr};
  Status status = model::LoadCheckpoint(options.checkpoint, device, &loaded);
  if (!status.ok()) return status;
  loaded->eval();
  result->model_ = loaded.ptr();
  result->fingerprint_ = model::ModelFingerprint(loaded);
  spdlog::info("model {} ({}), fingerprint {}, device {}", options.checkpoint,
               loaded->config().ToString(), result->fingerprint_, result->device_name_);

  storage::StoreOptions store_options;
  store_options.feature_dim = static_cast<uint32_t>(loaded->config().edge_feature_dim);
  store_options.lateness_seconds = options.lateness_seconds;
  store_options.sync = options.sync_writes;
  store_options.neighbor_cache_bytes = options.neighbor_cache_mb << 20;
  store_options.block_cache_bytes = options.block_cache_mb << 20;
  // The neighbour cache keeps as many of a node's latest neighbours as the model reads (its
  // pair evidence reads the most): deeper lookups of active nodes would each walk RocksDB.
  const model::ModelConfig& config = loaded->config();
  store_options.cached_neighbors = static_cast<uint32_t>(
      std::max<int64_t>({store_options.cached_neighbors, config.neighbors, config.pair_neighbors}));
  status = storage::TemporalStore::Open(options.data_dir, store_options, &result->store_);
  if (!status.ok()) return status;
  // Bytes a resident row costs: its memory and last update in the model, the cache's
  // bookkeeping (owner, flags, epoch) and its hash-table entry.
  const size_t row_bytes = static_cast<size_t>(loaded->config().memory_dim) * sizeof(float) + 80;
  result->cache_ = std::make_unique<NodeMemoryCache>(*result->store_, *result->model_,
                                                     options.node_memory_cache_bytes / row_bytes);
  result->sampler_ = std::make_unique<StoreSampler>(*result->store_, *result->cache_);

  // Restore the memory checkpoint, then replay the log after it in sequence-aligned chunks
  // (see engine.h): this thread reads and decodes while the memory thread runs the model.
  const Stopwatch watch;
  uint64_t watermark = 0;
  status = result->LoadMemoryCheckpoint(&watermark);
  if (!status.ok()) return status;
  result->published_through_ = result->memory_through_;
  result->memory_thread_ = std::thread([engine = result.get()] {
    NameThisThread("tlpd-memory");
    engine->RunMemoryThread();
  });
  const uint64_t total = result->store_->last_sequence() - watermark;
  constexpr size_t kReplayBatch = 10000;
  status = result->store_->ReplayAfter(watermark, kReplayBatch,
                                       [&](const EventBatch& batch, uint64_t first) {
                                         result->QueueForMemory(batch, first);
                                         return Status::Ok();
                                       });
  if (!status.ok()) return status;
  {
    // Everything queued is applied (not only the complete chunks AwaitMemory waits for), so the
    // open chunk read below is the memory thread's final state until the next ingest.
    std::unique_lock lock(result->memory_queue_mutex_);
    result->memory_room_.wait(lock, [&] { return result->queued_memory_events_ == 0; });
    status = result->memory_status_;
  }
  if (!status.ok()) return status;
  spdlog::info(
      "restored memory at sequence {}, replayed {} events in {:.2f} s ({} in the open chunk)",
      watermark, total, watch.Seconds(), result->chunk_src_.size());
  *engine = std::move(result);
  return Status::Ok();
}

void Engine::FlushChunk() {
  if (chunk_src_.empty()) return;
#ifdef _OPENMP
  // OpenMP's thread count is per thread, and torch (and OpenBLAS) read it at each call, so this
  // limits the memory thread alone. Torch's first parallel op on a thread resets it to the
  // process-wide count, so that reset is made to happen first (once per thread). Without it the
  // first chunk of each memory thread ran on the scoring's count, and a replica restarted mid-
  // stream computed that chunk on other threads than one that never stopped: some CPUs round
  // the GRU's GEMM differently by thread count (on an AMD EPYC, last-bit differences failed
  // KafkaSourceTest.ReplicasOfOneTopicReachTheSameStateAndScores).
  at::internal::lazy_init_num_threads();
  omp_set_num_threads(options_.memory_threads);
#endif
  std::lock_guard lock(model_mutex_);
  Stopwatch watch;
  const double paged_in = cache_->page_in_seconds(), paged_out = cache_->page_out_seconds();
  cache_->BeginOperation();
  chunk_src_rows_.resize(chunk_src_.size());
  chunk_dst_rows_.resize(chunk_dst_.size());
  Status status = cache_->Rows(chunk_src_, chunk_src_rows_);
  if (status.ok()) status = cache_->Rows(chunk_dst_, chunk_dst_rows_);
  if (!status.ok()) throw std::runtime_error(status.ToString());
  const double page_in = cache_->page_in_seconds() - paged_in;
  const double page_out = cache_->page_out_seconds() - paged_out;
  MemoryThreadSeconds& seconds = memory_thread_seconds_;
  seconds.page_in += page_in;
  seconds.page_out += page_out;
  seconds.lookup += watch.Lap() - page_in - page_out;
  model_->ApplyEvents(chunk_src_rows_, chunk_dst_rows_, chunk_ts_, chunk_features_);
  seconds.apply += watch.Seconds();
  // The rows now pending (this chunk's endpoints) must stay until the next chunk commits them.
  chunk_src_rows_.insert(chunk_src_rows_.end(), chunk_dst_rows_.begin(), chunk_dst_rows_.end());
  cache_->SetPending(chunk_src_rows_);
  events_applied_ += chunk_src_.size();
  memory_through_ = applied_through_;
  cache_->DropPrefetchedThrough(memory_through_);
  chunk_src_.clear();
  chunk_dst_.clear();
  chunk_ts_.clear();
  chunk_features_.clear();
}

void Engine::QueueForMemory(const EventBatch& batch, uint64_t first_sequence,
                            std::span<const uint8_t> skip) {
  MemoryWork work;
  {
    std::lock_guard lock(memory_queue_mutex_);
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
  destinations_.Add(work.dst);
  {
    std::unique_lock lock(memory_queue_mutex_);
    memory_room_.wait(lock, [&] {
      return queued_memory_events_ == 0 ||
             queued_memory_events_ + events <= options_.memory_queue_events;
    });
    queued_memory_events_ += events;
    memory_queue_.push_back(std::move(work));
  }
  memory_work_.notify_one();
}

void Engine::AdvanceReadAhead(ReadAhead* read_ahead) {
  if (!model_->config().has_memory()) return;  // nothing is read on a miss
  if (read_ahead->reading.valid()) {
    const Stopwatch watch;
    std::shared_ptr<const PrefetchedStates> read = read_ahead->reading.get();
    const double waited = watch.Seconds();
    std::lock_guard lock(model_mutex_);
    memory_thread_seconds_.page_in += waited;  // not the wait for the lock (scoring may hold it)
    if (read) cache_->AddPrefetched(std::move(read));
  }
  // Whole work items, from the first not read ahead yet, up to ~kMaxEvents; nothing under
  // kMinEvents, so that a stream of small items does not start a read for each.
  constexpr size_t kMinEvents = 1000, kMaxEvents = 10000;
  std::vector<uint64_t>& nodes = read_ahead->nodes;
  nodes.clear();
  uint64_t through = read_ahead->through;
  {
    std::lock_guard lock(memory_queue_mutex_);
    for (const MemoryWork& work : memory_queue_) {
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
    std::lock_guard lock(model_mutex_);
    const Stopwatch watch;
    cache_->AppendNotResident(nodes, &missing);
    generation = cache_->generation();
    memory_thread_seconds_.lookup += watch.Seconds();
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (missing.empty()) return;
  const auto dim = static_cast<uint32_t>(model_->config().memory_dim);
  auto read = [this, missing = std::move(missing), generation, through, dim]() {
    NameThisThread("tlpd-read-ahead");
    auto states = std::make_shared<PrefetchedStates>();
    states->generation = generation;
    states->through_sequence = through;
    states->states.Clear(dim);
    // A failed read is not an error here: its misses are read again when they happen.
    if (!store_->GetNodeStates(missing, &states->states).ok()) {
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

void Engine::RunMemoryThread() {
  ReadAhead read_ahead;
  while (true) {
    MemoryWork work;
    Status failed;
    {
      std::unique_lock lock(memory_queue_mutex_);
      memory_work_.wait(lock, [&] { return !memory_queue_.empty() || stopping_memory_; });
      if (memory_queue_.empty()) return;  // stopping, and everything queued is applied
      work = std::move(memory_queue_.front());
      memory_queue_.pop_front();
      failed = memory_status_;
    }
    if (failed.ok()) {
      try {
        AdvanceReadAhead(&read_ahead);
        ApplyToMemory(work);
      } catch (const std::exception& error) {
        failed = Status::Internal(std::string("node memory update failed: ") + error.what());
        spdlog::error("{}", failed.ToString());
      }
    }
    {
      std::lock_guard lock(memory_queue_mutex_);
      queued_memory_events_ -= work.size();
      spare_work_.push_back(std::move(work));
      published_through_ = memory_through_;  // written by this thread only
      if (memory_status_.ok()) memory_status_ = failed;
    }
    memory_room_.notify_all();
    memory_progress_.notify_all();
    bool due = false;
    {
      std::lock_guard lock(model_mutex_);  // Score moves the cache too
      due = cache_->CheckpointDue();
    }
    const uint64_t every = options_.checkpoint_every_events;
    const uint64_t since = events_applied_ - checkpointed_at_events_;
    due = due || (every > 0 && since >= every) ||
          (options_.checkpoint_every_seconds > 0 && since > 0 &&
           SecondsSinceCheckpoint() >= options_.checkpoint_every_seconds);
    // The changed rows are copied here (a memory copy) and written on another thread, so that
    // ingest does not wait for the write; one write at a time, a due one waits its turn.
    const bool writing =
        background_checkpoint_.valid() &&
        background_checkpoint_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    if (failed.ok() && due && !writing) {
      const Status previous = FinishBackgroundCheckpoint();
      if (!previous.ok()) spdlog::error("memory checkpoint failed: {}", previous.ToString());
      background_checkpoint_ =
          std::async(std::launch::async, [this, snapshot = TakeMemorySnapshot()] {
            NameThisThread("tlpd-checkpoint");
            return WriteMemorySnapshot(*snapshot);
          });
    }
  }
}

void Engine::ApplyToMemory(const MemoryWork& work) {
  const auto chunk = static_cast<uint64_t>(options_.memory_batch);
  const size_t dim = store_->feature_dim();
  for (size_t i = 0; i < work.size(); ++i) {
    chunk_src_.push_back(work.src[i]);
    chunk_dst_.push_back(work.dst[i]);
    chunk_ts_.push_back(work.ts[i]);
    chunk_features_.insert(chunk_features_.end(), work.features.begin() + i * dim,
                           work.features.begin() + (i + 1) * dim);
    applied_through_ = work.first_sequence + i;
    if (applied_through_ % chunk == 0) FlushChunk();
  }
}

void Engine::StopMemoryThread() {
  if (!memory_thread_.joinable()) return;
  {
    std::lock_guard lock(memory_queue_mutex_);
    stopping_memory_ = true;
  }
  memory_work_.notify_all();
  memory_thread_.join();
}

Status Engine::AwaitMemory() {
  const auto chunk = static_cast<uint64_t>(options_.memory_batch);
  const uint64_t target = store_->last_sequence() / chunk * chunk;
  std::unique_lock lock(memory_queue_mutex_);
  memory_progress_.wait(lock, [&] { return published_through_ >= target || !memory_status_.ok(); });
  return memory_status_;
}

uint64_t Engine::MemoryLagEvents() const {
  const uint64_t stored = store_->last_sequence();
  std::lock_guard lock(memory_queue_mutex_);
  return stored - std::min(stored, published_through_);
}

Status Engine::CheckSelfLoop(const EventBatch& batch, size_t i) const {
  if (options_.allow_self_loops || batch.src[i] != batch.dst[i]) return Status::Ok();
  return Status::InvalidArgument(
      "event " + std::to_string(i) + ": fields 'src' and 'dst' are equal (" +
      std::to_string(batch.src[i]) + "); start tlpd with --allow-self-loops to accept them");
}

void Engine::Screen(const EventBatch& batch, std::vector<Status>* verdicts) const {
  verdicts->assign(batch.size(), Status::Ok());
  double newest = store_->max_ts();
  for (size_t i = 0; i < batch.size(); ++i) {
    Status status = CheckSelfLoop(batch, i);
    if (status.ok()) status = store_->CheckEvent(batch, i, false, &newest);
    (*verdicts)[i] = std::move(status);
  }
}

Status Engine::Ingest(const EventBatch& batch, storage::AppendResult* result,
                      std::span<const storage::SourceCursor> cursors) {
  std::lock_guard lock(ingest_mutex_);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (Status status = CheckSelfLoop(batch, i); !status.ok()) return status;
  }
  Status status = store_->Append(batch, result, cursors);
  if (!status.ok()) return status;
  if (result->accepted == 0) return Status::Ok();
  // Only newly stored events move memory, in sequence order; duplicates are skipped in place.
  // The new ones have consecutive sequences from the first of them on.
  size_t first = 0;
  while (result->duplicate[first]) ++first;
  QueueForMemory(batch, result->sequences[first], result->duplicate);
  return Status::Ok();
}

Status Engine::Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores) {
  const size_t count = queries.size();
  scores->assign(count, LinkScore());
  if (count == 0) return Status::Ok();
  if (Status status = AwaitMemory(); !status.ok()) return status;
  // Endpoint i is src of query i, endpoint count + i its dst. Each distinct (node, time) is
  // embedded once: TopK repeats its src for every candidate, and concurrent requests share
  // popular nodes.
  struct EndpointKey {
    uint64_t node;
    double at;
    bool known;
    bool operator==(const EndpointKey&) const = default;
  };
  struct EndpointHash {
    size_t operator()(const EndpointKey& key) const {
      return (std::hash<uint64_t>()(key.node) * 0x9E3779B97F4A7C15ULL ^
              std::hash<double>()(key.at)) +
             key.known;
    }
  };
  std::unordered_map<EndpointKey, int64_t, EndpointHash> position_of;
  std::vector<int64_t> endpoint_position(2 * count);
  std::vector<uint8_t> endpoint_known(2 * count);
  std::vector<uint64_t> known_nodes;    // distinct endpoints the store knows
  std::vector<size_t> known_positions;  // their positions
  std::vector<double> times;            // per position
  const double now = store_->max_ts();
  const storage::NeighborIndex& index = store_->neighbors();
  for (size_t i = 0; i < count; ++i) {
    LinkQuery query = queries[i];
    if (query.at <= 0) query.at = std::nextafter(now, INFINITY);  // "now" sees every event
    (*scores)[i].query = query;
  }
  for (size_t endpoint = 0; endpoint < 2 * count; ++endpoint) {
    const LinkQuery& query = (*scores)[endpoint % count].query;
    const uint64_t node = endpoint < count ? query.src : query.dst;
    const bool known = index.Known(node);
    endpoint_known[endpoint] = known;
    const auto [it, inserted] =
        position_of.try_emplace({node, query.at, known}, static_cast<int64_t>(times.size()));
    if (inserted) {
      if (known) {
        known_nodes.push_back(node);
        known_positions.push_back(times.size());
      }
      times.push_back(query.at);
    }
    endpoint_position[endpoint] = it->second;
  }
  try {
    std::lock_guard lock(model_mutex_);
    // Unknown nodes take row 0 (zero memory, no neighbours); known ones are paged in.
    cache_->BeginOperation();
    std::vector<int64_t> rows(times.size(), 0), known_rows(known_nodes.size());
    if (Status status = cache_->Rows(known_nodes, known_rows); !status.ok()) return status;
    for (size_t i = 0; i < known_rows.size(); ++i) rows[known_positions[i]] = known_rows[i];
    torch::NoGradGuard no_grad;
    const model::Embeddings embedded = model_->Embed(rows, times, *sampler_);
    const std::span<const int64_t> positions(endpoint_position);
    const torch::Tensor logits =
        model_
            ->PredictLinks(embedded.vectors, rows, times, positions.first(count),
                           positions.subspan(count, count), *sampler_)
            .cpu()
            .contiguous();
    // One device-to-host copy per column, then plain reads (no tensor per element).
    auto host = [](const torch::Tensor& values, torch::ScalarType type) {
      return values.to(torch::kCPU, type).contiguous();
    };
    const torch::Tensor norms = host(embedded.vectors.norm(2, 1), torch::kFloat32);
    const torch::Tensor ess = host(embedded.metrics.effective_neighbors, torch::kFloat32);
    const torch::Tensor mass = host(embedded.metrics.attention_mass, torch::kFloat32);
    const torch::Tensor entropy = host(embedded.metrics.attention_entropy, torch::kFloat32);
    const torch::Tensor used = host(embedded.metrics.neighbors_used, torch::kInt64);
    auto metrics = [&](size_t endpoint) {
      const int64_t row = endpoint_position[endpoint];
      EndpointMetrics m;
      m.representation_norm = norms.data_ptr<float>()[row];
      m.effective_neighbors = ess.data_ptr<float>()[row];
      m.attention_mass = mass.data_ptr<float>()[row];
      m.attention_entropy = entropy.data_ptr<float>()[row];
      m.neighbors_used = static_cast<uint32_t>(used.data_ptr<int64_t>()[row]);
      m.cold_start = !endpoint_known[endpoint];
      return m;
    };
    const float* logit = logits.data_ptr<float>();
    for (size_t i = 0; i < count; ++i) {
      LinkScore& score = (*scores)[i];
      score.logit = logit[i];
      score.probability = 1.0f / (1.0f + std::exp(-score.logit));
      score.src_metrics = metrics(i);
      score.dst_metrics = metrics(count + i);
    }
  } catch (const std::exception& error) {
    return Status::Internal(std::string("scoring failed: ") + error.what());
  }
  return Status::Ok();
}

std::vector<uint64_t> Engine::KnownDestinations() const {
  // Kept as events arrive: a scan of every node per TopK cost O(nodes) per call.
  return destinations_.All();
}

MemoryCacheStats Engine::MemoryCache() const {
  std::lock_guard lock(model_mutex_);
  return cache_->stats();
}

MemoryThreadSeconds Engine::MemoryThreadTime() const {
  std::lock_guard lock(model_mutex_);
  return memory_thread_seconds_;
}

Status Engine::GetNode(uint64_t node, size_t recent, NodeInfo* info) {
  *info = NodeInfo();
  info->known = store_->neighbors().Known(node);
  if (!info->known) return Status::Ok();
  if (Status status = AwaitMemory(); !status.ok()) return status;
  info->degree = store_->neighbors().Degree(node);
  Status status =
      store_->neighbors().Recent(node, INFINITY, std::max<size_t>(recent, 1), &info->recent);
  if (!status.ok()) return status;
  if (!info->recent.empty()) info->last_update_ts = info->recent.front().ts;
  if (recent == 0) info->recent.clear();
  std::lock_guard lock(model_mutex_);
  if (model_->config().has_memory()) {
    cache_->BeginOperation();
    int64_t row = 0;
    status = cache_->Rows({&node, 1}, {&row, 1});
    if (!status.ok()) return status;
    const torch::Tensor memory = model_->MemoryOf(std::vector<int64_t>{row}).contiguous();
    info->memory.assign(memory.data_ptr<float>(), memory.data_ptr<float>() + memory.numel());
  }
  return Status::Ok();
}

ModelInfo Engine::Info() const {
  ModelInfo info;
  const model::ModelConfig& config = model_->config();
  info.architecture = config.architecture;
  info.attention_p = config.attention_p;
  info.fingerprint = fingerprint_;
  info.device = device_name_;
  info.embedding_dim = static_cast<uint32_t>(config.embedding_dim);
  info.memory_dim = config.has_memory() ? static_cast<uint32_t>(config.memory_dim) : 0;
  info.edge_feature_dim = static_cast<uint32_t>(config.edge_feature_dim);
  info.neighbors = static_cast<uint32_t>(config.neighbors);
  std::lock_guard lock(model_mutex_);
  info.events_applied = events_applied_;
  info.watermark = memory_through_;
  return info;
}

double Engine::SecondsSinceCheckpoint() const {
  return static_cast<double>(SteadyMilliseconds() - checkpointed_at_ms_.load()) / 1000.0;
}

uint64_t Engine::EventsSinceCheckpoint() const {
  std::lock_guard lock(model_mutex_);
  return events_applied_ - checkpointed_at_events_;
}

}  // namespace tlp::server
