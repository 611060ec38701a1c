// FusedMassAwareAttend: the factorised core of MassAwareAttention (scores, attention weights,
// weighted sum of raw neighbour inputs, metrics) for inference on the CPU, in one pass per query.
//
// Why by hand: torch runs this core as a concatenation and four passes over
// [queries, heads, slots, input] temporaries (broadcast multiply, sum, weighted multiply, sum).
// They are memory-bound and were half the time of a TopK over 1,000 candidates. Here a query's
// k neighbour rows (k x input floats, resident in L1) are read twice and nothing of that size is
// written. No autograd: MassAwareAttention calls it only with gradients off, on CPU float32,
// and tests/mass_aware_attention_test.cc holds it equal to the differentiable path.
#pragma once

#include <torch/torch.h>

#include "model/mass_aware_attention.h"

namespace tlp::model {

// query_in_input_space: [B, H, D] float32 (W_k^T q per head); neighbor_parts: [B, K, D_j]
// float32 whose concatenation along the last dimension is the neighbour input [B, K, D] (read in
// place: the concatenation is never built); valid: [B, K] bool; score_offsets: [B, H] float32 or
// undefined (none). Scores are (u . x_k) * score_scale + score_offsets[b, h].
// Returns output [B, H, D + 1]: per head sum_k a_k x_k, then sum_k a_k, with a_k the weights of
// MassAwareAggregate under `normalisation`, and the same metrics as MassAwareAggregate.
MassAwareAggregateResult FusedMassAwareAttend(const torch::Tensor& query_in_input_space,
                                              torch::TensorList neighbor_parts,
                                              const torch::Tensor& valid, double score_scale,
                                              const Normalisation& normalisation,
                                              const torch::Tensor& score_offsets = {});

}  // namespace tlp::model
