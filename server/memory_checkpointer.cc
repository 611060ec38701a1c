#include "server/memory_checkpointer.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include "common/stopwatch.h"
#include "common/thread_name.h"

namespace tlp::server {
namespace {

constexpr const char* kMemoryModelCursor = "memory/model";
constexpr const char* kMemoryPendingCursor = "memory/pending";
constexpr const char* kDestinationsCursorPrefix = "memory/destinations/";

int64_t SteadyMilliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

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

// Everything one checkpoint writes, copied out of the live state.
struct MemoryCheckpointer::Snapshot {
  std::shared_ptr<const MemoryCheckpoint> memory;
  uint64_t watermark = 0;
  size_t destinations_from = 0;  // destinations[destinations_from...] are new to the store
  std::vector<uint64_t> destinations;
};

MemoryCheckpointer::MemoryCheckpointer(storage::TemporalStore* store, NodeMemoryCache* cache,
                                       DestinationSet* destinations, Mutex* model_mutex,
                                       const MemoryProgress* progress, std::string model_tag,
                                       CheckpointSchedule schedule)
    : store_(store),
      cache_(cache),
      destinations_(destinations),
      model_mutex_(model_mutex),
      progress_(progress),
      model_tag_(std::move(model_tag)),
      schedule_(schedule),
      written_at_ms_(SteadyMilliseconds()) {}

MemoryCheckpointer::~MemoryCheckpointer() { Wait(); }

void MemoryCheckpointer::Wait() {
  MutexLock lock(&launch_mutex_);
  if (!in_flight_.valid()) return;
  const Status status = in_flight_.get();
  if (!status.ok()) spdlog::error("memory checkpoint failed: {}", status.ToString());
}

Status MemoryCheckpointer::Restore(const std::string& data_dir, bool rebuild, bool restore_pending,
                                   uint64_t* watermark) {
  *watermark = 0;
  // Node memory used to be one file; its successor lives in the store.
  const std::string legacy = data_dir + "/memory.ckpt";
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
        destinations_->Add(nodes);
        return Status::Ok();
      });
  if (!status.ok()) return status;
  destinations_->MarkWritten(destinations_->size());
  const uint64_t stored_watermark = store_->watermark();
  if (stored_watermark == 0) return Status::Ok();
  std::string model;
  bool found = false;
  status = store_->GetCursor(kMemoryModelCursor, &model, &found);
  if (!status.ok()) return status;
  if (rebuild) {
    spdlog::info("--rebuild-memory: replaying the whole log into fresh node memory");
    return store_->ClearNodeStates();
  }
  if (!found || model != model_tag_) {
    spdlog::warn(
        "node memory in the store was made by model/chunk {}, serving {}: replaying the whole log",
        found ? model : "(unknown)", model_tag_);
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
  if (!status.ok()) return status;
  MutexLock lock(model_mutex_);
  if (restore_pending) status = cache_->RestorePending(checkpoint);
  if (!status.ok()) return status;
  snapshot_at_events_ = stored_watermark;
  *watermark = stored_watermark;
  return Status::Ok();
}

bool MemoryCheckpointer::Due() {
  if (writing_) return false;  // a due one waits its turn
  uint64_t since = 0;
  {
    MutexLock lock(model_mutex_);
    if (!cache_->store_backed()) return false;  // its memory may not replace the store's yet
    if (cache_->CheckpointDue()) return true;
    since = progress_->events_applied - snapshot_at_events_;
  }
  return (schedule_.every_events > 0 && since >= schedule_.every_events) ||
         (schedule_.every_seconds > 0 && since > 0 && SecondsSince() >= schedule_.every_seconds);
}

void MemoryCheckpointer::Start(double* snapshot_seconds) { Launch(snapshot_seconds); }

Status MemoryCheckpointer::Save() {
  double ignored = 0;
  return Launch(&ignored).get();
}

std::shared_future<Status> MemoryCheckpointer::Launch(double* snapshot_seconds) {
  MutexLock launching(&launch_mutex_);
  if (in_flight_.valid()) {
    // The next snapshot depends on whether this one reached the store (TakeCheckpoint).
    const Status previous = in_flight_.get();
    if (!previous.ok()) spdlog::error("memory checkpoint failed: {}", previous.ToString());
  }
  auto snapshot = std::make_shared<Snapshot>();
  {
    MutexLock lock(model_mutex_);
    const Stopwatch watch;
    snapshot->memory = cache_->TakeCheckpoint(written_.load());
    // Events of the open chunk are in the log but not in memory: replay covers them.
    snapshot->watermark = progress_->through;
    snapshot_at_events_ = progress_->events_applied;
    snapshot->destinations = destinations_->Unwritten(&snapshot->destinations_from);
    *snapshot_seconds += watch.Seconds();
  }
  writing_ = true;
  auto write = [this, snapshot] {
    NameThisThread("tlpd-checkpoint");
    const Status status = Write(*snapshot);
    writing_ = false;
    return status;
  };
  try {
    in_flight_ = std::async(std::launch::async, write).share();
  } catch (const std::system_error& error) {  // no thread for it: written here instead
    spdlog::warn("memory checkpoint written on the calling thread: {}", error.what());
    std::promise<Status> done;
    done.set_value(write());
    in_flight_ = done.get_future().share();
  }
  return in_flight_;
}

Status MemoryCheckpointer::Write(const Snapshot& snapshot) {
  const Stopwatch watch;
  std::vector<storage::SourceCursor> cursors = {
      {kMemoryModelCursor, model_tag_}, {kMemoryPendingCursor, EncodePending(*snapshot.memory)}};
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
  written_ = status.ok();
  if (!status.ok()) return status;
  destinations_->MarkWritten(snapshot.destinations_from + snapshot.destinations.size());
  written_at_ms_ = SteadyMilliseconds();
  spdlog::info("memory checkpoint at sequence {} ({} changed nodes, {:.2f} s)", snapshot.watermark,
               snapshot.memory->states.size(), watch.Seconds());
  return Status::Ok();
}

double MemoryCheckpointer::SecondsSince() const {
  return static_cast<double>(SteadyMilliseconds() - written_at_ms_.load()) / 1000.0;
}

uint64_t MemoryCheckpointer::EventsSince() const {
  MutexLock lock(model_mutex_);
  return progress_->events_applied - snapshot_at_events_;
}

}  // namespace tlp::server
