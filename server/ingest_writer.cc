#include "server/ingest_writer.h"

#include <algorithm>
#include <cmath>

#include "common/stopwatch.h"
#include "common/thread_name.h"

namespace tlp::server {

IngestWriter::IngestWriter(Engine& engine, IngestWriterOptions options,
                           std::function<void(const AppendReport&)> on_append)
    : engine_(engine), options_(options), on_append_(std::move(on_append)) {
  worker_ = std::thread([this] {
    NameThisThread("tlpd-writer");
    Run();
  });
}

IngestWriter::~IngestWriter() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  worker_.join();
}

size_t IngestWriter::queued_events() const {
  std::lock_guard lock(mutex_);
  return queued_events_;
}

Status IngestWriter::Write(const EventBatch& batch, storage::AppendResult* result,
                           int64_t* retry_after_ms) {
  Submission submission{&batch, result, Status::Ok()};
  std::unique_lock lock(mutex_);
  if (stopping_) return Status::Unavailable("tlpd is shutting down; retry once it is back");
  // A batch larger than the whole queue is still taken when nothing else waits.
  if (queued_events_ > 0 && queued_events_ + batch.size() > options_.max_queued_events) {
    const auto wait_ms = static_cast<int64_t>(std::ceil(static_cast<double>(queued_events_) *
                                                        seconds_per_event_ * 1000.0)) +
                         1;
    if (retry_after_ms != nullptr) *retry_after_ms = wait_ms;
    return Status::ResourceExhausted(
        "ingest queue is full (" + std::to_string(queued_events_) + " events waiting, limit " +
        std::to_string(options_.max_queued_events) + "); nothing of this batch was stored; " +
        "retry after ~" + std::to_string(wait_ms) + " ms");
  }
  queue_.push_back(&submission);
  queued_events_ += batch.size();
  work_.notify_one();
  finished_.wait(lock, [&] { return submission.done; });
  return submission.status;
}

void IngestWriter::Run() {
  std::vector<Submission*> group;
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, and everything queued was written
    if (options_.linger.count() > 0 && !stopping_) {
      work_.wait_for(lock, options_.linger,
                     [&] { return stopping_ || queued_events_ >= options_.max_append_events; });
    }
    group.clear();
    size_t events = 0;
    while (!queue_.empty() && (group.empty() || events + queue_.front()->batch->size() <=
                                                    options_.max_append_events)) {
      events += queue_.front()->batch->size();
      group.push_back(queue_.front());
      queue_.pop_front();
    }
    queued_events_ -= events;
    lock.unlock();

    const Stopwatch watch;
    AppendGroup(group);
    const double seconds = watch.Seconds();

    lock.lock();
    if (events > 0) {
      seconds_per_event_ = 0.8 * seconds_per_event_ + 0.2 * seconds / static_cast<double>(events);
    }
    for (Submission* submission : group) submission->done = true;
    finished_.notify_all();
    if (on_append_) on_append_({group.size(), events, seconds, queued_events_});
  }
}

void IngestWriter::AppendGroup(std::span<Submission* const> group) {
  if (group.size() == 1) {
    group[0]->status = engine_.Ingest(*group[0]->batch, group[0]->result);
    return;
  }
  merged_.Clear();
  merged_.feature_dim = group[0]->batch->feature_dim;
  for (const Submission* submission : group) merged_.Append(*submission->batch);
  if (!engine_.Ingest(merged_, &merged_result_).ok()) {
    // A failed append stores nothing. Append one by one, so that only the bad submission fails
    // and its error counts events from its own start.
    for (Submission* submission : group) {
      submission->status = engine_.Ingest(*submission->batch, submission->result);
    }
    return;
  }
  size_t offset = 0;
  for (Submission* submission : group) {
    const size_t size = submission->batch->size();
    storage::AppendResult& result = *submission->result;
    const auto sequences = merged_result_.sequences.begin() + static_cast<ptrdiff_t>(offset);
    const auto duplicate = merged_result_.duplicate.begin() + static_cast<ptrdiff_t>(offset);
    result.sequences.assign(sequences, sequences + static_cast<ptrdiff_t>(size));
    result.duplicate.assign(duplicate, duplicate + static_cast<ptrdiff_t>(size));
    result.duplicates = static_cast<uint64_t>(std::count(duplicate, duplicate + size, 1));
    result.accepted = size - result.duplicates;
    submission->status = Status::Ok();
    offset += size;
  }
}

}  // namespace tlp::server
