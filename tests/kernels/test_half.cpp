// The 16-bit instantiations (bf16, f16: stored in 16 bits, computed in f32) of the kernels that
// no op dispatches to; the ops tests run the others in both types. Each runs against its float
// instantiation on the same values, the inputs rounded to the 16-bit type, within the ops tests'
// relative norm errors: 1e-2 for bf16 and 2e-3 for f16, a few times one rounding of each output.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "harness.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/softmax.h"

namespace tessera::kernels::testing {
namespace {

template <class Half>
constexpr double kTolerance = std::is_same_v<Half, bf16> ? 1e-2 : 2e-3;

// normal(mean, stddev) values rounded to Half, in float: the float kernel's inputs.
template <class Half>
std::vector<float> rounded_normal(size_t n, const std::string& stream, double mean = 0.0, double stddev = 1.0) {
  const std::vector<double> v = random_normal(n, 17, "half:" + stream, mean, stddev);
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = load(store<Half>(static_cast<float>(v[i])));
  return out;
}

// The same values in Half (exact: they were rounded to it).
template <class Half>
std::vector<Half> in(const std::vector<float>& v) {
  std::vector<Half> out(v.size());
  narrow<Half>(out.data(), v.data(), v.size());
  return out;
}

template <class Half>
std::vector<float> values(const std::vector<Half>& v) {
  std::vector<float> out(v.size());
  widen<Half>(out.data(), v.data(), v.size());
  return out;
}

template <class Half>
double error(const std::vector<Half>& got, const std::vector<float>& want) {
  return relative_error(cast<double>(values(got)), cast<double>(want));
}

template <class Half>
class HalfKernel : public ::testing::Test {};
using HalfTypes = ::testing::Types<bf16, f16>;
TYPED_TEST_SUITE(HalfKernel, HalfTypes);

TYPED_TEST(HalfKernel, SoftmaxMatchesFloat) {
  using Half = TypeParam;
  constexpr int N = 5, C = 333;
  const std::vector<float> x = rounded_normal<Half>(N * C, "softmax:x", 0.0, 3.0);
  const std::vector<float> dy = rounded_normal<Half>(N * C, "softmax:dy");
  std::vector<float> y(x.size()), dx(x.size());
  std::vector<Half> y16(x.size()), dx16(x.size());
  softmax_forward(y.data(), x.data(), N, C);
  softmax_forward(y16.data(), in<Half>(x).data(), N, C);
  EXPECT_LE(error(y16, y), kTolerance<Half>);
  // The backward of both from the 16-bit forward's output.
  softmax_backward(dx.data(), dy.data(), values(y16).data(), N, C);
  softmax_backward(dx16.data(), in<Half>(dy).data(), y16.data(), N, C);
  EXPECT_LE(error(dx16, dx), kTolerance<Half>);
}

TYPED_TEST(HalfKernel, ResidualHelpersMatchFloat) {
  using Half = TypeParam;
  constexpr size_t n = 1001;
  const std::vector<float> a = rounded_normal<Half>(n, "residual:a"), b = rounded_normal<Half>(n, "residual:b");
  std::vector<float> y = a;
  std::vector<Half> y16 = in<Half>(a);
  add(y.data(), y.data(), b.data(), n);  // out aliasing an input
  add(y16.data(), y16.data(), in<Half>(b).data(), n);
  EXPECT_LE(error(y16, y), kTolerance<Half>);
  y = values(y16);
  add_inplace(y.data(), b.data(), n);
  add_inplace(y16.data(), in<Half>(b).data(), n);
  EXPECT_LE(error(y16, y), kTolerance<Half>);
  y = values(y16);
  scale_inplace(y.data(), 0.37f, n);
  scale_inplace(y16.data(), 0.37f, n);
  EXPECT_LE(error(y16, y), kTolerance<Half>);
}

TYPED_TEST(HalfKernel, NaiveAttentionMatchesFloat) {
  using Half = TypeParam;
  constexpr int B = 2, Tn = 9, H = 4, Hkv = 2, D = 8, C = H * D, W3 = (H + 2 * Hkv) * D;
  const std::vector<float> qkv = rounded_normal<Half>(B * Tn * W3, "attention:qkv");
  const std::vector<float> dout = rounded_normal<Half>(B * Tn * C, "attention:dout");
  std::vector<float> out(B * Tn * C), att(B * H * Tn * Tn), dqkv(qkv.size());
  std::vector<Half> out16(out.size()), att16(att.size()), dqkv16(qkv.size());
  attention_forward_naive(out.data(), att.data(), qkv.data(), B, Tn, C, H, Hkv);
  attention_forward_naive(out16.data(), att16.data(), in<Half>(qkv).data(), B, Tn, C, H, Hkv);
  EXPECT_LE(error(out16, out), kTolerance<Half>);
  EXPECT_LE(error(att16, att), kTolerance<Half>);
  // The backward of both from the 16-bit forward's probabilities.
  attention_backward_naive(dqkv.data(), dout.data(), qkv.data(), values(att16).data(), B, Tn, C, H, Hkv);
  attention_backward_naive(dqkv16.data(), in<Half>(dout).data(), in<Half>(qkv).data(), att16.data(), B, Tn, C, H, Hkv);
  EXPECT_LE(error(dqkv16, dqkv), kTolerance<Half>);
}

// The sum of 16-bit messages (parallel/gradient_reducer.cpp): exactly the float sum of the widened
// values, in order, above the size where it runs on threads and below it, from a -0 start too.
TYPED_TEST(HalfKernel, AddWidenedIsTheSumOfTheWidenedValues) {
  using Half = TypeParam;
  for (const size_t n : {size_t{37}, size_t{1} << 17}) {
    const std::vector<float> x = rounded_normal<Half>(n, "add_widened:x" + std::to_string(n));
    const std::vector<Half> message = in<Half>(x);
    std::vector<float> sum(n, -0.0f), want(n, -0.0f);
    for (int times = 0; times < 2; ++times) {
      add_widened<Half>(sum.data(), message.data(), n);
      for (size_t i = 0; i < n; ++i) want[i] += x[i];
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(sum[i]), std::bit_cast<uint32_t>(want[i])) << i;
  }
}

}  // namespace
}  // namespace tessera::kernels::testing
