#include "server/engine.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <future>

#include "model/checkpoint.h"
#include "model/neighbor_sampler.h"
#include "model/temporal_model.h"

namespace tlp::server {
namespace {

int64_t SteadyMilliseconds() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

// Serves the model's neighbour lookups from the store's index, translating dense model
// indices to client ids and back.
class Engine::StoreSampler : public model::NeighborSampler {
 public:
  explicit StoreSampler(const Engine& engine) : engine_(engine) {}

  void Sample(std::span<const int64_t> nodes, std::span<const double> times, int64_t k,
              model::NeighborBlock* out) const override {
    thread_local std::vector<uint64_t> ids;
    thread_local storage::NeighborLists lists;
    ids.resize(nodes.size());
    {
      std::shared_lock lock(engine_.ids_mutex_);
      for (size_t i = 0; i < nodes.size(); ++i) ids[i] = engine_.id_of_[nodes[i]];
    }
    const uint32_t dim = engine_.store_->feature_dim();
    out->Reset(static_cast<int64_t>(nodes.size()), k, dim);
    for (size_t i = 0; i < nodes.size(); ++i) {
      for (int64_t slot = 0; slot < k; ++slot) out->ts[i * k + slot] = times[i];
    }
    // Unknown nodes (index 0) have id 0 in the table but must get no neighbours.
    const Status status = engine_.store_->neighbors().RecentBatch(ids, times, k, &lists);
    if (!status.ok()) throw std::runtime_error("neighbour lookup failed: " + status.ToString());
    std::shared_lock lock(engine_.ids_mutex_);
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i] == 0) continue;
      for (uint32_t slot = 0; slot < lists.counts[i]; ++slot) {
        const storage::Neighbor& neighbor = lists.neighbors[i * k + slot];
        const auto it = engine_.dense_of_.find(neighbor.node);
        const size_t cell = i * k + slot;
        out->nodes[cell] =
            it == engine_.dense_of_.end() || it->second >= engine_.model_nodes_ ? 0 : it->second;
        out->ts[cell] = neighbor.ts;
        out->valid[cell] = 1;
      }
      if (dim > 0) {
        std::copy_n(lists.features.begin() + i * k * dim, lists.counts[i] * dim,
                    out->features.begin() + i * k * dim);
      }
    }
  }

 private:
  const Engine& engine_;
};

Engine::~Engine() {
  StopMemoryThread();
  if (!store_ || !model_) return;
  const Status status = SaveMemoryCheckpoint();
  if (!status.ok()) spdlog::error("final memory checkpoint failed: {}", status.ToString());
}

std::string Engine::MemoryCheckpointPath() const { return options_.data_dir + "/memory.ckpt"; }

// Everything memory.ckpt holds, copied out of the live state so that it can be written while
// the memory thread goes on.
struct Engine::MemorySnapshot {
  model::TemporalLinkModelImpl::MemoryState state;
  uint64_t watermark = 0;
  torch::Tensor ids, destinations;
};

std::shared_ptr<const Engine::MemorySnapshot> Engine::TakeMemorySnapshot() {
  auto snapshot = std::make_shared<MemorySnapshot>();
  std::lock_guard lock(model_mutex_);
  snapshot->state = model_->SaveMemory();
  // Events of the open chunk are in the log but not in memory: replay covers them.
  snapshot->watermark = memory_through_;
  // Events applied after this are not in the snapshot; only the memory thread applies events,
  // and it is the caller (or stopped).
  checkpointed_at_events_ = events_applied_;
  std::shared_lock ids_lock(ids_mutex_);
  snapshot->ids =
      torch::from_blob(id_of_.data(), {static_cast<int64_t>(id_of_.size())}, torch::kInt64).clone();
  snapshot->destinations =
      torch::from_blob(is_destination_.data(), {static_cast<int64_t>(is_destination_.size())},
                       torch::kUInt8)
          .clone();
  return snapshot;
}

