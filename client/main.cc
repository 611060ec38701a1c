// tlpctl: command-line client of tlpd over gRPC.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "client/health_check.h"
#include "common/event_reader.h"
#include "tlp/v1/tlp.grpc.pb.h"

namespace {

namespace client = tlp::client;

struct Global {
  std::string address = "127.0.0.1:50051";
  bool json = false;
  double timeout_seconds = 30;
};

Global global;

std::unique_ptr<tlp::v1::TemporalLinkPrediction::Stub> Connect() {
  return tlp::v1::TemporalLinkPrediction::NewStub(
      grpc::CreateChannel(global.address, grpc::InsecureChannelCredentials()));
}

void Deadline(grpc::ClientContext* context) {
  context->set_deadline(
      std::chrono::system_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(global.timeout_seconds * 1000)));
}

int Fail(const grpc::Status& status) {
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE ||
      status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    std::fprintf(stderr, "tlpctl: cannot reach tlpd at %s: %s\n", global.address.c_str(),
                 status.error_message().c_str());
  } else {
    std::fprintf(stderr, "tlpctl: error %d: %s\n", static_cast<int>(status.error_code()),
                 status.error_message().c_str());
  }
  return 1;
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

int Ingest(const std::string& path, size_t batch_size) {
  std::unique_ptr<tlp::EventReader> reader;
  tlp::Status status = tlp::EventReader::Open(path, &reader);
  if (!status.ok()) {
    std::fprintf(stderr, "tlpctl: %s\n", status.ToString().c_str());
    return 1;
  }
  auto stub = Connect();
  tlp::EventBatch batch;
  uint64_t sent = 0, accepted = 0, duplicates = 0;
  const auto start = std::chrono::steady_clock::now();
  const bool terminal = isatty(fileno(stderr));
  while (true) {
    status = reader->Next(batch_size, &batch);
    if (!status.ok()) {
      std::fprintf(stderr, "\ntlpctl: %s (events before it were sent)\n",
                   status.ToString().c_str());
      return 1;
    }
    if (batch.empty()) break;
    tlp::v1::IngestBatchRequest request;
    for (size_t i = 0; i < batch.size(); ++i) {
      auto* event = request.add_events();
      event->set_src(batch.src[i]);
      event->set_dst(batch.dst[i]);
      event->set_ts(batch.ts[i]);
      const auto features = batch.FeaturesOf(i);
      event->mutable_features()->Add(features.begin(), features.end());
      // Ids derived from the file position make a re-run after a failure store nothing twice.
      event->set_event_id(batch.EventIdOf(i).empty() ? path + ":" + std::to_string(sent + i)
                                                     : std::string(batch.EventIdOf(i)));
    }
    grpc::ClientContext context;
    Deadline(&context);
    tlp::v1::IngestSummary summary;
    const grpc::Status rpc = stub->IngestBatch(&context, request, &summary);
    if (!rpc.ok()) return Fail(rpc);
    sent += batch.size();
    accepted += summary.accepted();
    duplicates += summary.duplicates();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr,
                 terminal ? "\ringested %llu events (%llu new, %llu duplicates)  %.0f events/s   "
                          : "ingested %llu events (%llu new, %llu duplicates)  %.0f events/s\n",
                 static_cast<unsigned long long>(sent), static_cast<unsigned long long>(accepted),
                 static_cast<unsigned long long>(duplicates), sent / seconds);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (global.json) {
    std::printf("%s\n", nlohmann::json({{"sent", sent},
                                        {"accepted", accepted},
                                        {"duplicates", duplicates},
                                        {"seconds", seconds}})
                            .dump()
                            .c_str());
  } else {
    std::fprintf(stderr, "\n");
    std::printf("ingested %llu events from %s in %.1f s (%llu new, %llu duplicates)\n",
                static_cast<unsigned long long>(sent), path.c_str(), seconds,
                static_cast<unsigned long long>(accepted),
                static_cast<unsigned long long>(duplicates));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tlpctl: client for the tlpd temporal link prediction daemon"};
  app.require_subcommand(1);
  app.add_option("--address", global.address, "tlpd gRPC address host:port");
  app.add_flag("--json", global.json, "Print JSON instead of tables");
  app.add_option("--timeout", global.timeout_seconds, "Per-request deadline in seconds");

  std::string file;
  size_t batch_size = 5000;
  CLI::App* ingest = app.add_subcommand(
      "ingest", "Stream an event file into tlpd (JODIE, SNAP or tlpd CSV; .gz ok)");
  ingest->add_option("file", file, "Event file")->required()->check(CLI::ExistingFile);
  ingest->add_option("--batch-size", batch_size, "Events per request")
      ->check(CLI::Range(1, 100000));
  ingest->callback([&] { std::exit(Ingest(file, batch_size)); });

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
    grpc::ClientContext context;
    Deadline(&context);
    tlp::v1::ScoreResponse response;
    const grpc::Status rpc = Connect()->ScoreLinks(&context, request, &response);
    if (!rpc.ok()) std::exit(Fail(rpc));
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
  topk->callback([&] {
    tlp::v1::TopKRequest request;
    request.set_src(src);
    request.set_k(k);
    request.set_at(at);
    request.set_exclude_seen(exclude_seen);
    grpc::ClientContext context;
    Deadline(&context);
    tlp::v1::TopKResponse response;
    const grpc::Status rpc = Connect()->TopK(&context, request, &response);
    if (!rpc.ok()) std::exit(Fail(rpc));
    PrintScores(response.results());
    std::exit(0);
  });

  uint64_t node = 0;
  uint32_t recent = 5;
  CLI::App* node_command = app.add_subcommand("node", "Show a node's state and recent neighbours");
  node_command->add_option("id", node, "Node id")->required();
  node_command->add_option("--recent", recent, "Recent neighbours to show")
      ->check(CLI::Range(0, 1000));
  node_command->callback([&] {
    tlp::v1::NodeStateRequest request;
    request.set_node(node);
    request.set_recent_neighbors(recent);
    grpc::ClientContext context;
    Deadline(&context);
    tlp::v1::NodeStateResponse response;
    const grpc::Status rpc = Connect()->GetNodeState(&context, request, &response);
    if (!rpc.ok()) std::exit(Fail(rpc));
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
    grpc::ClientContext context;
    Deadline(&context);
    tlp::v1::ModelInfoResponse response;
    const grpc::Status rpc =
        Connect()->GetModelInfo(&context, tlp::v1::ModelInfoRequest(), &response);
    if (!rpc.ok()) std::exit(Fail(rpc));
    const nlohmann::json out = {
        {"architecture", response.architecture()},   {"attention_p", response.attention_p()},
        {"fingerprint", response.fingerprint()},     {"device", response.device()},
        {"embedding_dim", response.embedding_dim()}, {"memory_dim", response.memory_dim()},
        {"neighbors", response.neighbors()},         {"events_applied", response.events_applied()},
        {"watermark", response.watermark()},         {"version", response.version()}};
    std::printf("%s\n", out.dump(global.json ? -1 : 2).c_str());
    std::exit(0);
  });

  CLI::App* health = app.add_subcommand(
      "health", "Ask the grpc.health.v1 service; exit 0 only when SERVING (for probes)");
  health->callback([&] {
    const auto channel = grpc::CreateChannel(global.address, grpc::InsecureChannelCredentials());
    const client::Health state = client::CheckHealth(
        channel, std::chrono::milliseconds(static_cast<int64_t>(global.timeout_seconds * 1000)));
    const char* names[] = {"UNREACHABLE", "UNKNOWN", "SERVING", "NOT_SERVING"};
    std::printf("%s\n", names[static_cast<int>(state) + 1]);
    std::exit(state == client::Health::kServing ? 0 : 1);
  });

  CLI11_PARSE(app, argc, argv);
  return 0;
}
