// GraphMixer (Cong et al., ICLR 2023): a node's representation from its K most recent
// interactions alone, each a token [edge features; fixed cosine encoding of its age], mixed by
// MLP-Mixer layers (across tokens, then across channels). Node-wise: the representation never
// depends on the other endpoint, so a TopK embeds each candidate once, and the pair evidence
// of the link predictor (model/pair_evidence.h) is what tells it whether the two met.
//
// Where Mass-Aware Attention enters: the reference averages the K mixed tokens (padding
// included); here a learned query attends over the valid tokens instead, normalised by MAA, so
// p = 1 is softmax pooling and p > 1 keeps how many recent interactions agreed. There are no
// node features (tlpd's events carry edge features only), so the reference's node encoder is
// left out.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "model/mass_aware_attention.h"

namespace tlp::model {

struct GraphMixerOptions {
  int64_t token_dim = 0;    // width of a token's input: edge features + time encoding
  int64_t model_dim = 100;  // channels of the mixed tokens and of the output
  int64_t tokens = 30;      // K: the most recent interactions per node
  int64_t layers = 2;       // mixer layers
  int64_t heads = 2;        // of the pooling attention; divides model_dim
  double p = 1.1;           // MAA exponent of the pooling; 1 = softmax
  AttentionNormaliser normaliser = AttentionNormaliser::kMassAware;  // of the pooling
  double dropout = 0.1;
};

struct GraphMixerOutput {
  torch::Tensor vectors;     // [n, model_dim]
  AttentionMetrics metrics;  // of the pooling, [n] each
};

class GraphMixerImpl : public torch::nn::Module {
 public:
  explicit GraphMixerImpl(const GraphMixerOptions& options);

  // tokens: [n, tokens, token_dim], newest first, zero on padding; valid: [n, tokens] bool.
  GraphMixerOutput forward(const torch::Tensor& tokens, const torch::Tensor& valid);

 private:
  GraphMixerOptions options_;
  torch::nn::Linear token_projection_{nullptr};  // token_dim -> model_dim
  // Per layer: token mixing (LayerNorm over the K tokens of a channel, K -> K/2 -> K), then
  // channel mixing (LayerNorm over channels, model_dim -> 4 model_dim -> model_dim).
  std::vector<torch::nn::LayerNorm> token_norms_, channel_norms_;
  std::vector<torch::nn::Sequential> token_mixing_, channel_mixing_;
  torch::nn::Linear pooling_query_{nullptr};  // model_dim -> heads: a score per token and head
  torch::nn::Linear output_{nullptr};         // pooled -> representation
  torch::Tensor sink_logits_;                 // [heads], kSink only
};
TORCH_MODULE(GraphMixer);

}  // namespace tlp::model
