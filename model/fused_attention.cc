#include "model/fused_attention.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <vector>

#include "model/simd_level.h"

namespace tlp::model {
namespace {

// Eight independent partial sums let the compiler use SIMD lanes without -ffast-math; the same
// eight at every SIMD level, so every level sums in the same order.
__attribute__((always_inline)) inline float Dot(const float* __restrict a,
                                                const float* __restrict b, int64_t n) {
  float partial[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int lane = 0; lane < 8; ++lane) partial[lane] += a[i + lane] * b[i + lane];
  }
  float sum = 0;
  for (int lane = 0; lane < 8; ++lane) sum += partial[lane];
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// out and x never overlap (an output row and a neighbour row); saying so lets GCC vectorise
// without a run-time overlap check.
__attribute__((always_inline)) inline void AddScaled(float* __restrict out, float scale,
                                                     const float* __restrict x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += scale * x[i];
}

// Part j covers columns [offset, offset + width) of the neighbour input.
struct Part {
  const float* data;  // [batch, slots, width]
  int64_t offset;
  int64_t width;
};

struct AttendProblem {
  const float* query;  // [batch, heads, dim]
  const bool* valid;   // [batch, slots]
  const std::vector<Part>* parts;
  int64_t heads, dim, slots;
  double score_scale;
  AttentionNormaliser normaliser;
  double p;                    // kMassAware
  const float* sink_logits;    // [heads], kSink
  const float* score_offsets;  // [batch, heads] or null
  float* out;                  // [batch, heads, dim + 1], zero on entry
  float* effective_neighbors;
  float* attention_mass;
  float* attention_entropy;
  int64_t* neighbors_used;
};

// log sigmoid(x), without overflow for either sign.
inline double LogSigmoid(double x) {
  return x < 0 ? x - std::log1p(std::exp(x)) : -std::log1p(std::exp(-x));
}

// Rows [begin, end) of the problem. `log_weights` and `weights` hold `slots` doubles each.
__attribute__((always_inline)) inline void AttendRowsBody(const AttendProblem& problem,
                                                          int64_t begin, int64_t end,
                                                          double* log_weights, double* weights) {
  const int64_t heads = problem.heads, dim = problem.dim, slots = problem.slots;
  const double p = problem.p;
  // sum w^p is MAA's alone; the other normalisers ignore p.
  const bool power = problem.normaliser == AttentionNormaliser::kMassAware && p != 1.0;
  for (int64_t b = begin; b < end; ++b) {
    const bool* is_valid = problem.valid + b * slots;
    int64_t used = 0;
    for (int64_t k = 0; k < slots; ++k) used += is_valid[k] ? 1 : 0;
    double ess_sum = 0, mass_sum = 0, entropy_sum = 0;
    for (int64_t h = 0; h < heads && used > 0; ++h) {
      const float* query = problem.query + (b * heads + h) * dim;
      float* out = problem.out + (b * heads + h) * (dim + 1);
      const double offset =
          problem.score_offsets != nullptr ? problem.score_offsets[b * heads + h] : 0.0;
      double maximum = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < slots; ++k) {
        if (!is_valid[k]) continue;
        float score = 0;
        for (const Part& part : *problem.parts) {
          score += Dot(query + part.offset, part.data + (b * slots + k) * part.width, part.width);
        }
        log_weights[k] = static_cast<double>(score) * problem.score_scale + offset;
        maximum = std::max(maximum, log_weights[k]);
      }
      // Unnormalised weights w_k = exp(log_weights[k]) (padding 0), a_k = w_k / norm, as in
      // MassAwareAggregate: MAA and the sink shift by the maximum (the sink's logit included),
      // sigmoid weights stand alone.
      double shift = maximum, sink_weight = 0;
      if (problem.normaliser == AttentionNormaliser::kSink) {
        shift = std::max(maximum, static_cast<double>(problem.sink_logits[h]));
        sink_weight = std::exp(problem.sink_logits[h] - shift);
      } else if (problem.normaliser == AttentionNormaliser::kSigmoid) {
        shift = std::log(static_cast<double>(used));  // the -log n bias
      }
      // With share_k = w_k / sum, -sum_k share_k log share_k = log sum - sum_k share_k log w_k;
      // w^p = exp(p log w): one exp per slot and head and one log per head instead of a pow and
      // a log per slot (those were ~5 % of a TopK).
      double sum = 0, square_sum = 0, power_sum = 0, log_weight_mass = 0;
      for (int64_t k = 0; k < slots; ++k) {
        if (!is_valid[k]) {
          weights[k] = 0;
          continue;
        }
        log_weights[k] = problem.normaliser == AttentionNormaliser::kSigmoid
                             ? LogSigmoid(log_weights[k] - shift)
                             : log_weights[k] - shift;
        weights[k] = std::exp(log_weights[k]);
        if (weights[k] == 0) continue;  // underflow: no weight, no share of the entropy
        sum += weights[k];
        square_sum += weights[k] * weights[k];
        log_weight_mass += weights[k] * log_weights[k];
        if (power) power_sum += std::exp(p * log_weights[k]);
      }
      if (sum == 0) continue;  // every weight underflowed: a zero aggregate, zero metrics
      double norm = 1.0;
      switch (problem.normaliser) {
        case AttentionNormaliser::kMassAware:
          norm = power ? std::pow(power_sum, 1.0 / p) : sum;
          break;
        case AttentionNormaliser::kSink:
          norm = sum + sink_weight;
          break;
        case AttentionNormaliser::kSigmoid:
          break;
      }
      const double entropy = std::log(sum) - log_weight_mass / sum;
      for (int64_t k = 0; k < slots; ++k) {
        if (weights[k] == 0) continue;
        const auto a = static_cast<float>(weights[k] / norm);
        for (const Part& part : *problem.parts) {
          AddScaled(out + part.offset, a, part.data + (b * slots + k) * part.width, part.width);
        }
        out[dim] += a;
      }
      ess_sum += sum * sum / square_sum;
      mass_sum += sum / norm;
      entropy_sum += entropy;
    }
    // Rows without neighbours keep a zero aggregate and zero metrics.
    problem.effective_neighbors[b] = static_cast<float>(ess_sum / static_cast<double>(heads));
    problem.attention_mass[b] = static_cast<float>(mass_sum / static_cast<double>(heads));
    problem.attention_entropy[b] = static_cast<float>(entropy_sum / static_cast<double>(heads));
    problem.neighbors_used[b] = used;
  }
}

// The body compiled once per SIMD level (model/simd_level.h). Without AVX the dot products
// and weighted sums run 4 floats at a time, which made this ~15 % of a TopK.
__attribute__((target("avx512f"))) void AttendRowsAvx512(const AttendProblem& problem,
                                                         int64_t begin, int64_t end,
                                                         double* log_weights, double* weights) {
  AttendRowsBody(problem, begin, end, log_weights, weights);
}
__attribute__((target("avx2"))) void AttendRowsAvx2(const AttendProblem& problem, int64_t begin,
                                                    int64_t end, double* log_weights,
                                                    double* weights) {
  AttendRowsBody(problem, begin, end, log_weights, weights);
}
void AttendRowsBaseline(const AttendProblem& problem, int64_t begin, int64_t end,
                        double* log_weights, double* weights) {
  AttendRowsBody(problem, begin, end, log_weights, weights);
}

}  // namespace

