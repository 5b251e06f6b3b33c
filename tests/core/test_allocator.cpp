#include <gtest/gtest.h>

#include <cstdint>

#include "core/allocator.h"
#include "core/check.h"

using namespace tessera;

TEST(Allocator, CountsLiveAndPeakPerTag) {
  MemoryAccountant acc;
  void* a = acc.allocate(1000, MemoryTag::Params);
  void* b = acc.allocate(300, MemoryTag::Activations);
  void* c = acc.allocate(500, MemoryTag::Activations);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  MemoryStats s = acc.stats();
  EXPECT_EQ(s.live_of(MemoryTag::Params), 1000u);
  EXPECT_EQ(s.live_of(MemoryTag::Activations), 800u);
  EXPECT_EQ(s.live_total, 1800u);
  acc.deallocate(b, 300, MemoryTag::Activations);
  acc.deallocate(c, 500, MemoryTag::Activations);
  s = acc.stats();
  EXPECT_EQ(s.live_of(MemoryTag::Activations), 0u);
  EXPECT_EQ(s.peak_of(MemoryTag::Activations), 800u);
  EXPECT_EQ(s.peak_total, 1800u);
  acc.reset_peaks();
  EXPECT_EQ(acc.stats().peak_of(MemoryTag::Activations), 0u);
  // A freed block of the same size is reused, not fetched anew.
  void* d = acc.allocate(300, MemoryTag::Workspace);
  EXPECT_TRUE(d == b || d == c);
  acc.deallocate(d, 300, MemoryTag::Workspace);
  acc.deallocate(a, 1000, MemoryTag::Params);
  EXPECT_EQ(acc.stats().live_total, 0u);
}

TEST(Allocator, BudgetErrorNamesTagRequestAndBudget) {
  MemoryAccountant acc(4096);
  void* a = acc.allocate(4000, MemoryTag::Params);
  try {
    acc.allocate(200, MemoryTag::Activations);
    FAIL() << "expected the budget to be enforced";
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
    EXPECT_NE(m.find("200 bytes for 'activations'"), std::string::npos) << m;
    EXPECT_NE(m.find("budget of 4096 bytes"), std::string::npos) << m;
  }
  // The failed request left the counts unchanged.
  EXPECT_EQ(acc.stats().live_total, 4000u);
  acc.deallocate(a, 4000, MemoryTag::Params);
}

TEST(Allocator, LargeBlocksServeSlightlySmallerRequests) {
  MemoryAccountant acc;
  const size_t big = size_t{1} << 20;
  void* a = acc.allocate(big, MemoryTag::Activations);
  acc.deallocate(a, big, MemoryTag::Activations);
  // A request the block exceeds by less than an eighth takes it; the accounting counts what was asked.
  const size_t smaller = big - big / 16;
  void* b = acc.allocate(smaller, MemoryTag::Activations);
  EXPECT_EQ(b, a);
  EXPECT_EQ(acc.stats().live_total, smaller);
  acc.deallocate(b, smaller, MemoryTag::Activations);
  // Back in the cache under its own size: a request of that size finds it again.
  void* c = acc.allocate(big, MemoryTag::Activations);
  EXPECT_EQ(c, a);
  acc.deallocate(c, big, MemoryTag::Activations);
  // Much smaller requests do not take it: it would waste most of the block.
  void* d = acc.allocate(big / 2, MemoryTag::Activations);
  EXPECT_NE(d, a);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d) % 4096, 0u);
  acc.deallocate(d, big / 2, MemoryTag::Activations);
  EXPECT_EQ(acc.stats().live_total, 0u);
}
