#include "server/engine.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "common/stopwatch.h"
#include "model/checkpoint.h"
#include "model/neighbor_sampler.h"
#include "model/temporal_model.h"
#include "server/status_error.h"
#include "server/store_sampler.h"

namespace tlp::server {

Mutex Engine::model_mutex_;

Engine::~Engine() {
  if (!pipeline_) return;
  pipeline_->Stop();
  // An engine whose Open failed (say, restoring the checkpoint) writes nothing: a checkpoint of
  // its partial memory would replace the stored one.
  if (!opened_) return;
  const Status status = pipeline_->Checkpoint();
  if (!status.ok()) spdlog::error("final memory checkpoint failed: {}", status.ToString());
}

Status Engine::Open(const EngineOptions& options, std::unique_ptr<Engine>* engine) {
  std::unique_ptr<Engine> result(new Engine());
  result->options_ = options;
  torch::set_num_threads(options.torch_threads);
  std::string note;
  const torch::Device device = model::ResolveDevice(options.device, &note);
  if (!note.empty()) spdlog::warn("{}", note);
  result->device_name_ = device.str();

  model::TemporalLinkModel loaded{nullptr};
  Status status = model::LoadCheckpoint(options.checkpoint, device, &loaded);
  if (!status.ok()) return status;
  loaded->eval();
  result->fingerprint_ = model::ModelFingerprint(loaded);
  spdlog::info("model {} ({}), fingerprint {}, device {}", options.checkpoint,
               loaded->config().ToString(), result->fingerprint_, result->device_name_);

  storage::StoreOptions store_options;
  const model::ModelConfig& config = loaded->config();
  store_options.feature_dim = static_cast<uint32_t>(config.edge_feature_dim);
  store_options.lateness_seconds = options.lateness_seconds;
  store_options.max_future_seconds = options.max_future_seconds;
  store_options.sync = options.sync_writes;
  store_options.neighbor_cache_bytes = options.neighbor_cache_mb << 20;
  store_options.block_cache_bytes = options.block_cache_mb << 20;
  // The neighbour cache keeps as many of a node's latest neighbours as the model reads (its
  // pair evidence reads the most): deeper lookups of active nodes would each walk RocksDB.
  store_options.cached_neighbors = static_cast<uint32_t>(
      std::max<int64_t>({store_options.cached_neighbors, config.neighbors, config.pair_neighbors}));
  status = storage::TemporalStore::Open(options.data_dir, store_options, &result->store_);
  if (!status.ok()) return status;
  // Bytes a resident row costs: its memory and last update in the model, the cache's
  // bookkeeping (owner, flags, epoch) and its hash-table entry.
  const size_t row_bytes = static_cast<size_t>(config.memory_dim) * sizeof(float) + 80;
  result->model_ = loaded.ptr();
  result->cache_ = std::make_unique<NodeMemoryCache>(*result->store_, *result->model_,
                                                     options.node_memory_cache_bytes / row_bytes);
  result->sampler_ = std::make_unique<StoreSampler>(*result->store_, *result->cache_);

  MemoryPipelineOptions pipeline_options;
  pipeline_options.memory_batch = options.memory_batch;
  pipeline_options.memory_queue_events = options.memory_queue_events;
  pipeline_options.checkpoints = {options.checkpoint_every_events,
                                  options.checkpoint_every_seconds};
  pipeline_options.model_tag = result->fingerprint_ + "/" + std::to_string(options.memory_batch);
  MemoryModel memory_model;
  memory_model.has_memory = config.has_memory();
  memory_model.memory_dim = static_cast<uint32_t>(config.memory_dim);
  memory_model.apply = [model = result->model_.get(), threads = options.memory_threads](
                           std::span<const int64_t> src_rows, std::span<const int64_t> dst_rows,
                           std::span<const double> ts, std::span<const float> features) {
#ifdef _OPENMP
    // OpenMP's thread count is per thread, and torch (and OpenBLAS) read it at each call, so
    // this limits the memory thread alone. Torch's first parallel op on a thread resets it to
    // the process-wide count, so that reset is made to happen first (once per thread). Without
    // it the first chunk of each memory thread ran on the scoring's count, and a replica
    // restarted mid-stream computed that chunk on other threads than one that never stopped:
    // some CPUs round the GRU's GEMM differently by thread count (on an AMD EPYC, last-bit
    // differences failed KafkaSourceTest.ReplicasOfOneTopicReachTheSameStateAndScores).
    at::internal::lazy_init_num_threads();
    omp_set_num_threads(threads);
#else
    (void)threads;
#endif
    model->ApplyEvents(src_rows, dst_rows, ts, features);
  };
  result->pipeline_ = std::make_unique<MemoryPipeline>(
      pipeline_options, result->store_.get(), std::move(memory_model), result->cache_.get(),
      &result->destinations_, &model_mutex_);

  // Restore the memory checkpoint, then replay the log after it in sequence-aligned chunks:
  // this thread reads and decodes while the memory thread runs the model.
  const Stopwatch watch;
  uint64_t watermark = 0;
  status = result->pipeline_->Start(options.data_dir, options.rebuild_memory, &watermark);
  if (!status.ok()) return status;
  const uint64_t total = result->store_->last_sequence() - watermark;
  constexpr size_t kReplayBatch = 10000;
  status = result->store_->ReplayAfter(watermark, kReplayBatch,
                                       [&](const EventBatch& batch, uint64_t first) {
                                         result->pipeline_->Queue(batch, first);
                                         return Status::Ok();
                                       });
  if (!status.ok()) return status;
  status = result->pipeline_->Drain();
  if (!status.ok()) return status;
  spdlog::info(
      "restored memory at sequence {}, replayed {} events in {:.2f} s ({} in the open chunk)",
      watermark, total, watch.Seconds(), result->pipeline_->LagEvents());
  result->opened_ = true;
  *engine = std::move(result);
  return Status::Ok();
}

Status Engine::SaveMemoryCheckpoint() { return pipeline_->Checkpoint(); }

Status Engine::AwaitMemory() { return pipeline_->Await(); }

uint64_t Engine::MemoryLagEvents() const { return pipeline_->LagEvents(); }

MemoryThreadSeconds Engine::MemoryThreadTime() const { return pipeline_->ThreadSeconds(); }

double Engine::SecondsSinceCheckpoint() const { return pipeline_->SecondsSinceCheckpoint(); }

uint64_t Engine::EventsSinceCheckpoint() const { return pipeline_->EventsSinceCheckpoint(); }

Status Engine::CheckSelfLoop(const EventBatch& batch, size_t i) const {
  if (options_.allow_self_loops || batch.src[i] != batch.dst[i]) return Status::Ok();
  return Status::InvalidArgument(
      "event " + std::to_string(i) + ": fields 'src' and 'dst' are equal (" +
      std::to_string(batch.src[i]) + "); start tlpd with --allow-self-loops to accept them");
}

void Engine::Screen(const EventBatch& batch, std::vector<Status>* verdicts) const {
  verdicts->assign(batch.size(), Status::Ok());
  double newest = store_->max_ts();
  for (size_t i = 0; i < batch.size(); ++i) {
    Status status = CheckSelfLoop(batch, i);
    if (status.ok()) status = store_->CheckEvent(batch, i, false, &newest);
    (*verdicts)[i] = std::move(status);
  }
}

Status Engine::Ingest(const EventBatch& batch, storage::AppendResult* result,
                      std::span<const storage::SourceCursor> cursors) {
  MutexLock lock(&ingest_mutex_);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (Status status = CheckSelfLoop(batch, i); !status.ok()) return status;
  }
  Status status = store_->Append(batch, result, cursors);
  if (!status.ok()) return status;
  if (result->accepted == 0) return Status::Ok();
  // Only newly stored events move memory, in sequence order; duplicates are skipped in place.
  // The new ones have consecutive sequences from the first of them on.
  size_t first = 0;
  while (result->duplicate[first]) ++first;
  pipeline_->Queue(batch, result->sequences[first], result->duplicate);
  return Status::Ok();
}

