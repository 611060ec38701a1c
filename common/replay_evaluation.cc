#include "common/replay_evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "common/link_metrics.h"
#include "common/stopwatch.h"

namespace tlp {
namespace {

// Events [begin, end) of `stream` as a batch of their own.
void Slice(const EventBatch& stream, size_t begin, size_t end, EventBatch* out) {
  out->Clear();
  out->feature_dim = stream.feature_dim;
  for (size_t i = begin; i < end; ++i) {
    out->Add(stream.src[i], stream.dst[i], stream.ts[i], stream.FeaturesOf(i), stream.EventIdOf(i));
  }
}

uint64_t EdgeKey(uint64_t src, uint64_t dst) { return src * 0x9E3779B97F4A7C15ULL ^ dst; }

}  // namespace

Status RunReplayEvaluation(const EventBatch& stream, const ReplayOptions& options,
                           ReplayTarget& target, ReplayReport* report) {
  *report = ReplayReport();
  if (stream.empty()) return Status::InvalidArgument("the event stream is empty");
  for (size_t i = 1; i < stream.size(); ++i) {
    if (stream.ts[i] < stream.ts[i - 1]) {
      return Status::InvalidArgument("event " + std::to_string(i) +
                                     ": field 'ts' goes back in time; the stream must be sorted");
    }
  }
  // The test boundary: the same ts quantile as the offline split.
  const double position = options.test_quantile * static_cast<double>(stream.size() - 1);
  const auto low = static_cast<size_t>(std::floor(position));
  const size_t high = std::min(low + 1, stream.size() - 1);
  const double test_time =
      stream.ts[low] + (position - static_cast<double>(low)) * (stream.ts[high] - stream.ts[low]);
  const size_t history = static_cast<size_t>(
      std::upper_bound(stream.ts.begin(), stream.ts.end(), test_time) - stream.ts.begin());
  if (history == 0) {
    return Status::InvalidArgument("the stream has no events before its test period");
  }
  report->history_events = history;
  report->test_events = stream.size() - history;
  const Stopwatch watch;

  // Baselines: EdgeBank's window is the test period's length, popularity's half-life a tenth
  // of it; both follow from the split, nothing is tuned per data set.
  const double test_span = std::max(stream.ts.back() - test_time, 1.0);
  report->baseline_options = {.window_seconds = test_span, .half_life_seconds = test_span / 10};
  LinkBaselines baselines(report->baseline_options);
  size_t observed = 0;  // events [0, observed) are in `baselines`
  // The target's default TopK candidates: every destination it holds, in order of arrival.
  std::vector<uint64_t> candidates;
  std::unordered_map<uint64_t, size_t> candidate_position;
  auto ingested = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      if (candidate_position.emplace(stream.dst[i], candidates.size()).second)
        candidates.push_back(stream.dst[i]);
    }
  };
  RankingAccumulator model_ranking, baseline_ranking[kBaselines];
  std::vector<RankedDestination> top;
  std::vector<double> baseline_scores;
  double candidates_sum = 0;

  // What the target has seen, for negatives: destinations and edges.
  std::vector<uint64_t> destinations, edges_src, edges_dst;
  std::unordered_set<uint64_t> known_destinations, known_edges;
  auto remember = [&](size_t i) {
    if (known_destinations.insert(stream.dst[i]).second) destinations.push_back(stream.dst[i]);
    if (known_edges.insert(EdgeKey(stream.src[i], stream.dst[i])).second) {
      edges_src.push_back(stream.src[i]);
      edges_dst.push_back(stream.dst[i]);
    }
  };

  EventBatch slice;
  uint64_t last_sequence = 0;
  for (size_t begin = 0; begin < history; begin += options.history_batch) {
    const size_t end = std::min(history, begin + options.history_batch);
    Slice(stream, begin, end, &slice);
    Status status = target.Ingest(slice, begin, &last_sequence);
    if (!status.ok()) return status;
    for (size_t i = begin; i < end; ++i) remember(i);
    ingested(begin, end);
    if (options.progress) options.progress(end, stream.size());
  }
  if (last_sequence != history) {
    return Status::FailedPrecondition(
        "the target holds " + std::to_string(last_sequence) + " events after the " +
        std::to_string(history) +
        " of this stream's history: it has seen other events (or this stream's future), so the "
        "test period would not be new to it; evaluate against an empty data directory");
  }

  std::mt19937_64 random(options.seed ^ 0x5eed5eedULL);
  LinkFigureAccumulator random_figures, historical_figures;
  std::vector<PairQuery> queries;
  std::vector<PairScore> scores, part;
  std::unordered_set<uint64_t> batch_edges;
  double norm_sum = 0, reciprocal_rank_sum = 0;
  uint64_t scored_pairs = 0;
  // Event i has sequence i + 1 (checked above), so a batch ending at a multiple of batch_size
  // completes a memory chunk with its last event.
  for (size_t begin = history; begin < stream.size();) {
    const size_t end =
        std::min(stream.size(), (begin / options.batch_size + 1) * options.batch_size);
    const size_t count = end - begin;
    if (count > 1) {
      Slice(stream, begin, end - 1, &slice);
      Status status = target.Ingest(slice, begin, &last_sequence);
      if (!status.ok()) return status;
      ingested(begin, end - 1);
    }
    batch_edges.clear();
    for (size_t i = begin; i < end; ++i) batch_edges.insert(EdgeKey(stream.src[i], stream.dst[i]));
    // Rows: positives, random negatives, historical negatives, then MRR negatives.
    queries.clear();
    for (size_t i = begin; i < end; ++i)
      queries.push_back({stream.src[i], stream.dst[i], stream.ts[i]});
    std::uniform_int_distribution<size_t> pick_destination(0, destinations.size() - 1);
    for (size_t i = begin; i < end; ++i) {
      queries.push_back({stream.src[i], destinations[pick_destination(random)], stream.ts[i]});
    }
    std::uniform_int_distribution<size_t> pick_edge(0, edges_src.size() - 1);
    for (size_t i = begin; i < end; ++i) {
      PairQuery negative{stream.src[i], destinations[pick_destination(random)], stream.ts[i]};
      for (int attempt = 0; attempt < 8; ++attempt) {
        const size_t edge = pick_edge(random);
        if (batch_edges.contains(EdgeKey(edges_src[edge], edges_dst[edge]))) continue;
        negative = {edges_src[edge], edges_dst[edge], stream.ts[i]};
        break;
      }
      queries.push_back(negative);
    }
    const auto ranked = static_cast<size_t>(std::clamp<int64_t>(
        options.mrr_queries - report->mrr_queries, 0, static_cast<int64_t>(count)));
    for (size_t q = 0; q < ranked; ++q) {
      for (int64_t n = 0; n < options.mrr_negatives; ++n) {
        queries.push_back(
            {stream.src[begin + q], destinations[pick_destination(random)], stream.ts[begin + q]});
      }
    }
    scores.clear();
    for (size_t offset = 0; offset < queries.size(); offset += options.max_score_pairs) {
      const size_t size = std::min(options.max_score_pairs, queries.size() - offset);
      Status status = target.Score(std::span(queries).subspan(offset, size), &part);
      if (!status.ok()) return status;
      scores.insert(scores.end(), part.begin(), part.end());
    }
    scored_pairs += queries.size();
    std::vector<float> positive(count), random_negative(count), historical_negative(count);
    for (size_t i = 0; i < count; ++i) {
      positive[i] = scores[i].logit;
      random_negative[i] = scores[count + i].logit;
      historical_negative[i] = scores[2 * count + i].logit;
      norm_sum += scores[i].src_norm + scores[i].dst_norm;
    }
    random_figures.AddBatch(positive, random_negative);
    historical_figures.AddBatch(positive, historical_negative);
    report->positive_logits.insert(report->positive_logits.end(), positive.begin(), positive.end());
    report->negative_logits.insert(report->negative_logits.end(), random_negative.begin(),
                                   random_negative.end());
    for (size_t q = 0; q < ranked; ++q) {
      std::vector<float> negatives(static_cast<size_t>(options.mrr_negatives));
      for (size_t n = 0; n < negatives.size(); ++n) {
        negatives[n] = scores[3 * count + q * negatives.size() + n].logit;
      }
      reciprocal_rank_sum += 1.0 / TieAwareRank(positive[q], negatives);
    }
    report->mrr_queries += static_cast<int64_t>(ranked);

    const int64_t ranking_done = model_ranking.Finish().queries;
    const auto one_vs_all = static_cast<size_t>(
        std::clamp<int64_t>(options.ranking_queries < 0 ? static_cast<int64_t>(count)
                                                        : options.ranking_queries - ranking_done,
                            0, static_cast<int64_t>(count)));
    for (size_t i = begin; i < begin + one_vs_all; ++i) {
      for (; observed < i && stream.ts[observed] < stream.ts[i]; ++observed) {
        baselines.Observe(stream.src[observed], stream.dst[observed], stream.ts[observed]);
      }
      const auto candidate_of = candidate_position.find(stream.dst[i]);
      if (candidate_of == candidate_position.end()) {
        ++report->unrankable;
        model_ranking.Add(0);
        for (auto& accumulator : baseline_ranking) accumulator.Add(0);
        continue;
      }
      candidates_sum += static_cast<double>(candidates.size());
      const Stopwatch topk_watch;
      Status status = target.TopK(stream.src[i], stream.ts[i], options.ranking_k, &top);
      if (!status.ok()) return status;
      report->ranking_seconds += topk_watch.Seconds();
      double rank = 0;
      for (const RankedDestination& candidate : top) {
        if (candidate.dst != stream.dst[i]) continue;
        double greater = 0, equal = 0;
        for (const RankedDestination& other : top) {
          greater += other.logit > candidate.logit;
          equal += other.dst != candidate.dst && other.logit == candidate.logit;
        }
        rank = 1 + greater + 0.5 * equal;
        break;
      }
      model_ranking.Add(rank);
      for (int b = 0; b < kBaselines; ++b) {
        baselines.Score(static_cast<Baseline>(b), stream.src[i], stream.ts[i], candidates,
                        &baseline_scores);
        baseline_ranking[b].Add(TieAwareRankAmong(baseline_scores, candidate_of->second));
      }
    }

    Slice(stream, end - 1, end, &slice);
    Status status = target.Ingest(slice, end - 1, &last_sequence);
    if (!status.ok()) return status;
    ingested(end - 1, end);
    for (size_t i = begin; i < end; ++i) remember(i);
    if (options.progress) options.progress(end, stream.size());
    begin = end;
  }
  report->random = random_figures.Finish();
  report->historical = historical_figures.Finish();
  report->mrr =
      report->mrr_queries > 0 ? reciprocal_rank_sum / static_cast<double>(report->mrr_queries) : 0;
  report->ranking = model_ranking.Finish();
  for (int b = 0; b < kBaselines; ++b) report->baselines[b] = baseline_ranking[b].Finish();
  const int64_t ranked_queries = report->ranking.queries - report->unrankable;
  report->candidates_mean =
      ranked_queries > 0 ? candidates_sum / static_cast<double>(ranked_queries) : 0;
  report->mean_representation_norm =
      report->test_events > 0 ? norm_sum / (2.0 * static_cast<double>(report->test_events)) : 0;
  report->seconds = watch.Seconds();
  report->scored_pairs_per_second = static_cast<double>(scored_pairs) / report->seconds;
  return Status::Ok();
}

