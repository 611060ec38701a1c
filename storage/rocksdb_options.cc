#include "storage/rocksdb_options.h"

#include <rocksdb/cache.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>

namespace tlp::storage {
namespace {

// Insert-hint prefix of an event id: the part up to its last ':' when a decimal position follows
// (ids such as tlpctl's "<file>:<position>", or "<producer>:<counter>"), else "" (all other ids
// share one hint). One stream's ids then ascend within their prefix, except where the position
// gains a digit, so their memtable inserts land next to the previous one instead of searching
// the skiplist from the top.
class EventIdStreamPrefix : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "tlp.EventIdStreamPrefix"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    size_t colon = key.size();
    while (colon > 0 && key[colon - 1] >= '0' && key[colon - 1] <= '9') --colon;
    if (colon == key.size() || colon == 0 || key[colon - 1] != ':') return rocksdb::Slice();
    return rocksdb::Slice(key.data(), colon);
  }
  bool InDomain(const rocksdb::Slice&) const override { return true; }
};

// Bloom filters in the memtable and in every table file, for families whose point lookups
// mostly miss: the miss is answered without a skiplist or block search. The table options are
// the database's (checksum, block cache) plus the filter.
void FilterPointLookups(rocksdb::ColumnFamilyOptions* options) {
  options->memtable_prefix_bloom_size_ratio = 0.05;
  options->memtable_whole_key_filtering = true;
  rocksdb::BlockBasedTableOptions table =
      *options->table_factory->GetOptions<rocksdb::BlockBasedTableOptions>();
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options->table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
}

}  // namespace

rocksdb::Options DatabaseOptions(size_t block_cache_bytes) {
  rocksdb::Options options;
  options.create_if_missing = false;
  options.create_missing_column_families = false;
  options.IncreaseParallelism(2);
  options.OptimizeLevelStyleCompaction();
  // LZ4 on the last level only, where ~90 % of the data lives with dynamic level sizes; the
  // levels above it are rewritten again soon, so compressing them cost compaction CPU for little.
  options.compression_per_level.clear();
  options.compression = rocksdb::kNoCompression;
  options.bottommost_compression = rocksdb::kLZ4Compression;
  options.max_total_wal_size = 256 << 20;
  // Level targets sized from the last level up: while the store grows, memtables flush into few
  // levels instead of passing through every level from L1 (RocksDB's default from 8.4 on).
  options.level_compaction_dynamic_level_bytes = true;
  rocksdb::BlockBasedTableOptions table;
  // Block checksums with XXH3 instead of CRC32C: Debian's RocksDB is a portable build whose
  // CRC32C is the software one ("Fast CRC32 supported: Not supported on x86" in its LOG), and
  // every block that compaction reads is verified and every block it writes is summed. Files
  // keep their own checksum type, so stores written with CRC32C still open.
  table.checksum = rocksdb::kXXH3;
  // One cache for all families. RocksDB's default is a private 8 MiB one per table factory, and
  // neighbour lookups beyond their cache then read each adjacency block from a file (a read, a
  // checksum and, on the last level, LZ4) at every miss.
  table.block_cache = rocksdb::NewLRUCache(block_cache_bytes);
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  // One writer (TemporalStore serialises Append), which lets the memtable use insert hints.
  options.allow_concurrent_memtable_write = false;
  return options;
}

// Per column family tuning. Profiling the append path showed ~65 % of its time in memtable
// skiplist searches; keys of the event log ascend, so remembering the last insert position per
// prefix makes most inserts O(1). Adjacency rows take no memtable: each epoch is written as one
// sorted table file and ingested (epoch_rows.h).
rocksdb::ColumnFamilyOptions FamilyOptions(const rocksdb::Options& base, const std::string& name) {
  rocksdb::ColumnFamilyOptions options(base);
  if (name == "events") {
    options.memtable_insert_with_hint_prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(4));
  } else if (name == "event_ids") {
    // Every append looks up all its ids, and nearly all are new: bloom filters in the memtable
    // and in each table file answer those misses without a skiplist or block search.
    options.memtable_insert_with_hint_prefix_extractor = std::make_shared<EventIdStreamPrefix>();
    FilterPointLookups(&options);
    // Several streams' ids interleave, so every L0 file overlaps much of L1 (W-amp 3.5 at L1
    // with the default trigger); the extra L0 files cost lookups a bloom probe each.
    options.level0_file_num_compaction_trigger = 8;
  }
  return options;
}

}  // namespace tlp::storage
