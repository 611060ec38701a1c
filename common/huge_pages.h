// Transparent huge pages for large tables that are read and written at random.
//
// Why: at 10M nodes the node memory table holds ~2.2M rows (0.9 GiB at the default cache size)
// and every chunk of events gathers and scatters rows all over it. On 4 KiB pages nearly each
// such access also misses the TLB, and at that size the page walk's own reads miss the caches
// too; on 2 MiB pages the TLB covers gigabytes. Debian's kernel default is THP "madvise": a
// region gets huge pages only when asked, before its pages are first touched. Its effect on
// ingest was below what the 2-core VMs' run-to-run noise let us resolve (README, "The model-106
// machine again").
#pragma once

#include <cstddef>

namespace tlp {

// Asks the kernel to back the 2 MiB-aligned part of [data, data + bytes) with huge pages when
// it is first touched. Advice only: without THP, or where the kernel has no huge page to give,
// the memory stays on 4 KiB pages and works the same. A no-op below 4 MiB.
void AdviseHugePages(void* data, size_t bytes);

}  // namespace tlp
