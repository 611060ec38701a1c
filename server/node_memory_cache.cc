#include "server/node_memory_cache.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>

#include "common/stopwatch.h"
#include "model/temporal_model.h"

namespace tlp::server {
namespace {

// Appends state i of `from` to `to`.
void AppendState(const storage::NodeStates& from, size_t i, storage::NodeStates* to) {
  to->nodes.push_back(from.nodes[i]);
  to->last_update_ts.push_back(from.last_update_ts[i]);
  const std::span<const float> memory = from.MemoryOf(i);
  to->memory.insert(to->memory.end(), memory.begin(), memory.end());
}

// Overwrites state i of `to` (sized already) with state `position` of `from`; `found` aside.
void CopyState(const storage::NodeStates& from, size_t position, storage::NodeStates* to,
               size_t i) {
  to->last_update_ts[i] = from.last_update_ts[position];
  const std::span<const float> memory = from.MemoryOf(position);
  std::copy(memory.begin(), memory.end(), to->memory.begin() + i * to->dim);
}

}  // namespace

NodeMemoryCache::NodeMemoryCache(const storage::TemporalStore& store,
                                 model::TemporalLinkModelImpl& model, size_t capacity_rows,
                                 bool store_backed)
    : store_(store),
      model_(model),
      capacity_(std::max<size_t>(capacity_rows, 2)),
      dim_(static_cast<uint32_t>(model.config().memory_dim)),
      has_memory_(model.config().has_memory()),
      store_backed_(store_backed) {
  AddRow();  // row 0: never evicted, never written; its memory stays zero
  evicted_.Clear(dim_);
  model_.EnsureNodes(1);
}

void NodeMemoryCache::BeginOperation() { ++epoch_; }

int64_t NodeMemoryCache::AddRow() {
  node_of_row_.push_back(0);
  occupied_.push_back(0);
  dirty_.push_back(0);
  pending_.push_back(0);
  referenced_.push_back(0);
  epoch_of_row_.push_back(0);
  return static_cast<int64_t>(node_of_row_.size() - 1);
}

int64_t NodeMemoryCache::AllocateRow() {
  const size_t rows = node_of_row_.size();
  // Once a sweep found nothing, every row is this operation's or pending until it ends.
  if (rows < capacity_ || full_epoch_ == epoch_) return AddRow();
  // CLOCK: the first row after the hand that is neither in use by this operation, pending, nor
  // referenced since the hand last passed (which clears the mark). Two sweeps find one if any
  // row is evictable at all.
  for (size_t step = 0; step < 2 * rows; ++step) {
    const size_t row = clock_hand_;
    clock_hand_ = clock_hand_ + 1 < rows ? clock_hand_ + 1 : 1;
    if (pending_[row] || epoch_of_row_[row] == epoch_) continue;
    if (referenced_[row]) {
      referenced_[row] = 0;
      continue;
    }
    return static_cast<int64_t>(row);
  }
  if (!warned_growth_) {
    spdlog::warn("node memory cache: one operation needs more than its {} rows; growing past it",
                 capacity_);
    warned_growth_ = true;
  }
  full_epoch_ = epoch_;
  return AddRow();
}

void NodeMemoryCache::EvictDirty(std::span<const int64_t> rows, std::span<const uint64_t> nodes) {
  if (rows.empty()) return;
  const Stopwatch watch;
  const size_t first = evicted_.size();
  evicted_.last_update_ts.resize(first + rows.size());
  evicted_.memory.resize((first + rows.size()) * dim_);
  model_.ReadRows(rows, std::span(evicted_.memory).subspan(first * dim_),
                  std::span(evicted_.last_update_ts).subspan(first));
  for (size_t i = 0; i < rows.size(); ++i) {
    evicted_index_[nodes[i]] = first + i;
    evicted_.nodes.push_back(nodes[i]);
  }
  page_out_seconds_ += watch.Seconds();
}

void NodeMemoryCache::AppendNotResident(std::span<const uint64_t> nodes,
                                        std::vector<uint64_t>* missing) const {
  for (const uint64_t node : nodes) {
    if (!row_of_.contains(node)) missing->push_back(node);
  }
}

void NodeMemoryCache::AddPrefetched(std::shared_ptr<const PrefetchedStates> prefetched) {
  if (store_backed_ && prefetched->generation == generation_) {
    prefetched_.push_back(std::move(prefetched));
  }
}

void NodeMemoryCache::DropPrefetchedThrough(uint64_t sequence) {
  std::erase_if(prefetched_, [sequence](const std::shared_ptr<const PrefetchedStates>& read) {
    return read->through_sequence <= sequence;
  });
}

Status NodeMemoryCache::ReadStored(std::span<const uint64_t> nodes, storage::NodeStates* states) {
  if (store_backed_ && prefetched_.empty()) {
    return store_.GetNodeStates(nodes, states);  // zeros where not stored
  }
  thread_local std::vector<uint64_t> unread;
  thread_local std::vector<size_t> unread_positions;
  thread_local storage::NodeStates read;
  unread.clear();
  unread_positions.clear();
  states->nodes.assign(nodes.begin(), nodes.end());
  states->last_update_ts.assign(nodes.size(), 0.0);
  states->memory.assign(nodes.size() * dim_, 0.0f);
  states->found.assign(nodes.size(), 0);
  if (!store_backed_) return Status::Ok();  // the store holds another model's memory
  auto copy = [&](const storage::NodeStates& from, size_t position, size_t i) {
    CopyState(from, position, states, i);
    states->found[i] = from.found[position];
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    bool taken = false;
    for (const auto& prefetched : prefetched_) {
      if (const auto it = prefetched->index.find(nodes[i]); it != prefetched->index.end()) {
        copy(prefetched->states, it->second, i);
        taken = true;
        ++prefetched_used_;
        break;
      }
    }
    if (!taken) {
      unread.push_back(nodes[i]);
      unread_positions.push_back(i);
    }
  }
  if (unread.empty()) return Status::Ok();
  read.Clear(dim_);
  if (Status status = store_.GetNodeStates(unread, &read); !status.ok()) return status;
  for (size_t j = 0; j < unread.size(); ++j) copy(read, j, unread_positions[j]);
  return Status::Ok();
}

Status NodeMemoryCache::LoadStates(std::span<const uint64_t> nodes, storage::NodeStates* states) {
  Status status = ReadStored(nodes, states);
  if (!status.ok()) return status;
  // Newer than the store: rows evicted dirty since the last checkpoint, then that checkpoint's
  // rows (it may still be being written).
  for (size_t i = 0; i < nodes.size(); ++i) {
    const storage::NodeStates* source = nullptr;
    size_t position = 0;
    if (const auto it = evicted_index_.find(nodes[i]); it != evicted_index_.end()) {
      source = &evicted_;
      position = it->second;
      evicted_index_.erase(it);  // resident again (and dirty); its old copy is dead
    } else if (last_checkpoint_) {
      if (const auto found = last_checkpoint_->index.find(nodes[i]);
          found != last_checkpoint_->index.end()) {
        source = &last_checkpoint_->states;
        position = found->second;
      }
    }
    if (source == nullptr) continue;
    CopyState(*source, position, states, i);
    states->found[i] = source == &evicted_ ? 2 : 1;  // 2: dirty (differs from every checkpoint)
  }
  return Status::Ok();
}

Status NodeMemoryCache::Rows(std::span<const uint64_t> nodes, std::span<int64_t> rows) {
  thread_local std::vector<uint64_t> missing, victim_nodes;
  thread_local std::vector<int64_t> missing_rows, victim_rows;
  thread_local storage::NodeStates loaded;
  missing.clear();
  missing_rows.clear();
  victim_nodes.clear();
  victim_rows.clear();
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto [it, inserted] = row_of_.try_emplace(nodes[i], 0);
    if (!inserted) {
      const auto row = static_cast<size_t>(it->second);
      referenced_[row] = 1;
      epoch_of_row_[row] = epoch_;
      rows[i] = it->second;
      ++hits_;
      continue;
    }
    const int64_t row = AllocateRow();
    const auto index = static_cast<size_t>(row);
    if (occupied_[index]) {
      if (dirty_[index]) {
        victim_rows.push_back(row);
        victim_nodes.push_back(node_of_row_[index]);
      }
      row_of_.erase(node_of_row_[index]);
      ++evictions_;
    }
    row_of_[nodes[i]] = row;  // looked up again: the erase may have invalidated `it`
    node_of_row_[index] = nodes[i];
    occupied_[index] = 1;
    referenced_[index] = 1;
    epoch_of_row_[index] = epoch_;
    rows[i] = row;
    missing.push_back(nodes[i]);
    missing_rows.push_back(row);
    ++misses_;
  }
  if (missing.empty()) return Status::Ok();
  // Dirty victims go to the side table before anything overwrites their rows, and before the
  // loads below, which must find them there when this very call asks for them again.
  if (has_memory_) EvictDirty(victim_rows, victim_nodes);
  model_.EnsureNodes(static_cast<int64_t>(node_of_row_.size()));
  if (!has_memory_) return Status::Ok();  // rows are never dirty without memory
  const Stopwatch watch;
  loaded.Clear(dim_);
  if (Status status = LoadStates(missing, &loaded); !status.ok()) {
    for (size_t i = 0; i < missing.size(); ++i) {  // not resident after all
      row_of_.erase(missing[i]);
      occupied_[static_cast<size_t>(missing_rows[i])] = 0;
    }
    return status;
  }
  for (size_t i = 0; i < missing.size(); ++i) {
    dirty_[static_cast<size_t>(missing_rows[i])] = loaded.found[i] == 2 ? 1 : 0;
  }
  model_.WriteRows(
      missing_rows,
      torch::from_blob(loaded.memory.data(),
                       {static_cast<int64_t>(missing.size()), static_cast<int64_t>(dim_)},
                       torch::kFloat32),
      torch::from_blob(loaded.last_update_ts.data(), {static_cast<int64_t>(missing.size())},
                       torch::kFloat64));
  page_in_seconds_ += watch.Seconds();
  return Status::Ok();
}

