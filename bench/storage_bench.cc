// Durable append throughput and k-most-recent lookup latency of the RocksDB temporal store,
// on the bundled Wikipedia stream. Each append benchmark writes into a fresh store in /tmp.
#include <benchmark/benchmark.h>
#include <rocksdb/db.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include "common/event_reader.h"
#include "storage/epoch_rows.h"
#include "storage/event_codec.h"
#include "storage/key_encoding.h"
#include "storage/neighbor_index.h"
#include "storage/node_state_file.h"
#include "storage/rocksdb_options.h"
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

// Events [first, first + count) of Wikipedia repeated without end: each repetition is shifted
// by the stream's span so that time keeps ascending; ids "wikipedia.csv.gz:<index>" when asked.
void EndlessWikipedia(uint64_t first, size_t count, bool ids, tlp::EventBatch* batch) {
  const tlp::EventBatch& events = Wikipedia();
  batch->Clear();
  for (uint64_t index = first; index < first + count; ++index) {
    const size_t position = index % events.size();
    const double ts =
        events.ts[position] + static_cast<double>(index / events.size()) * events.ts.back();
    if (ids) {
      batch->Add(events.src[position], events.dst[position], ts, {},
                 "wikipedia.csv.gz:" + std::to_string(index));
    } else {
      batch->Add(events.src[position], events.dst[position], ts);
    }
  }
}

