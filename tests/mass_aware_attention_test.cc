#include "model/mass_aware_attention.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include "model/fused_attention.h"

namespace tlp::model {
namespace {

torch::Tensor AllValid(int64_t batch, int64_t slots) {
  return torch::ones({batch, slots}, torch::kBool);
}

TEST(MassAwareAggregate, PEqualsOneIsSoftmaxAttention) {
  torch::manual_seed(1);
  const torch::Tensor scores = torch::randn({4, 2, 7});
  const torch::Tensor values = torch::randn({4, 2, 7, 5});
  const auto result = MassAwareAggregate(scores, values, AllValid(4, 7), 1.0);
  const torch::Tensor expected =
      torch::matmul(torch::softmax(scores, -1).unsqueeze(-2), values).squeeze(-2);
  EXPECT_TRUE(torch::allclose(result.output, expected, 1e-6, 1e-6));
  EXPECT_TRUE(torch::allclose(result.metrics.attention_mass, torch::ones({4}), 1e-6, 1e-6));
}

TEST(MassAwareAggregate, RepeatedNeighbourScalesNormByNToOneMinusOneOverP) {
  const torch::Tensor value = torch::tensor({0.3f, -1.2f, 2.0f});
  const double base_norm = value.norm().item<double>();
  for (double p : {1.0, 1.5, 2.0, 4.0}) {
    for (int64_t n : {1, 2, 5, 16}) {
      const torch::Tensor scores = torch::full({1, 1, n}, 0.7f);
      const torch::Tensor values = value.expand({1, 1, n, 3}).contiguous();
      const auto result = MassAwareAggregate(scores, values, AllValid(1, n), p);
      const double expected = base_norm * std::pow(static_cast<double>(n), 1.0 - 1.0 / p);
      EXPECT_NEAR(result.output.norm().item<double>(), expected, 1e-4 * expected)
          << "p=" << p << " n=" << n;
      EXPECT_NEAR(result.metrics.effective_neighbors.item<double>(), static_cast<double>(n), 1e-4);
      EXPECT_NEAR(result.metrics.attention_entropy.item<double>(), std::log(static_cast<double>(n)),
                  1e-4);
    }
  }
}

TEST(MassAwareAggregate, ShiftInvariantForEveryP) {
  torch::manual_seed(2);
  const torch::Tensor scores = torch::randn({3, 2, 6});
  const torch::Tensor values = torch::randn({3, 2, 6, 4});
  for (double p : {1.0, 1.1, 2.0, 3.0}) {
    const auto base = MassAwareAggregate(scores, values, AllValid(3, 6), p);
    const auto shifted = MassAwareAggregate(scores + 37.5, values, AllValid(3, 6), p);
    EXPECT_TRUE(torch::allclose(base.output, shifted.output, 1e-5, 1e-5)) << "p=" << p;
    // And it equals the unshifted closed form sum e^s v / (sum e^{p s})^(1/p).
    const torch::Tensor e = torch::exp(scores.to(torch::kFloat64));
    const torch::Tensor closed =
        torch::matmul(e.unsqueeze(-2), values.to(torch::kFloat64)).squeeze(-2) /
        e.pow(p).sum(-1, true).pow(1.0 / p);
    EXPECT_TRUE(torch::allclose(base.output.to(torch::kFloat64), closed, 1e-5, 1e-5)) << "p=" << p;
  }
}

TEST(MassAwareAggregate, MaskedSlotsHaveNoEffect) {
  torch::manual_seed(3);
  const torch::Tensor scores = torch::randn({2, 2, 4});
  const torch::Tensor values = torch::randn({2, 2, 4, 3});
  torch::Tensor valid = torch::tensor({1, 1, 0, 0, 1, 1, 1, 0}, torch::kBool).view({2, 4});
  const auto masked = MassAwareAggregate(scores, values, valid, 2.0);
  // Changing what sits in the padding must not change anything.
  torch::Tensor other_scores = scores.clone();
  torch::Tensor other_values = values.clone();
  other_scores.index_put_({0, torch::indexing::Slice(), torch::indexing::Slice(2, 4)}, 100.0);
  other_values.index_put_({1, torch::indexing::Slice(), 3}, -50.0);
  const auto changed = MassAwareAggregate(other_scores, other_values, valid, 2.0);
  EXPECT_TRUE(torch::allclose(masked.output, changed.output));
  // And equals attention over the valid prefix alone.
  const auto prefix =
      MassAwareAggregate(scores.narrow(2, 0, 2).narrow(0, 0, 1),
                         values.narrow(2, 0, 2).narrow(0, 0, 1), AllValid(1, 2), 2.0);
  EXPECT_TRUE(torch::allclose(masked.output.narrow(0, 0, 1), prefix.output, 1e-6, 1e-6));
  EXPECT_EQ(masked.metrics.neighbors_used[0].item<int64_t>(), 2);
  EXPECT_EQ(masked.metrics.neighbors_used[1].item<int64_t>(), 3);
}

TEST(MassAwareAggregate, EmptyNeighbourhoodIsExactlyZero) {
  const torch::Tensor scores = torch::randn({2, 2, 5});
  const torch::Tensor values = torch::randn({2, 2, 5, 3});
  torch::Tensor valid = torch::zeros({2, 5}, torch::kBool);
  valid[1][0] = true;
  for (double p : {1.0, 2.0}) {
    const auto result = MassAwareAggregate(scores, values, valid, p);
    EXPECT_EQ(result.output[0].abs().sum().item<float>(), 0.0f);
    EXPECT_FALSE(torch::isnan(result.output).any().item<bool>());
    EXPECT_EQ(result.metrics.effective_neighbors[0].item<float>(), 0.0f);
    EXPECT_EQ(result.metrics.attention_mass[0].item<float>(), 0.0f);
    EXPECT_EQ(result.metrics.neighbors_used[0].item<int64_t>(), 0);
    EXPECT_NEAR(result.metrics.effective_neighbors[1].item<float>(), 1.0f, 1e-6);
  }
}

TEST(MassAwareAggregate, GradientsAreFiniteAndMatchFiniteDifferences) {
  torch::manual_seed(4);
  torch::Tensor valid = torch::tensor({1, 1, 1, 0, 1, 0, 0, 0}, torch::kBool).view({2, 4});
  for (double p : {1.0, 1.1, 2.0}) {
    torch::Tensor scores = torch::randn({2, 2, 4}, torch::kFloat64).requires_grad_(true);
    torch::Tensor values = torch::randn({2, 2, 4, 3}, torch::kFloat64).requires_grad_(true);
    const torch::Tensor probe = torch::randn({2, 2, 3}, torch::kFloat64);
    auto objective = [&](const torch::Tensor& s, const torch::Tensor& v) {
      return (MassAwareAggregate(s, v, valid, p).output * probe).sum();
    };
    objective(scores, values).backward();
    EXPECT_TRUE(torch::isfinite(scores.grad()).all().item<bool>());
    EXPECT_TRUE(torch::isfinite(values.grad()).all().item<bool>());
    // Central differences on every score and every value entry (gradcheck by hand: the C++
    // frontend has no torch.autograd.gradcheck).
    torch::NoGradGuard no_grad;
    const double step = 1e-6;
    for (torch::Tensor* input : {&scores, &values}) {
      torch::Tensor flat = input->detach().clone().view(-1);
      const torch::Tensor analytic = input->grad().view(-1);
      for (int64_t i = 0; i < flat.numel(); ++i) {
        torch::Tensor plus = flat.clone(), minus = flat.clone();
        plus[i] += step;
        minus[i] -= step;
        const bool is_scores = input == &scores;
        const double f_plus =
            is_scores ? objective(plus.view(scores.sizes()), values.detach()).item<double>()
                      : objective(scores.detach(), plus.view(values.sizes())).item<double>();
        const double f_minus =
            is_scores ? objective(minus.view(scores.sizes()), values.detach()).item<double>()
                      : objective(scores.detach(), minus.view(values.sizes())).item<double>();
        EXPECT_NEAR((f_plus - f_minus) / (2 * step), analytic[i].item<double>(), 1e-6)
            << "p=" << p << (is_scores ? " score " : " value ") << i;
      }
    }
  }
}

MassAwareAttentionOptions TwoHeadOptions(int64_t query_dim, int64_t neighbor_dim, int64_t model_dim,
                                         double p) {
  MassAwareAttentionOptions options;
  options.query_dim = query_dim;
  options.neighbor_dim = neighbor_dim;
  options.model_dim = model_dim;
  options.heads = 2;
  options.p = p;
  options.dropout = 0.0;
  return options;
}

TEST(MassAwareAttention, MultiHeadModuleReportsMetricsPerQuery) {
  torch::manual_seed(5);
  MassAwareAttention attention(TwoHeadOptions(6, 8, 4, 2.0));
  const torch::Tensor valid = torch::tensor({1, 1, 1, 0, 0, 0}, torch::kBool).view({2, 3});
  const auto out = attention->forward(torch::randn({2, 6}), torch::randn({2, 3, 8}), valid);
  EXPECT_EQ(out.output.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(out.metrics.neighbors_used[0].item<int64_t>(), 3);
  EXPECT_EQ(out.metrics.neighbors_used[1].item<int64_t>(), 0);
  EXPECT_GT(out.metrics.attention_mass[0].item<float>(), 1.0f);  // p = 2, 3 neighbours
  EXPECT_LE(out.metrics.attention_mass[0].item<float>(), std::sqrt(3.0f) + 1e-5f);
  EXPECT_THROW(
      MassAwareAggregate(torch::zeros({1, 1, 1}), torch::zeros({1, 1, 1, 1}), AllValid(1, 1), 0.5),
      std::invalid_argument);
}

// The module computes attention in factorised form; it must equal the textbook form that
// projects every neighbour into keys and values, with gradients, for softmax and MAA.
TEST(MassAwareAttention, FactorisedFormEqualsProjectingEveryNeighbour) {
  for (const double p : {1.0, 1.5, 3.0}) {
    torch::manual_seed(11);
    MassAwareAttention attention(TwoHeadOptions(6, 5, 8, p));
    const int64_t batch = 4, slots = 3, heads = 2, head_dim = 4;
    const torch::Tensor query = torch::randn({batch, 6}, torch::kFloat64);
    const torch::Tensor neighbors = torch::randn({batch, slots, 5}, torch::kFloat64);
    const torch::Tensor valid =
        torch::tensor({1, 1, 1, 1, 0, 1, 0, 0, 0, 1, 0, 0}, torch::kBool).view({batch, slots});
    attention->to(torch::kFloat64);
    const AttentionOutput factorised = attention->forward(query, neighbors, valid);

    const auto params = attention->named_parameters();
    auto linear = [&](const std::string& name, const torch::Tensor& x) {
      return torch::nn::functional::linear(x, params[name + ".weight"], params[name + ".bias"]);
    };
    const torch::Tensor q = linear("query_projection", query).view({batch, heads, 1, head_dim});
    const torch::Tensor k = linear("key_projection", neighbors)
                                .view({batch, slots, heads, head_dim})
                                .permute({0, 2, 3, 1});
    const torch::Tensor v =
        linear("value_projection", neighbors).view({batch, slots, heads, head_dim}).transpose(1, 2);
    const torch::Tensor scores = torch::matmul(q, k).squeeze(2) / std::sqrt(4.0);
    const MassAwareAggregateResult reference = MassAwareAggregate(scores, v, valid, p);
    const torch::Tensor expected =
        linear("output_projection", reference.output.reshape({batch, heads * head_dim}));

    EXPECT_TRUE(torch::allclose(factorised.output, expected, 1e-9, 1e-12)) << "p=" << p;
    EXPECT_TRUE(torch::allclose(factorised.metrics.attention_mass, reference.metrics.attention_mass,
                                1e-9, 1e-12));
    // Gradients of every parameter but the key bias (which only shifts whole rows) agree.
    const auto factorised_grads = torch::autograd::grad({factorised.output.square().sum()},
                                                        attention->parameters(), {}, true, false,
                                                        /*allow_unused=*/true);
    const auto expected_grads =
        torch::autograd::grad({expected.square().sum()}, attention->parameters(), {}, false, false,
                              /*allow_unused=*/true);
    const std::vector<std::string> names = params.keys();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "key_projection.bias") {
        EXPECT_TRUE(!expected_grads[i].defined() ||
                    expected_grads[i].abs().max().item<double>() < 1e-12);
        continue;
      }
      ASSERT_TRUE(factorised_grads[i].defined()) << names[i];
      EXPECT_TRUE(torch::allclose(factorised_grads[i], expected_grads[i], 1e-8, 1e-10))
          << names[i] << " p=" << p;
    }
  }
}

// The hand-written inference core equals the differentiable path: outputs, weight sums and
// every metric, including rows with a single neighbour and rows without any.
TEST(FusedMassAwareAttend, EqualsTheDifferentiablePath) {
  torch::manual_seed(21);
  const int64_t batch = 40, heads = 2, slots = 7, dim = 19;
  const torch::Tensor u = torch::randn({batch, heads, dim});
  const torch::Tensor x = torch::randn({batch, slots, dim});
  torch::Tensor valid = torch::rand({batch, slots}) > 0.3;
  valid[0].fill_(false);
  valid[1].fill_(false);
  valid[1][3] = true;
  for (const double p : {1.0, 1.1, 2.0, 4.0}) {
    const MassAwareAggregateResult fused = FusedMassAwareAttend(u, x, valid, 0.25, p);
    const torch::Tensor scores = (u.unsqueeze(2) * x.unsqueeze(1)).sum(-1) * 0.25;
    const torch::Tensor values = torch::cat({x, torch::ones({batch, slots, 1})}, -1).unsqueeze(1);
    const MassAwareAggregateResult reference = MassAwareAggregate(scores, values, valid, p);
    EXPECT_TRUE(torch::allclose(fused.output, reference.output, 1e-5, 1e-5)) << "p=" << p;
    EXPECT_TRUE(torch::allclose(fused.metrics.effective_neighbors,
                                reference.metrics.effective_neighbors, 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(fused.metrics.attention_mass, reference.metrics.attention_mass,
                                1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(fused.metrics.attention_entropy,
                                reference.metrics.attention_entropy, 1e-5, 1e-5));
    EXPECT_TRUE(torch::equal(fused.metrics.neighbors_used, reference.metrics.neighbors_used));
    EXPECT_EQ(fused.output[0].abs().sum().item<float>(), 0.0f);  // no neighbours: exactly 0
    // The input in three column blocks (read in place) gives the same aggregate.
    const MassAwareAggregateResult in_parts = FusedMassAwareAttend(
        u, {x.narrow(2, 0, 5), x.narrow(2, 5, 9), x.narrow(2, 14, 5)}, valid, 0.25, p);
    EXPECT_TRUE(torch::allclose(in_parts.output, fused.output, 1e-6, 1e-6)) << "p=" << p;
    EXPECT_TRUE(torch::equal(in_parts.metrics.neighbors_used, fused.metrics.neighbors_used));
  }
  EXPECT_THROW(FusedMassAwareAttend(u, {x.narrow(2, 0, 5)}, valid, 0.25, 1.0),
               std::invalid_argument);
}

// The module takes the fused core when gradients are off; its output must not change.
TEST(MassAwareAttention, InferenceEqualsTrainingPathWithoutDropout) {
  torch::manual_seed(12);
  MassAwareAttention attention(TwoHeadOptions(6, 5, 8, 1.5));
  const torch::Tensor query = torch::randn({30, 6});
  const torch::Tensor neighbors = torch::randn({30, 4, 5});
  const torch::Tensor valid = torch::rand({30, 4}) > 0.4;
  const AttentionOutput with_grad = attention->forward(query, neighbors, valid);
  torch::NoGradGuard no_grad;
  const AttentionOutput fused =
      attention->forward(query, {neighbors.narrow(2, 0, 2), neighbors.narrow(2, 2, 3)}, valid);
  EXPECT_TRUE(torch::allclose(with_grad.output.detach(), fused.output, 1e-5, 1e-6));
  EXPECT_TRUE(
      torch::allclose(with_grad.metrics.attention_mass, fused.metrics.attention_mass, 1e-5, 1e-6));
}

// The fused attention and the time encoding split their rows with at::parallel_for, an inline
// `#pragma omp parallel` that runs everything on the calling thread in code compiled without
// OpenMP. tlp_model passes -fopenmp on to everything that links it, and this binary shares its
// precompiled header, so it compiles with the model's own flags.
// Softmax self-attention written out with torch::softmax and explicit projections, for the
// module's p = 1 case.
torch::Tensor SoftmaxSelfAttention(MassAwareSelfAttention& attention, const torch::Tensor& tokens,
                                   const torch::Tensor& valid, int64_t heads) {
  auto parameters = attention->named_parameters();
  const torch::Tensor qkv = torch::nn::functional::linear(
      tokens, parameters["input_projection.weight"], parameters["input_projection.bias"]);
  const int64_t batch = tokens.size(0), count = tokens.size(1), dim = tokens.size(2);
  const torch::Tensor split =
      qkv.view({batch, count, 3, heads, dim / heads}).permute({2, 0, 3, 1, 4});
  const torch::Tensor scores = torch::matmul(split[0], split[1].transpose(-2, -1)) /
                               std::sqrt(static_cast<double>(dim / heads));
  const torch::Tensor masked =
      scores.masked_fill(valid.view({batch, 1, 1, count}).logical_not(), -1e30);
  const torch::Tensor mixed = torch::matmul(torch::softmax(masked, -1), split[2])
                                  .transpose(1, 2)
                                  .reshape({batch, count, dim});
  return torch::nn::functional::linear(mixed, parameters["output_projection.weight"],
                                       parameters["output_projection.bias"]);
}

TEST(MassAwareSelfAttention, PEqualsOneIsMaskedSoftmaxSelfAttention) {
  torch::manual_seed(11);
  MassAwareSelfAttentionOptions options;
  options.model_dim = 6;
  options.heads = 2;
  options.p = 1.0;
  options.dropout = 0.0;
  MassAwareSelfAttention attention(options);
  const torch::Tensor tokens = torch::randn({3, 5, 6});
  torch::Tensor valid = AllValid(3, 5);
  valid[1][3] = false;
  valid[2][0] = false;
  valid[2][4] = false;
  const SelfAttentionOutput result = attention(tokens, valid);
  EXPECT_TRUE(torch::allclose(result.output, SoftmaxSelfAttention(attention, tokens, valid, 2),
                              1e-5, 1e-5));
  EXPECT_EQ(result.metrics.attention_mass.sizes(), (std::vector<int64_t>{3, 5}));
  EXPECT_TRUE(torch::allclose(result.metrics.attention_mass, torch::ones({3, 5}), 1e-6, 1e-6));
  EXPECT_EQ(result.metrics.neighbors_used[2].item<int64_t>(), 3);
}

TEST(MassAwareSelfAttention, PaddedTokensInfluenceNothingAndMassGrowsWithRepeats) {
  torch::manual_seed(12);
  MassAwareSelfAttentionOptions options;
  options.model_dim = 4;
  options.heads = 1;
  options.p = 2.0;
  options.dropout = 0.0;
  MassAwareSelfAttention attention(options);
  torch::Tensor tokens = torch::randn({1, 4, 4});
  const torch::Tensor valid = torch::tensor({{true, true, false, false}});
  const torch::Tensor base = attention(tokens, valid).output;
  tokens.narrow(1, 2, 2).mul_(-50.0);
  const torch::Tensor changed = attention(tokens, valid).output;
  EXPECT_TRUE(torch::allclose(base.narrow(1, 0, 2), changed.narrow(1, 0, 2), 1e-6, 1e-6));

  // One token repeated n times: every weight equal, mass n^(1 - 1/p) = sqrt(n).
  for (int64_t n : {1, 4, 9}) {
    const torch::Tensor repeated = torch::randn({1, 1, 4}).expand({1, n, 4}).contiguous();
    const SelfAttentionOutput result = attention(repeated, AllValid(1, n));
    EXPECT_NEAR(result.metrics.attention_mass[0][0].item<double>(), std::sqrt(n), 1e-4);
  }
}

TEST(ModelBuild, ParallelForInModelCodeRunsOnSeveralThreads) {
  const int previous = at::get_num_threads();
  torch::set_num_threads(2);
  std::mutex mutex;
  std::set<std::thread::id> threads;
  at::parallel_for(0, 64, 1, [&](int64_t, int64_t) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::lock_guard lock(mutex);
    threads.insert(std::this_thread::get_id());
  });
  torch::set_num_threads(previous);
  EXPECT_EQ(threads.size(), 2u);
}

}  // namespace
}  // namespace tlp::model
