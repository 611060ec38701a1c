#include "model/graph_mixer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

namespace tlp::model {
namespace {

GraphMixerOptions SmallOptions(double p) {
  GraphMixerOptions options;
  options.token_dim = 3;
  options.model_dim = 8;
  options.tokens = 4;
  options.layers = 2;
  options.heads = 2;
  options.p = p;
  options.dropout = 0.0;
  return options;
}

// Three nodes: four, two and no interactions (padding zero, as the model passes it).
std::pair<torch::Tensor, torch::Tensor> Tokens() {
  torch::Tensor valid = torch::tensor(
      {{true, true, true, true}, {true, true, false, false}, {false, false, false, false}});
  torch::Tensor tokens = torch::randn({3, 4, 3}) * valid.unsqueeze(-1);
  return {tokens, valid};
}

TEST(GraphMixer, PoolsTheValidTokensWithMassAwareAttention) {
  torch::manual_seed(1);
  const auto [tokens, valid] = Tokens();
  GraphMixer softmax(SmallOptions(1.0));
  const GraphMixerOutput pooled = softmax(tokens, valid);
  EXPECT_EQ(pooled.vectors.sizes(), (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(pooled.metrics.neighbors_used[1].item<int64_t>(), 2);
  EXPECT_NEAR(pooled.metrics.attention_mass[0].item<double>(), 1.0, 1e-6);  // softmax
  EXPECT_EQ(pooled.metrics.attention_mass[2].item<double>(), 0.0);          // nothing to pool
  EXPECT_LE(pooled.metrics.effective_neighbors[1].item<double>(), 2.0 + 1e-6);

  GraphMixer mass_aware(SmallOptions(2.0));
  const GraphMixerOutput kept = mass_aware(tokens, valid);
  // p = 2: mass in [1, sqrt(n)], above 1 whenever two tokens share the weight.
  EXPECT_GT(kept.metrics.attention_mass[0].item<double>(), 1.0);
  EXPECT_LE(kept.metrics.attention_mass[0].item<double>(), 2.0 + 1e-6);
}

TEST(GraphMixer, OlderInteractionsChangeTheRepresentationAndEveryWeightLearns) {
  torch::manual_seed(2);
  auto [tokens, valid] = Tokens();
  GraphMixer model(SmallOptions(1.1));
  const torch::Tensor base = model(tokens, valid).vectors;
  torch::Tensor changed = tokens.clone();
  changed[0][3][2] += 0.5;  // the oldest interaction of node 0 is older
  const torch::Tensor moved = model(changed, valid).vectors;
  EXPECT_FALSE(torch::allclose(base[0], moved[0]));
  EXPECT_TRUE(torch::allclose(base.narrow(0, 1, 2), moved.narrow(0, 1, 2)));

  model(tokens, valid).vectors.square().sum().backward();
  for (const auto& named : model->named_parameters()) {
    EXPECT_TRUE(named.value().grad().defined()) << named.key();
    EXPECT_GT(named.value().grad().abs().sum().item<double>(), 0) << named.key();
  }
}

TEST(GraphMixer, RefusesWidthsTheHeadsDoNotDivide) {
  GraphMixerOptions options = SmallOptions(1.0);
  options.heads = 3;
  EXPECT_THROW(GraphMixer{options}, std::invalid_argument);
}

}  // namespace
}  // namespace tlp::model
