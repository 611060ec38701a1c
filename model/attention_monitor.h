// Attention monitor: the energy field and key incoherence of every attention head, as a
// training diagnostic ("On the Invariants of Softmax Attention").
//
// For one head with queries q_i, keys k_j (projected, [*, head_dim]) and score scale c, the
// energy field is the row-centred score matrix
//   E_ij = c q_i . k_j - mean_j' c q_i . k_j'.
// Two invariants hold for every input, whatever the weights: each row of E sums to zero, and
// rank E <= min(head_dim, keys - 1) (E = c Q K^T (I - 11^T / n)). E depends on the keys only
// through the centred keys K - mean(K), so that is where key incoherence is measured: with U
// the left singular vectors of the centred keys (n x r, r their numerical rank), each key's
// leverage is ||U_j||^2 and the coherence is (n / r) max_j ||U_j||^2, from 1 (every key
// carries an equal share of the key space: incoherent) to n / r (one key spans a direction
// alone); with n <= head_dim + 1 keys in general position it is 1 by construction. A head whose
// field rank or key coherence collapses attends along few directions.
//
// Where fields come from: a query-over-neighbours attention (TGN, TGAT) gives each query its own
// neighbours, so its field is pooled: every query of a probe batch against every valid key of
// that batch, one field per head. A self-attention (DyGFormer) gives one field per sequence over
// its valid tokens, summarised per sequence and averaged. GraphMixer's pooling has one learned
// query per head, a field of rank <= 1, and is not monitored.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "model/mass_aware_attention.h"

namespace tlp::model {

// The field and key summary of one head (averaged over sequences for a self-attention).
struct EnergyFieldSummary {
  double queries = 0, keys = 0;  // rows and columns of the field
  double rank = 0;               // numerical rank: singular values above max(m, n) eps sigma_1
  double rank_bound = 0;         // min(head_dim, keys - 1, queries)
  // exp of the entropy of the normalised singular values (Roy and Vetterli 2007): how many
  // directions the field really uses.
  double effective_rank = 0;
  double top_share = 0;  // sigma_1^2 / sum sigma^2
  // The share of the field's energy (squared Frobenius norm) that varies with the query: what is
  // left after subtracting the mean row. Near 0: every query ranks the keys alike.
  double query_share = 0;
  // sigma_i / sigma_1 for the first kSpectrumLength singular values (shorter if fewer).
  std::vector<double> spectrum;
  double row_sum_residual = 0;  // max |row sum| / max |entry|: 0 up to rounding
  double key_coherence = 0;     // (n / r) max leverage of the centred keys, in [1, n / r]
  static constexpr int kSpectrumLength = 8;
};

// The row-centred field of queries [m, d] against keys [n, d] with score scale `scale`,
// computed in float64 so that the invariants hold to double rounding: [m, n].
torch::Tensor EnergyField(const torch::Tensor& queries, const torch::Tensor& keys, double scale);
// The coherence of keys [n, d] as defined above; 1 for n < 2 or keys that are all equal.
double KeyCoherence(const torch::Tensor& keys);
// Both, for one field. queries [m, d], keys [n, d]; m, n >= 1.
EnergyFieldSummary SummariseEnergyField(const torch::Tensor& queries, const torch::Tensor& keys,
                                        double scale);

// What an attention module saw while capturing, appended call by call (detached, on the CPU).
// Neighbour attention: queries [B, H, 1, Dh], keys [B, H, K, Dh]; self-attention: queries and
// keys [B, H, N, Dh]. query_valid [B, Q] and key_valid [B, K] mark real tokens.
struct AttentionCapture {
  bool pooled = true;  // neighbour attention: one field over the whole batch
  double scale = 1;
  std::vector<torch::Tensor> queries, keys, query_valid, key_valid;

  void Append(const torch::Tensor& call_queries, const torch::Tensor& call_keys,
              const torch::Tensor& call_query_valid, const torch::Tensor& call_key_valid);
};

struct HeadMonitor {
  std::string module;  // the attention module's path in the model, e.g. "attention.0"
  int64_t head = 0;
  EnergyFieldSummary field;
};

// The summaries of every head of a capture. Pooled fields use at most `max_keys` keys (the
// first valid ones); self-attention fields at most `max_sequences` sequences with two or more
// valid tokens. Empty when the capture saw no valid key.
std::vector<HeadMonitor> SummariseCapture(const std::string& module,
                                          const AttentionCapture& capture, int64_t max_keys = 2048,
                                          int64_t max_sequences = 64);

// While alive, every attention module of `model` that can capture (CapturingAttention:
// MassAwareAttention, MassAwareSelfAttention) captures what it sees (their forward is otherwise
// unchanged); Summarise() then reports every head. Not thread safe: the model must not be used by
// others meanwhile.
class ScopedAttentionCapture {
 public:
  explicit ScopedAttentionCapture(torch::nn::Module& model);
  ~ScopedAttentionCapture();
  ScopedAttentionCapture(const ScopedAttentionCapture&) = delete;
  ScopedAttentionCapture& operator=(const ScopedAttentionCapture&) = delete;

  std::vector<HeadMonitor> Summarise() const;

 private:
  struct Entry {
    std::string module;
    std::shared_ptr<torch::nn::Module> owner;  // keeps `attention` alive
    CapturingAttention* attention;
    std::unique_ptr<AttentionCapture> capture;
  };
  std::vector<Entry> entries_;
};

}  // namespace tlp::model
