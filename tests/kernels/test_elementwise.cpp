// Properties the gradient harness does not see: accuracy of the vectorized float math, the
// statistics and layout independence of dropout masks, the geometry of rotary embeddings, and
// aliasing in the residual helpers.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/rng.h"
#include "harness.h"
#include "kernels/cpu/dropout.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels::testing {
namespace {

TEST(KernelVecMath, FloatExpIsWithinTwoUlpsOverItsRange) {
  double worst = 0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f + 175.0f * float(i) / 2000000.0f;
    const double exact = std::exp(double(x));
    worst = std::max(worst, std::fabs(detail::exp_f32(x) - exact) / exact);
  }
  EXPECT_LT(worst, 1.2e-7);
  EXPECT_EQ(detail::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(detail::exp_f32(-100.0f), 0.0f);
  EXPECT_EQ(detail::exp_f32(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(detail::exp_f32(std::nanf(""))));
}

TEST(KernelVecMath, FloatTanhIsAccurateNearZeroAndSaturates) {
  double worst = 0;
  for (int i = -1000000; i <= 1000000; ++i) {
    const float x = 10.0f * float(i) / 1000000.0f;
    if (x == 0.0f) continue;
    const double exact = std::tanh(double(x));
    worst = std::max(worst, std::fabs(detail::tanh_f32(x) - exact) / std::fabs(exact));
  }
  EXPECT_LT(worst, 4e-7);
  EXPECT_EQ(detail::tanh_f32(0.0f), 0.0f);
  EXPECT_EQ(detail::tanh_f32(50.0f), 1.0f);
  EXPECT_EQ(detail::tanh_f32(-50.0f), -1.0f);
  EXPECT_EQ(detail::tanh_f32(1e-30f), 1e-30f);
}

TEST(KernelVecMath, FloatSqrtIsCorrectlyRounded) {
  // Bit patterns spread over every exponent, subnormals included.
  for (uint32_t bits = 1; bits < 0x7f800000u; bits += 997) {
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(detail::sqrt_f32(x), std::sqrt(x)) << x;
  }
  EXPECT_EQ(detail::sqrt_f32(0.0f), 0.0f);
  EXPECT_EQ(detail::sqrt_f32(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(detail::sqrt_f32(std::nanf(""))));
}

TEST(KernelDropout, KeepsTheRightFractionScaledUp) {
  constexpr size_t n = 200000;
  constexpr float p = 0.25f;
  const std::vector<float> x(n, 2.0f);
  std::vector<float> y(n);
  dropout_forward(y.data(), x.data(), n, p, 42, stream_id("dropout:a"), 0);
  size_t kept = 0;
  for (float v : y) {
    if (v != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(v, 2.0f / 0.75f);
    }
  }
  // Binomial: the standard deviation of the kept fraction is sqrt(p (1 - p) / n) ≈ 0.001.
  EXPECT_NEAR(double(kept) / n, 0.75, 0.005);
}

TEST(KernelDropout, MaskDependsOnlyOnTheGlobalIndex) {
  // A shard starting at element 1000 with offset 1000 drops exactly what the whole tensor drops.
  constexpr size_t n = 9000, start = 1000;
  const std::vector<float> x = cast<float>(random_normal(n, 8, "dropout:x"));
  std::vector<float> whole(n), shard(n - start);
  dropout_forward(whole.data(), x.data(), n, 0.5f, 9, 17, 0);
  dropout_forward(shard.data(), x.data() + start, n - start, 0.5f, 9, 17, start);
  for (size_t i = 0; i < shard.size(); ++i) ASSERT_EQ(shard[i], whole[start + i]) << i;
  // Another stream or seed gives another mask.
  std::vector<float> other(n);
  dropout_forward(other.data(), x.data(), n, 0.5f, 9, 18, 0);
  EXPECT_NE(other, whole);
}

TEST(KernelDropout, InPlaceBackwardUsesTheForwardMask) {
  constexpr size_t n = 5000;
  const std::vector<float> x = cast<float>(random_normal(n, 8, "dropout:inplace"));
  std::vector<float> y = x, g(n, 1.0f);
  dropout_forward(y.data(), y.data(), n, 0.3f, 5, 6, 7);
  dropout_backward(g.data(), g.data(), n, 0.3f, 5, 6, 7);
  for (size_t i = 0; i < n; ++i) ASSERT_FLOAT_EQ(y[i], x[i] * g[i]) << i;
}

TEST(KernelDropout, ProbabilityOneDropsEverythingAndBadProbabilityThrows) {
  std::vector<float> x(100, 1.0f), y(100, 5.0f);
  dropout_forward(y.data(), x.data(), 100, 1.0f, 1, 2, 3);
  for (float v : y) EXPECT_EQ(v, 0.0f);
  try {
    dropout_forward(y.data(), x.data(), 100, 1.5f, 1, 2, 3);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dropout probability 1.5 must be in [0, 1]"), std::string::npos) << e.what();
  }
}

// Rotated q at position t and k at position s: their dot product depends only on t - s.
TEST(KernelRope, ScoresDependOnRelativePositionOnly) {
  constexpr int T = 40, C = 16, H = 2, D = C / H;
  // Every position holds the same q, k, v, so any change in the scores comes from the rotation.
  const std::vector<double> token = random_normal(3 * C, 12, "rope:token");
  std::vector<double> qkv(size_t(T) * 3 * C), rotated(qkv.size());
  for (int t = 0; t < T; ++t) std::copy(token.begin(), token.end(), qkv.begin() + size_t(t) * 3 * C);
  rope_forward(rotated.data(), qkv.data(), 1, T, C, H, H, 10000.0f);
  auto score = [&](int t, int s, int h) {
    double d = 0;
    for (int i = 0; i < D; ++i)
      d += rotated[size_t(t) * 3 * C + h * D + i] * rotated[size_t(s) * 3 * C + C + h * D + i];
    return d;
  };
  for (int h = 0; h < H; ++h) {
    EXPECT_NEAR(score(10, 3, h), score(37, 30, h), 1e-12);
    EXPECT_NEAR(score(5, 5, h), score(0, 0, h), 1e-12);
  }
  EXPECT_GT(std::fabs(score(10, 3, 0) - score(10, 4, 0)), 1e-6) << "different distances must differ";
  // Position 0 is not rotated; v is never rotated.
  for (int c = 0; c < 3 * C; ++c) EXPECT_EQ(rotated[c], qkv[c]);
  for (int c = 2 * C; c < 3 * C; ++c) EXPECT_EQ(rotated[size_t(T - 1) * 3 * C + c], qkv[size_t(T - 1) * 3 * C + c]);
}

// Decoding rotates new tokens at their place in the sequence: a slice of positions [p0, p0 + n)
// rotated with position0 = p0 equals the same rows of the whole sequence rotated from 0, bitwise
// (the angles are computed alike), and the backward inverts it.
TEST(KernelRope, PositionOffsetEqualsTheRowsOfTheWholeSequence) {
  constexpr int B = 1, T = 45, C = 24, H = 3, p0 = 37, n = T - p0;
  const std::vector<float> x = cast<float>(random_normal(size_t(B) * T * 3 * C, 14, "rope:offset"));
  std::vector<float> whole(x.size());
  rope_forward(whole.data(), x.data(), B, T, C, H, H, 10000.0f);
  const std::vector<float> tail(x.begin() + size_t(p0) * 3 * C, x.end());
  std::vector<float> rotated(tail.size()), back(tail.size());
  rope_forward(rotated.data(), tail.data(), B, n, C, H, H, 10000.0f, p0);
  EXPECT_EQ(rotated, std::vector<float>(whole.begin() + size_t(p0) * 3 * C, whole.end()));
  rope_backward(back.data(), rotated.data(), B, n, C, H, H, 10000.0f, p0);
  EXPECT_LT(relative_error(cast<double>(back), cast<double>(tail)), 1e-6);
}

TEST(KernelRope, InPlaceEqualsOutOfPlaceAndBackwardInverts) {
  constexpr int B = 2, T = 33, C = 24, H = 3;
  const std::vector<float> x = cast<float>(random_normal(size_t(B) * T * 3 * C, 13, "rope:x"));
  std::vector<float> y(x.size()), z = x;
  rope_forward(y.data(), x.data(), B, T, C, H, H, 10000.0f);
  rope_forward(z.data(), z.data(), B, T, C, H, H, 10000.0f);
  EXPECT_EQ(y, z);
  rope_backward(z.data(), z.data(), B, T, C, H, H, 10000.0f);  // the inverse rotation
  EXPECT_LT(relative_error(cast<double>(z), cast<double>(x)), 1e-6);
}

TEST(KernelRope, OddHeadDimensionThrows) {
  std::vector<float> x(3 * 15), y(x.size());
  try {
    rope_forward(y.data(), x.data(), 1, 1, 15, 3, 3, 10000.0f);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("D = C/H = 5 must be even"), std::string::npos) << e.what();
  }
}

TEST(KernelResidual, AddAliasesAndScales) {
  constexpr size_t n = 50001;  // past several element blocks
  const std::vector<double> a0 = random_normal(n, 14, "res:a"), b = random_normal(n, 14, "res:b");
  std::vector<double> a = a0, out(n);
  add(out.data(), a.data(), b.data(), n);
  add(a.data(), a.data(), b.data(), n);  // out aliases a
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(out[i], a0[i] + b[i]) << i;
  EXPECT_EQ(a, out);
  std::vector<double> y = a0;
  add_inplace(y.data(), b.data(), n);
  EXPECT_EQ(y, out);
  scale_inplace(y.data(), 0.5, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], out[i] * 0.5) << i;
}

}  // namespace
}  // namespace tessera::kernels::testing
