#include "server/freed_memory_bound.h"

#include <dlfcn.h>

namespace tlp::server {
namespace {

// jemalloc's control interface, looked up at run time so that this file links (and does
// nothing) in binaries without jemalloc, such as the sanitizer builds and the test binaries.
using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
Mallctl FindMallctl() {
  static const auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"));
  return mallctl;
}

// "4096" is MALLCTL_ARENAS_ALL: the sum over (or the action on) every arena.
size_t ArenaPages(Mallctl mallctl, const char* name) {
  size_t pages = 0, size = sizeof(pages);
  return mallctl(name, &pages, &size, nullptr, 0) == 0 ? pages : 0;
}

}  // namespace

bool FreedMemoryBound::Active() { return FindMallctl() != nullptr; }

size_t FreedMemoryBound::HeldBytes() {
  const Mallctl mallctl = FindMallctl();
  if (mallctl == nullptr) return 0;
  uint64_t epoch = 1;  // refreshes jemalloc's statistics
  size_t size = sizeof(epoch);
  mallctl("epoch", &epoch, &size, &epoch, sizeof(epoch));
  size_t page = 0;
  size = sizeof(page);
  if (mallctl("arenas.page", &page, &size, nullptr, 0) != 0) return 0;
  return page * (ArenaPages(mallctl, "stats.arenas.4096.pdirty") +
                 ArenaPages(mallctl, "stats.arenas.4096.pmuzzy"));
}

void FreedMemoryBound::ReturnAll() {
  const Mallctl mallctl = FindMallctl();
  if (mallctl != nullptr) mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
}

FreedMemoryBound::FreedMemoryBound(size_t bound_bytes, std::chrono::milliseconds period)
    : bound_bytes_(bound_bytes), period_(period) {
  if (Active()) thread_ = std::thread([this] { Run(); });
}

FreedMemoryBound::~FreedMemoryBound() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void FreedMemoryBound::Run() {
  std::unique_lock lock(mutex_);
  // Wakes at once when stopping_ turns true, else every period.
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    size_t held = HeldBytes();
    if (held > bound_bytes_) {
      ReturnAll();
      returns_.fetch_add(1, std::memory_order_relaxed);
      held = HeldBytes();
    }
    held_bytes_.store(held, std::memory_order_relaxed);
  }
}

}  // namespace tlp::server
