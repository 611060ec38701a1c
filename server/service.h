// The gRPC face of tlpd: translates tlp.v1 messages to Engine calls and Status codes to gRPC
// status codes. No logic beyond validation of request shapes lives here.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "server/engine.h"
#include "server/ingest_writer.h"
#include "server/metrics.h"
#include "server/score_batcher.h"
#include "server/security.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::server {

struct ServiceLimits {
  size_t max_batch_events = 100000;
  size_t max_score_pairs = 10000;
  size_t max_candidates = 100000;
  uint32_t max_k = 1000;
  // TopK: the model scores at most max(this, k) candidates, those the recency-then-popularity
  // baseline ranks first (server/link_ranker.h); 0 = every candidate.
  size_t topk_shortlist = 0;
  size_t stream_batch_events = 1000;  // IngestEvents: events per durable append
  size_t max_inflight_ingest = 64;    // concurrent ingest calls; beyond: RESOURCE_EXHAUSTED
};

// Until SetReady() every call answers UNAVAILABLE (the daemon is replaying its log), so the
// gRPC server and its health service can start first.
class TemporalLinkService final : public tlp::v1::TemporalLinkPrediction::Service {
 public:
  // `authenticator` (may be null: no token required) must outlive the service.
  TemporalLinkService(Metrics* metrics, ServiceLimits limits = {},
                      const TokenAuthenticator* authenticator = nullptr);
  void SetReady(Engine& engine, ScoreBatcher& batcher, IngestWriter& writer);
  // Ingest calls answer FAILED_PRECONDITION with `reason` (a replica following Kafka). Call
  // before the server starts.
  void RefuseIngest(std::string reason) { ingest_refusal_ = std::move(reason); }

  grpc::Status IngestEvents(grpc::ServerContext* context,
                            grpc::ServerReader<tlp::v1::EdgeEvent>* reader,
                            tlp::v1::IngestSummary* summary) override;
  grpc::Status IngestBatch(grpc::ServerContext* context, const tlp::v1::IngestBatchRequest* request,
                           tlp::v1::IngestSummary* summary) override;
  grpc::Status ScoreLinks(grpc::ServerContext* context, const tlp::v1::ScoreRequest* request,
                          tlp::v1::ScoreResponse* response) override;
  grpc::Status TopK(grpc::ServerContext* context, const tlp::v1::TopKRequest* request,
                    tlp::v1::TopKResponse* response) override;
  grpc::Status GetNodeState(grpc::ServerContext* context, const tlp::v1::NodeStateRequest* request,
                            tlp::v1::NodeStateResponse* response) override;
  grpc::Status GetModelInfo(grpc::ServerContext* context, const tlp::v1::ModelInfoRequest* request,
                            tlp::v1::ModelInfoResponse* response) override;
  grpc::Status ScoreNodeStates(grpc::ServerContext* context,
                               const tlp::v1::ScoreNodeStatesRequest* request,
                               tlp::v1::ScoreNodeStatesResponse* response) override;

 private:
  // The calls above, before they are counted by method and status code.
  grpc::Status HandleIngestEvents(grpc::ServerContext* context,
                                  grpc::ServerReader<tlp::v1::EdgeEvent>* reader,
                                  tlp::v1::IngestSummary* summary);
  grpc::Status HandleIngestBatch(grpc::ServerContext* context,
                                 const tlp::v1::IngestBatchRequest* request,
                                 tlp::v1::IngestSummary* summary);
  grpc::Status HandleScoreLinks(grpc::ServerContext* context, const tlp::v1::ScoreRequest* request,
                                tlp::v1::ScoreResponse* response);
  grpc::Status HandleTopK(grpc::ServerContext* context, const tlp::v1::TopKRequest* request,
                          tlp::v1::TopKResponse* response);
  grpc::Status HandleGetNodeState(const tlp::v1::NodeStateRequest* request,
                                  tlp::v1::NodeStateResponse* response);
  grpc::Status HandleGetModelInfo(tlp::v1::ModelInfoResponse* response);
  grpc::Status HandleScoreNodeStates(const tlp::v1::ScoreNodeStatesRequest* request,
                                     tlp::v1::ScoreNodeStatesResponse* response);
  // Records a successful call's scores in the metrics (when there are metrics).
  void ObserveScores(std::span<const LinkScore> scores, double seconds);
  void ObserveNodeStates(std::span<const NodeStateScore> scores, double seconds);
  grpc::Status Counted(const char* method, grpc::Status status);
  // Every tlp.v1 call goes through here: the caller's credentials are checked (when tokens are
  // required), then `handle` runs, then the outcome is counted by method and code.
  template <typename Handler>
  grpc::Status Guarded(const char* method, const grpc::ServerContext& context, Handler&& handle) {
    grpc::Status status = authenticator_ ? authenticator_->Check(context) : grpc::Status::OK;
    if (status.ok()) status = handle();
    return Counted(method, status);
  }

  // Makes `batch` durable through the writer and adds its counts to `summary`; `first_index`
  // offsets error messages. A full queue adds the trailer `retry-after-ms`.
  Status IngestOne(grpc::ServerContext* context, const EventBatch& batch, size_t first_index,
                   tlp::v1::IngestSummary* summary);
  Status Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores,
               std::chrono::system_clock::time_point deadline);
  // FAILED_PRECONDITION when ingest is refused; RESOURCE_EXHAUSTED when more than
  // max_inflight_ingest calls are in flight; else OK.
  grpc::Status AdmitIngest(size_t inflight) const;
  // The engine once ready, else null.
  Engine* Ready() const { return engine_.load(std::memory_order_acquire); }

  std::atomic<Engine*> engine_{nullptr};
  std::atomic<ScoreBatcher*> batcher_{nullptr};
  std::atomic<IngestWriter*> writer_{nullptr};
  Metrics* metrics_;  // may be null (tests)
  const TokenAuthenticator* authenticator_;
  ServiceLimits limits_;
  std::atomic<size_t> inflight_ingest_{0};
  std::string ingest_refusal_;
};

}  // namespace tlp::server
