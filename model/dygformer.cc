#include "model/dygformer.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace tlp::model {

void CountCooccurrences(const NeighborBlock& lists, std::span<const int64_t> keys,
                        std::span<const int64_t> src_positions,
                        std::span<const int64_t> dst_positions, std::vector<float>* counts) {
  if (src_positions.size() != dst_positions.size() ||
      keys.size() != static_cast<size_t>(lists.queries)) {
    throw std::invalid_argument("CountCooccurrences: spans of different lengths");
  }
  const auto length = static_cast<size_t>(lists.slots + 1);
  const auto positions = static_cast<size_t>(lists.queries);
  // Per query position, once however many links it joins: its sequence's keys (padding -1),
  // the same sorted without keys < 0 (for lookups from the other side), and each token's count
  // within its own sequence.
  std::vector<int64_t> sequence(positions * length, -1), sorted;
  std::vector<size_t> sorted_begin(positions + 1, 0);
  std::vector<float> own(positions * length, 0.0f);
  for (size_t q = 0; q < positions; ++q) {
    int64_t* tokens = &sequence[q * length];
    // The own token always counts itself, so only padding keeps an own count of 0.
    tokens[0] = keys[q];
    own[q * length] = 1.0f;
    for (size_t j = 1; j < length; ++j) {
      const size_t cell = q * (length - 1) + j - 1;
      if (!lists.valid[cell]) continue;
      tokens[j] = lists.nodes[cell];
      own[q * length + j] = 1.0f;
    }
    const size_t begin = sorted.size();
    for (size_t j = 0; j < length; ++j) {
      if (tokens[j] >= 0) sorted.push_back(tokens[j]);
    }
    std::sort(sorted.begin() + static_cast<std::ptrdiff_t>(begin), sorted.end());
    sorted_begin[q + 1] = sorted.size();
  }
  auto occurrences = [&](size_t q, int64_t key) {
    if (key < 0) return 0.0f;
    const auto first = sorted.begin() + static_cast<std::ptrdiff_t>(sorted_begin[q]);
    const auto last = sorted.begin() + static_cast<std::ptrdiff_t>(sorted_begin[q + 1]);
    const auto [low, high] = std::equal_range(first, last, key);
    return static_cast<float>(high - low);
  };
  for (size_t q = 0; q < positions; ++q) {
    for (size_t j = 0; j < length; ++j) {
      const int64_t key = sequence[q * length + j];
      if (own[q * length + j] > 0 && key >= 0) own[q * length + j] = occurrences(q, key);
    }
  }

  const size_t links = src_positions.size();
  counts->assign(links * 2 * length * 2, 0.0f);
  for (size_t i = 0; i < links; ++i) {
    const auto src = static_cast<size_t>(src_positions[i]);
    const auto dst = static_cast<size_t>(dst_positions[i]);
    for (size_t side = 0; side < 2; ++side) {
      const size_t q = side == 0 ? src : dst;
      const size_t other = side == 0 ? dst : src;
      float* out = &(*counts)[(i * 2 + side) * length * 2];
      for (size_t j = 0; j < length; ++j) {
        out[2 * j] = own[q * length + j];
        if (out[2 * j] > 0) out[2 * j + 1] = occurrences(other, sequence[q * length + j]);
      }
    }
  }
}

DyGFormerImpl::DyGFormerImpl(const DyGFormerOptions& options) : options_(options) {
  if (options.sequence_length < 1 || options.patch_size < 1 ||
      options.sequence_length % options.patch_size != 0) {
    throw std::invalid_argument("DyGFormer: patch_size " + std::to_string(options.patch_size) +
                                " must divide the sequence length " +
                                std::to_string(options.sequence_length));
  }
  const int64_t d = options.model_dim;
  token_projection_ = register_module("token_projection",
                                      torch::nn::Linear(options.patch_size * options.token_dim, d));
  cooccurrence_encoder_ = register_module(
      "cooccurrence_encoder",
      torch::nn::Sequential(torch::nn::Linear(1, options.cooccurrence_dim), torch::nn::ReLU(),
                            torch::nn::Linear(options.cooccurrence_dim, options.cooccurrence_dim)));
  cooccurrence_projection_ =
      register_module("cooccurrence_projection",
                      torch::nn::Linear(options.patch_size * options.cooccurrence_dim, d));
  for (int64_t layer = 0; layer < options.layers; ++layer) {
    const std::string suffix = std::to_string(layer);
    attention_norms_.push_back(register_module(
        "attention_norm" + suffix, torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}))));
    MassAwareSelfAttentionOptions attention;
    attention.model_dim = d;
    attention.heads = options.heads;
    attention.p = options.p;
    attention.normaliser = options.normaliser;
    attention.dropout = options.dropout;
    attention_.push_back(register_module("attention" + suffix, MassAwareSelfAttention(attention)));
    feed_forward_norms_.push_back(register_module(
        "feed_forward_norm" + suffix, torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}))));
    feed_forward_.push_back(register_module(
        "feed_forward" + suffix,
        torch::nn::Sequential(torch::nn::Linear(d, 4 * d), torch::nn::GELU(),
                              torch::nn::Dropout(options.dropout), torch::nn::Linear(4 * d, d),
                              torch::nn::Dropout(options.dropout))));
  }
  readout_ = register_module("readout", torch::nn::Linear(d, d));
}

