#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/rng.h"

using namespace tessera;

TEST(DType, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between two bf16 values (1 and 1 + 2^-7): ties go to the even one, 1.
  EXPECT_EQ(to_bf16(1.0f + 0x1p-8f).bits, to_bf16(1.0f).bits);
  // 1 + 3·2^-8 is the tie between 1 + 2^-7 (odd mantissa) and 1 + 2^-6 (even): rounds up.
  EXPECT_EQ(to_float(to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  // Just above the tie rounds up.
  EXPECT_EQ(to_float(to_bf16(1.0f + 0x1p-8f + 0x1p-20f)), 1.0f + 0x1p-7f);
  EXPECT_EQ(to_float(to_bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::infinity()))));
  // The largest float rounds to infinity in bf16, as IEEE rounding demands.
  EXPECT_TRUE(std::isinf(to_float(to_bf16(std::numeric_limits<float>::max()))));
}

TEST(DType, Bf16ErrorIsBoundedByHalfAnUlp) {
  for (uint64_t i = 0; i < 100000; ++i) {
    float x = normal(7, 1, i) * std::exp2(static_cast<float>(static_cast<int>(i % 60) - 30));
    float y = to_float(to_bf16(x));
    EXPECT_LE(std::fabs(y - x), std::fabs(x) * 0x1p-8f) << x;
  }
}

TEST(DType, F16MatchesTheSoftwareReferenceEverywhere) {
  // Every half value converts to float and back unchanged.
  for (uint32_t h = 0; h < 65536; ++h) {
    float f = to_float(f16{static_cast<uint16_t>(h)});
    float ref = f16_value_reference(static_cast<uint16_t>(h));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    ASSERT_EQ(f, ref) << h;
    ASSERT_EQ(to_f16(f).bits, h) << h;
  }
  // Random floats across the whole range, including subnormal halves and overflow.
  for (uint64_t i = 0; i < 200000; ++i) {
    float x = normal(3, 2, i) * std::exp2(static_cast<float>(static_cast<int>(i % 50) - 30));
    ASSERT_EQ(to_f16(x).bits, f16_bits_reference(x)) << x;
  }
  EXPECT_EQ(to_float(to_f16(65519.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(to_float(to_f16(65520.0f))));
  EXPECT_EQ(to_float(to_f16(0x1p-24f)), 0x1p-24f);  // smallest subnormal
  EXPECT_EQ(to_float(to_f16(0x1p-25f)), 0.0f);      // the tie below it goes to even (zero)
}

TEST(DType, BulkConversionsMatchScalar) {
  std::vector<float> x(1000), back(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = normal(1, 1, i) * 100.0f;
  std::vector<bf16> b(x.size());
  convert_f32_to_bf16(b.data(), x.data(), x.size());
  convert_bf16_to_f32(back.data(), b.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], to_float(to_bf16(x[i])));
  std::vector<f16> h(x.size());
  convert_f32_to_f16(h.data(), x.data(), x.size());
  convert_f16_to_f32(back.data(), h.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], to_float(to_f16(x[i])));
}

TEST(DType, BulkBf16NarrowingGivesToBf16sBitsOnEveryClassOfInput) {
  // Every sign, exponent and upper mantissa (so zeros, denormals, infinities and NaNs of every
  // payload class), each with low halves below, at and above the rounding tie, odd and even; an
  // odd length so that a vector's tail is converted too.
  const uint16_t lows[] = {0x0000, 0x0001, 0x3fff, 0x7fff, 0x8000, 0x8001, 0xc000, 0xffff};
  std::vector<float> x;
  for (uint32_t high = 0; high < 0x10000; ++high) {
    for (uint16_t low : lows) x.push_back(bits_float(high << 16 | low));
  }
  x.resize(x.size() - 3);
  std::vector<bf16> bulk(x.size());
  convert_f32_to_bf16(bulk.data(), x.data(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(bulk[i].bits, to_bf16(x[i]).bits) << std::hex << "input bits " << float_bits(x[i]);
  }
}
