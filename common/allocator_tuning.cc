#include "common/allocator_tuning.h"

#include <malloc.h>

namespace tlp {

void KeepLargeAllocationsInHeap() {
#if defined(__GLIBC__) && defined(M_MMAP_THRESHOLD)
  // Blocks below 64 MB come from the heap; the heap top is returned to the kernel only when
  // more than kKeepBytes are free there. Setting either also turns off glibc's dynamic
  // adjustment of both.
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(kKeepBytes));
#endif
}

}  // namespace tlp
