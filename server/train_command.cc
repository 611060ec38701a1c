#include "server/train_command.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "common/event_reader.h"
#include "common/replay_evaluation.h"
#include "model/checkpoint.h"
#include "model/training.h"
#include "server/attention_monitor_plot.h"
#include "server/engine.h"
#include "server/link_ranker.h"
#include "server/service.h"
#include "storage/event_log_reader.h"

namespace tlp::server {
namespace {

struct TrainSettings {
  std::string data;        // an event file, or
  std::string from_store;  // a data dir's event log (storage/event_log_reader.h)
  storage::EventLogWindow window;
  std::string checkpoint = "tlpd-model.pt";
  std::string config_from;         // train: the architecture and widths of this checkpoint
  std::string compare_checkpoint;  // train: also evaluate this model on the same test period
  std::string json_out;
  std::string monitor_plot;  // train: the attention monitor as SVG (implies --monitor)
  std::string device = "cpu";
  model::ModelConfig config;
  model::TrainOptions options;
  int threads = 2;
  bool evaluate = true;
  bool replay = false;
  int64_t ranking_queries = -1;  // --replay: test positives ranked one-vs-all (-1 = all)
  size_t topk_shortlist = 0;     // --replay: TopK's shortlist (ServiceLimits::topk_shortlist)
  uint32_t ranking_k = 1000;     // --replay: TopK's k for the one-vs-all ranking
};

nlohmann::json FiguresJson(const LinkFigures& figures) {
  return {{"ap", figures.ap},
          {"auc", figures.auc},
          {"pooled_ap", figures.pooled_ap},
          {"pooled_auc", figures.pooled_auc},
          {"positives", figures.positives}};
}

void PrintReport(const model::EvaluationReport& report) {
  std::printf("\n%-14s %-11s %8s %8s %10s %10s %9s\n", "setting", "negatives", "AP", "AUC",
              "pooled AP", "pooled AUC", "positives");
  for (int s = 0; s < model::kNegativeStrategies; ++s) {
    for (int inductive = 0; inductive < 2; ++inductive) {
      const LinkFigures& f = inductive ? report.inductive[s] : report.transductive[s];
      std::printf("%-14s %-11s %8.4f %8.4f %10.4f %10.4f %9lld\n",
                  inductive ? "inductive" : "transductive",
                  model::StrategyName(static_cast<model::NegativeStrategy>(s)), f.ap, f.auc,
                  f.pooled_ap, f.pooled_auc, static_cast<long long>(f.positives));
    }
  }
  const RankingFigures& ranking = report.one_vs_all;
  std::printf(
      "one-vs-all ranking (every destination seen before the test period, ties half): MRR %.4f  "
      "Hits@1 %.4f  Hits@10 %.4f over %lld test events\n",
      ranking.mrr, ranking.hits_at_1, ranking.hits_at_10, static_cast<long long>(ranking.queries));
  if (ranking.queries > 0) {
    for (int b = 0; b < kBaselines; ++b) {
      const RankingFigures& baseline = report.baselines[b];
      std::printf("  same queries, baseline %-18s MRR %.4f  Hits@1 %.4f  Hits@10 %.4f\n",
                  BaselineName(static_cast<Baseline>(b)), baseline.mrr, baseline.hits_at_1,
                  baseline.hits_at_10);
    }
  }
  if (report.node_state.labelled > 0) {
    std::printf(
        "node state (pooled over the period): test AUC %.4f  AP %.4f  (%lld positives of "
        "%lld); validation AUC %.4f\n",
        report.node_state.auc, report.node_state.ap,
        static_cast<long long>(report.node_state.positives),
        static_cast<long long>(report.node_state.labelled), report.validation_node_state.auc);
  }
  std::printf("sampled MRR %.4f over %lld test queries; degree probe R^2 %.4f over %lld nodes\n",
              report.mrr, static_cast<long long>(report.mrr_queries), report.probe_r2,
              static_cast<long long>(report.probe_nodes));
  std::printf(
      "mean representation norm %.3f, mean effective neighbours %.3f, %.0f scored pairs/s\n",
      report.mean_representation_norm, report.mean_effective_neighbors,
      report.scored_pairs_per_second);
}

// Each head's energy field and key figures of one epoch (model/attention_monitor.h).
nlohmann::json MonitorJson(const model::EpochRecord& epoch) {
  nlohmann::json heads = nlohmann::json::array();
  for (const model::HeadMonitor& head : epoch.attention) {
    const model::EnergyFieldSummary& field = head.field;
    heads.push_back({{"module", head.module},
                     {"head", head.head},
                     {"queries", field.queries},
                     {"keys", field.keys},
                     {"rank", field.rank},
                     {"rank_bound", field.rank_bound},
                     {"effective_rank", field.effective_rank},
                     {"top_share", field.top_share},
                     {"query_share", field.query_share},
                     {"spectrum", field.spectrum},
                     {"row_sum_residual", field.row_sum_residual},
                     {"key_coherence", field.key_coherence}});
  }
  return heads;
}

// Each outcome's attention after one epoch (model::OutcomeMonitor).
nlohmann::json OutcomesJson(const model::EpochRecord& epoch) {
  nlohmann::json outcomes = nlohmann::json::array();
  for (const model::OutcomeMonitor& outcome : epoch.outcomes) {
    outcomes.push_back({{"outcome", model::OutcomeName(outcome.outcome)},
                        {"query_norms", outcome.query_norms},
                        {"entropy", outcome.entropy},
                        {"normalised_entropy", outcome.normalised_entropy},
                        {"effective_neighbors", outcome.effective_neighbors},
                        {"attention_mass", outcome.attention_mass}});
  }
  return outcomes;
}

nlohmann::json NodeStateJson(const model::NodeStateFigures& figures) {
  return {{"auc", figures.auc},
          {"ap", figures.ap},
          {"labelled", figures.labelled},
          {"positives", figures.positives}};
}

nlohmann::json ReportJson(const model::EvaluationReport& report) {
  nlohmann::json json;
  for (int s = 0; s < model::kNegativeStrategies; ++s) {
    const char* name = model::StrategyName(static_cast<model::NegativeStrategy>(s));
    json["transductive"][name] = FiguresJson(report.transductive[s]);
    json["inductive"][name] = FiguresJson(report.inductive[s]);
  }
  json["mrr"] = report.mrr;
  json["mrr_queries"] = report.mrr_queries;
  json["one_vs_all"] = {{"mrr", report.one_vs_all.mrr},
                        {"hits_at_1", report.one_vs_all.hits_at_1},
                        {"hits_at_10", report.one_vs_all.hits_at_10},
                        {"queries", report.one_vs_all.queries}};
  for (int b = 0; b < kBaselines; ++b) {
    const RankingFigures& baseline = report.baselines[b];
    json["one_vs_all_baselines"][BaselineName(static_cast<Baseline>(b))] = {
        {"mrr", baseline.mrr},
        {"hits_at_1", baseline.hits_at_1},
        {"hits_at_10", baseline.hits_at_10}};
  }
  json["baseline_window_seconds"] = report.baseline_options.window_seconds;
  json["baseline_half_life_seconds"] = report.baseline_options.half_life_seconds;
  json["probe_r2"] = report.probe_r2;
  json["probe_nodes"] = report.probe_nodes;
  json["mean_representation_norm"] = report.mean_representation_norm;
  json["mean_effective_neighbors"] = report.mean_effective_neighbors;
  json["scored_pairs_per_second"] = report.scored_pairs_per_second;
  if (report.node_state.labelled > 0) {
    json["node_state"] = NodeStateJson(report.node_state);
    json["validation_node_state"] = NodeStateJson(report.validation_node_state);
  }
  return json;
}

// What the events were read from, for logs and JSON.
std::string SourceName(const TrainSettings& s) {
  return s.from_store.empty() ? s.data : "store " + s.from_store;
}

// The events of --data, or of --from-store's event log in its window (read beside a serving
// daemon without blocking it).
Status ReadEvents(const TrainSettings& s, EventBatch* events) {
  if (s.from_store.empty()) return EventReader::ReadAll(s.data, events);
  storage::EventLogRead read;
  Status status = storage::ReadEventLog(s.from_store, s.window, events, &read);
  if (!status.ok()) return status;
  spdlog::info("{}: {} events of {} stored{}", SourceName(s), events->size(), read.last_sequence,
               read.late_events > 0
                   ? fmt::format(" ({} accepted late, put back in time order)", read.late_events)
                   : "");
  if (events->size() == 0) {
    return Status::InvalidArgument(
        "no events to train on in " + SourceName(s) +
        (s.window.since_ts || s.window.last_events > 0 ? " within --since / --last-events" : ""));
  }
  return Status::Ok();
}

int LoadData(const TrainSettings& s, model::TemporalDataset* dataset, model::DataSplit* split) {
  EventBatch events;
  Status status = ReadEvents(s, &events);
  if (status.ok()) status = model::TemporalDataset::FromEvents(events, dataset);
  if (!status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  *split = model::SplitChronologically(*dataset, s.options.seed);
  spdlog::info(
      "{}: {} events, {} nodes; train {} / validation {} / test {} events, {} nodes held out",
      SourceName(s), dataset->events(), dataset->nodes(), split->train.size(),
      split->validation.size(), split->test.size(), split->masked_nodes);
  return 0;
}

void AddModelOptions(CLI::App* command, TrainSettings& s) {
  CLI::Option_group* source = command->add_option_group("events", "Where the events come from");
  source->add_option("--data", s.data, "Event file (JODIE CSV, SNAP text or tlpd CSV; .gz ok)")
      ->check(CLI::ExistingFile);
  CLI::Option* from_store =
      source
          ->add_option("--from-store", s.from_store,
                       "A tlpd data dir: its event log, read beside a daemon serving it without "
                       "blocking it (a RocksDB secondary instance), in time order")
          ->check(CLI::ExistingDirectory);
  source->require_option(1);
  command
      ->add_option("--since", s.window.since_ts,
                   "With --from-store: only events with ts >= this (a sliding window)")
      ->needs(from_store);
  command
      ->add_option("--last-events", s.window.last_events,
                   "With --from-store: only the newest N events by arrival (0 = all)")
      ->needs(from_store);
  command->add_option("--seed", s.options.seed, "Seed for sampling, splits and initialisation");
  command->add_option("--threads", s.threads, "Torch intra-op threads")->check(CLI::PositiveNumber);
  command->add_option("--device", s.device, "cpu or cuda:N (falls back to cpu without a GPU)");
  command->add_option("--json-out", s.json_out, "Also write the results as JSON to this file");
  command->add_option("--mrr-queries", s.options.mrr_queries,
                      "Test positives ranked against sampled negatives for MRR (0 = skip)");
  command->add_option("--mrr-negatives", s.options.mrr_negatives, "Negatives per MRR query");
  command->add_option("--test-ranking-queries", s.options.test_ranking_queries,
                      "Offline protocol: test events ranked one-vs-all among every destination "
                      "seen before the test period (-1 = all, 0 = none)");
  command->add_flag("!--no-probe", s.options.probe, "Skip the degree probe");
}

// Loads a checkpoint that can score `dataset` (the same edge-feature width).
Status LoadModelFor(const std::string& checkpoint, const model::TemporalDataset& dataset,
                    const torch::Device& device, model::TemporalLinkModel* result) {
  Status status = model::LoadCheckpoint(checkpoint, device, result);
  if (!status.ok()) return status;
  if ((*result)->config().edge_feature_dim != dataset.feature_dim) {
    return Status::InvalidArgument(
        checkpoint + " takes " + std::to_string((*result)->config().edge_feature_dim) +
        " edge features, the events have " + std::to_string(dataset.feature_dim));
  }
  return Status::Ok();
}

int RunTrain(const TrainSettings& s) {
  torch::set_num_threads(s.threads);
  torch::manual_seed(s.options.seed);
  model::TemporalDataset dataset;
  model::DataSplit split;
  if (LoadData(s, &dataset, &split) != 0) return 1;
  std::string note;
  const torch::Device device = model::ResolveDevice(s.device, &note);
  if (!note.empty()) spdlog::warn("{}", note);
  model::ModelConfig config = s.config;
  if (!s.config_from.empty()) {
    model::TemporalLinkModel source{nullptr};
    if (Status status = LoadModelFor(s.config_from, dataset, device, &source); !status.ok()) {
      spdlog::error("--config-from: {}", status.ToString());
      return 1;
    }
    config = source->config();
  }
  config.edge_feature_dim = dataset.feature_dim;
  // Loaded before training, so that a bad file fails at once.
  model::TemporalLinkModel other{nullptr};
  if (!s.compare_checkpoint.empty()) {
    if (Status loaded = LoadModelFor(s.compare_checkpoint, dataset, device, &other); !loaded.ok()) {
      spdlog::error("--compare-checkpoint: {}", loaded.ToString());
      return 1;
    }
  }
  // Both constructors check the configuration against the data (std::invalid_argument).
  model::TrainOptions options = s.options;
  options.monitor_attention = options.monitor_attention || !s.monitor_plot.empty();
  model::TemporalLinkModel model{nullptr};
  std::unique_ptr<model::Trainer> trainer_holder;
  try {
    model = model::TemporalLinkModel(config);
    model->to(device);
    model->ResetMemory();
    spdlog::info("training {} on {}", config.ToString(), device.str());
    trainer_holder = std::make_unique<model::Trainer>(model, dataset, split, options);
  } catch (const std::invalid_argument& error) {
    spdlog::error("{}", error.what());
    return 2;
  }
  model::Trainer& trainer = *trainer_holder;
  const auto history = trainer.Train();
  Status status = model::SaveCheckpoint(s.checkpoint, model);
  if (!status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  spdlog::info("checkpoint {} (fingerprint {})", s.checkpoint, model::ModelFingerprint(model));
  nlohmann::json json = {{"config", nlohmann::json::parse(model::ConfigToJson(config))},
                         {"data", SourceName(s)},
                         {"seed", s.options.seed}};
  for (const auto& epoch : history) {
    json["epochs"].push_back({{"epoch", epoch.epoch},
                              {"loss", epoch.loss},
                              {"train_ap", epoch.train_ap},
                              {"validation_ap", epoch.validation_ap},
                              {"validation_mrr", epoch.validation_mrr},
                              {"seconds", epoch.seconds},
                              {"events_per_second", epoch.events_per_second}});
    if (options.monitor_attention) json["epochs"].back()["attention"] = MonitorJson(epoch);
    if (!epoch.outcomes.empty()) json["epochs"].back()["outcomes"] = OutcomesJson(epoch);
    if (config.node_state) {
      json["epochs"].back()["node_state_loss"] = epoch.node_state_loss;
      json["epochs"].back()["validation_node_state_auc"] = epoch.validation_node_state_auc;
    }
  }
  if (!s.monitor_plot.empty()) {
    std::ostringstream title;
    title << "attention monitor: " << config.architecture << ", " << config.layers
          << " layer(s) of " << config.heads << " heads, attention " << config.attention;
    if (config.attention == "maa") title << " p = " << config.attention_p;
    if (Status plotted = WriteAttentionMonitorPlot(history, title.str(), s.monitor_plot);
        !plotted.ok()) {
      spdlog::error("--monitor-plot: {}", plotted.ToString());
      return 1;
    }
  }
  if (s.evaluate) {
    const model::EvaluationReport report = trainer.Evaluate();
    PrintReport(report);
    json["test"] = ReportJson(report);
  }
  if (!s.compare_checkpoint.empty()) {
    // The other model on the same test period, queries and candidates: what a scheduled
    // refresh compares before it promotes the one it trained.
    model::TrainOptions evaluation_options = s.options;
    evaluation_options.epochs = 0;
    model::Trainer other_trainer(other, dataset, split, evaluation_options);
    const model::EvaluationReport report = other_trainer.Evaluate();
    std::printf("\ncompared with %s (fingerprint %s) on the same test period:\n",
                s.compare_checkpoint.c_str(), model::ModelFingerprint(other).c_str());
    PrintReport(report);
    json["compared"] = ReportJson(report);
    json["compared"]["checkpoint"] = s.compare_checkpoint;
    json["compared"]["fingerprint"] = model::ModelFingerprint(other);
  }
  json["fingerprint"] = model::ModelFingerprint(model);
  if (!s.json_out.empty()) std::ofstream(s.json_out) << json.dump(2) << "\n";
  return 0;
}

// The replay protocol against an Engine in process: the same code the daemon runs, without
// the network, so `tlpctl eval` against a daemon must report the same figures.
class EngineReplayTarget : public ReplayTarget {
 public:
  EngineReplayTarget(Engine& engine, std::string id_prefix, size_t topk_shortlist)
      : engine_(engine), id_prefix_(std::move(id_prefix)), topk_shortlist_(topk_shortlist) {}

  Status Ingest(const EventBatch& events, uint64_t first, uint64_t* last_sequence) override {
    // The ids tlpctl derives, so that the stores match event for event.
    batch_ = events;
    batch_.event_ids.resize(events.size());
    for (size_t i = 0; i < events.size(); ++i) {
      if (batch_.event_ids[i].empty())
        batch_.event_ids[i] = id_prefix_ + ":" + std::to_string(first + i);
    }
    storage::AppendResult result;
    Status status = engine_.Ingest(batch_, &result);
    if (status.ok()) *last_sequence = engine_.store().last_sequence();
    return status;
  }
  Status Score(std::span<const PairQuery> queries, std::vector<PairScore>* scores) override {
    queries_.clear();
    for (const PairQuery& query : queries) queries_.push_back({query.src, query.dst, query.at});
    Status status = engine_.Score(queries_, &link_scores_);
    if (!status.ok()) return status;
    scores->clear();
    for (const LinkScore& score : link_scores_) {
      scores->push_back({score.logit, score.src_metrics.representation_norm,
                         score.dst_metrics.representation_norm});
    }
    return Status::Ok();
  }
  Status TopK(uint64_t src, double at, uint32_t k,
              std::vector<RankedDestination>* ranked) override {
    RankQuery query;
    query.src = src;
    query.at = at;
    query.k = k;
    RankResult result;
    Status status =
        LinkRanker(engine_, ServiceLimits{}.max_score_pairs, topk_shortlist_)
            .Rank(
                query,
                [&](std::span<const LinkQuery> queries, std::vector<LinkScore>* scores) {
                  return engine_.Score(queries, scores);
                },
                &result);
    if (!status.ok()) return status;
    ranked->clear();
    for (const LinkScore& score : result.top) ranked->push_back({score.query.dst, score.logit});
    return Status::Ok();
  }

 private:
  Engine& engine_;
  std::string id_prefix_;
  size_t topk_shortlist_;
  EventBatch batch_;
  std::vector<LinkQuery> queries_;
  std::vector<LinkScore> link_scores_;
};

// `tlpd eval --replay`: a fresh engine in a temporary data directory.
int RunReplayEval(const TrainSettings& s) {
  EventBatch stream;
  Status status = ReadEvents(s, &stream);
  if (!status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tlpd-replay-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  EngineOptions options;
  options.data_dir = dir.string();
  options.checkpoint = s.checkpoint;
  options.device = s.device;
  options.torch_threads = s.threads;
  options.sync_writes = false;
  options.checkpoint_every_events = 0;
  ReplayReport report;
  {
    std::unique_ptr<Engine> engine;
    status = Engine::Open(options, &engine);
    if (status.ok()) {
      EngineReplayTarget target(*engine, std::filesystem::path(SourceName(s)).filename().string(),
                                s.topk_shortlist);
      ReplayOptions replay;
      replay.seed = s.options.seed;
      replay.mrr_queries = s.options.mrr_queries;
      replay.mrr_negatives = s.options.mrr_negatives;
      replay.ranking_queries = s.ranking_queries;
      replay.ranking_k = s.ranking_k;
      status = RunReplayEvaluation(stream, replay, target, &report);
    }
  }
  std::filesystem::remove_all(dir);
  if (!status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  std::printf("%s", FormatReplayReport(report).c_str());
  if (!s.json_out.empty()) std::ofstream(s.json_out) << ReplayReportJson(report) << "\n";
  return 0;
}

int RunEval(TrainSettings& s) {
  if (s.replay) return RunReplayEval(s);
  torch::set_num_threads(s.threads);
  model::TemporalDataset dataset;
  model::DataSplit split;
  if (LoadData(s, &dataset, &split) != 0) return 1;
  std::string note;
  const torch::Device device = model::ResolveDevice(s.device, &note);
  model::TemporalLinkModel model{nullptr};
  if (Status status = LoadModelFor(s.checkpoint, dataset, device, &model); !status.ok()) {
    spdlog::error("{}", status.ToString());
    return 1;
  }
  spdlog::info("evaluating {} ({}, fingerprint {})", s.checkpoint, model->config().ToString(),
               model::ModelFingerprint(model));
  s.options.epochs = 0;
  model::Trainer trainer(model, dataset, split, s.options);
  const model::EvaluationReport report = trainer.Evaluate();
  PrintReport(report);
  if (!s.json_out.empty()) std::ofstream(s.json_out) << ReportJson(report).dump(2) << "\n";
  return 0;
}

}  // namespace

Status TrainBundledModel(const std::string& data, const std::string& checkpoint,
                         const std::string& device, int threads) {
  TrainSettings settings;
  settings.data = data;
  settings.checkpoint = checkpoint;
  settings.device = device;
  settings.threads = threads;
  // Early stopping on validation one-vs-all MRR over at most 6 epochs: about a minute on the
  // 2-core machine for Wikipedia (~9 s an epoch, and the validation ranking).
  settings.options.epochs = 6;
  settings.options.patience = 2;
  settings.evaluate = false;
  if (RunTrain(settings) != 0) {
    return Status::Internal("training the bundled model on " + data + " failed (see the log)");
  }
  return Status::Ok();
}

std::string FindBundledData() {
  for (const char* directory : {"/usr/share/tlpd/data", TLP_SOURCE_DATA_DIR}) {
    const std::string path = std::string(directory) + "/wikipedia.csv.gz";
    if (std::filesystem::exists(path)) return path;
  }
  return "";
}

void AddTrainCommands(CLI::App& app) {
  static TrainSettings train_settings;
  static TrainSettings eval_settings;
  CLI::App* train = app.add_subcommand(
      "train", "Train a model on an event file or a data dir's event log, then evaluate it");
  AddModelOptions(train, train_settings);
  TrainSettings& t = train_settings;
  train->add_option("--out", t.checkpoint, "Checkpoint file to write");
  train
      ->add_option("--architecture", t.config.architecture,
                   "tgn (memory), tgat (no memory), graphmixer (an MLP-mixer over each node's "
                   "recent interactions) or dygformer (a transformer over both endpoints' "
                   "recent interactions)")
      ->check(CLI::IsMember({"tgn", "tgat", "graphmixer", "dygformer"}));
  train
      ->add_option("--patch-size", t.config.patch_size,
                   "DyGFormer: interactions per patch; divides --neighbors + 1")
      ->check(CLI::PositiveNumber);
  train->add_option("--p", t.config.attention_p, "Mass-Aware Attention exponent (1 = softmax)")
      ->check(CLI::Range(1.0, 16.0));
  train
      ->add_option("--attention", t.config.attention,
                   "How attention scores become weights: maa (Mass-Aware, exponent --p), "
                   "softmax (maa at p = 1), sigmoid (sigmoid(s - log n) per key) or sink (softmax "
                   "with a learnable sink key per head)")
      ->check(CLI::IsMember({"maa", "softmax", "sigmoid", "sink"}));
  train->add_option("--epochs", t.options.epochs, "Maximum epochs")->check(CLI::PositiveNumber);
  train->add_flag("--monitor", t.options.monitor_attention,
                  "After each epoch, record every attention head's energy field (numerical and "
                  "effective rank, spectrum) and key coherence, and the link outcome's attention "
                  "entropy and query-projection norms, printed and in --json-out");
  train->add_option("--monitor-plot", t.monitor_plot,
                    "Also draw the attention monitor as SVG to this file (implies --monitor)");
  train->add_option("--patience", t.options.patience, "Early-stopping patience (epochs)");
  train
      ->add_option("--historical-negatives", t.options.historical_negatives,
                   "Share of training negatives drawn from the source's earlier partners "
                   "instead of random destinations")
      ->check(CLI::Range(0.0, 1.0));
  train->add_option("--selection-queries", t.options.selection_queries,
                    "Validation events ranked one-vs-all after each epoch; the epoch with the "
                    "best MRR is kept (0 = the best validation AP)");
  train->add_option("--batch-size", t.options.batch_size, "Events per batch")
      ->check(CLI::PositiveNumber);
  train->add_option("--learning-rate", t.options.learning_rate, "Adam learning rate");
  train
      ->add_option("--layers", t.config.layers,
                   "Attention (DyGFormer: transformer) layers (1 or 2)")
      ->check(CLI::Range(1, 2));
  train->add_option("--neighbors", t.config.neighbors,
                    "Temporal neighbours per node (k; DyGFormer: its sequence's interactions)");
  train
      ->add_option("--pair-neighbors", t.config.pair_neighbors,
                   "Recent interactions per endpoint read for pair evidence (has the source "
                   "met the destination, how often, how lately; its popularity); 0 = none")
      ->check(CLI::Range(0, 1024));
  train
      ->add_option("--pair-hop-neighbors", t.config.pair_hop_neighbors,
                   "With pair evidence, also count the walks of up to three hops between the "
                   "endpoints through each of the source's partners' this many most recent "
                   "interactions; 0 = none")
      ->check(CLI::Range(0, 1024));
  train->add_flag("--node-state", t.config.node_state,
                  "Also learn a second outcome: the sources' state labels the events carry (a "
                  "JODIE file's label column, e.g. Wikipedia's bans), with a node-state head "
                  "trained beside the links");
  train
      ->add_option("--outcome-attention", t.config.outcome_attention,
                   "With --node-state: shared (both outcomes read the same attention) or "
                   "indexed (one query projection per outcome in each attention layer; tgn, tgat)")
      ->check(CLI::IsMember({"shared", "indexed"}));
  train->add_option("--heads", t.config.heads, "Attention heads");
  train->add_option("--memory-dim", t.config.memory_dim, "Node memory width");
  train->add_option("--embedding-dim", t.config.embedding_dim, "Embedding width");
  train->add_option("--time-dim", t.config.time_dim, "Time encoding width");
  train->add_option("--dropout", t.config.dropout, "Dropout");
  train->add_flag("!--no-eval", t.evaluate, "Skip the test evaluation after training");
  CLI::Option* config_from =
      train
          ->add_option("--config-from", t.config_from,
                       "Train this checkpoint's architecture and settings (attention p, widths, "
                       "neighbours) afresh, instead of the model flags")
          ->check(CLI::ExistingFile);
  for (const char* model_flag :
       {"--architecture", "--patch-size", "--p", "--attention", "--layers", "--neighbors",
        "--pair-neighbors", "--pair-hop-neighbors", "--heads", "--memory-dim", "--embedding-dim",
        "--time-dim", "--dropout", "--node-state", "--outcome-attention"}) {
    config_from->excludes(train->get_option(model_flag));
  }
  train
      ->add_option("--compare-checkpoint", t.compare_checkpoint,
                   "Also evaluate this checkpoint on the same test period and queries (its "
                   "figures go under \"compared\" in --json-out)")
      ->check(CLI::ExistingFile);
  train->callback([train] {
    model::ModelConfig& config = train_settings.config;
    // --p belongs to MAA alone; softmax is MAA at p = 1 (the same model and fingerprint).
    if (config.attention != "maa" && train->count("--p") > 0) {
      spdlog::error("--p is the exponent of --attention maa, not of {}", config.attention);
      std::exit(2);
    }
    if (config.attention == "softmax") {
      config.attention = "maa";
      config.attention_p = 1.0;
    } else if (config.attention != "maa") {
      config.attention_p = 1.0;  // unused by sigmoid and sink; recorded as 1
    }
    std::exit(RunTrain(train_settings));
  });

  CLI::App* eval = app.add_subcommand(
      "eval",
      "Evaluate a checkpoint on the test period of an event file or a data dir's event log");
  AddModelOptions(eval, eval_settings);
  eval->add_option("--checkpoint", eval_settings.checkpoint, "Checkpoint to evaluate")
      ->check(CLI::ExistingFile);
  eval->add_flag("--replay", eval_settings.replay,
                 "Replay protocol (as `tlpctl eval` through a daemon) on a fresh engine in a "
                 "temporary data directory, instead of the offline TGN protocol");
  eval->add_option("--ranking-queries", eval_settings.ranking_queries,
                   "With --replay: test positives ranked one-vs-all by TopK and the baselines "
                   "(-1 = all, 0 = none)");
  eval->add_option("--topk-shortlist", eval_settings.topk_shortlist,
                   "With --replay: TopK's model scores only the max(N, k) candidates that recent "
                   "destinations, then popular ones, rank first (tlpd serve --topk-shortlist)");
  eval->add_option("--ranking-k", eval_settings.ranking_k,
                   "With --replay: TopK's k for the one-vs-all ranking (a destination ranked "
                   "beyond it counts as reciprocal rank 0)")
      ->check(CLI::Range(1, 1000));
  eval->add_flag("--probe", eval_settings.options.probe,
                 "Fit the degree probe (log(1 + degree) from embeddings; on by default)");
  eval->callback([] { std::exit(RunEval(eval_settings)); });
}

}  // namespace tlp::server