std::string FormatReplayReport(const ReplayReport& report) {
  char buffer[1024];
  std::snprintf(
      buffer, sizeof(buffer),
      "replay evaluation: %llu history events, %llu test events\n"
      "%-11s %8s %8s %10s %10s\n"
      "%-11s %8.4f %8.4f %10.4f %10.4f\n"
      "%-11s %8.4f %8.4f %10.4f %10.4f\n"
      "MRR %.4f over %lld queries; mean representation norm %.3f; %.1f s, %.0f scored pairs/s\n",
      static_cast<unsigned long long>(report.history_events),
      static_cast<unsigned long long>(report.test_events), "negatives", "AP", "AUC", "pooled AP",
      "pooled AUC", "random", report.random.ap, report.random.auc, report.random.pooled_ap,
      report.random.pooled_auc, "historical", report.historical.ap, report.historical.auc,
      report.historical.pooled_ap, report.historical.pooled_auc, report.mrr,
      static_cast<long long>(report.mrr_queries), report.mean_representation_norm, report.seconds,
      report.scored_pairs_per_second);
  std::string text = buffer;
  if (report.ranking.queries == 0) return text;
  std::snprintf(buffer, sizeof(buffer),
                "one-vs-all ranking: %lld queries, %.0f candidates each on average (every "
                "destination seen so far), %lld unrankable (destination new); TopK %.1f s\n"
                "%-20s %8s %8s %8s\n",
                static_cast<long long>(report.ranking.queries), report.candidates_mean,
                static_cast<long long>(report.unrankable), report.ranking_seconds, "method", "MRR",
                "Hits@1", "Hits@10");
  text += buffer;
  auto row = [&](const char* name, const RankingFigures& f) {
    std::snprintf(buffer, sizeof(buffer), "%-20s %8.4f %8.4f %8.4f\n", name, f.mrr, f.hits_at_1,
                  f.hits_at_10);
    text += buffer;
  };
  row("model (TopK)", report.ranking);
  for (int b = 0; b < kBaselines; ++b) {
    row(BaselineName(static_cast<Baseline>(b)), report.baselines[b]);
  }
  return text;
}

