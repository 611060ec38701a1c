#include "server/engine.h"

#include <ATen/Parallel.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include "common/stopwatch.h"
#include "common/thread_name.h"
#include "model/checkpoint.h"
#include "model/neighbor_sampler.h"
#include "model/temporal_model.h"
#include "server/status_error.h"
#include "server/store_sampler.h"

namespace tlp::server {

namespace {

// The store's record of the model a load committed, lines "<fingerprint>", "<base>", "<file>",
// "<previous fingerprint>", "<previous file>": base is the fingerprint of the --checkpoint the
// daemon ran with then, files are relative to the data dir unless absolute. A restart with the
// same --checkpoint serves the recorded model, and can roll back to the previous one.
constexpr const char* kServingModelCursor = "model/serving";
// A load holds ingest once at most this many stored events are not yet queued for its memory.
constexpr uint64_t kHoldEvents = 10000;
// Catch-up rounds of a model load in which its memory thread yields the model lock to scoring.
constexpr int kYieldingRounds = 3;
constexpr size_t kReplayBatch = 10000;

// fsyncs a file or directory (so a copied checkpoint survives power loss before the store
// names it).
Status SyncPath(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), directory ? O_RDONLY | O_DIRECTORY : O_RDONLY);
  if (fd < 0) return Status::IoError("cannot open '" + path + "': " + std::strerror(errno));
  const int synced = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (synced != 0) return Status::IoError("cannot sync '" + path + "': " + std::strerror(error));
  return Status::Ok();
}

// Copies `source` to <data_dir>/models/<fingerprint>.pt durably (same fingerprint, same model:
// an existing copy is kept).
Status KeepCheckpoint(const std::string& data_dir, const std::string& source,
                      const std::string& fingerprint, std::string* kept) {
  namespace fs = std::filesystem;
  const std::string directory = data_dir + "/models";
  *kept = directory + "/" + fingerprint + ".pt";
  std::error_code error;
  if (fs::exists(*kept, error)) return Status::Ok();
  fs::create_directories(directory, error);
  const std::string temporary = *kept + ".tmp";
  fs::copy_file(source, temporary, fs::copy_options::overwrite_existing, error);
  if (error) {
    return Status::IoError("cannot copy '" + source + "' to '" + temporary +
                           "': " + error.message());
  }
  if (Status status = SyncPath(temporary, false); !status.ok()) return status;
  fs::rename(temporary, *kept, error);
  if (error) return Status::IoError("cannot rename '" + temporary + "': " + error.message());
  return SyncPath(directory, true);
}

struct ServingRecord {
  std::string fingerprint, base, file, previous_fingerprint, previous_file;
};

Status ReadServingRecord(const storage::TemporalStore& store, ServingRecord* record, bool* found) {
  std::string value;
  if (Status status = store.GetCursor(kServingModelCursor, &value, found); !status.ok()) {
    return status;
  }
  if (!*found) return Status::Ok();
  std::vector<std::string> lines;
  for (size_t begin = 0;;) {
    const size_t end = value.find('\n', begin);
    lines.push_back(value.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  if (lines.size() != 5) return Status::Corruption("bad model/serving record: " + value);
  *record = {lines[0], lines[1], lines[2], lines[3], lines[4]};
  return Status::Ok();
}

float Probability(float logit) { return 1.0f / (1.0f + std::exp(-logit)); }

// Representation metrics of scored rows, copied to the host once per column (one device-to-host
// copy each, then plain reads: no tensor per element).
class MetricColumns {
 public:
  MetricColumns(const torch::Tensor& norms, const torch::Tensor& effective_neighbors,
                const torch::Tensor& mass, const torch::Tensor& entropy, const torch::Tensor& used)
      : norms_(Host(norms, torch::kFloat32)),
        effective_neighbors_(Host(effective_neighbors, torch::kFloat32)),
        mass_(Host(mass, torch::kFloat32)),
        entropy_(Host(entropy, torch::kFloat32)),
        used_(Host(used, torch::kInt64)) {}

  EndpointMetrics At(int64_t row, bool cold_start) const {
    EndpointMetrics m;
    m.representation_norm = norms_.data_ptr<float>()[row];
    m.effective_neighbors = effective_neighbors_.data_ptr<float>()[row];
    m.attention_mass = mass_.data_ptr<float>()[row];
    m.attention_entropy = entropy_.data_ptr<float>()[row];
    m.neighbors_used = static_cast<uint32_t>(used_.data_ptr<int64_t>()[row]);
    m.cold_start = cold_start;
    return m;
  }

 private:
  static torch::Tensor Host(const torch::Tensor& values, torch::ScalarType type) {
    return values.to(torch::kCPU, type).contiguous();
  }
  torch::Tensor norms_, effective_neighbors_, mass_, entropy_, used_;
};

}  // namespace

std::string ModelFingerprintText(uint64_t fingerprint) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(fingerprint));
  return hex;
}

