// LinkBaselines: the heuristics a user of TopK tries before a model, kept up to date as a
// stream is observed, so that every evaluation can rank the same queries with them.
//
//   kEdgeBank        1 when the source met the candidate before, else 0 (EdgeBank with
//                    unlimited memory, Poursafaei et al. 2022).
//   kEdgeBankWindow  the same, counting only meetings within `window_seconds` before the query.
//   kPopularity      the candidate's events as a destination, exponentially decayed with
//                    `half_life_seconds` (recent popularity).
//   kRecency         the source's earlier destinations first, the most recently met first; then
//                    every other candidate by decayed popularity ("recent destinations, then
//                    popular ones").
// Higher scores rank first; equal scores are ties (the evaluation counts ties half).
//
// Evidence is what Observe saw; the caller observes events in non-decreasing ts and only those
// strictly before the queries it scores, as a server's lookups are.
// Thread contract: none; one evaluation owns an instance.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace tlp {

enum class Baseline { kEdgeBank = 0, kEdgeBankWindow = 1, kPopularity = 2, kRecency = 3 };
inline constexpr int kBaselines = 4;
// "edgebank", "edgebank_window", "popularity", "recency_popularity".
const char* BaselineName(Baseline baseline);

struct BaselineOptions {
  double window_seconds = 0;     // kEdgeBankWindow's memory; 0 = unlimited
  double half_life_seconds = 0;  // kPopularity's decay; must be > 0
};

class LinkBaselines {
 public:
  explicit LinkBaselines(const BaselineOptions& options);

  void Observe(uint64_t src, uint64_t dst, double ts);

  // (*scores)[i] is candidates[i]'s score for a link from `src` at time `at` (>= every
  // observed ts). Resizes *scores; allocates nothing once it has the capacity.
  void Score(Baseline baseline, uint64_t src, double at, std::span<const uint64_t> candidates,
             std::vector<double>* scores) const;

 private:
  struct Decayed {
    double value = 0;  // decayed count at `ts`
    double ts = 0;
  };
  double PopularityAt(uint64_t dst, double at) const;

  BaselineOptions options_;
  double decay_per_second_;  // ln 2 / half-life
  // src -> (dst -> ts of their last meeting).
  std::unordered_map<uint64_t, std::unordered_map<uint64_t, double>> last_met_;
  std::unordered_map<uint64_t, Decayed> popularity_;
};

}  // namespace tlp