void NodeMemoryCache::SetPending(std::span<const int64_t> rows) {
  for (const int64_t row : pending_rows_) pending_[static_cast<size_t>(row)] = 0;
  pending_rows_.assign(rows.begin(), rows.end());
  for (const int64_t row : pending_rows_) {
    pending_[static_cast<size_t>(row)] = 1;
    if (has_memory_) dirty_[static_cast<size_t>(row)] = 1;
  }
}

bool NodeMemoryCache::CheckpointDue() const {
  return store_backed_ && evicted_.size() >= capacity_ / 4;
}

std::shared_ptr<const MemoryCheckpoint> NodeMemoryCache::TakeCheckpoint(bool previous_written) {
  // From here on the store changes under reads made before: they may miss this checkpoint's
  // rows once a later one is the last.
  ++generation_;
  prefetched_.clear();
  auto checkpoint = std::make_shared<MemoryCheckpoint>();
  storage::NodeStates& states = checkpoint->states;
  states.Clear(dim_);
  if (has_memory_) {
    std::vector<int64_t> rows;
    for (size_t row = 1; row < dirty_.size(); ++row) {
      if (occupied_[row] && dirty_[row]) rows.push_back(static_cast<int64_t>(row));
    }
    const bool carry_previous = !previous_written && last_checkpoint_;
    // Sized once: appending the evicted and carried states would otherwise reallocate (and
    // fault in) buffers of ~160 MB at 10M nodes on the memory thread.
    const size_t most = rows.size() + evicted_index_.size() +
                        (carry_previous ? last_checkpoint_->states.size() : 0);
    states.nodes.reserve(most);
    states.last_update_ts.reserve(most);
    states.memory.reserve(most * dim_);
    states.last_update_ts.resize(rows.size());
    states.memory.resize(rows.size() * dim_);
    model_.ReadRows(rows, states.memory, states.last_update_ts);
    for (const int64_t row : rows) {
      states.nodes.push_back(node_of_row_[static_cast<size_t>(row)]);
      if (!pending_[static_cast<size_t>(row)]) dirty_[static_cast<size_t>(row)] = 0;
    }
    for (const auto& [node, position] : evicted_index_) AppendState(evicted_, position, &states);
    checkpoint->index.reserve(most);
    for (size_t i = 0; i < states.size(); ++i) checkpoint->index.emplace(states.nodes[i], i);
    if (carry_previous) {
      const storage::NodeStates& previous = last_checkpoint_->states;
      for (size_t i = 0; i < previous.size(); ++i) {
        if (checkpoint->index.emplace(previous.nodes[i], states.size()).second) {
          AppendState(previous, i, &states);
        }
      }
    }
  }
  evicted_.Clear(dim_);
  evicted_index_.clear();
  const model::TemporalLinkModelImpl::PendingMessages pending = model_.SavePending();
  const torch::Tensor pending_rows = pending.rows.contiguous();
  for (int64_t i = 0; i < pending_rows.numel(); ++i) {
    checkpoint->pending_nodes.push_back(node_of_row_[pending_rows.data_ptr<int64_t>()[i]]);
  }
  const torch::Tensor raw = pending.raw.contiguous();
  const torch::Tensor ts = pending.ts.contiguous();
  checkpoint->pending_width = static_cast<size_t>(raw.size(1));
  checkpoint->pending_raw.assign(raw.data_ptr<float>(), raw.data_ptr<float>() + raw.numel());
  checkpoint->pending_ts.assign(ts.data_ptr<double>(), ts.data_ptr<double>() + ts.numel());
  last_checkpoint_ = checkpoint;
  return checkpoint;
}