const char* ModelLoadPhaseName(ModelLoadPhase phase) {
  switch (phase) {
    case ModelLoadPhase::kIdle:
      return "idle";
    case ModelLoadPhase::kReplaying:
      return "replaying";
    case ModelLoadPhase::kCommitted:
      return "committed";
    case ModelLoadPhase::kSwapped:
      return "swapped";
  }
  return "unknown";
}

// One loaded model with its node memory: the serving one, or one being loaded beside it.
struct Engine::ServingModel {
  std::string checkpoint, fingerprint;
  uint64_t fingerprint_bits = 0;
  std::shared_ptr<model::TemporalLinkModelImpl> model;
  std::unique_ptr<NodeMemoryCache> cache;
  std::unique_ptr<StoreSampler> sampler;
  std::unique_ptr<MemoryPipeline> pipeline;  // last: stopped before what it borrows goes
};

Mutex Engine::model_mutex_;

Engine::~Engine() {
  {
    MutexLock lock(&load_mutex_);
    cancel_load_ = true;
  }
  if (load_thread_.joinable()) load_thread_.join();
  const std::shared_ptr<ServingModel> serving = Serving();
  if (!serving) return;
  serving->pipeline->Stop();
  // An engine whose Open failed (say, restoring the checkpoint) writes nothing: a checkpoint of
  // its partial memory would replace the stored one.
  if (!opened_) return;
  const Status status = serving->pipeline->Checkpoint();
  if (!status.ok()) spdlog::error("final memory checkpoint failed: {}", status.ToString());
}

Status Engine::LoadModelFile(const std::string& checkpoint,
                             std::shared_ptr<ServingModel>* result) const {
  std::string note;
  const torch::Device device = model::ResolveDevice(options_.device, &note);
  if (!note.empty()) spdlog::warn("{}", note);
  model::TemporalLinkModel loaded{nullptr};
  if (Status status = model::LoadCheckpoint(checkpoint, device, &loaded); !status.ok()) {
    return status;
  }
  loaded->eval();
  const model::ModelConfig& config = loaded->config();
  if (store_ && static_cast<uint32_t>(config.edge_feature_dim) != store_->feature_dim()) {
    return Status::InvalidArgument("checkpoint '" + checkpoint + "' has edge_feature_dim " +
                                   std::to_string(config.edge_feature_dim) +
                                   ", but the store holds events with " +
                                   std::to_string(store_->feature_dim()) + " features");
  }
  auto serving = std::make_shared<ServingModel>();
  serving->checkpoint = checkpoint;
  serving->fingerprint = model::ModelFingerprint(loaded);
  serving->fingerprint_bits = std::stoull(serving->fingerprint, nullptr, 16);
  serving->model = loaded.ptr();
  *result = std::move(serving);
  return Status::Ok();
}

