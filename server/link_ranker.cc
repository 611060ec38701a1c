#include "server/link_ranker.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace tlp::server {
namespace {

// Best first; equal scores by node id, so that the order does not depend on the candidates'.
bool Before(const LinkScore& a, const LinkScore& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.query.dst < b.query.dst);
}

}  // namespace

Status LinkRanker::Shortlist(const RankQuery& query, std::vector<uint64_t>* candidates) const {
  const size_t keep = std::max<size_t>(shortlist_, query.k);
  if (shortlist_ == 0 || candidates->size() <= keep) return Status::Ok();
  RankQuery first_stage = query;
  first_stage.baseline = Baseline::kRecency;
  std::vector<LinkScore> scores;
  if (Status status = ScoreByBaseline(first_stage, *candidates, &scores); !status.ok()) {
    return status;
  }
  std::partial_sort(scores.begin(), scores.begin() + keep, scores.end(), Before);
  candidates->resize(keep);
  for (size_t i = 0; i < keep; ++i) (*candidates)[i] = scores[i].query.dst;
  return Status::Ok();
}

Status LinkRanker::Rank(const RankQuery& query, const ScoreFunction& score,
                        RankResult* result) const {
  result->top.clear();
  result->candidates_scored = 0;
  result->model = 0;
  std::vector<uint64_t> candidates =
      query.candidates.empty() ? engine_.KnownDestinations() : query.candidates;
  if (query.exclude_seen) {
    // The whole history before `at`: the node's degree bounds it (and the buffer it needs).
    std::vector<storage::Neighbor> history;
    const uint64_t degree = engine_.store().neighbors().Degree(query.src);
    Status status = engine_.store().neighbors().Recent(
        query.src, query.at > 0 ? query.at : INFINITY, std::max<uint64_t>(degree, 1), &history);
    if (!status.ok()) return status;
    std::unordered_set<uint64_t> seen;
    for (const auto& neighbor : history) seen.insert(neighbor.node);
    std::erase_if(candidates, [&](uint64_t node) { return seen.contains(node); });
  }
  std::vector<LinkScore>& scores = result->top;
  if (query.baseline) {
    Status status = ScoreByBaseline(query, candidates, &scores);
    if (!status.ok()) return status;
  } else {
    if (Status status = Shortlist(query, &candidates); !status.ok()) return status;
    std::vector<LinkQuery> queries;
    queries.reserve(candidates.size());
    for (uint64_t candidate : candidates) queries.push_back({query.src, candidate, query.at});
    std::vector<LinkScore> part;
    // Pages scored by different models (a swap came between them) are scored again: a ranking
    // compares the scores of one model.
    constexpr int kAttempts = 3;
    for (int attempt = 1;; ++attempt) {
      scores.clear();
      for (size_t begin = 0; begin < queries.size(); begin += max_score_pairs_) {
        const size_t size = std::min(max_score_pairs_, queries.size() - begin);
        Status status = score(std::span(queries).subspan(begin, size), &part);
        if (!status.ok()) return status;
        scores.insert(scores.end(), part.begin(), part.end());
      }
      if (std::all_of(scores.begin(), scores.end(),
                      [&](const LinkScore& s) { return s.model == scores.front().model; })) {
        break;
      }
      if (attempt == kAttempts) {
        return Status::Unavailable("the model was swapped during every ranking attempt; retry");
      }
    }
    if (!scores.empty()) result->model = scores.front().model;
  }
  result->candidates_scored = scores.size();
  const size_t keep = std::min<size_t>(query.k, scores.size());
  std::partial_sort(scores.begin(), scores.begin() + keep, scores.end(), Before);
  scores.resize(keep);
  return Status::Ok();
}

Status LinkRanker::ScoreByBaseline(const RankQuery& query, std::span<const uint64_t> candidates,
                                   std::vector<LinkScore>* scores) const {
  const storage::NeighborIndex& index = engine_.store().neighbors();
  const double before = query.at > 0 ? query.at : INFINITY;
  // The evidence: src's whole history, and each candidate's latest interactions (as deep as the
  // neighbour cache keeps, so no RocksDB walk per candidate).
  std::vector<storage::Neighbor> history;
  Status status =
      index.Recent(query.src, before, std::max<uint64_t>(index.Degree(query.src), 1), &history);
  if (!status.ok()) return status;
  storage::NeighborLists lists;
  const std::vector<double> times(candidates.size(), before);
  const size_t depth = index.cached_per_node();
  status = index.RecentBatch(candidates, times, depth, &lists);
  if (!status.ok()) return status;
  // Oldest first overall: LinkBaselines decays each destination's popularity forward in time.
  struct Event {
    double ts;
    uint64_t src, dst;
  };
  std::vector<Event> events;
  for (const storage::Neighbor& neighbor : history) {
    events.push_back({neighbor.ts, query.src, neighbor.node});
  }
  for (size_t i = 0; i < candidates.size(); ++i) {
    for (size_t slot = 0; slot < lists.counts[i]; ++slot) {
      const storage::Neighbor& neighbor = lists.neighbors[i * depth + slot];
      // src's own meetings are in `history` already.
      if (neighbor.node != query.src) events.push_back({neighbor.ts, neighbor.node, candidates[i]});
    }
  }
  std::sort(events.begin(), events.end(),
            [](const Event& a, const Event& b) { return a.ts < b.ts; });
  LinkBaselines baselines(
      {.window_seconds = 0, .half_life_seconds = kServedPopularityHalfLifeSeconds});
  for (const Event& event : events) baselines.Observe(event.src, event.dst, event.ts);
  const double now = query.at > 0 ? query.at : (events.empty() ? 0 : events.back().ts);
  std::vector<double> values;
  baselines.Score(*query.baseline, query.src, now, candidates, &values);
  scores->resize(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    LinkScore& out = (*scores)[i];
    out = LinkScore();
    out.query = {query.src, candidates[i], now};
    out.logit = static_cast<float>(values[i]);
  }
  return Status::Ok();
}

}  // namespace tlp::server
