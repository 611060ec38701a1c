// `tlpd serve`: the long-running daemon.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "server/engine.h"
#include "server/freed_memory_bound.h"
#include "server/ingest_writer.h"
#include "server/kafka_source.h"
#include "server/metrics.h"
#include "server/model_refresher.h"
#include "server/score_batcher.h"
#include "server/security.h"
#include "server/service.h"

namespace grpc {
class Server;
}

namespace tlp::server {

struct ServeOptions {
  EngineOptions engine;
  std::string listen = "127.0.0.1:50051";
  std::string metrics_listen = "127.0.0.1:9464";  // empty = no metrics endpoint
  ScoreBatcherOptions batcher;
  IngestWriterOptions writer;
  ServiceLimits limits;  // per-request bounds of the tlp.v1 calls
  // Without a model at engine.checkpoint (default <data_dir>/model.pt), train the bundled one
  // on `bootstrap_data` (default: the bundled Wikipedia stream) first; off = fail instead.
  bool bootstrap = true;
  std::string bootstrap_data;
  SecurityOptions security;
  // With kafka.brokers set, the events come from Kafka and gRPC ingest is refused.
  KafkaSourceOptions kafka;
  // Freed memory the allocator may keep for reuse before it goes back to the kernel.
  size_t retain_freed_mb = 256;
  // Scheduled model refresh (off unless a trigger is set; `tlpctl model refresh` asks for one).
  RefreshOptions refresh;
};

// A running daemon: engine, gRPC server (tlp.v1 + health + reflection) and metrics. The gRPC
// server starts first with health NOT_SERVING and tlp.v1 answering UNAVAILABLE; it turns
// SERVING once the store is open and the log is replayed into node memory.
class Daemon {
 public:
  // Returns once serving (or on failure).
  static Status Start(const ServeOptions& options, std::unique_ptr<Daemon>* daemon);
  ~Daemon();
  // Stops accepting, lets in-flight calls finish (up to `grace_seconds`), closes the store.
  void Shutdown(double grace_seconds = 10.0);
  int port() const { return port_; }
  Engine& engine() { return *engine_; }

 private:
  class Impl;
  // Every second until shutdown: store, queue and cache figures into the gauges.
  void ExportStats();
  // The Kafka source's part of ExportStats; `previous` holds the counts already exported.
  // build_info and the model-load series; *exported: the status last exported (null: build
  // info only).
  void ExportModel(ModelStatus* exported);
  void ExportKafkaStats(KafkaSourceStats* previous);
  // The refresher's status into its series; `exported` holds the status last exported.
  void ExportRefresh(RefreshStatus* exported);
  std::unique_ptr<FreedMemoryBound> freed_memory_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ModelRefresher> refresher_;  // before the engine it uses goes
  std::unique_ptr<ScoreBatcher> batcher_;
  std::unique_ptr<IngestWriter> writer_;
  std::unique_ptr<KafkaSource> kafka_;
  std::unique_ptr<TokenAuthenticator> authenticator_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

void AddServeCommand(CLI::App& app);

}  // namespace tlp::server
