// IngestWriter: the daemon's single writer. Every ingest call (unary batch or client stream)
// hands its events here and waits until they are durable.
//
// Why one writer: the store orders events by sequence and node memory must follow that order,
// so appends are serial anyway; queueing them lets the writer group the submissions that
// arrived while the previous append was being fsynced into one WriteBatch (group commit), so
// many small clients pay for one fsync instead of one each. A submission is acknowledged only
// after the append that holds it returned OK.
//
// Back-pressure: the queue is bounded in events. A submission that does not fit gets
// RESOURCE_EXHAUSTED at once, with a retry hint, and nothing of it is stored.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "common/event_batch.h"
#include "common/status.h"
#include "server/engine.h"

namespace tlp::server {

struct IngestWriterOptions {
  // Events waiting for the writer, over all clients; beyond it, RESOURCE_EXHAUSTED.
  size_t max_queued_events = 200000;
  // Most events grouped into one append.
  size_t max_append_events = 20000;
  // How long the writer waits for more submissions after the first one of a group. 0 groups
  // only what queued up during the previous append, which costs no latency.
  std::chrono::microseconds linger{0};
};

// What the writer reports after each append, for metrics.
struct AppendReport {
  size_t submissions = 0;
  size_t events = 0;
  double seconds = 0;
  size_t queued_events = 0;  // still waiting after this append
};

class IngestWriter {
 public:
  IngestWriter(Engine& engine, IngestWriterOptions options,
               std::function<void(const AppendReport&)> on_append = {});
  ~IngestWriter();  // writes what is queued, then stops

  // Blocks until `batch` is durable and applied to memory, or rejected as a whole. Errors:
  // those of Engine::Ingest for this batch alone, RESOURCE_EXHAUSTED when the queue is full
  // (`*retry_after_ms` says when to retry), UNAVAILABLE once stopping.
  Status Write(const EventBatch& batch, storage::AppendResult* result,
               int64_t* retry_after_ms = nullptr);

  size_t queued_events() const;

 private:
  struct Submission {
    const EventBatch* batch;
    storage::AppendResult* result;
    Status status;
    bool done = false;
  };
  void Run();
  // Appends `group` (one submission as is, several merged); fills each one's status/result.
  void AppendGroup(std::span<Submission* const> group);

  Engine& engine_;
  const IngestWriterOptions options_;
  const std::function<void(const AppendReport&)> on_append_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable finished_;
  std::deque<Submission*> queue_;
  size_t queued_events_ = 0;
  double seconds_per_event_ = 5e-6;  // moving estimate, for retry hints
  bool stopping_ = false;
  // Reused by the writer thread: the merged batch and its result.
  EventBatch merged_;
  storage::AppendResult merged_result_;
  std::thread worker_;
};

}  // namespace tlp::server
