#include "server/freed_memory_bound.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace tlp::server {
namespace {

// This binary links jemalloc and tlpd's jemalloc settings (tests/CMakeLists.txt).
constexpr size_t kMiB = size_t{1} << 20;

// Allocates and touches `count` blocks of 4 MiB, then frees them: freed memory jemalloc keeps.
void AllocateAndFree(size_t count) {
  std::vector<void*> blocks;
  for (size_t i = 0; i < count; ++i) {
    blocks.push_back(std::malloc(4 * kMiB));
    std::memset(blocks.back(), 1, 4 * kMiB);
  }
  for (void* block : blocks) std::free(block);
}

TEST(FreedMemoryBound, JemallocKeepsFreedMemoryUntilReturned) {
  ASSERT_TRUE(FreedMemoryBound::Active());
  FreedMemoryBound::ReturnAll();
  AllocateAndFree(16);
  // Decay is off (jemalloc_config.cc): the 64 MiB stay held for reuse...
  EXPECT_GE(FreedMemoryBound::HeldBytes(), 60 * kMiB);
  // ...until returned.
  FreedMemoryBound::ReturnAll();
  EXPECT_LT(FreedMemoryBound::HeldBytes(), 4 * kMiB);
}

TEST(FreedMemoryBound, ReturnsHeldMemoryAboveTheBound) {
  FreedMemoryBound::ReturnAll();
  FreedMemoryBound bound(16 * kMiB, std::chrono::milliseconds(10));
  AllocateAndFree(16);
  for (int i = 0; i < 200 && bound.returns() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GE(bound.returns(), 1u);
  EXPECT_LT(FreedMemoryBound::HeldBytes(), 16 * kMiB);
}

TEST(FreedMemoryBound, KeepsHeldMemoryUnderTheBound) {
  FreedMemoryBound::ReturnAll();
  FreedMemoryBound bound(256 * kMiB, std::chrono::milliseconds(10));
  AllocateAndFree(16);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(bound.returns(), 0u);
  EXPECT_GE(bound.held_bytes(), 60 * kMiB);
}

}  // namespace
}  // namespace tlp::server
