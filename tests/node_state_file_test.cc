#include "storage/node_state_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "storage/temporal_store.h"

namespace tlp::storage {
namespace {

constexpr uint32_t kDim = 3;

// States of `nodes`, every float and the ts equal to `value` (so a torn row shows).
NodeStates StatesOf(std::vector<uint64_t> nodes, float value) {
  NodeStates states;
  states.Clear(kDim);
  for (const uint64_t node : nodes) {
    states.nodes.push_back(node);
    states.last_update_ts.push_back(value);
    states.memory.insert(states.memory.end(), kDim, value);
  }
  return states;
}

class NodeStateFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("tlp_node_states_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<NodeStateFile> Open(const NodeStateCommit& committed) {
    std::unique_ptr<NodeStateFile> file;
    const Status status = NodeStateFile::Open(dir_.string(), committed, /*sync=*/false, &file);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return file;
  }
  // Prepare, "commit" (returned), Publish: what TemporalStore::SaveNodeStates does.
  static NodeStateCommit Save(NodeStateFile* file, const NodeStates& states) {
    NodeStateCommit next;
    EXPECT_TRUE(file->Prepare(states, &next).ok());
    EXPECT_TRUE(file->Publish(states, next).ok());
    return next;
  }
  // The first float of each node's stored memory, -1 where not stored.
  static std::vector<float> Values(const NodeStateFile& file, std::vector<uint64_t> nodes) {
    NodeStates read;
    read.dim = kDim;
    const Status status = file.Read(nodes, &read);
    EXPECT_TRUE(status.ok()) << status.ToString();
    std::vector<float> values;
    for (size_t i = 0; i < nodes.size(); ++i) {
      values.push_back(read.found[i] ? read.memory[i * kDim] : -1.0f);
    }
    return values;
  }

