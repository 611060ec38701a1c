#include "server/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "common/stopwatch.h"
#include "proto/grpc_status.h"
#include "server/link_ranker.h"
#include "server/request_validation.h"

namespace tlp::server {
namespace {

void FillMetrics(const EndpointMetrics& metrics, tlp::v1::RepresentationMetrics* out) {
  out->set_representation_norm(metrics.representation_norm);
  out->set_effective_neighbors(metrics.effective_neighbors);
  out->set_attention_mass(metrics.attention_mass);
  out->set_attention_entropy(metrics.attention_entropy);
  out->set_neighbors_used(metrics.neighbors_used);
  out->set_cold_start(metrics.cold_start);
}

void FillScore(const LinkScore& score, tlp::v1::LinkScore* out) {
  out->set_src(score.query.src);
  out->set_dst(score.query.dst);
  out->set_at(score.query.at);
  out->set_probability(score.probability);
  out->set_logit(score.logit);
  FillMetrics(score.src_metrics, out->mutable_src_metrics());
  FillMetrics(score.dst_metrics, out->mutable_dst_metrics());
}

}  // namespace

namespace {

// Buckets of the representation metrics' histograms.
const prometheus::Histogram::BucketBoundaries kNormBuckets = {0.5, 1, 2, 4, 8, 16, 32, 64};
const prometheus::Histogram::BucketBoundaries kCountBuckets = {0.5, 1, 2, 3, 5, 8, 13, 21, 34};

// A scoring request's field 'queries': not empty, at most `limit` (counted in `unit`), every
// 'at' finite and >= 0; `convert` makes each domain query. INVALID_ARGUMENT names the field.
template <typename Query, typename Convert>
grpc::Status ToQueries(const google::protobuf::RepeatedPtrField<Query>& in, size_t limit,
                       const char* unit, Convert convert,
                       std::vector<std::invoke_result_t<Convert, const Query&>>* out) {
  if (in.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "field 'queries' is empty"};
  const size_t count = in.size();
  if (count > limit) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "field 'queries' holds " + std::to_string(count) +
                                                    " " + unit + ", at most " +
                                                    std::to_string(limit)};
  }
  out->clear();
  out->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const Query& query = in[static_cast<int>(i)];
    if (!std::isfinite(query.at()) || query.at() < 0) {
      return {grpc::StatusCode::INVALID_ARGUMENT,
              "query " + std::to_string(i) + ": field 'at' must be finite and >= 0"};
    }
    out->push_back(convert(query));
  }
  return grpc::Status::OK;
}

const grpc::Status kRecovering(grpc::StatusCode::UNAVAILABLE,
                               "tlpd is recovering (replaying its event log); retry shortly");

// Counts a call in flight for as long as it lives.
class InflightGuard {
 public:
  explicit InflightGuard(std::atomic<size_t>& counter) : counter_(counter) { count_ = ++counter_; }
  ~InflightGuard() { --counter_; }
  size_t count() const { return count_; }

 private:
  std::atomic<size_t>& counter_;
  size_t count_;
};

}  // namespace

TemporalLinkService::TemporalLinkService(Metrics* metrics, ServiceLimits limits,
                                         const TokenAuthenticator* authenticator)
    : metrics_(metrics), authenticator_(authenticator), limits_(limits) {}

void TemporalLinkService::SetReady(Engine& engine, ScoreBatcher& batcher, IngestWriter& writer) {
  batcher_.store(&batcher, std::memory_order_release);
  writer_.store(&writer, std::memory_order_release);
  engine_.store(&engine, std::memory_order_release);
}

