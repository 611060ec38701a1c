#include "model/mass_aware_attention.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "model/attention_monitor.h"
#include "model/fused_attention.h"

namespace tlp::model {

namespace {

// The weights a of scores [..., K] over the keys that `key_valid` (broadcastable to scores)
// marks, and their metrics per row [...] (not yet averaged over heads). Scores are [B, H, ...]:
// a sink's logits are per head, dimension 1.
struct NormalisedWeights {
  torch::Tensor scaled;  // a_i; exactly 0 on padding and in empty rows
  torch::Tensor effective_neighbors, attention_mass, attention_entropy;

  // The metrics averaged over the heads (dimension 1), with the valid keys per row.
  AttentionMetrics MeanOverHeads(const torch::Tensor& valid) const {
    return {effective_neighbors.mean(1), attention_mass.mean(1), attention_entropy.mean(1),
            valid.sum(-1)};
  }
};

NormalisedWeights Normalise(const torch::Tensor& scores, const torch::Tensor& key_valid,
                            const Normalisation& normalisation) {
  const double p = normalisation.p;
  const torch::Tensor invalid = key_valid.logical_not();
  constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();
  // a_i = weights_i / denominator, weights exactly 0 on padding.
  torch::Tensor weights, denominator;
  switch (normalisation.normaliser) {
    case AttentionNormaliser::kMassAware: {
      if (p < 1.0 || !std::isfinite(p)) throw std::invalid_argument("attention p must be >= 1");
      const torch::Tensor masked = scores.masked_fill(invalid, kMinusInfinity);
      // The shift cancels between numerator and denominator, so it carries no gradient:
      // detaching it gives the exact gradient and saves the amax backward.
      torch::Tensor shift = std::get<0>(masked.max(-1, /*keepdim=*/true)).detach();
      shift = torch::where(torch::isfinite(shift), shift, torch::zeros_like(shift));
      weights = torch::exp(masked - shift);
      const torch::Tensor weight_sum = weights.sum(-1);
      const torch::Tensor norm_p = p == 1.0 ? weight_sum : weights.pow(p).sum(-1).pow(1.0 / p);
      // Empty rows: every weight is 0; dividing by 1 keeps their aggregate exactly 0.
      denominator = torch::where(weight_sum > 0, norm_p, torch::ones_like(norm_p));
      break;
    }
    case AttentionNormaliser::kSigmoid: {
      // The -log n bias keeps a row's total weight near what softmax gives at initialisation.
      const torch::Tensor count = key_valid.sum(-1, /*keepdim=*/true).clamp_min(1);
      weights = torch::sigmoid(scores - torch::log(count.to(scores.scalar_type())))
                    .masked_fill(invalid, 0.0);
      denominator = torch::ones(weights.sizes().slice(0, weights.dim() - 1), weights.options());
      break;
    }
    case AttentionNormaliser::kSink: {
      const torch::Tensor& logits = normalisation.sink_logits;
      if (!logits.defined() || logits.dim() != 1 || logits.size(0) != scores.size(1)) {
        throw std::invalid_argument("a sink needs one logit per head");
      }
      std::vector<int64_t> shape(static_cast<size_t>(scores.dim()), 1);
      shape[1] = scores.size(1);
      const torch::Tensor sink = logits.to(scores.scalar_type()).view(shape);  // [1, H, 1...]
      const torch::Tensor masked = scores.masked_fill(invalid, kMinusInfinity);
      // Shift by the larger of the row's maximum and the sink: always finite, and it cancels.
      const torch::Tensor shift =
          torch::maximum(std::get<0>(masked.max(-1, /*keepdim=*/true)), sink).detach();
      weights = torch::exp(masked - shift);
      denominator = weights.sum(-1) + torch::exp(sink - shift).squeeze(-1);
      break;
    }
  }
  NormalisedWeights result;
  result.scaled = weights / denominator.unsqueeze(-1);

  torch::NoGradGuard no_grad;  // metrics are reported, never trained on
  const torch::Tensor weight_sum = weights.sum(-1);
  const torch::Tensor has_weight = weight_sum > 0;
  const torch::Tensor safe_sum = torch::where(has_weight, weight_sum, torch::ones_like(weight_sum));
  const torch::Tensor square_sum = weights.square().sum(-1);
  result.effective_neighbors = torch::where(
      has_weight,
      weight_sum.square() / torch::where(has_weight, square_sum, torch::ones_like(square_sum)),
      torch::zeros_like(weight_sum));
  result.attention_mass =
      torch::where(has_weight, weight_sum / denominator, torch::zeros_like(weight_sum));
  const torch::Tensor normalized = weights / safe_sum.unsqueeze(-1);
  result.attention_entropy =
      -(normalized * torch::log(normalized.clamp_min(1e-30))).sum(-1);  // 0 log 0 = 0
  return result;
}

}  // namespace

AttentionNormaliser AttentionNormaliserFromName(const std::string& name) {
  if (name == "maa") return AttentionNormaliser::kMassAware;
  if (name == "sigmoid") return AttentionNormaliser::kSigmoid;
  if (name == "sink") return AttentionNormaliser::kSink;
  throw std::invalid_argument("attention must be 'maa', 'sigmoid' or 'sink', got '" + name + "'");
}

torch::Tensor RegisterSinkLogits(torch::nn::Module& module, AttentionNormaliser normaliser,
                                 int64_t heads) {
  if (normaliser != AttentionNormaliser::kSink) return {};
  return module.register_parameter("sink_logits", torch::zeros({heads}));
}

MassAwareAggregateResult MassAwareAggregate(const torch::Tensor& scores,
                                            const torch::Tensor& values, const torch::Tensor& valid,
                                            const Normalisation& normalisation) {
  const NormalisedWeights weights = Normalise(scores, valid.unsqueeze(1), normalisation);
  MassAwareAggregateResult result;
  // [B, H, K] x [B, K, D] (values shared by the heads) or per head -> [B, H, D]
  result.output = (weights.scaled.unsqueeze(-1) * values).sum(2);
  result.metrics = weights.MeanOverHeads(valid);
  return result;
}

MassAwareSelfAttentionImpl::MassAwareSelfAttentionImpl(const MassAwareSelfAttentionOptions& options)
    : options_(options) {
  if (options.model_dim % options.heads != 0) {
    throw std::invalid_argument("attention model_dim must be divisible by heads");
  }
  input_projection_ = register_module("input_projection",
                                      torch::nn::Linear(options.model_dim, 3 * options.model_dim));
  output_projection_ =
      register_module("output_projection", torch::nn::Linear(options.model_dim, options.model_dim));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
  sink_logits_ = RegisterSinkLogits(*this, options.normaliser, options.heads);
}

SelfAttentionOutput MassAwareSelfAttentionImpl::forward(const torch::Tensor& tokens,
                                                        const torch::Tensor& valid) {
  const int64_t batch = tokens.size(0);
  const int64_t count = tokens.size(1);
  const int64_t heads = options_.heads;
  const int64_t head_dim = options_.model_dim / heads;
  // [B, N, 3D] -> 3 x [B, H, N, Dh]
  const std::vector<torch::Tensor> qkv = input_projection_(tokens)
                                             .view({batch, count, 3, heads, head_dim})
                                             .permute({2, 0, 3, 1, 4})
                                             .unbind(0);
  const torch::Tensor scores =
      torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(head_dim));
  if (capture_ != nullptr) {
    capture_->pooled = false;
    capture_->scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
    capture_->Append(qkv[0], qkv[1], valid, valid);
  }
  const NormalisedWeights weights = Normalise(scores, valid.view({batch, 1, 1, count}),
                                              {options_.normaliser, options_.p, sink_logits_});
  // [B, H, N, N] x [B, H, N, Dh] -> [B, N, D]
  const torch::Tensor mixed = torch::matmul(weights.scaled, qkv[2])
                                  .transpose(1, 2)
                                  .reshape({batch, count, options_.model_dim});
  SelfAttentionOutput result;
  result.output = dropout_(output_projection_(mixed));
  result.metrics = weights.MeanOverHeads(valid);
  return result;
}

