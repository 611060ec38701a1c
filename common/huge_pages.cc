#include "common/huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <new>

namespace tlp {

void AdviseHugePages(void* data, size_t bytes) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  if (bytes < 2 * kHugePage) return;
  const auto address = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (address + kHugePage - 1) & ~(kHugePage - 1);
  const uintptr_t end = (address + bytes) & ~(kHugePage - 1);
  // The result is ignored on purpose: EINVAL where the kernel lacks THP changes nothing.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)data;
  (void)bytes;
#endif
}

void* AllocateHugePageTable(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* data = std::aligned_alloc(kHugePage, rounded);
  if (data == nullptr) throw std::bad_alloc();
  AdviseHugePages(data, rounded);
  return data;
}

void FreeHugePageTable(void* data) { std::free(data); }

}  // namespace tlp