void Engine::AttachModel(ServingModel* serving, bool store_backed) {
  const model::ModelConfig& config = serving->model->config();
  // Bytes a resident row costs: its memory and last update in the model, the cache's
  // bookkeeping (owner, flags, epoch) and its hash-table entry.
  const size_t row_bytes = static_cast<size_t>(config.memory_dim) * sizeof(float) + 80;
  serving->cache = std::make_unique<NodeMemoryCache>(
      *store_, *serving->model, options_.node_memory_cache_bytes / row_bytes, store_backed);
  serving->sampler = std::make_unique<StoreSampler>(*store_, *serving->cache);

  MemoryPipelineOptions pipeline_options;
  pipeline_options.memory_batch = options_.memory_batch;
  pipeline_options.memory_queue_events = options_.memory_queue_events;
  pipeline_options.checkpoints = {options_.checkpoint_every_events,
                                  options_.checkpoint_every_seconds};
  pipeline_options.model_tag = serving->fingerprint + "/" + std::to_string(options_.memory_batch);
  pipeline_options.background = !store_backed;
  // A model being loaded leaves the model lock to scoring three quarters of the time while
  // requests come (see RunLoad for when it stops yielding).
  pipeline_options.background_lock_share = 0.25;
  pipeline_options.busy = [this] {
    const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
    return load_yields_.load(std::memory_order_relaxed) &&
           now - last_score_.load(std::memory_order_relaxed) <
               std::chrono::nanoseconds(std::chrono::milliseconds(50)).count();
  };
  MemoryModel memory_model;
  memory_model.has_memory = config.has_memory();
  memory_model.memory_dim = static_cast<uint32_t>(config.memory_dim);
  memory_model.apply = [model = serving->model.get(), threads = options_.memory_threads](
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
  serving->pipeline =
      std::make_unique<MemoryPipeline>(pipeline_options, store_.get(), std::move(memory_model),
                                       serving->cache.get(), &destinations_, &model_mutex_);
}

Status Engine::Open(const EngineOptions& options, std::unique_ptr<Engine>* engine) {
  std::unique_ptr<Engine> result(new Engine());
  result->options_ = options;
  torch::set_num_threads(options.torch_threads);
  std::string note;
  result->device_name_ = model::ResolveDevice(options.device, &note).str();

  std::shared_ptr<ServingModel> serving;
  Status status = result->LoadModelFile(options.checkpoint, &serving);
  if (!status.ok()) return status;
  result->base_fingerprint_ = serving->fingerprint;

  storage::StoreOptions store_options;
  const model::ModelConfig& config = serving->model->config();
  store_options.feature_dim = static_cast<uint32_t>(config.edge_feature_dim);
  store_options.lateness_seconds = options.lateness_seconds;
  store_options.max_future_seconds = options.max_future_seconds;
  store_options.sync = options.sync_writes;
  store_options.neighbor_cache_bytes = options.neighbor_cache_mb << 20;
  store_options.block_cache_bytes = options.block_cache_mb << 20;
  // The neighbour cache keeps as many of a node's latest neighbours as the model reads (its
  // pair evidence reads the most). A model loaded later with deeper reads walks RocksDB for
  // the rest until the next restart.
  store_options.cached_neighbors = static_cast<uint32_t>(
      std::max<int64_t>({store_options.cached_neighbors, config.neighbors, config.pair_neighbors}));
  status = storage::TemporalStore::Open(options.data_dir, store_options, &result->store_);
  if (!status.ok()) return status;

  // A model loaded at run time and committed serves again, unless --checkpoint changed since.
  ServingRecord record;
  bool recorded = false;
  status = ReadServingRecord(*result->store_, &record, &recorded);
  if (!status.ok()) return status;
  if (recorded && record.base == serving->fingerprint) {
    const std::filesystem::path data_dir(options.data_dir);
    {
      MutexLock lock(&result->load_mutex_);
      result->load_status_.previous_fingerprint = record.previous_fingerprint;
      result->load_status_.previous_checkpoint = (data_dir / record.previous_file).string();
    }
    if (record.fingerprint != serving->fingerprint) {
      std::shared_ptr<ServingModel> committed;
      status = result->LoadModelFile((data_dir / record.file).string(), &committed);
      if (!status.ok()) return status;
      spdlog::info("serving model {} loaded at run time, not --checkpoint's {}",
                   committed->fingerprint, serving->fingerprint);
      serving = std::move(committed);
    }
  } else if (recorded && record.fingerprint != serving->fingerprint) {
    spdlog::warn("--checkpoint changed since model {} was loaded at run time: serving {}",
                 record.fingerprint, serving->fingerprint);
  }
  spdlog::info("model {} ({}), fingerprint {}, device {}", serving->checkpoint,
               serving->model->config().ToString(), serving->fingerprint, result->device_name_);
  result->AttachModel(serving.get(), true);
  {
    MutexLock lock(&result->serving_mutex_);
    result->serving_ = serving;
  }
  {
    MutexLock lock(&result->ingest_mutex_);
    result->ingest_target_ = serving;
  }

  // Restore the memory checkpoint, then replay the log after it in sequence-aligned chunks:
  // this thread reads and decodes while the memory thread runs the model.
  const Stopwatch watch;
  uint64_t watermark = 0;
  status = serving->pipeline->Start(options.data_dir, options.rebuild_memory, &watermark);
  if (!status.ok()) return status;
  const uint64_t total = result->store_->last_sequence() - watermark;
  status = result->store_->ReplayAfter(watermark, kReplayBatch,
                                       [&](const EventBatch& batch, uint64_t first) {
                                         serving->pipeline->Queue(batch, first);
                                         return Status::Ok();
                                       });
  if (!status.ok()) return status;
  status = serving->pipeline->Drain();
  if (!status.ok()) return status;
  spdlog::info(
      "restored memory at sequence {}, replayed {} events in {:.2f} s ({} in the open chunk)",
      watermark, total, watch.Seconds(), serving->pipeline->LagEvents());
  result->opened_ = true;
  *engine = std::move(result);
  return Status::Ok();
}

std::shared_ptr<Engine::ServingModel> Engine::Serving() const {
  MutexLock lock(&serving_mutex_);
  return serving_;
}

Status Engine::SaveMemoryCheckpoint() { return Serving()->pipeline->Checkpoint(); }

Status Engine::AwaitMemory() {
  while (true) {
    const std::shared_ptr<ServingModel> serving = Serving();
    if (Status status = serving->pipeline->Await(); !status.ok()) return status;
    if (Serving() == serving) return Status::Ok();  // else swapped while waiting: the new one
  }
}

uint64_t Engine::MemoryLagEvents() const { return Serving()->pipeline->LagEvents(); }

MemoryThreadSeconds Engine::MemoryThreadTime() const {
  return Serving()->pipeline->ThreadSeconds();
}

double Engine::SecondsSinceCheckpoint() const {
  return Serving()->pipeline->SecondsSinceCheckpoint();
}

uint64_t Engine::EventsSinceCheckpoint() const {
  return Serving()->pipeline->EventsSinceCheckpoint();
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
  ingest_target_->pipeline->Queue(batch, result->sequences[first], result->duplicate);
  return Status::Ok();
}

Status Engine::WithServingModel(const std::function<Status(const ServingModel&, bool*)>& score) {
  while (true) {
    const std::shared_ptr<ServingModel> serving = Serving();
    if (Status status = serving->pipeline->Await(); !status.ok()) return status;
    bool swapped = false;
    const Status status = score(*serving, &swapped);
    if (!swapped) return status;
  }
}

Status Engine::ScoreRows(const ServingModel& serving, const std::vector<uint64_t>& known_nodes,
                         const std::vector<size_t>& known_positions, size_t count, bool* swapped,
                         const std::function<Status(const std::vector<int64_t>&)>& score) {
  try {
    MutexLock lock(&model_mutex_);
    if (Serving().get() != &serving) {  // swapped since the caller took it: one model a call
      *swapped = true;
      return Status::Ok();
    }
    // Unknown nodes take row 0 (zero memory, no neighbours); known ones are paged in.
    NodeMemoryCache& cache = *serving.cache;
    cache.BeginOperation();
    std::vector<int64_t> rows(count, 0), known_rows(known_nodes.size());
    if (Status status = cache.Rows(known_nodes, known_rows); !status.ok()) return status;
    for (size_t i = 0; i < known_rows.size(); ++i) rows[known_positions[i]] = known_rows[i];
    torch::NoGradGuard no_grad;
    return score(rows);
  } catch (const StatusError& error) {  // the store's own code (IO_ERROR, ...)
    return Status(error.status().code(), "scoring failed: " + error.status().message());
  } catch (const std::exception& error) {
    return Status::Internal(std::string("scoring failed: ") + error.what());
  }
}

Status Engine::Score(std::span<const LinkQuery> queries, std::vector<LinkScore>* scores) {
  scores->assign(queries.size(), LinkScore());
  if (queries.empty()) return Status::Ok();
  return WithServingModel([&](const ServingModel& serving, bool* swapped) {
    return ScoreWith(serving, queries, scores, swapped);
  });
}

Status Engine::ScoreNodeStates(std::span<const NodeStateQuery> queries,
                               std::vector<NodeStateScore>* scores) {
  scores->assign(queries.size(), NodeStateScore());
  if (queries.empty()) return Status::Ok();
  return WithServingModel([&](const ServingModel& serving, bool* swapped) {
    return ScoreNodeStatesWith(serving, queries, scores, swapped);
  });
}

Status Engine::ScoreNodeStatesWith(const ServingModel& serving,
                                   std::span<const NodeStateQuery> queries,
                                   std::vector<NodeStateScore>* scores, bool* swapped) {
  // Before any row is paged in: a model's configuration never changes, and a request it cannot
  // answer should not evict cached rows.
  if (!serving.model->config().node_state) {
    return Status::FailedPrecondition(
        "the serving model (" + serving.fingerprint +
        ") has no node-state head; serve one trained with `tlpd train --node-state`");
  }
  last_score_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                    std::memory_order_relaxed);
  const double now = store_->max_ts();
  const storage::NeighborIndex& index = store_->neighbors();
  std::vector<uint64_t> known_nodes;    // queries the store knows
  std::vector<size_t> known_positions;  // their positions
  std::vector<double> times(queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    NodeStateQuery query = queries[i];
    if (query.at <= 0) query.at = std::nextafter(now, INFINITY);  // "now" sees every event
    (*scores)[i].query = query;
    times[i] = query.at;
    if (index.Known(query.node)) {
      known_nodes.push_back(query.node);
      known_positions.push_back(i);
    }
  }
  return ScoreRows(
      serving, known_nodes, known_positions, times.size(), swapped,
      [&](const std::vector<int64_t>& rows) {
        const model::Embeddings embedded =
            serving.model->Embed(rows, times, *serving.sampler, model::Outcome::kNodeState);
        const torch::Tensor logits =
            serving.model->PredictNodeStates(embedded.vectors).to(torch::kCPU).contiguous();
        const MetricColumns metrics(
            embedded.vectors.norm(2, 1), embedded.metrics.effective_neighbors,
            embedded.metrics.attention_mass, embedded.metrics.attention_entropy,
            embedded.metrics.neighbors_used);
        std::vector<uint8_t> known(queries.size(), 0);
        for (size_t position : known_positions) known[position] = 1;
        for (size_t i = 0; i < queries.size(); ++i) {
          NodeStateScore& score = (*scores)[i];
          score.logit = logits.data_ptr<float>()[i];
          score.probability = Probability(score.logit);
          score.metrics = metrics.At(static_cast<int64_t>(i), !known[i]);
          score.model = serving.fingerprint_bits;
        }
        return Status::Ok();
      });
}