  std::filesystem::path dir_;
};

TEST_F(NodeStateFileTest, GenerationsReplaceRowsAndSurviveReopen) {
  NodeStateCommit committed;
  {
    auto file = Open({});
    committed = Save(file.get(), StatesOf({5, 1ULL << 40, 0}, 1.0f));
    committed = Save(file.get(), StatesOf({0, 9}, 2.0f));
    EXPECT_EQ(committed.generation, 2u);
    EXPECT_EQ(committed.slots, 4u);
    EXPECT_EQ(Values(*file, {5, 1ULL << 40, 0, 9, 7}),
              (std::vector<float>{1.0f, 1.0f, 2.0f, 2.0f, -1.0f}));
  }
  auto file = Open(committed);
  EXPECT_EQ(Values(*file, {5, 1ULL << 40, 0, 9, 7}),
            (std::vector<float>{1.0f, 1.0f, 2.0f, 2.0f, -1.0f}));
  NodeStates read;
  read.dim = kDim;
  const uint64_t node = 9;
  ASSERT_TRUE(file->Read({&node, 1}, &read).ok());
  EXPECT_EQ(read.last_update_ts[0], 2.0);
  EXPECT_EQ(read.memory, (std::vector<float>{2.0f, 2.0f, 2.0f}));
  read.dim = kDim + 1;  // another width is corruption, not silently cut
  EXPECT_EQ(file->Read({&node, 1}, &read).code(), Status::Code::kCorruption);
  NodeStateCommit next;
  EXPECT_EQ(file->Prepare(StatesOf({1}, 0.0f), &next).code(), Status::Code::kOk);
  NodeStates wider;
  wider.Clear(kDim + 1);
  wider.nodes = {1};
  wider.last_update_ts = {0.0};
  wider.memory.assign(kDim + 1, 0.0f);
  EXPECT_EQ(file->Prepare(wider, &next).code(), Status::Code::kInvalidArgument);
}

// A crash after Prepare but before the caller's commit: the previous generation stays, its
// slots and index included; the new nodes' index entries are dropped.
TEST_F(NodeStateFileTest, UncommittedGenerationIsIgnoredOnOpen) {
  NodeStateCommit committed;
  {
    auto file = Open({});
    committed = Save(file.get(), StatesOf({1, 2}, 1.0f));
    NodeStateCommit next;
    ASSERT_TRUE(file->Prepare(StatesOf({2, 3}, 2.0f), &next).ok());
    EXPECT_EQ(next.slots, 3u);
  }
  auto file = Open(committed);
  EXPECT_EQ(Values(*file, {1, 2, 3}), (std::vector<float>{1.0f, 1.0f, -1.0f}));
  EXPECT_EQ(std::filesystem::file_size(dir_ / "index"), 2 * sizeof(uint64_t));
  // The next generation reuses the uncommitted one's number and journal file.
  committed = Save(file.get(), StatesOf({3}, 3.0f));
  EXPECT_EQ(committed.generation, 2u);
  file = Open(committed);
  EXPECT_EQ(Values(*file, {1, 2, 3}), (std::vector<float>{1.0f, 1.0f, 3.0f}));
}

// A crash after the commit but before (or part way through) Publish: open replays the journal.
TEST_F(NodeStateFileTest, CommittedGenerationIsReplayedFromItsJournal) {
  NodeStateCommit committed;
  {
    auto file = Open({});
    Save(file.get(), StatesOf({1, 2}, 1.0f));
    Save(file.get(), StatesOf({1}, 2.0f));
    ASSERT_TRUE(file->Prepare(StatesOf({2, 4}, 3.0f), &committed).ok());
    EXPECT_EQ(committed.generation, 3u);  // journal-1, journal-0 holds generation 2
  }
  auto file = Open(committed);
  EXPECT_EQ(Values(*file, {1, 2, 4}), (std::vector<float>{2.0f, 3.0f, 3.0f}));

  // A damaged journal of the committed generation is an error, not old states served.
  file.reset();
  {
    std::fstream journal(dir_ / "journal-1", std::ios::in | std::ios::out | std::ios::binary);
    journal.seekp(40);
    journal.put('\x7f');
  }
  std::unique_ptr<NodeStateFile> damaged;
  EXPECT_EQ(NodeStateFile::Open(dir_.string(), committed, false, &damaged).code(),
            Status::Code::kCorruption);
}

// (While open: opening replays the committed generation's journal, which would repair it.)
TEST_F(NodeStateFileTest, DamagedSlotIsCorruption) {
  auto file = Open({});
  Save(file.get(), StatesOf({1, 2}, 1.0f));
  {
    std::fstream slots(dir_ / "slots", std::ios::in | std::ios::out | std::ios::binary);
    slots.seekp(40);  // the second record's ts (records of 32 bytes at dim 3)
    slots.put('\x7f');
  }
  NodeStates read;
  read.dim = kDim;
  const uint64_t nodes[] = {2, 1};
  EXPECT_EQ(file->Read(nodes, &read).code(), Status::Code::kCorruption);
}

TEST_F(NodeStateFileTest, ClearForgetsEveryStateAndAllowsAnotherWidth) {
  NodeStateCommit committed;
  {
    auto file = Open({});
    Save(file.get(), StatesOf({1, 2}, 1.0f));
    ASSERT_TRUE(file->PrepareClear(&committed).ok());
    ASSERT_TRUE(file->PublishClear(committed).ok());
    EXPECT_EQ(Values(*file, {1, 2}), (std::vector<float>{-1.0f, -1.0f}));
  }
  auto file = Open(committed);
  EXPECT_EQ(Values(*file, {1, 2}), (std::vector<float>{-1.0f, -1.0f}));
  NodeStates wider;
  wider.Clear(kDim + 2);
  wider.nodes = {2};
  wider.last_update_ts = {1.0};
  wider.memory.assign(kDim + 2, 4.0f);
  committed = Save(file.get(), wider);
  EXPECT_EQ(committed.dim, kDim + 2);
  EXPECT_EQ(committed.slots, 1u);
}

// New nodes take consecutive slots, written in pieces of at most 64 KiB (2,048 records at dim
// 3): every piece lands at its own offset, before and after a reopen, and rows rewritten in
// place among them keep their neighbours.
TEST_F(NodeStateFileTest, LongRunsOfNewSlotsAreWrittenInPieces) {
  std::vector<uint64_t> nodes(5000), every_third;
  for (uint64_t i = 0; i < nodes.size(); ++i) nodes[i] = 1000 + i;
  for (uint64_t i = 0; i < nodes.size(); i += 3) every_third.push_back(nodes[i]);
  NodeStates states = StatesOf(nodes, 0.0f);
  for (size_t i = 0; i < nodes.size(); ++i) {
    states.memory[i * kDim] = static_cast<float>(i);
  }
  NodeStateCommit committed;
  std::vector<float> expected(nodes.size());
  {
    auto file = Open({});
    Save(file.get(), states);
    committed = Save(file.get(), StatesOf(every_third, -2.0f));
    for (size_t i = 0; i < nodes.size(); ++i) {
      expected[i] = i % 3 == 0 ? -2.0f : static_cast<float>(i);
    }
    EXPECT_EQ(Values(*file, nodes), expected);
  }
  EXPECT_EQ(Values(*Open(committed), nodes), expected);
}

// Readers run beside checkpoints (the memory thread's misses, read-ahead): a row is read whole,
// old or new, never half of each.
TEST_F(NodeStateFileTest, ReadsBesidePublishSeeWholeRows) {
  auto file = Open({});
  std::vector<uint64_t> nodes(2000);
  for (uint64_t i = 0; i < nodes.size(); ++i) nodes[i] = i * 7919;
  Save(file.get(), StatesOf(nodes, 0.0f));
  std::atomic<bool> done{false};
  std::atomic<int> torn{0}, reads{0};
  std::thread reader([&] {
    NodeStates read;
    read.dim = kDim;
    while (!done) {
      if (!file->Read(nodes, &read).ok()) ++torn;
      for (size_t i = 0; i < nodes.size(); ++i) {
        const float value = read.memory[i * kDim];
        if (!read.found[i] || read.memory[i * kDim + kDim - 1] != value ||
            read.last_update_ts[i] != value) {
          ++torn;
        }
      }
      ++reads;
    }
  });
  for (int generation = 1; generation <= 200 || reads < 20; ++generation) {
    Save(file.get(), StatesOf(nodes, static_cast<float>(generation)));
  }
  done = true;
  reader.join();
  EXPECT_EQ(torn, 0);
  EXPECT_GE(reads, 20);
}

}  // namespace
}  // namespace tlp::storage
