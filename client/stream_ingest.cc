#include "client/stream_ingest.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace tlp::client {

BatchSource ReaderSource(EventReader& reader) {
  return [&reader](size_t max_events, EventBatch* batch) { return reader.Next(max_events, batch); };
}

BatchSource GeneratorSource(GraphGenerator& generator) {
  return [&generator](size_t max_events, EventBatch* batch) {
    generator.Next(max_events, batch);
    return Status::Ok();
  };
}

Status IngestStream(DaemonClient& client, const BatchSource& source,
                    const StreamIngestOptions& options,
                    const std::function<void(const StreamIngestTotals&)>& progress,
                    StreamIngestTotals* totals) {
  *totals = StreamIngestTotals();
  const size_t streams = std::max<size_t>(options.streams, 1);
  struct Work {
    EventBatch batch;
    uint64_t first = 0;
  };
  std::mutex mutex;
  std::condition_variable ready, room;
  std::deque<Work> queue;
  bool finished_reading = false;
  Status failure;

  auto send = [&] {
    while (true) {
      Work work;
      {
        std::unique_lock lock(mutex);
        ready.wait(lock, [&] { return !queue.empty() || finished_reading || !failure.ok(); });
        if (!failure.ok() || queue.empty()) return;
        work = std::move(queue.front());
        queue.pop_front();
      }
      room.notify_one();
      tlp::v1::IngestSummary summary;
      const Status status = client.IngestBatch(work.batch, work.first, &summary);
      std::lock_guard lock(mutex);
      if (!status.ok()) {
        if (failure.ok()) failure = status;
        ready.notify_all();
        room.notify_all();
        return;
      }
      totals->sent += work.batch.size();
      totals->accepted += summary.accepted();
      totals->duplicates += summary.duplicates();
      if (progress) progress(*totals);
    }
  };
  std::vector<std::thread> senders;
  for (size_t i = 0; i < streams; ++i) senders.emplace_back(send);

  uint64_t position = 0;
  Status read_status;
  while (true) {
    Work work;
    read_status = source(options.batch_size, &work.batch);
    if (!read_status.ok() || work.batch.empty()) break;
    work.first = position;
    position += work.batch.size();
    std::unique_lock lock(mutex);
    // One parsed batch waits per sender: enough to keep them busy, bounded memory.
    room.wait(lock, [&] { return queue.size() < streams || !failure.ok(); });
    if (!failure.ok()) break;
    queue.push_back(std::move(work));
    ready.notify_one();
  }
  {
    std::lock_guard lock(mutex);
    finished_reading = true;
    if (!read_status.ok() && failure.ok()) failure = read_status;
  }
  ready.notify_all();
  for (std::thread& sender : senders) sender.join();
  return failure;
}

}  // namespace tlp::client
