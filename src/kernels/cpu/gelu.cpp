#include "kernels/cpu/gelu.h"

#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vec_math.h"

namespace tessera::kernels {

namespace {
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kCubic = 0.044715;
}  // namespace

// GELU with the tanh approximation, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3),
// written as x σ(2u): the same function (1 + tanh(u) = 2σ(2u)), without the cancellation of
// 1 + tanh(u) for negative x, which leaves no correct digit below x = -5 (PyTorch's float GELU
// has it). Its derivative σ(2u) + x σ(2u) (1 - σ(2u)) 2u' likewise takes 1 - σ from
// vsigmoid_pair, not from 1 - tanh^2. What remains is the rounding of the argument 2u itself:
// a relative error of 2^-24 there moves exp(-2|u|) by |2u| 2^-24.
template <class T>
void gelu_forward(T* out, const T* inp, size_t n) {
  using F = compute_t<T>;
  const F s2 = static_cast<F>(2 * kSqrt2OverPi), a = static_cast<F>(kCubic);
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F x = load(inp[i]);
      const detail::SigmoidPair<F> sg = detail::vsigmoid_pair<F>(s2 * (x + a * x * x * x));
      out[i] = store<T>(x * sg.s);
    }
  });
}

template <class T>
void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  using F = compute_t<T>;
  const F s2 = static_cast<F>(2 * kSqrt2OverPi), a = static_cast<F>(kCubic), a3 = static_cast<F>(3 * kCubic);
  detail::for_element_blocks(n, 1, [&](size_t lo, size_t hi) {
#pragma omp simd
    for (size_t i = lo; i < hi; ++i) {
      const F x = load(inp[i]);
      const detail::SigmoidPair<F> sg = detail::vsigmoid_pair<F>(s2 * (x + a * x * x * x));
      const F dz = s2 * (F(1) + a3 * x * x);  // d(2u)/dx
      dinp[i] = store<T>(load(dout[i]) * (sg.s + x * dz * (sg.s * sg.c)));
    }
  });
}

template void gelu_forward<float>(float*, const float*, size_t);
template void gelu_forward<double>(double*, const double*, size_t);
template void gelu_backward<float>(float*, const float*, const float*, size_t);
template void gelu_backward<double>(double*, const double*, const double*, size_t);
template void gelu_forward<bf16>(bf16*, const bf16*, size_t);
template void gelu_forward<f16>(f16*, const f16*, size_t);
template void gelu_backward<bf16>(bf16*, const bf16*, const bf16*, size_t);
template void gelu_backward<f16>(f16*, const f16*, const f16*, size_t);

}  // namespace tessera::kernels
