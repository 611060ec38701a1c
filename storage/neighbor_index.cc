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
                             uint32_t feature_dim, size_t cache_slots, uint32_t epoch_bits)
    : db_(db),
      adjacency_(adjacency),
      events_(events),
      cached_per_node_(std::max<uint32_t>(cached_per_node, 1)),
      feature_dim_(feature_dim),
      max_slots_(std::clamp<size_t>(cache_slots, 1, kNoSlot - 1)),
      epoch_bits_(epoch_bits),
      used_(new std::atomic<uint8_t>[max_slots_]) {
  for (size_t slot = 0; slot < max_slots_; ++slot) used_[slot].store(0, std::memory_order_relaxed);
  owner_.reserve(max_slots_);
  floor_.reserve(max_slots_);
  cached_.reserve(max_slots_);
  start_.reserve(max_slots_);
  entries_.reserve(max_slots_ * cached_per_node_);
  features_.reserve(max_slots_ * cached_per_node_ * feature_dim_);
}

NeighborIndex::~NeighborIndex() = default;

size_t NeighborIndex::SlotBytes(uint32_t cached_per_node, uint32_t feature_dim) {
  return cached_per_node * (sizeof(Neighbor) + sizeof(float) * feature_dim) + sizeof(uint64_t) +
         sizeof(double) + 2 * sizeof(uint32_t) + 1;
}

uint32_t NeighborIndex::AppendSlot(uint64_t node, double floor) {
  const auto slot = static_cast<uint32_t>(owner_.size());
  owner_.push_back(node);
  floor_.push_back(floor);
  cached_.push_back(0);
  start_.push_back(0);
  entries_.resize(entries_.size() + cached_per_node_);
  features_.resize(features_.size() + static_cast<size_t>(cached_per_node_) * feature_dim_);
  return slot;
}

void NeighborIndex::ReassignSlot(uint32_t slot, uint64_t node, double floor) {
  nodes_[owner_[slot]].slot = kNoSlot;
  owner_[slot] = node;
  floor_[slot] = floor;
  cached_[slot] = 0;
  start_[slot] = 0;
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
    ReassignSlot(slot, node, floor);
  }
  used_[slot].store(1, std::memory_order_relaxed);
  return slot;
}

void NeighborIndex::Add(uint64_t src, uint64_t dst, double ts, uint64_t sequence,
                        std::span<const float> features) {
  std::unique_lock lock(mutex_);
  const uint32_t epoch = EpochOf(sequence);
  if (!open_epoch_ || open_epoch_->epoch() != epoch) OpenEpoch(epoch);
  AddDirected(src, dst, ts, sequence, features);
  if (src != dst) AddDirected(dst, src, ts, sequence, features);
}

void NeighborIndex::Count(NodeEntry* entry, bool first, double newest_ts, uint32_t epoch,
                          uint64_t rows) {
  entry->degree += rows;
  entry->newest_ts = first ? newest_ts : std::max(entry->newest_ts, newest_ts);
  if (epoch >= epoch_max_ts_.size()) {
    epoch_max_ts_.resize(epoch + 1, -std::numeric_limits<double>::infinity());
  }
  epoch_max_ts_[epoch] = std::max(epoch_max_ts_[epoch], newest_ts);
}

void NeighborIndex::AddDirected(uint64_t node, uint64_t neighbor, double ts, uint64_t sequence,
                                std::span<const float> features) {
  auto [it, inserted] = nodes_.try_emplace(node);
  NodeEntry& entry = it->second;
  const double newest_before = entry.newest_ts;
  const uint32_t epoch = EpochOf(sequence);
  if (entry.newest_epoch != epoch) {
    entry.previous_epoch = entry.newest_epoch;
    entry.newest_epoch = epoch;
  }
  open_epoch_->Add(node, neighbor, ts, sequence, entry.previous_epoch);
  Count(&entry, inserted, ts, epoch, 1);
  if (entry.slot == kNoSlot) {
    // A new node's slot holds its whole history; a returning node's slot only what comes after
    // its newest event so far (everything older is in RocksDB, and may not all fit anyway).
    const double floor = inserted ? -std::numeric_limits<double>::infinity() : newest_before;
    if (ts <= floor) return;
    entry.slot = TakeSlot(node, floor);
  }
  used_[entry.slot].store(1, std::memory_order_relaxed);
  CacheRow(entry.slot, neighbor, ts, sequence, features);
}

