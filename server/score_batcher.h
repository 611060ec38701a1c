// ScoreBatcher: coalesces concurrent scoring requests into shared forward passes.
//
// Small requests from many clients are cheap to batch and expensive to run one by one (every
// forward pass has a fixed cost). A single worker collects requests until it holds
// `max_batch_pairs` pairs (or `run_at_once_pairs`) or the oldest has waited `max_wait`, scores them
// in one Engine call, and hands each caller its slice. The queue is bounded: beyond
// `max_queued_pairs` callers get RESOURCE_EXHAUSTED at once instead of piling up.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "server/engine.h"

namespace tlp::server {

struct ScoreBatcherOptions {
  size_t max_batch_pairs = 4096;
  std::chrono::microseconds max_wait{500};
  // A queue holding this many pairs runs at once: the fixed cost of a pass is then already shared
  // by enough pairs, and waiting would only add latency (a TopK over 1,000 candidates is one
  // request of 1,000 pairs).
  size_t run_at_once_pairs = 256;
  size_t max_queued_pairs = 200000;
};

class ScoreBatcher {
 public:
  // `on_batch` (optional) is told the size of every forward pass, for metrics.
  ScoreBatcher(Engine& engine, ScoreBatcherOptions options,
               std::function<void(size_t pairs)> on_batch = {});
  ~ScoreBatcher();  // fails queued requests with UNAVAILABLE, then stops the worker

  // Blocks until the queries are scored (in order) or fails as a whole. A request still queued
  // at its `deadline` is dropped unscored with DEADLINE_EXCEEDED: its caller has gone.
  Status Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores,
               std::chrono::system_clock::time_point deadline =
                   std::chrono::system_clock::time_point::max());

  size_t queued_pairs() const;

 private:
  struct Request {
    std::span<const LinkQuery> queries;
    std::vector<LinkScore>* scores;
    Status status;
    bool done = false;
    std::chrono::steady_clock::time_point arrival;
    std::chrono::system_clock::time_point deadline;
  };
  void Run();

  Engine& engine_;
  const ScoreBatcherOptions options_;
  const std::function<void(size_t)> on_batch_;
  mutable std::mutex mutex_;
  std::condition_variable work_;
  std::condition_variable finished_;
  std::deque<Request*> queue_;
  size_t queued_pairs_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace tlp::server
