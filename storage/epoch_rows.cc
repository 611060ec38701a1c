#include "storage/epoch_rows.h"

#include <rocksdb/env.h>
#include <rocksdb/options.h>
#include <rocksdb/sst_file_writer.h>

#include <algorithm>
#include <utility>

#include "storage/key_encoding.h"

namespace tlp::storage {

EpochRows::EpochRows(uint32_t epoch, uint64_t first_sequence, size_t expected_rows)
    : epoch_(epoch), first_sequence_(first_sequence), last_sequence_(first_sequence - 1) {
  rows_.reserve(expected_rows);
}

size_t EpochRows::MemoryBytes() const {
  return rows_.capacity() * sizeof(Row) + heads_.capacity() * (sizeof(uint64_t) + sizeof(Head));
}

void EpochRows::Add(uint64_t node, uint64_t neighbor, double ts, uint64_t sequence,
                    uint32_t previous_epoch) {
  const uint64_t row = rows_.size();
  auto [it, inserted] = heads_.try_emplace(node, Head{kNoRow, previous_epoch});
  rows_.push_back(Row{neighbor, ts, sequence, it->second.newest_row});
  it->second.newest_row = row;
  last_sequence_ = sequence;
}

bool EpochRows::Collect(uint64_t node, double before, std::vector<Neighbor>* found,
                        uint32_t* previous_epoch) const {
  const auto it = heads_.find(node);
  if (it == heads_.end()) return false;
  *previous_epoch = it->second.previous_epoch;
  for (uint64_t row = it->second.newest_row; row != kNoRow; row = rows_[row].previous_row) {
    const Row& r = rows_[row];
    if (r.ts < before) found->push_back({r.neighbor, r.ts, r.sequence});
  }
  return true;
}

Status EpochRows::WriteTable(const rocksdb::Options& options, const std::string& path) const {
  if (rows_.empty()) return Status::Internal("an empty epoch has no table to write");
  std::vector<std::pair<uint64_t, Head>> nodes(heads_.begin(), heads_.end());
  std::sort(nodes.begin(), nodes.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), options);
  rocksdb::Status status = writer.Open(path);
  std::vector<Neighbor> group;  // one node's rows, in key order: ascending (ts, sequence)
  for (const auto& [node, head] : nodes) {
    if (!status.ok()) break;
    group.clear();
    for (uint64_t row = head.newest_row; row != kNoRow; row = rows_[row].previous_row) {
      group.push_back({rows_[row].neighbor, rows_[row].ts, rows_[row].sequence});
    }
    // The chain runs newest sequence first, and ts mostly follows sequence: reversed, it is
    // sorted already but for late events.
    std::reverse(group.begin(), group.end());
    if (!std::is_sorted(group.begin(), group.end(),
                        [](const Neighbor& a, const Neighbor& b) { return a.Before(b); })) {
      std::sort(group.begin(), group.end(),
                [](const Neighbor& a, const Neighbor& b) { return a.Before(b); });
    }
    for (const Neighbor& row : group) {
      const AdjacencyKey key(epoch_, node, row.ts, row.sequence);
      const AdjacencyValue value(row.node, head.previous_epoch);
      status = writer.Put(rocksdb::Slice(key.view().data(), key.view().size()),
                          rocksdb::Slice(value.view().data(), value.view().size()));
      if (!status.ok()) break;
    }
  }
  if (status.ok()) status = writer.Finish();
  if (!status.ok()) {
    return Status::IoError("cannot write the table of adjacency epoch " + std::to_string(epoch_) +
                           " to '" + path + "': " + status.ToString());
  }
  return Status::Ok();
}

}  // namespace tlp::storage
