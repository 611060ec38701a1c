// FreedMemoryBound: keeps the memory that the allocator holds freed, for reuse, under a bound.
//
// tlpd's jemalloc does not return freed pages to the kernel on its own (jemalloc_config.cc:
// returning them on jemalloc's time-based decay made every training step and scoring request
// fault its tensors' pages in again). Without a bound, what a burst once used would stay
// resident for good; this thread checks every `period` how much jemalloc holds freed and, above
// `bound_bytes`, returns all of it. So a steady loop keeps its pages and an idle daemon drops back
// to its live memory plus at most the bound.
//
// Where the process does not run on jemalloc (glibc, sanitizers) it does nothing and reports 0.
// Thread contract: all methods may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

namespace tlp::server {

class FreedMemoryBound {
 public:
  FreedMemoryBound(size_t bound_bytes, std::chrono::milliseconds period);
  ~FreedMemoryBound();  // stops the thread
  FreedMemoryBound(const FreedMemoryBound&) = delete;
  FreedMemoryBound& operator=(const FreedMemoryBound&) = delete;

  // Whether the process's allocator is jemalloc (the bound applies).
  static bool Active();
  // Bytes the allocator holds freed now (jemalloc's dirty and muzzy pages of every arena).
  static size_t HeldBytes();
  // Returns every held freed page to the kernel.
  static void ReturnAll();

  uint64_t returns() const { return returns_.load(std::memory_order_relaxed); }
  // Bytes held at the last check.
  size_t held_bytes() const { return held_bytes_.load(std::memory_order_relaxed); }

 private:
  void Run();

  const size_t bound_bytes_;
  const std::chrono::milliseconds period_;
  std::atomic<uint64_t> returns_{0};
  std::atomic<size_t> held_bytes_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
  std::thread thread_;
};

}  // namespace tlp::server
