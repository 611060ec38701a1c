// LoadGenerator: `tlpctl bench`. Closed- or open-loop load on a running tlpd over loopback:
// N concurrent callers issue ScoreLinks or TopK requests until a duration or a request count is
// reached, optionally at a fixed total rate, and the latencies are summarised as percentiles.
//
// With a rate, each caller's latency is measured from when its request was due, not from when
// it was sent, so a stalled server shows up in the percentiles (no coordinated omission).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "client/daemon_client.h"
#include "common/status.h"

namespace tlp::client {

struct LoadOptions {
  std::string kind = "score";  // score (ScoreLinks) or topk (TopK over all destinations)
  int concurrency = 16;
  double duration_seconds = 10;
  uint64_t max_requests = 1000000;
  double rate = 0;   // requests per second over all callers; 0 = as fast as answered
  size_t pairs = 1;  // pairs per ScoreLinks request
  uint32_t k = 10;   // TopK
  uint64_t seed = 0;
  // Pairs to draw from (e.g. a stream's events); empty = ids drawn from 1..1000.
  std::vector<uint64_t> sources, destinations;
};

struct LoadReport {
  uint64_t requests = 0, failures = 0;
  std::map<std::string, uint64_t> failures_by_code;
  double seconds = 0;
  double requests_per_second = 0, pairs_per_second = 0;
  double p50_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
};

// Refuses addresses that are not loopback: the generator is for measuring, not for load on
// someone else's machine.
Status RunLoad(DaemonClient& client, const LoadOptions& options, LoadReport* report);

}  // namespace tlp::client
