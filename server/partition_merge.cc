#include "server/partition_merge.h"

#include <utility>

namespace tlp::server {

PartitionMerge::PartitionMerge(int partitions) : queues_(static_cast<size_t>(partitions)) {}

void PartitionMerge::Push(int partition, SourceRecord record) {
  queues_[static_cast<size_t>(partition)].push_back(std::move(record));
  ++held_;
}

bool PartitionMerge::Pop(SourceRecord* record, int* partition) {
  auto take = [&](size_t p) {
    *record = std::move(queues_[p].front());
    *partition = static_cast<int>(p);
    queues_[p].pop_front();
    --held_;
    return true;
  };
  // A rejected record goes at once: it has no time and changes no state.
  for (size_t p = 0; p < queues_.size(); ++p) {
    if (!queues_[p].empty() && queues_[p].front().kind == SourceRecord::Kind::kRejected) {
      return take(p);
    }
  }
  if (held_ == 0 || WaitingFor() >= 0) return false;
  size_t best = 0;
  // Ties go to the lower partition: only a strictly smaller ts displaces it.
  for (size_t p = 1; p < queues_.size(); ++p) {
    if (queues_[p].front().ts < queues_[best].front().ts) best = p;
  }
  return take(best);
}

int PartitionMerge::WaitingFor() const {
  if (held_ == 0) return -1;
  for (size_t p = 0; p < queues_.size(); ++p) {
    if (queues_[p].empty()) return static_cast<int>(p);
  }
  return -1;
}

}  // namespace tlp::server
