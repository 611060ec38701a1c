// Scored link pairs per second of the TGN + MAA model (1 layer, k = 10, dims 100, the default
// pair evidence) on the bundled Wikipedia stream, for batches of 1, 200, 2,000 and 20,000 pairs,
// and of the other architectures for 2,000; each architecture's share of a TopK; node memory
// updates per second; and the machine's limits: GEMM FLOP/s and gather bandwidth. Runs on
// `TLP_DEVICE` (cpu default, cuda:0 on a GPU machine) with `TLP_THREADS` torch threads (default 2).
// Node memory is first filled by replaying the whole stream in chunks of 200, as the daemon does.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>

#include "common/allocator_tuning.h"
#include "common/blas_kernels.h"
#include "common/event_reader.h"
#include "model/checkpoint.h"
#include "model/temporal_model.h"
#include "model/training.h"

namespace {

struct Fixture {
  tlp::model::TemporalDataset dataset;
  tlp::model::TemporalAdjacency adjacency;
  tlp::model::TemporalLinkModel model{nullptr};

  Fixture() {
    const char* root = std::getenv("TLP_SOURCE_DIR");
    tlp::EventBatch events;
    tlp::Status status = tlp::EventReader::ReadAll(
        std::string(root ? root : ".") + "/data/wikipedia.csv.gz", &events);
    if (status.ok()) status = tlp::model::TemporalDataset::FromEvents(events, &dataset);
    if (!status.ok()) throw std::runtime_error(status.ToString());
    const char* threads = std::getenv("TLP_THREADS");
    torch::set_num_threads(threads ? std::atoi(threads) : 2);
    std::string note;
    const char* requested = std::getenv("TLP_DEVICE");
    const torch::Device device = tlp::model::ResolveDevice(requested ? requested : "cpu", &note);
    tlp::model::ModelConfig config;
    config.attention_p = 1.1;
    model = tlp::model::TemporalLinkModel(config);
    model->to(device);
    model->eval();
    model->EnsureNodes(dataset.nodes());
    model->ResetMemory();
    torch::NoGradGuard no_grad;
    for (int64_t begin = 0; begin < dataset.events(); begin += 200) {
      const int64_t count = std::min<int64_t>(200, dataset.events() - begin);
      for (int64_t i = begin; i < begin + count; ++i) {
        adjacency.Add(dataset.src[i], dataset.dst[i], dataset.ts[i]);
      }
      model->ApplyEvents(std::span(dataset.src).subspan(begin, count),
                         std::span(dataset.dst).subspan(begin, count),
                         std::span(dataset.ts).subspan(begin, count), {});
    }
  }
};

Fixture& Shared() {
  static Fixture fixture;
  return fixture;
}

// The architectures as bench/ranking.sh trains them: 0 the bench model (TGN), 1 TGAT, 2
// GraphMixer (30 recent interactions, 2 mixer layers), 3 DyGFormer (31 interactions a sequence,
// patches of 2, 2 layers; its transformer runs once per pair). `pair_neighbors` as in
// ModelConfig (walks at their default when > 0).
tlp::model::TemporalLinkModel BenchModel(int64_t architecture, int64_t pair_neighbors) {
  Fixture& fixture = Shared();
  tlp::model::ModelConfig config = fixture.model->config();
  if (architecture == 0 && pair_neighbors == config.pair_neighbors) return fixture.model;
  config.pair_neighbors = pair_neighbors;
  if (architecture == 1) config.architecture = "tgat";
  if (architecture == 2) {
    config.architecture = "graphmixer";
    config.neighbors = 30;
    config.layers = 2;
  }
  if (architecture == 3) {
    config.architecture = "dygformer";
    config.neighbors = 31;
    config.patch_size = 2;
    config.layers = 2;
  }
  tlp::model::TemporalLinkModel model(config);
  model->eval();
  model->EnsureNodes(fixture.dataset.nodes());
  model->ResetMemory();
  return model;
}

const char* const kArchitectureNames[] = {"tgn", "tgat", "graphmixer", "dygformer"};

// Scored pairs per second of random (source, page) pairs at the stream's end, `pairs` a batch,
// for each architecture with the default pair evidence (DyGFormer: its own co-occurrence
// encoding instead).
void BM_ScorePairs(benchmark::State& state) {
  Fixture& fixture = Shared();
  const int64_t architecture = state.range(0), pairs = state.range(1);
  tlp::model::TemporalLinkModel model =
      BenchModel(architecture, architecture == 3 ? 0 : fixture.model->config().pair_neighbors);
  state.SetLabel(kArchitectureNames[architecture]);
  std::mt19937_64 random(1);
  std::vector<int64_t> nodes(2 * pairs);
  std::vector<double> times(2 * pairs, fixture.dataset.ts.back() + 1.0);
  std::vector<int64_t> sources(pairs), destinations(pairs);
  std::iota(sources.begin(), sources.end(), 0);
  std::iota(destinations.begin(), destinations.end(), pairs);
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    for (int64_t i = 0; i < pairs; ++i) {
      nodes[i] = fixture.dataset.src[random() % fixture.dataset.events()];
      nodes[pairs + i] = fixture.dataset.dst[random() % fixture.dataset.events()];
    }
    const tlp::model::Embeddings z = model->Embed(nodes, times, fixture.adjacency);
    const torch::Tensor logits =
        model->PredictLinks(z, nodes, times, sources, destinations, fixture.adjacency);
    benchmark::DoNotOptimize(logits.cpu().data_ptr<float>());
  }
  state.counters["pairs_per_s"] = benchmark::Counter(
      static_cast<double>(pairs * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ScorePairs)
    ->ArgNames({"architecture", "pairs"})
    ->Args({0, 1})
    ->Args({0, 200})
    ->Args({0, 2000})
    ->Args({0, 20000})
    ->Args({1, 2000})
    ->Args({2, 2000})
    ->Args({3, 2000})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A TopK's model work: one source against the first `candidates` of the 1,000 Wikipedia pages
// (0 = all), with the predictor's pair evidence from that many recent interactions per endpoint
// (0 = none).
void BM_RankPages(benchmark::State& state) {
  Fixture& fixture = Shared();
  tlp::model::TemporalLinkModel model = BenchModel(state.range(0), state.range(1));
  state.SetLabel(kArchitectureNames[state.range(0)]);
  std::vector<int64_t> pages = fixture.dataset.dst;
  std::sort(pages.begin(), pages.end());
  pages.erase(std::unique(pages.begin(), pages.end()), pages.end());
  if (state.range(2) > 0) pages.resize(std::min<size_t>(pages.size(), state.range(2)));
  std::vector<int64_t> nodes = {fixture.dataset.src.back()};
  nodes.insert(nodes.end(), pages.begin(), pages.end());
  const std::vector<double> times(nodes.size(), fixture.dataset.ts.back() + 1.0);
  const std::vector<int64_t> sources(pages.size(), 0);
  std::vector<int64_t> destinations(pages.size());
  std::iota(destinations.begin(), destinations.end(), 1);
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    const tlp::model::Embeddings z = model->Embed(nodes, times, fixture.adjacency);
    const torch::Tensor logits =
        model->PredictLinks(z, nodes, times, sources, destinations, fixture.adjacency);
    benchmark::DoNotOptimize(logits.cpu().data_ptr<float>());
  }
  state.counters["candidates"] = static_cast<double>(pages.size());
}
BENCHMARK(BM_RankPages)
    ->ArgNames({"architecture", "pair_neighbors", "candidates"})
    ->Args({0, 0, 0})
    ->Args({0, 64, 0})
    ->Args({1, 64, 0})
    ->Args({2, 64, 0})
    ->Args({3, 0, 0})
    ->Args({3, 0, 50})
    ->Args({3, 0, 100})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Node memory updates per second: ApplyEvents over the stream in chunks of 200 (tlpd's default
// memory_batch, as its memory thread runs them: the model's ceiling for ingest) and 2,000.
// rows > 0 spreads Wikipedia's ~9,000 nodes over that many memory rows at random, as tlpd's
// node memory cache does at 10M nodes (~2.2M rows, 0.9 GB). Those ~9,000 rows (3.6 MB) still
// fit the CPU's caches; with uniform_src each event's source takes a row of its own instead
// (~157,000 rows, 63 MB, over 0.9 GB), as the sources of a 10M-node stream do: then nearly each
// source row read or written misses the caches and, on 4 KiB pages, the TLB.
void BM_ApplyEvents(benchmark::State& state) {
  Fixture& fixture = Shared();
  const int64_t chunk = state.range(0), rows = state.range(1);
  std::vector<int64_t> src = fixture.dataset.src, dst = fixture.dataset.dst;
  if (rows > 0) {
    fixture.model->EnsureNodes(rows);
    std::vector<int64_t> row_of(fixture.dataset.nodes());
    std::mt19937_64 random(2);
    auto any_row = [&] { return 1 + static_cast<int64_t>(random() % (rows - 1)); };
    for (int64_t& row : row_of) row = any_row();
    for (int64_t& node : src) node = state.range(2) != 0 ? any_row() : row_of[node];
    for (int64_t& node : dst) node = row_of[node];
  }
  torch::NoGradGuard no_grad;
  int64_t begin = 0, applied = 0;
  for (auto _ : state) {
    if (begin + chunk > fixture.dataset.events()) begin = 0;
    fixture.model->ApplyEvents(std::span(src).subspan(begin, chunk),
                               std::span(dst).subspan(begin, chunk),
                               std::span(fixture.dataset.ts).subspan(begin, chunk), {});
    begin += chunk;
    applied += chunk;
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(applied), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ApplyEvents)
    ->ArgNames({"chunk", "rows", "uniform_src"})
    ->Args({200, 0, 0})
    ->Args({2000, 0, 0})
    ->Args({200, 2200000, 0})
    ->Args({200, 2200000, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The host's share of BM_ScorePairs: sampling the 10 most recent neighbours of its 2 x pairs
// query nodes from the in-memory adjacency (always on the CPU, whatever the model's device).
void BM_SampleNeighbors(benchmark::State& state) {
  Fixture& fixture = Shared();
  const int64_t queries = 2 * state.range(0);
  std::mt19937_64 random(1);
  std::vector<int64_t> nodes(queries);
  const std::vector<double> times(queries, fixture.dataset.ts.back() + 1.0);
  tlp::model::NeighborBlock block;
  for (auto _ : state) {
    for (int64_t& node : nodes) node = fixture.dataset.src[random() % fixture.dataset.events()];
    fixture.adjacency.Sample(nodes, times, fixture.model->config().neighbors, &block);
    benchmark::DoNotOptimize(block.nodes.data());
  }
  state.counters["pairs_per_s"] = benchmark::Counter(
      static_cast<double>(state.range(0) * state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SampleNeighbors)->Arg(2000)->Arg(20000)->Unit(benchmark::kMillisecond)->UseRealTime();

// --- Limits of this machine, for the figures above -------------------------------------------

// The model's device, with the model's torch threads set up.
torch::Device ModelDevice() { return Shared().model->parameters().front().device(); }

// Waits for the GPU's queued kernels, so that an iteration times the work and not its launch.
void Synchronize(const torch::Tensor& tensor) {
  if (tensor.is_cuda()) torch::cuda::synchronize(tensor.device().index());
}

// float32 GEMM [m x k] x [k x n] on the model's device and threads. Shapes: the model's merge
// layer at 2,000 pairs (4000 x 200 x 100) and a large square one (near peak).
void BM_Gemm(benchmark::State& state) {
  const int64_t m = state.range(0), k = state.range(1), n = state.range(2);
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(ModelDevice());
  const torch::Tensor a = torch::randn({m, k}, options), b = torch::randn({k, n}, options);
  torch::Tensor c = torch::empty({m, n}, options);
  for (auto _ : state) {
    torch::mm_out(c, a, b);
    Synchronize(c);
  }
  state.counters["flop_per_s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * k * n) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gemm)
    ->Args({4000, 200, 100})
    ->Args({2048, 2048, 2048})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Memory bandwidth of a random row gather, the access pattern of memory and neighbour lookups:
// 200,000 rows of 100 floats out of a table of 1,000,000 (400 MB), bytes read + written.
void BM_Gather(benchmark::State& state) {
  const auto options = torch::TensorOptions().device(ModelDevice());
  const int64_t rows = 1000000, picked = 200000, width = 100;
  const torch::Tensor table = torch::randn({rows, width}, options.dtype(torch::kFloat32));
  const torch::Tensor index = torch::randint(rows, {picked}, options.dtype(torch::kInt64));
  torch::Tensor out = torch::empty({picked, width}, options.dtype(torch::kFloat32));
  for (auto _ : state) {
    torch::index_select_out(out, table, 0, index);
    Synchronize(out);
  }
  state.counters["bytes_per_s"] = benchmark::Counter(
      2.0 * static_cast<double>(picked * width * 4) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Gather)->Unit(benchmark::kMillisecond)->UseRealTime();

// Time encodings of one 1,000-candidate TopK pass (10,000 neighbour deltas x 100 dims) on the
// model's device: the model's own encoding (the fused kernel on CPUs), and torch's float64
// expression it replaced there (still the CUDA path).
void BM_TimeEncoding(benchmark::State& state) {
  const bool torch_expression = state.range(0) == 1;
  const torch::Device device = ModelDevice();
  tlp::model::TimeEncoding encoding(100);
  encoding->to(device);
  const torch::Tensor omega = encoding->named_buffers()["omega"];
  const torch::Tensor deltas =
      torch::rand({1000, 10}, torch::TensorOptions().dtype(torch::kFloat64).device(device)) * 1e6;
  torch::NoGradGuard no_grad;
  for (auto _ : state) {
    const torch::Tensor encoded = torch_expression
                                      ? torch::cos(deltas.unsqueeze(-1) * omega).to(torch::kFloat32)
                                      : encoding->forward(deltas);
    Synchronize(encoded);
  }
  state.counters["cosines_per_s"] = benchmark::Counter(
      1e6 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TimeEncoding)
    ->ArgName("torch_float64")
    ->Arg(0)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  tlp::UseBestBlasKernels(argv);
  tlp::KeepLargeAllocationsInHeap();
  benchmark::AddCustomContext("blas_core", tlp::BlasCoreName());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
