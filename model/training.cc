#include "model/training.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include "common/link_metrics.h"
#include "common/stopwatch.h"

namespace tlp::model {
namespace {

std::vector<int64_t> UniqueSorted(std::vector<int64_t> values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

// Positions begin, begin + 1, ..., begin + count - 1 of an Embed call's queries.
std::vector<int64_t> Positions(int64_t begin, int64_t count) {
  std::vector<int64_t> positions(static_cast<size_t>(count));
  std::iota(positions.begin(), positions.end(), begin);
  return positions;
}

std::vector<float> ToVector(const torch::Tensor& tensor) {
  const torch::Tensor cpu = tensor.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  return {cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel()};
}

}  // namespace

struct Trainer::PeriodResult {
  RankingAccumulator one_vs_all;
  RankingAccumulator baselines[kBaselines];  // with `baseline_options`, on the same queries
  BaselineOptions baseline_options;
  LinkFigureAccumulator transductive[kNegativeStrategies];
  LinkFigureAccumulator inductive[kNegativeStrategies];
  double reciprocal_rank_sum = 0;
  int64_t ranked = 0;
  double norm_sum = 0, effective_neighbors_sum = 0;
  int64_t embedded = 0;
  int64_t scored_pairs = 0;
  double seconds = 0;
  std::vector<float> node_state_logits;  // labelled events only, with their labels
  std::vector<int> node_state_labels;

