#include "server/serve_command.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/blas_kernels.h"
#include "common/thread_name.h"
#include "server/admin_service.h"
#include "server/service.h"
#include "server/train_command.h"

namespace tlp::server {

// The grpc.health.v1 service name that says the process is up (client/health_check.h).
constexpr char kLivenessService[] = "liveness";

namespace {

// Resolves the model checkpoint, training the bundled model when there is none (see
// ServeOptions::bootstrap). Runs while health says NOT_SERVING.
Status PrepareModel(const ServeOptions& options, std::string* checkpoint) {
  *checkpoint = options.engine.checkpoint.empty() ? options.engine.data_dir + "/model.pt"
                                                  : options.engine.checkpoint;
  if (std::filesystem::exists(*checkpoint)) return Status::Ok();
  if (!options.bootstrap) {
    return Status::NotFound("no model checkpoint at '" + *checkpoint +
                            "' (train one with `tlpd train`, or drop --no-bootstrap)");
  }
  const std::string data =
      options.bootstrap_data.empty() ? FindBundledData() : options.bootstrap_data;
  if (data.empty() || !std::filesystem::exists(data)) {
    return Status::NotFound("no model checkpoint at '" + *checkpoint +
                            "' and no data to train one (pass --checkpoint or --bootstrap-data)");
  }
  spdlog::warn(
      "no model at {}: training the bundled model on {} (up to 6 epochs; a minute or two on 2 "
      "cores); health stays NOT_SERVING until it is done",
      *checkpoint, data);
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(*checkpoint).parent_path(), error);
  const std::string partial = *checkpoint + ".training";
  Status status =
      TrainBundledModel(data, partial, options.engine.device, options.engine.torch_threads);
  if (!status.ok()) return status;
  // Renamed into place only when complete: a crash mid-training leaves no half model behind.
  std::filesystem::rename(partial, *checkpoint, error);
  if (error) return Status::IoError("cannot move the trained model into place: " + error.message());
  return Status::Ok();
}

}  // namespace

class Daemon::Impl {
 public:
  std::unique_ptr<TemporalLinkService> service;
  std::unique_ptr<TokenAuthenticator> admin_authenticator;
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<grpc::Server> server;
  std::thread stats_thread;
  std::atomic<bool> stopping{false};
};

Daemon::~Daemon() { Shutdown(0); }