Status Engine::WriteMemorySnapshot(const MemorySnapshot& snapshot) {
  const auto start = std::chrono::steady_clock::now();
  try {
    torch::serialize::OutputArchive archive;
    archive.write("fingerprint", c10::IValue(fingerprint_));
    archive.write("watermark", c10::IValue(static_cast<int64_t>(snapshot.watermark)));
    archive.write("memory_batch", c10::IValue(options_.memory_batch));
    archive.write("node_count", c10::IValue(snapshot.state.node_count));
    archive.write("memory", snapshot.state.memory.cpu());
    archive.write("last_update", snapshot.state.last_update.cpu());
    archive.write("pending_nodes", snapshot.state.pending_nodes.cpu());
    archive.write("pending_raw", snapshot.state.pending_raw.cpu());
    archive.write("pending_ts", snapshot.state.pending_ts.cpu());
    archive.write("ids", snapshot.ids);
    archive.write("destinations", snapshot.destinations);
    const std::string path = MemoryCheckpointPath();
    archive.save_to(path + ".tmp");
    std::filesystem::rename(path + ".tmp", path);
  } catch (const std::exception& error) {
    return Status::IoError(std::string("cannot write memory checkpoint: ") + error.what());
  }
  checkpointed_at_ms_ = SteadyMilliseconds();
  spdlog::info("memory checkpoint at sequence {} ({} nodes, {:.2f} s)", snapshot.watermark,
               snapshot.state.node_count,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Status::Ok();
}

Status Engine::FinishBackgroundCheckpoint() {
  if (!background_checkpoint_.valid()) return Status::Ok();
  return background_checkpoint_.get();
}

Status Engine::SaveMemoryCheckpoint() {
  const Status previous = FinishBackgroundCheckpoint();
  if (!previous.ok()) spdlog::error("memory checkpoint failed: {}", previous.ToString());
  return WriteMemorySnapshot(*TakeMemorySnapshot());
}

Status Engine::LoadMemoryCheckpoint(uint64_t* watermark) {
  *watermark = 0;
  const std::string path = MemoryCheckpointPath();
  if (!std::filesystem::exists(path)) return Status::Ok();
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    c10::IValue value;
    archive.read("fingerprint", value);
    if (value.toStringRef() != fingerprint_) {
      spdlog::warn("memory checkpoint was made with model {}, serving {}: replaying the whole log",
                   value.toStringRef(), fingerprint_);
      return Status::Ok();
    }
    archive.read("memory_batch", value);
    if (value.toInt() != options_.memory_batch) {
      spdlog::warn("memory checkpoint used chunks of {}, now {}: replaying the whole log",
                   value.toInt(), options_.memory_batch);
      return Status::Ok();
    }
    archive.read("watermark", value);
    const auto stored_watermark = static_cast<uint64_t>(value.toInt());
    if (stored_watermark > store_->last_sequence()) {
      return Status::Corruption("memory checkpoint covers sequence " +
                                std::to_string(stored_watermark) + " but the store ends at " +
                                std::to_string(store_->last_sequence()));
    }
    model::TemporalLinkModelImpl::MemoryState state;
    archive.read("node_count", value);
    state.node_count = value.toInt();
    const torch::Device device = model_->parameters().front().device();
    archive.read("memory", state.memory);
    archive.read("last_update", state.last_update);
    archive.read("pending_nodes", state.pending_nodes);
    archive.read("pending_raw", state.pending_raw);
    archive.read("pending_ts", state.pending_ts);
    state.memory = state.memory.to(device);
    state.last_update = state.last_update.to(device);
    state.pending_nodes = state.pending_nodes.to(device);
    state.pending_raw = state.pending_raw.to(device);
    state.pending_ts = state.pending_ts.to(device);
    torch::Tensor ids, destinations;
    archive.read("ids", ids);
    archive.read("destinations", destinations);
    model_->RestoreMemory(state);
    std::unique_lock lock(ids_mutex_);
    id_of_.assign(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
    is_destination_.assign(destinations.data_ptr<uint8_t>(),
                           destinations.data_ptr<uint8_t>() + destinations.numel());
    destinations_.clear();
    for (size_t i = 1; i < is_destination_.size(); ++i) {
      if (is_destination_[i]) destinations_.push_back(id_of_[i]);
    }
    dense_of_.clear();
    for (size_t i = 1; i < id_of_.size(); ++i)
      dense_of_.emplace(id_of_[i], static_cast<int64_t>(i));
    *watermark = stored_watermark;
    events_applied_ = stored_watermark;
    applied_through_ = stored_watermark;
    memory_through_ = stored_watermark;
    checkpointed_at_events_ = stored_watermark;
  } catch (const std::exception& error) {
    return Status::Corruption("cannot read memory checkpoint '" + path + "': " + error.what());
  }
  return Status::Ok();
}

Status Engine::Open(const EngineOptions& options, std::unique_ptr<Engine>* engine) {
  std::unique_ptr<Engine> result(new Engine());
  result->options_ = options;
  result->checkpointed_at_ms_ = SteadyMilliseconds();
  torch::set_num_threads(options.torch_threads);
  std::string note;
  const torch::Device device = model::ResolveDevice(options.device, &note);
  if (!note.empty()) spdlog::warn("{}", note);
  result->device_name_ = device.str();

  model::TemporalLinkModel loaded{nullptr};
  Status status = model::LoadCheckpoint(options.checkpoint, device, &loaded);
  if (!status.ok()) return status;
  loaded->eval();
  result->model_ = loaded.ptr();
  result->fingerprint_ = model::ModelFingerprint(loaded);
  spdlog::info("model {} ({}), fingerprint {}, device {}", options.checkpoint,
               loaded->config().ToString(), result->fingerprint_, result->device_name_);

  storage::StoreOptions store_options;
  store_options.feature_dim = static_cast<uint32_t>(loaded->config().edge_feature_dim);
  store_options.lateness_seconds = options.lateness_seconds;
  store_options.sync = options.sync_writes;
  store_options.neighbor_cache_bytes = options.neighbor_cache_mb << 20;
  status = storage::TemporalStore::Open(options.data_dir, store_options, &result->store_);
  if (!status.ok()) return status;
  result->id_of_.push_back(0);  // index 0: "never seen"
  result->is_destination_.push_back(0);
  result->sampler_ = std::make_unique<StoreSampler>(*result);

  // Restore the memory checkpoint, then replay the log after it in sequence-aligned chunks
  // (see engine.h): this thread reads and decodes while the memory thread runs the model.
  const auto start = std::chrono::steady_clock::now();
  uint64_t watermark = 0;
  status = result->LoadMemoryCheckpoint(&watermark);
  if (!status.ok()) return status;
  result->published_through_ = result->memory_through_;
  result->memory_thread_ = std::thread([engine = result.get()] { engine->RunMemoryThread(); });
  const uint64_t total = result->store_->last_sequence() - watermark;
  constexpr size_t kReplayBatch = 10000;
  status = result->store_->ReplayAfter(watermark, kReplayBatch,
                                       [&](const EventBatch& batch, uint64_t first) {
                                         result->QueueForMemory(batch, first);
                                         return Status::Ok();
                                       });
  if (!status.ok()) return status;
  {
    // Everything queued is applied (not only the complete chunks AwaitMemory waits for), so the
    // open chunk read below is the memory thread's final state until the next ingest.
    std::unique_lock lock(result->memory_queue_mutex_);
    result->memory_room_.wait(lock, [&] { return result->queued_memory_events_ == 0; });
    status = result->memory_status_;
  }
  if (!status.ok()) return status;
  spdlog::info(
      "restored memory at sequence {}, replayed {} events in {:.2f} s ({} in the open chunk)",
      watermark, total,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
      result->chunk_src_.size());
  *engine = std::move(result);
  return Status::Ok();
}

int64_t Engine::FindDense(uint64_t node) const {
  std::shared_lock lock(ids_mutex_);
  const auto it = dense_of_.find(node);
  return it == dense_of_.end() ? 0 : it->second;
}

void Engine::CoverAssignedNodes() {
  std::shared_lock lock(ids_mutex_);
  model_nodes_ = static_cast<int64_t>(id_of_.size());
  model_->EnsureNodes(model_nodes_);
}

void Engine::FlushChunk() {
  if (chunk_src_.empty()) return;
  std::lock_guard lock(model_mutex_);
  CoverAssignedNodes();
  model_->ApplyEvents(chunk_src_, chunk_dst_, chunk_ts_, chunk_features_);
  events_applied_ += chunk_src_.size();
  memory_through_ = applied_through_;
  chunk_src_.clear();
  chunk_dst_.clear();
  chunk_ts_.clear();
  chunk_features_.clear();
}

void Engine::QueueForMemory(const EventBatch& batch, uint64_t first_sequence,
                            std::span<const uint8_t> skip) {
  MemoryWork work;
  {
    std::lock_guard lock(memory_queue_mutex_);
    if (!spare_work_.empty()) {
      work = std::move(spare_work_.back());
      spare_work_.pop_back();
    }
  }
  work.first_sequence = first_sequence;
  work.src.clear();
  work.dst.clear();
  work.ts.clear();
  work.features.clear();
  {
    // One exclusive section per batch rather than two lock round trips per event: samplers
    // wait at most for one batch's hash lookups.
    std::unique_lock lock(ids_mutex_);
    auto dense = [this](uint64_t node) {
      const auto [it, inserted] = dense_of_.try_emplace(node, static_cast<int64_t>(id_of_.size()));
      if (inserted) {
        id_of_.push_back(node);
        is_destination_.push_back(0);
      }
      return it->second;
    };
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!skip.empty() && skip[i]) continue;
      work.src.push_back(dense(batch.src[i]));
      const int64_t dst = dense(batch.dst[i]);
      work.dst.push_back(dst);
      if (!is_destination_[dst]) {
        is_destination_[dst] = 1;
        destinations_.push_back(batch.dst[i]);
      }
      work.ts.push_back(batch.ts[i]);
      const auto features = batch.FeaturesOf(i);
      work.features.insert(work.features.end(), features.begin(), features.end());
    }
  }
  const size_t events = work.size();
  if (events == 0) return;
  {
    std::unique_lock lock(memory_queue_mutex_);
    memory_room_.wait(lock, [&] {
      return queued_memory_events_ == 0 ||
             queued_memory_events_ + events <= options_.memory_queue_events;
    });
    queued_memory_events_ += events;
    memory_queue_.push_back(std::move(work));
  }
  memory_work_.notify_one();
}

