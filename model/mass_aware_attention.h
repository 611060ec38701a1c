// Mass-Aware Attention (MAA): attention that keeps how much evidence it aggregated.
//
// For scores s_i over the valid neighbours of a query, w_i = exp(s_i - max_j s_j) and
//   out = sum_i w_i v_i / (sum_i w_i^p)^(1/p),  p >= 1.
// p = 1 is softmax exactly. For p > 1 a value repeated n times yields a norm ~ n^(1-1/p), so the
// representation remains aware of the neighbourhood's size. The max subtraction is only for
// numerical stability: numerator and denominator both scale by exp(-max), so the result is
// shift invariant for every p. Padding slots get w = 0; a row without valid slots aggregates to
// exactly zero (a -inf mask alone would give uniform weights and a spurious magnitude).
//
// The other ways out of softmax's sum-to-one, as rows beside MAA (AttentionNormaliser): sigmoid
// attention, a_i = sigmoid(s_i - log n) over a row's n valid keys, each weight on its own
// (Ramapuram et al. 2024), and softmax with an attention sink, a_i = e^{s_i} / (e^{c_h} +
// sum_j e^{s_j}): one more key per head with a learnable logit c_h and a zero value, which can
// take the weight no real key deserves. Neither is shift invariant.
#pragma once

#include <torch/torch.h>

#include <string>

namespace tlp::model {

struct AttentionCapture;  // model/attention_monitor.h

// An attention module that can record what it sees for the attention monitor.
class CapturingAttention {
 public:
  virtual ~CapturingAttention() = default;
  // While `capture` is not null, forward also appends its projected queries and keys there
  // (detached copies); its outputs are unchanged. The caller keeps `capture` alive.
  void set_capture(AttentionCapture* capture) { capture_ = capture; }

 protected:
  AttentionCapture* capture_ = nullptr;
};

enum class AttentionNormaliser { kMassAware, kSigmoid, kSink };

// "maa" (softmax is MAA at p = 1), "sigmoid" or "sink"; throws std::invalid_argument otherwise.
AttentionNormaliser AttentionNormaliserFromName(const std::string& name);

// How a row of scores becomes the weights a_i the values are summed with.
struct Normalisation {
  AttentionNormaliser normaliser = AttentionNormaliser::kMassAware;
  double p = 1.1;             // kMassAware: the exponent (>= 1; 1 = softmax)
  torch::Tensor sink_logits;  // kSink: [heads], the sink key's logit c_h per head
};

// Per-query statistics of the attention weights a (all shaped [batch]; averaged over heads).
struct AttentionMetrics {
  torch::Tensor effective_neighbors;  // Kish ESS (sum a)^2 / sum a^2; 0 for empty rows
  // sum a: MAA sum w / (sum w^p)^(1/p) (1 at p = 1), sink 1 - the sink's share; 0 for empty rows
  torch::Tensor attention_mass;
  torch::Tensor attention_entropy;  // entropy (nats) of a / sum a; 0 for empty rows
  torch::Tensor neighbors_used;     // number of valid slots (int64)
};

struct MassAwareAggregateResult {
  torch::Tensor output;  // [batch, heads, dim]
  AttentionMetrics metrics;
};

// The functional core, exposed for tests and reuse.
//   scores: [batch, heads, slots]; values: [batch, heads, slots, dim], or [batch, 1, slots, dim]
//   for values shared by every head;
//   valid:  [batch, slots] bool (true = a real neighbour).
// Throws std::invalid_argument for p < 1 or a sink without [heads] logits.
MassAwareAggregateResult MassAwareAggregate(const torch::Tensor& scores,
                                            const torch::Tensor& values, const torch::Tensor& valid,
                                            const Normalisation& normalisation);

struct MassAwareAttentionOptions {
  int64_t query_dim = 0;     // width of the query input
  int64_t neighbor_dim = 0;  // width of each neighbour's key/value input
  int64_t model_dim = 100;   // width of the projected queries/keys/values and of the output
  int64_t heads = 2;         // model_dim must be divisible by heads
  double p = 1.1;            // MAA exponent; 1 = softmax
  AttentionNormaliser normaliser = AttentionNormaliser::kMassAware;
  double dropout = 0.1;  // on the aggregate, never on the weights (that would change mass)
  // Query projections: one per outcome the model predicts (outcome-indexed attention), keys and
  // values shared; 1 = one query projection for every outcome.
  int64_t outcomes = 1;
};

struct AttentionOutput {
  torch::Tensor output;  // [batch, model_dim]
  AttentionMetrics metrics;
};

// Multi-head attention of one query over its neighbours, normalised by MAA. No LayerNorm
// follows the aggregate: it would erase the magnitude signal.
//
// Computed in factorised form: the query is mapped into the neighbours' input space
// (W_k^T q) and the weighted sum of raw neighbour inputs is projected once (W_v sum a_j x_j),
// so keys and values are never materialised. Mathematically identical to projecting every
// neighbour: the key bias adds q . b_k to every score of a row, which MAA ignores (it gets no
// gradient) and the sigmoid and sink normalisers get added back; k times cheaper in the
// projections, which dominated scoring.
class MassAwareAttentionImpl : public torch::nn::Module, public CapturingAttention {
 public:
  explicit MassAwareAttentionImpl(const MassAwareAttentionOptions& options);

