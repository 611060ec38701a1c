// DestinationSet: every node seen as a destination, in order of first appearance; TopK's
// default candidates. The first written() of them are in the store (the memory checkpoint
// writes those after it), so a restart restores the set without a scan of the log.
//
// Thread contract: every method may be called from any thread. Add takes the exclusive lock
// only for a batch that holds a new destination, so TopK readers wait at most for one batch's
// hash inserts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_set>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace tlp::server {

class DestinationSet {
 public:
  // Adds the nodes not in the set yet, in order.
  void Add(std::span<const uint64_t> nodes) ABSL_LOCKS_EXCLUDED(mutex_);
  // A copy of every destination, in order of first appearance.
  std::vector<uint64_t> All() const ABSL_LOCKS_EXCLUDED(mutex_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mutex_);

  // The destinations not in the store yet; *from = how many are (their first index).
  std::vector<uint64_t> Unwritten(size_t* from) const ABSL_LOCKS_EXCLUDED(mutex_);
  // Destinations [0, through) are in the store.
  void MarkWritten(size_t through) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  mutable absl::Mutex mutex_;
  std::unordered_set<uint64_t> members_ ABSL_GUARDED_BY(mutex_);
  std::vector<uint64_t> in_order_ ABSL_GUARDED_BY(mutex_);
  size_t written_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace tlp::server
