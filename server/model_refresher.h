// ModelRefresher: scheduled model refresh while serving. Every `every_events` stored events or
// `every_hours` (whichever comes first), or when asked (RefreshNow), it retrains the serving
// model's architecture on the newest events of the daemon's own log and promotes the new model
// (Engine::LoadModel: shadow replay, then swap) only when it ranks the newest held-back events
// better than the serving model, one-vs-all MRR on the same queries and candidates.
//
// The training runs as a child process, `tlpd train --from-store DATA_DIR --config-from
// SERVING --compare-checkpoint SERVING`, at a lower CPU priority: it reads the log through a
// RocksDB secondary instance, so it never blocks ingest, and its torch threads and memory stay
// out of the serving process (one process-wide lock guards the serving model's BLAS calls).
// The comparison is the train command's test period: the newest 15 % of the window by time,
// which the candidate never trains on. When refreshes come more often than that period is
// long, the serving model may have trained on part of it; that favours keeping it.
//
// Thread contract: Start once; RefreshNow and GetStatus from any thread; the destructor stops
// a running training (SIGTERM) and joins.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "common/status.h"
#include "server/engine.h"

namespace tlp::server {

struct RefreshOptions {
  uint64_t every_events = 0;  // stored events between refreshes; 0 = no event trigger
  double every_hours = 0;     // hours between refreshes (when events came); 0 = no time trigger
  uint64_t window_events = 1000000;  // the newest events it trains on (0 = the whole log)
  int64_t epochs = 6;                // at most, with early stopping on validation MRR
  int64_t ranking_queries = 1000;    // held-back events ranked one-vs-all for the comparison
  // The candidate is promoted when its MRR exceeds the serving model's by more than this.
  double min_gain = 0;
  int threads = 1;                         // the training's torch threads
  int nice = 10;                           // added to the training process's niceness
  std::string program = "/proc/self/exe";  // the tlpd binary that trains
};

// Where the refresher is, and what its last refresh found.
struct RefreshStatus {
  bool running = false;
  uint64_t refreshes = 0, promotions = 0, failures = 0;
  // The last refresh that finished.
  std::string last_outcome;  // "promoted", "kept" or "failed" (empty before the first)
  std::string last_error;    // why it failed
  double candidate_mrr = 0, serving_mrr = 0;
  uint64_t held_back_queries = 0;
  std::string candidate_fingerprint, serving_fingerprint;
  double last_seconds = 0;  // its training and comparison
};

class ModelRefresher {
 public:
  // `engine` outlives the refresher. `work_dir` holds the candidate, its run JSON and log.
  ModelRefresher(Engine& engine, std::string data_dir, RefreshOptions options);
  ~ModelRefresher();
  ModelRefresher(const ModelRefresher&) = delete;
  ModelRefresher& operator=(const ModelRefresher&) = delete;

  // Starts the schedule thread (a refresh starts only when a trigger or RefreshNow says so).
  void Start();
  // Starts a refresh now. FAILED_PRECONDITION while one runs (a training or a model load).
  Status RefreshNow() ABSL_LOCKS_EXCLUDED(mutex_);
  RefreshStatus GetStatus() const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  void Loop() ABSL_LOCKS_EXCLUDED(mutex_);
  // One refresh: train, compare, promote. Fills the outcome fields of *status.
  Status RunOnce(RefreshStatus* status) ABSL_LOCKS_EXCLUDED(mutex_);
  // Runs the training child; OK when it exited 0.
  Status RunTraining(const std::string& serving_checkpoint, const std::string& candidate,
                     const std::string& json, const std::string& log) ABSL_LOCKS_EXCLUDED(mutex_);
  // Waits for the training process without holding the mutex.
  Status AwaitTraining(pid_t pid, const std::string& log) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  Engine& engine_;
  const std::string data_dir_;
  const RefreshOptions options_;
  std::thread thread_;

  mutable Mutex mutex_;
  CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mutex_) = false;
  bool requested_ ABSL_GUARDED_BY(mutex_) = false;
  pid_t child_ ABSL_GUARDED_BY(mutex_) = 0;  // the training process while it runs
  RefreshStatus status_ ABSL_GUARDED_BY(mutex_);
};

}  // namespace tlp::server
