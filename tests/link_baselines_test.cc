#include "common/link_baselines.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace tlp {
namespace {

// A tiny stream: source 1 met 10 at t=1 and 11 at t=5; source 2 met 12 three times and 10 once.
LinkBaselines TinyStream(const BaselineOptions& options) {
  LinkBaselines baselines(options);
  baselines.Observe(1, 10, 1);
  baselines.Observe(2, 12, 2);
  baselines.Observe(2, 12, 3);
  baselines.Observe(2, 12, 4);
  baselines.Observe(1, 11, 5);
  baselines.Observe(2, 10, 6);
  return baselines;
}

const std::vector<uint64_t> kCandidates = {10, 11, 12, 13};

TEST(LinkBaselines, EdgeBankScoresPairsSeenBefore) {
  const LinkBaselines baselines = TinyStream({.window_seconds = 0, .half_life_seconds = 10});
  std::vector<double> scores;
  baselines.Score(Baseline::kEdgeBank, 1, 7, kCandidates, &scores);
  EXPECT_EQ(scores, (std::vector<double>{1, 1, 0, 0}));
  baselines.Score(Baseline::kEdgeBank, 3, 7, kCandidates, &scores);  // an unknown source
  EXPECT_EQ(scores, (std::vector<double>{0, 0, 0, 0}));
}

TEST(LinkBaselines, EdgeBankWindowForgetsOldPairs) {
  const LinkBaselines baselines = TinyStream({.window_seconds = 3, .half_life_seconds = 10});
  std::vector<double> scores;
  baselines.Score(Baseline::kEdgeBankWindow, 1, 7, kCandidates, &scores);
  EXPECT_EQ(scores, (std::vector<double>{0, 1, 0, 0}));  // 10 was met at t=1, before 7 - 3
}

TEST(LinkBaselines, PopularityDecaysWithItsHalfLife) {
  const LinkBaselines baselines = TinyStream({.window_seconds = 0, .half_life_seconds = 1});
  std::vector<double> scores;
  baselines.Score(Baseline::kPopularity, 1, 6, kCandidates, &scores);
  // 10: events at 1 and 6 -> 2^-5 + 1; 11: at 5 -> 2^-1; 12: at 2, 3, 4 -> 2^-4 + 2^-3 + 2^-2.
  EXPECT_NEAR(scores[0], 1 + std::pow(2, -5), 1e-12);
  EXPECT_NEAR(scores[1], 0.5, 1e-12);
  EXPECT_NEAR(scores[2], 0.0625 + 0.125 + 0.25, 1e-12);
  EXPECT_EQ(scores[3], 0);
}

TEST(LinkBaselines, RecencyRanksMetDestinationsFirstThenPopularOnes) {
  const LinkBaselines baselines = TinyStream({.window_seconds = 0, .half_life_seconds = 100});
  std::vector<double> scores;
  baselines.Score(Baseline::kRecency, 1, 7, kCandidates, &scores);
  // Source 1 met 11 (t=5) after 10 (t=1); 12 is the most popular of the rest, 13 unknown.
  EXPECT_GT(scores[1], scores[0]);
  EXPECT_GT(scores[0], scores[2]);
  EXPECT_GT(scores[2], scores[3]);
  EXPECT_EQ(scores[3], 0);
}

TEST(LinkBaselines, NamesAreStable) {
  EXPECT_STREQ(BaselineName(Baseline::kEdgeBank), "edgebank");
  EXPECT_STREQ(BaselineName(Baseline::kRecency), "recency_popularity");
}

}  // namespace
}  // namespace tlp