void Engine::RunMemoryThread() {
  while (true) {
    MemoryWork work;
    Status failed;
    {
      std::unique_lock lock(memory_queue_mutex_);
      memory_work_.wait(lock, [&] { return !memory_queue_.empty() || stopping_memory_; });
      if (memory_queue_.empty()) return;  // stopping, and everything queued is applied
      work = std::move(memory_queue_.front());
      memory_queue_.pop_front();
      failed = memory_status_;
    }
    if (failed.ok()) {
      try {
        ApplyToMemory(work);
      } catch (const std::exception& error) {
        failed = Status::Internal(std::string("node memory update failed: ") + error.what());
        spdlog::error("{}", failed.ToString());
      }
    }
    {
      std::lock_guard lock(memory_queue_mutex_);
      queued_memory_events_ -= work.size();
      spare_work_.push_back(std::move(work));
      published_through_ = memory_through_;  // written by this thread only
      if (memory_status_.ok()) memory_status_ = failed;
    }
    memory_room_.notify_all();
    memory_progress_.notify_all();
    uint64_t interval = options_.checkpoint_every_events;
    {
      std::lock_guard lock(model_mutex_);  // model_nodes_ also moves in Score
      interval = std::max(interval, static_cast<uint64_t>(model_nodes_));
    }
    // The snapshot is copied here (a memory copy) and written on another thread, so that
    // ingest does not wait for serialisation; one write at a time, a due one waits its turn.
    const bool writing =
        background_checkpoint_.valid() &&
        background_checkpoint_.wait_for(std::chrono::seconds(0)) != std::future_status::ready;
    if (failed.ok() && options_.checkpoint_every_events > 0 && !writing &&
        events_applied_ - checkpointed_at_events_ >= interval) {
      const Status previous = FinishBackgroundCheckpoint();
      if (!previous.ok()) spdlog::error("memory checkpoint failed: {}", previous.ToString());
      background_checkpoint_ = std::async(
          std::launch::async,
          [this, snapshot = TakeMemorySnapshot()] { return WriteMemorySnapshot(*snapshot); });
    }
  }
}