  NodeStateFigures NodeState() const {
    NodeStateFigures figures;
    figures.labelled = static_cast<int64_t>(node_state_labels.size());
    figures.positives = std::count(node_state_labels.begin(), node_state_labels.end(), 1);
    if (figures.positives > 0 && figures.positives < figures.labelled) {
      figures.auc = RocAuc(node_state_logits, node_state_labels);
      figures.ap = AveragePrecision(node_state_logits, node_state_labels);
    }
    return figures;
  }
};

Status TemporalDataset::FromEvents(const EventBatch& batch, TemporalDataset* dataset) {
  *dataset = TemporalDataset();
  dataset->feature_dim = batch.feature_dim;
  dataset->features = batch.features;
  std::unordered_map<uint64_t, int64_t> index;
  auto dense = [&](uint64_t id) {
    auto [it, inserted] = index.try_emplace(id, static_cast<int64_t>(dataset->node_ids.size()));
    if (inserted) dataset->node_ids.push_back(id);
    return it->second;
  };
  for (size_t i = 0; i < batch.size(); ++i) {
    if (i > 0 && batch.ts[i] < batch.ts[i - 1]) {
      return Status::InvalidArgument("event " + std::to_string(i) +
                                     ": field 'ts' goes back in time (" +
                                     std::to_string(batch.ts[i]) + " < " +
                                     std::to_string(batch.ts[i - 1]) + "); streams must be sorted");
    }
    dataset->src.push_back(dense(batch.src[i]));
    dataset->dst.push_back(dense(batch.dst[i]));
    dataset->ts.push_back(batch.ts[i]);
  }
  dataset->state_labels = batch.state_labels;
  return Status::Ok();
}

DataSplit SplitChronologically(const TemporalDataset& dataset, uint64_t seed) {
  DataSplit split;
  const int64_t events = dataset.events();
  if (events == 0) return split;
  std::vector<double> sorted_ts(dataset.ts);  // already sorted, kept general
  std::sort(sorted_ts.begin(), sorted_ts.end());
  auto quantile = [&](double q) {
    const double position = q * static_cast<double>(events - 1);
    const auto low = static_cast<size_t>(std::floor(position));
    const size_t high = std::min(low + 1, sorted_ts.size() - 1);
    return sorted_ts[low] +
           (position - static_cast<double>(low)) * (sorted_ts[high] - sorted_ts[low]);
  };
  split.validation_time = quantile(0.70);
  split.test_time = quantile(0.85);

  // Nodes appearing after the validation time; 10 % of them never enter training.
  std::vector<int64_t> later_nodes;
  for (int64_t i = 0; i < events; ++i) {
    if (dataset.ts[i] > split.validation_time) {
      later_nodes.push_back(dataset.src[i]);
      later_nodes.push_back(dataset.dst[i]);
    }
  }
  later_nodes = UniqueSorted(std::move(later_nodes));
  std::mt19937_64 random(seed);
  std::shuffle(later_nodes.begin(), later_nodes.end(), random);
  std::vector<uint8_t> masked(dataset.nodes(), 0);
  split.masked_nodes = static_cast<int64_t>(0.1 * static_cast<double>(later_nodes.size()));
  for (int64_t i = 0; i < split.masked_nodes; ++i) masked[later_nodes[i]] = 1;

  split.new_node.assign(dataset.nodes(), 1);
  for (int64_t i = 0; i < events; ++i) {
    const double t = dataset.ts[i];
    if (t <= split.validation_time) {
      if (!masked[dataset.src[i]] && !masked[dataset.dst[i]]) {
        split.train.push_back(i);
        split.new_node[dataset.src[i]] = 0;
        split.new_node[dataset.dst[i]] = 0;
      }
    } else if (t <= split.test_time) {
      split.validation.push_back(i);
    } else {
      split.test.push_back(i);
    }
  }
  return split;
}

const char* OutcomeName(Outcome outcome) {
  return outcome == Outcome::kLink ? "link" : "node_state";
}

const char* StrategyName(NegativeStrategy strategy) {
  switch (strategy) {
    case NegativeStrategy::kRandom:
      return "random";
    case NegativeStrategy::kHistorical:
      return "historical";
    case NegativeStrategy::kInductive:
      return "inductive";
  }
  return "unknown";
}

Trainer::Trainer(TemporalLinkModel model, const TemporalDataset& dataset, const DataSplit& split,
                 const TrainOptions& options)
    : model_(std::move(model)),
      dataset_(dataset),
      split_(split),
      options_(options),
      train_adjacency_(dataset.feature_dim),
      full_adjacency_(dataset.feature_dim),
      random_(options.seed) {
  model_->EnsureNodes(dataset.nodes());
  optimizer_ = std::make_unique<torch::optim::Adam>(
      model_->parameters(), torch::optim::AdamOptions(options.learning_rate));
  std::vector<int64_t> train_dst;
  for (int64_t i : split.train) {
    train_adjacency_.Add(dataset.src[i], dataset.dst[i], dataset.ts[i], FeaturesOf(i));
    train_dst.push_back(dataset.dst[i]);
    training_edges_.insert(
        static_cast<uint64_t>(dataset.src[i] * dataset.nodes() + dataset.dst[i]));
  }
  for (int64_t i = 0; i < dataset.events(); ++i) {
    full_adjacency_.Add(dataset.src[i], dataset.dst[i], dataset.ts[i], FeaturesOf(i));
  }
  train_destinations_ = UniqueSorted(std::move(train_dst));
  all_destinations_ = UniqueSorted(dataset.dst);
  validation_candidates_ = CandidatesBefore(split.validation_time);
  test_candidates_ = CandidatesBefore(split.test_time);
  all_sources_ = UniqueSorted(dataset.src);
  // The node state is learnt (epochs > 0) only from labels of both classes; an evaluation of
  // such a model on events without labels reports links alone.
  const bool trains = options.epochs > 0;
  node_state_ = model_->config().node_state && !dataset.state_labels.empty();
  if (model_->config().node_state && !node_state_ && trains) {
    throw std::invalid_argument(
        "a node-state model needs events with state labels (a JODIE file's label column)");
  }
  if (node_state_) {
    int64_t labelled = 0, positives = 0;
    for (int64_t i : split.train) {
      labelled += dataset.state_labels[i] >= 0;
      positives += dataset.state_labels[i] == 1;
    }
    if ((positives == 0 || positives == labelled) && trains) {
      throw std::invalid_argument("the training events' state labels have " +
                                  std::to_string(positives) + " positives of " +
                                  std::to_string(labelled) + ": both classes are needed");
    }
    if (positives > 0 && positives < labelled) {
      const double rate = static_cast<double>(positives) / static_cast<double>(labelled);
      node_state_positive_weight_ = 0.5 / rate;
      node_state_negative_weight_ = 0.5 / (1.0 - rate);
    }
  }
}

Trainer::RankingCandidates Trainer::CandidatesBefore(double time) const {
  std::vector<int64_t> before;
  for (int64_t i = 0; i < dataset_.events() && dataset_.ts[i] < time; ++i) {
    before.push_back(dataset_.dst[i]);
  }
  RankingCandidates candidates;
  candidates.nodes = UniqueSorted(std::move(before));
  candidates.position.assign(static_cast<size_t>(dataset_.nodes()), -1);
  for (size_t i = 0; i < candidates.nodes.size(); ++i) {
    candidates.position[static_cast<size_t>(candidates.nodes[i])] = static_cast<int64_t>(i);
  }
  return candidates;
}

std::span<const float> Trainer::FeaturesOf(int64_t event) const {
  if (dataset_.feature_dim == 0) return {};
  return {dataset_.features.data() + event * dataset_.feature_dim, dataset_.feature_dim};
}

void Trainer::MarkSeen(int64_t src, int64_t dst) {
  const auto key = static_cast<uint64_t>(src * dataset_.nodes() + dst);
  if (!seen_edges_.insert(key).second) return;
  seen_edge_list_.push_back(key);
  if (!training_edges_.contains(key)) unseen_in_training_list_.push_back(key);
}

void Trainer::Progress(const std::string& line) const {
  if (!options_.progress) return;
  // One updating line on a terminal, plain lines in logs.
  static const bool terminal = isatty(fileno(stderr));
  std::fprintf(stderr, terminal ? "\r%-110s" : "%s\n", line.c_str());
  std::fflush(stderr);
}

namespace {

// The events of one batch, gathered from a period's index list.
struct BatchEvents {
  std::vector<int64_t> src, dst;
  std::vector<double> ts;
  std::vector<float> features;
  std::vector<int8_t> state_labels;  // when the dataset has them

