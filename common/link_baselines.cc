#include "common/link_baselines.h"

#include <algorithm>
#include <cmath>

namespace tlp {

const char* BaselineName(Baseline baseline) {
  switch (baseline) {
    case Baseline::kEdgeBank:
      return "edgebank";
    case Baseline::kEdgeBankWindow:
      return "edgebank_window";
    case Baseline::kPopularity:
      return "popularity";
    case Baseline::kRecency:
      return "recency_popularity";
  }
  return "unknown";
}

LinkBaselines::LinkBaselines(const BaselineOptions& options)
    : options_(options), decay_per_second_(std::log(2.0) / options.half_life_seconds) {}

void LinkBaselines::Observe(uint64_t src, uint64_t dst, double ts) {
  last_met_[src][dst] = ts;
  Decayed& popularity = popularity_[dst];
  popularity.value = popularity.value * std::exp(-decay_per_second_ * (ts - popularity.ts)) + 1;
  popularity.ts = ts;
}

double LinkBaselines::PopularityAt(uint64_t dst, double at) const {
  const auto it = popularity_.find(dst);
  if (it == popularity_.end()) return 0;
  return it->second.value * std::exp(-decay_per_second_ * (at - it->second.ts));
}

void LinkBaselines::Score(Baseline baseline, uint64_t src, double at,
                          std::span<const uint64_t> candidates, std::vector<double>* scores) const {
  scores->assign(candidates.size(), 0.0);
  static const std::unordered_map<uint64_t, double> kNone;
  const auto source = last_met_.find(src);
  const auto& met = source == last_met_.end() ? kNone : source->second;
  for (size_t i = 0; i < candidates.size(); ++i) {
    double& score = (*scores)[i];
    const auto pair = met.find(candidates[i]);
    const bool seen = pair != met.end();
    switch (baseline) {
      case Baseline::kEdgeBank:
        score = seen ? 1 : 0;
        break;
      case Baseline::kEdgeBankWindow:
        score =
            seen && (options_.window_seconds <= 0 || pair->second >= at - options_.window_seconds)
                ? 1
                : 0;
        break;
      case Baseline::kPopularity:
        score = PopularityAt(candidates[i], at);
        break;
      case Baseline::kRecency: {
        // Met destinations in (2, 3], the latest highest (log-compressed so that ages of
        // months stay apart in a float); the others' popularity mapped into [0, 1) so that it
        // orders them and never passes a met one.
        if (seen) {
          score = 2 + 1 / (1 + std::log1p(std::max(0.0, at - pair->second)));
        } else {
          const double popularity = PopularityAt(candidates[i], at);
          score = popularity / (1 + popularity);
        }
        break;
      }
    }
  }
}

}  // namespace tlp
