#include "model/fused_attention.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tlp::model {
namespace {

// Eight independent partial sums let the compiler use SIMD lanes without -ffast-math.
float Dot(const float* a, const float* b, int64_t n) {
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

void AddScaled(float* out, float scale, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] += scale * x[i];
}

}  // namespace

MassAwareAggregateResult FusedMassAwareAttend(const torch::Tensor& query_in_input_space,
                                              torch::TensorList neighbor_parts,
                                              const torch::Tensor& valid, double score_scale,
                                              double p) {
  if (p < 1.0 || !std::isfinite(p)) throw std::invalid_argument("attention p must be >= 1");
  const torch::Tensor u = query_in_input_space.contiguous();
  const torch::Tensor mask = valid.to(torch::kBool).contiguous();
  const int64_t batch = u.size(0), heads = u.size(1), dim = u.size(2);
  const int64_t slots = neighbor_parts.at(0).size(1);
  // Part j covers columns [offset_j, offset_j + width_j) of the neighbour input.
  struct Part {
    torch::Tensor values;  // [batch, slots, width] contiguous
    const float* data;
    int64_t offset;
    int64_t width;
  };
  std::vector<Part> parts;
  int64_t width_sum = 0;
  for (const torch::Tensor& part : neighbor_parts) {
    torch::Tensor values = part.contiguous();
    if (values.dim() != 3 || values.size(0) != batch || values.size(1) != slots ||
        values.scalar_type() != torch::kFloat32) {
      throw std::invalid_argument("neighbour parts must be float32 [batch, slots, width]");
    }
    const int64_t width = values.size(2);
    parts.push_back({values, values.data_ptr<float>(), width_sum, width});
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
  const float* u_data = u.data_ptr<float>();
  const bool* valid_data = mask.data_ptr<bool>();
  float* out_data = result.output.data_ptr<float>();
  float* ess_data = result.metrics.effective_neighbors.data_ptr<float>();
  float* mass_data = result.metrics.attention_mass.data_ptr<float>();
  float* entropy_data = result.metrics.attention_entropy.data_ptr<float>();
  int64_t* used_data = result.metrics.neighbors_used.data_ptr<int64_t>();

  at::parallel_for(0, batch, 32, [&](int64_t begin, int64_t end) {
    // Per slot: s_k - max s (valid slots), then w_k = exp(of it), 0 on padding.
    std::vector<double> shifted(static_cast<size_t>(slots)), weights(static_cast<size_t>(slots));
    for (int64_t b = begin; b < end; ++b) {
      const bool* is_valid = valid_data + b * slots;
      int64_t used = 0;
      for (int64_t k = 0; k < slots; ++k) used += is_valid[k] ? 1 : 0;
      double ess_sum = 0, mass_sum = 0, entropy_sum = 0;
      for (int64_t h = 0; h < heads && used > 0; ++h) {
        const float* query = u_data + (b * heads + h) * dim;
        float* out = out_data + (b * heads + h) * (dim + 1);
        // w_k = exp(s_k - max s); padding gets 0 (see MassAwareAggregate).
        double maximum = -std::numeric_limits<double>::infinity();
        for (int64_t k = 0; k < slots; ++k) {
          if (!is_valid[k]) continue;
          float score = 0;
          for (const Part& part : parts) {
            score += Dot(query + part.offset, part.data + (b * slots + k) * part.width, part.width);
          }
          shifted[k] = static_cast<double>(score) * score_scale;
          maximum = std::max(maximum, shifted[k]);
        }
        // w^p = exp(p (s - max)) and, with share_k = w_k / sum, log share_k = (s_k - max) - log
        // sum: one exp per slot and head and one log per head instead of a pow and a log per slot
        // (those were ~5 % of a TopK).
        double sum = 0, square_sum = 0, power_sum = 0, shifted_mass = 0;
        for (int64_t k = 0; k < slots; ++k) {
          if (!is_valid[k]) {
            weights[k] = 0;
            continue;
          }
          shifted[k] -= maximum;
          weights[k] = std::exp(shifted[k]);
          sum += weights[k];
          square_sum += weights[k] * weights[k];
          shifted_mass += weights[k] * shifted[k];
          if (p != 1.0) power_sum += std::exp(p * shifted[k]);
        }
        const double norm = p == 1.0 ? sum : std::pow(power_sum, 1.0 / p);
        // -sum_k share_k log share_k = log sum - sum_k share_k (s_k - max)
        const double entropy = std::log(sum) - shifted_mass / sum;
        for (int64_t k = 0; k < slots; ++k) {
          if (weights[k] == 0) continue;
          const auto a = static_cast<float>(weights[k] / norm);
          for (const Part& part : parts) {
            AddScaled(out + part.offset, a, part.data + (b * slots + k) * part.width, part.width);
          }
          out[dim] += a;
        }
        ess_sum += sum * sum / square_sum;
        mass_sum += sum / norm;
        entropy_sum += entropy;
      }
      // Rows without neighbours keep a zero aggregate and zero metrics.
      ess_data[b] = static_cast<float>(ess_sum / static_cast<double>(heads));
      mass_data[b] = static_cast<float>(mass_sum / static_cast<double>(heads));
      entropy_data[b] = static_cast<float>(entropy_sum / static_cast<double>(heads));
      used_data[b] = used;
    }
  });
  return result;
}

}  // namespace tlp::model
