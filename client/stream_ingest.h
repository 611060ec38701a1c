// IngestStream: sends a stream of events (a file, a generator) to tlpd with several requests in
// flight.
//
// One synchronous request at a time leaves both sides idle half the time: the client parses the
// next batch only after the daemon acknowledged the last one, and the daemon waits for it. Here
// the calling thread reads and parses batches while `streams` senders keep that many IngestBatch
// requests open; the daemon's writer groups concurrent ones into one durable append.
//
// Order: batches leave in file order, but with streams > 1 a later batch may be stored before an
// earlier one, so events can reach tlpd up to `streams` batches out of order; that spread (in
// event time) must fit within tlpd's --lateness-seconds, or the late batch is refused. Event ids
// are "<prefix>:<position in the file>", so a re-run stores nothing twice whatever the order.
#pragma once

#include <cstdint>
#include <functional>

#include "client/daemon_client.h"
#include "common/event_reader.h"
#include "common/graph_generator.h"
#include "common/status.h"

namespace tlp::client {

struct StreamIngestOptions {
  size_t batch_size = 5000;  // events per IngestBatch
  size_t streams = 1;        // requests in flight
};

struct StreamIngestTotals {
  uint64_t sent = 0;  // events acknowledged (stored or found to be duplicates)
  uint64_t accepted = 0;
  uint64_t duplicates = 0;
};

// Fills a batch with up to `max_events` next events; an empty batch ends the stream.
// EventReader::Next and GraphGenerator::Next fit.
using BatchSource = std::function<Status(size_t max_events, EventBatch* batch)>;

// Sources over a file reader and a synthetic generator (each must outlive the source).
BatchSource ReaderSource(EventReader& reader);
BatchSource GeneratorSource(GraphGenerator& generator);

// Sends everything `source` yields. On the first failure (a read error or a refused request)
// stops sending and returns it; `totals` then counts what was acknowledged before. `progress`
// (optional) is called after each acknowledged batch, from a sender thread, one call at a time.
Status IngestStream(DaemonClient& client, const BatchSource& source,
                    const StreamIngestOptions& options,
                    const std::function<void(const StreamIngestTotals&)>& progress,
                    StreamIngestTotals* totals);

}  // namespace tlp::client
