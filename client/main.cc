// tlpctl: command-line client of tlpd over gRPC.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_map>

#include "client/daemon_client.h"
#include "client/health_check.h"
#include "client/load_generator.h"
#include "client/plot.h"
#include "client/stream_ingest.h"
#include "common/event_reader.h"
#include "common/stopwatch.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace {

namespace client = tlp::client;

struct Global {
  std::string address = "127.0.0.1:50051";
  bool json = false;
  double timeout_seconds = 30;
  tlp::client::ChannelSecurity security;
};

Global global;

int Fail(const tlp::Status& status) {
  std::fprintf(stderr, "tlpctl: %s\n", status.ToString().c_str());
  return 1;
}

std::shared_ptr<grpc::Channel> Channel(std::string* token) {
  std::shared_ptr<grpc::Channel> channel;
  const tlp::Status status =
      tlp::client::OpenChannel(global.address, global.security, &channel, token);
  if (!status.ok()) std::exit(Fail(status));
  return channel;
}

tlp::client::DaemonClient Connect() {
  std::string token;
  std::shared_ptr<grpc::Channel> channel = Channel(&token);
  return tlp::client::DaemonClient(global.address, global.timeout_seconds, channel, token);
}

nlohmann::json MetricsJson(const tlp::v1::RepresentationMetrics& m) {
  return {{"representation_norm", m.representation_norm()},
          {"effective_neighbors", m.effective_neighbors()},
          {"attention_mass", m.attention_mass()},
          {"attention_entropy", m.attention_entropy()},
          {"neighbors_used", m.neighbors_used()},
          {"cold_start", m.cold_start()}};
}

nlohmann::json ScoreJson(const tlp::v1::LinkScore& s) {
  return {{"src", s.src()},
          {"dst", s.dst()},
          {"at", s.at()},
          {"probability", s.probability()},
          {"logit", s.logit()},
          {"src_metrics", MetricsJson(s.src_metrics())},
          {"dst_metrics", MetricsJson(s.dst_metrics())}};
}

void PrintScores(const google::protobuf::RepeatedPtrField<tlp::v1::LinkScore>& scores) {
  if (global.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : scores) out.push_back(ScoreJson(s));
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%10s %10s %12s %9s %9s | %8s %7s %7s %4s | %8s %7s %7s %4s\n", "src", "dst", "at",
              "prob", "logit", "src_norm", "src_ess", "src_mass", "k", "dst_norm", "dst_ess",
              "dst_mass", "k");
  for (const auto& s : scores) {
    std::printf(
        "%10llu %10llu %12.0f %9.4f %9.3f | %8.3f %7.2f %7.3f %4u | %8.3f %7.2f %7.3f %4u\n",
        static_cast<unsigned long long>(s.src()), static_cast<unsigned long long>(s.dst()), s.at(),
        s.probability(), s.logit(), s.src_metrics().representation_norm(),
        s.src_metrics().effective_neighbors(), s.src_metrics().attention_mass(),
        s.src_metrics().neighbors_used(), s.dst_metrics().representation_norm(),
        s.dst_metrics().effective_neighbors(), s.dst_metrics().attention_mass(),
        s.dst_metrics().neighbors_used());
  }
}

// Event ids derive from the file name (not its path) and the event's position, so that a re-run
// from another directory after a failure still stores nothing twice.
std::string IdPrefix(const std::string& path) {
  return std::filesystem::path(path).filename().string();
}

// One progress line, rewritten in place on a terminal; into a log, one line every 5 s.
void Progress(const char* format, auto... values) {
  static const bool terminal = isatty(fileno(stderr));
  static auto last = std::chrono::steady_clock::time_point();
  const auto now = std::chrono::steady_clock::now();
  if (!terminal && now - last < std::chrono::seconds(5)) return;
  last = now;
  if (terminal) std::fputc('\r', stderr);
  std::fprintf(stderr, format, values...);
  std::fputs(terminal ? "   " : "\n", stderr);
}