Status TemporalLinkService::IngestOne(grpc::ServerContext* context, const EventBatch& batch,
                                      size_t first_index, tlp::v1::IngestSummary* summary) {
  const Stopwatch watch;
  storage::AppendResult result;
  int64_t retry_after_ms = 0;
  Status status = writer_.load(std::memory_order_acquire)->Write(batch, &result, &retry_after_ms);
  if (retry_after_ms > 0 && context != nullptr) {
    context->AddTrailingMetadata("retry-after-ms", std::to_string(retry_after_ms));
  }
  if (!status.ok()) {
    if (status.code() == Status::Code::kIoError || status.code() == Status::Code::kCorruption ||
        status.code() == Status::Code::kInternal) {
      spdlog::error("ingest of {} events failed: {}", batch.size(), status.ToString());
    }
    if (metrics_)
      metrics_->ingest_events.Add({{"result", "rejected"}})
          .Increment(static_cast<double>(batch.size()));
    summary->set_rejected(summary->rejected() + batch.size());
    if (first_index > 0) {
      // Engine messages count from the start of this append; say where it began in the stream.
      return Status(status.code(), "in the append starting at stream event " +
                                       std::to_string(first_index) + ": " + status.message());
    }
    return status;
  }
  summary->set_accepted(summary->accepted() + result.accepted);
  summary->set_duplicates(summary->duplicates() + result.duplicates);
  summary->set_last_sequence(Ready()->store().last_sequence());
  if (metrics_) {
    metrics_->ingest_events.Add({{"result", "accepted"}})
        .Increment(static_cast<double>(result.accepted));
    metrics_->ingest_events.Add({{"result", "duplicate"}})
        .Increment(static_cast<double>(result.duplicates));
    metrics_->ingest_latency.Observe(watch.Seconds());
    metrics_->ingest_batch_size.Observe(static_cast<double>(batch.size()));
  }
  return Status::Ok();
}

grpc::Status TemporalLinkService::AdmitIngest(size_t inflight) const {
  if (!ingest_refusal_.empty()) {
    return {grpc::StatusCode::FAILED_PRECONDITION, ingest_refusal_};
  }
  if (inflight <= limits_.max_inflight_ingest) return grpc::Status::OK;
  return {grpc::StatusCode::RESOURCE_EXHAUSTED, "too many concurrent ingest calls (" +
                                                    std::to_string(inflight - 1) +
                                                    " in flight); retry after a short backoff"};
}

grpc::Status TemporalLinkService::HandleIngestBatch(grpc::ServerContext* context,
                                                    const tlp::v1::IngestBatchRequest* request,
                                                    tlp::v1::IngestSummary* summary) {
  Engine* engine = Ready();
  if (engine == nullptr) return kRecovering;
  InflightGuard inflight(inflight_ingest_);
  if (grpc::Status admitted = AdmitIngest(inflight.count()); !admitted.ok()) return admitted;
  EventBatch batch;
  batch.feature_dim = engine->store().feature_dim();
  if (Status status = ToEventBatch(*request, limits_.max_batch_events, &batch); !status.ok()) {
    summary->set_rejected(request->events_size());
    return ToGrpcStatus(status);
  }
  return ToGrpcStatus(IngestOne(context, batch, 0, summary));
}

grpc::Status TemporalLinkService::HandleIngestEvents(grpc::ServerContext* context,
                                                     grpc::ServerReader<tlp::v1::EdgeEvent>* reader,
                                                     tlp::v1::IngestSummary* summary) {
  Engine* engine = Ready();
  if (engine == nullptr) return kRecovering;
  InflightGuard inflight(inflight_ingest_);
  if (grpc::Status admitted = AdmitIngest(inflight.count()); !admitted.ok()) return admitted;
  EventBatch batch;
  batch.feature_dim = engine->store().feature_dim();
  tlp::v1::EdgeEvent event;
  size_t index = 0, batch_start = 0;
  while (reader->Read(&event)) {
    Status status = AppendEdgeEvent(event, index, &batch);
    if (!status.ok()) {
      // Events before this one in the open batch are still made durable: nothing already
      // received and valid is dropped.
      Status flushed =
          batch.empty() ? Status::Ok() : IngestOne(context, batch, batch_start, summary);
      summary->set_rejected(summary->rejected() + 1);
      return ToGrpcStatus(flushed.ok() ? status : flushed);
    }
    ++index;
    if (batch.size() >= limits_.stream_batch_events) {
      status = IngestOne(context, batch, batch_start, summary);
      if (!status.ok()) return ToGrpcStatus(status);
      batch.Clear();
      batch_start = index;
    }
  }
  if (!batch.empty()) return ToGrpcStatus(IngestOne(context, batch, batch_start, summary));
  return grpc::Status::OK;
}