Status Engine::ScoreWith(const ServingModel& serving, std::span<const LinkQuery> queries,
                         std::vector<LinkScore>* scores, bool* swapped) {
  last_score_.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                    std::memory_order_relaxed);
  const size_t count = queries.size();
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
  return ScoreRows(
      serving, known_nodes, known_positions, times.size(), swapped,
      [&](const std::vector<int64_t>& rows) {
        const model::Embeddings embedded = serving.model->Embed(rows, times, *serving.sampler);
        const std::span<const int64_t> positions(endpoint_position);
        model::LinkEndpointMetrics link_metrics;
        const torch::Tensor logits =
            serving.model
                ->PredictLinks(embedded, rows, times, positions.first(count),
                               positions.subspan(count, count), *serving.sampler, &link_metrics)
                .cpu()
                .contiguous();
        // Per endpoint position, or per link and side for a pair-wise architecture (the rows of
        // [src links; dst links]).
        const bool per_link = link_metrics.src_norm.defined();
        auto column = [&](const torch::Tensor& per_position, const torch::Tensor& src,
                          const torch::Tensor& dst) {
          return per_link ? torch::cat({src, dst}) : per_position;
        };
        const MetricColumns columns(
            column(embedded.vectors.norm(2, 1), link_metrics.src_norm, link_metrics.dst_norm),
            column(embedded.metrics.effective_neighbors, link_metrics.src.effective_neighbors,
                   link_metrics.dst.effective_neighbors),
            column(embedded.metrics.attention_mass, link_metrics.src.attention_mass,
                   link_metrics.dst.attention_mass),
            column(embedded.metrics.attention_entropy, link_metrics.src.attention_entropy,
                   link_metrics.dst.attention_entropy),
            column(embedded.metrics.neighbors_used, link_metrics.src.neighbors_used,
                   link_metrics.dst.neighbors_used));
        auto metrics = [&](size_t endpoint) {
          const int64_t row =
              per_link ? static_cast<int64_t>(endpoint) : endpoint_position[endpoint];
          return columns.At(row, !endpoint_known[endpoint]);
        };
        const float* logit = logits.data_ptr<float>();
        for (size_t i = 0; i < count; ++i) {
          LinkScore& score = (*scores)[i];
          score.logit = logit[i];
          score.probability = Probability(score.logit);
          score.src_metrics = metrics(i);
          score.dst_metrics = metrics(count + i);
          score.model = serving.fingerprint_bits;
        }
        return Status::Ok();
      });
}

