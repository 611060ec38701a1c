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

Normalisation Maa(double p) { return {AttentionNormaliser::kMassAware, p, {}}; }

// MAA at several p, sigmoid, and a sink with a logit per head (two heads).
std::vector<std::pair<std::string, Normalisation>> EveryNormalisation() {
  return {{"softmax", Maa(1.0)},
          {"maa1.1", Maa(1.1)},
          {"maa2", Maa(2.0)},
          {"sigmoid", {AttentionNormaliser::kSigmoid, 1.0, {}}},
          {"sink", {AttentionNormaliser::kSink, 1.0, torch::tensor({0.3, -0.7})}}};
}

TEST(MassAwareAggregate, PEqualsOneIsSoftmaxAttention) {
  torch::manual_seed(1);
  const torch::Tensor scores = torch::randn({4, 2, 7});
  const torch::Tensor values = torch::randn({4, 2, 7, 5});
  const auto result = MassAwareAggregate(scores, values, AllValid(4, 7), Maa(1.0));
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
      const auto result = MassAwareAggregate(scores, values, AllValid(1, n), Maa(p));
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
    const auto base = MassAwareAggregate(scores, values, AllValid(3, 6), Maa(p));
    const auto shifted = MassAwareAggregate(scores + 37.5, values, AllValid(3, 6), Maa(p));
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
  for (const auto& [name, normalisation] : EveryNormalisation()) {
    torch::manual_seed(3);
    const torch::Tensor scores = torch::randn({2, 2, 4});
    const torch::Tensor values = torch::randn({2, 2, 4, 3});
    torch::Tensor valid = torch::tensor({1, 1, 0, 0, 1, 1, 1, 0}, torch::kBool).view({2, 4});
    const auto masked = MassAwareAggregate(scores, values, valid, normalisation);
    // Changing what sits in the padding must not change anything.
    torch::Tensor other_scores = scores.clone();
    torch::Tensor other_values = values.clone();
    other_scores.index_put_({0, torch::indexing::Slice(), torch::indexing::Slice(2, 4)}, 100.0);
    other_values.index_put_({1, torch::indexing::Slice(), 3}, -50.0);
    const auto changed = MassAwareAggregate(other_scores, other_values, valid, normalisation);
    EXPECT_TRUE(torch::allclose(masked.output, changed.output)) << name;
    // And equals attention over the valid prefix alone.
    const auto prefix =
        MassAwareAggregate(scores.narrow(2, 0, 2).narrow(0, 0, 1),
                           values.narrow(2, 0, 2).narrow(0, 0, 1), AllValid(1, 2), normalisation);
    EXPECT_TRUE(torch::allclose(masked.output.narrow(0, 0, 1), prefix.output, 1e-6, 1e-6)) << name;
    EXPECT_EQ(masked.metrics.neighbors_used[0].item<int64_t>(), 2);
    EXPECT_EQ(masked.metrics.neighbors_used[1].item<int64_t>(), 3);
  }
}

TEST(MassAwareAggregate, EmptyNeighbourhoodIsExactlyZero) {
  const torch::Tensor scores = torch::randn({2, 2, 5});
  const torch::Tensor values = torch::randn({2, 2, 5, 3});
  torch::Tensor valid = torch::zeros({2, 5}, torch::kBool);
  valid[1][0] = true;
  for (const auto& [name, normalisation] : EveryNormalisation()) {
    const auto result = MassAwareAggregate(scores, values, valid, normalisation);
    EXPECT_EQ(result.output[0].abs().sum().item<float>(), 0.0f) << name;
    EXPECT_FALSE(torch::isnan(result.output).any().item<bool>());
    EXPECT_EQ(result.metrics.effective_neighbors[0].item<float>(), 0.0f);
    EXPECT_EQ(result.metrics.attention_mass[0].item<float>(), 0.0f);
    EXPECT_EQ(result.metrics.attention_entropy[0].item<float>(), 0.0f);
    EXPECT_EQ(result.metrics.neighbors_used[0].item<int64_t>(), 0);
    EXPECT_NEAR(result.metrics.effective_neighbors[1].item<float>(), 1.0f, 1e-6) << name;
  }
}

