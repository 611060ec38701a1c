// ReadEventLog: a tlpd store's event log as one batch, for training on what a daemon ingested.
//
// It opens the store as a RocksDB secondary instance (its own info log in a temporary
// directory, removed afterwards): it takes no lock and writes nothing in the store, so it runs
// from another process while the daemon keeps serving and never blocks it, and it sees every
// event the daemon acknowledged, whether flushed to table files or still only in the write-ahead
// log. A store no daemon has open reads the same way.
//
// Thread contract: a free function with no shared state; any number may run at once.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/event_batch.h"
#include "common/status.h"

namespace tlp::storage {

// Which events to read. Both are lower bounds; the window is where they overlap.
struct EventLogWindow {
  // Only events with ts >= since_ts (unset: from the first).
  std::optional<double> since_ts;
  // Only the newest `last_events` events by arrival (0 = all).
  uint64_t last_events = 0;
};

struct EventLogRead {
  uint64_t last_sequence = 0;  // the newest stored event's sequence (0 = empty store)
  uint64_t late_events = 0;    // events stored after a newer ts (within the lateness window)
};

// Fills `events` (cleared first; the store's feature width, features and event ids kept) with
// the window's events in time order: the stored order, except that an event accepted late
// moves back to its ts (a stable sort, so equal ts keep their arrival order). NOT_FOUND when
// `store_path` holds no store; CORRUPTION for a damaged event or a directory that is not a
// tlpd store; IO_ERROR for RocksDB's other failures. `read` may be null.
Status ReadEventLog(const std::string& store_path, const EventLogWindow& window, EventBatch* events,
                    EventLogRead* read = nullptr);

}  // namespace tlp::storage