void Engine::ApplyToMemory(const MemoryWork& work) {
  const auto chunk = static_cast<uint64_t>(options_.memory_batch);
  const size_t dim = store_->feature_dim();
  for (size_t i = 0; i < work.size(); ++i) {
    chunk_src_.push_back(work.src[i]);
    chunk_dst_.push_back(work.dst[i]);
    chunk_ts_.push_back(work.ts[i]);
    chunk_features_.insert(chunk_features_.end(), work.features.begin() + i * dim,
                           work.features.begin() + (i + 1) * dim);
    applied_through_ = work.first_sequence + i;
    if (applied_through_ % chunk == 0) FlushChunk();
  }
}

void Engine::StopMemoryThread() {
  if (!memory_thread_.joinable()) return;
  {
    std::lock_guard lock(memory_queue_mutex_);
    stopping_memory_ = true;
  }
  memory_work_.notify_all();
  memory_thread_.join();
}

Status Engine::AwaitMemory() {
  const auto chunk = static_cast<uint64_t>(options_.memory_batch);
  const uint64_t target = store_->last_sequence() / chunk * chunk;
  std::unique_lock lock(memory_queue_mutex_);
  memory_progress_.wait(lock, [&] { return published_through_ >= target || !memory_status_.ok(); });
  return memory_status_;
}

