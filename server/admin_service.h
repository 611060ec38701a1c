// The gRPC face of model refresh (tlp.v1.Admin): LoadModel, GetModelStatus, Rollback and
// RefreshModel, translated to Engine::LoadModel / GetModelStatus / Rollback and
// ModelRefresher::RefreshNow. Separate from tlp.v1's data plane
// so that it can take other credentials: when tokens are required (--token-file), admin calls
// need a token from --admin-token-file, and none passes without one.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>

#include "server/engine.h"
#include "server/metrics.h"
#include "server/model_refresher.h"
#include "server/security.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::server {

class AdminService final : public tlp::v1::Admin::Service {
 public:
  // `metrics` may be null; `authenticator` null means no token is required (security off).
  // `refuse_all`: tokens are required for tlp.v1 but no admin token was configured, so every
  // admin call answers PERMISSION_DENIED. Both must outlive the service.
  AdminService(Metrics* metrics, const TokenAuthenticator* authenticator, bool refuse_all);
  // Until then every call answers UNAVAILABLE (the daemon is recovering).
  void SetReady(Engine& engine, ModelRefresher& refresher) {
    refresher_.store(&refresher, std::memory_order_relaxed);
    engine_.store(&engine, std::memory_order_release);
  }

  grpc::Status LoadModel(grpc::ServerContext* context, const tlp::v1::LoadModelRequest* request,
                         tlp::v1::ModelStatusResponse* response) override;
  grpc::Status GetModelStatus(grpc::ServerContext* context,
                              const tlp::v1::ModelStatusRequest* request,
                              tlp::v1::ModelStatusResponse* response) override;
  grpc::Status Rollback(grpc::ServerContext* context, const tlp::v1::RollbackRequest* request,
                        tlp::v1::ModelStatusResponse* response) override;
  grpc::Status RefreshModel(grpc::ServerContext* context,
                            const tlp::v1::RefreshModelRequest* request,
                            tlp::v1::ModelStatusResponse* response) override;

 private:
  // Checks the caller, runs `call` with the engine and the refresher, fills `response` with the
  // model status after it, counts the outcome.
  template <typename Call>
  grpc::Status Guarded(const char* method, const grpc::ServerContext& context, Call&& call,
                       tlp::v1::ModelStatusResponse* response);

  std::atomic<Engine*> engine_{nullptr};  // set last by SetReady
  std::atomic<ModelRefresher*> refresher_{nullptr};
  Metrics* const metrics_;
  const TokenAuthenticator* const authenticator_;
  const bool refuse_all_;
};

// ModelStatus and RefreshStatus as the API returns them.
void FillModelStatus(const ModelStatus& status, const RefreshStatus& refresh,
                     tlp::v1::ModelStatusResponse* response);

}  // namespace tlp::server
