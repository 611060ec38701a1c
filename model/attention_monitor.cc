#include "model/attention_monitor.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tlp::model {

namespace {

constexpr double kEpsilon = std::numeric_limits<double>::epsilon();

// Singular values above the numerical-rank tolerance max(m, n) eps sigma_1 (NumPy's default).
int64_t NumericalRank(const torch::Tensor& singular_values, int64_t rows, int64_t columns) {
  if (singular_values.numel() == 0) return 0;
  const double largest = singular_values[0].item<double>();
  if (largest <= 0) return 0;
  const double tolerance = static_cast<double>(std::max(rows, columns)) * kEpsilon * largest;
  return (singular_values > tolerance).sum().item<int64_t>();
}

// Sums the summaries of several fields into `total` (then divided by the count).
void Accumulate(const EnergyFieldSummary& field, EnergyFieldSummary* total) {
  total->queries += field.queries;
  total->keys += field.keys;
  total->rank += field.rank;
  total->rank_bound += field.rank_bound;
  total->effective_rank += field.effective_rank;
  total->top_share += field.top_share;
  total->query_share += field.query_share;
  total->row_sum_residual = std::max(total->row_sum_residual, field.row_sum_residual);
  total->key_coherence += field.key_coherence;
  if (total->spectrum.size() < field.spectrum.size()) total->spectrum.resize(field.spectrum.size());
  for (size_t i = 0; i < field.spectrum.size(); ++i) total->spectrum[i] += field.spectrum[i];
}

EnergyFieldSummary Mean(EnergyFieldSummary total, int64_t count) {
  const double n = static_cast<double>(count);
  for (double* value :
       {&total.queries, &total.keys, &total.rank, &total.rank_bound, &total.effective_rank,
        &total.top_share, &total.query_share, &total.key_coherence}) {
    *value /= n;
  }
  for (double& value : total.spectrum) value /= n;  // a missing sigma_i counts as 0
  return total;
}

}  // namespace

torch::Tensor EnergyField(const torch::Tensor& queries, const torch::Tensor& keys, double scale) {
  const torch::Tensor scores =
      torch::matmul(queries.to(torch::kFloat64), keys.to(torch::kFloat64).t()) * scale;
  return scores - scores.mean(1, /*keepdim=*/true);
}

double KeyCoherence(const torch::Tensor& keys) {
  const int64_t count = keys.size(0);
  if (count < 2) return 1.0;
  const torch::Tensor as_double = keys.to(torch::kFloat64);
  const torch::Tensor centred = as_double - as_double.mean(0, /*keepdim=*/true);
  const auto [u, singular_values, vh] = torch::linalg_svd(centred, /*full_matrices=*/false);
  const int64_t rank = NumericalRank(singular_values, count, keys.size(1));
  if (rank == 0) return 1.0;
  const torch::Tensor leverage = u.narrow(1, 0, rank).square().sum(1);
  return static_cast<double>(count) / static_cast<double>(rank) * leverage.max().item<double>();
}

EnergyFieldSummary SummariseEnergyField(const torch::Tensor& queries, const torch::Tensor& keys,
                                        double scale) {
  const torch::Tensor field = EnergyField(queries, keys, scale);
  const int64_t rows = field.size(0), columns = field.size(1);
  EnergyFieldSummary summary;
  summary.queries = static_cast<double>(rows);
  summary.keys = static_cast<double>(columns);
  summary.rank_bound = static_cast<double>(std::min({queries.size(1), columns - 1, rows}));
  const torch::Tensor singular_values = torch::linalg_svdvals(field);
  summary.rank = static_cast<double>(NumericalRank(singular_values, rows, columns));
  const double largest = singular_values.numel() ? singular_values[0].item<double>() : 0.0;
  if (largest > 0) {
    const torch::Tensor shares = singular_values / singular_values.sum();
    summary.effective_rank =
        std::exp(-(shares * torch::log(shares.clamp_min(1e-300))).sum().item<double>());
    // The field's energy, sum sigma^2 = its squared Frobenius norm: both shares divide by it.
    const double energy = singular_values.square().sum().item<double>();
    summary.top_share = largest * largest / energy;
    const int64_t length =
        std::min<int64_t>(EnergyFieldSummary::kSpectrumLength, singular_values.numel());
    for (int64_t i = 0; i < length; ++i) {
      summary.spectrum.push_back(singular_values[i].item<double>() / largest);
    }
    summary.query_share =
        (field - field.mean(0, /*keepdim=*/true)).square().sum().item<double>() / energy;
    summary.row_sum_residual =
        field.sum(1).abs().max().item<double>() / field.abs().max().item<double>();
  }
  summary.key_coherence = KeyCoherence(keys);
  return summary;
}