Status Engine::Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores) {
  const size_t count = queries.size();
  scores->assign(count, LinkScore());
  if (count == 0) return Status::Ok();
  if (Status status = AwaitMemory(); !status.ok()) return status;
  // Endpoint i is src of query i, endpoint count + i its dst. Each distinct (node, time) is
  // embedded once: TopK repeats its src for every candidate, and concurrent requests share
  // popular nodes.
  struct EndpointKey {
    uint64_t node;
    double at;
    bool known;
    bool operator==(const EndpointKey&) const = default;
  };
  struct EndpointHash {
    size_t operator()(const EndpointKey& key) const {
      return (std::hash<uint64_t>()(key.node) * 0x9E3779B97F4A7C15ULL ^
              std::hash<double>()(key.at)) +
             key.known;
    }
  };
  std::unordered_map<EndpointKey, int64_t, EndpointHash> position_of;
  std::vector<int64_t> endpoint_position(2 * count);
  std::vector<uint8_t> endpoint_known(2 * count);
  std::vector<uint64_t> known_nodes;    // distinct endpoints the store knows
  std::vector<size_t> known_positions;  // their positions
  std::vector<double> times;            // per position
  const double now = store_->max_ts();
  const storage::NeighborIndex& index = store_->neighbors();
  for (size_t i = 0; i < count; ++i) {
    LinkQuery query = queries[i];
    if (query.at <= 0) query.at = std::nextafter(now, INFINITY);  // "now" sees every event
    (*scores)[i].query = query;
  }
  for (size_t endpoint = 0; endpoint < 2 * count; ++endpoint) {
    const LinkQuery& query = (*scores)[endpoint % count].query;
    const uint64_t node = endpoint < count ? query.src : query.dst;
    const bool known = index.Known(node);
    endpoint_known[endpoint] = known;
    const auto [it, inserted] =
        position_of.try_emplace({node, query.at, known}, static_cast<int64_t>(times.size()));
    if (inserted) {
      if (known) {
        known_nodes.push_back(node);
        known_positions.push_back(times.size());
      }
      times.push_back(query.at);
    }
    endpoint_position[endpoint] = it->second;
  }
  try {
    MutexLock lock(&model_mutex_);
    // Unknown nodes take row 0 (zero memory, no neighbours); known ones are paged in.
    cache_->BeginOperation();
    std::vector<int64_t> rows(times.size(), 0), known_rows(known_nodes.size());
    if (Status status = cache_->Rows(known_nodes, known_rows); !status.ok()) return status;
    for (size_t i = 0; i < known_rows.size(); ++i) rows[known_positions[i]] = known_rows[i];
    torch::NoGradGuard no_grad;
    const model::Embeddings embedded = model_->Embed(rows, times, *sampler_);
    const std::span<const int64_t> positions(endpoint_position);
    model::LinkEndpointMetrics link_metrics;
    const torch::Tensor logits =
        model_
            ->PredictLinks(embedded, rows, times, positions.first(count),
                           positions.subspan(count, count), *sampler_, &link_metrics)
            .cpu()
            .contiguous();
    // One device-to-host copy per column, then plain reads (no tensor per element).
    auto host = [](const torch::Tensor& values, torch::ScalarType type) {
      return values.to(torch::kCPU, type).contiguous();
    };
    // Per endpoint position, or per link and side for a pair-wise architecture (the rows of
    // [src links; dst links]).
    const bool per_link = link_metrics.src_norm.defined();
    auto column = [&](const torch::Tensor& per_position, const torch::Tensor& src,
                      const torch::Tensor& dst, torch::ScalarType type) {
      return host(per_link ? torch::cat({src, dst}) : per_position, type);
    };
    const torch::Tensor norms = column(embedded.vectors.norm(2, 1), link_metrics.src_norm,
                                       link_metrics.dst_norm, torch::kFloat32);
    const torch::Tensor ess =
        column(embedded.metrics.effective_neighbors, link_metrics.src.effective_neighbors,
               link_metrics.dst.effective_neighbors, torch::kFloat32);
    const torch::Tensor mass =
        column(embedded.metrics.attention_mass, link_metrics.src.attention_mass,
               link_metrics.dst.attention_mass, torch::kFloat32);
    const torch::Tensor entropy =
        column(embedded.metrics.attention_entropy, link_metrics.src.attention_entropy,
               link_metrics.dst.attention_entropy, torch::kFloat32);
    const torch::Tensor used =
        column(embedded.metrics.neighbors_used, link_metrics.src.neighbors_used,
               link_metrics.dst.neighbors_used, torch::kInt64);
    auto metrics = [&](size_t endpoint) {
      const int64_t row = per_link ? static_cast<int64_t>(endpoint) : endpoint_position[endpoint];
      EndpointMetrics m;
      m.representation_norm = norms.data_ptr<float>()[row];
      m.effective_neighbors = ess.data_ptr<float>()[row];
      m.attention_mass = mass.data_ptr<float>()[row];
      m.attention_entropy = entropy.data_ptr<float>()[row];
      m.neighbors_used = static_cast<uint32_t>(used.data_ptr<int64_t>()[row]);
      m.cold_start = !endpoint_known[endpoint];
      return m;
    };
    const float* logit = logits.data_ptr<float>();
    for (size_t i = 0; i < count; ++i) {
      LinkScore& score = (*scores)[i];
      score.logit = logit[i];
      score.probability = 1.0f / (1.0f + std::exp(-score.logit));
      score.src_metrics = metrics(i);
      score.dst_metrics = metrics(count + i);
    }
  } catch (const StatusError& error) {  // the store's own code (IO_ERROR, ...)
    return Status(error.status().code(), "scoring failed: " + error.status().message());
  } catch (const std::exception& error) {
    return Status::Internal(std::string("scoring failed: ") + error.what());
  }
  return Status::Ok();
}

