// LinkRanker: TopK's logic, the same for the gRPC service and the in-process evaluation.
//
// Ranks destination candidates for one source at one time by the model's logit (or a
// baseline's score, for A/B comparisons through the same API): the default
// candidates are every node the engine has seen as a destination; `exclude_seen` drops every
// destination the source met before `at`; candidates are scored in chunks of at most
// `max_score_pairs` through the caller's scoring function (the service's batcher, or the engine
// directly); ties are broken by node id so the result does not depend on the candidates' order.
//
// Errors: the scoring function's or the store's Status, unchanged.
// Thread contract: Rank is const and may run on any number of threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "common/link_baselines.h"
#include "common/status.h"
#include "server/engine.h"

namespace tlp::server {

struct RankQuery {
  uint64_t src = 0;
  double at = 0;                     // 0 = now
  uint32_t k = 10;                   // results kept, best first
  std::vector<uint64_t> candidates;  // empty = every destination seen so far
  bool exclude_seen = false;
  // Set: rank with this built-in baseline (common/link_baselines.h) instead of the model, from
  // the neighbour index: src's whole history before `at`, each candidate's latest interactions.
  std::optional<Baseline> baseline;
};

// Popularity's half-life for served baselines.
inline constexpr double kServedPopularityHalfLifeSeconds = 86400;

struct RankResult {
  std::vector<LinkScore> top;  // at most k, best first
  size_t candidates_scored = 0;
  uint64_t model = 0;  // fingerprint of the model that scored them all; 0 for a baseline
};

using ScoreFunction = std::function<Status(std::span<const LinkQuery>, std::vector<LinkScore>*)>;

class LinkRanker {
 public:
  // `engine` must outlive the ranker. shortlist: 0 = the model scores every candidate.
  LinkRanker(const Engine& engine, size_t max_score_pairs, size_t shortlist = 0)
      : engine_(engine), max_score_pairs_(max_score_pairs), shortlist_(shortlist) {}

  Status Rank(const RankQuery& query, const ScoreFunction& score, RankResult* result) const;

 private:
  // query.baseline's scores of `candidates` into *scores (LinkScore.logit).
  Status ScoreByBaseline(const RankQuery& query, std::span<const uint64_t> candidates,
                         std::vector<LinkScore>* scores) const;
  // Keeps the max(shortlist_, k) candidates the recency-then-popularity baseline ranks first.
  Status Shortlist(const RankQuery& query, std::vector<uint64_t>* candidates) const;
  const Engine& engine_;
  size_t max_score_pairs_;
  size_t shortlist_;
};

}  // namespace tlp::server
