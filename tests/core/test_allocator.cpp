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