// --batch-size and --streams of the commands that send a stream (ingest, gen).
void AddSendOptions(CLI::App* command, client::StreamIngestOptions& options) {
  command->add_option("--batch-size", options.batch_size, "Events per request")
      ->check(CLI::Range(1, 100000));
  command
      ->add_option("--streams", options.streams,
                   "Requests in flight; above 1, events may arrive up to that many batches out "
                   "of order (must fit tlpd's --lateness-seconds)")
      ->check(CLI::Range(1, 64));
}

// Sends `source` to tlpd with progress on stderr and a summary on stdout.
int Send(const std::string& label, const std::string& id_prefix, const client::BatchSource& source,
         const client::StreamIngestOptions& options) {
  tlp::client::DaemonClient client = Connect();
  client.set_id_prefix(id_prefix);
  const tlp::Stopwatch watch;
  client::StreamIngestTotals totals;
  const tlp::Status status = client::IngestStream(
      client, source, options,
      [&](const client::StreamIngestTotals& so_far) {
        Progress("ingested %llu events (%llu new, %llu duplicates)  %.0f events/s",
                 static_cast<unsigned long long>(so_far.sent),
                 static_cast<unsigned long long>(so_far.accepted),
                 static_cast<unsigned long long>(so_far.duplicates), so_far.sent / watch.Seconds());
      },
      &totals);
  if (!status.ok()) {
    std::fprintf(stderr, "\ntlpctl: %s (%llu events were acknowledged before it)\n",
                 status.ToString().c_str(), static_cast<unsigned long long>(totals.sent));
    return 1;
  }
  const double seconds = watch.Seconds();
  if (global.json) {
    std::printf("%s\n", nlohmann::json({{"sent", totals.sent},
                                        {"accepted", totals.accepted},
                                        {"duplicates", totals.duplicates},
                                        {"seconds", seconds},
                                        {"events_per_second", totals.sent / seconds}})
                            .dump()
                            .c_str());
  } else {
    std::fprintf(stderr, "\n");
    std::printf("ingested %llu events from %s in %.2f s (%llu new, %llu duplicates)\n",
                static_cast<unsigned long long>(totals.sent), label.c_str(), seconds,
                static_cast<unsigned long long>(totals.accepted),
                static_cast<unsigned long long>(totals.duplicates));
  }
  return 0;
}

int Ingest(const std::string& path, const client::StreamIngestOptions& options) {
  std::unique_ptr<tlp::EventReader> reader;
  const tlp::Status status = tlp::EventReader::Open(path, &reader);
  if (!status.ok()) return Fail(status);
  return Send(path, IdPrefix(path), client::ReaderSource(*reader), options);
}

// `tlpctl gen`: a synthetic stream into a tlpd CSV file, or straight into the daemon.
int Generate(const tlp::GraphGeneratorOptions& generator_options, const std::string& out,
             const client::StreamIngestOptions& options) {
  tlp::GraphGenerator generator(generator_options);
  if (out.empty()) {
    // Ids name the generator's settings, so re-sending the same stream stores nothing twice.
    const std::string prefix = "gen-" + std::to_string(generator_options.seed) + "-" +
                               std::to_string(generator_options.nodes) + "-" +
                               std::to_string(generator_options.destinations);
    return Send("the generator", prefix, client::GeneratorSource(generator), options);
  }
  std::FILE* file = std::fopen(out.c_str(), "w");
  if (file == nullptr) return Fail(tlp::Status::IoError("cannot write '" + out + "'"));
  std::fputs("src,dst,ts\n", file);
  tlp::EventBatch batch;
  for (generator.Next(100000, &batch); !batch.empty(); generator.Next(100000, &batch)) {
    for (size_t i = 0; i < batch.size(); ++i) {
      std::fprintf(file, "%llu,%llu,%.6f\n", static_cast<unsigned long long>(batch.src[i]),
                   static_cast<unsigned long long>(batch.dst[i]), batch.ts[i]);
    }
  }
  if (std::fclose(file) != 0) return Fail(tlp::Status::IoError("cannot write '" + out + "'"));
  std::printf("wrote %llu events to %s\n", static_cast<unsigned long long>(generator.generated()),
              out.c_str());
  return 0;
}

