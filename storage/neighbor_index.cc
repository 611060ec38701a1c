#include "storage/neighbor_index.h"

#include <rocksdb/db.h>

#include <algorithm>
#include <limits>
#include <memory>
#include <mutex>
#include <queue>

#include "storage/event_codec.h"
#include "storage/key_encoding.h"

namespace tlp::storage {

void NeighborLists::Reset(size_t queries, size_t slots, uint32_t dim) {
  k = slots;
  feature_dim = dim;
  neighbors.assign(queries * slots, Neighbor());
  counts.assign(queries, 0);
  features.assign(queries * slots * dim, 0.0f);
}

NeighborIndex::NeighborIndex(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* adjacency,
                             rocksdb::ColumnFamilyHandle* events, uint32_t cached_per_node,
                             uint32_t feature_dim, size_t cache_slots)
    : db_(db),
      adjacency_(adjacency),
      events_(events),
      cached_per_node_(std::max<uint32_t>(cached_per_node, 1)),
      feature_dim_(feature_dim),
      max_slots_(std::clamp<size_t>(cache_slots, 1, kNoSlot - 1)),
      used_(new std::atomic<uint8_t>[max_slots_]) {
  for (size_t slot = 0; slot < max_slots_; ++slot) used_[slot].store(0, std::memory_order_relaxed);
}

NeighborIndex::~NeighborIndex() = default;

size_t NeighborIndex::SlotBytes(uint32_t cached_per_node, uint32_t feature_dim) {
  return cached_per_node * (sizeof(Neighbor) + sizeof(float) * feature_dim) + sizeof(uint64_t) +
         sizeof(double) + sizeof(uint32_t) + 1;
}

uint32_t NeighborIndex::AppendSlot(uint64_t node, double floor) {
  const auto slot = static_cast<uint32_t>(owner_.size());
  owner_.push_back(node);
  floor_.push_back(floor);
  cached_.push_back(0);
  entries_.resize(entries_.size() + cached_per_node_);
  features_.resize(features_.size() + static_cast<size_t>(cached_per_node_) * feature_dim_);
  return slot;
}

uint32_t NeighborIndex::TakeSlot(uint64_t node, double floor) {
  uint32_t slot;
  if (owner_.size() < max_slots_) {
    slot = AppendSlot(node, floor);
  } else {
    // CLOCK: clear used marks until an unused slot comes by; at most one full turn.
    while (used_[clock_hand_].exchange(0, std::memory_order_relaxed) != 0) {
      clock_hand_ = (clock_hand_ + 1) % max_slots_;
    }
    slot = static_cast<uint32_t>(clock_hand_);
    clock_hand_ = (clock_hand_ + 1) % max_slots_;
    nodes_[owner_[slot]].slot = kNoSlot;
    owner_[slot] = node;
    floor_[slot] = floor;
    cached_[slot] = 0;
  }
  used_[slot].store(1, std::memory_order_relaxed);
  return slot;
}

void NeighborIndex::Add(uint64_t src, uint64_t dst, double ts, uint64_t sequence,
                        std::span<const float> features) {
  std::unique_lock lock(mutex_);
  AddDirected(src, dst, ts, sequence, features);
  if (src != dst) AddDirected(dst, src, ts, sequence, features);
}

void NeighborIndex::AddDirected(uint64_t node, uint64_t neighbor, double ts, uint64_t sequence,
                                std::span<const float> features) {
  auto [it, inserted] = nodes_.try_emplace(node);
  NodeEntry& entry = it->second;
  const double newest_before = entry.newest_ts;
  ++entry.degree;
  entry.newest_ts = inserted ? ts : std::max(entry.newest_ts, ts);
  if (entry.slot == kNoSlot) {
    // A new node's slot holds its whole history; a returning node's slot only what comes after
    // its newest event so far (everything older is in RocksDB, and may not all fit anyway).
    const double floor = inserted ? -std::numeric_limits<double>::infinity() : newest_before;
    if (ts <= floor) return;
    entry.slot = TakeSlot(node, floor);
  }
  const uint32_t slot = entry.slot;
  used_[slot].store(1, std::memory_order_relaxed);
  if (ts <= floor_[slot]) return;  // older than the slot covers: only RocksDB keeps it
  const size_t capacity = cached_per_node_;
  Neighbor* row = entries_.data() + slot * capacity;
  float* feature_row = features_.data() + slot * capacity * feature_dim_;
  uint32_t& count = cached_[slot];
  // Keep ascending (ts, sequence); events arrive almost sorted, so the insertion point is at or
  // near the end. When full, the oldest entry falls out.
  size_t position = count;
  while (position > 0 && (row[position - 1].ts > ts ||
                          (row[position - 1].ts == ts && row[position - 1].sequence > sequence))) {
    --position;
  }
  if (count == capacity) {
    if (position == 0) return;  // older than everything cached: only RocksDB keeps it
    std::move(row + 1, row + position, row);
    std::move(feature_row + feature_dim_, feature_row + position * feature_dim_, feature_row);
    --position;
  } else {
    std::move_backward(row + position, row + count, row + count + 1);
    std::move_backward(feature_row + position * feature_dim_, feature_row + count * feature_dim_,
                       feature_row + (count + 1) * feature_dim_);
    ++count;
  }
  row[position] = {neighbor, ts, sequence};
  if (feature_dim_ > 0)
    std::copy(features.begin(), features.end(), feature_row + position * feature_dim_);
}

Status NeighborIndex::Rebuild() {
  std::unique_lock lock(mutex_);
  nodes_.clear();
  owner_.clear();
  floor_.clear();
  cached_.clear();
  entries_.clear();
  features_.clear();
  clock_hand_ = 0;
  // One pass in key order, where each node's rows are contiguous and ascend in (ts, sequence):
  // per row a counter and a ring of the node's newest `cached_per_node_` rows move; per node one
  // map insert; slots go to the nodes active most recently (those that lookups at "now" ask
  // for), through a min-heap of the slot holders' newest ts. Replaying every row through
  // AddDirected gave the slots to the nodes with the highest ids and read every row's event for
  // its features; that replay opened no slower without features (30M generated events: 11.2-11.5 s
  // to SERVING against 12.3-12.7 s now, RocksDB's iteration most of both; the heap ~5 %).
  using Holder = std::pair<double, uint32_t>;  // newest ts of the slot's node, slot
  std::priority_queue<Holder, std::vector<Holder>, std::greater<>> holders;
  std::vector<Neighbor> tail(cached_per_node_);  // ring of the current node's newest rows
  uint64_t node = 0, degree = 0;
  auto finish_node = [&]() {
    if (degree == 0) return;
    const double newest = tail[(degree - 1) % cached_per_node_].ts;
    NodeEntry& entry = nodes_[node];
    entry.degree = degree;
    entry.newest_ts = newest;
    uint32_t slot;
    if (owner_.size() < max_slots_) {
      slot = AppendSlot(node, -std::numeric_limits<double>::infinity());
    } else if (max_slots_ > 0 && holders.top().first < newest) {
      slot = holders.top().second;
      holders.pop();
      nodes_[owner_[slot]].slot = kNoSlot;
      owner_[slot] = node;
    } else {
      return;
    }
    // The slot holds the node's newest rows; like a slot of a node first seen while running, its
    // floor is -inf and the degree tells whether older rows exist.
    entry.slot = slot;
    used_[slot].store(1, std::memory_order_relaxed);
    holders.emplace(newest, slot);
    const uint64_t count = std::min<uint64_t>(degree, cached_per_node_);
    cached_[slot] = static_cast<uint32_t>(count);
    Neighbor* row = entries_.data() + static_cast<size_t>(slot) * cached_per_node_;
    for (uint64_t i = 0; i < count; ++i) row[i] = tail[(degree - count + i) % cached_per_node_];
  };
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), adjacency_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    if (key.size() != kAdjacencyKeySize || it->value().size() != 8) {
      return Status::Corruption("adjacency entry with a bad key or value size");
    }
    const std::string_view key_view(key.data(), key.size());
    const uint64_t row_node = AdjacencyKey::Node(key_view);
    if (row_node != node || degree == 0) {
      finish_node();
      node = row_node;
      degree = 0;
    }
    tail[degree % cached_per_node_] = {GetBigEndian64(it->value().data()),
                                       AdjacencyKey::Ts(key_view),
                                       AdjacencyKey::Sequence(key_view)};
    ++degree;
  }
  if (!it->status().ok()) return Status::IoError(it->status().ToString());
  finish_node();
  if (feature_dim_ == 0) return Status::Ok();
  // Features only of the rows that ended up cached: a slot can change hands during the scan.
  std::vector<float> feature_buffer;
  std::string event_value;
  for (size_t slot = 0; slot < owner_.size(); ++slot) {
    for (uint32_t i = 0; i < cached_[slot]; ++i) {
      const size_t cell = slot * cached_per_node_ + i;
      rocksdb::Status status = db_->Get(rocksdb::ReadOptions(), events_,
                                        SequenceKey(entries_[cell].sequence).view(), &event_value);
      if (!status.ok()) return Status::Corruption("adjacency row without its event");
      DecodedEvent event;
      Status decoded = DecodeEvent(event_value, &feature_buffer, &event);
      if (!decoded.ok()) return decoded;
      std::copy(event.features.begin(), event.features.end(),
                features_.data() + cell * feature_dim_);
    }
  }
  return Status::Ok();
}

