#include "server/admin_service.h"

#include "proto/grpc_status.h"

namespace tlp::server {

AdminService::AdminService(Metrics* metrics, const TokenAuthenticator* authenticator,
                           bool refuse_all)
    : metrics_(metrics), authenticator_(authenticator), refuse_all_(refuse_all) {}

void FillModelStatus(const ModelStatus& status, const RefreshStatus& refresh,
                     tlp::v1::ModelStatusResponse* response) {
  response->set_fingerprint(status.fingerprint);
  response->set_checkpoint(status.checkpoint);
  response->set_previous_fingerprint(status.previous_fingerprint);
  response->set_previous_checkpoint(status.previous_checkpoint);
  response->set_phase(ModelLoadPhaseName(status.phase));
  response->set_loading_fingerprint(status.loading_fingerprint);
  response->set_loading_checkpoint(status.loading_checkpoint);
  response->set_replayed_events(status.replayed_events);
  response->set_target_events(status.target_events);
  response->set_last_error(status.last_error);
  response->set_swaps(status.swaps);
  response->set_rollbacks(status.rollbacks);
  response->set_last_swap_seconds(status.last_swap_seconds);
  response->set_last_hold_seconds(status.last_hold_seconds);
  tlp::v1::ModelRefreshStatus* out = response->mutable_refresh();
  out->set_running(refresh.running);
  out->set_refreshes(refresh.refreshes);
  out->set_promotions(refresh.promotions);
  out->set_failures(refresh.failures);
  out->set_last_outcome(refresh.last_outcome);
  out->set_last_error(refresh.last_error);
  out->set_candidate_mrr(refresh.candidate_mrr);
  out->set_serving_mrr(refresh.serving_mrr);
  out->set_held_back_queries(refresh.held_back_queries);
  out->set_candidate_fingerprint(refresh.candidate_fingerprint);
  out->set_serving_fingerprint(refresh.serving_fingerprint);
  out->set_last_seconds(refresh.last_seconds);
}

template <typename Call>
grpc::Status AdminService::Guarded(const char* method, const grpc::ServerContext& context,
                                   Call&& call, tlp::v1::ModelStatusResponse* response) {
  grpc::Status status = grpc::Status::OK;
  Engine* engine = engine_.load(std::memory_order_acquire);
  if (refuse_all_) {
    status = ToGrpcStatus(Status::PermissionDenied(
        "admin calls are off: tlpd requires tokens (--token-file) but has no "
        "--admin-token-file"));
  } else if (authenticator_ != nullptr) {
    status = authenticator_->Check(context);
  }
  if (status.ok() && engine == nullptr) {
    status = {grpc::StatusCode::UNAVAILABLE, "tlpd is recovering; retry shortly"};
  }
  ModelRefresher* refresher = refresher_.load(std::memory_order_relaxed);
  if (status.ok()) status = ToGrpcStatus(call(*engine, *refresher));
  if (status.ok()) FillModelStatus(engine->GetModelStatus(), refresher->GetStatus(), response);
  if (metrics_ != nullptr) metrics_->CountRequest(method, status.error_code());
  return status;
}

grpc::Status AdminService::LoadModel(grpc::ServerContext* context,
                                     const tlp::v1::LoadModelRequest* request,
                                     tlp::v1::ModelStatusResponse* response) {
  return Guarded(
      "LoadModel", *context,
      [&](Engine& engine, ModelRefresher&) {
        if (request->checkpoint().empty()) {
          return Status::InvalidArgument("field 'checkpoint' is empty");
        }
        return engine.LoadModel(request->checkpoint());
      },
      response);
}

grpc::Status AdminService::GetModelStatus(grpc::ServerContext* context,
                                          const tlp::v1::ModelStatusRequest*,
                                          tlp::v1::ModelStatusResponse* response) {
  return Guarded(
      "GetModelStatus", *context, [](Engine&, ModelRefresher&) { return Status::Ok(); }, response);
}

grpc::Status AdminService::Rollback(grpc::ServerContext* context, const tlp::v1::RollbackRequest*,
                                    tlp::v1::ModelStatusResponse* response) {
  return Guarded(
      "Rollback", *context, [](Engine& engine, ModelRefresher&) { return engine.Rollback(); },
      response);
}

grpc::Status AdminService::RefreshModel(grpc::ServerContext* context,
                                        const tlp::v1::RefreshModelRequest*,
                                        tlp::v1::ModelStatusResponse* response) {
  return Guarded(
      "RefreshModel", *context,
      [](Engine&, ModelRefresher& refresher) { return refresher.RefreshNow(); }, response);
}

}  // namespace tlp::server
