#include "model/graph_mixer.h"

#include <stdexcept>
#include <string>

namespace tlp::model {
namespace {

torch::nn::Sequential FeedForward(int64_t width, int64_t hidden, double dropout) {
  return torch::nn::Sequential(torch::nn::Linear(width, hidden), torch::nn::GELU(),
                               torch::nn::Dropout(dropout), torch::nn::Linear(hidden, width),
                               torch::nn::Dropout(dropout));
}

}  // namespace

GraphMixerImpl::GraphMixerImpl(const GraphMixerOptions& options) : options_(options) {
  if (options.tokens < 1) throw std::invalid_argument("GraphMixer: tokens must be >= 1");
  if (options.model_dim % options.heads != 0) {
    throw std::invalid_argument("GraphMixer: model_dim must be divisible by heads");
  }
  const int64_t d = options.model_dim;
  const int64_t k = options.tokens;
  token_projection_ = register_module("token_projection", torch::nn::Linear(options.token_dim, d));
  for (int64_t layer = 0; layer < options.layers; ++layer) {
    const std::string suffix = std::to_string(layer);
    token_norms_.push_back(register_module("token_norm" + suffix,
                                           torch::nn::LayerNorm(torch::nn::LayerNormOptions({k}))));
    token_mixing_.push_back(register_module(
        "token_mixing" + suffix, FeedForward(k, std::max<int64_t>(k / 2, 1), options.dropout)));
    channel_norms_.push_back(register_module(
        "channel_norm" + suffix, torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}))));
    channel_mixing_.push_back(
        register_module("channel_mixing" + suffix, FeedForward(d, 4 * d, options.dropout)));
  }
  pooling_query_ = register_module("pooling_query", torch::nn::Linear(d, options.heads));
  output_ = register_module("output", torch::nn::Linear(d, d));
  sink_logits_ = RegisterSinkLogits(*this, options.normaliser, options.heads);
}

GraphMixerOutput GraphMixerImpl::forward(const torch::Tensor& tokens, const torch::Tensor& valid) {
  const int64_t n = tokens.size(0);
  const int64_t heads = options_.heads;
  torch::Tensor z = token_projection_(tokens);  // [n, K, D]
  for (size_t layer = 0; layer < token_mixing_.size(); ++layer) {
    // Across tokens: each channel's K values, [n, D, K].
    const torch::Tensor across = token_norms_[layer](z.transpose(1, 2));
    z = z + token_mixing_[layer]->forward(across).transpose(1, 2);
    z = z + channel_mixing_[layer]->forward(channel_norms_[layer](z));
  }
  // MAA pooling: per head, scores over the K tokens, values the head's slice of the channels.
  const torch::Tensor scores = pooling_query_(z).transpose(1, 2);  // [n, H, K]
  const torch::Tensor values =
      z.view({n, z.size(1), heads, options_.model_dim / heads}).transpose(1, 2);  // [n, H, K, Dh]
  MassAwareAggregateResult pooled =
      MassAwareAggregate(scores, values, valid, {options_.normaliser, options_.p, sink_logits_});
  GraphMixerOutput result;
  result.vectors = output_(pooled.output.reshape({n, options_.model_dim}));
  result.metrics = std::move(pooled.metrics);
  return result;
}

}  // namespace tlp::model
