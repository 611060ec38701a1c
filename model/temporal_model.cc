#include "model/temporal_model.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "common/huge_pages.h"
#include "model/pair_evidence.h"
#include "model/time_encoding_kernel.h"

namespace tlp::model {
namespace {

// `table` ([rows, ...]) grown to `rows` rows, the new ones set to `fill`. On the CPU the copy
// sits in memory advised for huge pages before anything touches it: node rows are read and
// written at random (common/huge_pages.h).
torch::Tensor GrownTable(const torch::Tensor& table, int64_t rows, double fill) {
  std::vector<int64_t> sizes = table.sizes().vec();
  sizes[0] = rows;
  torch::Tensor grown = torch::empty(sizes, table.options());
  if (grown.is_cpu()) AdviseHugePages(grown.data_ptr(), grown.nbytes());
  const int64_t kept = table.size(0);
  grown.narrow(0, 0, kept).copy_(table);
  grown.narrow(0, kept, rows - kept).fill_(fill);
  return grown;
}

}  // namespace

std::string ModelConfig::ToString() const {
  std::ostringstream out;
  out << "architecture=" << architecture << " memory_dim=" << memory_dim << " time_dim=" << time_dim
      << " embedding_dim=" << embedding_dim << " edge_feature_dim=" << edge_feature_dim
      << " heads=" << heads << " layers=" << layers << " neighbors=" << neighbors
      << " attention_p=" << attention_p << " dropout=" << dropout;
  // Only when set, so that the fingerprints of models without it stay what they were.
  if (pair_neighbors > 0) out << " pair_neighbors=" << pair_neighbors;
  if (pair_neighbors > 0 && pair_hop_neighbors > 0) {
    out << " pair_hop_neighbors=" << pair_hop_neighbors;
  }
  if (pair_wise()) out << " patch_size=" << patch_size;
  if (attention != "maa") out << " attention=" << attention;
  if (node_state) out << " node_state=1 outcome_attention=" << outcome_attention;
  return out.str();
}

TimeEncodingImpl::TimeEncodingImpl(int64_t dim) {
  const torch::Tensor exponents = torch::arange(dim, torch::kFloat64) *
                                  (-9.0 / static_cast<double>(std::max<int64_t>(dim - 1, 1)));
  omega_ = register_buffer("omega", torch::pow(10.0, exponents));
}

torch::Tensor TimeEncodingImpl::forward(const torch::Tensor& deltas) {
  if (!deltas.is_cpu()) {
    // In float64 so that deltas of ~1e9 s keep their low digits before the cosine.
    return torch::cos(deltas.to(torch::kFloat64).unsqueeze(-1) * omega_).to(torch::kFloat32);
  }
  // The same in one pass (time_encoding_kernel.h); omega_ has no gradient, so neither does this.
  const torch::Tensor input = deltas.to(torch::kFloat64).contiguous();
  const torch::Tensor omega = omega_.contiguous();
  std::vector<int64_t> shape = input.sizes().vec();
  shape.push_back(omega.size(0));
  torch::Tensor encoded = torch::empty(shape, torch::TensorOptions().dtype(torch::kFloat32));
  EncodeTimeDeltas(input.data_ptr<double>(), input.numel(), omega.data_ptr<double>(), omega.size(0),
                   encoded.data_ptr<float>());
  return encoded;
}

MergeMlpImpl::MergeMlpImpl(int64_t left_dim, int64_t right_dim, int64_t hidden_dim,
                           int64_t output_dim) {
  hidden_ = register_module("hidden", torch::nn::Linear(left_dim + right_dim, hidden_dim));
  output_ = register_module("output", torch::nn::Linear(hidden_dim, output_dim));
}

torch::Tensor MergeMlpImpl::forward(const torch::Tensor& left, const torch::Tensor& right) {
  return output_(torch::relu(hidden_(torch::cat({left, right}, -1))));
}

TemporalLinkModelImpl::TemporalLinkModelImpl(const ModelConfig& config) : config_(config) {
  if (config.architecture != "tgn" && config.architecture != "tgat" &&
      config.architecture != "graphmixer" && config.architecture != "dygformer") {
    throw std::invalid_argument(
        "architecture must be 'tgn', 'tgat', 'graphmixer' or 'dygformer', got '" +
        config.architecture + "'");
  }
  if (config.layers < 1 || config.layers > 2) throw std::invalid_argument("layers must be 1 or 2");
  const AttentionNormaliser normaliser = AttentionNormaliserFromName(config.attention);
  if (config.neighbors < 1) throw std::invalid_argument("neighbors must be >= 1");
  time_encoding_ = register_module("time_encoding", TimeEncoding(config.time_dim));
  if (config.has_memory()) {
    const int64_t message_dim = 2 * config.memory_dim + config.edge_feature_dim + config.time_dim;
    memory_updater_ =
        register_module("memory_updater", torch::nn::GRUCell(message_dim, config.memory_dim));
  }
  if (config.pair_wise()) {
    DyGFormerOptions options;
    options.token_dim = config.edge_feature_dim + config.time_dim;
    options.model_dim = config.embedding_dim;
    options.cooccurrence_dim = std::max<int64_t>(config.embedding_dim / 2, 1);
    options.heads = config.heads;
    options.layers = config.layers;
    options.sequence_length = config.neighbors + 1;
    options.patch_size = config.patch_size;
    options.p = config.attention_p;
    options.normaliser = normaliser;
    options.dropout = config.dropout;
    dygformer_ = register_module("dygformer", DyGFormer(options));
  } else if (config.architecture == "graphmixer") {
    GraphMixerOptions options;
    options.token_dim = config.edge_feature_dim + config.time_dim;
    options.model_dim = config.embedding_dim;
    options.tokens = config.neighbors;
    options.layers = config.layers;
    options.heads = config.heads;
    options.p = config.attention_p;
    options.normaliser = normaliser;
    options.dropout = config.dropout;
    graph_mixer_ = register_module("graph_mixer", GraphMixer(options));
  }
  const bool attends = config.architecture == "tgn" || config.architecture == "tgat";
  if (config.outcome_attention != "shared" && config.outcome_attention != "indexed") {
    throw std::invalid_argument("outcome_attention must be 'shared' or 'indexed', got '" +
                                config.outcome_attention + "'");
  }
  if (config.attention_outcomes() > 1 && !attends) {
    throw std::invalid_argument(
        "outcome-indexed attention needs an architecture with temporal attention (tgn or tgat), "
        "got '" +
        config.architecture + "'");
  }
  for (int64_t layer = 0; attends && layer < config.layers; ++layer) {
    const int64_t input_dim = layer == 0 ? config.memory_dim : config.embedding_dim;
    MassAwareAttentionOptions options;
    options.query_dim = input_dim + config.time_dim;
    options.neighbor_dim = input_dim + config.edge_feature_dim + config.time_dim;
    options.model_dim = config.embedding_dim;
    options.heads = config.heads;
    options.p = config.attention_p;
    options.normaliser = normaliser;
    options.dropout = config.dropout;
    options.outcomes = config.attention_outcomes();
    attention_.push_back(
        register_module("attention" + std::to_string(layer), MassAwareAttention(options)));
    merge_.push_back(register_module(
        "merge" + std::to_string(layer),
        MergeMlp(config.embedding_dim, input_dim, config.embedding_dim, config.embedding_dim)));
  }
  if (config.pair_neighbors < 0) throw std::invalid_argument("pair_neighbors must be >= 0");
  if (config.pair_hop_neighbors < 0) {
    throw std::invalid_argument("pair_hop_neighbors must be >= 0");
  }
  // With pair evidence the destination side carries it: [z_dst, relu(W f)].
  const int64_t right_dim = config.embedding_dim * (config.pair_neighbors > 0 ? 2 : 1);
  if (config.pair_neighbors > 0) {
    pair_encoder_ = register_module(
        "pair_encoder",
        torch::nn::Linear(PairFeatureCount(config.pair_hop_neighbors), config.embedding_dim));
  }
  predictor_ = register_module("predictor",
                               MergeMlp(config.embedding_dim, right_dim, config.embedding_dim, 1));
  if (config.node_state) {
    node_state_head_ = register_module(
        "node_state_head",
        torch::nn::Sequential(torch::nn::Linear(config.embedding_dim, config.embedding_dim),
                              torch::nn::ReLU(), torch::nn::Dropout(config.dropout),
                              torch::nn::Linear(config.embedding_dim, 1)));
  }
  ResetMemory();
}

torch::Tensor TemporalLinkModelImpl::PredictNodeStates(const torch::Tensor& vectors) {
  if (!node_state_head_) throw std::logic_error("the model has no node-state head");
  return node_state_head_->forward(vectors).squeeze(-1);
}

std::vector<double> TemporalLinkModelImpl::QueryProjectionNorms(Outcome outcome) const {
  const auto index = std::min(static_cast<int64_t>(outcome), config_.attention_outcomes() - 1);
  std::vector<double> norms;
  for (const MassAwareAttention& attention : attention_) {
    norms.push_back(attention->query_weight(index).norm().item<double>());
  }
  return norms;
}

torch::Tensor TemporalLinkModelImpl::IndexTensor(std::span<const int64_t> nodes) const {
  return torch::from_blob(const_cast<int64_t*>(nodes.data()), {static_cast<int64_t>(nodes.size())},
                          torch::kInt64)
      .to(device(), /*non_blocking=*/false, /*copy=*/true);
}

torch::Device TemporalLinkModelImpl::device() const {
  return time_encoding_->buffers()[0].device();
}

void TemporalLinkModelImpl::ResetMemory() {
  InvalidatePendingView();
  const auto options = torch::TensorOptions().device(device());
  const int64_t capacity = std::max<int64_t>(node_count_, 1);
  memory_ = torch::zeros({capacity, config_.memory_dim}, options.dtype(torch::kFloat32));
  last_update_ = torch::zeros({capacity}, options.dtype(torch::kFloat64));
  pending_slot_ = torch::full({capacity}, -1, options.dtype(torch::kInt64));
  pending_nodes_ = torch::zeros({0}, options.dtype(torch::kInt64));
  pending_raw_ = torch::zeros({0, 2 * config_.memory_dim + config_.edge_feature_dim},
                              options.dtype(torch::kFloat32));
  pending_ts_ = torch::zeros({0}, options.dtype(torch::kFloat64));
}

void TemporalLinkModelImpl::EnsureNodes(int64_t node_count) {
  if (node_count <= node_count_) return;
  node_count_ = node_count;
  const int64_t capacity = memory_.size(0);
  if (node_count <= capacity) return;
  // Geometric growth keeps the amortised cost of streaming in new nodes constant. A factor of
  // 1.25 rather than 2: the rows are zero-filled, so resident, and at millions of nodes spare
  // capacity is most of the daemon's RSS (up to 2x the node memory with doubling, 1.25x here);
  // the extra copies cost ~4x the final size in memcpy over the whole stream.
  const int64_t grown = std::max(node_count, capacity + capacity / 4);
  memory_ = GrownTable(memory_, grown, 0);
  last_update_ = GrownTable(last_update_, grown, 0);
  pending_slot_ = GrownTable(pending_slot_, grown, -1);
}

void TemporalLinkModelImpl::ReserveNodes(int64_t rows) {
  if (rows <= memory_.size(0)) return;
  memory_ = GrownTable(memory_, rows, 0);
  last_update_ = GrownTable(last_update_, rows, 0);
  pending_slot_ = GrownTable(pending_slot_, rows, -1);
}

torch::Tensor TemporalLinkModelImpl::PendingUpdate() {
  if (pending_nodes_.size(0) == 0) return torch::Tensor();
  // Message = [s_self, s_other, e, phi(t - last_update_self)], then one GRU step.
  const torch::Tensor deltas = pending_ts_ - last_update_.index_select(0, pending_nodes_);
  const torch::Tensor messages = torch::cat({pending_raw_, time_encoding_(deltas)}, -1);
  return memory_updater_(messages, memory_.index_select(0, pending_nodes_));
}

void TemporalLinkModelImpl::PreparePendingView() {
  const bool inference = !is_training() && !torch::GradMode::is_enabled();
  if (inference && pending_view_cached_) return;
  pending_view_ = PendingUpdate();
  pending_view_cached_ = inference;
}

void TemporalLinkModelImpl::ReleasePendingView() {
  if (!pending_view_cached_) pending_view_ = torch::Tensor();
}

void TemporalLinkModelImpl::InvalidatePendingView() {
  pending_view_cached_ = false;
  pending_view_ = torch::Tensor();
}

void TemporalLinkModelImpl::train(bool on) {
  torch::nn::Module::train(on);
  InvalidatePendingView();
}

torch::Tensor TemporalLinkModelImpl::MemoryView(const torch::Tensor& nodes) {
  torch::Tensor stored = memory_.index_select(0, nodes);  // a fresh tensor: written in place below
  if (!pending_view_.defined() || pending_nodes_.size(0) == 0) return stored;
  const torch::Tensor slots = pending_slot_.index_select(0, nodes);
  if (stored.is_cpu()) {
    // Few rows have a pending message (at most two per event of the last batch), so on the CPU
    // only those are gathered and overwritten. The masked `where` below gathers an updated row
    // for every node and blends [nodes, memory_dim] twice: ~10 % of a 1,000-candidate TopK.
    // On a GPU, `nonzero` would wait for the device; there the blend stays.
    const torch::Tensor positions = (slots >= 0).nonzero().squeeze(1);
    return stored.index_copy_(0, positions,
                              pending_view_.index_select(0, slots.index_select(0, positions)));
  }
  const torch::Tensor has_pending = (slots >= 0).unsqueeze(-1);
  const torch::Tensor updated = pending_view_.index_select(0, slots.clamp_min(0));
  return torch::where(has_pending, updated, stored);
}

torch::Tensor TemporalLinkModelImpl::MemoryOf(std::span<const int64_t> nodes) {
  torch::NoGradGuard no_grad;
  const torch::Tensor index = IndexTensor(nodes);
  if (!config_.has_memory()) return torch::zeros({index.size(0), config_.memory_dim});
  PreparePendingView();
  torch::Tensor result = MemoryView(index);
  ReleasePendingView();
  return result.cpu();
}

torch::Tensor TemporalLinkModelImpl::EmbedLayer(std::span<const int64_t> nodes,
                                                std::span<const double> times, int64_t layer,
                                                const NeighborSampler& sampler,
                                                int64_t query_projection,
                                                AttentionMetrics* metrics) {
  const auto float_options = torch::TensorOptions().dtype(torch::kFloat32).device(device());
  const auto count = static_cast<int64_t>(nodes.size());
  if (layer == 0) {
    if (config_.has_memory()) return MemoryView(IndexTensor(nodes));
    return torch::zeros({count, config_.memory_dim}, float_options);
  }
  const int64_t k = config_.neighbors;
  const torch::Tensor self =
      EmbedLayer(nodes, times, layer - 1, sampler, query_projection, nullptr);

  NeighborBlock block;
  sampler.Sample(nodes, times, k, &block);
  const torch::Tensor neighbor_embeddings =
      EmbedLayer(block.nodes, block.ts, layer - 1, sampler, query_projection, nullptr)
          .view({count, k, -1});
  const torch::Tensor neighbor_ts =
      torch::from_blob(block.ts.data(), {count, k}, torch::kFloat64).to(device());
  const torch::Tensor query_ts =
      torch::from_blob(const_cast<double*>(times.data()), {count, 1}, torch::kFloat64).to(device());
  const torch::Tensor valid =
      torch::from_blob(block.valid.data(), {count, k}, torch::kUInt8).to(device()).to(torch::kBool);

  std::vector<torch::Tensor> neighbor_parts = {neighbor_embeddings};
  if (config_.edge_feature_dim > 0) {
    if (static_cast<int64_t>(block.feature_dim) != config_.edge_feature_dim) {
      throw std::invalid_argument("neighbour features have width " +
                                  std::to_string(block.feature_dim) + ", model expects " +
                                  std::to_string(config_.edge_feature_dim));
    }
    neighbor_parts.push_back(torch::from_blob(block.features.data(),
                                              {count, k, config_.edge_feature_dim}, torch::kFloat32)
                                 .to(device()));
  }
  neighbor_parts.push_back(time_encoding_(query_ts - neighbor_ts));
  // The query's own time offset is 0, and phi(0) = cos(0) = 1 in every dimension.
  const torch::Tensor query =
      torch::cat({self, torch::ones({count, config_.time_dim}, float_options)}, -1);

  AttentionOutput attended = attention_[layer - 1](query, neighbor_parts, valid, query_projection);
  if (metrics != nullptr) *metrics = attended.metrics;
  return merge_[layer - 1](attended.output, self);
}

Embeddings TemporalLinkModelImpl::Embed(std::span<const int64_t> nodes,
                                        std::span<const double> times,
                                        const NeighborSampler& sampler, Outcome outcome) {
  if (times.size() != nodes.size()) {
    throw std::invalid_argument("Embed: " + std::to_string(nodes.size()) + " nodes but " +
                                std::to_string(times.size()) + " times");
  }
  if (config_.pair_wise()) return EmbedSequences(nodes, times, sampler);
  if (config_.architecture == "graphmixer") return EmbedMixed(nodes, times, sampler);
  if (config_.has_memory()) PreparePendingView();
  // Queries are independent, so large calls run in slices: the attention's temporaries grow
  // with the slice ([queries, heads, k, input] floats). On the CPU, past ~64 MB each pass would
  // get fresh pages from the kernel again (see common/allocator_tuning.h): 20,000 pairs at once
  // ran at half the rate of 2,000. On a GPU the caching allocator keeps its blocks, and each
  // slice costs ~1.4 ms of launches and copies whatever its size (H200, bench/gpu.sh), so
  // slices there are 8x larger (~0.5 GB of temporaries each).
  const size_t slice = device().is_cuda() ? 16384 : 2048;
  const int64_t query_projection =
      std::min(static_cast<int64_t>(outcome), config_.attention_outcomes() - 1);
  std::vector<torch::Tensor> vectors, ess, mass, entropy, used;
  size_t begin = 0;
  do {  // at least once: an empty call still gets empty tensors of the right shapes
    const size_t size = std::min(slice, nodes.size() - begin);
    AttentionMetrics metrics;
    vectors.push_back(EmbedLayer(nodes.subspan(begin, size), times.subspan(begin, size),
                                 config_.layers, sampler, query_projection, &metrics));
    ess.push_back(metrics.effective_neighbors);
    mass.push_back(metrics.attention_mass);
    entropy.push_back(metrics.attention_entropy);
    used.push_back(metrics.neighbors_used);
    begin += slice;
  } while (begin < nodes.size());
  ReleasePendingView();
  Embeddings result;
  if (vectors.size() == 1) {
    result.vectors = vectors[0];
    result.metrics = {ess[0], mass[0], entropy[0], used[0]};
  } else {
    result.vectors = torch::cat(vectors);
    result.metrics = {torch::cat(ess), torch::cat(mass), torch::cat(entropy), torch::cat(used)};
  }
  return result;
}

torch::Tensor TemporalLinkModelImpl::NeighborTokens(std::span<const int64_t> nodes,
                                                    std::span<const double> times,
                                                    const NeighborSampler& sampler,
                                                    torch::Tensor* valid) {
  const auto count = static_cast<int64_t>(nodes.size());
  const int64_t k = config_.neighbors;
  const int64_t feature_dim = config_.edge_feature_dim;
  NeighborBlock block;
  sampler.Sample(nodes, times, k, &block);
  const torch::Tensor neighbor_ts =
      torch::from_blob(block.ts.data(), {count, k}, torch::kFloat64).to(device());
  const torch::Tensor query_ts =
      torch::from_blob(const_cast<double*>(times.data()), {count, 1}, torch::kFloat64).to(device());
  *valid =
      torch::from_blob(block.valid.data(), {count, k}, torch::kUInt8).to(device()).to(torch::kBool);
  std::vector<torch::Tensor> parts = {time_encoding_(query_ts - neighbor_ts)};
  if (feature_dim > 0) {
    if (static_cast<int64_t>(block.feature_dim) != feature_dim) {
      throw std::invalid_argument("neighbour features have width " +
                                  std::to_string(block.feature_dim) + ", model expects " +
                                  std::to_string(feature_dim));
    }
    parts.insert(parts.begin(),
                 torch::from_blob(block.features.data(), {count, k, feature_dim}, torch::kFloat32)
                     .to(device()));
  }
  return torch::cat(parts, -1) * valid->unsqueeze(-1).to(torch::kFloat32);
}

Embeddings TemporalLinkModelImpl::EmbedMixed(std::span<const int64_t> nodes,
                                             std::span<const double> times,
                                             const NeighborSampler& sampler) {
  torch::Tensor valid;
  const torch::Tensor tokens = NeighborTokens(nodes, times, sampler, &valid);
  GraphMixerOutput mixed = graph_mixer_(tokens, valid);
  Embeddings result;
  result.vectors = std::move(mixed.vectors);
  result.metrics = std::move(mixed.metrics);
  return result;
}

Embeddings TemporalLinkModelImpl::EmbedSequences(std::span<const int64_t> nodes,
                                                 std::span<const double> times,
                                                 const NeighborSampler& sampler) {
  const auto count = static_cast<int64_t>(nodes.size());
  torch::Tensor neighbor_valid;
  const torch::Tensor neighbors = NeighborTokens(nodes, times, sampler, &neighbor_valid);
  // The node's own token first: no edge (zero features), time offset 0 (phi(0) = 1).
  const auto float_options = torch::TensorOptions().dtype(torch::kFloat32).device(device());
  torch::Tensor own = torch::zeros({count, 1, neighbors.size(2)}, float_options);
  own.narrow(2, config_.edge_feature_dim, config_.time_dim).fill_(1.0f);
  const torch::Tensor tokens = torch::cat({own, neighbors}, 1);
  const torch::Tensor valid =
      torch::cat({torch::ones({count, 1}, float_options.dtype(torch::kBool)), neighbor_valid}, 1);
  Embeddings result;
  result.sequences = dygformer_->EncodeSequences(tokens, valid);
  const torch::Tensor weight = result.sequences.valid.to(torch::kFloat32).unsqueeze(-1);
  result.vectors = (result.sequences.patches * weight).sum(1) / weight.sum(1).clamp_min(1);
  const torch::Tensor zeros = torch::zeros({count}, float_options);
  result.metrics = {zeros, zeros, zeros, neighbor_valid.sum(-1)};
  return result;
}

torch::Tensor TemporalLinkModelImpl::PredictLinks(
    const Embeddings& embedded, std::span<const int64_t> nodes, std::span<const double> times,
    std::span<const int64_t> src_positions, std::span<const int64_t> dst_positions,
    const NeighborSampler& sampler, LinkEndpointMetrics* endpoint_metrics) {
  if (src_positions.size() != dst_positions.size() || nodes.size() != times.size()) {
    throw std::invalid_argument("PredictLinks: spans of different lengths");
  }
  const torch::Tensor src_index = IndexTensor(src_positions);
  const torch::Tensor dst_index = IndexTensor(dst_positions);
  torch::Tensor src, dst;
  if (config_.pair_wise()) {
    // The sequences' identities, for the co-occurrence counts.
    thread_local NeighborBlock sequence_lists;
    thread_local std::vector<int64_t> sequence_keys;
    thread_local std::vector<float> counts;
    sampler.SamplePartners(nodes, times, config_.neighbors, &sequence_lists, &sequence_keys);
    CountCooccurrences(sequence_lists, sequence_keys, src_positions, dst_positions, &counts);
    const torch::Tensor count_tensor =
        torch::from_blob(counts.data(),
                         {static_cast<int64_t>(src_positions.size()), 2, config_.neighbors + 1, 2},
                         torch::kFloat32)
            .to(device(), /*non_blocking=*/false, /*copy=*/true);
    const SequencePatches& sequences = embedded.sequences;
    const PairEncoding pair = dygformer_->EncodePairs(
        {sequences.patches.index_select(0, src_index), sequences.valid.index_select(0, src_index)},
        {sequences.patches.index_select(0, dst_index), sequences.valid.index_select(0, dst_index)},
        count_tensor);
    src = pair.src;
    dst = pair.dst;
    if (endpoint_metrics != nullptr) {
      endpoint_metrics->src = pair.src_metrics;
      endpoint_metrics->dst = pair.dst_metrics;
      endpoint_metrics->src_norm = src.detach().norm(2, 1);
      endpoint_metrics->dst_norm = dst.detach().norm(2, 1);
    }
  } else {
    src = embedded.vectors.index_select(0, src_index);
    dst = embedded.vectors.index_select(0, dst_index);
  }
  if (config_.pair_neighbors > 0) {
    thread_local NeighborBlock lists;
    thread_local std::vector<int64_t> keys;
    thread_local std::vector<float> evidence;
    thread_local SecondHop hop;
    sampler.SamplePartners(nodes, times, config_.pair_neighbors, &lists, &keys);
    const SecondHop* second_hop = nullptr;
    if (config_.pair_hop_neighbors > 0) {
      PlanSecondHop(lists, keys, times, src_positions, &hop);
      sampler.SamplePartnersByKey(hop.keys, hop.times, config_.pair_hop_neighbors, &hop.lists);
      second_hop = &hop;
    }
    ComputePairEvidence(lists, keys, times, src_positions, dst_positions, second_hop, &evidence);
    const torch::Tensor features = torch::from_blob(evidence.data(),
                                                    {static_cast<int64_t>(src_positions.size()),
                                                     PairFeatureCount(config_.pair_hop_neighbors)},
                                                    torch::kFloat32)
                                       .to(device(), /*non_blocking=*/false, /*copy=*/true);
    dst = torch::cat({dst, torch::relu(pair_encoder_(features))}, 1);
  }
  return predictor_(src, dst).squeeze(-1);
}

void TemporalLinkModelImpl::ApplyEvents(std::span<const int64_t> src, std::span<const int64_t> dst,
                                        std::span<const double> ts,
                                        std::span<const float> features) {
  const size_t feature_values = src.size() * static_cast<size_t>(config_.edge_feature_dim);
  if (dst.size() != src.size() || ts.size() != src.size() || features.size() != feature_values) {
    throw std::invalid_argument(
        "ApplyEvents: " + std::to_string(src.size()) + " src, " + std::to_string(dst.size()) +
        " dst, " + std::to_string(ts.size()) + " ts and " + std::to_string(features.size()) +
        " feature values (expected " + std::to_string(feature_values) + ")");
  }
  if (!config_.has_memory()) return;
  torch::NoGradGuard no_grad;
  InvalidatePendingView();
  const int64_t events = static_cast<int64_t>(src.size());
  int64_t max_node = 0;
  for (int64_t i = 0; i < events; ++i) max_node = std::max({max_node, src[i], dst[i]});
  EnsureNodes(max_node + 1);

  // 1. Commit the pending messages: memory and last update of those nodes move forward.
  if (pending_nodes_.size(0) > 0) {
    memory_.index_copy_(0, pending_nodes_, PendingUpdate());
    last_update_.index_copy_(0, pending_nodes_, pending_ts_);
    pending_slot_.index_fill_(0, pending_nodes_, -1);
  }
  if (events == 0) {
    pending_nodes_ = pending_nodes_.narrow(0, 0, 0);
    pending_raw_ = pending_raw_.narrow(0, 0, 0);
    pending_ts_ = pending_ts_.narrow(0, 0, 0);
    return;
  }

  // 2. This batch's messages, [s_self, s_other, e], keep the last one per node ("last"
  // aggregator): event i gives a message to src (position i) and to dst (position events + i),
  // and a node's last message is the one at its largest position. Worked out on the host, where
  // the ids are: torch's CPU `_unique` hashes with a node allocation per id, and on a GPU it
  // waits for the device; and only the kept messages are gathered, straight from memory.
  // Pending messages are in position order, not node order: a server that pages memory numbers
  // its nodes differently after a restart, and the GRU's GEMM rounds a row differently
  // depending on where in the batch it sits. In position order, replicas and restarts compute
  // bit-identically.
  message_scratch_.clear();
  for (int64_t i = 0; i < events; ++i) message_scratch_.emplace_back(src[i], i);
  for (int64_t i = 0; i < events; ++i) message_scratch_.emplace_back(dst[i], events + i);
  std::sort(message_scratch_.begin(), message_scratch_.end());
  chosen_scratch_.clear();
  for (size_t i = 0; i < message_scratch_.size(); ++i) {
    const bool last_of_node = i + 1 == message_scratch_.size() ||
                              message_scratch_[i + 1].first != message_scratch_[i].first;
    if (last_of_node) chosen_scratch_.push_back(message_scratch_[i].second);
  }
  std::sort(chosen_scratch_.begin(), chosen_scratch_.end());
  const auto pending_count = static_cast<int64_t>(chosen_scratch_.size());
  self_scratch_.resize(chosen_scratch_.size());
  other_scratch_.resize(chosen_scratch_.size());
  event_scratch_.resize(chosen_scratch_.size());
  ts_scratch_.resize(chosen_scratch_.size());
  for (size_t i = 0; i < chosen_scratch_.size(); ++i) {
    const bool from_src = chosen_scratch_[i] < events;
    const int64_t event = from_src ? chosen_scratch_[i] : chosen_scratch_[i] - events;
    self_scratch_[i] = from_src ? src[event] : dst[event];
    other_scratch_[i] = from_src ? dst[event] : src[event];
    event_scratch_[i] = event;
    ts_scratch_[i] = ts[event];
  }
  const auto to_device = [&](auto& host, torch::ScalarType type) {
    return torch::from_blob(host.data(), {pending_count}, type)
        .to(device(), /*non_blocking=*/false, /*copy=*/true);
  };
  pending_nodes_ = to_device(self_scratch_, torch::kInt64);
  pending_ts_ = to_device(ts_scratch_, torch::kFloat64);
  std::vector<torch::Tensor> parts = {
      memory_.index_select(0, pending_nodes_),
      memory_.index_select(0, to_device(other_scratch_, torch::kInt64))};
  if (config_.edge_feature_dim > 0) {
    const torch::Tensor edge = torch::from_blob(
        const_cast<float*>(features.data()), {events, config_.edge_feature_dim}, torch::kFloat32);
    parts.push_back(edge.index_select(0, torch::from_blob(event_scratch_.data(), {pending_count},
                                                          torch::kInt64))
                        .to(device()));
  }
  pending_raw_ = torch::cat(parts, -1);
  const auto cpu_long = torch::TensorOptions().dtype(torch::kInt64);
  pending_slot_.index_copy_(0, pending_nodes_,
                            torch::arange(pending_nodes_.size(0), cpu_long.device(device())));
}

void TemporalLinkModelImpl::ReadRows(std::span<const int64_t> rows, std::span<float> memory,
                                     std::span<double> last_update) const {
  const auto count = static_cast<int64_t>(rows.size());
  if (memory.size() != rows.size() * static_cast<size_t>(config_.memory_dim) ||
      last_update.size() != rows.size()) {
    throw std::invalid_argument("ReadRows: buffers of " + std::to_string(memory.size()) + " / " +
                                std::to_string(last_update.size()) + " values for " +
                                std::to_string(count) + " rows");
  }
  if (count == 0) return;
  const torch::Tensor index = IndexTensor(rows);
  torch::Tensor memory_out =
      torch::from_blob(memory.data(), {count, config_.memory_dim}, torch::kFloat32);
  torch::Tensor last_update_out = torch::from_blob(last_update.data(), {count}, torch::kFloat64);
  if (memory_.is_cpu()) {
    torch::index_select_out(memory_out, memory_, 0, index);
    torch::index_select_out(last_update_out, last_update_, 0, index);
  } else {
    memory_out.copy_(memory_.index_select(0, index));
    last_update_out.copy_(last_update_.index_select(0, index));
  }
}

void TemporalLinkModelImpl::WriteRows(std::span<const int64_t> rows, const torch::Tensor& memory,
                                      const torch::Tensor& last_update) {
  const torch::Tensor index = IndexTensor(rows);
  if (pending_nodes_.size(0) > 0 &&
      (pending_slot_.index_select(0, index) >= 0).any().item<bool>()) {
    throw std::logic_error("WriteRows: a row with a pending message would lose its message");
  }
  memory_.index_copy_(0, index, memory.to(memory_.options()));
  last_update_.index_copy_(0, index, last_update.to(last_update_.options()));
}

TemporalLinkModelImpl::PendingMessages TemporalLinkModelImpl::SavePending() const {
  return {pending_nodes_.cpu(), pending_raw_.cpu(), pending_ts_.cpu()};
}

void TemporalLinkModelImpl::RestorePending(const PendingMessages& pending) {
  InvalidatePendingView();
  if (pending_nodes_.size(0) > 0) pending_slot_.index_fill_(0, pending_nodes_, -1);
  pending_nodes_ = pending.rows.to(pending_slot_.options());
  pending_raw_ = pending.raw.to(memory_.options());
  pending_ts_ = pending.ts.to(last_update_.options());
  pending_slot_.index_copy_(0, pending_nodes_,
                            torch::arange(pending_nodes_.size(0), pending_nodes_.options()));
}

TemporalLinkModelImpl::MemoryState TemporalLinkModelImpl::SaveMemory() const {
  return {memory_.clone(),      last_update_.clone(), pending_nodes_.clone(),
          pending_raw_.clone(), pending_ts_.clone(),  node_count_};
}

void TemporalLinkModelImpl::RestoreMemory(const MemoryState& state) {
  memory_ = state.memory.clone();
  last_update_ = state.last_update.clone();
  node_count_ = state.node_count;
  pending_slot_ = torch::full({memory_.size(0)}, -1, state.pending_nodes.options());
  pending_nodes_ = state.pending_nodes.narrow(0, 0, 0);
  RestorePending(
      {state.pending_nodes.clone(), state.pending_raw.clone(), state.pending_ts.clone()});
}

}  // namespace tlp::model