MassAwareAttentionImpl::MassAwareAttentionImpl(const MassAwareAttentionOptions& options)
    : options_(options) {
  if (options.model_dim % options.heads != 0) {
    throw std::invalid_argument("attention model_dim must be divisible by heads");
  }
  if (options.outcomes < 1) throw std::invalid_argument("attention outcomes must be >= 1");
  for (int64_t outcome = 0; outcome < options.outcomes; ++outcome) {
    const std::string suffix = outcome == 0 ? "" : "_outcome" + std::to_string(outcome);
    query_projections_.push_back(register_module(
        "query_projection" + suffix, torch::nn::Linear(options.query_dim, options.model_dim)));
  }
  key_projection_ =
      register_module("key_projection", torch::nn::Linear(options.neighbor_dim, options.model_dim));
  value_projection_ = register_module("value_projection",
                                      torch::nn::Linear(options.neighbor_dim, options.model_dim));
  output_projection_ =
      register_module("output_projection", torch::nn::Linear(options.model_dim, options.model_dim));
  dropout_ = register_module("dropout", torch::nn::Dropout(options.dropout));
  sink_logits_ = RegisterSinkLogits(*this, options.normaliser, options.heads);
}

void MassAwareAttentionImpl::Capture(const torch::Tensor& queries, torch::TensorList neighbor_parts,
                                     const torch::Tensor& valid, double score_scale) {
  // The keys forward never materialises, projected here for the monitor only.
  torch::NoGradGuard no_grad;
  const torch::Tensor neighbors =
      neighbor_parts.size() == 1 ? neighbor_parts[0] : torch::cat(neighbor_parts, -1);
  const int64_t batch = neighbors.size(0), slots = neighbors.size(1);
  const int64_t heads = options_.heads, head_dim = options_.model_dim / heads;
  capture_->pooled = true;
  capture_->scale = score_scale;
  capture_->Append(queries.transpose(0, 1).unsqueeze(2),  // [H, B, Dh] -> [B, H, 1, Dh]
                   key_projection_(neighbors).view({batch, slots, heads, head_dim}).transpose(1, 2),
                   torch::ones({batch, 1}, torch::kBool), valid);
}

