#include "storage/event_log_reader.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <filesystem>
#include <memory>

#include "storage/temporal_store.h"

namespace tlp::storage {
namespace {

class EventLogReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tlp_event_log_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // A store with 2 features per event, feature values (ts, src) so rows are checkable.
  std::unique_ptr<TemporalStore> OpenStore() {
    StoreOptions options;
    options.sync = false;
    options.feature_dim = 2;
    std::unique_ptr<TemporalStore> store;
    const Status status = TemporalStore::Open(dir_.string(), options, &store);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return store;
  }
  static void Append(TemporalStore& store,
                     std::initializer_list<std::pair<uint64_t, double>> events) {
    EventBatch batch;
    batch.feature_dim = 2;
    for (const auto& [src, ts] : events) {
      const float features[2] = {static_cast<float>(ts), static_cast<float>(src)};
      batch.Add(src, src + 100, ts, features, "id-" + std::to_string(src));
    }
    AppendResult result;
    const Status status = store.Append(batch, &result);
    ASSERT_TRUE(status.ok()) << status.ToString();
  }
  static std::vector<double> TimesOf(const EventBatch& events) { return events.ts; }

  std::filesystem::path dir_;
};

TEST_F(EventLogReaderTest, ReadsWhileTheDaemonKeepsTheStoreOpenInTimeOrder) {
  std::unique_ptr<TemporalStore> store = OpenStore();
  Append(*store, {{1, 10.0}, {2, 20.0}, {3, 30.0}});
  Append(*store, {{4, 25.0}, {5, 40.0}});  // event 4 arrives late, within the lateness window

  EventBatch events;
  EventLogRead read;
  Status status = ReadEventLog(dir_.string(), {}, &events, &read);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(read.last_sequence, 5u);
  EXPECT_EQ(read.late_events, 1u);
  EXPECT_EQ(TimesOf(events), (std::vector<double>{10, 20, 25, 30, 40}));
  EXPECT_EQ(events.src, (std::vector<uint64_t>{1, 2, 4, 3, 5}));
  EXPECT_EQ(events.dst[2], 104u);
  ASSERT_EQ(events.feature_dim, 2u);
  for (size_t i = 0; i < events.size(); ++i) {  // features and ids moved with their events
    EXPECT_EQ(events.FeaturesOf(i)[0], static_cast<float>(events.ts[i]));
    EXPECT_EQ(events.FeaturesOf(i)[1], static_cast<float>(events.src[i]));
    EXPECT_EQ(events.EventIdOf(i), "id-" + std::to_string(events.src[i]));
  }

  // Events acknowledged after a read, still in the write-ahead log only, show in the next one.
  Append(*store, {{6, 50.0}});
  status = ReadEventLog(dir_.string(), {}, &events, &read);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(read.last_sequence, 6u);
  EXPECT_EQ(events.size(), 6u);
  EXPECT_EQ(events.src.back(), 6u);
}

TEST_F(EventLogReaderTest, WindowBySinceAndByLastEvents) {
  std::unique_ptr<TemporalStore> store = OpenStore();
  Append(*store, {{1, 10.0}, {2, 20.0}, {3, 30.0}, {4, 25.0}, {5, 40.0}});
  store.reset();  // a store no daemon holds reads the same way

  EventBatch events;
  EventLogWindow window;
  window.since_ts = 25.0;
  ASSERT_TRUE(ReadEventLog(dir_.string(), window, &events).ok());
  EXPECT_EQ(TimesOf(events), (std::vector<double>{25, 30, 40}));

  window = {};
  window.last_events = 2;  // by arrival: events 4 (ts 25) and 5
  ASSERT_TRUE(ReadEventLog(dir_.string(), window, &events).ok());
  EXPECT_EQ(events.src, (std::vector<uint64_t>{4, 5}));

  window.last_events = 3;
  window.since_ts = 30.0;  // both bounds: events 3..5, of them ts >= 30
  ASSERT_TRUE(ReadEventLog(dir_.string(), window, &events).ok());
  EXPECT_EQ(events.src, (std::vector<uint64_t>{3, 5}));

  window = {};
  window.last_events = 100;  // more than stored: all
  ASSERT_TRUE(ReadEventLog(dir_.string(), window, &events).ok());
  EXPECT_EQ(events.size(), 5u);
}

TEST_F(EventLogReaderTest, EmptyStoreGivesNoEventsAndItsFeatureWidth) {
  std::unique_ptr<TemporalStore> store = OpenStore();
  EventBatch events;
  events.Add(9, 9, 9.0);  // cleared by the read
  EventLogRead read{7, 7};
  const Status status = ReadEventLog(dir_.string(), {}, &events, &read);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(events.size(), 0u);
  EXPECT_EQ(events.feature_dim, 2u);
  EXPECT_EQ(read.last_sequence, 0u);
}

TEST_F(EventLogReaderTest, RefusesWhatIsNotAStore) {
  EventBatch events;
  Status status = ReadEventLog(dir_.string(), {}, &events);
  EXPECT_EQ(status.code(), Status::Code::kNotFound) << status.ToString();
  EXPECT_NE(status.message().find(dir_.string()), std::string::npos);

  // A RocksDB database of someone else's.
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, dir_.string(), &db).ok());
  delete db;
  status = ReadEventLog(dir_.string(), {}, &events);
  EXPECT_EQ(status.code(), Status::Code::kCorruption) << status.ToString();
  EXPECT_NE(status.message().find("events"), std::string::npos);
}

}  // namespace
}  // namespace tlp::storage