void NeighborIndex::CacheRow(uint32_t slot, uint64_t neighbor, double ts, uint64_t sequence,
                             std::span<const float> features) {
  if (ts <= floor_[slot]) return;  // older than the slot covers: only RocksDB keeps it
  const size_t capacity = cached_per_node_;
  Neighbor* cells = entries_.data() + slot * capacity;
  float* feature_cells = features_.data() + slot * capacity * feature_dim_;
  uint32_t& count = cached_[slot];
  // Keep ascending (ts, sequence); events arrive almost sorted, so the insertion point is at or
  // near the end. When full, the oldest row falls out: the ring turns by one, and its cell is
  // the newest row's.
  const Neighbor incoming{neighbor, ts, sequence};
  size_t position = count;  // logical row before which `incoming` goes
  while (position > 0 && incoming.Before(cells[CellOf(slot, position - 1)])) --position;
  if (count == capacity) {
    if (position == 0) return;  // older than everything cached: only RocksDB keeps it
    start_[slot] = static_cast<uint32_t>(CellOf(slot, 1));
    --position;
  } else {
    ++count;
  }
  // Rows after the insertion point move up by one (none when it is at the end, the usual case).
  for (size_t row = count - 1; row > position; --row) {
    const size_t to = CellOf(slot, row), from = CellOf(slot, row - 1);
    cells[to] = cells[from];
    std::copy_n(feature_cells + from * feature_dim_, feature_dim_,
                feature_cells + to * feature_dim_);
  }
  const size_t cell = CellOf(slot, position);
  cells[cell] = incoming;
  if (feature_dim_ > 0)
    std::copy(features.begin(), features.end(), feature_cells + cell * feature_dim_);
}

void NeighborIndex::OpenEpoch(uint32_t epoch) {
  if (open_epoch_ && !open_epoch_->empty()) closed_epochs_.push_back(std::move(open_epoch_));
  uint64_t first = std::max(uint64_t{epoch} << epoch_bits_, sealed_through_ + 1);
  if (!closed_epochs_.empty()) first = std::max(first, closed_epochs_.back()->last_sequence() + 1);
  // An epoch of 2^bits events has up to twice as many rows; reserved so that its rows are not
  // copied while it grows (pages are only touched as rows come).
  const size_t expected = std::min(size_t{2} << epoch_bits_, size_t{1} << 23);
  open_epoch_ = std::make_shared<EpochRows>(epoch, first, expected);
}

const EpochRows* NeighborIndex::MemoryEpoch(uint32_t epoch) const {
  if (open_epoch_ && open_epoch_->epoch() == epoch) return open_epoch_.get();
  for (const auto& rows : closed_epochs_) {
    if (rows->epoch() == epoch) return rows.get();
  }
  return nullptr;
}

std::shared_ptr<const EpochRows> NeighborIndex::OldestClosedEpoch() const {
  std::shared_lock lock(mutex_);
  return closed_epochs_.empty() ? nullptr : closed_epochs_.front();
}

void NeighborIndex::CloseOpenEpoch() {
  std::unique_lock lock(mutex_);
  if (open_epoch_ && !open_epoch_->empty()) closed_epochs_.push_back(std::move(open_epoch_));
  open_epoch_.reset();
}

void NeighborIndex::DropSealedEpoch(const EpochRows* rows) {
  std::unique_lock lock(mutex_);
  if (closed_epochs_.empty() || closed_epochs_.front().get() != rows) return;
  sealed_through_ = rows->last_sequence();
  closed_epochs_.pop_front();
  ++drops_;
}

