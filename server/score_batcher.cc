#include "server/score_batcher.h"

#include <algorithm>

#include "common/thread_name.h"

namespace tlp::server {

ScoreBatcher::ScoreBatcher(Engine& engine, ScoreBatcherOptions options,
                           std::function<void(size_t)> on_batch)
    : engine_(engine), options_(options), on_batch_(std::move(on_batch)) {
  worker_ = std::thread([this] {
    NameThisThread("tlpd-scorer");
    Run();
  });
}

ScoreBatcher::~ScoreBatcher() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_.notify_all();
  worker_.join();
}

size_t ScoreBatcher::queued_pairs() const {
  std::lock_guard lock(mutex_);
  return queued_pairs_;
}

Status ScoreBatcher::Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores,
                           std::chrono::system_clock::time_point deadline) {
  Request request{queries, scores, Status::Ok(), false, std::chrono::steady_clock::now(), deadline};
  std::unique_lock lock(mutex_);
  if (stopping_) return Status::Unavailable("tlpd is shutting down");
  if (queued_pairs_ + queries.size() > options_.max_queued_pairs && queued_pairs_ > 0) {
    return Status::ResourceExhausted("scoring queue is full (" + std::to_string(queued_pairs_) +
                                     " pairs waiting); retry after a short backoff");
  }
  queue_.push_back(&request);
  queued_pairs_ += queries.size();
  work_.notify_one();
  finished_.wait(lock, [&] { return request.done; });
  return request.status;
}

void ScoreBatcher::Run() {
  std::vector<Request*> taken;
  std::vector<LinkQuery> queries;
  std::vector<LinkScore> scores;
  std::unique_lock lock(mutex_);
  while (true) {
    work_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) break;
    // Wait for more work until the batch is large enough or the oldest request waited enough.
    const auto deadline = queue_.front()->arrival + options_.max_wait;
    const size_t enough = std::min(options_.max_batch_pairs, options_.run_at_once_pairs);
    work_.wait_until(lock, deadline, [&] { return stopping_ || queued_pairs_ >= enough; });
    if (stopping_) break;
    taken.clear();
    size_t pairs = 0;
    const auto now = std::chrono::system_clock::now();
    while (!queue_.empty() &&
           (taken.empty() || pairs + queue_.front()->queries.size() <= options_.max_batch_pairs)) {
      Request* request = queue_.front();
      queue_.pop_front();
      queued_pairs_ -= request->queries.size();
      if (request->deadline <= now) {
        request->status = Status::DeadlineExceeded("the request's deadline passed while queued");
        request->done = true;
        finished_.notify_all();
        continue;
      }
      taken.push_back(request);
      pairs += request->queries.size();
    }
    if (taken.empty()) continue;
    lock.unlock();
    queries.clear();
    for (const Request* request : taken) {
      queries.insert(queries.end(), request->queries.begin(), request->queries.end());
    }
    const Status status = engine_.Score(queries, &scores);
    if (on_batch_) on_batch_(queries.size());
    lock.lock();
    size_t offset = 0;
    for (Request* request : taken) {
      request->status = status;
      if (status.ok()) {
        request->scores->assign(scores.begin() + offset,
                                scores.begin() + offset + request->queries.size());
      }
      offset += request->queries.size();
      request->done = true;
    }
    finished_.notify_all();
  }
  for (Request* request : queue_) {
    request->status = Status::Unavailable("tlpd is shutting down");
    request->done = true;
  }
  queue_.clear();
  finished_.notify_all();
}

}  // namespace tlp::server
