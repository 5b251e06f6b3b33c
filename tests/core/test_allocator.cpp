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

TEST(Allocator, TrimmingFreesOnlyWhatAWholeStepLeftInTheCache) {
  MemoryAccountant acc;
  const size_t big = size_t{1} << 20;
  // A block from when an encoded activation was larger, and one every step takes.
  void* stale = acc.allocate(2 * big, MemoryTag::Activations);
  void* reused = acc.allocate(big, MemoryTag::Activations);
  acc.deallocate(stale, 2 * big, MemoryTag::Activations);
  acc.deallocate(reused, big, MemoryTag::Activations);
  EXPECT_EQ(acc.cached_bytes(), 3 * big);
  // The first trim ends the step in which both were freed: neither has sat a whole step unused.
  EXPECT_EQ(acc.trim_cache(), 0u);
  // A step takes only the smaller size, and gives it back.
  void* again = acc.allocate(big, MemoryTag::Activations);
  EXPECT_EQ(again, reused);
  EXPECT_EQ(acc.cached_bytes(), 2 * big);
  acc.deallocate(again, big, MemoryTag::Activations);
  // The larger block sat through that step: it goes back to the system, the other stays.
  EXPECT_EQ(acc.trim_cache(), 2 * big);
  EXPECT_EQ(acc.cached_bytes(), big);
  EXPECT_EQ(acc.allocate(big, MemoryTag::Activations), reused);
  acc.deallocate(reused, big, MemoryTag::Activations);
  // A block taken with slack returns under its own size, and counts as taken.
  EXPECT_EQ(acc.trim_cache(), 0u);
  void* slack = acc.allocate(big - big / 16, MemoryTag::Activations);
  EXPECT_EQ(slack, reused);
  acc.deallocate(slack, big - big / 16, MemoryTag::Activations);
  EXPECT_EQ(acc.cached_bytes(), big);
  EXPECT_EQ(acc.trim_cache(), 0u);
  EXPECT_EQ(acc.trim_cache(), big);
  EXPECT_EQ(acc.cached_bytes(), 0u);
  EXPECT_EQ(acc.stats().live_total, 0u);
}