std::string ReplayReportJson(const ReplayReport& report) {
  auto figures = [](const LinkFigures& f) {
    return nlohmann::json{{"ap", f.ap},
                          {"auc", f.auc},
                          {"pooled_ap", f.pooled_ap},
                          {"pooled_auc", f.pooled_auc},
                          {"positives", f.positives}};
  };
  auto ranking = [](const RankingFigures& f) {
    return nlohmann::json{{"mrr", f.mrr},
                          {"hits_at_1", f.hits_at_1},
                          {"hits_at_10", f.hits_at_10},
                          {"queries", f.queries}};
  };
  nlohmann::json baselines;
  for (int b = 0; b < kBaselines; ++b) {
    baselines[BaselineName(static_cast<Baseline>(b))] = ranking(report.baselines[b]);
  }
  return nlohmann::json{{"history_events", report.history_events},
                        {"test_events", report.test_events},
                        {"random", figures(report.random)},
                        {"historical", figures(report.historical)},
                        {"mrr", report.mrr},
                        {"mrr_queries", report.mrr_queries},
                        {"ranking", ranking(report.ranking)},
                        {"baselines", baselines},
                        {"ranking_unrankable", report.unrankable},
                        {"ranking_candidates_mean", report.candidates_mean},
                        {"ranking_seconds", report.ranking_seconds},
                        {"baseline_window_seconds", report.baseline_options.window_seconds},
                        {"baseline_half_life_seconds", report.baseline_options.half_life_seconds},
                        {"mean_representation_norm", report.mean_representation_norm},
                        {"seconds", report.seconds},
                        {"scored_pairs_per_second", report.scored_pairs_per_second}}
      .dump(2);
}

}  // namespace tlp