Status TemporalLinkService::Score(std::span<const LinkQuery> queries,
                                  std::vector<LinkScore>* scores,
                                  std::chrono::system_clock::time_point deadline) {
  const Stopwatch watch;
  Status status = batcher_.load(std::memory_order_acquire)->Score(queries, scores, deadline);
  if (status.ok()) ObserveScores(*scores, watch.Seconds());
  return status;
}

void TemporalLinkService::ObserveScores(std::span<const LinkScore> scores, double seconds) {
  if (!metrics_) return;
  metrics_->score_latency.Observe(seconds);
  auto& src_norm = metrics_->representation_norm.Add({{"role", "src"}}, kNormBuckets);
  auto& dst_norm = metrics_->representation_norm.Add({{"role", "dst"}}, kNormBuckets);
  auto& src_ess = metrics_->effective_neighbors.Add({{"role", "src"}}, kCountBuckets);
  auto& dst_ess = metrics_->effective_neighbors.Add({{"role", "dst"}}, kCountBuckets);
  auto& src_mass = metrics_->attention_mass.Add({{"role", "src"}}, kCountBuckets);
  auto& dst_mass = metrics_->attention_mass.Add({{"role", "dst"}}, kCountBuckets);
  for (const LinkScore& score : scores) {
    src_norm.Observe(score.src_metrics.representation_norm);
    dst_norm.Observe(score.dst_metrics.representation_norm);
    src_ess.Observe(score.src_metrics.effective_neighbors);
    dst_ess.Observe(score.dst_metrics.effective_neighbors);
    src_mass.Observe(score.src_metrics.attention_mass);
    dst_mass.Observe(score.dst_metrics.attention_mass);
  }
}

void TemporalLinkService::ObserveNodeStates(std::span<const NodeStateScore> scores,
                                            double seconds) {
  if (!metrics_) return;
  metrics_->node_state_latency.Observe(seconds);
  auto& norm = metrics_->representation_norm.Add({{"role", "node"}}, kNormBuckets);
  auto& ess = metrics_->effective_neighbors.Add({{"role", "node"}}, kCountBuckets);
  auto& mass = metrics_->attention_mass.Add({{"role", "node"}}, kCountBuckets);
  for (const NodeStateScore& score : scores) {
    metrics_->node_state_probability.Observe(score.probability);
    norm.Observe(score.metrics.representation_norm);
    ess.Observe(score.metrics.effective_neighbors);
    mass.Observe(score.metrics.attention_mass);
  }
}

grpc::Status TemporalLinkService::HandleScoreLinks(grpc::ServerContext* context,
                                                   const tlp::v1::ScoreRequest* request,
                                                   tlp::v1::ScoreResponse* response) {
  if (Ready() == nullptr) return kRecovering;
  std::vector<LinkQuery> queries;
  if (grpc::Status invalid = ToQueries(
          request->queries(), limits_.max_score_pairs, "pairs",
          [](const tlp::v1::LinkQuery& query) {
            return LinkQuery{query.src(), query.dst(), query.at()};
          },
          &queries);
      !invalid.ok()) {
    return invalid;
  }
  std::vector<LinkScore> scores;
  Status status = Score(queries, &scores, context->deadline());
  if (!status.ok()) return ToGrpcStatus(status);
  for (const LinkScore& score : scores) FillScore(score, response->add_scores());
  response->set_model_fingerprint(ModelFingerprintText(scores.front().model));  // never empty
  return grpc::Status::OK;
}

