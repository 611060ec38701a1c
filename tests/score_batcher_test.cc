// The score batcher (server/score_batcher.h) over a real Engine: a request still queued at its
// deadline is dropped, not scored; a request that fills a pass runs without waiting.
#include "server/score_batcher.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "tests/engine_fixture.h"

namespace tlp::server {
namespace {

using ScoreBatcherTest = testing::EngineTest;

TEST_F(ScoreBatcherTest, ScoreBatcherDropsRequestsWhoseDeadlinePassedInTheQueue) {
  ScoreBatcherOptions options;
  options.max_wait = std::chrono::milliseconds(300);  // the batch closes after the deadline
  ScoreBatcher batcher(*engine_, options);
  const std::vector<LinkQuery> queries = {{1, 100, 0}, {2, 101, 0}};
  std::vector<LinkScore> scores;
  const Status expired = batcher.Score(
      queries, &scores, std::chrono::system_clock::now() + std::chrono::milliseconds(20));
  EXPECT_EQ(expired.code(), Status::Code::kDeadlineExceeded) << expired.ToString();
  EXPECT_TRUE(scores.empty());
  const Status in_time =
      batcher.Score(queries, &scores, std::chrono::system_clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(in_time.ok()) << in_time.ToString();
  EXPECT_EQ(scores.size(), 2u);
}

// A request large enough to fill a pass on its own does not wait for others to join it.
TEST_F(ScoreBatcherTest, ScoreBatcherRunsALargeRequestWithoutWaiting) {
  ScoreBatcherOptions options;
  options.max_wait = std::chrono::seconds(60);
  options.run_at_once_pairs = 8;
  ScoreBatcher batcher(*engine_, options);
  std::vector<LinkQuery> queries;
  for (uint64_t i = 0; i < 8; ++i) queries.push_back({1, 100 + i, 0});
  std::vector<LinkScore> scores;
  const auto begin = std::chrono::steady_clock::now();
  ASSERT_TRUE(batcher.Score(queries, &scores).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - begin, std::chrono::seconds(30));
  EXPECT_EQ(scores.size(), 8u);
}

}  // namespace
}  // namespace tlp::server