const torch::Tensor& MassAwareAttentionImpl::query_weight(int64_t outcome) const {
  return query_projections_.at(static_cast<size_t>(outcome))->weight;
}

AttentionOutput MassAwareAttentionImpl::forward(const torch::Tensor& query,
                                                torch::TensorList neighbor_parts,
                                                const torch::Tensor& valid, int64_t outcome) {
  if (outcome < 0 || outcome >= options_.outcomes) {
    throw std::invalid_argument("attention outcome " + std::to_string(outcome) +
                                " out of range (the module has " +
                                std::to_string(options_.outcomes) + ")");
  }
  // Factorised so that no key or value is ever projected (see the header): per head h,
  //   score_j = q_h . (W_k,h x_j + b_k,h) = (W_k,h^T q_h) . x_j + q_h . b_k,h   (the last term
  //   is the same for every j: MAA ignores it, sigmoid and sink attention get it added), and
  //   out_h = sum_j a_j (W_v,h x_j + b_v,h) = W_v,h (sum_j a_j x_j) + (sum_j a_j) b_v,h.
  // So each query projects itself into the neighbour input space once, and its weighted sum of
  // raw inputs is projected once, instead of projecting all `slots` keys and values: about 8x
  // fewer FLOPs at k = 10 and the same result up to float rounding.
  const int64_t batch = query.size(0);
  const int64_t heads = options_.heads;
  const int64_t head_dim = options_.model_dim / heads;
  const int64_t input_dim = options_.neighbor_dim;
  // [H, B, Dh] x [H, Dh, Din] -> [H, B, Din] -> [B, H, Din]
  const torch::Tensor q = query_projections_[static_cast<size_t>(outcome)](query)
                              .view({batch, heads, head_dim})
                              .transpose(0, 1);
  const torch::Tensor key_weight = key_projection_->weight.view({heads, head_dim, input_dim});
  const torch::Tensor query_in_input_space = torch::bmm(q, key_weight).transpose(0, 1);
  const double score_scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  const Normalisation normalisation{options_.normaliser, options_.p, sink_logits_};
  // [H, B, Dh] . [H, 1, Dh] -> [B, H]: the key bias's share of each row's scores.
  torch::Tensor score_offsets;
  if (options_.normaliser != AttentionNormaliser::kMassAware) {
    score_offsets = (q * key_projection_->bias.view({heads, 1, head_dim})).sum(-1).transpose(0, 1) *
                    score_scale;
  }
  if (capture_ != nullptr) Capture(q, neighbor_parts, valid, score_scale);
  MassAwareAggregateResult aggregate;
  const torch::Tensor& first_part = neighbor_parts.at(0);
  if (!torch::GradMode::is_enabled() && first_part.is_cpu() &&
      first_part.scalar_type() == torch::kFloat32) {
    aggregate = FusedMassAwareAttend(query_in_input_space, neighbor_parts, valid, score_scale,
                                     normalisation, score_offsets);
  } else {
    const torch::Tensor neighbors =
        neighbor_parts.size() == 1 ? neighbor_parts[0] : torch::cat(neighbor_parts, -1);
    // [B, H, Din] x [B, Din, K] -> scores [B, H, K]
    torch::Tensor scores =
        (query_in_input_space.unsqueeze(2) * neighbors.unsqueeze(1)).sum(-1) * score_scale;
    if (score_offsets.defined()) scores = scores + score_offsets.unsqueeze(-1);
    // Values shared by every head: [B, 1, K, Din + 1]; the ones column sums the weights a_j.
    const torch::Tensor values =
        torch::cat({neighbors, torch::ones({batch, neighbors.size(1), 1}, neighbors.options())}, -1)
            .unsqueeze(1);
    aggregate = MassAwareAggregate(scores, values, valid, normalisation);
  }
  // [H, B, Din] x [H, Din, Dh] -> [H, B, Dh], plus (sum a) b_v -> [B, H, Dh]
  const torch::Tensor mixed = aggregate.output.narrow(-1, 0, input_dim).transpose(0, 1);
  const torch::Tensor weight_sums = aggregate.output.narrow(-1, input_dim, 1);  // [B, H, 1]
  const torch::Tensor value_weight =
      value_projection_->weight.view({heads, head_dim, input_dim}).transpose(1, 2);
  const torch::Tensor per_head = torch::bmm(mixed, value_weight).transpose(0, 1) +
                                 weight_sums * value_projection_->bias.view({1, heads, head_dim});
  AttentionOutput result;
  result.output = dropout_(output_projection_(per_head.reshape({batch, options_.model_dim})));
  result.metrics = std::move(aggregate.metrics);
  return result;
}

}  // namespace tlp::model