uint64_t Engine::MemoryLagEvents() const {
  const uint64_t stored = store_->last_sequence();
  std::lock_guard lock(memory_queue_mutex_);
  return stored - std::min(stored, published_through_);
}

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
  std::lock_guard lock(ingest_mutex_);
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
  QueueForMemory(batch, result->sequences[first], result->duplicate);
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
    int64_t node;
    double at;
    bool operator==(const EndpointKey&) const = default;
  };
  struct EndpointHash {
    size_t operator()(const EndpointKey& key) const {
      return std::hash<int64_t>()(key.node) * 0x9E3779B97F4A7C15ULL ^ std::hash<double>()(key.at);
    }
  };
  std::unordered_map<EndpointKey, int64_t, EndpointHash> row_of;
  std::vector<int64_t> endpoint_row(2 * count), nodes, endpoint_node(2 * count);
  std::vector<double> times;
  const double now = store_->max_ts();
  for (size_t i = 0; i < count; ++i) {
    LinkQuery query = queries[i];
    if (query.at <= 0) query.at = std::nextafter(now, INFINITY);  // "now" sees every event
    (*scores)[i].query = query;
    endpoint_node[i] = FindDense(query.src);
    endpoint_node[count + i] = FindDense(query.dst);
  }
  for (size_t endpoint = 0; endpoint < 2 * count; ++endpoint) {
    const double at = (*scores)[endpoint % count].query.at;
    const auto [it, inserted] =
        row_of.try_emplace({endpoint_node[endpoint], at}, static_cast<int64_t>(nodes.size()));
    if (inserted) {
      nodes.push_back(endpoint_node[endpoint]);
      times.push_back(at);
    }
    endpoint_row[endpoint] = it->second;
  }
  try {
    std::lock_guard lock(model_mutex_);
    CoverAssignedNodes();
    torch::NoGradGuard no_grad;
    const model::Embeddings embedded = model_->Embed(nodes, times, *sampler_);
    const torch::Tensor rows =
        torch::from_blob(endpoint_row.data(), {static_cast<int64_t>(2 * count)}, torch::kInt64)
            .to(embedded.vectors.device());
    const torch::Tensor src_rows = rows.narrow(0, 0, static_cast<int64_t>(count));
    const torch::Tensor dst_rows =
        rows.narrow(0, static_cast<int64_t>(count), static_cast<int64_t>(count));
    const torch::Tensor logits = model_
                                     ->Predict(embedded.vectors.index_select(0, src_rows),
                                               embedded.vectors.index_select(0, dst_rows))
                                     .cpu()
                                     .contiguous();
    // One device-to-host copy per column, then plain reads (no tensor per element).
    auto host = [](const torch::Tensor& values, torch::ScalarType type) {
      return values.to(torch::kCPU, type).contiguous();
    };
    const torch::Tensor norms = host(embedded.vectors.norm(2, 1), torch::kFloat32);
    const torch::Tensor ess = host(embedded.metrics.effective_neighbors, torch::kFloat32);
    const torch::Tensor mass = host(embedded.metrics.attention_mass, torch::kFloat32);
    const torch::Tensor entropy = host(embedded.metrics.attention_entropy, torch::kFloat32);
    const torch::Tensor used = host(embedded.metrics.neighbors_used, torch::kInt64);
    auto metrics = [&](size_t endpoint) {
      const int64_t row = endpoint_row[endpoint];
      EndpointMetrics m;
      m.representation_norm = norms.data_ptr<float>()[row];
      m.effective_neighbors = ess.data_ptr<float>()[row];
      m.attention_mass = mass.data_ptr<float>()[row];
      m.attention_entropy = entropy.data_ptr<float>()[row];
      m.neighbors_used = static_cast<uint32_t>(used.data_ptr<int64_t>()[row]);
      m.cold_start = endpoint_node[endpoint] == 0;
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
  } catch (const std::exception& error) {
    return Status::Internal(std::string("scoring failed: ") + error.what());
  }
  return Status::Ok();
}