std::vector<uint64_t> Engine::KnownDestinations() const {
  // Kept as events arrive: a scan of every node per TopK cost O(nodes) per call.
  return destinations_.All();
}

MemoryCacheStats Engine::MemoryCache() const {
  MutexLock lock(&model_mutex_);
  return Serving()->cache->stats();
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
  const std::shared_ptr<ServingModel> serving = Serving();
  if (serving->model->config().has_memory()) {
    serving->cache->BeginOperation();
    int64_t row = 0;
    status = serving->cache->Rows({&node, 1}, {&row, 1});
    if (!status.ok()) return status;
    const torch::Tensor memory = serving->model->MemoryOf(std::vector<int64_t>{row}).contiguous();
    info->memory.assign(memory.data_ptr<float>(), memory.data_ptr<float>() + memory.numel());
  }
  return Status::Ok();
}

ModelInfo Engine::Info() const {
  ModelInfo info;
  const std::shared_ptr<ServingModel> serving = Serving();
  const MemoryProgress progress = serving->pipeline->Progress();
  info.events_applied = progress.events_applied;
  info.watermark = progress.through;
  MutexLock lock(&model_mutex_);
  const model::ModelConfig& config = serving->model->config();
  info.architecture = config.architecture;
  info.attention_p = config.attention_p;
  info.fingerprint = serving->fingerprint;
  info.device = device_name_;
  info.embedding_dim = static_cast<uint32_t>(config.embedding_dim);
  info.memory_dim = config.has_memory() ? static_cast<uint32_t>(config.memory_dim) : 0;
  info.edge_feature_dim = static_cast<uint32_t>(config.edge_feature_dim);
  info.neighbors = static_cast<uint32_t>(config.neighbors);
  info.node_state = config.node_state;
  info.outcome_attention = config.node_state ? config.outcome_attention : "";
  return info;
}