MassAwareAggregateResult FusedMassAwareAttend(const torch::Tensor& query_in_input_space,
                                              torch::TensorList neighbor_parts,
                                              const torch::Tensor& valid, double score_scale,
                                              const Normalisation& normalisation,
                                              const torch::Tensor& score_offsets) {
  static const auto attend_rows = ForThisCpu(AttendRowsAvx512, AttendRowsAvx2, AttendRowsBaseline);
  const double p = normalisation.p;
  if (normalisation.normaliser == AttentionNormaliser::kMassAware &&
      (p < 1.0 || !std::isfinite(p))) {
    throw std::invalid_argument("attention p must be >= 1");
  }
  const torch::Tensor u = query_in_input_space.contiguous();
  const torch::Tensor mask = valid.to(torch::kBool).contiguous();
  const int64_t batch = u.size(0), heads = u.size(1), dim = u.size(2);
  torch::Tensor sink_logits, offsets;  // contiguous float32 copies the kernel reads
  if (normalisation.normaliser == AttentionNormaliser::kSink) {
    if (!normalisation.sink_logits.defined() || normalisation.sink_logits.numel() != heads) {
      throw std::invalid_argument("a sink needs one logit per head");
    }
    sink_logits = normalisation.sink_logits.detach().to(torch::kFloat32).contiguous();
  }
  if (score_offsets.defined()) {
    if (score_offsets.dim() != 2 || score_offsets.size(0) != batch ||
        score_offsets.size(1) != heads) {
      throw std::invalid_argument("score offsets must be [batch, heads]");
    }
    offsets = score_offsets.detach().to(torch::kFloat32).contiguous();
  }
  const int64_t slots = neighbor_parts.at(0).size(1);
  std::vector<torch::Tensor> contiguous_parts;  // keeps the parts' data alive
  std::vector<Part> parts;
  int64_t width_sum = 0;
  for (const torch::Tensor& part : neighbor_parts) {
    torch::Tensor values = part.contiguous();
    if (values.dim() != 3 || values.size(0) != batch || values.size(1) != slots ||
        values.scalar_type() != torch::kFloat32) {
      throw std::invalid_argument("neighbour parts must be float32 [batch, slots, width]");
    }
    const int64_t width = values.size(2);
    parts.push_back({values.data_ptr<float>(), width_sum, width});
    contiguous_parts.push_back(std::move(values));
    width_sum += width;
  }
  if (width_sum != dim)
    throw std::invalid_argument("neighbour parts do not sum to the query width");
  const auto floats = torch::TensorOptions().dtype(torch::kFloat32);
  MassAwareAggregateResult result;
  result.output = torch::zeros({batch, heads, dim + 1}, floats);
  result.metrics.effective_neighbors = torch::empty({batch}, floats);
  result.metrics.attention_mass = torch::empty({batch}, floats);
  result.metrics.attention_entropy = torch::empty({batch}, floats);
  result.metrics.neighbors_used = torch::empty({batch}, floats.dtype(torch::kInt64));
  const AttendProblem problem{u.data_ptr<float>(),
                              mask.data_ptr<bool>(),
                              &parts,
                              heads,
                              dim,
                              slots,
                              score_scale,
                              normalisation.normaliser,
                              p,
                              sink_logits.defined() ? sink_logits.data_ptr<float>() : nullptr,
                              offsets.defined() ? offsets.data_ptr<float>() : nullptr,
                              result.output.data_ptr<float>(),
                              result.metrics.effective_neighbors.data_ptr<float>(),
                              result.metrics.attention_mass.data_ptr<float>(),
                              result.metrics.attention_entropy.data_ptr<float>(),
                              result.metrics.neighbors_used.data_ptr<int64_t>()};
  at::parallel_for(0, batch, 32, [&](int64_t begin, int64_t end) {
    std::vector<double> log_weights(static_cast<size_t>(slots));
    std::vector<double> weights(static_cast<size_t>(slots));
    attend_rows(problem, begin, end, log_weights.data(), weights.data());
  });
  return result;
}

}  // namespace tlp::model