  void Gather(const TemporalDataset& dataset, std::span<const int64_t> events) {
    src.clear();
    dst.clear();
    ts.clear();
    features.clear();
    state_labels.clear();
    for (int64_t i : events) {
      src.push_back(dataset.src[i]);
      dst.push_back(dataset.dst[i]);
      ts.push_back(dataset.ts[i]);
      if (!dataset.state_labels.empty()) state_labels.push_back(dataset.state_labels[i]);
      if (dataset.feature_dim > 0) {
        const float* row = dataset.features.data() + i * dataset.feature_dim;
        features.insert(features.end(), row, row + dataset.feature_dim);
      }
    }
  }
  int64_t size() const { return static_cast<int64_t>(src.size()); }
};

// The monitors' probe: the first `batch_size` validation events, scored as ScorePeriod would
// but never applied, so memory, the random stream and the parameters stay as the epoch left
// them. Returns its size (0 without validation events).
int64_t GatherProbe(const TemporalDataset& dataset, const std::vector<int64_t>& validation,
                    int64_t batch_size, BatchEvents* batch) {
  const int64_t count = std::min<int64_t>(batch_size, static_cast<int64_t>(validation.size()));
  batch->Gather(dataset, std::span(validation).subspan(0, count));
  return count;
}

// Node-state logits of a batch's sources at their events' times: [batch]. `link` is the Embed
// call whose first rows are those sources; with shared attention the node state reads them,
// with outcome-indexed attention the sources are embedded again for the node-state outcome.
torch::Tensor NodeStateLogits(TemporalLinkModel& model, const Embeddings& link,
                              const BatchEvents& batch, const NeighborSampler& sampler) {
  if (model->config().attention_outcomes() == 1) {
    return model->PredictNodeStates(link.vectors.narrow(0, 0, batch.size()));
  }
  return model->PredictNodeStates(
      model->Embed(batch.src, batch.ts, sampler, Outcome::kNodeState).vectors);
}

}  // namespace

EpochRecord Trainer::TrainEpoch(int64_t epoch) {
  const Stopwatch watch;
  model_->train();
  model_->ResetMemory();
  const std::vector<int64_t>& events = split_.train;
  const int64_t total = static_cast<int64_t>(events.size());
  const int64_t batches = (total + options_.batch_size - 1) / options_.batch_size;
  std::uniform_int_distribution<size_t> pick(0, train_destinations_.size() - 1);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  constexpr int64_t kHistoryForNegatives = 32;
  NeighborBlock history;
  std::vector<int64_t> candidates;
  BatchEvents batch;
  std::vector<int64_t> nodes;
  std::vector<double> times;
  double loss_sum = 0, ap_sum = 0, node_loss_sum = 0;
  for (int64_t b = 0; b < batches; ++b) {
    const int64_t begin = b * options_.batch_size;
    const int64_t count = std::min(options_.batch_size, total - begin);
    batch.Gather(dataset_, std::span(events).subspan(begin, count));
    nodes.assign(batch.src.begin(), batch.src.end());
    nodes.insert(nodes.end(), batch.dst.begin(), batch.dst.end());
    // Negatives: random destinations; with historical_negatives, that share of them is a
    // partner the source met before instead (when it has one besides the true destination),
    // so the model also learns which of a source's known destinations comes next.
    if (options_.historical_negatives > 0) {
      train_adjacency_.Sample(batch.src, batch.ts, kHistoryForNegatives, &history);
    }
    for (int64_t i = 0; i < count; ++i) {
      int64_t negative = train_destinations_[pick(random_)];
      if (options_.historical_negatives > 0 && coin(random_) < options_.historical_negatives) {
        candidates.clear();
        for (int64_t slot = 0; slot < kHistoryForNegatives; ++slot) {
          const size_t cell = static_cast<size_t>(i * kHistoryForNegatives + slot);
          if (!history.valid[cell]) break;
          if (history.nodes[cell] != batch.dst[i]) candidates.push_back(history.nodes[cell]);
        }
        if (!candidates.empty()) {
          negative =
              candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(random_)];
        }
      }
      nodes.push_back(negative);
    }
    times.assign(batch.ts.begin(), batch.ts.end());
    times.insert(times.end(), batch.ts.begin(), batch.ts.end());
    times.insert(times.end(), batch.ts.begin(), batch.ts.end());

    // z: [3 * count, embedding_dim] = sources, true destinations, negative destinations.
    const Embeddings z = model_->Embed(nodes, times, train_adjacency_);
    const std::vector<int64_t> sources = Positions(0, count);
    const torch::Tensor positive =
        model_->PredictLinks(z, nodes, times, sources, Positions(count, count), train_adjacency_);
    const torch::Tensor negative = model_->PredictLinks(
        z, nodes, times, sources, Positions(2 * count, count), train_adjacency_);
    torch::Tensor loss =
        torch::binary_cross_entropy_with_logits(positive, torch::ones_like(positive)) +
        torch::binary_cross_entropy_with_logits(negative, torch::zeros_like(negative));
    if (node_state_) {
      // Class-weighted BCE over the batch's labelled events (unlabelled ones weigh 0).
      std::vector<float> targets(count), weights(count);
      for (int64_t i = 0; i < count; ++i) {
        const int8_t label = batch.state_labels[i];
        targets[i] = label == 1 ? 1.0F : 0.0F;
        weights[i] = label < 0    ? 0.0F
                     : label == 1 ? static_cast<float>(node_state_positive_weight_)
                                  : static_cast<float>(node_state_negative_weight_);
      }
      const torch::Tensor logits = NodeStateLogits(model_, z, batch, train_adjacency_);
      const auto options = logits.options();
      const torch::Tensor node_loss = torch::binary_cross_entropy_with_logits(
          logits, torch::tensor(targets, options), torch::tensor(weights, options));
      loss = loss + node_loss;
      node_loss_sum += node_loss.item<double>();
    }
    optimizer_->zero_grad();
    loss.backward();
    optimizer_->step();
    model_->ApplyEvents(batch.src, batch.dst, batch.ts, batch.features);

    loss_sum += loss.item<double>();
    std::vector<float> scores = ToVector(positive);
    const std::vector<float> negative_scores = ToVector(negative);
    scores.insert(scores.end(), negative_scores.begin(), negative_scores.end());
    std::vector<int> labels(count, 1);
    labels.resize(2 * count, 0);
    ap_sum += AveragePrecision(scores, labels);
    if (b % 20 == 19 || b + 1 == batches) {
      char line[160];
      std::snprintf(line, sizeof(line),
                    "epoch %lld  batch %lld/%lld  loss %.4f  train AP %.4f  %.0f events/s",
                    static_cast<long long>(epoch), static_cast<long long>(b + 1),
                    static_cast<long long>(batches), loss_sum / (b + 1), ap_sum / (b + 1),
                    static_cast<double>(begin + count) / watch.Seconds());
      Progress(line);
    }
  }
  EpochRecord record;
  record.epoch = epoch;
  record.loss = batches ? loss_sum / batches : 0;
  record.train_ap = batches ? ap_sum / batches : 0;
  record.node_state_loss = batches ? node_loss_sum / batches : 0;
  record.seconds = watch.Seconds();
  record.events_per_second = static_cast<double>(total) / record.seconds;
  return record;
}

std::vector<HeadMonitor> Trainer::MonitorAttention() {
  model_->eval();
  torch::NoGradGuard no_grad;
  BatchEvents batch;
  const int64_t count = GatherProbe(dataset_, split_.validation, options_.batch_size, &batch);
  if (count == 0) return {};
  std::vector<int64_t> nodes(batch.src.begin(), batch.src.end());
  nodes.insert(nodes.end(), batch.dst.begin(), batch.dst.end());
  std::vector<double> times(batch.ts.begin(), batch.ts.end());
  times.insert(times.end(), batch.ts.begin(), batch.ts.end());
  const ScopedAttentionCapture capture(*model_);
  const Embeddings embedded = model_->Embed(nodes, times, full_adjacency_);
  // A pair-wise architecture attends in PredictLinks.
  model_->PredictLinks(embedded, nodes, times, Positions(0, count), Positions(count, count),
                       full_adjacency_);
  return capture.Summarise();
}

std::vector<OutcomeMonitor> Trainer::MonitorOutcomes() {
  model_->eval();
  torch::NoGradGuard no_grad;
  BatchEvents batch;
  if (GatherProbe(dataset_, split_.validation, options_.batch_size, &batch) == 0) return {};
  std::vector<OutcomeMonitor> monitors;
  for (const Outcome outcome : {Outcome::kLink, Outcome::kNodeState}) {
    if (outcome == Outcome::kNodeState && !node_state_) break;
    std::vector<int64_t> nodes(batch.src.begin(), batch.src.end());
    std::vector<double> times(batch.ts.begin(), batch.ts.end());
    if (outcome == Outcome::kLink) {
      nodes.insert(nodes.end(), batch.dst.begin(), batch.dst.end());
      times.insert(times.end(), batch.ts.begin(), batch.ts.end());
    }
    const AttentionMetrics metrics = model_->Embed(nodes, times, full_adjacency_, outcome).metrics;
    OutcomeMonitor monitor;
    monitor.outcome = outcome;
    monitor.query_norms = model_->QueryProjectionNorms(outcome);
    if (metrics.attention_entropy.defined() && metrics.attention_entropy.numel() > 0) {
      const torch::Tensor used = metrics.neighbors_used.to(torch::kFloat64);
      const torch::Tensor spread = used >= 2;
      monitor.entropy = metrics.attention_entropy.to(torch::kFloat64).mean().item<double>();
      monitor.effective_neighbors =
          metrics.effective_neighbors.to(torch::kFloat64).mean().item<double>();
      monitor.attention_mass = metrics.attention_mass.to(torch::kFloat64).mean().item<double>();
      if (spread.any().item<bool>()) {
        monitor.normalised_entropy =
            (metrics.attention_entropy.to(torch::kFloat64).masked_select(spread) /
             used.masked_select(spread).log())
                .mean()
                .item<double>();
      }
    }
    monitors.push_back(std::move(monitor));
  }
  return monitors;
}

void Trainer::ReplayIntoMemory(const std::vector<int64_t>& events) {
  torch::NoGradGuard no_grad;
  BatchEvents batch;
  for (size_t begin = 0; begin < events.size(); begin += options_.batch_size) {
    const size_t count = std::min<size_t>(options_.batch_size, events.size() - begin);
    batch.Gather(dataset_, std::span(events).subspan(begin, count));
    model_->ApplyEvents(batch.src, batch.dst, batch.ts, batch.features);
    for (size_t i = 0; i < count; ++i) MarkSeen(batch.src[i], batch.dst[i]);
  }
}

void Trainer::ScorePeriod(const std::vector<int64_t>& events, bool full_evaluation,
                          PeriodResult* result, int64_t ranking_queries,
                          const RankingCandidates* candidates) {
  if (candidates == nullptr) candidates = &validation_candidates_;
  const Stopwatch watch;
  model_->eval();
  torch::NoGradGuard no_grad;
  const int strategies = full_evaluation ? kNegativeStrategies : 1;
  const int64_t mrr_negatives = full_evaluation ? options_.mrr_negatives : 0;
  std::uniform_int_distribution<size_t> pick_dst(0, all_destinations_.size() - 1);
  std::uniform_int_distribution<size_t> pick_src(0, all_sources_.size() - 1);
  const auto node_count = static_cast<uint64_t>(dataset_.nodes());
  BatchEvents batch;
  std::vector<int64_t> nodes;
  std::vector<double> times;
  std::unordered_set<uint64_t> batch_edges;
  const size_t stride =
      ranking_queries < 0 ? 1
      : ranking_queries > 0
          ? std::max<size_t>(1, events.size() / static_cast<size_t>(ranking_queries))
          : 0;
  // The baselines rank the test period's queries too (not validation's: model selection only).
  std::optional<LinkBaselines> baselines;
  std::vector<uint64_t> baseline_candidates;
  std::vector<double> baseline_scores;
  int64_t observed = 0;  // dataset events [0, observed) are in `baselines`
  if (full_evaluation && stride > 0 && !events.empty()) {
    const double span = std::max(dataset_.ts[events.back()] - dataset_.ts[events.front()], 1.0);
    result->baseline_options = {.window_seconds = span, .half_life_seconds = span / 10};
    baselines.emplace(result->baseline_options);
    baseline_candidates.assign(candidates->nodes.begin(), candidates->nodes.end());
  }
  std::vector<int64_t> ranking_nodes;
  std::vector<double> ranking_times;
  std::vector<double> ranking_scores;
  // Link j of a ranking call joins position 0 (the source) and position j + 1.
  const std::vector<int64_t> ranking_sources(candidates->nodes.size(), 0);
  const std::vector<int64_t> ranking_destinations =
      Positions(1, static_cast<int64_t>(candidates->nodes.size()));
  for (size_t begin = 0; begin < events.size(); begin += options_.batch_size) {
    const int64_t count =
        static_cast<int64_t>(std::min<size_t>(options_.batch_size, events.size() - begin));
    batch.Gather(dataset_, std::span(events).subspan(begin, count));
    batch_edges.clear();
    for (int64_t i = 0; i < count; ++i) {
      batch_edges.insert(static_cast<uint64_t>(batch.src[i]) * node_count + batch.dst[i]);
    }
    nodes.assign(batch.src.begin(), batch.src.end());
    nodes.insert(nodes.end(), batch.dst.begin(), batch.dst.end());
    // Negative edges per strategy, appended as [sources..., destinations...].
    for (int s = 0; s < strategies; ++s) {
      const std::vector<uint64_t>* pool = s == 1   ? &seen_edge_list_
                                          : s == 2 ? &unseen_in_training_list_
                                                   : nullptr;
      std::vector<int64_t> negative_src(count), negative_dst(count);
      int64_t from_pool = 0;
      if (pool != nullptr && !pool->empty()) {
        // Half the negatives from the pool (edges not in this batch), the rest random edges.
        std::uniform_int_distribution<size_t> pick_edge(0, pool->size() - 1);
        for (int64_t i = 0; i < count / 2; ++i) {
          for (int attempt = 0; attempt < 8; ++attempt) {
            const uint64_t key = (*pool)[pick_edge(random_)];
            if (batch_edges.contains(key)) continue;
            negative_src[from_pool] = static_cast<int64_t>(key / node_count);
            negative_dst[from_pool] = static_cast<int64_t>(key % node_count);
            ++from_pool;
            break;
          }
        }
      }
      for (int64_t i = from_pool; i < count; ++i) {
        negative_src[i] = s == 0 ? batch.src[i] : all_sources_[pick_src(random_)];
        negative_dst[i] = all_destinations_[pick_dst(random_)];
      }
      nodes.insert(nodes.end(), negative_src.begin(), negative_src.end());
      nodes.insert(nodes.end(), negative_dst.begin(), negative_dst.end());
    }
    const int64_t ranked = std::min<int64_t>(
        count, std::max<int64_t>(0, (full_evaluation ? options_.mrr_queries : 0) - result->ranked));
    for (int64_t i = 0; i < ranked * mrr_negatives; ++i) {
      nodes.push_back(all_destinations_[pick_dst(random_)]);
    }
    times.clear();
    for (int64_t r = 0; r < 2 + 2 * strategies; ++r) {
      times.insert(times.end(), batch.ts.begin(), batch.ts.end());
    }
    for (int64_t i = 0; i < ranked; ++i) times.insert(times.end(), mrr_negatives, batch.ts[i]);

    const Embeddings embedded = model_->Embed(nodes, times, full_adjacency_);
    auto predict = [&](std::span<const int64_t> src, std::span<const int64_t> dst,
                       LinkEndpointMetrics* endpoint_metrics = nullptr) {
      return ToVector(model_->PredictLinks(embedded, nodes, times, src, dst, full_adjacency_,
                                           endpoint_metrics));
    };
    if (node_state_) {
      const std::vector<float> logits =
          ToVector(NodeStateLogits(model_, embedded, batch, full_adjacency_));
      for (int64_t i = 0; i < count; ++i) {
        if (batch.state_labels[i] < 0) continue;
        result->node_state_logits.push_back(logits[i]);
        result->node_state_labels.push_back(batch.state_labels[i]);
      }
    }
    LinkEndpointMetrics positive_metrics;
    const std::vector<float> positive =
        predict(Positions(0, count), Positions(count, count), &positive_metrics);
    std::vector<int64_t> new_rows;
    for (int64_t i = 0; i < count; ++i) {
      if (split_.new_node[batch.src[i]] || split_.new_node[batch.dst[i]]) new_rows.push_back(i);
    }
    for (int s = 0; s < strategies; ++s) {
      const int64_t offset = (2 + 2 * s) * count;
      const std::vector<float> negative =
          predict(Positions(offset, count), Positions(offset + count, count));
      result->transductive[s].AddBatch(positive, negative);
      std::vector<float> new_positive, new_negative;
      for (int64_t i : new_rows) {
        new_positive.push_back(positive[i]);
        new_negative.push_back(negative[i]);
      }
      result->inductive[s].AddBatch(new_positive, new_negative);
    }
    if (ranked > 0) {
      const int64_t offset = (2 + 2 * strategies) * count;
      std::vector<int64_t> repeated_sources;
      for (int64_t i = 0; i < ranked; ++i)
        repeated_sources.insert(repeated_sources.end(), mrr_negatives, i);
      const std::vector<float> negative =
          predict(repeated_sources, Positions(offset, ranked * mrr_negatives));
      for (int64_t i = 0; i < ranked; ++i) {
        result->reciprocal_rank_sum +=
            1.0 / TieAwareRank(positive[i],
                               std::span(negative).subspan(i * mrr_negatives, mrr_negatives));
      }
      result->ranked += ranked;
    }
    if (positive_metrics.src_norm.defined()) {  // a pair-wise architecture: per link
      result->norm_sum +=
          (positive_metrics.src_norm.sum() + positive_metrics.dst_norm.sum()).item<double>();
      result->effective_neighbors_sum += (positive_metrics.src.effective_neighbors.sum() +
                                          positive_metrics.dst.effective_neighbors.sum())
                                             .item<double>();
    } else {
      result->norm_sum += embedded.vectors.narrow(0, 0, 2 * count).norm(2, 1).sum().item<double>();
      result->effective_neighbors_sum +=
          embedded.metrics.effective_neighbors.narrow(0, 0, 2 * count).sum().item<double>();
    }
    result->embedded += 2 * count;
    result->scored_pairs += count * (1 + strategies) + ranked * mrr_negatives;

    // One-vs-all: the source against every candidate, at the event's time, before the batch
    // is applied (as its positives were scored).
    for (int64_t i = 0; stride > 0 && i < count; ++i) {
      if ((begin + static_cast<size_t>(i)) % stride != 0) continue;
      const int64_t position = candidates->position[static_cast<size_t>(batch.dst[i])];
      if (position < 0) {  // a destination new in this period: no candidate, for any method
        result->one_vs_all.Add(0);
        if (baselines) {
          for (RankingAccumulator& baseline : result->baselines) baseline.Add(0);
        }
        continue;
      }
      ranking_nodes.assign(1, batch.src[i]);
      ranking_nodes.insert(ranking_nodes.end(), candidates->nodes.begin(), candidates->nodes.end());
      ranking_times.assign(ranking_nodes.size(), batch.ts[i]);
      const Embeddings ranked_z = model_->Embed(ranking_nodes, ranking_times, full_adjacency_);
      const std::vector<float> logits =
          ToVector(model_->PredictLinks(ranked_z, ranking_nodes, ranking_times, ranking_sources,
                                        ranking_destinations, full_adjacency_));
      ranking_scores.assign(logits.begin(), logits.end());
      result->one_vs_all.Add(TieAwareRankAmong(ranking_scores, static_cast<size_t>(position)));
      if (baselines) {
        const double at = batch.ts[i];
        for (; observed < dataset_.events() && dataset_.ts[observed] < at; ++observed) {
          baselines->Observe(static_cast<uint64_t>(dataset_.src[observed]),
                             static_cast<uint64_t>(dataset_.dst[observed]), dataset_.ts[observed]);
        }
        for (int b = 0; b < kBaselines; ++b) {
          baselines->Score(static_cast<Baseline>(b), static_cast<uint64_t>(batch.src[i]), at,
                           baseline_candidates, &baseline_scores);
          result->baselines[b].Add(
              TieAwareRankAmong(baseline_scores, static_cast<size_t>(position)));
        }
      }
    }

    model_->ApplyEvents(batch.src, batch.dst, batch.ts, batch.features);
    for (int64_t i = 0; i < count; ++i) MarkSeen(batch.src[i], batch.dst[i]);
  }
  result->seconds = watch.Seconds();
}

std::vector<EpochRecord> Trainer::Train() {
  std::vector<EpochRecord> history;
  double best_score = -1;
  int64_t epochs_without_gain = 0;
  std::vector<torch::Tensor> best_parameters;
  for (int64_t epoch = 1; epoch <= options_.epochs; ++epoch) {
    EpochRecord record = TrainEpoch(epoch);
    if (options_.monitor_attention) record.attention = MonitorAttention();
    if (node_state_ || options_.monitor_attention) record.outcomes = MonitorOutcomes();
    PeriodResult validation;
    ScorePeriod(split_.validation, /*full_evaluation=*/false, &validation,
                options_.selection_queries);
    record.validation_ap = validation.transductive[0].Finish().ap;
    record.validation_mrr = validation.one_vs_all.Finish().mrr;
    if (node_state_) record.validation_node_state_auc = validation.NodeState().auc;
    history.push_back(record);
    char line[240];
    std::snprintf(line, sizeof(line),
                  "epoch %lld  loss %.4f  train AP %.4f  validation AP %.4f  validation MRR "
                  "%.4f  %.1f s  %.0f events/s",
                  static_cast<long long>(epoch), record.loss, record.train_ap, record.validation_ap,
                  record.validation_mrr, record.seconds, record.events_per_second);
    Progress(line);
    if (options_.progress) std::fputc('\n', stderr);
    if (options_.progress) {
      if (node_state_) {
        std::fprintf(stderr, "  node state: loss %.4f  validation AUC %.4f\n",
                     record.node_state_loss, record.validation_node_state_auc);
      }
      for (const OutcomeMonitor& outcome : record.outcomes) {
        std::string norms;
        for (double norm : outcome.query_norms) norms += " " + std::to_string(norm);
        std::fprintf(stderr,
                     "  %s attention: entropy %.3f (normalised %.3f), effective neighbours "
                     "%.2f, mass %.3f, query projection norms%s\n",
                     OutcomeName(outcome.outcome), outcome.entropy, outcome.normalised_entropy,
                     outcome.effective_neighbors, outcome.attention_mass, norms.c_str());
      }
    }
    for (const HeadMonitor& head : record.attention) {
      std::snprintf(line, sizeof(line),
                    "  %s head %lld: energy field rank %.1f of at most %.1f, effective rank %.2f, "
                    "query share %.4f, key coherence %.2f",
                    head.module.c_str(), static_cast<long long>(head.head), head.field.rank,
                    head.field.rank_bound, head.field.effective_rank, head.field.query_share,
                    head.field.key_coherence);
      if (options_.progress) std::fprintf(stderr, "%s\n", line);
    }
    const double score =
        options_.selection_queries > 0 ? record.validation_mrr : record.validation_ap;
    if (score > best_score) {
      best_score = score;
      epochs_without_gain = 0;
      best_parameters.clear();
      for (const torch::Tensor& p : model_->parameters())
        best_parameters.push_back(p.detach().clone());
    } else if (++epochs_without_gain >= options_.patience) {
      break;
    }
  }
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> parameters = model_->parameters();
  for (size_t i = 0; i < best_parameters.size(); ++i) parameters[i].copy_(best_parameters[i]);
  return history;
}

EvaluationReport Trainer::Evaluate() {
  // The same negatives for every model evaluated with the same seed.
  random_.seed(options_.seed ^ 0x5eed5eedULL);
  seen_edges_.clear();
  seen_edge_list_.clear();
  unseen_in_training_list_.clear();
  model_->ResetMemory();
  ReplayIntoMemory(split_.train);
  PeriodResult validation, test;
  ScorePeriod(split_.validation, /*full_evaluation=*/false, &validation);
  ScorePeriod(split_.test, /*full_evaluation=*/true, &test, options_.test_ranking_queries,
              &test_candidates_);

  EvaluationReport report;
  for (int s = 0; s < kNegativeStrategies; ++s) {
    report.transductive[s] = test.transductive[s].Finish();
    report.inductive[s] = test.inductive[s].Finish();
  }
  report.mrr_queries = test.ranked;
  report.node_state = test.NodeState();
  report.validation_node_state = validation.NodeState();
  report.one_vs_all = test.one_vs_all.Finish();
  for (int b = 0; b < kBaselines; ++b) report.baselines[b] = test.baselines[b].Finish();
  report.baseline_options = test.baseline_options;
  report.mrr = test.ranked ? test.reciprocal_rank_sum / static_cast<double>(test.ranked) : 0;
  report.mean_representation_norm = test.embedded ? test.norm_sum / test.embedded : 0;
  report.mean_effective_neighbors =
      test.embedded ? test.effective_neighbors_sum / test.embedded : 0;
  report.scored_pairs_per_second = test.scored_pairs / test.seconds;
  if (options_.probe) report.probe_r2 = RunProbe(&report);
  return report;
}

double Trainer::RunProbe(EvaluationReport* report) {
  // Embeddings of every node with history at the end of the stream -> log(1 + degree).
  torch::NoGradGuard no_grad;
  const double end_time = dataset_.ts.back() + 1.0;
  std::vector<int64_t> nodes;
  std::vector<double> targets;
  for (int64_t node = 0; node < dataset_.nodes(); ++node) {
    const int64_t degree = full_adjacency_.DegreeBefore(node, end_time);
    if (degree == 0) continue;
    nodes.push_back(node);
    targets.push_back(std::log1p(static_cast<double>(degree)));
  }
  const int64_t count = static_cast<int64_t>(nodes.size());
  report->probe_nodes = count;
  if (count < 10) return 0;
  std::vector<torch::Tensor> chunks;
  for (int64_t begin = 0; begin < count; begin += 2000) {
    const int64_t size = std::min<int64_t>(2000, count - begin);
    std::vector<double> times(size, end_time);
    chunks.push_back(model_->Embed(std::span(nodes).subspan(begin, size), times, full_adjacency_)
                         .vectors.to(torch::kCPU, torch::kFloat64));
  }
  const torch::Tensor features = torch::cat(chunks);
  const torch::Tensor target = torch::tensor(targets, torch::kFloat64);
  std::vector<int64_t> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 random(options_.seed ^ 0x9e3779b97f4a7c15ULL);
  std::shuffle(order.begin(), order.end(), random);
  const int64_t train_count = count * 4 / 5;
  const torch::Tensor train_index =
      torch::tensor(std::vector<int64_t>(order.begin(), order.begin() + train_count));
  const torch::Tensor test_index =
      torch::tensor(std::vector<int64_t>(order.begin() + train_count, order.end()));
  const torch::Tensor x_train = features.index_select(0, train_index);
  const torch::Tensor y_train = target.index_select(0, train_index);
  // Standardise with training statistics; ridge with intercept, lambda = 1.
  const torch::Tensor mean = x_train.mean(0);
  const torch::Tensor scale = x_train.std(0).clamp_min(1e-8);
  const torch::Tensor x = (x_train - mean) / scale;
  const double y_mean = y_train.mean().item<double>();
  const torch::Tensor gram = x.t().matmul(x) + torch::eye(x.size(1), torch::kFloat64);
  const torch::Tensor weights = torch::linalg_solve(gram, x.t().matmul(y_train - y_mean));
  const torch::Tensor x_test = (features.index_select(0, test_index) - mean) / scale;
  const torch::Tensor y_test = target.index_select(0, test_index);
  const torch::Tensor predicted = x_test.matmul(weights) + y_mean;
  const double residual = (y_test - predicted).square().sum().item<double>();
  const double total = (y_test - y_test.mean()).square().sum().item<double>();
  return total > 0 ? 1.0 - residual / total : 0;
}

}  // namespace tlp::model