// Args: batch size, sync (1 = fsync every batch), ids (1 = every event carries an event id, as
// tlpctl ingest sends them: one more lookup and one more key per event).
void BM_Append(benchmark::State& state) {
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
  int64_t appended = 0;
  for (auto _ : state) {
    state.PauseTiming();
    EndlessWikipedia(static_cast<uint64_t>(appended), batch_size, state.range(2) != 0, &batch);
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
    ->ArgsProduct({{1, 100, 1000, 10000}, {0, 1}, {0}})
    ->Args({10000, 0, 1})
    ->Args({10000, 1, 1})
    ->ArgNames({"batch", "sync", "ids"})
    ->UseRealTime()
    ->MinTime(1.0);

// The limit for BM_Append: RocksDB alone, with the store's own options, writing the store's own
// keys and values per event (event log and event id; encoded with storage/key_encoding.h and
// storage/event_codec.h, the values before the clock runs) in one WriteBatch of 10,000 events
// with fsync, and nothing else: no validation, no duplicate lookup, no neighbour index (whose
// rows reach RocksDB an epoch at a time, BM_SealEpoch).
void BM_RawWriteBatch(benchmark::State& state) {
  constexpr size_t kBatch = 10000;
  const std::string dir = FreshDir("raw");
  rocksdb::Options options =
      tlp::storage::DatabaseOptions(tlp::storage::StoreOptions().block_cache_bytes);
  options.create_if_missing = true;
  options.create_missing_column_families = true;
  std::vector<rocksdb::ColumnFamilyDescriptor> families;
  for (const char* name : {"default", "events", "event_ids"}) {
    families.emplace_back(name, tlp::storage::FamilyOptions(options, name));
  }
  std::vector<rocksdb::ColumnFamilyHandle*> handles;
  rocksdb::DB* raw = nullptr;
  if (!rocksdb::DB::Open(options, dir, families, &handles, &raw).ok()) {
    state.SkipWithError("open failed");
    return;
  }
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::WriteOptions sync;
  sync.sync = true;
  tlp::EventBatch events;
  std::vector<std::string> values(kBatch);
  uint64_t sequence = 0;
  for (auto _ : state) {
    state.PauseTiming();
    EndlessWikipedia(sequence, kBatch, true, &events);
    for (size_t i = 0; i < kBatch; ++i) {
      values[i].clear();
      tlp::storage::EncodeEvent(events.src[i], events.dst[i], events.ts[i], {}, events.event_ids[i],
                                tlp::EventBatch::kNoStateLabel, &values[i]);
    }
    rocksdb::WriteBatch batch;
    state.ResumeTiming();
    for (size_t i = 0; i < kBatch; ++i) {
      const uint64_t event_sequence = sequence + 1 + i;
      const tlp::storage::SequenceKey key(event_sequence);
      batch.Put(handles[1], key.view(), values[i]);
      batch.Put(handles[2], events.event_ids[i], key.view());
    }
    if (!db->Write(sync, &batch).ok()) state.SkipWithError("write failed");
    sequence += kBatch;
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(kBatch) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  for (rocksdb::ColumnFamilyHandle* handle : handles) db->DestroyColumnFamilyHandle(handle);
  db.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_RawWriteBatch)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);

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
      if (!store->Append(batch, &result).ok()) {
        state.SkipWithError("append failed");
        return;
      }
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

// Endpoints of the scale run's shape (bench/scale.sh): sources uniform over `sources` nodes,
// destinations from 10,000 (ids after the sources) with a power law.
class ScaleRunEndpoints {
 public:
  explicit ScaleRunEndpoints(uint64_t sources) : sources_(sources) {}
  std::pair<uint64_t, uint64_t> Next() {
    const uint64_t src = random_() % sources_;
    return {src, sources_ + static_cast<uint64_t>(rank_(random_)) % 10000};
  }

 private:
  const uint64_t sources_;
  std::mt19937_64 random_{1};
  std::exponential_distribution<double> rank_{1.0 / 300.0};
};

// Sealing one adjacency epoch (TemporalStore: the rows of 2^bits events, held in memory while
// the epoch is open, written as one sorted table file): `events` events of the scale run's shape
// (sources drawn from `sources` nodes, destinations from 10,000 with a power law), two rows
// each, built before the clock runs; timed: sorting the nodes, walking each node's rows and
// writing the file with the adjacency family's options (LZ4, XXH3). Ingesting the file is a
// rename. Args: events, sources.
void BM_SealEpoch(benchmark::State& state) {
  const auto events = static_cast<uint64_t>(state.range(0));
  const auto sources = static_cast<uint64_t>(state.range(1));
  const std::string dir = FreshDir("seal");
  std::filesystem::create_directories(dir);
  tlp::storage::EpochRows rows(0, 1, 2 * events);
  ScaleRunEndpoints endpoints(sources);
  for (uint64_t sequence = 1; sequence <= events; ++sequence) {
    const auto [src, dst] = endpoints.Next();
    const double ts = static_cast<double>(sequence);
    rows.Add(src, dst, ts, sequence, tlp::storage::kNoEpoch);
    rows.Add(dst, src, ts, sequence, tlp::storage::kNoEpoch);
  }
  rocksdb::Options options =
      tlp::storage::DatabaseOptions(tlp::storage::StoreOptions().block_cache_bytes);
  options = rocksdb::Options(options, tlp::storage::FamilyOptions(options, "adjacency"));
  for (auto _ : state) {
    if (!rows.WriteTable(options, dir + "/epoch.sst").ok()) state.SkipWithError("write failed");
    state.PauseTiming();
    state.counters["file_mb"] =
        static_cast<double>(std::filesystem::file_size(dir + "/epoch.sst")) / 1e6;
    std::filesystem::remove(dir + "/epoch.sst");
    state.ResumeTiming();
  }
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows.size()) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["memory_mb"] = static_cast<double>(rows.MemoryBytes()) / 1e6;
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_SealEpoch)
    ->Args({1 << 22, 10000000})
    ->ArgNames({"events", "sources"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(5.0);

// The ingest writer's part of the neighbour index, NeighborIndex::Add (per event and direction:
// the node's entry, a row in the open epoch, a row in the node's cache slot), at the scale
// run's shape with a full cache of the default size (1 GiB, ~1.4M slots; filled before the
// clock runs), 2^20 events an iteration. Add reads no RocksDB, so the index is given none here;
// the epochs it closes are dropped outside the clock, as sealing would. Its cost is mostly cache
// and TLB misses at random slots, so it depends on huge pages (compare THP "madvise" with
// "never" in /sys/kernel/mm/transparent_hugepage/enabled). Args: sources.
void BM_NeighborAdd(benchmark::State& state) {
  constexpr size_t kEvents = 1 << 20, kDistinct = size_t{4} << 20;
  const tlp::storage::StoreOptions defaults;
  tlp::storage::NeighborIndex index(
      nullptr, nullptr, nullptr, defaults.cached_neighbors, 0,
      defaults.neighbor_cache_bytes /
          tlp::storage::NeighborIndex::SlotBytes(defaults.cached_neighbors, 0),
      defaults.adjacency_epoch_bits);
  ScaleRunEndpoints endpoints(static_cast<uint64_t>(state.range(0)));
  std::vector<std::pair<uint64_t, uint64_t>> pairs(kDistinct);
  for (auto& pair : pairs) pair = endpoints.Next();
  uint64_t sequence = 0;
  const auto add = [&](size_t count) {
    for (size_t i = 0; i < count; ++i, ++sequence) {
      const auto [src, dst] = pairs[sequence % kDistinct];
      index.Add(src, dst, static_cast<double>(sequence), sequence + 1, {});
    }
  };
  add(kDistinct);
  for (auto _ : state) {
    add(kEvents);
    state.PauseTiming();
    while (const auto rows = index.OldestClosedEpoch()) index.DropSealedEpoch(rows.get());
    state.ResumeTiming();
  }
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(kEvents) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_NeighborAdd)
    ->Arg(10000000)
    ->ArgName("sources")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(5.0);

// One node memory checkpoint into a node state file already holding `stored` nodes: `changed`
// distinct nodes drawn uniformly, rows of the default memory width (100 floats), journalled and
// written in place (Prepare + Publish, as TemporalStore::SaveNodeStates does). At scale the
// changed rows are scattered over the slots, so each is a write of its own and, with sync, each
// dirties a page of its own for fdatasync to write back (issue #11: ~400k changed nodes per 1M
// events at 10M nodes). The CPU column includes the kernel's time in the calling thread.
// Args: stored nodes, changed nodes, sync.
void BM_NodeStateCheckpoint(benchmark::State& state) {
  constexpr uint32_t kDim = 100;
  const auto stored = static_cast<uint64_t>(state.range(0));
  const auto changed = static_cast<size_t>(state.range(1));
  const std::string dir = FreshDir("node_states");
  std::unique_ptr<tlp::storage::NodeStateFile> file;
  if (!tlp::storage::NodeStateFile::Open(dir, {}, state.range(2) != 0, &file).ok()) {
    state.SkipWithError("open failed");
    return;
  }
  tlp::storage::NodeStates states;
  auto fill = [&](auto&& node_at, size_t count) {
    states.Clear(kDim);
    for (size_t i = 0; i < count; ++i) {
      states.nodes.push_back(node_at(i));
      states.last_update_ts.push_back(static_cast<double>(i));
    }
    states.memory.assign(count * kDim, 0.5f);
  };
  auto checkpoint = [&] {
    tlp::storage::NodeStateCommit next;
    return file->Prepare(states, &next).ok() && file->Publish(states, next).ok();
  };
  // The stored nodes, written as checkpoints of new nodes.
  constexpr uint64_t kSetupChunk = 1 << 20;
  for (uint64_t first = 0; first < stored; first += kSetupChunk) {
    fill([first](size_t i) { return first + i; }, std::min(kSetupChunk, stored - first));
    if (!checkpoint()) {
      state.SkipWithError("setup checkpoint failed");
      return;
    }
  }
  std::mt19937_64 random(1);
  std::vector<uint64_t> nodes(stored);
  std::iota(nodes.begin(), nodes.end(), uint64_t{0});
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < changed; ++i) std::swap(nodes[i], nodes[i + random() % (stored - i)]);
    fill([&nodes](size_t i) { return nodes[i]; }, changed);
    state.ResumeTiming();
    if (!checkpoint()) state.SkipWithError("checkpoint failed");
  }
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(changed) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  file.reset();
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_NodeStateCheckpoint)
    ->Args({10000000, 400000, 1})
    ->Args({10000000, 400000, 0})
    ->ArgNames({"stored", "changed", "sync"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(5.0);

}  // namespace

BENCHMARK_MAIN();
