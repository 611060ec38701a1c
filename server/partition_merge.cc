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
  // Order key (ts, watermark after event, partition): a watermark promises nothing older than
  // its ts, so an event at exactly that ts in another partition must still go first; the lower
  // partition wins the remaining ties because only a strictly smaller key displaces it.
  auto key = [&](size_t p) {
    const SourceRecord& head = queues_[p].front();
    return std::pair(head.ts, head.kind == SourceRecord::Kind::kWatermark);
  };
  size_t best = 0;
  for (size_t p = 1; p < queues_.size(); ++p) {
    if (key(p) < key(best)) best = p;
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