SequencePatches DyGFormerImpl::EncodeSequences(const torch::Tensor& tokens,
                                               const torch::Tensor& valid) {
  const int64_t n = tokens.size(0);
  const int64_t patches = options_.sequence_length / options_.patch_size;
  SequencePatches result;
  // Padding tokens enter as zeros, so a patch's encoding depends on its real tokens only.
  const torch::Tensor masked = tokens * valid.unsqueeze(-1).to(tokens.scalar_type());
  result.patches = token_projection_(masked.reshape({n, patches, -1}));
  result.valid = valid.view({n, patches, options_.patch_size}).any(-1);
  return result;
}

PairEncoding DyGFormerImpl::EncodePairs(const SequencePatches& src, const SequencePatches& dst,
                                        const torch::Tensor& counts) {
  const int64_t links = counts.size(0);
  const int64_t length = options_.sequence_length;
  const int64_t patches = length / options_.patch_size;
  // g(own count) + g(other side's count) per token, zero on padding: [links, 2, length, C].
  const torch::Tensor real = counts.select(-1, 0) > 0;  // [links, 2, length]
  const torch::Tensor encoded =
      cooccurrence_encoder_->forward(counts.unsqueeze(-1)).sum(3) * real.unsqueeze(-1);
  const torch::Tensor cooccurrence =
      cooccurrence_projection_(encoded.reshape({links, 2, patches, -1}));
  torch::Tensor x =
      torch::cat({src.patches + cooccurrence.select(1, 0), dst.patches + cooccurrence.select(1, 1)},
                 1);                                                  // [links, 2 patches, D]
  const torch::Tensor valid = torch::cat({src.valid, dst.valid}, 1);  // [links, 2 patches]
  AttentionMetrics last;
  for (size_t layer = 0; layer < attention_.size(); ++layer) {
    SelfAttentionOutput attended = attention_[layer](attention_norms_[layer](x), valid);
    x = x + attended.output;
    x = x + feed_forward_[layer]->forward(feed_forward_norms_[layer](x));
    last = std::move(attended.metrics);
  }
  const torch::Tensor weight = valid.to(x.scalar_type());  // [links, 2 patches]
  auto side = [&](int64_t begin, torch::Tensor* representation, AttentionMetrics* metrics) {
    const torch::Tensor w = weight.narrow(1, begin, patches);
    const torch::Tensor count = w.sum(1).clamp_min(1);
    *representation =
        readout_((x.narrow(1, begin, patches) * w.unsqueeze(-1)).sum(1) / count.unsqueeze(-1));
    torch::NoGradGuard no_grad;
    auto mean = [&](const torch::Tensor& per_patch) {
      return (per_patch.narrow(1, begin, patches) * w).sum(1) / count;
    };
    metrics->effective_neighbors = mean(last.effective_neighbors);
    metrics->attention_mass = mean(last.attention_mass);
    metrics->attention_entropy = mean(last.attention_entropy);
    // Real interactions in the side's sequence (its own token is not one).
    metrics->neighbors_used = real.select(1, begin == 0 ? 0 : 1).sum(-1) - 1;
  };
  PairEncoding result;
  side(0, &result.src, &result.src_metrics);
  side(patches, &result.dst, &result.dst_metrics);
  return result;
}

}  // namespace tlp::model