struct EvalSettings {
  std::string file;
  std::string plot;
  std::string json_out;
  tlp::ReplayOptions replay;
};

// Up to 2,000 nodes of the stream with their degree in it, and their representation norm as
// the daemon scores them now.
tlp::Status DegreeAndNorm(tlp::client::DaemonClient& client, const tlp::EventBatch& stream,
                          std::vector<std::pair<double, double>>* points) {
  std::unordered_map<uint64_t, uint64_t> degree;
  for (size_t i = 0; i < stream.size(); ++i) {
    ++degree[stream.src[i]];
    ++degree[stream.dst[i]];
  }
  std::vector<uint64_t> nodes;
  for (const auto& [node, count] : degree) nodes.push_back(node);
  std::sort(nodes.begin(), nodes.end());
  std::shuffle(nodes.begin(), nodes.end(), std::mt19937_64(7));
  nodes.resize(std::min<size_t>(nodes.size(), 2000));
  std::vector<tlp::PairQuery> queries;
  for (uint64_t node : nodes) queries.push_back({node, stream.dst.back(), 0});
  std::vector<tlp::PairScore> scores;
  tlp::Status status = client.Score(queries, &scores);
  if (!status.ok()) return status;
  for (size_t i = 0; i < nodes.size(); ++i) {
    points->emplace_back(static_cast<double>(degree[nodes[i]]), scores[i].src_norm);
  }
  return tlp::Status::Ok();
}

int Eval(EvalSettings& settings) {
  tlp::EventBatch stream;
  tlp::Status status = tlp::EventReader::ReadAll(settings.file, &stream);
  if (!status.ok()) return Fail(status);
  tlp::client::DaemonClient client = Connect();
  client.set_id_prefix(IdPrefix(settings.file));
  const tlp::Stopwatch watch;
  settings.replay.progress = [&](uint64_t done, uint64_t total) {
    Progress("replayed %llu / %llu events  %.0f events/s", static_cast<unsigned long long>(done),
             static_cast<unsigned long long>(total), done / watch.Seconds());
  };
  tlp::ReplayReport report;
  status = tlp::RunReplayEvaluation(stream, settings.replay, client, &report);
  std::fputc('\n', stderr);
  if (!status.ok()) return Fail(status);
  if (global.json) {
    std::printf("%s\n", tlp::ReplayReportJson(report).c_str());
  } else {
    std::printf("%s", tlp::FormatReplayReport(report).c_str());
  }
  if (!settings.json_out.empty()) {
    std::ofstream(settings.json_out) << tlp::ReplayReportJson(report) << "\n";
  }
  if (!settings.plot.empty()) {
    tlp::client::EvaluationPlot plot;
    plot.title = IdPrefix(settings.file) + ": AP " + std::to_string(report.random.ap).substr(0, 6);
    plot.positive_logits = report.positive_logits;
    plot.negative_logits = report.negative_logits;
    status = DegreeAndNorm(client, stream, &plot.degree_norm);
    if (status.ok()) status = tlp::client::WriteEvaluationPlot(plot, settings.plot);
    if (!status.ok()) return Fail(status);
    std::fprintf(stderr, "plot written to %s\n", settings.plot.c_str());
  }
  return 0;
}