size_t NeighborIndex::UnsealedBytes() const {
  std::shared_lock lock(mutex_);
  size_t bytes = open_epoch_ ? open_epoch_->MemoryBytes() : 0;
  for (const auto& rows : closed_epochs_) bytes += rows->MemoryBytes();
  return bytes;
}

double NeighborIndex::MaxTsOf(uint32_t epoch) const {
  std::shared_lock lock(mutex_);
  return epoch < epoch_max_ts_.size() ? epoch_max_ts_[epoch]
                                      : std::numeric_limits<double>::infinity();
}

Status NeighborIndex::Rebuild(uint64_t* sealed_through) {
  std::unique_lock lock(mutex_);
  open_epoch_.reset();
  closed_epochs_.clear();
  sealed_through_ = 0;
  nodes_.clear();
  epoch_max_ts_.clear();
  owner_.clear();
  floor_.clear();
  cached_.clear();
  start_.clear();
  entries_.clear();
  features_.clear();
  clock_hand_ = 0;
  // One pass in key order: epoch by epoch, so roughly in the order the rows were written, and
  // within an epoch a node's rows are one contiguous group. Per group one map update (degree,
  // newest ts, epochs) and its rows go to the node's slot as a write would put them, except that
  // slots go to the nodes whose newest ts is the newest (those lookups at "now" ask for),
  // through a min-heap of the slot holders' newest ts, instead of CLOCK order: in key order
  // CLOCK would favour the highest node ids of the last epoch. A holder's heap entry may lag
  // its node's newest ts (kept per slot, as it only grows); it is refreshed when it comes to the
  // top.
  using Holder = std::pair<double, uint32_t>;  // newest ts of the slot's node, slot
  std::priority_queue<Holder, std::vector<Holder>, std::greater<>> holders;
  std::vector<double> slot_newest;  // per slot: its node's newest ts
  auto slot_for = [&](uint64_t node, NodeEntry& entry, double floor) -> uint32_t {
    if (entry.slot != kNoSlot) {
      slot_newest[entry.slot] = entry.newest_ts;
      return entry.slot;
    }
    uint32_t slot;
    if (owner_.size() < max_slots_) {
      slot = AppendSlot(node, floor);
      slot_newest.push_back(entry.newest_ts);
    } else {
      while (slot_newest[holders.top().second] != holders.top().first) {
        const uint32_t stale = holders.top().second;
        holders.pop();
        holders.emplace(slot_newest[stale], stale);
      }
      if (!(holders.top().first < entry.newest_ts)) return kNoSlot;
      slot = holders.top().second;
      holders.pop();
      ReassignSlot(slot, node, floor);
      slot_newest[slot] = entry.newest_ts;
    }
    holders.emplace(entry.newest_ts, slot);
    entry.slot = slot;
    used_[slot].store(1, std::memory_order_relaxed);
    return slot;
  };
  // A group's rows ascend in (ts, sequence) and mostly follow what its slot holds (earlier
  // epochs): then the slot keeps the newest of both with one move instead of a shift per row.
  // Features are read once the slots are final, below.
  auto cache_group = [&](uint32_t slot, std::span<const Neighbor> rows) {
    while (!rows.empty() && rows.front().ts <= floor_[slot]) rows = rows.subspan(1);
    if (rows.empty()) return;
    Neighbor* cached = entries_.data() + static_cast<size_t>(slot) * cached_per_node_;
    uint32_t& count = cached_[slot];
    // In order, as the moves below assume (features are not read yet, so only the rows turn).
    std::rotate(cached, cached + start_[slot], cached + count);
    start_[slot] = 0;
    const Neighbor& last = cached[count > 0 ? count - 1 : 0];
    if (count > 0 && rows.front().Before(last)) {
      for (const Neighbor& row : rows) CacheRow(slot, row.node, row.ts, row.sequence, {});
      return;
    }
    const size_t taken = std::min<size_t>(rows.size(), cached_per_node_);
    const size_t kept = std::min<size_t>(count, cached_per_node_ - taken);
    std::move(cached + count - kept, cached + count, cached);
    std::copy(rows.end() - taken, rows.end(), cached + kept);
    count = static_cast<uint32_t>(kept + taken);
  };
  std::vector<Neighbor> group;  // rows of the current (epoch, node), ascending
  uint64_t group_node = 0;
  uint32_t group_epoch = 0, group_previous = kNoEpoch;
  auto finish_group = [&]() {
    if (group.empty()) return;
    auto [it, inserted] = nodes_.try_emplace(group_node);
    NodeEntry& entry = it->second;
    // A slot taken now holds what comes after the rows seen so far, like one taken by a write.
    const double floor = inserted ? -std::numeric_limits<double>::infinity() : entry.newest_ts;
    entry.newest_epoch = group_epoch;
    entry.previous_epoch = group_previous;
    Count(&entry, inserted, group.back().ts, group_epoch, group.size());  // rows ascend in ts
    const uint32_t slot = slot_for(group_node, entry, floor);
    if (slot != kNoSlot) cache_group(slot, group);
    group.clear();
  };
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), adjacency_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key();
    const rocksdb::Slice value = it->value();
    if (key.size() != kAdjacencyKeySize || value.size() != kAdjacencyValueSize) {
      return Status::Corruption("adjacency entry with a bad key or value size");
    }
    const std::string_view key_view(key.data(), key.size());
    const uint64_t node = AdjacencyKey::Node(key_view);
    const uint32_t epoch = AdjacencyKey::Epoch(key_view);
    if (group.empty() || node != group_node || epoch != group_epoch) {
      finish_group();
      group_node = node;
      group_epoch = epoch;
      group_previous = AdjacencyValue::PreviousEpoch({value.data(), value.size()});
    }
    group.push_back({AdjacencyValue::Neighbor({value.data(), value.size()}),
                     AdjacencyKey::Ts(key_view), AdjacencyKey::Sequence(key_view)});
    sealed_through_ = std::max(sealed_through_, group.back().sequence);
  }
  if (!it->status().ok()) return Status::IoError(it->status().ToString());
  finish_group();
  *sealed_through = sealed_through_;
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
  const Neighbor* cells = entries_.data() + static_cast<size_t>(slot) * cached_per_node_;
  const uint32_t count = cached_[slot];
  // Rows [0, available) of the slot have ts < before.
  size_t available = 0;
  for (size_t high = count; available < high;) {
    const size_t middle = available + (high - available) / 2;
    if (cells[CellOf(slot, middle)].ts < before) {
      available = middle + 1;
    } else {
      high = middle;
    }
  }
  const bool complete_history =
      it->second.degree == count && floor_[slot] == -std::numeric_limits<double>::infinity();
  if (available < k && !complete_history) return false;
  const size_t taken = std::min(available, k);
  Neighbor* target = out->neighbors.data() + row * k;
  const float* feature_cells =
      features_.data() + static_cast<size_t>(slot) * cached_per_node_ * feature_dim_;
  for (size_t i = 0; i < taken; ++i) {
    const size_t cell = CellOf(slot, available - 1 - i);
    target[i] = cells[cell];
    std::copy_n(feature_cells + cell * feature_dim_, feature_dim_,
                out->features.data() + (row * k + i) * feature_dim_);
  }
  out->counts[row] = static_cast<uint32_t>(taken);
  return true;
}

