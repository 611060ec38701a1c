// The RocksDB tuning of the temporal store, in one place: the store opens with it, and
// storage_bench measures RocksDB's raw write limit with the very same settings.
#pragma once

#include <rocksdb/options.h>

#include <cstddef>
#include <string>

namespace tlp::storage {

// Database-wide options (create flags off; the store sets them when it creates a store), with
// one block cache of `block_cache_bytes` that every column family's table reads share.
rocksdb::Options DatabaseOptions(size_t block_cache_bytes);

// Options of the column family `name` ("events", "adjacency", "event_ids", ...) on top of `base`.
rocksdb::ColumnFamilyOptions FamilyOptions(const rocksdb::Options& base, const std::string& name);

}  // namespace tlp::storage
