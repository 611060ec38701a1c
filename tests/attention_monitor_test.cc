#include "model/attention_monitor.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>
#include <set>
#include <vector>

#include "model/neighbor_sampler.h"
#include "model/temporal_model.h"

namespace tlp::model {
namespace {

TEST(EnergyField, RowsSumToZeroAndTheRankIsBoundedByTheHeadDimension) {
  torch::manual_seed(1);
  const torch::Tensor queries = torch::randn({40, 4});
  const torch::Tensor keys = torch::randn({30, 4});
  const torch::Tensor field = EnergyField(queries, keys, 0.5);
  ASSERT_EQ(field.sizes(), (std::vector<int64_t>{40, 30}));
  EXPECT_LT(field.sum(1).abs().max().item<double>(), 1e-12);
  const EnergyFieldSummary summary = SummariseEnergyField(queries, keys, 0.5);
  EXPECT_EQ(summary.rank_bound, 4);
  EXPECT_EQ(summary.rank, 4);  // generic inputs reach the bound
  EXPECT_LT(summary.row_sum_residual, 1e-12);
  EXPECT_GT(summary.effective_rank, 1.0);
  EXPECT_LE(summary.effective_rank, 4.0 + 1e-9);
  ASSERT_EQ(summary.spectrum.size(), 8u);
  EXPECT_DOUBLE_EQ(summary.spectrum[0], 1.0);
  EXPECT_LT(summary.spectrum[4], 1e-12);  // beyond the head dimension: rounding only
  EXPECT_GT(summary.query_share, 0.5);    // independent random queries rank keys differently

  // Queries that share one large component rank the keys almost alike.
  const torch::Tensor alike = queries * 0.01 + torch::randn({1, 4}) * 10;
  EXPECT_LT(SummariseEnergyField(alike, keys, 0.5).query_share, 1e-3);

  // Three keys: centring leaves two directions, whatever the head dimension.
  const EnergyFieldSummary few = SummariseEnergyField(queries, keys.narrow(0, 0, 3), 0.5);
  EXPECT_EQ(few.rank_bound, 2);
  EXPECT_EQ(few.rank, 2);
}

TEST(EnergyField, IgnoresAKeyOffsetSharedByEveryKey) {
  torch::manual_seed(2);
  const torch::Tensor queries = torch::randn({10, 4}, torch::kFloat64);
  const torch::Tensor keys = torch::randn({12, 4}, torch::kFloat64);
  const torch::Tensor shifted = keys + torch::randn({1, 4}, torch::kFloat64) * 100;
  EXPECT_TRUE(torch::allclose(EnergyField(queries, keys, 1.0), EnergyField(queries, shifted, 1.0),
                              1e-9, 1e-9));
  EXPECT_NEAR(KeyCoherence(keys), KeyCoherence(shifted), 1e-6);
}

TEST(KeyCoherence, IsLowForSpreadKeysAndHighWhenOneKeySpansADirection) {
  torch::manual_seed(3);
  const torch::Tensor spread = torch::randn({200, 4});
  const double incoherent = KeyCoherence(spread);
  EXPECT_GE(incoherent, 1.0);
  EXPECT_LT(incoherent, 5.0);
  // One key far out along a direction no other key has: its leverage is ~1, so the coherence
  // nears its maximum n / r = 50.
  torch::Tensor spiked = spread.clone();
  spiked.select(1, 3).zero_();
  spiked[0][3] = 1000.0;
  EXPECT_GT(KeyCoherence(spiked), 45.0);
  EXPECT_LE(KeyCoherence(spiked), 50.0 + 1e-9);
  EXPECT_EQ(KeyCoherence(spread.narrow(0, 0, 1)), 1.0);
  // No more keys than dimensions + 1: every key has the same leverage, whatever the keys.
  EXPECT_NEAR(KeyCoherence(torch::randn({5, 8}) * torch::rand({5, 1}) * 100), 1.0, 1e-9);
}

ModelConfig MonitoredConfig(const std::string& architecture) {
  ModelConfig config;
  config.architecture = architecture;
  config.memory_dim = config.time_dim = config.embedding_dim = 8;  // head_dim 4
  config.heads = 2;
  config.layers = 2;
  config.neighbors = 7;
  config.pair_neighbors = 0;
  config.dropout = 0.0;
  if (architecture == "dygformer") config.patch_size = 2;
  return config;
}

// A stream over 30 nodes in which every node meets several others.
TemporalAdjacency RandomHistory(int events) {
  TemporalAdjacency adjacency;
  std::mt19937_64 random(4);
  for (int i = 0; i < events; ++i) adjacency.Add(random() % 30, random() % 30, 1.0 + i);
  return adjacency;
}

// The mechanism-level invariants on the real model: every attention head of TGN (neighbour
// attention, both layers) and DyGFormer (self-attention, both layers) gives a field whose rows
// sum to zero and whose rank stays within min(head_dim, keys - 1); capturing leaves the
// model's outputs unchanged.
TEST(AttentionMonitor, EveryHeadOfTheRealModelKeepsTheInvariants) {
  for (const std::string architecture : {"tgn", "tgat", "dygformer"}) {
    SCOPED_TRACE(architecture);
    torch::manual_seed(5);
    TemporalLinkModel model(MonitoredConfig(architecture));
    model->EnsureNodes(30);
    model->eval();
    torch::NoGradGuard no_grad;
    const TemporalAdjacency adjacency = RandomHistory(400);
    std::vector<int64_t> nodes;
    for (int64_t node = 0; node < 30; ++node) nodes.push_back(node);
    const std::vector<double> times(nodes.size(), 1000.0);
    std::vector<int64_t> src, dst;
    for (int64_t i = 0; i < 15; ++i) {
      src.push_back(i);
      dst.push_back(29 - i);
    }
    const torch::Tensor uncaptured = model->PredictLinks(model->Embed(nodes, times, adjacency),
                                                         nodes, times, src, dst, adjacency);
    std::vector<HeadMonitor> heads;
    {
      const ScopedAttentionCapture capture(*model);
      const torch::Tensor captured = model->PredictLinks(model->Embed(nodes, times, adjacency),
                                                         nodes, times, src, dst, adjacency);
      EXPECT_TRUE(torch::equal(uncaptured, captured));
      heads = capture.Summarise();
    }
    ASSERT_EQ(heads.size(), 4u);  // 2 layers x 2 heads
    std::set<std::string> modules;
    for (const HeadMonitor& head : heads) {
      SCOPED_TRACE(head.module + " head " + std::to_string(head.head));
      modules.insert(head.module);
      EXPECT_LT(head.field.row_sum_residual, 1e-9);
      EXPECT_LE(head.field.rank_bound, 4);
      EXPECT_GE(head.field.rank, 1);
      EXPECT_LE(head.field.rank, head.field.rank_bound);
      EXPECT_GE(head.field.key_coherence, 1.0);
      EXPECT_GE(head.field.keys, 2);
    }
    EXPECT_EQ(modules.size(), 2u);
    // After the scope, the modules capture nothing more (they would write to freed memory).
    EXPECT_TRUE(torch::equal(uncaptured, model->PredictLinks(model->Embed(nodes, times, adjacency),
                                                             nodes, times, src, dst, adjacency)));
  }
}

}  // namespace
}  // namespace tlp::model
