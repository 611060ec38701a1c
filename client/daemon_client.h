// DaemonClient: tlp.v1 calls over one channel with the conventions every tool of ours shares:
// a deadline on each call, errors as Status that name the address when tlpd cannot be reached,
// and idempotent event ids derived from the file name and position, so that re-running an
// ingest after a failure stores nothing twice.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/replay_evaluation.h"
#include "common/status.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace tlp::client {

// How to reach a daemon started with --tls-* / --token-file; empty fields are off.
struct ChannelSecurity {
  std::string tls_ca;      // PEM roots to verify the server (TLS on when set)
  std::string tls_cert;    // PEM client certificate, for mutual TLS
  std::string tls_key;     // its private key
  std::string token_file;  // bearer token sent with every tlp.v1 call (first line)
};

// A channel to `address` with `security`; *token is the bearer token ("" = none).
Status OpenChannel(const std::string& address, const ChannelSecurity& security,
                   std::shared_ptr<grpc::Channel>* channel, std::string* token);

class DaemonClient : public ReplayTarget {
 public:
  // Plaintext, no token.
  DaemonClient(std::string address, double timeout_seconds);
  DaemonClient(std::string address, double timeout_seconds, std::shared_ptr<grpc::Channel> channel,
               std::string token);

  // Sends events [first, first + events.size()) of a stream in one IngestBatch; events without
  // an id get "<id_prefix>:<position>".
  Status IngestBatch(const EventBatch& events, uint64_t first, tlp::v1::IngestSummary* summary);
  // Ids of IngestBatch / Ingest: the file name without its directory is a good prefix.
  void set_id_prefix(std::string prefix) { id_prefix_ = std::move(prefix); }

  // ReplayTarget
  Status Ingest(const EventBatch& events, uint64_t first, uint64_t* last_sequence) override;
  Status Score(std::span<const PairQuery> queries, std::vector<PairScore>* scores) override;
  Status TopK(uint64_t src, double at, uint32_t k, std::vector<RankedDestination>* ranked) override;

  // A context carrying the deadline and the token, for calls made on stub() directly.
  void Prepare(grpc::ClientContext* context) const;
  // Translates a failed call, naming the address for "cannot reach".
  Status FromGrpc(const grpc::Status& status) const;
  tlp::v1::TemporalLinkPrediction::Stub& stub() { return *stub_; }
  tlp::v1::Admin::Stub& admin_stub() { return *admin_stub_; }
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  double timeout_seconds_;
  std::string token_;
  std::string id_prefix_ = "stream";
  std::unique_ptr<tlp::v1::TemporalLinkPrediction::Stub> stub_;
  std::unique_ptr<tlp::v1::Admin::Stub> admin_stub_;
};

}  // namespace tlp::client
