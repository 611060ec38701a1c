// Transparent huge pages for large tables that are read and written at random.
//
// Why: at 10M nodes the node memory table holds ~2.2M rows (0.9 GiB at the default cache size)
// and every chunk of events gathers and scatters rows all over it. On 4 KiB pages nearly each
// such access also misses the TLB, and at that size the page walk's own reads miss the caches
// too; on 2 MiB pages the TLB covers gigabytes. Debian's kernel default is THP "madvise": a
// region gets huge pages only when asked, before its pages are first touched. Its effect on
// ingest was below the 2-core VMs' run-to-run noise (bench/results/*scale-100m*-model-106/).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace tlp {

// Asks the kernel to back the 2 MiB-aligned part of [data, data + bytes) with huge pages when
// it is first touched. Advice only: without THP, or where the kernel has no huge page to give,
// the memory stays on 4 KiB pages and works the same. A no-op below 4 MiB.
void AdviseHugePages(void* data, size_t bytes);

// Memory for a table of `bytes` (>= kHugePageTableBytes), aligned to 2 MiB and advised onto huge
// pages; throws std::bad_alloc like operator new. Freed with FreeHugePageTable.
void* AllocateHugePageTable(size_t bytes);
void FreeHugePageTable(void* data);
inline constexpr size_t kHugePageTableBytes = size_t{4} << 20;

// An allocator for containers that grow large and are read at random (hash maps and slot arrays
// over millions of nodes): allocations of 4 MiB or more come from AllocateHugePageTable, smaller
// ones from std::allocator. A hash map rehashes into a new allocation, so every table it grows
// into is advised before its pages are touched, which madvise on a container's memory after
// the fact could not promise.
template <typename T>
class HugePageAllocator {
 public:
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}  // NOLINT: rebinding is implicit

  T* allocate(size_t count) {
    if (count * sizeof(T) < kHugePageTableBytes) return std::allocator<T>().allocate(count);
    return static_cast<T*>(AllocateHugePageTable(count * sizeof(T)));
  }
  void deallocate(T* data, size_t count) {
    if (count * sizeof(T) < kHugePageTableBytes) {
      std::allocator<T>().deallocate(data, count);
    } else {
      FreeHugePageTable(data);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const {
    return true;
  }
};

template <typename T>
using HugePageVector = std::vector<T, HugePageAllocator<T>>;

}  // namespace tlp