Status Engine::LoadModel(const std::string& checkpoint) { return StartLoad(checkpoint, false); }

Status Engine::Rollback() {
  std::string previous;
  {
    MutexLock lock(&load_mutex_);
    previous = load_status_.previous_checkpoint;
  }
  if (previous.empty()) {
    return Status::FailedPrecondition("no model to roll back to: no load has swapped one out");
  }
  return StartLoad(previous, true);
}

Status Engine::StartLoad(const std::string& checkpoint, bool rollback) {
  MutexLock lock(&load_mutex_);
  if (load_status_.phase != ModelLoadPhase::kIdle) {
    return Status::FailedPrecondition("a model load is running (" +
                                      load_status_.loading_checkpoint +
                                      "); wait until `tlpctl model status` says idle");
  }
  if (load_thread_.joinable()) load_thread_.join();  // the last load, finished
  std::shared_ptr<ServingModel> loaded;
  Status status = LoadModelFile(checkpoint, &loaded);
  if (!status.ok()) {
    // The caller's file: a bad one is a bad argument, whatever the reader said.
    return Status::InvalidArgument("cannot load '" + checkpoint + "': " + status.message());
  }
  if (loaded->fingerprint == Serving()->fingerprint) {
    return Status::AlreadyExists("model " + loaded->fingerprint + " is serving already");
  }
  // Kept in the data dir, where the committed record points: the caller's file may go away.
  std::string kept;
  status = KeepCheckpoint(options_.data_dir, checkpoint, loaded->fingerprint, &kept);
  if (!status.ok()) return status;
  loaded->checkpoint = kept;
  // Its memory rows hold every node by the end of the replay: sized once here, before any
  // thread shares the model, instead of grown under the model lock (each growth copied every
  // row while scorers waited: up to 1.5 s at a million nodes).
  loaded->model->ReserveNodes(static_cast<int64_t>(store_->Stats().nodes) + 2);
  AttachModel(loaded.get(), false);
  loaded->pipeline->StartEmpty();
  load_status_.phase = ModelLoadPhase::kReplaying;
  load_status_.loading_fingerprint = loaded->fingerprint;
  load_status_.loading_checkpoint = kept;
  load_status_.replayed_events = 0;
  load_status_.target_events = store_->last_sequence();
  load_status_.last_error.clear();
  last_load_ = Status::Ok();
  spdlog::info("loading model {} from {}: rebuilding its memory from {} events",
               loaded->fingerprint, checkpoint, load_status_.target_events);
  load_thread_ = std::thread([this, loaded = std::move(loaded), rollback] {
    NameThisThread("tlpd-model-load");
    RunLoad(loaded, rollback);
  });
  return Status::Ok();
}