Status NodeMemoryCache::RestorePending(const MemoryCheckpoint& checkpoint) {
  const size_t count = checkpoint.pending_nodes.size();
  std::vector<int64_t> rows(count);
  BeginOperation();
  if (Status status = Rows(checkpoint.pending_nodes, rows); !status.ok()) return status;
  auto raw = const_cast<float*>(checkpoint.pending_raw.data());
  auto ts = const_cast<double*>(checkpoint.pending_ts.data());
  model_.RestorePending(
      {torch::tensor(rows, torch::kInt64),
       torch::from_blob(
           raw, {static_cast<int64_t>(count), static_cast<int64_t>(checkpoint.pending_width)},
           torch::kFloat32)
           .clone(),
       torch::from_blob(ts, {static_cast<int64_t>(count)}, torch::kFloat64).clone()});
  SetPending(rows);
  return Status::Ok();
}

MemoryCacheStats NodeMemoryCache::stats() const {
  MemoryCacheStats stats;
  stats.hits = hits_;
  stats.misses = misses_;
  stats.evictions = evictions_;
  stats.prefetched = prefetched_used_;
  stats.resident_rows = row_of_.size();
  stats.capacity_rows = capacity_;
  stats.dirty_rows = static_cast<size_t>(std::count(dirty_.begin(), dirty_.end(), 1));
  stats.evicted_dirty_rows = evicted_index_.size();
  stats.page_in_seconds = page_in_seconds_;
  stats.page_out_seconds = page_out_seconds_;
  return stats;
}

}  // namespace tlp::server
