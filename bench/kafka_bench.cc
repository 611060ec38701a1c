// Kafka source throughput: events/s from a Kafka topic to durable state (RocksDB, WAL synced)
// and to node memory, for the bundled Wikipedia stream (157,474 events, 172 features each).
//
// The broker is librdkafka's mock cluster in this process (no broker package exists here), so
// the figure includes the broker's own work on the same cores: a lower bound for a replica
// whose broker runs elsewhere. Events are produced first (partitioned by src, binary EdgeEvent,
// a final watermark per partition), then a replica with an empty store is started and timed
// until every event is durable and until node memory has applied them.
//
// Usage: kafka_bench --model MODEL.pt [--data wikipedia.csv.gz] [--partitions 1,4]
// Prints one JSON object per partition count.
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "common/allocator_tuning.h"
#include "common/blas_kernels.h"
#include "common/event_reader.h"
#include "common/stopwatch.h"
#include "server/serve_command.h"
#include "tlp/v1/tlp.pb.h"

namespace {

// Produces every event of `events` to `topic`, partition src % partitions; returns seconds.
double Produce(const std::string& bootstraps, const std::string& topic, int partitions,
               const tlp::EventBatch& events) {
  char error[512];
  rd_kafka_conf_t* config = rd_kafka_conf_new();
  rd_kafka_conf_set(config, "bootstrap.servers", bootstraps.c_str(), error, sizeof(error));
  rd_kafka_conf_set(config, "linger.ms", "5", error, sizeof(error));
  rd_kafka_conf_set(config, "batch.num.messages", "10000", error, sizeof(error));
  rd_kafka_t* producer = rd_kafka_new(RD_KAFKA_PRODUCER, config, error, sizeof(error));
  const tlp::Stopwatch watch;
  tlp::v1::EdgeEvent event;
  std::string value;
  auto send = [&](int partition) {
    while (rd_kafka_producev(producer, RD_KAFKA_V_TOPIC(topic.c_str()),
                             RD_KAFKA_V_PARTITION(partition),
                             RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                             RD_KAFKA_V_VALUE(value.data(), value.size()),
                             RD_KAFKA_V_END) == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
      rd_kafka_poll(producer, 5);
    }
  };
  for (size_t i = 0; i < events.size(); ++i) {
    event.set_src(events.src[i]);
    event.set_dst(events.dst[i]);
    event.set_ts(events.ts[i]);
    const auto features = events.FeaturesOf(i);
    event.mutable_features()->Assign(features.begin(), features.end());
    event.SerializeToString(&value);
    send(static_cast<int>(events.src[i] % static_cast<uint64_t>(partitions)));
  }
  value = "{\"watermark\": " + std::to_string(events.ts.back()) + "}";
  for (int p = 0; p < partitions; ++p) send(p);
  rd_kafka_flush(producer, 120000);
  // The mock broker keeps the whole log (checked: a replica must read every event).
  for (int p = 0; p < partitions; ++p) {
    int64_t low = 0, high = 0;
    rd_kafka_query_watermark_offsets(producer, topic.c_str(), p, &low, &high, 10000);
    if (low != 0) {
      std::fprintf(stderr, "kafka_bench: partition %d starts at offset %ld, not 0\n", p,
                   static_cast<long>(low));
      std::exit(1);
    }
  }
  rd_kafka_destroy(producer);
  return watch.Seconds();
}

}  // namespace

int main(int argc, char** argv) {
  tlp::UseBestBlasKernels(argv);
  tlp::KeepLargeAllocationsInHeap();
  CLI::App app("Kafka source throughput against librdkafka's mock cluster");
  std::string model, data = "data/wikipedia.csv.gz";
  std::vector<int> partition_counts = {1, 4};
  app.add_option("--model", model, "tlpd train checkpoint for the Wikipedia stream")->required();
  app.add_option("--data", data, "Event file");
  app.add_option("--partitions", partition_counts, "Partition counts to run")->delimiter(',');
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);

  tlp::EventBatch events;
  if (tlp::Status status = tlp::EventReader::ReadAll(data, &events); !status.ok()) {
    std::fprintf(stderr, "%s\n", status.ToString().c_str());
    return 1;
  }
  char error[512];
  rd_kafka_conf_t* config = rd_kafka_conf_new();
  rd_kafka_conf_set(config, "log_level", "3", error, sizeof(error));  // it has no brokers: fine
  rd_kafka_t* host = rd_kafka_new(RD_KAFKA_PRODUCER, config, error, sizeof(error));
  rd_kafka_mock_cluster_t* cluster = rd_kafka_mock_cluster_new(host, 1);
  const std::string bootstraps = rd_kafka_mock_cluster_bootstraps(cluster);
  const auto work =
      std::filesystem::temp_directory_path() / ("kafka_bench_" + std::to_string(getpid()));

  for (int partitions : partition_counts) {
    const std::string topic = "events-" + std::to_string(partitions);
    rd_kafka_mock_topic_create(cluster, topic.c_str(), partitions, 1);
    const double produce_seconds = Produce(bootstraps, topic, partitions, events);

    std::filesystem::remove_all(work);
    tlp::server::ServeOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "";
    options.engine.data_dir = work.string();
    options.engine.checkpoint = model;
    options.kafka.brokers = bootstraps;
    options.kafka.topic = topic;
    const tlp::Stopwatch watch;
    std::unique_ptr<tlp::server::Daemon> daemon;
    if (tlp::Status status = tlp::server::Daemon::Start(options, &daemon); !status.ok()) {
      std::fprintf(stderr, "%s\n", status.ToString().c_str());
      return 1;
    }
    const double serving_seconds = watch.Seconds();
    while (daemon->engine().store().last_sequence() < events.size()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const double durable_seconds = watch.Seconds();
    if (!daemon->engine().AwaitMemory().ok()) return 1;
    const double applied_seconds = watch.Seconds();
    daemon.reset();
    std::printf(
        "{\"partitions\": %d, \"events\": %zu, \"produce_seconds\": %.3f, "
        "\"serving_seconds\": %.3f, \"durable_seconds\": %.3f, \"applied_seconds\": %.3f, "
        "\"durable_events_per_second\": %.0f, \"applied_events_per_second\": %.0f}\n",
        partitions, events.size(), produce_seconds, serving_seconds, durable_seconds,
        applied_seconds, static_cast<double>(events.size()) / (durable_seconds - serving_seconds),
        static_cast<double>(events.size()) / (applied_seconds - serving_seconds));
    std::fflush(stdout);
  }
  std::filesystem::remove_all(work);
  rd_kafka_mock_cluster_destroy(cluster);
  rd_kafka_destroy(host);
  return 0;
}