void AttentionCapture::Append(const torch::Tensor& call_queries, const torch::Tensor& call_keys,
                              const torch::Tensor& call_query_valid,
                              const torch::Tensor& call_key_valid) {
  queries.push_back(call_queries.detach().to(torch::kCPU, torch::kFloat32));
  keys.push_back(call_keys.detach().to(torch::kCPU, torch::kFloat32));
  query_valid.push_back(call_query_valid.detach().to(torch::kCPU, torch::kBool));
  key_valid.push_back(call_key_valid.detach().to(torch::kCPU, torch::kBool));
}

std::vector<HeadMonitor> SummariseCapture(const std::string& module,
                                          const AttentionCapture& capture, int64_t max_keys,
                                          int64_t max_sequences) {
  std::vector<HeadMonitor> heads;
  if (capture.queries.empty()) return heads;
  // Calls of one module share H, Dh and the token counts, so they concatenate along the batch.
  const torch::Tensor queries = torch::cat(capture.queries);          // [B, H, Q, Dh]
  const torch::Tensor keys = torch::cat(capture.keys);                // [B, H, K, Dh]
  const torch::Tensor query_valid = torch::cat(capture.query_valid);  // [B, Q]
  const torch::Tensor key_valid = torch::cat(capture.key_valid);      // [B, K]
  const int64_t head_count = queries.size(1), head_dim = queries.size(3);
  for (int64_t head = 0; head < head_count; ++head) {
    HeadMonitor monitor{module, head, {}};
    if (capture.pooled) {
      // Every query against the batch's valid keys, the first max_keys of them.
      const torch::Tensor head_queries =
          queries.select(1, head).reshape({-1, head_dim}).index({query_valid.reshape({-1})});
      torch::Tensor head_keys =
          keys.select(1, head).reshape({-1, head_dim}).index({key_valid.reshape({-1})});
      if (head_keys.size(0) == 0 || head_queries.size(0) == 0) continue;
      head_keys = head_keys.narrow(0, 0, std::min(max_keys, head_keys.size(0)));
      monitor.field = SummariseEnergyField(head_queries, head_keys, capture.scale);
    } else {
      EnergyFieldSummary total;
      int64_t fields = 0;
      for (int64_t b = 0; b < queries.size(0) && fields < max_sequences; ++b) {
        const torch::Tensor valid_queries = query_valid[b];
        const torch::Tensor valid_keys = key_valid[b];
        if (valid_keys.sum().item<int64_t>() < 2 || !valid_queries.any().item<bool>()) continue;
        Accumulate(SummariseEnergyField(queries[b][head].index({valid_queries}),
                                        keys[b][head].index({valid_keys}), capture.scale),
                   &total);
        ++fields;
      }
      if (fields == 0) continue;
      monitor.field = Mean(std::move(total), fields);
    }
    heads.push_back(std::move(monitor));
  }
  return heads;
}

ScopedAttentionCapture::ScopedAttentionCapture(torch::nn::Module& model) {
  for (const auto& item : model.named_modules()) {
    auto* attention = dynamic_cast<CapturingAttention*>(item.value().get());
    if (attention == nullptr) continue;
    Entry entry{item.key(), item.value(), attention, std::make_unique<AttentionCapture>()};
    attention->set_capture(entry.capture.get());
    entries_.push_back(std::move(entry));
  }
}

ScopedAttentionCapture::~ScopedAttentionCapture() {
  for (const Entry& entry : entries_) entry.attention->set_capture(nullptr);
}

std::vector<HeadMonitor> ScopedAttentionCapture::Summarise() const {
  std::vector<HeadMonitor> heads;
  for (const Entry& entry : entries_) {
    std::vector<HeadMonitor> module_heads = SummariseCapture(entry.module, *entry.capture);
    heads.insert(heads.end(), std::make_move_iterator(module_heads.begin()),
                 std::make_move_iterator(module_heads.end()));
  }
  return heads;
}

}  // namespace tlp::model
