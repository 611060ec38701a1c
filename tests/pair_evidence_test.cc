#include "model/pair_evidence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/neighbor_sampler.h"

namespace tlp::model {
namespace {

constexpr double kHour = 3600, kDay = 86400;

// Source 0 met 1 twice (1 day and 2 hours before t), then 2 (1 hour before t); 3 met 1 and 2
// too; 4 never met anyone.
class PairEvidenceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    adjacency_.Add(0, 1, kT - kDay);
    adjacency_.Add(3, 1, kT - kDay + 10);
    adjacency_.Add(0, 1, kT - 2 * kHour);
    adjacency_.Add(0, 2, kT - kHour);
    adjacency_.Add(3, 2, kT - 30 * 60);
  }
  // Evidence of (0, dst) at kT.
  std::vector<float> Evidence(int64_t dst) {
    const std::vector<int64_t> nodes = {0, dst};
    const std::vector<double> times = {kT, kT};
    NeighborBlock lists;
    std::vector<int64_t> keys;
    adjacency_.SamplePartners(nodes, times, 16, &lists, &keys);
    std::vector<float> features;
    ComputePairEvidence(lists, keys, times, std::vector<int64_t>{0}, std::vector<int64_t>{1},
                        nullptr, &features);
    EXPECT_EQ(features.size(), static_cast<size_t>(kPairFeatures));
    return features;
  }
  static constexpr double kT = 100 * kDay;
  TemporalAdjacency adjacency_;
};

TEST_F(PairEvidenceTest, MetDestinationCarriesCountRecencyAndAge) {
  const std::vector<float> f = Evidence(1);
  EXPECT_EQ(f[0], 1);                                    // met
  EXPECT_FLOAT_EQ(f[1], std::log1p(2.0f));               // twice
  EXPECT_FLOAT_EQ(f[2], 0.5f);                           // second most recent partner
  EXPECT_NEAR(f[3], std::exp(-2.0), 1e-6);               // 2 h at the 1 h scale
  EXPECT_NEAR(f[4], std::exp(-2 * kHour / kDay), 1e-6);  // at the 1 d scale
  EXPECT_FLOAT_EQ(f[7], 0);                              // no event of 1 within the hour
  EXPECT_FLOAT_EQ(f[8], std::log1p(2.0f));               // within a day: 2 h and 1 d - 10 s ago
  EXPECT_FLOAT_EQ(f[9], std::log1p(3.0f));               // all three within a week
  EXPECT_FLOAT_EQ(f[11], 0);                             // 1's partners (0, 3) are not 0's (1, 2)
}

TEST_F(PairEvidenceTest, SharedPartnersCountOnceEach) {
  // 3 never met 0, but both met 1 and 2 (1 twice, for 0).
  const std::vector<float> f = Evidence(3);
  EXPECT_EQ(f[0], 0);
  EXPECT_FLOAT_EQ(f[11], std::log1p(2.0f));
}

TEST_F(PairEvidenceTest, MostRecentPartnerRanksFirst) {
  const std::vector<float> f = Evidence(2);
  EXPECT_EQ(f[0], 1);
  EXPECT_FLOAT_EQ(f[2], 1.0f);
  EXPECT_NEAR(f[3], std::exp(-1.0), 1e-6);
}

TEST_F(PairEvidenceTest, UnmetDestinationHasNoPairSignal) {
  const std::vector<float> f = Evidence(4);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(f[i], 0) << "feature " << i;
  EXPECT_EQ(f[14], 0);  // 4 never interacted: no freshness either
  EXPECT_EQ(f[15], 0);
}

TEST_F(PairEvidenceTest, SourceActivityAndDestinationFreshness) {
  const std::vector<float> f = Evidence(2);
  EXPECT_FLOAT_EQ(f[12], std::log1p(3.0f));  // 0 interacted three times
  EXPECT_FLOAT_EQ(f[13], 2.0f / 3.0f);       // with two distinct partners
  // 2's newest interaction (with 3) was 30 minutes ago.
  EXPECT_NEAR(f[14], std::exp(-0.5), 1e-6);
  EXPECT_NEAR(f[15], std::exp(-1800.0 / kDay), 1e-6);
}

// Users 0, 3, 4, 8 edit pages 1, 2, 5, 6, 7: 0 edited 1 and 2; 3 edited 1, 2 and 5; 4 edited 1
// and 6; 8 edited 7 alone.
class PairWalksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::pair<int64_t, int64_t> edits[] = {{0, 1}, {0, 2}, {3, 1}, {3, 2},
                                                 {3, 5}, {4, 1}, {4, 6}, {8, 7}};
    double ts = kT - kDay;
    for (const auto& [user, page] : edits) adjacency_.Add(user, page, ts += 60);
  }
  // Evidence of (0, dst) at kT, with the second hop.
  std::vector<float> Evidence(int64_t dst) {
    const std::vector<int64_t> nodes = {0, dst}, src_positions = {0}, dst_positions = {1};
    const std::vector<double> times = {kT, kT};
    NeighborBlock lists;
    std::vector<int64_t> keys;
    adjacency_.SamplePartners(nodes, times, 16, &lists, &keys);
    SecondHop hop;
    PlanSecondHop(lists, keys, times, src_positions, &hop);
    EXPECT_EQ(hop.keys, (std::vector<int64_t>{2, 1}));  // 0's partners, newest first
    adjacency_.SamplePartnersByKey(hop.keys, hop.times, 16, &hop.lists);
    std::vector<float> features;
    ComputePairEvidence(lists, keys, times, src_positions, dst_positions, &hop, &features);
    EXPECT_EQ(features.size(), static_cast<size_t>(kPairFeatures + kPairWalkFeatures));
    return features;
  }
  static constexpr double kT = 100 * kDay;
  TemporalAdjacency adjacency_;
};

TEST_F(PairWalksTest, CountsWalksOfThreeHopsToAnUnmetPage) {
  // 0-1-3-5 and 0-2-3-5.
  const std::vector<float> five = Evidence(5);
  EXPECT_EQ(five[0], 0);
  EXPECT_FLOAT_EQ(five[16], std::log1p(2.0f));
  EXPECT_FLOAT_EQ(five[17], 1.0f);  // its one editor is reached
  // 0-1-4-6 only.
  const std::vector<float> six = Evidence(6);
  EXPECT_FLOAT_EQ(six[16], std::log1p(1.0f));
  // 7's editor shares nothing with 0.
  const std::vector<float> seven = Evidence(7);
  EXPECT_EQ(seven[16], 0);
  EXPECT_EQ(seven[17], 0);
}

TEST_F(PairWalksTest, WalksThroughTheDestinationItselfAreLeftOut) {
  // 1's editors: 0 (the source), 3 (reached through 2 as well), 4 (through 1 alone).
  const std::vector<float> f = Evidence(1);
  EXPECT_EQ(f[0], 1);
  EXPECT_FLOAT_EQ(f[16], std::log1p(1.0f));  // 0-2-3-1
  EXPECT_FLOAT_EQ(f[17], 1.0f / 3.0f);
}

TEST_F(PairWalksTest, CountsPartnersOfPartners) {
  // User 3 is two hops from user 0 twice (through 1 and 2), user 4 once.
  EXPECT_FLOAT_EQ(Evidence(3)[18], std::log1p(2.0f));
  EXPECT_FLOAT_EQ(Evidence(4)[18], std::log1p(1.0f));
  EXPECT_EQ(Evidence(8)[18], 0);
}

}  // namespace
}  // namespace tlp::model
