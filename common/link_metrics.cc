#include "common/link_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace tlp {
namespace {

std::vector<size_t> DescendingOrder(std::span<const float> scores) {
  std::vector<size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return scores[a] > scores[b]; });
  return order;
}

}  // namespace

double AveragePrecision(std::span<const float> scores, std::span<const int> labels) {
  const size_t positives = std::count(labels.begin(), labels.end(), 1);
  if (positives == 0 || positives == labels.size()) return std::numeric_limits<double>::quiet_NaN();
  const std::vector<size_t> order = DescendingOrder(scores);
  double ap = 0, true_positives = 0, seen = 0, previous_recall = 0;
  for (size_t i = 0; i < order.size();) {
    // All items sharing one score form one threshold.
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) {
      true_positives += labels[order[j]] == 1;
      ++seen;
      ++j;
    }
    const double recall = true_positives / static_cast<double>(positives);
    ap += (recall - previous_recall) * (true_positives / seen);
    previous_recall = recall;
    i = j;
  }
  return ap;
}

double RocAuc(std::span<const float> scores, std::span<const int> labels) {
  const size_t positives = std::count(labels.begin(), labels.end(), 1);
  const size_t negatives = labels.size() - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  std::vector<size_t> order = DescendingOrder(scores);
  std::reverse(order.begin(), order.end());  // ascending
  double positive_rank_sum = 0;
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j < order.size() && scores[order[j]] == scores[order[i]]) ++j;
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2.0;
    for (size_t t = i; t < j; ++t) positive_rank_sum += labels[order[t]] == 1 ? average_rank : 0;
    i = j;
  }
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2.0) / (p * static_cast<double>(negatives));
}

double TieAwareRank(float positive, std::span<const float> negatives) {
  double greater = 0, greater_or_equal = 0;
  for (float negative : negatives) {
    greater += negative > positive;
    greater_or_equal += negative >= positive;
  }
  return 0.5 * (greater + greater_or_equal) + 1.0;
}

double TieAwareRankAmong(std::span<const double> scores, size_t target) {
  double greater = 0, equal = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    greater += scores[i] > scores[target];
    equal += i != target && scores[i] == scores[target];
  }
  return 1.0 + greater + 0.5 * equal;
}

void RankingAccumulator::Add(double rank) {
  ++queries_;
  if (rank < 1) return;
  reciprocal_sum_ += 1.0 / rank;
  hits_at_1_ += rank <= 1;
  hits_at_10_ += rank <= 10;
}

RankingFigures RankingAccumulator::Finish() const {
  RankingFigures figures;
  figures.queries = queries_;
  if (queries_ == 0) return figures;
  const auto n = static_cast<double>(queries_);
  figures.mrr = reciprocal_sum_ / n;
  figures.hits_at_1 = static_cast<double>(hits_at_1_) / n;
  figures.hits_at_10 = static_cast<double>(hits_at_10_) / n;
  return figures;
}

MeanStd Summarize(std::span<const double> values) {
  MeanStd result;
  if (values.empty()) return result;
  result.mean = std::accumulate(values.begin(), values.end(), 0.0) / values.size();
  if (values.size() < 2) return result;
  double squares = 0;
  for (double v : values) squares += (v - result.mean) * (v - result.mean);
  result.std = std::sqrt(squares / static_cast<double>(values.size() - 1));
  return result;
}

void LinkFigureAccumulator::AddBatch(std::span<const float> positive,
                                     std::span<const float> negative) {
  if (positive.empty()) return;
  std::vector<float> scores(positive.begin(), positive.end());
  scores.insert(scores.end(), negative.begin(), negative.end());
  std::vector<int> labels(positive.size(), 1);
  labels.resize(scores.size(), 0);
  batch_ap_.push_back(AveragePrecision(scores, labels));
  batch_auc_.push_back(RocAuc(scores, labels));
  pooled_scores_.insert(pooled_scores_.end(), scores.begin(), scores.end());
  pooled_labels_.insert(pooled_labels_.end(), labels.begin(), labels.end());
  positives_ += static_cast<int64_t>(positive.size());
}

LinkFigures LinkFigureAccumulator::Finish() const {
  LinkFigures figures;
  figures.ap = Summarize(batch_ap_).mean;
  figures.auc = Summarize(batch_auc_).mean;
  figures.pooled_ap = AveragePrecision(pooled_scores_, pooled_labels_);
  figures.pooled_auc = RocAuc(pooled_scores_, pooled_labels_);
  figures.positives = positives_;
  return figures;
}

}  // namespace tlp