TEST(MassAwareAggregate, SigmoidWeighsEachKeyAloneWithAMinusLogNBias) {
  torch::manual_seed(31);
  const torch::Tensor scores = torch::randn({2, 2, 5}, torch::kFloat64);
  const torch::Tensor values = torch::randn({2, 2, 5, 3}, torch::kFloat64);
  const torch::Tensor valid =
      torch::tensor({1, 1, 1, 1, 1, 1, 1, 0, 0, 0}, torch::kBool).view({2, 5});
  const auto result =
      MassAwareAggregate(scores, values, valid, {AttentionNormaliser::kSigmoid, 1.0, {}});
  // Row 0 has 5 valid keys, row 1 has 2.
  const torch::Tensor bias = torch::tensor({-std::log(5.0), -std::log(2.0)}, torch::kFloat64);
  const torch::Tensor weights =
      torch::sigmoid(scores + bias.view({2, 1, 1})) * valid.unsqueeze(1).to(torch::kFloat64);
  const torch::Tensor expected = (weights.unsqueeze(-1) * values).sum(2);
  EXPECT_TRUE(torch::allclose(result.output, expected, 1e-12, 1e-12));
  // The mass is the weights' sum (not 1: no competition between keys), averaged over heads.
  EXPECT_TRUE(torch::allclose(result.metrics.attention_mass, weights.sum(-1).mean(1), 1e-12));
  // A key's weight does not depend on the other keys' scores: raising key 4's score changes
  // the output by key 4's own change of weight times its value, nothing else.
  torch::Tensor raised = scores.clone();
  raised.index_put_({0, torch::indexing::Slice(), 4}, 3.0);
  const auto other =
      MassAwareAggregate(raised, values, valid, {AttentionNormaliser::kSigmoid, 1.0, {}});
  const torch::Tensor change = (torch::sigmoid(raised[0].select(1, 4) + bias[0]) -
                                torch::sigmoid(scores[0].select(1, 4) + bias[0]))
                                   .unsqueeze(-1) *
                               values[0].select(1, 4);
  EXPECT_TRUE(torch::allclose(other.output[0] - result.output[0], change, 1e-12, 1e-12));
  EXPECT_TRUE(torch::equal(other.output[1], result.output[1]));
}

TEST(MassAwareAggregate, SinkIsSoftmaxOverOneMoreKeyOfZeroValue) {
  torch::manual_seed(32);
  const torch::Tensor scores = torch::randn({3, 2, 4}, torch::kFloat64);
  const torch::Tensor values = torch::randn({3, 2, 4, 3}, torch::kFloat64);
  const torch::Tensor logits = torch::tensor({0.5, -1.0}, torch::kFloat64);
  const auto result =
      MassAwareAggregate(scores, values, AllValid(3, 4), {AttentionNormaliser::kSink, 1.0, logits});
  // Reference: softmax over [sink, keys] with the sink's value 0.
  const torch::Tensor with_sink =
      torch::cat({logits.view({1, 2, 1}).expand({3, 2, 1}), scores}, -1);
  const torch::Tensor shares = torch::softmax(with_sink, -1);
  const torch::Tensor expected = (shares.narrow(2, 1, 4).unsqueeze(-1) * values).sum(2);
  EXPECT_TRUE(torch::allclose(result.output, expected, 1e-12, 1e-12));
  // The mass is what the real keys got: 1 - the sink's share.
  EXPECT_TRUE(
      torch::allclose(result.metrics.attention_mass, (1 - shares.select(2, 0)).mean(1), 1e-12));
  // A sink far below every key is plain softmax; one far above takes (almost) everything.
  const auto low = MassAwareAggregate(scores, values, AllValid(3, 4),
                                      {AttentionNormaliser::kSink, 1.0, torch::full({2}, -60.0)});
  const auto softmax = MassAwareAggregate(scores, values, AllValid(3, 4), Maa(1.0));
  EXPECT_TRUE(torch::allclose(low.output, softmax.output, 1e-12, 1e-12));
  const auto high = MassAwareAggregate(scores, values, AllValid(3, 4),
                                       {AttentionNormaliser::kSink, 1.0, torch::full({2}, 60.0)});
  EXPECT_LT(high.metrics.attention_mass.max().item<double>(), 1e-20);
  EXPECT_THROW(MassAwareAggregate(scores, values, AllValid(3, 4),
                                  {AttentionNormaliser::kSink, 1.0, torch::zeros({3})}),
               std::invalid_argument);
}