  // query: [batch, query_dim]; neighbor_parts: [batch, slots, width_j] whose concatenation along
  // the last dimension is the neighbour input [batch, slots, neighbor_dim] (e.g. memory, edge
  // features, time encoding: inference on the CPU reads them in place, training concatenates);
  // valid: [batch, slots]. `outcome` (< options.outcomes) picks the query projection.
  AttentionOutput forward(const torch::Tensor& query, torch::TensorList neighbor_parts,
                          const torch::Tensor& valid, int64_t outcome = 0);

  const MassAwareAttentionOptions& options() const { return options_; }
  // The query projection's weight for `outcome`: [model_dim, query_dim].
  const torch::Tensor& query_weight(int64_t outcome) const;

 private:
  // Appends queries [H, B, Dh] and the keys of neighbor_parts to capture_.
  void Capture(const torch::Tensor& queries, torch::TensorList neighbor_parts,
               const torch::Tensor& valid, double score_scale);

  MassAwareAttentionOptions options_;
  // One per outcome; the first is registered as "query_projection", so checkpoints of models
  // with one outcome load unchanged.
  std::vector<torch::nn::Linear> query_projections_;
  torch::nn::Linear key_projection_{nullptr};
  torch::nn::Linear value_projection_{nullptr};
  torch::nn::Linear output_projection_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::Tensor sink_logits_;  // [heads], kSink only
};
TORCH_MODULE(MassAwareAttention);

struct MassAwareSelfAttentionOptions {
  int64_t model_dim = 100;  // width of the tokens and of the output; divisible by heads
  int64_t heads = 2;
  double p = 1.1;  // MAA exponent; 1 = softmax
  AttentionNormaliser normaliser = AttentionNormaliser::kMassAware;
  double dropout = 0.1;  // on the output, never on the weights (that would change mass)
};

struct SelfAttentionOutput {
  torch::Tensor output;  // [batch, tokens, model_dim]
  // Per query token, [batch, tokens] (averaged over heads); neighbors_used: valid keys, [batch].
  AttentionMetrics metrics;
};

// Multi-head self-attention of a token sequence (DyGFormer's transformer), normalised by MAA
// over the valid keys; packed query/key/value projections as in torch::nn::MultiheadAttention,
// whose softmax cannot be replaced from outside. Padded tokens still get an output (they
// attend), but nothing attends to them.
class MassAwareSelfAttentionImpl : public torch::nn::Module, public CapturingAttention {
 public:
  explicit MassAwareSelfAttentionImpl(const MassAwareSelfAttentionOptions& options);

  // tokens: [batch, tokens, model_dim]; valid: [batch, tokens] bool.
  SelfAttentionOutput forward(const torch::Tensor& tokens, const torch::Tensor& valid);

 private:
  MassAwareSelfAttentionOptions options_;
  torch::nn::Linear input_projection_{nullptr};  // model_dim -> 3 model_dim: [q; k; v]
  torch::nn::Linear output_projection_{nullptr};
  torch::nn::Dropout dropout_{nullptr};
  torch::Tensor sink_logits_;  // [heads], kSink only
};
TORCH_MODULE(MassAwareSelfAttention);

// The sink logits of a module whose attention normalises with `normaliser`: registered on
// `module` (zero, i.e. the sink starts as one more key scoring 0) when kSink, else undefined.
torch::Tensor RegisterSinkLogits(torch::nn::Module& module, AttentionNormaliser normaliser,
                                 int64_t heads);

}  // namespace tlp::model