bool NeighborIndex::FromCache(uint64_t node, double before, size_t k, size_t row,
                              NeighborLists* out) const {
  std::shared_lock lock(mutex_);
  const auto it = nodes_.find(node);
  if (it == nodes_.end()) return true;  // unknown node: no neighbours, nothing in RocksDB
  const uint32_t slot = it->second.slot;
  if (slot == kNoSlot) return false;
  used_[slot].store(1, std::memory_order_relaxed);
  const Neighbor* entries = entries_.data() + static_cast<size_t>(slot) * cached_per_node_;
  const uint32_t count = cached_[slot];
  const Neighbor* end = std::lower_bound(entries, entries + count, before,
                                         [](const Neighbor& n, double t) { return n.ts < t; });
  const size_t available = end - entries;
  const bool complete_history =
      it->second.degree == count && floor_[slot] == -std::numeric_limits<double>::infinity();
  if (available < k && !complete_history) return false;
  const size_t taken = std::min(available, k);
  Neighbor* target = out->neighbors.data() + row * k;
  for (size_t i = 0; i < taken; ++i) target[i] = *(end - 1 - i);
  out->counts[row] = static_cast<uint32_t>(taken);
  if (feature_dim_ > 0) {
    const float* source =
        features_.data() + static_cast<size_t>(slot) * cached_per_node_ * feature_dim_;
    for (size_t i = 0; i < taken; ++i) {
      const size_t index = (end - entries) - 1 - i;
      std::copy_n(source + index * feature_dim_, feature_dim_,
                  out->features.data() + (row * k + i) * feature_dim_);
    }
  }
  return true;
}

