#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"

using namespace tessera;

// Known-answer vectors of Philox4x32-10 from its authors' reference implementation (Random123).
TEST(Rng, PhiloxKnownAnswers) {
  uint32_t w[4];
  Philox::generate(0, 0, 0, w);
  EXPECT_EQ(w[0], 0x6627e8d5u);
  EXPECT_EQ(w[1], 0xe169c58du);
  EXPECT_EQ(w[2], 0xbc57ac4cu);
  EXPECT_EQ(w[3], 0x9b00dbd8u);
  Philox::generate(~0ull, ~0ull, ~0ull, w);
  EXPECT_EQ(w[0], 0x408f276du);
  EXPECT_EQ(w[1], 0x41c83b0eu);
  EXPECT_EQ(w[2], 0xa20bc7c6u);
  EXPECT_EQ(w[3], 0x6d5451fdu);
  // counter (243f6a88, 85a308d3, 13198a2e, 03707344), key (a4093822, 299f31d0)
  Philox::generate(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull, w);
  EXPECT_EQ(w[0], 0xd16cfe09u);
  EXPECT_EQ(w[1], 0x94fdccebu);
  EXPECT_EQ(w[2], 0x5001e420u);
  EXPECT_EQ(w[3], 0x24126ea1u);
}

TEST(Rng, ValueDependsOnlyOnKeyStreamAndIndex) {
  // Computing elements in any order, or in pieces, gives the same numbers.
  std::vector<float> forward(1000), backward(1000);
  for (uint64_t i = 0; i < 1000; ++i) forward[i] = normal(42, 7, i);
  for (uint64_t i = 1000; i-- > 0;) backward[i] = normal(42, 7, i);
  EXPECT_EQ(forward, backward);
  EXPECT_NE(normal(42, 7, 3), normal(42, 8, 3));
  EXPECT_NE(normal(42, 7, 3), normal(43, 7, 3));
  EXPECT_NE(stream_id("init:wte"), stream_id("init:wpe"));
}

TEST(Rng, DistributionsHaveTheRightMoments) {
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    float u = uniform(1, 2, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    su += u;
    double z = normal(1, 3, static_cast<uint64_t>(i));
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.015);
}
