// TemporalLinkModel: TGN (memory + temporal attention), TGAT (attention only), GraphMixer (an
// MLP-mixer over each node's recent interactions, model/graph_mixer.h) or DyGFormer (a
// transformer over both endpoints' interaction sequences, model/dygformer.h), with Mass-Aware
// Attention, and an MLP link predictor.
//
// Memory protocol (as in the TGN reference, so the memory updater receives gradients and no
// event leaks into its own score):
//   1. Score(...) embeds nodes with the memory *view*: stored memory, with the messages pending
//      from the previous ApplyEvents() run through the GRU (differentiable).
//   2. ApplyEvents(batch) afterwards commits that view for the pending nodes and turns the new
//      batch's events into the next pending messages (last message per node).
// So scores for batch b see every event of batches < b and none of batch b.
#pragma once

#include <torch/torch.h>

#include <span>
#include <string>

#include "model/dygformer.h"
#include "model/graph_mixer.h"
#include "model/mass_aware_attention.h"
#include "model/neighbor_sampler.h"

namespace tlp::model {

struct ModelConfig {
  // "tgn" (memory + attention), "tgat" (no memory), "graphmixer" (no memory, no attention but
  // its pooling) or "dygformer" (no memory; pair-wise)
  std::string architecture = "tgn";
  int64_t memory_dim = 100;      // node state width (TGAT: width of the zero node input)
  int64_t time_dim = 100;        // time encoding width
  int64_t embedding_dim = 100;   // attention / output embedding width
  int64_t edge_feature_dim = 0;  // 0 for featureless streams
  int64_t heads = 2;
  int64_t layers = 1;        // 1 or 2 attention layers
  int64_t neighbors = 10;    // k most recent neighbours per node (DyGFormer: its sequence)
  double attention_p = 1.1;  // MAA exponent; 1 = softmax
  // How attention scores become weights: "maa" (with attention_p), "sigmoid" or "sink"
  // (model/mass_aware_attention.h).
  std::string attention = "maa";
  double dropout = 0.1;
  // > 0: the predictor also sees pair evidence (model/pair_evidence.h) from each endpoint's
  // this many most recent interactions; 0 = embeddings alone (a plain TGN / TGAT).
  int64_t pair_neighbors = 64;
  // > 0 (with pair evidence): also the walks of up to three hops between the endpoints, through
  // each of the source's distinct partners' this many most recent interactions
  // (model/pair_evidence.h); 0 = none.
  int64_t pair_hop_neighbors = 32;
  int64_t patch_size = 1;  // DyGFormer: tokens per patch; divides neighbors + 1
  // A second outcome beside the link: a node-state head (an MLP on a node's embedding) that
  // predicts the state label events carry (EventBatch::state_labels), trained with the links.
  bool node_state = false;
  // With node_state, how the outcomes share attention: "shared" (one query projection per
  // attention layer; the node state reads the link embeddings) or "indexed" (one query
  // projection per outcome in every attention layer, keys and values shared; tgn and tgat).
  std::string outcome_attention = "shared";

  bool has_memory() const { return architecture == "tgn"; }
  // Query projections per attention layer: 2 for outcome-indexed attention, else 1.
  int64_t attention_outcomes() const {
    return node_state && outcome_attention == "indexed" ? 2 : 1;
  }
  // The endpoints' representations depend on the link, not on each node alone.
  bool pair_wise() const { return architecture == "dygformer"; }
  // One line, stable order; part of the fingerprint.
  std::string ToString() const;
};

// Fixed cosine time encoding phi(dt) = cos(dt * omega + b), omega_i = 10^(-9 i / (d - 1)), as in
// GraphMixer; dt in seconds.
class TimeEncodingImpl : public torch::nn::Module {
 public:
  explicit TimeEncodingImpl(int64_t dim);
  // deltas: [...] (float64 or float32) -> [..., dim] float32
  torch::Tensor forward(const torch::Tensor& deltas);

 private:
  torch::Tensor omega_;
};
TORCH_MODULE(TimeEncoding);

// Two-layer perceptron on the concatenation of two inputs (TGAT's "merge layer").
class MergeMlpImpl : public torch::nn::Module {
 public:
  MergeMlpImpl(int64_t left_dim, int64_t right_dim, int64_t hidden_dim, int64_t output_dim);
  // left: [B, left_dim], right: [B, right_dim] -> [B, output_dim]
  torch::Tensor forward(const torch::Tensor& left, const torch::Tensor& right);