grpc::Status TemporalLinkService::HandleTopK(grpc::ServerContext* context,
                                             const tlp::v1::TopKRequest* request,
                                             tlp::v1::TopKResponse* response) {
  Engine* engine = Ready();
  if (engine == nullptr) return kRecovering;
  if (request->k() < 1 || request->k() > limits_.max_k) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'k' must be in 1.." + std::to_string(limits_.max_k)};
  }
  if (static_cast<size_t>(request->candidates_size()) > limits_.max_candidates) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "field 'candidates' holds more than " + std::to_string(limits_.max_candidates)};
  }
  if (!std::isfinite(request->at()) || request->at() < 0) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "field 'at' must be finite and >= 0"};
  }
  RankQuery query{request->src(),
                  request->at(),
                  request->k(),
                  {request->candidates().begin(), request->candidates().end()},
                  request->exclude_seen(),
                  std::nullopt};
  switch (request->ranker()) {
    case tlp::v1::RANKER_MODEL:
      break;
    case tlp::v1::RANKER_RECENCY_POPULARITY:
      query.baseline = Baseline::kRecency;
      break;
    case tlp::v1::RANKER_EDGEBANK:
      query.baseline = Baseline::kEdgeBank;
      break;
    case tlp::v1::RANKER_POPULARITY:
      query.baseline = Baseline::kPopularity;
      break;
    default:
      return {grpc::StatusCode::INVALID_ARGUMENT, "field 'ranker' is " +
                                                      std::to_string(request->ranker()) +
                                                      ", not one of tlp.v1.Ranker's values"};
  }
  RankResult ranked;
  Status status = LinkRanker(*engine, limits_.max_score_pairs, limits_.topk_shortlist)
                      .Rank(
                          query,
                          [&](std::span<const LinkQuery> queries, std::vector<LinkScore>* scores) {
                            return Score(queries, scores, context->deadline());
                          },
                          &ranked);
  if (!status.ok()) return ToGrpcStatus(status);
  for (const LinkScore& score : ranked.top) FillScore(score, response->add_results());
  response->set_candidates_scored(static_cast<uint32_t>(ranked.candidates_scored));
  if (ranked.model != 0) response->set_model_fingerprint(ModelFingerprintText(ranked.model));
  return grpc::Status::OK;
}

grpc::Status TemporalLinkService::HandleGetNodeState(const tlp::v1::NodeStateRequest* request,
                                                     tlp::v1::NodeStateResponse* response) {
  Engine* engine = Ready();
  if (engine == nullptr) return kRecovering;
  if (request->recent_neighbors() > 1000) {
    return {grpc::StatusCode::INVALID_ARGUMENT, "field 'recent_neighbors' must be at most 1000"};
  }
  NodeInfo info;
  Status status = engine->GetNode(request->node(), request->recent_neighbors(), &info);
  if (!status.ok()) return ToGrpcStatus(status);
  response->set_node(request->node());
  response->set_known(info.known);
  response->set_degree(info.degree);
  response->set_last_update_ts(info.last_update_ts);
  response->mutable_memory()->Add(info.memory.begin(), info.memory.end());
  for (const auto& neighbor : info.recent) {
    auto* out = response->add_recent();
    out->set_node(neighbor.node);
    out->set_ts(neighbor.ts);
    out->set_sequence(neighbor.sequence);
  }
  return grpc::Status::OK;
}

grpc::Status TemporalLinkService::HandleScoreNodeStates(
    const tlp::v1::ScoreNodeStatesRequest* request, tlp::v1::ScoreNodeStatesResponse* response) {
  Engine* engine = Ready();
  if (engine == nullptr) return kRecovering;
  std::vector<NodeStateQuery> queries;
  if (grpc::Status invalid = ToQueries(
          request->queries(), limits_.max_score_pairs, "queries",
          [](const tlp::v1::NodeStateQuery& query) {
            return NodeStateQuery{query.node(), query.at()};
          },
          &queries);
      !invalid.ok()) {
    return invalid;
  }
  const Stopwatch watch;
  std::vector<NodeStateScore> scores;
  if (Status status = engine->ScoreNodeStates(queries, &scores); !status.ok()) {
    return ToGrpcStatus(status);
  }
  ObserveNodeStates(scores, watch.Seconds());
  for (const NodeStateScore& score : scores) {
    tlp::v1::NodeStateScore* out = response->add_scores();
    out->set_node(score.query.node);
    out->set_at(score.query.at);
    out->set_probability(score.probability);
    out->set_logit(score.logit);
    FillMetrics(score.metrics, out->mutable_metrics());
  }
  response->set_model_fingerprint(ModelFingerprintText(scores.front().model));
  return grpc::Status::OK;
}