// MAA ignores a constant added to a row's scores; sigmoid and sink attention do not, which is
// why the factorised MassAwareAttention must add the key bias back for them.
TEST(MassAwareAggregate, OnlyMassAwareAttentionIsShiftInvariant) {
  torch::manual_seed(33);
  const torch::Tensor scores = torch::randn({2, 2, 5});
  const torch::Tensor values = torch::randn({2, 2, 5, 3});
  for (const auto& [name, normalisation] : EveryNormalisation()) {
    const auto base = MassAwareAggregate(scores, values, AllValid(2, 5), normalisation);
    const auto shifted = MassAwareAggregate(scores + 1.5, values, AllValid(2, 5), normalisation);
    const bool invariant = torch::allclose(base.output, shifted.output, 1e-5, 1e-5);
    EXPECT_EQ(invariant, normalisation.normaliser == AttentionNormaliser::kMassAware) << name;
  }
}

TEST(MassAwareAggregate, GradientsAreFiniteAndMatchFiniteDifferences) {
  torch::manual_seed(4);
  torch::Tensor valid = torch::tensor({1, 1, 1, 0, 1, 0, 0, 0}, torch::kBool).view({2, 4});
  for (const auto& [name, normalisation] : EveryNormalisation()) {
    torch::Tensor scores = torch::randn({2, 2, 4}, torch::kFloat64).requires_grad_(true);
    torch::Tensor values = torch::randn({2, 2, 4, 3}, torch::kFloat64).requires_grad_(true);
    // The sink's logits are a third input (unused but by the sink).
    torch::Tensor sink = torch::tensor({0.3, -0.7}, torch::kFloat64).requires_grad_(true);
    const torch::Tensor probe = torch::randn({2, 2, 3}, torch::kFloat64);
    auto objective = [&](const torch::Tensor& s, const torch::Tensor& v, const torch::Tensor& c) {
      return (MassAwareAggregate(s, v, valid, {normalisation.normaliser, normalisation.p, c})
                  .output *
              probe)
          .sum();
    };
    objective(scores, values, sink).backward();
    EXPECT_TRUE(torch::isfinite(scores.grad()).all().item<bool>());
    EXPECT_TRUE(torch::isfinite(values.grad()).all().item<bool>());
    const bool has_sink = normalisation.normaliser == AttentionNormaliser::kSink;
    EXPECT_EQ(sink.grad().defined(), has_sink) << name;
    // Central differences on every entry of every input (gradcheck by hand: the C++ frontend
    // has no torch.autograd.gradcheck).
    torch::NoGradGuard no_grad;
    const double step = 1e-6;
    std::vector<torch::Tensor*> inputs = {&scores, &values};
    if (has_sink) inputs.push_back(&sink);
    for (size_t which = 0; which < inputs.size(); ++which) {
      torch::Tensor flat = inputs[which]->detach().clone().view(-1);
      const torch::Tensor analytic = inputs[which]->grad().view(-1);
      auto at = [&](const torch::Tensor& changed) {
        std::vector<torch::Tensor> arguments = {scores.detach(), values.detach(), sink.detach()};
        arguments[which] = changed.view(inputs[which]->sizes());
        return objective(arguments[0], arguments[1], arguments[2]).item<double>();
      };
      for (int64_t i = 0; i < flat.numel(); ++i) {
        torch::Tensor plus = flat.clone(), minus = flat.clone();
        plus[i] += step;
        minus[i] -= step;
        EXPECT_NEAR((at(plus) - at(minus)) / (2 * step), analytic[i].item<double>(), 1e-6)
            << name << " input " << which << " entry " << i;
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
  EXPECT_THROW(MassAwareAggregate(torch::zeros({1, 1, 1}), torch::zeros({1, 1, 1, 1}),
                                  AllValid(1, 1), Maa(0.5)),
               std::invalid_argument);
}

// The module computes attention in factorised form; it must equal the textbook form that
// projects every neighbour into keys and values, with gradients, for every normaliser.
TEST(MassAwareAttention, FactorisedFormEqualsProjectingEveryNeighbour) {
  for (const auto& [name, normalisation] : EveryNormalisation()) {
    const double p = normalisation.p;
    torch::manual_seed(11);
    MassAwareAttentionOptions options = TwoHeadOptions(6, 5, 8, p);
    options.normaliser = normalisation.normaliser;
    MassAwareAttention attention(options);
    if (normalisation.normaliser == AttentionNormaliser::kSink) {
      torch::NoGradGuard no_grad;
      attention->named_parameters()["sink_logits"].copy_(normalisation.sink_logits);
    }
    const int64_t batch = 4, slots = 3, heads = 2, head_dim = 4;
    const torch::Tensor query = torch::randn({batch, 6}, torch::kFloat64);
    const torch::Tensor neighbors = torch::randn({batch, slots, 5}, torch::kFloat64);
    const torch::Tensor valid =
        torch::tensor({1, 1, 1, 1, 0, 1, 0, 0, 0, 1, 0, 0}, torch::kBool).view({batch, slots});
    attention->to(torch::kFloat64);
    const AttentionOutput factorised = attention->forward(query, neighbors, valid);

    const auto params = attention->named_parameters();
    auto linear = [&](const std::string& layer, const torch::Tensor& x) {
      return torch::nn::functional::linear(x, params[layer + ".weight"], params[layer + ".bias"]);
    };
    const torch::Tensor q = linear("query_projection", query).view({batch, heads, 1, head_dim});
    const torch::Tensor k = linear("key_projection", neighbors)
                                .view({batch, slots, heads, head_dim})
                                .permute({0, 2, 3, 1});
    const torch::Tensor v =
        linear("value_projection", neighbors).view({batch, slots, heads, head_dim}).transpose(1, 2);
    const torch::Tensor scores = torch::matmul(q, k).squeeze(2) / std::sqrt(4.0);
    const MassAwareAggregateResult reference = MassAwareAggregate(
        scores, v, valid,
        {normalisation.normaliser, p,
         params.contains("sink_logits") ? params["sink_logits"] : torch::Tensor()});
    const torch::Tensor expected =
        linear("output_projection", reference.output.reshape({batch, heads * head_dim}));

    EXPECT_TRUE(torch::allclose(factorised.output, expected, 1e-9, 1e-12)) << name;
    EXPECT_TRUE(torch::allclose(factorised.metrics.attention_mass, reference.metrics.attention_mass,
                                1e-9, 1e-12));
    // Gradients of every parameter agree; the key bias, which only shifts whole rows, has none
    // under MAA.
    const bool shift_invariant = normalisation.normaliser == AttentionNormaliser::kMassAware;
    const auto factorised_grads = torch::autograd::grad({factorised.output.square().sum()},
                                                        attention->parameters(), {}, true, false,
                                                        /*allow_unused=*/true);
    const auto expected_grads =
        torch::autograd::grad({expected.square().sum()}, attention->parameters(), {}, false, false,
                              /*allow_unused=*/true);
    const std::vector<std::string> names = params.keys();
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == "key_projection.bias" && shift_invariant) {
        EXPECT_TRUE(!expected_grads[i].defined() ||
                    expected_grads[i].abs().max().item<double>() < 1e-12);
        continue;
      }
      ASSERT_TRUE(factorised_grads[i].defined()) << names[i];
      EXPECT_TRUE(torch::allclose(factorised_grads[i], expected_grads[i], 1e-8, 1e-10))
          << names[i] << " " << name;
      if (names[i] == "key_projection.bias" || names[i] == "sink_logits") {
        EXPECT_GT(factorised_grads[i].abs().max().item<double>(), 1e-6) << names[i] << " " << name;
      }
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
  std::vector<std::pair<std::string, Normalisation>> normalisations = EveryNormalisation();
  normalisations.push_back({"maa4", Maa(4.0)});
  const torch::Tensor offsets = torch::randn({batch, heads});
  for (const auto& [name, normalisation] : normalisations) {
    // The key bias's offsets only where the normaliser needs them, as MassAwareAttention does.
    const bool offset = normalisation.normaliser != AttentionNormaliser::kMassAware;
    const MassAwareAggregateResult fused =
        FusedMassAwareAttend(u, x, valid, 0.25, normalisation, offset ? offsets : torch::Tensor());
    torch::Tensor scores = (u.unsqueeze(2) * x.unsqueeze(1)).sum(-1) * 0.25;
    if (offset) scores = scores + offsets.unsqueeze(-1);
    const torch::Tensor values = torch::cat({x, torch::ones({batch, slots, 1})}, -1).unsqueeze(1);
    const MassAwareAggregateResult reference =
        MassAwareAggregate(scores, values, valid, normalisation);
    EXPECT_TRUE(torch::allclose(fused.output, reference.output, 1e-5, 1e-5)) << name;
    EXPECT_TRUE(torch::allclose(fused.metrics.effective_neighbors,
                                reference.metrics.effective_neighbors, 1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(fused.metrics.attention_mass, reference.metrics.attention_mass,
                                1e-5, 1e-5));
    EXPECT_TRUE(torch::allclose(fused.metrics.attention_entropy,
                                reference.metrics.attention_entropy, 1e-5, 1e-5));
    EXPECT_TRUE(torch::equal(fused.metrics.neighbors_used, reference.metrics.neighbors_used));
    EXPECT_EQ(fused.output[0].abs().sum().item<float>(), 0.0f);  // no neighbours: exactly 0
    // The input in three column blocks (read in place) gives the same aggregate.
    const MassAwareAggregateResult in_parts =
        FusedMassAwareAttend(u, {x.narrow(2, 0, 5), x.narrow(2, 5, 9), x.narrow(2, 14, 5)}, valid,
                             0.25, normalisation, offset ? offsets : torch::Tensor());
    EXPECT_TRUE(torch::allclose(in_parts.output, fused.output, 1e-6, 1e-6)) << name;
    EXPECT_TRUE(torch::equal(in_parts.metrics.neighbors_used, fused.metrics.neighbors_used));
  }
  EXPECT_THROW(FusedMassAwareAttend(u, {x.narrow(2, 0, 5)}, valid, 0.25, Maa(1.0)),
               std::invalid_argument);
}

// The module takes the fused core when gradients are off; its output must not change.
TEST(MassAwareAttention, InferenceEqualsTrainingPathWithoutDropout) {
  for (const AttentionNormaliser normaliser :
       {AttentionNormaliser::kMassAware, AttentionNormaliser::kSigmoid,
        AttentionNormaliser::kSink}) {
    torch::manual_seed(12);
    MassAwareAttentionOptions options = TwoHeadOptions(6, 5, 8, 1.5);
    options.normaliser = normaliser;
    MassAwareAttention attention(options);
    for (auto& parameter : attention->parameters()) {
      torch::NoGradGuard no_grad;
      parameter.add_(torch::randn_like(parameter) * 0.3);  // biases and sink logits non-zero
    }
    const torch::Tensor query = torch::randn({30, 6});
    const torch::Tensor neighbors = torch::randn({30, 4, 5});
    const torch::Tensor valid = torch::rand({30, 4}) > 0.4;
    const AttentionOutput with_grad = attention->forward(query, neighbors, valid);
    torch::NoGradGuard no_grad;
    const AttentionOutput fused =
        attention->forward(query, {neighbors.narrow(2, 0, 2), neighbors.narrow(2, 2, 3)}, valid);
    EXPECT_TRUE(torch::allclose(with_grad.output.detach(), fused.output, 1e-5, 1e-6));
    EXPECT_TRUE(torch::allclose(with_grad.metrics.attention_mass, fused.metrics.attention_mass,
                                1e-5, 1e-6));
  }
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

TEST(MassAwareSelfAttention, EveryNormaliserIgnoresPaddedTokensAndHasASinkToTrain) {
  for (const AttentionNormaliser normaliser :
       {AttentionNormaliser::kSigmoid, AttentionNormaliser::kSink}) {
    torch::manual_seed(13);
    MassAwareSelfAttentionOptions options;
    options.model_dim = 4;
    options.heads = 2;
    options.normaliser = normaliser;
    options.dropout = 0.0;
    MassAwareSelfAttention attention(options);
    EXPECT_EQ(attention->named_parameters().contains("sink_logits"),
              normaliser == AttentionNormaliser::kSink);
    const torch::Tensor tokens = torch::randn({1, 4, 4});
    const torch::Tensor valid = torch::tensor({{true, true, false, false}});
    const SelfAttentionOutput base = attention(tokens, valid);
    torch::Tensor other_padding = tokens.clone();
    other_padding.narrow(1, 2, 2).mul_(-50.0);
    const torch::Tensor changed = attention(other_padding, valid).output;
    EXPECT_TRUE(torch::allclose(base.output.narrow(1, 0, 2), changed.narrow(1, 0, 2), 1e-6, 1e-6));
    base.output.square().sum().backward();
    for (const auto& named : attention->named_parameters()) {
      ASSERT_TRUE(named.value().grad().defined()) << named.key();
      EXPECT_TRUE(torch::isfinite(named.value().grad()).all().item<bool>()) << named.key();
    }
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

// Outcome-indexed attention: one query projection per outcome over shared keys and values.
TEST(MassAwareAttention, EachOutcomeHasItsOwnQueryProjection) {
  torch::manual_seed(3);
  MassAwareAttentionOptions options;
  options.query_dim = 6;
  options.neighbor_dim = 5;
  options.model_dim = 4;
  options.heads = 2;
  options.dropout = 0;
  options.outcomes = 2;
  MassAwareAttention attention(options);
  const torch::Tensor query = torch::randn({3, 6});
  const torch::Tensor neighbors = torch::randn({3, 4, 5});
  const torch::Tensor valid = torch::ones({3, 4}, torch::kBool);
  torch::NoGradGuard no_grad;
  const torch::Tensor link = attention->forward(query, {neighbors}, valid, 0).output;
  const torch::Tensor state = attention->forward(query, {neighbors}, valid, 1).output;
  EXPECT_FALSE(torch::allclose(link, state));
  // With outcome 1's query projection copied into outcome 0's, both outcomes attend alike.
  auto parameters = attention->named_parameters();
  parameters["query_projection.weight"].copy_(parameters["query_projection_outcome1.weight"]);
  parameters["query_projection.bias"].copy_(parameters["query_projection_outcome1.bias"]);
  EXPECT_TRUE(torch::allclose(attention->forward(query, {neighbors}, valid, 0).output, state));
  EXPECT_THROW(attention->forward(query, {neighbors}, valid, 2), std::invalid_argument);
  // One outcome keeps the parameter names checkpoints made before outcomes existed.
  options.outcomes = 1;
  const auto names = MassAwareAttention(options)->named_parameters();
  EXPECT_TRUE(names.contains("query_projection.weight"));
  EXPECT_FALSE(names.contains("query_projection_outcome1.weight"));
}

}  // namespace
}  // namespace tlp::model
