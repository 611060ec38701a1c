// client/stream_ingest (tlpctl ingest's engine) against an in-process daemon over loopback.
#include "client/stream_ingest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "client/daemon_client.h"
#include "server/serve_command.h"
#include "tests/test_model.h"
#include "tests/test_support.h"

namespace tlp::server {
namespace {

// tlpctl ingest's engine: several requests in flight, each event stored once, re-runs
// deduplicated, and a read error stops sending with what was acknowledged stored.
TEST(StreamIngestTest, SeveralStreamsStoreEveryEventOnce) {
  const std::filesystem::path dir = testing::FreshDirectory("tlp_stream_ingest");
  ASSERT_TRUE(testing::WriteSmallModel(dir / "model.pt", 16, 1).ok());
  ServeOptions options;
  options.listen = "127.0.0.1:0";
  options.engine.data_dir = (dir / "data").string();
  options.engine.checkpoint = (dir / "model.pt").string();
  options.engine.sync_writes = false;
  options.engine.lateness_seconds = 1e9;  // batches may arrive out of order
  std::unique_ptr<Daemon> daemon;
  ASSERT_TRUE(Daemon::Start(options, &daemon).ok());
  const std::string address = "127.0.0.1:" + std::to_string(daemon->port());
  auto write_file = [&](const std::string& name, int lines, int bad_line) {
    std::ofstream out(dir / name);
    out << "src,dst,ts\n";
    for (int i = 1; i <= lines; ++i) {
      if (i == bad_line)
        out << "not,an,event\n";
      else
        out << i % 13 + 1 << "," << 100 + i % 17 << "," << i << "\n";
    }
    return (dir / name).string();
  };
  client::StreamIngestOptions ingest;
  ingest.batch_size = 7;
  ingest.streams = 4;
  client::DaemonClient client(address, 10);
  client.set_id_prefix("good.csv");
  for (int run = 0; run < 2; ++run) {
    std::unique_ptr<EventReader> reader;
    ASSERT_TRUE(EventReader::Open(write_file("good.csv", 500, 0), &reader).ok());
    client::StreamIngestTotals totals;
    int progress_calls = 0;
    const Status status = client::IngestStream(
        client, client::ReaderSource(*reader), ingest,
        [&](const client::StreamIngestTotals&) { ++progress_calls; }, &totals);
    ASSERT_TRUE(status.ok()) << status.ToString();
    EXPECT_EQ(totals.sent, 500u);
    EXPECT_EQ(totals.accepted, run == 0 ? 500u : 0u);
    EXPECT_EQ(totals.duplicates, run == 0 ? 0u : 500u);
    EXPECT_EQ(progress_calls, 72);  // ceil(500 / 7)
    EXPECT_EQ(daemon->engine().store().last_sequence(), 500u);
  }

  client.set_id_prefix("bad.csv");
  std::unique_ptr<EventReader> reader;
  ASSERT_TRUE(EventReader::Open(write_file("bad.csv", 500, 300), &reader).ok());
  client::StreamIngestTotals totals;
  const Status status =
      client::IngestStream(client, client::ReaderSource(*reader), ingest, {}, &totals);
  EXPECT_EQ(status.code(), Status::Code::kInvalidArgument) << status.ToString();
  EXPECT_NE(status.message().find("bad.csv:301"), std::string::npos) << status.ToString();
  EXPECT_LT(totals.sent, 300u);
  EXPECT_EQ(daemon->engine().store().last_sequence(), 500u + totals.sent);
  daemon.reset();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tlp::server
