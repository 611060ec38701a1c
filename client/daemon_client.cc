#include "client/daemon_client.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "proto/grpc_status.h"

namespace tlp::client {

namespace {

Status ReadFile(const std::string& path, std::string* contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound("cannot read '" + path + "'");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *contents = buffer.str();
  return Status::Ok();
}

}  // namespace

Status OpenChannel(const std::string& address, const ChannelSecurity& security,
                   std::shared_ptr<grpc::Channel>* channel, std::string* token) {
  token->clear();
  if (!security.token_file.empty()) {
    std::string contents;
    Status status = ReadFile(security.token_file, &contents);
    if (!status.ok()) return status;
    *token = contents.substr(0, contents.find_first_of("\r\n"));
    if (token->empty())
      return Status::InvalidArgument("token file '" + security.token_file + "' is empty");
  }
  if (security.tls_ca.empty() && security.tls_cert.empty()) {
    *channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    return Status::Ok();
  }
  grpc::SslCredentialsOptions ssl;
  Status status =
      security.tls_ca.empty() ? Status::Ok() : ReadFile(security.tls_ca, &ssl.pem_root_certs);
  if (status.ok() && !security.tls_cert.empty()) {
    status = ReadFile(security.tls_cert, &ssl.pem_cert_chain);
    if (status.ok()) status = ReadFile(security.tls_key, &ssl.pem_private_key);
  }
  if (!status.ok()) return status;
  *channel = grpc::CreateChannel(address, grpc::SslCredentials(ssl));
  return Status::Ok();
}

DaemonClient::DaemonClient(std::string address, double timeout_seconds)
    : DaemonClient(address, timeout_seconds,
                   grpc::CreateChannel(address, grpc::InsecureChannelCredentials()), "") {}

DaemonClient::DaemonClient(std::string address, double timeout_seconds,
                           std::shared_ptr<grpc::Channel> channel, std::string token)
    : address_(std::move(address)),
      timeout_seconds_(timeout_seconds),
      token_(std::move(token)),
      stub_(tlp::v1::TemporalLinkPrediction::NewStub(channel)),
      admin_stub_(tlp::v1::Admin::NewStub(channel)) {}

void DaemonClient::Prepare(grpc::ClientContext* context) const {
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  context->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds_ * 1000)));
}

Status DaemonClient::FromGrpc(const grpc::Status& status) const {
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return Status::Unavailable("cannot reach tlpd at " + address_ + ": " + message);
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      // The server's own deadline answer (a request queued past it) reads the same: tlpd was
      // reached but did not answer in time.
      return Status::DeadlineExceeded("tlpd at " + address_ +
                                      " did not answer within the deadline: " + message);
    case grpc::StatusCode::UNAUTHENTICATED:
      return Status::FailedPrecondition("tlpd at " + address_ +
                                        " refused the credentials: " + message);
    default:
      return FromGrpcStatus(status);
  }
}

Status DaemonClient::IngestBatch(const EventBatch& events, uint64_t first,
                                 tlp::v1::IngestSummary* summary) {
  tlp::v1::IngestBatchRequest request;
  request.mutable_events()->Reserve(static_cast<int>(events.size()));
  for (size_t i = 0; i < events.size(); ++i) {
    auto* event = request.add_events();
    event->set_src(events.src[i]);
    event->set_dst(events.dst[i]);
    event->set_ts(events.ts[i]);
    const auto features = events.FeaturesOf(i);
    event->mutable_features()->Add(features.begin(), features.end());
    event->set_event_id(events.EventIdOf(i).empty() ? id_prefix_ + ":" + std::to_string(first + i)
                                                    : std::string(events.EventIdOf(i)));
    if (events.StateLabelOf(i) != EventBatch::kNoStateLabel) {
      event->set_state_label(static_cast<uint32_t>(events.StateLabelOf(i)));
    }
  }
  grpc::ClientContext context;
  Prepare(&context);
  return FromGrpc(stub_->IngestBatch(&context, request, summary));
}

Status DaemonClient::Ingest(const EventBatch& events, uint64_t first, uint64_t* last_sequence) {
  tlp::v1::IngestSummary summary;
  Status status = IngestBatch(events, first, &summary);
  if (status.ok()) *last_sequence = summary.last_sequence();
  return status;
}

Status DaemonClient::Score(std::span<const PairQuery> queries, std::vector<PairScore>* scores) {
  tlp::v1::ScoreRequest request;
  for (const PairQuery& query : queries) {
    auto* out = request.add_queries();
    out->set_src(query.src);
    out->set_dst(query.dst);
    out->set_at(query.at);
  }
  grpc::ClientContext context;
  Prepare(&context);
  tlp::v1::ScoreResponse response;
  Status status = FromGrpc(stub_->ScoreLinks(&context, request, &response));
  if (!status.ok()) return status;
  scores->clear();
  for (const auto& score : response.scores()) {
    scores->push_back({score.logit(), score.src_metrics().representation_norm(),
                       score.dst_metrics().representation_norm()});
  }
  return Status::Ok();
}

Status DaemonClient::TopK(uint64_t src, double at, uint32_t k,
                          std::vector<RankedDestination>* ranked) {
  tlp::v1::TopKRequest request;
  request.set_src(src);
  request.set_at(at);
  request.set_k(k);
  grpc::ClientContext context;
  Prepare(&context);
  tlp::v1::TopKResponse response;
  Status status = FromGrpc(stub_->TopK(&context, request, &response));
  if (!status.ok()) return status;
  ranked->clear();
  for (const auto& result : response.results()) ranked->push_back({result.dst(), result.logit()});
  return Status::Ok();
}

}  // namespace tlp::client
