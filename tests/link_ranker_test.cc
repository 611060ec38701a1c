#include "server/link_ranker.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "tests/engine_fixture.h"

namespace tlp::testing {
namespace {

using server::LinkQuery;
using server::LinkRanker;
using server::LinkScore;
using server::RankQuery;
using server::RankResult;

class LinkRankerTest : public EngineTest {
 protected:
  // Source 1 met 100 (t = 1), then 101 (t = 2); 102..106 met others, 106 the most.
  void Ingest() {
    EventBatch batch;
    batch.Add(1, 100, 1.0, {}, "a");
    batch.Add(1, 101, 2.0, {}, "b");
    for (int i = 0; i < 10; ++i)
      batch.Add(10 + i, 102 + i % 5, 3.0 + i, {}, "c" + std::to_string(i));
    for (int i = 0; i < 6; ++i) batch.Add(30 + i, 106, 20.0 + i, {}, "d" + std::to_string(i));
    storage::AppendResult result;
    ASSERT_TRUE(engine_->Ingest(batch, &result).ok());
    ASSERT_TRUE(engine_->AwaitMemory().ok());
  }
  RankResult Rank(size_t shortlist, uint32_t k, std::vector<uint64_t>* model_scored) {
    RankQuery query;
    query.src = 1;
    query.k = k;
    RankResult result;
    const Status status =
        LinkRanker(*engine_, 10000, shortlist)
            .Rank(
                query,
                [&](std::span<const LinkQuery> queries, std::vector<LinkScore>* scores) {
                  for (const LinkQuery& q : queries) model_scored->push_back(q.dst);
                  return engine_->Score(queries, scores);
                },
                &result);
    EXPECT_TRUE(status.ok()) << status.ToString();
    std::sort(model_scored->begin(), model_scored->end());
    return result;
  }
};

TEST_F(LinkRankerTest, WithoutAShortlistTheModelScoresEveryDestination) {
  Ingest();
  std::vector<uint64_t> scored;
  const RankResult result = Rank(0, 3, &scored);
  EXPECT_EQ(result.candidates_scored, 7u);  // 100..106
  EXPECT_EQ(scored, (std::vector<uint64_t>{100, 101, 102, 103, 104, 105, 106}));
  ASSERT_EQ(result.top.size(), 3u);
  EXPECT_GE(result.top[0].logit, result.top[1].logit);
}

TEST_F(LinkRankerTest, AShortlistKeepsWhatRecencyThenPopularityRanksFirst) {
  Ingest();
  std::vector<uint64_t> scored;
  // Recent destinations first (101, then 100), then the most popular (106).
  const RankResult result = Rank(3, 2, &scored);
  EXPECT_EQ(result.candidates_scored, 3u);
  EXPECT_EQ(scored, (std::vector<uint64_t>{100, 101, 106}));
  ASSERT_EQ(result.top.size(), 2u);
  for (const LinkScore& score : result.top) {
    EXPECT_NE(std::find(scored.begin(), scored.end(), score.query.dst), scored.end());
  }
  // k above the shortlist: k candidates are scored, so k results come back.
  scored.clear();
  EXPECT_EQ(Rank(3, 5, &scored).top.size(), 5u);
  EXPECT_EQ(scored.size(), 5u);
}

}  // namespace
}  // namespace tlp::testing
