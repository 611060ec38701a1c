// StatusError: a Status carried through code that can only report failure by exception (the
// model's NeighborSampler callbacks run inside torch code), back to the Status boundary that
// called it (Engine::Score, the memory pipeline), which returns it with its own code: a storage
// IO_ERROR reaches the client as IO_ERROR, not as INTERNAL.
#pragma once

#include <stdexcept>
#include <utility>

#include "common/status.h"

namespace tlp::server {

class StatusError : public std::runtime_error {
 public:
  explicit StatusError(Status status)
      : std::runtime_error(status.ToString()), status_(std::move(status)) {}
  const Status& status() const { return status_; }

 private:
  Status status_;
};

}  // namespace tlp::server