Status NeighborIndex::FromStore(uint64_t node, double before, size_t k, size_t row,
                                NeighborLists* out) const {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), adjacency_));
  // The first key at or after (node, before, 0); the entry just before it is the newest with
  // ts < before.
  it->Seek(AdjacencyKey(node, before, 0).view());
  if (it->Valid()) {
    it->Prev();
  } else {
    it->SeekToLast();
  }
  Neighbor* target = out->neighbors.data() + row * k;
  size_t taken = 0;
  for (; it->Valid() && taken < k; it->Prev()) {
    const std::string_view key(it->key().data(), it->key().size());
    if (AdjacencyKey::Node(key) != node) break;
    target[taken++] = {GetBigEndian64(it->value().data()), AdjacencyKey::Ts(key),
                       AdjacencyKey::Sequence(key)};
  }
  if (!it->status().ok()) return Status::IoError(it->status().ToString());
  out->counts[row] = static_cast<uint32_t>(taken);
  if (feature_dim_ > 0 && taken > 0) {
    std::vector<std::string> keys;
    std::vector<rocksdb::Slice> slices;
    std::vector<rocksdb::ColumnFamilyHandle*> families(taken, events_);
    keys.reserve(taken);
    for (size_t i = 0; i < taken; ++i) {
      keys.emplace_back(SequenceKey(target[i].sequence).view());
      slices.emplace_back(keys.back());
    }
    std::vector<std::string> values;
    const std::vector<rocksdb::Status> statuses =
        db_->MultiGet(rocksdb::ReadOptions(), families, slices, &values);
    std::vector<float> buffer;
    for (size_t i = 0; i < taken; ++i) {
      if (!statuses[i].ok()) return Status::Corruption("adjacency row without its event");
      DecodedEvent event;
      Status decoded = DecodeEvent(values[i], &buffer, &event);
      if (!decoded.ok()) return decoded;
      std::copy(event.features.begin(), event.features.end(),
                out->features.data() + (row * k + i) * feature_dim_);
    }
  }
  return Status::Ok();
}

Status NeighborIndex::RecentBatch(std::span<const uint64_t> nodes, std::span<const double> before,
                                  size_t k, NeighborLists* out) const {
  out->Reset(nodes.size(), k, feature_dim_);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (FromCache(nodes[i], before[i], k, i, out)) {
      cache_hits_.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    cache_misses_.fetch_add(1, std::memory_order_relaxed);
    Status status = FromStore(nodes[i], before[i], k, i, out);
    if (!status.ok()) return status;
  }
  return Status::Ok();
}

Status NeighborIndex::Recent(uint64_t node, double before, size_t k,
                             std::vector<Neighbor>* out) const {
  thread_local NeighborLists lists;
  Status status = RecentBatch({&node, 1}, {&before, 1}, k, &lists);
  out->assign(lists.neighbors.begin(), lists.neighbors.begin() + lists.counts[0]);
  return status;
}

uint64_t NeighborIndex::Degree(uint64_t node) const {
  std::shared_lock lock(mutex_);
  const auto it = nodes_.find(node);
  return it == nodes_.end() ? 0 : it->second.degree;
}

bool NeighborIndex::Known(uint64_t node) const {
  std::shared_lock lock(mutex_);
  return nodes_.contains(node);
}

size_t NeighborIndex::node_count() const {
  std::shared_lock lock(mutex_);
  return nodes_.size();
}

}  // namespace tlp::storage
