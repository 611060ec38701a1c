// Ranking metrics for link prediction: average precision, ROC AUC and reciprocal rank.
// Definitions match scikit-learn (AP as the step-wise sum of precision over recall increments,
// ties grouped; AUC as the Mann-Whitney statistic with average ranks for ties) so that figures
// compare with the TGN / DyGLib literature.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tlp {

// labels: 1 = positive, 0 = negative. Returns NaN when either class is absent.
double AveragePrecision(std::span<const float> scores, std::span<const int> labels);
double RocAuc(std::span<const float> scores, std::span<const int> labels);

// TGB-style rank of a positive among negatives: 0.5 (#neg > pos + #neg >= pos) + 1; the
// optimistic and pessimistic ranks averaged so ties neither help nor hurt.
double TieAwareRank(float positive, std::span<const float> negatives);
// The same rank of scores[target] among all the other scores.
double TieAwareRankAmong(std::span<const double> scores, size_t target);

// One-vs-all ranking figures: the true destination's rank among every candidate.
struct RankingFigures {
  double mrr = 0, hits_at_1 = 0, hits_at_10 = 0;
  int64_t queries = 0;
};

class RankingAccumulator {
 public:
  // A query's tie-aware rank (1 = first); 0 = not ranked at all (the destination was no
  // candidate, or fell beyond the ranks returned), which counts as reciprocal rank 0.
  void Add(double rank);
  RankingFigures Finish() const;

 private:
  double reciprocal_sum_ = 0;
  int64_t hits_at_1_ = 0, hits_at_10_ = 0, queries_ = 0;
};

// Mean and (sample) standard deviation of a series; std = 0 for fewer than two values.
struct MeanStd {
  double mean = 0;
  double std = 0;
};
MeanStd Summarize(std::span<const double> values);

struct LinkFigures {
  double ap = 0, auc = 0;                // averaged over batches (TGN / DyGLib style)
  double pooled_ap = 0, pooled_auc = 0;  // over all scores of the period at once
  int64_t positives = 0;
};

// Per-batch and pooled figures of positives against one set of negatives.
class LinkFigureAccumulator {
 public:
  // One evaluation batch; an empty one is skipped.
  void AddBatch(std::span<const float> positive, std::span<const float> negative);
  LinkFigures Finish() const;

 private:
  std::vector<double> batch_ap_, batch_auc_;
  std::vector<float> pooled_scores_;
  std::vector<int> pooled_labels_;
  int64_t positives_ = 0;
};

}  // namespace tlp
