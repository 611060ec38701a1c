// Durable append throughput and k-most-recent lookup latency of the RocksDB temporal store,
// on the bundled Wikipedia stream. Each append benchmark writes into a fresh store in /tmp.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <random>

#include "common/event_reader.h"
#include "storage/temporal_store.h"

namespace {

const tlp::EventBatch& Wikipedia() {
  static const tlp::EventBatch events = [] {
    tlp::EventBatch batch;
    const char* root = std::getenv("TLP_SOURCE_DIR");
    const tlp::Status status = tlp::EventReader::ReadAll(
        std::string(root ? root : ".") + "/data/wikipedia.csv.gz", &batch);
    if (!status.ok()) throw std::runtime_error(status.ToString());
    return batch;
  }();
  return events;
}

std::string FreshDir(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("tlp_bench_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  return dir.string();
}

// Args: batch size, sync (1 = fsync every batch).
void BM_Append(benchmark::State& state) {
  const tlp::EventBatch& events = Wikipedia();
  const auto batch_size = static_cast<size_t>(state.range(0));
  tlp::storage::StoreOptions options;
  options.sync = state.range(1) != 0;
  const std::string dir = FreshDir("append");
  std::unique_ptr<tlp::storage::TemporalStore> store;
  if (!tlp::storage::TemporalStore::Open(dir, options, &store).ok()) {
    state.SkipWithError("open failed");
    return;
  }
  tlp::EventBatch batch;
  tlp::storage::AppendResult result;
  size_t position = 0;
  double time_offset = 0;
  int64_t appended = 0;
  for (auto _ : state) {
    state.PauseTiming();
    batch.Clear();
    for (size_t i = 0; i < batch_size; ++i) {
      if (position == events.size()) {
        position = 0;
        time_offset += events.ts.back();
      }
      batch.Add(events.src[position], events.dst[position], events.ts[position] + time_offset);
      ++position;
    }
    state.ResumeTiming();
    if (!store->Append(batch, &result).ok()) state.SkipWithError("append failed");
    appended += static_cast<int64_t>(batch_size);
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(appended), benchmark::Counter::kIsRate);
  store.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Append)
    ->ArgsProduct({{1, 100, 1000, 10000}, {0, 1}})
    ->ArgNames({"batch", "sync"})
    ->UseRealTime()
    ->MinTime(1.0);

// Lookups of the 10 most recent neighbours "now" (served by the in-memory cache) and at a
// random past time (often a RocksDB reverse seek).
void BM_Recent(benchmark::State& state) {
  static std::unique_ptr<tlp::storage::TemporalStore> store;
  static const std::string dir = FreshDir("recent");
  const tlp::EventBatch& events = Wikipedia();
  if (!store) {
    tlp::storage::StoreOptions options;
    options.sync = false;
    if (!tlp::storage::TemporalStore::Open(dir, options, &store).ok()) {
      state.SkipWithError("open failed");
      return;
    }
    tlp::storage::AppendResult result;
    tlp::EventBatch batch;
    for (size_t begin = 0; begin < events.size(); begin += 10000) {
      batch.Clear();
      for (size_t i = begin; i < std::min(events.size(), begin + 10000); ++i) {
        batch.Add(events.src[i], events.dst[i], events.ts[i]);
      }
      store->Append(batch, &result);
    }
  }
  const bool past = state.range(0) != 0;
  std::mt19937_64 random(1);
  tlp::storage::NeighborLists lists;
  for (auto _ : state) {
    const size_t i = random() % events.size();
    const uint64_t node = events.src[i];
    const double before = past ? events.ts[i] : 1e18;
    benchmark::DoNotOptimize(store->neighbors().RecentBatch({&node, 1}, {&before, 1}, 10, &lists));
  }
  state.counters["cache_hit_ratio"] =
      static_cast<double>(store->neighbors().cache_hits()) /
      static_cast<double>(store->neighbors().cache_hits() + store->neighbors().cache_misses());
}
BENCHMARK(BM_Recent)->Arg(0)->Arg(1)->ArgName("past")->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
