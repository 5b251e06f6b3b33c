#pragma once
// Elementwise math that GCC can vectorize inside `#pragma omp simd` loops. glibc offers vector
// exp/tanh only under -ffast-math, which the project does not use, and one scalar expf call per
// element would make softmax, cross-entropy and attention bound by exp instead of by memory or
// GEMM. The float versions are branch-free polynomials; the double versions call the C library,
// because the double instantiation of every kernel is the precise reference of the tests and its
// speed does not matter.
//
// Accuracy of the float versions against double, in ulps of the exact result, on about 4 million
// arguments spread over each range in float order (tests/kernels/test_float_accuracy.cpp; the
// measured worst in brackets):
//   exp_f32                     < 1 ulp on [-87.33, 88.37] (0.91); 0 below -87.34, where exp is
//                               subnormal (an absolute error under FLT_MIN)
//   tanh_f32                    < 2 ulps everywhere (1.49)
//   vsigmoid_pair: σ and 1 - σ  < 3 ulps everywhere, each of its own value (2.50)
// glibc's expf and tanhf measure 0.50 and 2.19. What cost accuracy was not these functions but
// the formulas around them: 1 + tanh(u) and 1 - σ(x) computed as differences lose every digit in
// a saturated tail, so the kernels take them from vsigmoid_pair instead.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace tessera::kernels::detail {

// exp(x) for float. Below -87.33 it gives 0 (the results there would be subnormal); between
// 88.38 and 88.72 it saturates at exp(88.38) = 2.4e38, where the exponent of 2^k would overflow;
// above 88.72 it gives +inf. NaN stays NaN.
inline float exp_f32(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  // ln 2 split in two (Cody-Waite) so that k * kLn2Hi is exact for |k| < 2^9.
  constexpr float kLn2Hi = 0.693359375f;
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kLo = -87.33654475f;   // k = -126, the smallest normal power of two
  constexpr float kHi = 88.3762626647f;  // k = 127
  constexpr float kOverflow = 88.72283935f;
  // Adding 1.5 * 2^23 rounds to the nearest integer and leaves it in the low mantissa bits.
  constexpr float kRound = 12582912.0f;

  float xc = x < kLo ? kLo : x;
  xc = xc > kHi ? kHi : xc;
  const float shifted = xc * kLog2e + kRound;
  const float k = shifted - kRound;
  const uint32_t k_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRound);
  const float two_k = std::bit_cast<float>((k_bits + 127u) << 23);
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;  // |r| <= ln2 / 2
  // Taylor series to degree 7: the truncation error (ln2/2)^8 / 8! is below float rounding.
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  float result = p * two_k;
  result = x < kLo ? 0.0f : result;
  result = x > kOverflow ? std::numeric_limits<float>::infinity() : result;
  return result;
}

// tanh(x) for float: an odd polynomial below |x| = atanh(1/2) = 0.549, the exp identity above.
// Above, t >= 1/2 and e = exp(-2|x|) <= 1/3, so (1 - e)/(1 + e) carries e's error scaled by at
// most e/(1 - e) = 1/2 plus three roundings: under 1.5 ulps. Below, that identity would multiply
// e's error by e/(1 - e), without bound as x -> 0 (the previous switch point, 0.125, left 4 ulps),
// and the polynomial is within an ulp instead.
inline float tanh_f32(float x) {
  const float ax = std::fabs(x);
  const float e = exp_f32(-2.0f * ax);
  const float far = (1.0f - e) / (1.0f + e);
  const float y = ax * ax;
  // tanh(x) = x + x^3 P(x^2), P the Taylor series -1/3 + 2/15 y - 17/315 y^2 + ... to y^8; for
  // y < 0.302 the omitted terms move tanh by under 0.01 ulp, and x^3 P is at most a fifth of the
  // result, so P's rounding counts a fifth and the final sum is rounded once.
  float p = -443861162.0f / 1856156927625.0f;
  p = p * y + 6404582.0f / 10854718875.0f;
  p = p * y + -929569.0f / 638512875.0f;
  p = p * y + 21844.0f / 6081075.0f;
  p = p * y + -1382.0f / 155925.0f;
  p = p * y + 62.0f / 2835.0f;
  p = p * y + -17.0f / 315.0f;
  p = p * y + 2.0f / 15.0f;
  p = p * y + -1.0f / 3.0f;
  const float near = ax + ax * y * p;
  const float t = ax < 0.54930614f ? near : far;
  return std::copysign(t, x);
}

// sqrt(x) for float, x >= 0. The C library's sqrt keeps a branch that sets errno for negative
// arguments, and that branch alone stops a loop from vectorizing. Four Newton steps on 1/sqrt(x),
// in double, from the classic bit-trick estimate (error 3.5%) reach double precision, so the
// float result is the correctly rounded one except within 1e-15 of a rounding tie.
inline float sqrt_f32(float x) {
  const double xd = x;
  double r = std::bit_cast<double>(0x5fe6eb50c7b537a9ull - (std::bit_cast<uint64_t>(xd) >> 1));
  // Written out: a loop here would stop the vectorizer. 0 gives (0.5 * 0 * r) * r = 0 in every
  // step, so sqrt(0) = 0 * r = 0; +inf alternates r between -inf and +inf and ends at +inf.
  r = r * (1.5 - 0.5 * xd * r * r);
  r = r * (1.5 - 0.5 * xd * r * r);
  r = r * (1.5 - 0.5 * xd * r * r);
  r = r * (1.5 - 0.5 * xd * r * r);
  return static_cast<float>(xd * r);
}

template <class T>
inline T vsqrt(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return sqrt_f32(x);
  } else {
    return std::sqrt(x);
  }
}

template <class T>
inline T vexp(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return exp_f32(x);
  } else {
    return std::exp(x);
  }
}

template <class T>
inline T vtanh(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return tanh_f32(x);
  } else {
    return std::tanh(x);
  }
}

// σ(x) = 1 / (1 + exp(-x)) and its complement 1 - σ(x) = σ(-x), each within a few ulps of its
// own value over the whole range. With e = exp(-|x|) <= 1 and r = 1 / (1 + e), they are r and
// e r in an order set by the sign of x: neither is formed by a subtraction, so the small one keeps
// its digits where the other saturates at 1 (1 - σ(x) computed as a difference has none left
// there, which is what GELU's 1 + tanh(u) = 2σ(2u) and SiLU's derivative need).
template <class T>
struct SigmoidPair {
  T s;  // σ(x)
  T c;  // 1 - σ(x)
};

// x = +inf gives (1, 0), -inf (0, 1), NaN (NaN, NaN).
template <class T>
inline SigmoidPair<T> vsigmoid_pair(T x) {
  const T e = vexp<T>(-std::fabs(x));
  const T r = T(1) / (T(1) + e);
  const T er = e * r;
  const bool positive = x >= T(0);
  return {positive ? r : er, positive ? er : r};
}

// σ(x) = 1 / (1 + exp(-x)); saturates cleanly to 0 and 1.
template <class T>
inline T vsigmoid(T x) {
  return vsigmoid_pair<T>(x).s;
}

}  // namespace tessera::kernels::detail