 private:
  torch::nn::Linear hidden_{nullptr};
  torch::nn::Linear output_{nullptr};
};
TORCH_MODULE(MergeMlp);

// Embeddings and last-layer attention metrics of a set of (node, time) queries. A pair-wise
// architecture (DyGFormer) attends per link: its vectors are each query's mean patch encoding (a
// node-wise summary for probes), its effective_neighbors, attention_mass and attention_entropy
// are 0, and PredictLinks reports the real ones per link (LinkEndpointMetrics).
// What a model predicts; an Embed call is for one of them (outcome-indexed attention picks its
// query projections by it).
enum class Outcome : int64_t { kLink = 0, kNodeState = 1 };

struct Embeddings {
  torch::Tensor vectors;  // [n, embedding_dim]
  AttentionMetrics metrics;
  SequencePatches sequences;  // DyGFormer: each query's patches; undefined otherwise
};

// Each link's endpoints' representation metrics, from architectures whose representations
// depend on the link (pair_wise()); [links] each. Left undefined by the others, whose Embed
// metrics describe each endpoint.
struct LinkEndpointMetrics {
  AttentionMetrics src, dst;
  torch::Tensor src_norm, dst_norm;  // L2 norms of the endpoints' representations
};

class TemporalLinkModelImpl : public torch::nn::Module {
 public:
  explicit TemporalLinkModelImpl(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }

  // Embeds nodes[i] at times[i] from history strictly before times[i], for `outcome` (which
  // matters only with outcome-indexed attention). Throws std::invalid_argument when the spans
  // differ in length.
  Embeddings Embed(std::span<const int64_t> nodes, std::span<const double> times,
                   const NeighborSampler& sampler, Outcome outcome = Outcome::kLink);
  // Logits of links between queries of one Embed call: link i joins nodes[src_positions[i]]
  // and nodes[dst_positions[i]] at times[src_positions[i]]; `embedded` is Embed's output for
  // (nodes, times). With pair evidence (config.pair_neighbors > 0) or a pair-wise architecture
  // the endpoints' recent interactions are read from `sampler` too. endpoint_metrics, if not
  // null, receives the per-link metrics of a pair-wise architecture. Returns [links].
  torch::Tensor PredictLinks(const Embeddings& embedded, std::span<const int64_t> nodes,
                             std::span<const double> times, std::span<const int64_t> src_positions,
                             std::span<const int64_t> dst_positions, const NeighborSampler& sampler,
                             LinkEndpointMetrics* endpoint_metrics = nullptr);

  // Node-state logits of an Embed call's queries (Embed with Outcome::kNodeState, or the link
  // embeddings when attention is shared): vectors [n, embedding_dim] -> [n]. Throws
  // std::logic_error when the model has no node-state head (config.node_state).
  torch::Tensor PredictNodeStates(const torch::Tensor& vectors);
  // Frobenius norm of each attention layer's query projection for `outcome` (empty for
  // architectures without temporal attention): what collapses when outcomes share attention.
  std::vector<double> QueryProjectionNorms(Outcome outcome) const;

  // Memory state -----------------------------------------------------------------------------
  // Grows node state to hold indices < node_count (new nodes start at zero memory).
  void EnsureNodes(int64_t node_count);
  // Makes room for `rows` node rows up front, without changing node_count(): growth copies
  // every row (~1 s at a million rows of width 100), which a caller that knows the final count
  // can pay once, where no one waits for it.
  void ReserveNodes(int64_t rows);
  int64_t node_count() const { return node_count_; }
  // Forgets all node memory and pending messages.
  void ResetMemory();
  // Commits pending messages and queues this batch's events as the next ones (see above).
  // features: [events x edge_feature_dim] row-major (empty without edge features). Throws
  // std::invalid_argument when the spans' lengths do not match.
  void ApplyEvents(std::span<const int64_t> src, std::span<const int64_t> dst,
                   std::span<const double> ts, std::span<const float> features);
  // Memory of `nodes` with pending messages applied, detached: [n, memory_dim].
  torch::Tensor MemoryOf(std::span<const int64_t> nodes);

  // Row access for a server that pages node memory in and out of a bounded set of rows (node
  // index = row there): copies of rows' memory into `memory` ([n, memory_dim] row-major, on the
  // CPU) and of their last update times into `last_update` ([n]), written in place so that a
  // checkpoint of ~400k rows needs no second 160 MB buffer; and overwrites of rows. Rows with
  // pending messages must not be overwritten (throws).
  void ReadRows(std::span<const int64_t> rows, std::span<float> memory,
                std::span<double> last_update) const;
  void WriteRows(std::span<const int64_t> rows, const torch::Tensor& memory,
                 const torch::Tensor& last_update);

