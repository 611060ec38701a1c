#include "common/huge_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace tlp {
namespace {

// The kernel's THP mode ("always", "madvise" or "never"), "" where it cannot be read.
std::string ThpMode() {
  std::ifstream file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(file, line);
  const size_t open = line.find('['), close = line.find(']');
  return open == std::string::npos || close == std::string::npos
             ? ""
             : line.substr(open + 1, close - open - 1);
}

// AnonHugePages (kB) of the mapping that holds `address`, from /proc/self/smaps; -1 if none.
int64_t AnonHugePagesKb(const void* address) {
  const auto at = reinterpret_cast<uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (line.rfind("AnonHugePages:", 0) == 0) {
      if (inside) return std::stoll(line.substr(std::strlen("AnonHugePages:")));
    } else if ((header >> std::hex >> begin >> dash >> end) && dash == '-') {
      inside = begin <= at && at < end;  // a mapping's header line: "begin-end perms ..."
    }
  }
  return -1;
}

// Under THP "madvise" (Debian's default) memory gets huge pages only when advised: the advised
// part of 16 MiB holds at least one once touched, the same memory unadvised holds none.
TEST(HugePages, AdvisedMemoryIsBackedByHugePages) {
  if (ThpMode() != "madvise") GTEST_SKIP() << "THP mode is '" << ThpMode() << "', not madvise";
  constexpr size_t kBytes = size_t{16} << 20;
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  for (const bool advised : {false, true}) {
    void* memory =
        ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(memory, MAP_FAILED);
    // 1 byte in: the advice must round the region inwards to whole huge pages.
    if (advised) AdviseHugePages(static_cast<char*>(memory) + 1, kBytes - 1);
    std::memset(memory, 1, kBytes);
    const uintptr_t aligned = (reinterpret_cast<uintptr_t>(memory) + kHugePage) & ~(kHugePage - 1);
    const int64_t huge_kb = AnonHugePagesKb(reinterpret_cast<const void*>(aligned));
    const int64_t first_page_kb = AnonHugePagesKb(memory);
    ::munmap(memory, kBytes);
    if (advised) {
      EXPECT_GE(huge_kb, 2048);
      EXPECT_EQ(first_page_kb, 0);  // the unaligned head was not advised
    } else {
      EXPECT_EQ(huge_kb, 0);
    }
  }
}

// HugePageAllocator: a table of 4 MiB or more starts on a 2 MiB boundary and, under "madvise",
// is backed by huge pages once touched; smaller ones come from std::allocator; a container on it
// keeps its contents through reallocations (growth across the threshold included).
TEST(HugePages, AllocatorPutsLargeTablesOnHugePages) {
  HugePageAllocator<uint64_t> allocator;
  constexpr size_t kCount = kHugePageTableBytes / sizeof(uint64_t);
  uint64_t* table = allocator.allocate(kCount);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(table) % (uintptr_t{2} << 20), 0u);
  for (size_t i = 0; i < kCount; ++i) table[i] = i;
  if (ThpMode() == "madvise") {
    EXPECT_GE(AnonHugePagesKb(table), 2048);
  }
  EXPECT_EQ(table[kCount - 1], kCount - 1);
  allocator.deallocate(table, kCount);

  HugePageVector<uint64_t> values;
  for (uint64_t i = 0; i < 2 * kCount; ++i) values.push_back(i * 3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(values.data()) % (uintptr_t{2} << 20), 0u);
  for (uint64_t i = 0; i < values.size(); i += 4097) ASSERT_EQ(values[i], i * 3);
  values.resize(16);
  values.shrink_to_fit();  // below the threshold: back on std::allocator
  EXPECT_EQ(values.back(), 45u);
}

}  // namespace
}  // namespace tlp
