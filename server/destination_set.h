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
#include <shared_mutex>
#include <span>
#include <unordered_set>
#include <vector>

namespace tlp::server {

class DestinationSet {
 public:
  // Adds the nodes not in the set yet, in order.
  void Add(std::span<const uint64_t> nodes);
  // A copy of every destination, in order of first appearance.
  std::vector<uint64_t> All() const;
  size_t size() const;

  // The destinations not in the store yet; *from = how many are (their first index).
  std::vector<uint64_t> Unwritten(size_t* from) const;
  // Destinations [0, through) are in the store.
  void MarkWritten(size_t through);

 private:
  // A std::shared_mutex rather than absl::Mutex: ThreadSanitizer sees through pthread locks,
  // not through Debian's uninstrumented abseil.
  mutable std::shared_mutex mutex_;
  // Guarded by mutex_:
  std::unordered_set<uint64_t> members_;
  std::vector<uint64_t> in_order_;
  size_t written_ = 0;
};

}  // namespace tlp::server
