// Ranking metrics for link prediction: average precision, ROC AUC and reciprocal rank.
// Definitions match scikit-learn (AP as the step-wise sum of precision over recall increments,
// ties grouped; AUC as the Mann-Whitney statistic with average ranks for ties) so that figures
// compare with the TGN / DyGLib literature.
#pragma once

#include <span>
#include <vector>

namespace tlp::model {

// labels: 1 = positive, 0 = negative. Returns NaN when either class is absent.
double AveragePrecision(std::span<const float> scores, std::span<const int> labels);
double RocAuc(std::span<const float> scores, std::span<const int> labels);

// TGB-style rank of a positive among negatives: 0.5 (#neg > pos + #neg >= pos) + 1; the
// optimistic and pessimistic ranks averaged so ties neither help nor hurt.
double TieAwareRank(float positive, std::span<const float> negatives);

// Mean and (sample) standard deviation of a series; std = 0 for fewer than two values.
struct MeanStd {
  double mean = 0;
  double std = 0;
};
MeanStd Summarize(std::span<const double> values);

}  // namespace tlp::model