Status NeighborIndex::FromTable(rocksdb::Iterator* it, uint64_t node, uint32_t epoch, double before,
                                size_t k, uint64_t below, std::vector<Neighbor>* found,
                                uint32_t* previous) const {
  const AdjacencyKey start(epoch, node, before, 0);
  const std::string_view group = AdjacencyKey::Group(start.view());
  auto in_group = [&]() {
    return it->Valid() && AdjacencyKey::Group({it->key().data(), it->key().size()}) == group;
  };
  // The first key at or after (epoch, node, before, 0); the entry just before it is the newest
  // with ts < before. Any row of the group names the epoch before it.
  it->Seek(start.view());
  if (in_group())
    *previous = AdjacencyValue::PreviousEpoch({it->value().data(), it->value().size()});
  if (it->Valid()) {
    it->Prev();
  } else {
    it->SeekToLast();
  }
  for (size_t taken = 0; in_group() && taken < k; it->Prev()) {
    const std::string_view key(it->key().data(), it->key().size());
    const std::string_view value(it->value().data(), it->value().size());
    *previous = AdjacencyValue::PreviousEpoch(value);
    const uint64_t sequence = AdjacencyKey::Sequence(key);
    if (sequence >= below) continue;  // also in memory (sealed while this lookup ran)
    found->push_back({AdjacencyValue::Neighbor(value), AdjacencyKey::Ts(key), sequence});
    ++taken;
  }
  if (!it->status().ok()) return Status::IoError(it->status().ToString());
  return Status::Ok();
}