Status Daemon::Start(const ServeOptions& options, std::unique_ptr<Daemon>* daemon) {
  std::unique_ptr<Daemon> result(new Daemon());
  result->impl_ = std::make_unique<Impl>();
  result->freed_memory_ =
      std::make_unique<FreedMemoryBound>(options.retain_freed_mb << 20, std::chrono::seconds(1));
  if (!options.metrics_listen.empty()) {
    try {
      result->metrics_ = std::make_unique<Metrics>(options.metrics_listen);
    } catch (const std::exception& error) {
      return Status::Unavailable("cannot serve metrics on " + options.metrics_listen + ": " +
                                 error.what());
    }
  }
  if (result->metrics_ && !options.security.metrics_auth_file.empty()) {
    std::vector<std::string> credentials;
    Status status = ReadSecrets(options.security.metrics_auth_file, &credentials);
    if (!status.ok()) return status;
    result->metrics_->RequireBasicAuth(std::move(credentials));
  }
  if (!options.security.token_file.empty()) {
    std::vector<std::string> tokens;
    Status status = ReadSecrets(options.security.token_file, &tokens);
    if (!status.ok()) return status;
    result->authenticator_ = std::make_unique<TokenAuthenticator>(std::move(tokens));
  }
  if (!options.security.admin_token_file.empty()) {
    std::vector<std::string> tokens;
    Status status = ReadSecrets(options.security.admin_token_file, &tokens);
    if (!status.ok()) return status;
    result->impl_->admin_authenticator = std::make_unique<TokenAuthenticator>(std::move(tokens));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (Status status = MakeServerCredentials(options.security, &credentials); !status.ok()) {
    return status;
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  result->impl_->service = std::make_unique<TemporalLinkService>(
      result->metrics_.get(), options.limits, result->authenticator_.get());
  result->impl_->admin = std::make_unique<AdminService>(
      result->metrics_.get(), result->impl_->admin_authenticator.get(),
      /*refuse_all=*/result->authenticator_ && !result->impl_->admin_authenticator);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &result->port_);
  builder.RegisterService(result->impl_->service.get());
  builder.RegisterService(result->impl_->admin.get());
  builder.SetMaxReceiveMessageSize(64 << 20);
  result->impl_->server = builder.BuildAndStart();
  if (!result->impl_->server || result->port_ == 0) {
    return Status::Unavailable("cannot listen on " + options.listen);
  }
  // Readiness ("", and every service) waits for recovery; liveness answers from now on, so that
  // an orchestrator does not restart a daemon that is training its first model or replaying.
  result->impl_->server->GetHealthCheckService()->SetServingStatus(false);
  result->impl_->server->GetHealthCheckService()->SetServingStatus(kLivenessService, true);
  spdlog::info("listening on {} (port {}); recovering before serving", options.listen,
               result->port_);
  if (const std::string_view core = BlasCoreName(); !core.empty()) {
    spdlog::info("BLAS: OpenBLAS with {} kernels", core);
  }

  EngineOptions engine_options = options.engine;
  Status status = PrepareModel(options, &engine_options.checkpoint);
  if (!status.ok()) return status;
  status = Engine::Open(engine_options, &result->engine_);
  if (!status.ok()) return status;
  Metrics* metrics = result->metrics_.get();
  result->batcher_ =
      std::make_unique<ScoreBatcher>(*result->engine_, options.batcher, [metrics](size_t pairs) {
        if (metrics) metrics->score_batch_size.Observe(static_cast<double>(pairs));
      });
  result->writer_ = std::make_unique<IngestWriter>(
      *result->engine_, options.writer, [metrics](const AppendReport& report) {
        if (!metrics) return;
        metrics->ingest_group_size.Observe(static_cast<double>(report.submissions));
        metrics->ingest_queue_events.Set(static_cast<double>(report.queued_events));
      });
  if (!options.kafka.brokers.empty()) {
    status = KafkaSource::Start(options.kafka, *result->engine_, &result->kafka_);
    if (!status.ok()) return status;
    result->impl_->service->RefuseIngest(
        "this replica follows Kafka topic '" + options.kafka.topic +
        "' (--kafka-brokers); produce events to the topic instead of calling ingest");
  }
  result->impl_->service->SetReady(*result->engine_, *result->batcher_, *result->writer_);
  result->refresher_ =
      std::make_unique<ModelRefresher>(*result->engine_, options.engine.data_dir, options.refresh);
  result->refresher_->Start();
  result->impl_->admin->SetReady(*result->engine_, *result->refresher_);
  result->impl_->server->GetHealthCheckService()->SetServingStatus(true);
  if (metrics != nullptr) {
    result->ExportModel(nullptr);
    Daemon* self = result.get();
    result->impl_->stats_thread = std::thread([self] {
      NameThisThread("tlpd-stats");
      self->ExportStats();
    });
  }
  *daemon = std::move(result);
  return Status::Ok();
}

void Daemon::ExportKafkaStats(KafkaSourceStats* previous) {
  const KafkaSourceStats now = kafka_->Stats();
  auto count = [&](const char* outcome, uint64_t KafkaSourceStats::*field) {
    metrics_->kafka_records.Add({{"outcome", outcome}})
        .Increment(static_cast<double>(now.*field - (*previous).*field));
  };
  count("applied", &KafkaSourceStats::events_applied);
  count("duplicate", &KafkaSourceStats::duplicates);
  count("dead_letter", &KafkaSourceStats::dead_letters);
  count("watermark", &KafkaSourceStats::watermarks);
  metrics_->kafka_held_records.Add({}).Set(static_cast<double>(now.held_records));
  metrics_->kafka_lag_records.Add({}).Set(static_cast<double>(now.lag_records));
  *previous = now;
}

void Daemon::ExportModel(ModelStatus* exported) {
  const ModelInfo info = engine_->Info();
  metrics_->SetBuildInfo({{"version", TLPD_VERSION},
                          {"architecture", info.architecture},
                          {"attention_p", std::to_string(info.attention_p)},
                          {"fingerprint", info.fingerprint},
                          {"device", info.device}});
  if (exported == nullptr) return;
  const ModelStatus now = engine_->GetModelStatus();
  metrics_->model_load_phase.Set(static_cast<double>(now.phase));
  metrics_->model_load_replayed_events.Set(static_cast<double>(now.replayed_events));
  metrics_->model_load_target_events.Set(static_cast<double>(now.target_events));
  metrics_->model_swaps.Increment(static_cast<double>(now.swaps - exported->swaps));
  metrics_->model_rollbacks.Increment(static_cast<double>(now.rollbacks - exported->rollbacks));
  *exported = now;
}

void Daemon::ExportRefresh(RefreshStatus* exported) {
  const RefreshStatus now = refresher_->GetStatus();
  metrics_->model_refresh_running.Set(now.running ? 1 : 0);
  if (now.refreshes != exported->refreshes) {
    metrics_->model_refreshes.Add({{"outcome", now.last_outcome}})
        .Increment(static_cast<double>(now.refreshes - exported->refreshes));
    if (now.last_outcome != "failed") {
      metrics_->model_refresh_mrr.Add({{"model", "candidate"}}).Set(now.candidate_mrr);
      metrics_->model_refresh_mrr.Add({{"model", "serving"}}).Set(now.serving_mrr);
    }
  }
  *exported = now;
}

void Daemon::ExportStats() {
  Metrics& metrics = *metrics_;
  ModelStatus model_exported;
  RefreshStatus refresh_exported;
  uint64_t hits = 0, misses = 0;
  MemoryCacheStats cache_exported;
  MemoryThreadSeconds thread_exported;
  KafkaSourceStats kafka_exported;
  uint64_t seal_failures = 0, returns_exported = 0;
  while (!impl_->stopping) {
    if (kafka_) ExportKafkaStats(&kafka_exported);
    ExportModel(&model_exported);
    ExportRefresh(&refresh_exported);
    const storage::StoreStats stats = engine_->store().Stats();
    metrics.events_stored.Set(static_cast<double>(stats.events));
    metrics.nodes_stored.Set(static_cast<double>(stats.nodes));
    metrics.live_sst_bytes.Set(static_cast<double>(stats.live_sst_bytes));
    metrics.pending_compaction_bytes.Set(static_cast<double>(stats.pending_compaction_bytes));
    metrics.memtable_bytes.Set(static_cast<double>(stats.memtable_bytes));
    metrics.block_cache_bytes.Set(static_cast<double>(stats.block_cache_bytes));
    metrics.node_state_file_bytes.Set(static_cast<double>(stats.node_state_bytes));
    metrics.unsealed_adjacency_bytes.Set(static_cast<double>(stats.unsealed_adjacency_bytes));
    if (stats.adjacency_seal_failures != seal_failures) {
      spdlog::error("sealing adjacency rows into RocksDB failed ({} times; retried): {}",
                    stats.adjacency_seal_failures, stats.last_adjacency_seal_error);
      metrics.adjacency_seal_failures.Increment(
          static_cast<double>(stats.adjacency_seal_failures - seal_failures));
      seal_failures = stats.adjacency_seal_failures;
    }
    metrics.events_applied.Set(static_cast<double>(engine_->Info().events_applied));
    metrics.memory_lag_events.Set(static_cast<double>(engine_->MemoryLagEvents()));
    metrics.checkpoint_age.Set(engine_->SecondsSinceCheckpoint());
    metrics.events_since_checkpoint.Set(static_cast<double>(engine_->EventsSinceCheckpoint()));
    metrics.ingest_queue_events.Set(static_cast<double>(writer_->queued_events()));
    metrics.score_queue_pairs.Set(static_cast<double>(batcher_->queued_pairs()));
    // The index counts from open; the counters take the difference.
    const storage::NeighborIndex& neighbors = engine_->store().neighbors();
    const uint64_t now_hits = neighbors.cache_hits(), now_misses = neighbors.cache_misses();
    metrics.neighbor_lookups.Add({{"result", "hit"}})
        .Increment(static_cast<double>(now_hits - hits));
    metrics.neighbor_lookups.Add({{"result", "miss"}})
        .Increment(static_cast<double>(now_misses - misses));
    hits = now_hits;
    misses = now_misses;
    const MemoryCacheStats cache = engine_->MemoryCache();
    metrics.node_memory_lookups.Add({{"result", "hit"}})
        .Increment(static_cast<double>(cache.hits - cache_exported.hits));
    metrics.node_memory_lookups.Add({{"result", "miss"}})
        .Increment(static_cast<double>(cache.misses - cache_exported.misses));
    metrics.node_memory_evictions.Increment(
        static_cast<double>(cache.evictions - cache_exported.evictions));
    metrics.node_memory_read_ahead.Increment(
        static_cast<double>(cache.prefetched - cache_exported.prefetched));
    metrics.node_memory_resident.Set(static_cast<double>(cache.resident_rows));
    metrics.node_memory_dirty.Set(static_cast<double>(cache.dirty_rows + cache.evicted_dirty_rows));
    cache_exported = cache;
    const MemoryThreadSeconds thread = engine_->MemoryThreadTime();
    const std::pair<const char*, double MemoryThreadSeconds::*> stages[] = {
        {"lookup", &MemoryThreadSeconds::lookup},
        {"page_in", &MemoryThreadSeconds::page_in},
        {"page_out", &MemoryThreadSeconds::page_out},
        {"apply", &MemoryThreadSeconds::apply},
        {"snapshot", &MemoryThreadSeconds::snapshot}};
    for (const auto& [stage, field] : stages) {
      metrics.memory_thread_seconds.Add({{"stage", stage}})
          .Increment(thread.*field - thread_exported.*field);
    }
    thread_exported = thread;
    metrics.allocator_freed_bytes.Set(static_cast<double>(freed_memory_->held_bytes()));
    metrics.allocator_returns.Increment(
        static_cast<double>(freed_memory_->returns() - returns_exported));
    returns_exported = freed_memory_->returns();
    for (int i = 0; i < 10 && !impl_->stopping; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
}

void Daemon::Shutdown(double grace_seconds) {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  if (impl_->server) {
    impl_->server->GetHealthCheckService()->SetServingStatus(false);
    impl_->server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::milliseconds(static_cast<int64_t>(grace_seconds * 1000)));
    impl_->server->Wait();
  }
  if (impl_->stats_thread.joinable()) impl_->stats_thread.join();
  kafka_.reset();   // its append in flight finishes; what it held is re-read on restart
  writer_.reset();  // every call has returned, so its queue is empty
  batcher_.reset();
  refresher_.reset();  // stops a training in progress
  engine_.reset();
}

namespace {

// Every option of `command` also reads TLPD_<LONG NAME> (upper case, '-' as '_'), so that each
// is declared once, by its add_option or add_flag call: name, default, help and variable. The
// variables override the built-in defaults and are overridden by the config file and flags.
// CLI11 2.1 does not apply envname() to named subcommands before checking them, so the
// environment is read here, as the option's default.
void BindEnvironment(CLI::App* command) {
  for (CLI::Option* option : command->get_options()) {
    const std::vector<std::string>& names = option->get_lnames();
    if (names.empty() || names.front() == "help") continue;
    std::string variable = "TLPD_" + names.front();
    for (char& c : variable) c = c == '-' ? '_' : static_cast<char>(std::toupper(c));
    if (const char* value = std::getenv(variable.c_str())) {
      // A flag's value as if given on the command line (TLPD_NO_SYNC=1 means --no-sync).
      const bool flag = option->get_expected_min() == 0;
      option->default_val(flag ? option->get_flag_value(names.front(), value) : std::string(value));
    }
    option->description(option->get_description() + " [env " + variable + "]");
  }
}

}  // namespace

void AddServeCommand(CLI::App& app) {
  static ServeOptions options;
  CLI::App* serve = app.add_subcommand(
      "serve",
      "Run the daemon: gRPC ingest and scoring, metrics. Options also come from TLPD_* "
      "environment variables and from `tlpd --config FILE.toml serve` ([serve] section, keys "
      "named as the long options); flags win over the file, which wins over the environment.");
  serve->option_defaults()->always_capture_default();  // --help and docs show each default
  serve->add_option("--listen", options.listen, "gRPC address host:port");
  serve->add_option("--metrics-listen", options.metrics_listen,
                    "Prometheus /metrics address host:port (empty = off)");
  serve->add_option("--data-dir", options.engine.data_dir, "RocksDB data directory");
  serve->add_option("--checkpoint", options.engine.checkpoint,
                    "Model checkpoint (tlpd train --out); default <data-dir>/model.pt, "
                    "trained from the bundled data on first start when missing");
  serve->add_flag("!--no-bootstrap", options.bootstrap,
                  "Fail instead of training the bundled model when the checkpoint is missing");
  serve->add_option("--bootstrap-data", options.bootstrap_data,
                    "Event file the first-start model is trained on (default: "
                    "the bundled Wikipedia stream)");
  serve->add_option("--device", options.engine.device, "cpu or cuda:N (cpu when no GPU)");
  serve->add_option("--lateness-seconds", options.engine.lateness_seconds,
                    "Accept events up to this much older than the newest");
  serve
      ->add_option("--max-future-seconds", options.engine.max_future_seconds,
                   "Refuse events more than this far ahead of the newest ts (and, for Unix "
                   "time, of the clock); 0 = no bound")
      ->check(CLI::NonNegativeNumber);
  serve->add_flag("!--no-sync", options.engine.sync_writes,
                  "Do not fsync each batch (survives process crashes, not power loss)");
  serve->add_flag("--allow-self-loops", options.engine.allow_self_loops, "Accept src == dst");
  serve->add_flag("--rebuild-memory", options.engine.rebuild_memory,
                  "Discard the stored node memory and rebuild it from the whole event log");
  serve->add_option("--threads", options.engine.torch_threads,
                    "Torch intra-op threads for scoring");
  serve
      ->add_option("--memory-threads", options.engine.memory_threads,
                   "Intra-op threads for applying events to node memory")
      ->check(CLI::PositiveNumber);
  serve->add_option(
      "--checkpoint-every", options.engine.checkpoint_every_events,
      "Write the node memory changed since the last checkpoint every this many events "
      "(0 = only when the memory cache needs it and at shutdown)");
  serve->add_option("--checkpoint-seconds", options.engine.checkpoint_every_seconds,
                    "Also checkpoint when this many seconds passed since the last one and "
                    "events were applied since (0 = never by time)");
  serve->add_option("--neighbor-cache-mb", options.engine.neighbor_cache_mb,
                    "Memory for cached neighbour lists of recently active nodes; others are "
                    "read from RocksDB");
  serve->add_option("--block-cache-mb", options.engine.block_cache_mb,
                    "RocksDB's block cache, shared by all column families: table blocks "
                    "read for node memory misses and for neighbour lists beyond their cache");
  serve->add_option("--retain-freed-mb", options.retain_freed_mb,
                    "Freed memory the allocator keeps for reuse (checked every second); "
                    "above it, all of it goes back to the kernel. Kept pages spare training "
                    "steps and requests the page faults of fresh memory");
  serve->add_option_function<size_t>(
      "--node-memory-cache-mb",
      [](size_t mb) { options.engine.node_memory_cache_bytes = mb << 20; },
      "Memory for resident node memory (~480 bytes a node at memory_dim 100); the rest is "
      "read from the node state file when needed (default 1024)");
  serve->add_option("--score-max-batch", options.batcher.max_batch_pairs,
                    "Most pairs one scoring pass takes from concurrent requests");
  serve->add_option_function<int64_t>(
      "--score-max-wait-us",
      [](int64_t us) { options.batcher.max_wait = std::chrono::microseconds(us); },
      "Longest a scoring request waits for others to share its pass (default 500)");
  serve->add_option("--tls-cert", options.security.tls_cert,
                    "PEM certificate chain: serve gRPC over TLS");
  serve->add_option("--tls-key", options.security.tls_key, "PEM private key");
  serve->add_option("--tls-client-ca", options.security.tls_client_ca,
                    "PEM CA bundle: require client certificates (mutual TLS)");
  serve->add_option("--token-file", options.security.token_file,
                    "Bearer tokens, one per line: tlp.v1 calls must present one");
  serve->add_option("--admin-token-file", options.security.admin_token_file,
                    "Bearer tokens for tlp.v1.Admin (model load, rollback); with --token-file "
                    "set, admin calls need one of these");
  serve->add_option("--metrics-auth-file", options.security.metrics_auth_file,
                    "user:password lines: /metrics requires HTTP basic auth");
  serve->add_option("--max-batch-events", options.limits.max_batch_events,
                    "Most events one IngestBatch may carry; more is INVALID_ARGUMENT");
  serve->add_option("--max-score-pairs", options.limits.max_score_pairs,
                    "Most pairs one ScoreLinks may carry; more is INVALID_ARGUMENT");
  serve->add_option("--max-candidates", options.limits.max_candidates,
                    "Most explicit candidates one TopK may carry; more is INVALID_ARGUMENT");
  serve->add_option("--max-k", options.limits.max_k, "Largest k a TopK may ask for")
      ->check(CLI::PositiveNumber);
  serve->add_option("--topk-shortlist", options.limits.topk_shortlist,
                    "TopK: the model scores only the max(N, k) candidates that recent "
                    "destinations, then popular ones, rank first (0 = every candidate)");
  serve->add_option("--max-inflight-ingest", options.limits.max_inflight_ingest,
                    "Concurrent ingest calls; beyond, RESOURCE_EXHAUSTED");
  serve->add_option("--ingest-queue-events", options.writer.max_queued_events,
                    "Events that may wait for the writer; beyond, RESOURCE_EXHAUSTED");
  serve->add_option("--ingest-max-append", options.writer.max_append_events,
                    "Most events the writer groups into one durable append");
  serve->add_option_function<int64_t>(
      "--ingest-linger-us",
      [](int64_t us) { options.writer.linger = std::chrono::microseconds(us); },
      "How long the writer waits to group more submissions (default 0: only what queued)");
  serve->add_option("--refresh-every-events", options.refresh.every_events,
                    "Retrain the serving model's architecture on the newest events every this "
                    "many stored events, and promote the new model when it ranks the newest "
                    "held-back events better (0 = no event trigger)");
  serve
      ->add_option("--refresh-every-hours", options.refresh.every_hours,
                   "Also refresh when this many hours passed since the last refresh and events "
                   "came since (0 = no time trigger)")
      ->check(CLI::NonNegativeNumber);
  serve->add_option("--refresh-window-events", options.refresh.window_events,
                    "A refresh trains on the newest this many stored events (0 = all); the "
                    "newest 15 % of them by time are held back for the comparison");
  serve->add_option("--refresh-epochs", options.refresh.epochs, "A refresh's most epochs")
      ->check(CLI::PositiveNumber);
  serve
      ->add_option("--refresh-ranking-queries", options.refresh.ranking_queries,
                   "Held-back events both models rank one-vs-all for the comparison")
      ->check(CLI::PositiveNumber);
  serve->add_option("--refresh-min-gain", options.refresh.min_gain,
                    "Promote only when the new model's MRR exceeds the serving one's by more "
                    "than this");
  serve
      ->add_option("--refresh-threads", options.refresh.threads,
                   "Torch threads of the refresh's training process (which runs at a lower CPU "
                   "priority than serving)")
      ->check(CLI::PositiveNumber);
  serve->add_option("--kafka-brokers", options.kafka.brokers,
                    "Consume events from Kafka (bootstrap servers host:port,...) "
                    "instead of accepting gRPC ingest");
  serve->add_option("--kafka-topic", options.kafka.topic,
                    "Topic of edge events (EdgeEvent protobuf or JSON)");
  serve->add_option("--kafka-group", options.kafka.group_id,
                    "Consumer group applied offsets are committed to, for lag "
                    "monitoring; one per replica");
  serve->add_option("--kafka-dead-letter-topic", options.kafka.dead_letter_topic,
                    "Where malformed or invalid records go, with the reason "
                    "(default <topic>.dead-letter)");
  serve->add_option("--kafka-property", options.kafka.properties,
                    "Extra librdkafka setting key=value (security.protocol, sasl.*, ...); "
                    "repeatable");
  serve->add_option("--kafka-batch", options.kafka.max_batch_events,
                    "Most Kafka events per durable append");
  BindEnvironment(serve);
  serve->callback([] {
    // Block the stop signals in every thread; one thread waits for them from the start.
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, nullptr);
    // Start-up (training a first model, replaying the log) can take minutes: a stop signal then
    // exits at once instead of after it, as a SIGKILL would but sooner. Nothing is lost: ingest
    // is refused until the daemon serves, every acknowledged event is in the WAL, and a model
    // being trained is only moved into place once complete.
    std::atomic<bool> serving{false};
    std::promise<int> stop;
    std::thread([&signals, &serving, &stop] {
      int received = 0;
      sigwait(&signals, &received);
      if (!serving.load()) {
        spdlog::warn("signal {} during start-up: exiting before serving", received);
        std::_Exit(0);
      }
      stop.set_value(received);
      // A second signal during the drain exits at once; the WAL keeps every acknowledged event.
      sigwait(&signals, &received);
      spdlog::warn("second signal: exiting now");
      std::_Exit(1);
    }).detach();
    std::unique_ptr<Daemon> daemon;
    const Status status = Daemon::Start(options, &daemon);
    if (!status.ok()) {
      spdlog::error("{}", status.ToString());
      std::exit(1);
    }
    spdlog::info("serving tlp.v1 on {} (port {}), metrics on {}", options.listen, daemon->port(),
                 options.metrics_listen.empty() ? "off" : options.metrics_listen);
    serving.store(true);
    const int received = stop.get_future().get();
    spdlog::info("signal {}: draining", received);
    daemon->Shutdown();
    daemon.reset();
    spdlog::info("stopped cleanly");
    std::exit(0);
  });
}

}  // namespace tlp::server
