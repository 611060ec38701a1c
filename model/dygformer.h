// DyGFormer (Yu et al., NeurIPS 2023): a link's two endpoints each contribute their own first-hop
// interaction sequence; every token also carries how often its neighbour occurs in either
// sequence (neighbour co-occurrence: the pair evidence), and a transformer over both sequences
// together, normalised by Mass-Aware Attention, yields one representation per endpoint.
//
// The work splits into a pair-independent part, done once per (node, time) however many links
// it joins (EncodeSequences: each token's edge features and time encoding, patched and
// projected), and the per-link part (EncodePairs: co-occurrence, transformer, readout). A TopK
// over 1,000 candidates thus encodes the source's sequence once, but runs the transformer for
// every candidate.
//
// Departures from the reference implementation (DyGLib), each for serving: padded tokens are
// masked (the reference attends to and averages them, so a score depends on its batch-mates);
// the sequence is newest first (only patches of more than one token see the order); the time
// encoding is the fixed cosine one of the other architectures; there are no node features
// (tlpd's events carry edge features only); and a token's channels are projected by one Linear
// (the reference's per-channel Linears are its block-diagonal special case).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <span>
#include <vector>

#include "model/mass_aware_attention.h"
#include "model/neighbor_sampler.h"

namespace tlp::model {

struct DyGFormerOptions {
  int64_t token_dim = 0;          // width of a token's input: edge features + time encoding
  int64_t model_dim = 100;        // width of a patch in the transformer; divisible by heads
  int64_t cooccurrence_dim = 50;  // width of the co-occurrence encoding of one count
  int64_t heads = 2;
  int64_t layers = 2;
  int64_t sequence_length = 32;  // tokens per endpoint: itself, then its most recent interactions
  int64_t patch_size = 1;        // tokens per patch; divides sequence_length
  double p = 1.1;                // MAA exponent; 1 = softmax
  AttentionNormaliser normaliser = AttentionNormaliser::kMassAware;
  double dropout = 0.1;
};

// Endpoints' pair-independent patch encodings.
struct SequencePatches {
  torch::Tensor patches;  // [n, sequence_length / patch_size, model_dim]
  torch::Tensor valid;    // [n, sequence_length / patch_size] bool: holds a real token
};

// Both endpoints' representations of each link, and the attention metrics of each side's
// patches in the last layer (averaged over that side's valid patches; [links] each).
struct PairEncoding {
  torch::Tensor src, dst;  // [links, model_dim]
  AttentionMetrics src_metrics, dst_metrics;
};

// The co-occurrence counts of every token of both sequences of each link. Sequence x of a query
// position is its own key, then its partners in `lists` (SamplePartners with sequence_length - 1
// slots); keys < 0 match nothing but themselves. For link i, side s (0 = source, 1 =
// destination) and token j, counts[((i * 2 + s) * sequence_length + j) * 2 + c] is the number of
// tokens of the same side (c = 0) and of the other side (c = 1) holding the token's key; 0 for
// padding. Resizes *counts.
void CountCooccurrences(const NeighborBlock& lists, std::span<const int64_t> keys,
                        std::span<const int64_t> src_positions,
                        std::span<const int64_t> dst_positions, std::vector<float>* counts);

class DyGFormerImpl : public torch::nn::Module {
 public:
  explicit DyGFormerImpl(const DyGFormerOptions& options);

  const DyGFormerOptions& options() const { return options_; }

  // tokens: [n, sequence_length, token_dim], each endpoint's own token first; valid:
  // [n, sequence_length] bool.
  SequencePatches EncodeSequences(const torch::Tensor& tokens, const torch::Tensor& valid);

  // src, dst: the links' endpoints' patches (rows of EncodeSequences' output); counts:
  // [links, 2, sequence_length, 2] (CountCooccurrences).
  PairEncoding EncodePairs(const SequencePatches& src, const SequencePatches& dst,
                           const torch::Tensor& counts);

 private:
  DyGFormerOptions options_;
  torch::nn::Linear token_projection_{nullptr};          // patch_size * token_dim -> model_dim
  torch::nn::Sequential cooccurrence_encoder_{nullptr};  // 1 -> cooccurrence_dim (2 layers)
  torch::nn::Linear cooccurrence_projection_{
      nullptr};  // patch_size * cooccurrence_dim -> model_dim
  // Pre-LayerNorm transformer layers: x += attention(norm(x)); x += feed_forward(norm(x)).
  std::vector<torch::nn::LayerNorm> attention_norms_, feed_forward_norms_;
  std::vector<MassAwareSelfAttention> attention_;
  std::vector<torch::nn::Sequential> feed_forward_;
  torch::nn::Dropout dropout_{nullptr};
  torch::nn::Linear readout_{nullptr};  // mean of a side's patches -> its representation
};
TORCH_MODULE(DyGFormer);

}  // namespace tlp::model