grpc::Status TemporalLinkService::HandleGetModelInfo(tlp::v1::ModelInfoResponse* response) {
  Engine* engine = Ready();
  if (engine == nullptr) return kRecovering;
  // Read-your-writes: what an acknowledged ingest stored is counted as applied.
  if (Status status = engine->AwaitMemory(); !status.ok()) return ToGrpcStatus(status);
  const ModelInfo info = engine->Info();
  response->set_architecture(info.architecture);
  response->set_attention_p(info.attention_p);
  response->set_fingerprint(info.fingerprint);
  response->set_device(info.device);
  response->set_embedding_dim(info.embedding_dim);
  response->set_memory_dim(info.memory_dim);
  response->set_edge_feature_dim(info.edge_feature_dim);
  response->set_neighbors(info.neighbors);
  response->set_events_applied(info.events_applied);
  response->set_watermark(info.watermark);
  response->set_version(TLPD_VERSION);
  response->set_node_state(info.node_state);
  response->set_outcome_attention(info.outcome_attention);
  return grpc::Status::OK;
}

grpc::Status TemporalLinkService::Counted(const char* method, grpc::Status status) {
  if (metrics_) metrics_->CountRequest(method, status.error_code());
  return status;
}

grpc::Status TemporalLinkService::IngestEvents(grpc::ServerContext* context,
                                               grpc::ServerReader<tlp::v1::EdgeEvent>* reader,
                                               tlp::v1::IngestSummary* summary) {
  return Guarded("IngestEvents", *context,
                 [&] { return HandleIngestEvents(context, reader, summary); });
}

grpc::Status TemporalLinkService::IngestBatch(grpc::ServerContext* context,
                                              const tlp::v1::IngestBatchRequest* request,
                                              tlp::v1::IngestSummary* summary) {
  return Guarded("IngestBatch", *context,
                 [&] { return HandleIngestBatch(context, request, summary); });
}

grpc::Status TemporalLinkService::ScoreLinks(grpc::ServerContext* context,
                                             const tlp::v1::ScoreRequest* request,
                                             tlp::v1::ScoreResponse* response) {
  return Guarded("ScoreLinks", *context,
                 [&] { return HandleScoreLinks(context, request, response); });
}

grpc::Status TemporalLinkService::TopK(grpc::ServerContext* context,
                                       const tlp::v1::TopKRequest* request,
                                       tlp::v1::TopKResponse* response) {
  return Guarded("TopK", *context, [&] { return HandleTopK(context, request, response); });
}

grpc::Status TemporalLinkService::GetNodeState(grpc::ServerContext* context,
                                               const tlp::v1::NodeStateRequest* request,
                                               tlp::v1::NodeStateResponse* response) {
  return Guarded("GetNodeState", *context, [&] { return HandleGetNodeState(request, response); });
}

grpc::Status TemporalLinkService::GetModelInfo(grpc::ServerContext* context,
                                               const tlp::v1::ModelInfoRequest*,
                                               tlp::v1::ModelInfoResponse* response) {
  return Guarded("GetModelInfo", *context, [&] { return HandleGetModelInfo(response); });
}

grpc::Status TemporalLinkService::ScoreNodeStates(grpc::ServerContext* context,
                                                  const tlp::v1::ScoreNodeStatesRequest* request,
                                                  tlp::v1::ScoreNodeStatesResponse* response) {
  return Guarded("ScoreNodeStates", *context,
                 [&] { return HandleScoreNodeStates(request, response); });
}

}  // namespace tlp::server
