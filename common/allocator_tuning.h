// Allocator settings for processes that run the model.
//
// Why: every scoring pass allocates a few tensors of 1-30 MB and frees them again. glibc hands
// blocks that large out with mmap (or trims them off the heap top on free), so each pass paid
// for page faults and zeroing of fresh pages: a fifth of the CPU time in the model benchmark,
// and scoring ran 40-55 % faster without it (bench/model_bench.cc, 2-core machine). Raising the
// mmap and trim thresholds keeps those blocks in the heap for reuse. The cost is that up to
// `kKeepBytes` of freed memory stays resident instead of going back to the kernel.
#pragma once

#include <cstddef>

namespace tlp {

inline constexpr size_t kKeepBytes = size_t{256} << 20;

// Call once at start, before threads allocate. A no-op where the allocator is not glibc's
// (e.g. under AddressSanitizer, which replaces malloc).
void KeepLargeAllocationsInHeap();

}  // namespace tlp