  // The messages ApplyEvents queued and the next one commits (on the CPU).
  struct PendingMessages {
    torch::Tensor rows;  // [P] int64
    torch::Tensor raw;   // [P, 2 memory_dim + edge_feature_dim] float32
    torch::Tensor ts;    // [P] float64
  };
  PendingMessages SavePending() const;
  // Replaces the pending messages (rows must exist, see EnsureNodes).
  void RestorePending(const PendingMessages& pending);

  // A full copy of the memory state (for evaluation passes that must be rewound).
  struct MemoryState {
    torch::Tensor memory, last_update, pending_nodes, pending_raw, pending_ts;
    int64_t node_count = 0;
  };
  MemoryState SaveMemory() const;
  void RestoreMemory(const MemoryState& state);

  // Switching modes invalidates the inference cache of the pending memory view.
  void train(bool on = true) override;

 private:
  // GRU step of every pending node's message, or undefined when none is pending.
  torch::Tensor PendingUpdate();
  // Sets pending_view_ for one Embed()/MemoryOf() call (from the cache when inferring).
  void PreparePendingView();
  // Ends that call: drops pending_view_ unless it is the inference cache.
  void ReleasePendingView();
  void InvalidatePendingView();
  torch::Tensor MemoryView(const torch::Tensor& nodes);  // differentiable
  torch::Tensor IndexTensor(std::span<const int64_t> nodes) const;
  // nodes and times stay on the host: the sampler reads them there, and on a GPU a device copy
  // of the ids read back would wait for the device at every layer.
  torch::Tensor EmbedLayer(std::span<const int64_t> nodes, std::span<const double> times,
                           int64_t layer, const NeighborSampler& sampler, int64_t query_projection,
                           AttentionMetrics* metrics);
  // The k most recent interactions of each query node as tokens [n, k, F + T]: edge features
  // and the encoded age, zero on padding; *valid [n, k] marks real ones.
  torch::Tensor NeighborTokens(std::span<const int64_t> nodes, std::span<const double> times,
                               const NeighborSampler& sampler, torch::Tensor* valid);
  // GraphMixer's Embed.
  Embeddings EmbedMixed(std::span<const int64_t> nodes, std::span<const double> times,
                        const NeighborSampler& sampler);
  // DyGFormer's Embed: each query's sequence (itself, then its neighbours), patched.
  Embeddings EmbedSequences(std::span<const int64_t> nodes, std::span<const double> times,
                            const NeighborSampler& sampler);
  torch::Device device() const;

  ModelConfig config_;
  TimeEncoding time_encoding_{nullptr};
  torch::nn::GRUCell memory_updater_{nullptr};
  std::vector<MassAwareAttention> attention_;
  std::vector<MergeMlp> merge_;
  MergeMlp predictor_{nullptr};
  torch::nn::Linear pair_encoder_{nullptr};         // pair evidence -> embedding_dim (pair models)
  torch::nn::Sequential node_state_head_{nullptr};  // embedding -> node-state logit
  DyGFormer dygformer_{nullptr};                    // the encoder of architecture "dygformer"
  GraphMixer graph_mixer_{nullptr};                 // the encoder of architecture "graphmixer"

  // Node state: not parameters (derived from the event log, checkpointed by the server).
  int64_t node_count_ = 0;
  torch::Tensor memory_;         // [capacity, memory_dim] float32
  torch::Tensor last_update_;    // [capacity] float64 seconds
  torch::Tensor pending_slot_;   // [capacity] int64: row in pending_* or -1
  torch::Tensor pending_nodes_;  // [P] int64
  torch::Tensor pending_raw_;    // [P, 2 memory_dim + edge_feature_dim] message without time
  torch::Tensor pending_ts_;     // [P] float64
  // GRU output for the pending nodes: computed once per Embed() call while training
  // (differentiable); in inference kept until the pending messages or parameters change, so
  // that many small scoring calls between two ingest chunks pay for the GRU once.
  torch::Tensor pending_view_;
  bool pending_view_cached_ = false;
  // ApplyEvents' scratch (kept to spare allocations per chunk): (node, message position) pairs;
  // per kept message its position, node, other endpoint, event and time.
  std::vector<std::pair<int64_t, int64_t>> message_scratch_;
  std::vector<int64_t> chosen_scratch_, self_scratch_, other_scratch_, event_scratch_;
  std::vector<double> ts_scratch_;
};
TORCH_MODULE(TemporalLinkModel);

}  // namespace tlp::model