void Engine::EnterPhase(ModelLoadPhase phase) {
  {
    MutexLock lock(&load_mutex_);
    load_status_.phase = phase;
  }
  if (options_.on_load_phase) options_.on_load_phase(phase);
}

Status Engine::ReplayInto(const ServingModel& loaded, uint64_t* through, bool to_end) {
  return store_->ReplayAfter(*through, kReplayBatch, [&](const EventBatch& batch, uint64_t first) {
    {
      MutexLock lock(&load_mutex_);
      if (cancel_load_ && !to_end) return Status::Unavailable("tlpd is shutting down");
    }
    loaded.pipeline->Queue(batch, first);  // waits while the memory queue is full
    *through = first + batch.size() - 1;
    MutexLock lock(&load_mutex_);
    load_status_.replayed_events = *through;
    load_status_.target_events = std::max(*through, store_->last_sequence());
    return Status::Ok();
  });
}

void Engine::RunLoad(std::shared_ptr<ServingModel> loaded, bool rollback) {
  const Stopwatch watch;
  bool swapped = false;
  auto finish = [&](const Status& status) {
    if (!status.ok()) {
      // Before the swap the loaded model is dropped; after it, it serves (only its memory did
      // not reach the store: a replay after a restart makes up for it).
      if (!swapped) loaded->pipeline->Stop();
      spdlog::error("model load of {} failed: {}", loaded->fingerprint, status.ToString());
    }
    MutexLock lock(&load_mutex_);
    load_status_.phase = ModelLoadPhase::kIdle;
    load_status_.loading_fingerprint.clear();
    load_status_.loading_checkpoint.clear();
    load_status_.last_error = status.ok() ? "" : status.ToString();
    last_load_ = status;
    load_done_.SignalAll();
  };
  // Catch up with the log without holding ingest: rounds until what is left is small (the
  // memory queue bounds how far queued work runs ahead of the loaded model).
  uint64_t through = 0;
  load_yields_ = true;
  for (int round = 0;; ++round) {
    const bool first = round == 0;
    // A replay that yields to scoring may not catch up with a fast stream: from the fourth
    // round on it takes the model lock as often as it can (at its lower CPU priority still).
    if (round == kYieldingRounds) load_yields_ = false;
    Status status = ReplayInto(*loaded, &through, false);
    if (first) EnterPhase(ModelLoadPhase::kReplaying);  // told once the first pass is queued
    if (status.ok()) status = loaded->pipeline->Drain();
    if (!status.ok()) return finish(status);
    if (store_->last_sequence() - through <= kHoldEvents) break;
  }
  // The model it replaces is kept beside it, for a rollback after a restart too.
  std::shared_ptr<ServingModel> previous = Serving();
  std::string previous_kept;
  if (Status status = KeepCheckpoint(options_.data_dir, previous->checkpoint, previous->fingerprint,
                                     &previous_kept);
      !status.ok()) {
    return finish(status);
  }
  double hold_seconds = 0;
  {
    // Ingest is held from here to the swap: both models apply the same last events, so the
    // loaded one takes over at the chunk boundary the serving one stands at.
    MutexLock hold(&ingest_mutex_);
    load_yields_ = false;  // ingest waits for the rest: as fast as it can
    const Stopwatch held;
    Status status = ReplayInto(*loaded, &through, true);
    if (status.ok()) status = loaded->pipeline->Drain();
    if (status.ok()) status = previous->pipeline->Drain();
    if (status.ok()) {
      // The commit: a restart from here on serves the loaded model (and replays the log into
      // its memory until the memory below is written).
      storage::AppendResult appended;
      auto in_data_dir = [&](const std::string& kept) {
        return std::filesystem::relative(kept, options_.data_dir).string();
      };
      const storage::SourceCursor record{
          kServingModelCursor, loaded->fingerprint + "\n" + base_fingerprint_ + "\n" +
                                   in_data_dir(loaded->checkpoint) + "\n" + previous->fingerprint +
                                   "\n" + in_data_dir(previous_kept)};
      status = store_->Append(EventBatch(), &appended, {&record, 1});
    }
    if (!status.ok()) return finish(status);
    EnterPhase(ModelLoadPhase::kCommitted);
    loaded->pipeline->Stop();
    loaded->pipeline->Resume();  // its memory thread, in the foreground now
    previous->pipeline->Stop();
    {
      MutexLock lock(&model_mutex_);  // no Score call between its check and its forward pass
      MutexLock serving_lock(&serving_mutex_);
      serving_ = loaded;
    }
    ingest_target_ = loaded;
    swapped = true;
    hold_seconds = held.Seconds();
  }
  EnterPhase(ModelLoadPhase::kSwapped);
  spdlog::info("model {} serves now (was {}); ingest held {:.3f} s", loaded->fingerprint,
               previous->fingerprint, hold_seconds);
  // Its memory replaces the previous model's in the store; until then a restart replays the
  // log into it.
  Status status = store_->ClearNodeStates();
  if (status.ok()) status = loaded->pipeline->Checkpoint();
  if (status.ok()) {
    MutexLock lock(&model_mutex_);
    loaded->cache->set_store_backed(true);
  }
  {
    MutexLock lock(&load_mutex_);
    ++(rollback ? load_status_.rollbacks : load_status_.swaps);
    load_status_.previous_fingerprint = previous->fingerprint;
    load_status_.previous_checkpoint = previous_kept;
    load_status_.last_swap_seconds = watch.Seconds();
    load_status_.last_hold_seconds = hold_seconds;
  }
  finish(status);
}

Status Engine::AwaitModelLoad() {
  MutexLock lock(&load_mutex_);
  while (load_status_.phase != ModelLoadPhase::kIdle) load_done_.Wait(&load_mutex_);
  return last_load_;
}

ModelStatus Engine::GetModelStatus() const {
  ModelStatus status;
  {
    MutexLock lock(&load_mutex_);
    status = load_status_;
  }
  const std::shared_ptr<ServingModel> serving = Serving();
  status.fingerprint = serving->fingerprint;
  status.checkpoint = serving->checkpoint;
  return status;
}

}  // namespace tlp::server