std::vector<uint64_t> Engine::KnownDestinations() const {
  // Kept as events arrive: a scan of every node per TopK cost O(nodes) per call.
  std::shared_lock lock(ids_mutex_);
  return destinations_;
}

Status Engine::GetNode(uint64_t node, size_t recent, NodeInfo* info) {
  *info = NodeInfo();
  const int64_t dense = FindDense(node);
  info->known = dense != 0;
  if (!info->known) return Status::Ok();
  if (Status status = AwaitMemory(); !status.ok()) return status;
  info->degree = store_->neighbors().Degree(node);
  Status status =
      store_->neighbors().Recent(node, INFINITY, std::max<size_t>(recent, 1), &info->recent);
  if (!status.ok()) return status;
  if (!info->recent.empty()) info->last_update_ts = info->recent.front().ts;
  if (recent == 0) info->recent.clear();
  std::lock_guard lock(model_mutex_);
  CoverAssignedNodes();
  if (model_->config().has_memory()) {
    const torch::Tensor memory = model_->MemoryOf(std::vector<int64_t>{dense}).contiguous();
    info->memory.assign(memory.data_ptr<float>(), memory.data_ptr<float>() + memory.numel());
  }
  return Status::Ok();
}

ModelInfo Engine::Info() const {
  ModelInfo info;
  const model::ModelConfig& config = model_->config();
  info.architecture = config.architecture;
  info.attention_p = config.attention_p;
  info.fingerprint = fingerprint_;
  info.device = device_name_;
  info.embedding_dim = static_cast<uint32_t>(config.embedding_dim);
  info.memory_dim = config.has_memory() ? static_cast<uint32_t>(config.memory_dim) : 0;
  info.edge_feature_dim = static_cast<uint32_t>(config.edge_feature_dim);
  info.neighbors = static_cast<uint32_t>(config.neighbors);
  std::lock_guard lock(model_mutex_);
  info.events_applied = events_applied_;
  info.watermark = memory_through_;
  return info;
}

double Engine::SecondsSinceCheckpoint() const {
  return static_cast<double>(SteadyMilliseconds() - checkpointed_at_ms_.load()) / 1000.0;
}

uint64_t Engine::EventsSinceCheckpoint() const {
  std::lock_guard lock(model_mutex_);
  return events_applied_ - checkpointed_at_events_;
}

}  // namespace tlp::server
