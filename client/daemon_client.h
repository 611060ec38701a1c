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

class DaemonClient : public ReplayTarget {
 public:
  DaemonClient(std::string address, double timeout_seconds);

  // Sends events [first, first + events.size()) of a stream in one IngestBatch; events without
  // an id get "<id_prefix>:<position>".
  Status IngestBatch(const EventBatch& events, uint64_t first, tlp::v1::IngestSummary* summary);
  // Ids of IngestBatch / Ingest: the file name without its directory is a good prefix.
  void set_id_prefix(std::string prefix) { id_prefix_ = std::move(prefix); }

  // ReplayTarget
  Status Ingest(const EventBatch& events, uint64_t first, uint64_t* last_sequence) override;
  Status Score(std::span<const PairQuery> queries, std::vector<PairScore>* scores) override;

  // A context carrying the deadline, for calls made on stub() directly.
  void Prepare(grpc::ClientContext* context) const;
  // Translates a failed call, naming the address for "cannot reach".
  Status FromGrpc(const grpc::Status& status) const;
  tlp::v1::TemporalLinkPrediction::Stub& stub() { return *stub_; }
  const std::string& address() const { return address_; }

 private:
  std::string address_;
  double timeout_seconds_;
  std::string id_prefix_ = "stream";
  std::unique_ptr<tlp::v1::TemporalLinkPrediction::Stub> stub_;
};

}  // namespace tlp::client
