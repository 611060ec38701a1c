#include "common/link_metrics.h"

#include <gtest/gtest.h>

#include <cmath>

namespace tlp {
namespace {

TEST(LinkMetrics, AveragePrecisionMatchesScikitLearn) {
  // sklearn.metrics.average_precision_score([1,0,1,1,0], [0.9,0.8,0.7,0.3,0.2]) = 0.8055...
  const std::vector<float> scores = {0.9f, 0.8f, 0.7f, 0.3f, 0.2f};
  const std::vector<int> labels = {1, 0, 1, 1, 0};
  EXPECT_NEAR(AveragePrecision(scores, labels), (1.0 + 2.0 / 3 + 3.0 / 4) / 3, 1e-12);
  // roc_auc_score = 4/6: pairs (pos, neg) ordered correctly.
  EXPECT_NEAR(RocAuc(scores, labels), 4.0 / 6.0, 1e-12);
}

TEST(LinkMetrics, TiesAreNeitherRewardedNorPunished) {
  const std::vector<float> scores = {0.5f, 0.5f, 0.5f, 0.5f};
  const std::vector<int> labels = {1, 0, 1, 0};
  EXPECT_NEAR(RocAuc(scores, labels), 0.5, 1e-12);
  EXPECT_NEAR(AveragePrecision(scores, labels), 0.5, 1e-12);
  const std::vector<float> negatives = {0.5f, 0.1f, 0.9f};
  EXPECT_DOUBLE_EQ(TieAwareRank(0.5f, negatives), 2.5);
  EXPECT_TRUE(std::isnan(AveragePrecision(scores, std::vector<int>{1, 1, 1, 1})));
}

TEST(LinkMetrics, TieAwareRankAmongCountsTiesHalfAndSkipsItself) {
  const std::vector<double> scores = {0.2, 0.9, 0.5, 0.5, 0.1};
  EXPECT_DOUBLE_EQ(TieAwareRankAmong(scores, 1), 1.0);
  EXPECT_DOUBLE_EQ(TieAwareRankAmong(scores, 2), 2.5);  // one above, one tie
  EXPECT_DOUBLE_EQ(TieAwareRankAmong(scores, 4), 5.0);
}

TEST(LinkMetrics, RankingAccumulatorGivesMrrAndHits) {
  RankingAccumulator accumulator;
  accumulator.Add(1);   // hit at 1 and 10
  accumulator.Add(4);   // hit at 10
  accumulator.Add(20);  // neither
  accumulator.Add(0);   // not ranked: reciprocal rank 0
  const RankingFigures figures = accumulator.Finish();
  EXPECT_EQ(figures.queries, 4);
  EXPECT_DOUBLE_EQ(figures.mrr, (1.0 + 0.25 + 0.05) / 4);
  EXPECT_DOUBLE_EQ(figures.hits_at_1, 0.25);
  EXPECT_DOUBLE_EQ(figures.hits_at_10, 0.5);
  EXPECT_EQ(RankingAccumulator().Finish().mrr, 0);
}

TEST(LinkMetrics, SummarizeGivesSampleStd) {
  const std::vector<double> values = {1.0, 2.0, 3.0};
  EXPECT_DOUBLE_EQ(Summarize(values).mean, 2.0);
  EXPECT_DOUBLE_EQ(Summarize(values).std, 1.0);
}

}  // namespace
}  // namespace tlp