std::vector<uint64_t> Engine::KnownDestinations() const {
  // Kept as events arrive: a scan of every node per TopK cost O(nodes) per call.
  return destinations_.All();
}

MemoryCacheStats Engine::MemoryCache() const {
  MutexLock lock(&model_mutex_);
  return cache_->stats();
}

Status Engine::GetNode(uint64_t node, size_t recent, NodeInfo* info) {
  *info = NodeInfo();
  info->known = store_->neighbors().Known(node);
  if (!info->known) return Status::Ok();
  if (Status status = AwaitMemory(); !status.ok()) return status;
  info->degree = store_->neighbors().Degree(node);
  Status status =
      store_->neighbors().Recent(node, INFINITY, std::max<size_t>(recent, 1), &info->recent);
  if (!status.ok()) return status;
  if (!info->recent.empty()) info->last_update_ts = info->recent.front().ts;
  if (recent == 0) info->recent.clear();
  MutexLock lock(&model_mutex_);
  if (model_->config().has_memory()) {
    cache_->BeginOperation();
    int64_t row = 0;
    status = cache_->Rows({&node, 1}, {&row, 1});
    if (!status.ok()) return status;
    const torch::Tensor memory = model_->MemoryOf(std::vector<int64_t>{row}).contiguous();
    info->memory.assign(memory.data_ptr<float>(), memory.data_ptr<float>() + memory.numel());
  }
  return Status::Ok();
}

ModelInfo Engine::Info() const {
  ModelInfo info;
  const MemoryProgress progress = pipeline_->Progress();
  info.events_applied = progress.events_applied;
  info.watermark = progress.through;
  MutexLock lock(&model_mutex_);
  const model::ModelConfig& config = model_->config();
  info.architecture = config.architecture;
  info.attention_p = config.attention_p;
  info.fingerprint = fingerprint_;
  info.device = device_name_;
  info.embedding_dim = static_cast<uint32_t>(config.embedding_dim);
  info.memory_dim = config.has_memory() ? static_cast<uint32_t>(config.memory_dim) : 0;
  info.edge_feature_dim = static_cast<uint32_t>(config.edge_feature_dim);
  info.neighbors = static_cast<uint32_t>(config.neighbors);
  return info;
}

}  // namespace tlp::server
