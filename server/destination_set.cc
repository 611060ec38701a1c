#include "server/destination_set.h"

#include <algorithm>
#include <mutex>

namespace tlp::server {

void DestinationSet::Add(std::span<const uint64_t> nodes) {
  {
    std::shared_lock lock(mutex_);
    if (std::all_of(nodes.begin(), nodes.end(),
                    [&](uint64_t node) { return members_.contains(node); })) {
      return;
    }
  }
  std::unique_lock lock(mutex_);
  for (const uint64_t node : nodes) {
    if (members_.insert(node).second) in_order_.push_back(node);
  }
}

std::vector<uint64_t> DestinationSet::All() const {
  std::shared_lock lock(mutex_);
  return in_order_;
}

size_t DestinationSet::size() const {
  std::shared_lock lock(mutex_);
  return in_order_.size();
}

std::vector<uint64_t> DestinationSet::Unwritten(size_t* from) const {
  std::shared_lock lock(mutex_);
  *from = written_;
  return {in_order_.begin() + static_cast<ptrdiff_t>(written_), in_order_.end()};
}

void DestinationSet::MarkWritten(size_t through) {
  std::unique_lock lock(mutex_);
  written_ = std::min(through, in_order_.size());
}

}  // namespace tlp::server