int Bench(tlp::client::LoadOptions& options, const std::string& pairs_file) {
  if (!pairs_file.empty()) {
    tlp::EventBatch stream;
    tlp::Status status = tlp::EventReader::ReadAll(pairs_file, &stream);
    if (!status.ok()) return Fail(status);
    options.sources = stream.src;
    options.destinations = stream.dst;
  }
  tlp::client::LoadReport report;
  tlp::client::DaemonClient client = Connect();
  tlp::Status status = tlp::client::RunLoad(client, options, &report);
  if (!status.ok()) return Fail(status);
  if (global.json) {
    std::printf("%s\n", nlohmann::json({{"kind", options.kind},
                                        {"concurrency", options.concurrency},
                                        {"rate", options.rate},
                                        {"pairs_per_request", options.pairs},
                                        {"requests", report.requests},
                                        {"failures", report.failures},
                                        {"failures_by_code", report.failures_by_code},
                                        {"seconds", report.seconds},
                                        {"requests_per_second", report.requests_per_second},
                                        {"pairs_per_second", report.pairs_per_second},
                                        {"p50_ms", report.p50_ms},
                                        {"p95_ms", report.p95_ms},
                                        {"p99_ms", report.p99_ms},
                                        {"max_ms", report.max_ms}})
                            .dump()
                            .c_str());
  } else {
    std::printf("%s, concurrency %d, %zu pairs/request: %llu requests in %.1f s, %llu failed\n",
                options.kind.c_str(), options.concurrency, options.pairs,
                static_cast<unsigned long long>(report.requests), report.seconds,
                static_cast<unsigned long long>(report.failures));
    std::printf(
        "%.0f requests/s, %.0f pairs/s; latency p50 %.2f ms, p95 %.2f ms, p99 %.2f ms, "
        "max %.2f ms\n",
        report.requests_per_second, report.pairs_per_second, report.p50_ms, report.p95_ms,
        report.p99_ms, report.max_ms);
    for (const auto& [code, count] : report.failures_by_code) {
      std::printf("  %llu x %s\n", static_cast<unsigned long long>(count), code.c_str());
    }
  }
  return report.failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tlpctl: client for the tlpd temporal link prediction daemon"};
  app.require_subcommand(1);
  app.add_option("--address", global.address, "tlpd gRPC address host:port");
  app.add_flag("--json", global.json, "Print JSON instead of tables");
  app.add_option("--timeout", global.timeout_seconds, "Per-request deadline in seconds");
  app.add_option("--tls-ca", global.security.tls_ca, "PEM roots: connect over TLS")
      ->envname("TLPCTL_TLS_CA");
  app.add_option("--tls-cert", global.security.tls_cert, "PEM client certificate (mutual TLS)")
      ->envname("TLPCTL_TLS_CERT");
  app.add_option("--tls-key", global.security.tls_key, "PEM client key (mutual TLS)")
      ->envname("TLPCTL_TLS_KEY");
  app.add_option("--token-file", global.security.token_file,
                 "File whose first line is the bearer token")
      ->envname("TLPCTL_TOKEN_FILE");

  std::string file;
  client::StreamIngestOptions ingest_options;
  CLI::App* ingest = app.add_subcommand(
      "ingest", "Stream an event file into tlpd (JODIE, SNAP or tlpd CSV; .gz ok)");
  ingest->add_option("file", file, "Event file")->required()->check(CLI::ExistingFile);
  AddSendOptions(ingest, ingest_options);
  ingest->callback([&] { std::exit(Ingest(file, ingest_options)); });

  tlp::GraphGeneratorOptions generator_options;
  std::string generator_out;
  client::StreamIngestOptions generator_send;
  CLI::App* gen = app.add_subcommand(
      "gen",
      "Generate a seeded synthetic temporal graph (power-law degrees, bursty times, optionally "
      "bipartite) into tlpd, or into a CSV file with --out");
  gen->add_option("--events", generator_options.events, "Events to generate");
  gen->add_option("--nodes", generator_options.nodes, "Nodes (source nodes when bipartite)")
      ->check(CLI::Range(uint64_t{2}, uint64_t{1} << 48));
  gen->add_option("--destinations", generator_options.destinations,
                  "Destination nodes: > 0 makes the graph bipartite");
  gen->add_option("--rate", generator_options.events_per_second,
                  "Mean events per second of event time")
      ->check(CLI::PositiveNumber);
  gen->add_option("--seed", generator_options.seed, "Seed (same seed, same stream)");
  gen->add_option("--out", generator_out, "Write a tlpd CSV file instead of sending to tlpd");
  AddSendOptions(gen, generator_send);
  gen->callback([&] { std::exit(Generate(generator_options, generator_out, generator_send)); });

  uint64_t src = 0, dst = 0;
  double at = 0;
  CLI::App* score = app.add_subcommand("score", "Score the link SRC -> DST");
  score->add_option("src", src, "Source node id")->required();
  score->add_option("dst", dst, "Destination node id")->required();
  score->add_option("--at", at, "Query time in seconds (default: now)");
  score->callback([&] {
    tlp::v1::ScoreRequest request;
    auto* query = request.add_queries();
    query->set_src(src);
    query->set_dst(dst);
    query->set_at(at);
    tlp::client::DaemonClient client = Connect();
    grpc::ClientContext context;
    client.Prepare(&context);
    tlp::v1::ScoreResponse response;
    const grpc::Status rpc = client.stub().ScoreLinks(&context, request, &response);
    if (!rpc.ok()) std::exit(Fail(client.FromGrpc(rpc)));
    PrintScores(response.scores());
    std::exit(0);
  });

  uint32_t k = 10;
  bool exclude_seen = false;
  CLI::App* topk = app.add_subcommand("topk", "Rank every known destination for SRC");
  topk->add_option("src", src, "Source node id")->required();
  topk->add_option("-k", k, "Results")->check(CLI::Range(1, 1000));
  topk->add_option("--at", at, "Query time in seconds (default: now)");
  topk->add_flag("--exclude-seen", exclude_seen, "Skip destinations src already interacted with");
  std::string ranker = "model";
  topk->add_option("--ranker", ranker,
                   "Who ranks: model, or a built-in baseline: recency_popularity, edgebank, "
                   "popularity")
      ->check(CLI::IsMember({"model", "recency_popularity", "edgebank", "popularity"}));
  topk->callback([&] {
    tlp::v1::TopKRequest request;
    request.set_src(src);
    request.set_k(k);
    request.set_at(at);
    request.set_exclude_seen(exclude_seen);
    const std::map<std::string, tlp::v1::Ranker> rankers = {
        {"model", tlp::v1::RANKER_MODEL},
        {"recency_popularity", tlp::v1::RANKER_RECENCY_POPULARITY},
        {"edgebank", tlp::v1::RANKER_EDGEBANK},
        {"popularity", tlp::v1::RANKER_POPULARITY}};
    request.set_ranker(rankers.at(ranker));
    tlp::client::DaemonClient client = Connect();
    grpc::ClientContext context;
    client.Prepare(&context);
    tlp::v1::TopKResponse response;
    const grpc::Status rpc = client.stub().TopK(&context, request, &response);
    if (!rpc.ok()) std::exit(Fail(client.FromGrpc(rpc)));
    PrintScores(response.results());
    std::exit(0);
  });

  uint64_t node = 0;
  CLI::App* node_state_command = app.add_subcommand(
      "node-state", "Score NODE's state (the second outcome of a model trained with --node-state)");
  node_state_command->add_option("node", node, "Node id")->required();
  node_state_command->add_option("--at", at, "Query time in seconds (default: now)");
  node_state_command->callback([&] {
    tlp::v1::ScoreNodeStatesRequest request;
    auto* query = request.add_queries();
    query->set_node(node);
    query->set_at(at);
    tlp::client::DaemonClient client = Connect();
    grpc::ClientContext context;
    client.Prepare(&context);
    tlp::v1::ScoreNodeStatesResponse response;
    const grpc::Status rpc = client.stub().ScoreNodeStates(&context, request, &response);
    if (!rpc.ok()) std::exit(Fail(client.FromGrpc(rpc)));
    nlohmann::json out = nlohmann::json::array();
    for (const auto& s : response.scores()) {
      out.push_back({{"node", s.node()},
                     {"at", s.at()},
                     {"probability", s.probability()},
                     {"logit", s.logit()},
                     {"metrics", MetricsJson(s.metrics())},
                     {"model", response.model_fingerprint()}});
    }
    std::printf("%s\n", out.dump(global.json ? -1 : 2).c_str());
    std::exit(0);
  });

  uint32_t recent = 5;
  CLI::App* node_command = app.add_subcommand("node", "Show a node's state and recent neighbours");
  node_command->add_option("id", node, "Node id")->required();
  node_command->add_option("--recent", recent, "Recent neighbours to show")
      ->check(CLI::Range(0, 1000));
  node_command->callback([&] {
    tlp::v1::NodeStateRequest request;
    request.set_node(node);
    request.set_recent_neighbors(recent);
    tlp::client::DaemonClient client = Connect();
    grpc::ClientContext context;
    client.Prepare(&context);
    tlp::v1::NodeStateResponse response;
    const grpc::Status rpc = client.stub().GetNodeState(&context, request, &response);
    if (!rpc.ok()) std::exit(Fail(client.FromGrpc(rpc)));
    nlohmann::json out = {{"node", response.node()},
                          {"known", response.known()},
                          {"degree", response.degree()},
                          {"last_update_ts", response.last_update_ts()},
                          {"memory_dim", response.memory_size()}};
    for (const auto& n : response.recent())
      out["recent"].push_back({{"node", n.node()}, {"ts", n.ts()}});
    std::printf("%s\n", out.dump(global.json ? -1 : 2).c_str());
    std::exit(0);
  });

  CLI::App* info =
      app.add_subcommand("info", "Show the served model and how far it has applied the log");
  info->callback([&] {
    tlp::client::DaemonClient client = Connect();
    grpc::ClientContext context;
    client.Prepare(&context);
    tlp::v1::ModelInfoResponse response;
    const grpc::Status rpc =
        client.stub().GetModelInfo(&context, tlp::v1::ModelInfoRequest(), &response);
    if (!rpc.ok()) std::exit(Fail(client.FromGrpc(rpc)));
    const nlohmann::json out = {{"architecture", response.architecture()},
                                {"attention_p", response.attention_p()},
                                {"fingerprint", response.fingerprint()},
                                {"device", response.device()},
                                {"embedding_dim", response.embedding_dim()},
                                {"memory_dim", response.memory_dim()},
                                {"neighbors", response.neighbors()},
                                {"events_applied", response.events_applied()},
                                {"watermark", response.watermark()},
                                {"version", response.version()},
                                {"node_state", response.node_state()},
                                {"outcome_attention", response.outcome_attention()}};
    std::printf("%s\n", out.dump(global.json ? -1 : 2).c_str());
    std::exit(0);
  });

  // Model refresh (tlp.v1.Admin): load, watch, roll back.
  CLI::App* model_command =
      app.add_subcommand("model", "Change the served model while serving (tlp.v1.Admin)");
  model_command->require_subcommand(1);
  bool wait_for_swap = false;
  auto print_status = [&](const tlp::v1::ModelStatusResponse& status) {
    nlohmann::json out = {{"fingerprint", status.fingerprint()},
                          {"checkpoint", status.checkpoint()},
                          {"previous_fingerprint", status.previous_fingerprint()},
                          {"previous_checkpoint", status.previous_checkpoint()},
                          {"phase", status.phase()},
                          {"loading_fingerprint", status.loading_fingerprint()},
                          {"replayed_events", status.replayed_events()},
                          {"target_events", status.target_events()},
                          {"last_error", status.last_error()},
                          {"swaps", status.swaps()},
                          {"rollbacks", status.rollbacks()},
                          {"last_swap_seconds", status.last_swap_seconds()},
                          {"last_hold_seconds", status.last_hold_seconds()}};
    const tlp::v1::ModelRefreshStatus& refresh = status.refresh();
    out["refresh"] = {{"running", refresh.running()},
                      {"refreshes", refresh.refreshes()},
                      {"promotions", refresh.promotions()},
                      {"failures", refresh.failures()},
                      {"last_outcome", refresh.last_outcome()},
                      {"last_error", refresh.last_error()},
                      {"candidate_mrr", refresh.candidate_mrr()},
                      {"serving_mrr", refresh.serving_mrr()},
                      {"held_back_queries", refresh.held_back_queries()},
                      {"candidate_fingerprint", refresh.candidate_fingerprint()},
                      {"serving_fingerprint", refresh.serving_fingerprint()},
                      {"last_seconds", refresh.last_seconds()}};
    std::printf("%s\n", out.dump(global.json ? -1 : 2).c_str());
  };
  // Runs one admin call; with --wait, polls the status until the refresh and the load it may
  // start end (exit 1 if either failed).
  auto admin_call = [&](auto&& call) {
    tlp::client::DaemonClient client = Connect();
    tlp::v1::ModelStatusResponse status;
    {
      grpc::ClientContext context;
      client.Prepare(&context);
      const grpc::Status rpc = call(client.admin_stub(), &context, &status);
      if (!rpc.ok()) std::exit(Fail(client.FromGrpc(rpc)));
    }
    while (wait_for_swap && (status.refresh().running() || status.phase() != "idle")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      grpc::ClientContext context;
      client.Prepare(&context);
      const grpc::Status rpc =
          client.admin_stub().GetModelStatus(&context, tlp::v1::ModelStatusRequest(), &status);
      if (!rpc.ok()) std::exit(Fail(client.FromGrpc(rpc)));
    }
    print_status(status);
    const bool failed = !status.last_error().empty() || status.refresh().last_outcome() == "failed";
    std::exit(wait_for_swap && failed ? 1 : 0);
  };
  model_command->add_subcommand("status", "Show the served model and any load in progress")
      ->callback([&] {
        admin_call([](tlp::v1::Admin::Stub& stub, grpc::ClientContext* context,
                      tlp::v1::ModelStatusResponse* status) {
          return stub.GetModelStatus(context, tlp::v1::ModelStatusRequest(), status);
        });
      });
  std::string model_file;
  CLI::App* model_load = model_command->add_subcommand(
      "load",
      "Load FILE (a checkpoint on the daemon's machine) and swap it in once its memory "
      "caught up with the log");
  model_load->add_option("FILE", model_file, "Checkpoint path as the daemon sees it")->required();
  model_load->add_flag("--wait", wait_for_swap, "Return once the load has swapped or failed");
  model_load->callback([&] {
    admin_call([&](tlp::v1::Admin::Stub& stub, grpc::ClientContext* context,
                   tlp::v1::ModelStatusResponse* status) {
      tlp::v1::LoadModelRequest request;
      request.set_checkpoint(model_file);
      return stub.LoadModel(context, request, status);
    });
  });
  CLI::App* model_rollback = model_command->add_subcommand(
      "rollback", "Load the model the last swap replaced (its memory is rebuilt the same way)");
  model_rollback->add_flag("--wait", wait_for_swap, "Return once it has swapped or failed");
  model_rollback->callback([&] {
    admin_call([](tlp::v1::Admin::Stub& stub, grpc::ClientContext* context,
                  tlp::v1::ModelStatusResponse* status) {
      return stub.Rollback(context, tlp::v1::RollbackRequest(), status);
    });
  });

  CLI::App* model_refresh = model_command->add_subcommand(
      "refresh",
      "Retrain the serving model's architecture on the newest stored events (in the daemon's "
      "machine, at a lower priority) and load the new model if it ranks the newest held-back "
      "events better");
  model_refresh->add_flag("--wait", wait_for_swap,
                          "Return once the refresh, and the load it may start, has ended");
  model_refresh->callback([&] {
    admin_call([](tlp::v1::Admin::Stub& stub, grpc::ClientContext* context,
                  tlp::v1::ModelStatusResponse* status) {
      return stub.RefreshModel(context, tlp::v1::RefreshModelRequest(), status);
    });
  });

  EvalSettings eval_settings;
  CLI::App* eval = app.add_subcommand(
      "eval",
      "Replay FILE through the daemon (history, then the test period scored before it is "
      "ingested) and report AP/AUC/MRR; the daemon must start from an empty data directory");
  eval->add_option("file", eval_settings.file, "Event file")->required()->check(CLI::ExistingFile);
  eval->add_option("--seed", eval_settings.replay.seed, "Seed of the negative samples");
  eval->add_option("--mrr-queries", eval_settings.replay.mrr_queries,
                   "Test positives ranked against sampled negatives for MRR (0 = skip)");
  eval->add_option("--mrr-negatives", eval_settings.replay.mrr_negatives,
                   "Negatives per MRR query");
  eval->add_option("--ranking-queries", eval_settings.replay.ranking_queries,
                   "Test positives ranked one-vs-all by TopK and the built-in baselines "
                   "(-1 = all, 0 = none)");
  eval->add_option("--max-score-pairs", eval_settings.replay.max_score_pairs,
                   "Pairs per ScoreLinks call: at most the daemon's --max-score-pairs")
      ->check(CLI::PositiveNumber);
  eval->add_option("--max-k", eval_settings.replay.ranking_k,
                   "TopK's k for the one-vs-all ranking: at most the daemon's --max-k; a true "
                   "destination ranked beyond it counts as reciprocal rank 0")
      ->check(CLI::PositiveNumber);
  eval->add_option("--plot", eval_settings.plot,
                   "Also write an SVG: score distribution and representation norm vs degree");
  eval->add_option("--json-out", eval_settings.json_out, "Also write the figures as JSON");
  eval->callback([&] { std::exit(Eval(eval_settings)); });

  tlp::client::LoadOptions load;
  std::string pairs_file;
  CLI::App* bench = app.add_subcommand(
      "bench", "Load generator (loopback only): throughput and latency percentiles");
  bench->add_option("--kind", load.kind, "score (ScoreLinks) or topk (TopK over all)")
      ->check(CLI::IsMember({"score", "topk"}));
  bench->add_option("--concurrency", load.concurrency, "Concurrent callers")
      ->check(CLI::Range(1, 1024));
  bench->add_option("--duration", load.duration_seconds, "Seconds to run")
      ->check(CLI::Range(0.1, 86400.0));
  bench->add_option("--max-requests", load.max_requests, "Stop after this many requests");
  bench->add_option("--rate", load.rate, "Requests per second over all callers (0 = open)");
  bench->add_option("--pairs", load.pairs, "Pairs per ScoreLinks request")
      ->check(CLI::Range(1, 10000));
  bench->add_option("-k", load.k, "TopK results")->check(CLI::Range(1, 1000));
  bench
      ->add_option("--pairs-from", pairs_file,
                   "Draw src/dst from this event file (default: ids 1..1000)")
      ->check(CLI::ExistingFile);
  bench->add_option("--seed", load.seed, "Seed of the drawn pairs");
  bench->callback([&] { std::exit(Bench(load, pairs_file)); });

  CLI::App* health = app.add_subcommand(
      "health", "Ask the grpc.health.v1 service; exit 0 only when SERVING (for probes)");
  static std::string health_service;
  health
      ->add_option("--service", health_service,
                   "\"\" (default): ready to serve; \"liveness\": the process is up (also while "
                   "it trains its first model or replays its log)")
      ->check(CLI::IsMember({"", "liveness"}));
  health->callback([&] {
    std::string token;
    const auto channel = Channel(&token);
    const client::Health state = client::CheckHealth(
        channel, std::chrono::milliseconds(static_cast<int64_t>(global.timeout_seconds * 1000)),
        health_service);
    const char* names[] = {"UNREACHABLE", "UNKNOWN", "SERVING", "NOT_SERVING"};
    std::printf("%s\n", names[static_cast<int>(state) + 1]);
    std::exit(state == client::Health::kServing ? 0 : 1);
  });

  CLI11_PARSE(app, argc, argv);
  return 0;
}