Status NeighborIndex::FromStore(uint64_t node, double before, size_t k, size_t row,
                                NeighborLists* out) const {
  uint32_t epoch;
  {
    std::shared_lock lock(mutex_);
    const auto found = nodes_.find(node);
    epoch = found == nodes_.end() ? kNoEpoch : found->second.newest_epoch;
  }
  // Newest epoch first: in each, the node's rows before `before`, from memory while the epoch
  // is not sealed, else from one RocksDB seek. Late events can make an epoch hold rows older
  // than the next older epoch's, so the walk goes on while that epoch's newest ts could beat
  // the k-th found (sequences of older epochs are smaller, so an equal ts cannot).
  thread_local std::vector<Neighbor> found;
  found.clear();
  std::unique_ptr<rocksdb::Iterator> it;
  uint64_t iterator_drops = 0;
  auto newest_first = [](const Neighbor& a, const Neighbor& b) { return b.Before(a); };
  while (epoch != kNoEpoch && k > 0) {
    const size_t newer = found.size();
    uint32_t previous = kNoEpoch;
    bool in_memory = false;
    // The epoch's rows from this sequence on are in memory, the ones before it in RocksDB.
    uint64_t memory_from = std::numeric_limits<uint64_t>::max();
    uint64_t drops;
    {
      std::shared_lock lock(mutex_);
      if (const EpochRows* rows = MemoryEpoch(epoch)) {
        memory_from = rows->first_sequence();
        in_memory = rows->Collect(node, before, &found, &previous);
      }
      drops = drops_;
    }
    if (memory_from > uint64_t{epoch} << epoch_bits_) {
      // An iterator sees RocksDB as it was when made: remake it if an epoch left memory since,
      // or that epoch, ingested after it, would be missed.
      if (!it || iterator_drops != drops) {
        iterator_drops = drops;
        it.reset(db_->NewIterator(rocksdb::ReadOptions(), adjacency_));
      }
      uint32_t stored_previous = kNoEpoch;
      Status status =
          FromTable(it.get(), node, epoch, before, k, memory_from, &found, &stored_previous);
      if (!status.ok()) return status;
      if (!in_memory) previous = stored_previous;
    }
    if (found.size() > newer) {
      const size_t kept = std::min(found.size(), k);
      std::partial_sort(found.begin(), found.begin() + kept, found.end(), newest_first);
      found.resize(kept);
    }
    if (previous == kNoEpoch) break;
    if (found.size() == k && !(MaxTsOf(previous) > found.back().ts)) break;
    epoch = previous;
  }
  Neighbor* target = out->neighbors.data() + row * k;
  const size_t taken = found.size();
  std::copy(found.begin(), found.end(), target);
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
