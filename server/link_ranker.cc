#include "server/link_ranker.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

namespace tlp::server {

Status LinkRanker::Rank(const RankQuery& query, const ScoreFunction& score,
                        RankResult* result) const {
  result->top.clear();
  result->candidates_scored = 0;
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
  std::vector<LinkQuery> queries;
  queries.reserve(candidates.size());
  for (uint64_t candidate : candidates) queries.push_back({query.src, candidate, query.at});
  std::vector<LinkScore>& scores = result->top;
  std::vector<LinkScore> part;
  for (size_t begin = 0; begin < queries.size(); begin += max_score_pairs_) {
    const size_t size = std::min(max_score_pairs_, queries.size() - begin);
    Status status = score(std::span(queries).subspan(begin, size), &part);
    if (!status.ok()) return status;
    scores.insert(scores.end(), part.begin(), part.end());
  }
  result->candidates_scored = scores.size();
  const size_t keep = std::min<size_t>(query.k, scores.size());
  std::partial_sort(scores.begin(), scores.begin() + keep, scores.end(),
                    [](const LinkScore& a, const LinkScore& b) {
                      return a.logit > b.logit || (a.logit == b.logit && a.query.dst < b.query.dst);
                    });
  scores.resize(keep);
  return Status::Ok();
}

}  // namespace tlp::server
