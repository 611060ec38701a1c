// ReplayEvaluation: link prediction figures measured the way a deployed tlpd is used: replay
// an event stream into a serving target and score each test event before the target sees it.
//
// It is the protocol shared by `tlpctl eval` (a running daemon over gRPC) and `tlpd eval
// --replay` (the same engine in process), so both report the same numbers for the same
// checkpoint; a test checks that they do.
//
// Protocol, for a stream sorted by ts:
//   1. History: the events before the test period (ts <= the 0.85 quantile, the boundary of
//      the offline protocol's test period) are ingested, in order.
//   2. Test period, in batches that end on the target's memory chunks (`batch_size`, equal to
//      tlpd's chunk of 200 sequences): ingest every event of the batch but its last, score every
//      positive (src, dst, ts) and two negatives per positive: "random" (same src, a
//      destination drawn uniformly from those seen so far) and "historical" (an edge seen
//      before that is not in this batch, else a random one); the first `mrr_queries` positives
//      are also ranked against `mrr_negatives` random destinations; the first
//      `ranking_queries` positives are ranked one-vs-all by the target's TopK over its default
//      candidates (every destination it has seen), and by each built-in baseline
//      (common/link_baselines.h) over the same candidates. Then ingest the last event.
//      So each query sees every event before its time as a neighbour (lookups are strictly
//      before `at`) and node memory through the previous batch, as in the offline protocol and
//      as in a live deployment, and never the event it scores. The baselines see every event
//      strictly before the query's time: the evidence a server's neighbour lookups see.
// One-vs-all ranks count ties half; a true destination that is no candidate (new to the
// target) counts as reciprocal rank 0 for every method, and so does one beyond the `ranking_k`
// ranks the target returns (an error below 1 / ranking_k per query).
// Unlike `tlpd eval` (the TGN/DyGLib offline protocol) no node is held out of the history,
// because a server cannot un-see what it stored; the figures are therefore transductive.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/event_batch.h"
#include "common/link_baselines.h"
#include "common/link_metrics.h"
#include "common/status.h"

namespace tlp {

struct PairQuery {
  uint64_t src = 0, dst = 0;
  double at = 0;
};

struct PairScore {
  float logit = 0;
  float src_norm = 0, dst_norm = 0;  // representation norms of the two endpoints
};

struct RankedDestination {
  uint64_t dst = 0;
  float logit = 0;
};

// Where the replay goes: a daemon over gRPC, or an engine in process.
class ReplayTarget {
 public:
  virtual ~ReplayTarget() = default;
  // Makes events [first, first + events.size()) of the stream durable; `first` lets a target
  // derive idempotent event ids. Returns the target's last sequence after it in *last_sequence.
  virtual Status Ingest(const EventBatch& events, uint64_t first, uint64_t* last_sequence) = 0;
  virtual Status Score(std::span<const PairQuery> queries, std::vector<PairScore>* scores) = 0;
  // TopK: the `k` best of the target's default candidates for `src` at `at`, best first.
  virtual Status TopK(uint64_t src, double at, uint32_t k,
                      std::vector<RankedDestination>* ranked) = 0;
};

struct ReplayOptions {
  size_t batch_size = 200;         // must equal the target's memory chunk (tlpd: 200)
  size_t history_batch = 10000;    // events per ingest call for the history
  size_t max_score_pairs = 10000;  // pairs per Score call (at most the daemon's --max-score-pairs)
  uint64_t seed = 0;
  int64_t mrr_queries = 2000;
  int64_t mrr_negatives = 100;
  int64_t ranking_queries = -1;  // test positives ranked one-vs-all; -1 = all, 0 = none
  uint32_t ranking_k = 1000;     // TopK's k (at most the daemon's --max-k)
  double test_quantile = 0.85;
  // Called after each step with (events done, events in all) for progress display.
  std::function<void(uint64_t, uint64_t)> progress;
};

struct ReplayReport {
  uint64_t history_events = 0, test_events = 0;
  LinkFigures random, historical;
  double mrr = 0;
  int64_t mrr_queries = 0;
  // One-vs-all: the target's TopK, then each baseline (indexed by Baseline), on the same queries.
  RankingFigures ranking;
  RankingFigures baselines[kBaselines];
  int64_t unrankable = 0;      // queries whose destination was no candidate
  double candidates_mean = 0;  // mean candidates per ranking query
  double ranking_seconds = 0;  // the TopK calls'
  BaselineOptions baseline_options;
  double mean_representation_norm = 0;  // over test positives' endpoints
  double seconds = 0, scored_pairs_per_second = 0;
  // Logits of every test positive and of its random negative, for plots.
  std::vector<float> positive_logits, negative_logits;
};

// Runs the protocol above. The target must not hold events beyond this stream's prefix:
// FAILED_PRECONDITION when the history leaves its sequence anywhere but at the history size.
Status RunReplayEvaluation(const EventBatch& stream, const ReplayOptions& options,
                           ReplayTarget& target, ReplayReport* report);

// The results as a table for people (fixed width, one line per figure).
std::string FormatReplayReport(const ReplayReport& report);
// The results as JSON (figures only; not the logits).
std::string ReplayReportJson(const ReplayReport& report);

}  // namespace tlp
