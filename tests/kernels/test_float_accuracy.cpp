// The float elementwise math against double, in ulps of the exact result, element by element and
// over whole ranges: the vectorized approximations (exp, tanh, σ and 1 - σ) and the kernels built
// on them (GELU, SwiGLU, softmax, cross-entropy), where their hard cases live: the exp of very
// negative and near-zero arguments, saturated tails where a result is a small difference of
// numbers near 1, and large |x|. The harness's FloatMatchesDouble compares whole tensors in norm,
// where a tail that has lost all its digits hides behind the bulk; here no element can hide.
//
// An ulp of x here is the spacing of floats at |x|: 2^(e - 23) for |x| in [2^e, 2^(e+1)). A
// correctly rounded function is within 0.5 ulp; a few ulps is what one rounding per operation
// allows. Where a result depends on a rounded intermediate that the double path computes exactly
// (the argument z = 2u of GELU's exponential), the bound adds that intermediate's own rounding
// carried through the function: a relative error of 2^-24 in z is one of |z| 2^-24 in exp(z).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "harness.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/swiglu.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels::testing {
namespace {

// |got - exact| in ulps of `scale` (the exact value, or a larger magnitude the error is judged on).
double ulps(double got, double exact, double scale) {
  const double a = std::max(std::fabs(scale), static_cast<double>(FLT_MIN));
  int e = 0;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  return std::fabs(got - exact) / std::ldexp(1.0, e - 24);
}
double ulps(double got, double exact) { return ulps(got, exact, exact); }

// Floats ordered as integers: ... -2, -1 (-min denormal), 0, 1 (min denormal), ...
int64_t order(float x) {
  const int32_t i = std::bit_cast<int32_t>(x);
  return i >= 0 ? i : -static_cast<int64_t>(i & 0x7fffffff);
}
float from_order(int64_t o) {
  return o >= 0 ? std::bit_cast<float>(static_cast<uint32_t>(o))
                : std::bit_cast<float>(static_cast<uint32_t>(-o) | 0x80000000u);
}

// About n floats of [lo, hi], evenly spaced in float order (so every binade gets its share, and
// the many floats near zero are sampled as densely as their neighbourhood holds them), plus lo,
// hi and both sides of zero when inside.
std::vector<float> floats_between(float lo, float hi, int64_t n) {
  const int64_t a = order(lo), b = order(hi);
  const int64_t stride = std::max<int64_t>(1, (b - a) / n);
  std::vector<float> v;
  for (int64_t o = a; o <= b; o += stride) v.push_back(from_order(o));
  v.push_back(hi);
  if (lo < 0 && hi > 0) {
    for (float z : {0.0f, -0.0f, FLT_MIN, -FLT_MIN, 1e-30f, -1e-30f}) v.push_back(z);
  }
  return v;
}

// f applied in a `#pragma omp simd` loop: the vectorized code the kernels run, not a scalar copy.
template <class F>
std::vector<float> simd_map(const std::vector<float>& x, F f) {
  std::vector<float> y(x.size());
  const float* xp = x.data();
  float* yp = y.data();
  const size_t n = x.size();
#pragma omp simd
  for (size_t i = 0; i < n; ++i) yp[i] = f(xp[i]);
  return y;
}

struct Worst {
  double ulps = 0;
  float at = 0;
  void add(double u, float x) {
    if (!(u <= ulps)) {  // NaN counts as worst
      ulps = u;
      at = x;
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The approximations in vec_math.h

TEST(FloatAccuracy, ExpIsWithinOneUlp) {
  // Every normal result, with the very negative arguments softmax feeds it (x - max) and the
  // near-zero ones (the max itself and its neighbours).
  const std::vector<float> x = floats_between(-87.33f, 88.37f, 4'000'000);
  const std::vector<float> y = simd_map(x, [](float v) { return detail::exp_f32(v); });
  Worst w;
  for (size_t i = 0; i < x.size(); ++i) w.add(ulps(y[i], std::exp(double(x[i]))), x[i]);
  EXPECT_LT(w.ulps, 1.0) << "at x = " << w.at;
  RecordProperty("exp_max_ulps", std::to_string(w.ulps));
  EXPECT_EQ(detail::exp_f32(0.0f), 1.0f);
  EXPECT_EQ(detail::exp_f32(-0.0f), 1.0f);
  // Subnormal results flush to 0 (an absolute error below FLT_MIN); overflow gives inf.
  EXPECT_EQ(detail::exp_f32(-87.5f), 0.0f);
  EXPECT_EQ(detail::exp_f32(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(detail::exp_f32(100.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(detail::exp_f32(std::nanf(""))));
}

TEST(FloatAccuracy, TanhIsWithinTwoUlps) {
  const std::vector<float> x = floats_between(-20.0f, 20.0f, 4'000'000);
  const std::vector<float> y = simd_map(x, [](float v) { return detail::tanh_f32(v); });
  Worst w;
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i] != 0.0f) w.add(ulps(y[i], std::tanh(double(x[i]))), x[i]);
  }
  EXPECT_LT(w.ulps, 2.0) << "at x = " << w.at;
  RecordProperty("tanh_max_ulps", std::to_string(w.ulps));
  EXPECT_EQ(detail::tanh_f32(0.0f), 0.0f);
  EXPECT_TRUE(std::signbit(detail::tanh_f32(-0.0f)));
  EXPECT_EQ(detail::tanh_f32(1e-30f), 1e-30f);
  EXPECT_EQ(detail::tanh_f32(50.0f), 1.0f);
  EXPECT_EQ(detail::tanh_f32(-50.0f), -1.0f);
}

TEST(FloatAccuracy, SigmoidAndItsComplementAreEachWithinThreeUlps) {
  // 1 - σ(x) keeps its digits where σ(x) rounds to 1 (x > 17), and σ(x) where it is tiny.
  const std::vector<float> x = floats_between(-87.0f, 87.0f, 4'000'000);
  const std::vector<float> s = simd_map(x, [](float v) { return detail::vsigmoid_pair(v).s; });
  const std::vector<float> c = simd_map(x, [](float v) { return detail::vsigmoid_pair(v).c; });
  Worst ws, wc;
  for (size_t i = 0; i < x.size(); ++i) {
    const double xd = x[i];
    ws.add(ulps(s[i], 1.0 / (1.0 + std::exp(-xd))), x[i]);
    wc.add(ulps(c[i], 1.0 / (1.0 + std::exp(xd))), x[i]);
  }
  EXPECT_LT(ws.ulps, 3.0) << "σ at x = " << ws.at;
  EXPECT_LT(wc.ulps, 3.0) << "1 - σ at x = " << wc.at;
  RecordProperty("sigmoid_max_ulps", std::to_string(std::max(ws.ulps, wc.ulps)));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(detail::vsigmoid_pair(inf).s, 1.0f);
  EXPECT_EQ(detail::vsigmoid_pair(inf).c, 0.0f);
  EXPECT_EQ(detail::vsigmoid_pair(-inf).s, 0.0f);
  EXPECT_EQ(detail::vsigmoid_pair(-inf).c, 1.0f);
  EXPECT_EQ(detail::vsigmoid_pair(0.0f).s, 0.5f);
  EXPECT_TRUE(std::isnan(detail::vsigmoid_pair(std::nanf("")).s));
}

// ---------------------------------------------------------------------------------------------
// The kernels, element by element against their double instantiation on the same inputs

constexpr double kSqrt2OverPi = 0.7978845608028654;

TEST(FloatAccuracy, GeluForwardAndBackwardOverBothTails) {
  // Below x = -5, 1 + tanh(u) computed as a sum has no correct digit left; GELU's left tail is
  // where saturated pre-activations sit in an ill-conditioned state.
  const std::vector<float> x = floats_between(-12.0f, 12.0f, 2'000'000);
  const size_t n = x.size();
  const std::vector<double> xd = cast<double>(x);
  std::vector<float> y(n), dx(n), ones(n, 1.0f);
  std::vector<double> yd(n), dxd(n), onesd(n, 1.0);
  gelu_forward(y.data(), x.data(), n);
  gelu_forward(yd.data(), xd.data(), n);
  gelu_backward(dx.data(), x.data(), ones.data(), n);
  gelu_backward(dxd.data(), xd.data(), onesd.data(), n);
  Worst wf, wb;
  for (size_t i = 0; i < n; ++i) {
    const double v = xd[i];
    const double z = 2 * kSqrt2OverPi * (v + 0.044715 * v * v * v);  // the argument of σ
    const double s = 1 / (1 + std::exp(-z));
    if (s < FLT_MIN) {
      // exp(-|z|) is subnormal there and flushed to 0: an absolute error below |x| FLT_MIN.
      ASSERT_LE(std::fabs(y[i] - yd[i]), 2 * std::fabs(v) * FLT_MIN) << x[i];
      ASSERT_LE(std::fabs(dx[i] - dxd[i]), 2 * (1 + std::fabs(v * z)) * FLT_MIN) << x[i];
      continue;
    }
    // z is rounded five times on its way (x^3, two products, a sum, the float constants), about
    // 3 |z| 2^-24 relative at most, which exp(-|z|) turns into up to 3 |z| ulps of the result.
    const double slack = 3 * std::fabs(z);
    wf.add(ulps(y[i], yd[i]) / (4 + slack), x[i]);
    // The derivative σ + x z' σ (1 - σ) crosses zero near x = -0.75: judged on its terms' size.
    const double term = std::fabs(v * 2 * kSqrt2OverPi * (1 + 3 * 0.044715 * v * v) * s * (1 - s));
    wb.add(ulps(dx[i], dxd[i], std::max(std::fabs(dxd[i]), s + term)) / (6 + slack), x[i]);
  }
  // In units of the bound: 1 means 4 (forward) or 6 (backward) ulps plus 3 |z|.
  EXPECT_LT(wf.ulps, 1.0) << "forward at x = " << wf.at;
  EXPECT_LT(wb.ulps, 1.0) << "backward at x = " << wb.at;
  RecordProperty("gelu_forward_of_bound", std::to_string(wf.ulps));
  RecordProperty("gelu_backward_of_bound", std::to_string(wb.ulps));
}

TEST(FloatAccuracy, SwigluForwardAndBackwardOverBothTails) {
  // up = 1 and dout = 1 leave silu(g) = g σ(g), silu'(g) = σ (1 + g (1 - σ)) and dup = g σ(g).
  const std::vector<float> g = floats_between(-80.0f, 80.0f, 2'000'000);
  const size_t n = g.size();
  const std::vector<double> gd = cast<double>(g);
  std::vector<float> ones(n, 1.0f), y(n), dg(n), du(n);
  std::vector<double> onesd(n, 1.0), yd(n), dgd(n), dud(n);
  swiglu_forward(y.data(), g.data(), ones.data(), n);
  swiglu_forward(yd.data(), gd.data(), onesd.data(), n);
  swiglu_backward(dg.data(), du.data(), ones.data(), g.data(), ones.data(), n);
  swiglu_backward(dgd.data(), dud.data(), onesd.data(), gd.data(), onesd.data(), n);
  Worst wf, wg, wu;
  for (size_t i = 0; i < n; ++i) {
    if (std::fabs(yd[i]) < FLT_MIN) continue;
    wf.add(ulps(y[i], yd[i]), g[i]);
    wu.add(ulps(du[i], dud[i]), g[i]);
    // silu' crosses zero near g = -1.28: judged on the size of its terms σ and g σ (1 - σ).
    const double s = 1 / (1 + std::exp(-gd[i]));
    wg.add(ulps(dg[i], dgd[i], std::max(std::fabs(dgd[i]), s + std::fabs(gd[i] * s * (1 - s)))), g[i]);
  }
  EXPECT_LT(wf.ulps, 4.0) << "forward at g = " << wf.at;
  EXPECT_LT(wu.ulps, 4.0) << "dup at g = " << wu.at;
  EXPECT_LT(wg.ulps, 6.0) << "dgate at g = " << wg.at;
  RecordProperty("swiglu_max_ulps", std::to_string(std::max({wf.ulps, wu.ulps, wg.ulps})));
}

// Rows whose logits spread over [-150, 0] below their maximum, on a grid of 1/64 so that every
// difference x - max is exact in float: exp sees arguments from 0 (the maximum, and ties with it)
// through tiny negatives to far below the float range of its result (flushed to 0, which is what
// a probability below 1e-38 of the largest one is worth).
std::vector<float> spread_logits(int N, int C, uint64_t seed) {
  std::vector<double> u = random_normal(static_cast<size_t>(N) * C, seed, "float_accuracy:logits", 0.0, 1.0);
  std::vector<float> x(u.size());
  for (size_t i = 0; i < u.size(); ++i) {
    // Mostly near the top (the probabilities that matter), with a long tail down to -150.
    const double d = std::fabs(u[i]) < 1.5 ? std::fabs(u[i]) * 4 : std::fabs(u[i]) * 50;
    x[i] = static_cast<float>(std::round((37.0 - std::min(d, 150.0)) * 64) / 64);
  }
  for (int n = 0; n < N; ++n) x[static_cast<size_t>(n) * C + n % C] = 37.0f;  // the maximum, exactly
  return x;
}

TEST(FloatAccuracy, SoftmaxProbabilitiesAreWithinUlpsOfDouble) {
  constexpr int N = 64, C = 333;
  const std::vector<float> x = spread_logits(N, C, 3);
  const std::vector<double> xd = cast<double>(x);
  std::vector<float> p(x.size());
  std::vector<double> pd(x.size());
  softmax_forward(p.data(), x.data(), N, C);
  softmax_forward(pd.data(), xd.data(), N, C);
  Worst w;
  for (size_t i = 0; i < x.size(); ++i) {
    if (pd[i] < FLT_MIN) {
      ASSERT_LE(p[i], FLT_MIN) << i;
      continue;
    }
    w.add(ulps(p[i], pd[i]), x[i]);
  }
  // exp (1 ulp), the sum's rounding (summed in double, then rounded: half an ulp, shared by the row)
  // and the scaling by 1/sum. A float sum failed this on AVX2 (11 ulps): its error depended on the
  // vector width.
  EXPECT_LT(w.ulps, 5.0) << "at logit " << w.at;
  RecordProperty("softmax_max_ulps", std::to_string(w.ulps));
}

TEST(FloatAccuracy, CrossEntropyGradientIsWithinUlpsOfDouble) {
  constexpr int N = 64, V = 333;
  const std::vector<float> x = spread_logits(N, V, 4);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 37) % V;
  std::vector<float> g = x, losses(N);
  std::vector<double> gd = cast<double>(x), lossesd(N);
  cross_entropy_forward_backward(g.data(), losses.data(), targets.data(), N, V, -100, 1.0f);
  cross_entropy_forward_backward(gd.data(), lossesd.data(), targets.data(), N, V, -100, 1.0);
  Worst w, wl;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::fabs(gd[i]) < FLT_MIN) continue;
    // The target's entry p - 1 is judged on the size of its terms (1).
    const bool target = static_cast<int>(i % V) == targets[i / V];
    w.add(ulps(g[i], gd[i], target ? 1.0 : gd[i]), x[i]);
  }
  for (int n = 0; n < N; ++n) wl.add(ulps(losses[n], lossesd[n]), static_cast<float>(n));
  EXPECT_LT(w.ulps, 5.0) << "gradient at logit " << w.at;
  EXPECT_LT(wl.ulps, 4.0) << "loss of row " << wl.at;
  RecordProperty("cross_entropy_max_ulps", std::to_string(std::max(w.ulps, wl.ulps)));
}

}  // namespace
}  // namespace tessera::kernels::testing
